package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/bench"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/natstest"
)

// TestBench: `foldhost bench` against a server that holds another bucket
// measures every variant on both workload shapes (a rate for each, the
// plugin fold's ratio to the raw-only fold), the restart, the steady state
// of the raw-only and the C router's folds (write-to-fold and
// read-your-writes latencies under load), the effects variant's ratio to
// the fold without effects and its drain latency, with the stream holding
// every effect the fold published), and leaves the server with only the
// bucket and stream it found: its own are deleted, the other untouched.
func TestBench(t *testing.T) {
	if raceEnabled {
		// The bench's rounds and timed phases ran 70 s race-built and
		// measure nothing there; its goroutines drive the host's code,
		// which the host's own tests race. The run without the detector
		// asserts it (plain_too in scripts/test).
		t.Skip("measures, and is slowed tenfold by the race detector; the run without it asserts this test")
	}
	srv, nc := natstest.Start(t)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: "users"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Put(context.Background(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	plugins := t.TempDir() // the C and AS builds: the Go build's compile is slow under -race
	for _, lang := range []string{"c", "as"} {
		b, err := os.ReadFile(builtPlugin(t, "example-router", "router-"+lang))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(plugins, "router-"+lang+".wasm"), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	code, out, errOut := runCLI(t, nil, "bench", "--nats", srv.ClientURL(), "--keys", "2000", "--rounds", "2", "--delta", "100", "--plugins", plugins, "--json",
		"--probes", "20") // each waits for a round trip through the fold or the publisher: 200 took minutes race-built on a busy machine
	if code != 0 {
		t.Fatalf("bench: exit %d: %s", code, errOut)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --json printed %s: %v", out, err)
	}
	names, random := map[string]bench.Variant{}, map[string]bench.Variant{}
	for _, v := range res.Variants {
		if v.Shape == "random" {
			random[v.Name] = v
		} else {
			names[v.Name] = v
		}
		if v.Rate <= 0 || len(v.Seconds) != 2 || v.VsWatchAll <= 0 || (v.Shape != "random" && v.Shape != "ordered") {
			t.Errorf("variant %+v", v)
		}
	}
	for _, want := range []string{bench.WatchAll, bench.Hand, bench.RawFold, "fold, router c", bench.EffectsV, bench.QueriesV, bench.Native} {
		if _, ok := names[want]; !ok {
			t.Errorf("no variant %q of the ordered shape in %s", want, out)
		}
	}
	for _, want := range []string{bench.WatchAll, bench.RawFold, "fold, router c", "fold, router as", bench.Native} {
		if _, ok := random[want]; !ok {
			t.Errorf("no variant %q of the random shape in %s", want, out)
		}
	}
	if v, r := names["fold, router c"], random["fold, router c"]; v.VsRawFold <= 0 || r.VsRawFold <= 0 {
		t.Errorf("the C router's fold has no ratio to the raw fold: %+v %+v", v, r)
	}
	if len(res.Steady) != 2 {
		t.Errorf("steady state: %+v, want the raw-only and the C router's folds", res.Steady)
	}
	for _, st := range res.Steady {
		if st.Probes != 20 || st.FoldP50Seconds <= 0 || st.FoldP99Seconds < st.FoldP50Seconds || st.ReadP50Seconds <= 0 ||
			st.ReadP99Seconds < st.ReadP50Seconds || st.ReadTimeouts != 0 || st.LoadRate <= 0 || st.LoadRate > 6000 {
			t.Errorf("steady state %+v", st)
		} else {
			t.Logf("steady state, %s, under %.0f writes/s: to the fold p50 %.3fs p99 %.3fs; read your writes p50 %.3fs p99 %.3fs",
				st.Variant, st.LoadRate, st.FoldP50Seconds, st.FoldP99Seconds, st.ReadP50Seconds, st.ReadP99Seconds)
		}
	}
	if r := res.Restart; r == nil || r.ResumeSeconds <= 0 || r.ReplaySeconds <= 0 || r.Delta != 100 || r.BootstrapSeconds <= 0 || r.ArtifactBytes <= 0 {
		t.Errorf("restart %+v", res.Restart)
	}
	if sw := res.Swap; sw == nil || sw.Swaps == 0 || sw.SwapP99Seconds <= 0 || sw.BaselineP50Seconds <= 0 || sw.LoadRate <= 0 || sw.LoadRate > 6000 {
		t.Errorf("hot swap %+v", res.Swap)
	} else {
		t.Logf("hot swap under %.0f writes/s: p99 %.3fs with a swap, %.3fs without", sw.LoadRate, sw.SwapP99Seconds, sw.BaselineP99Seconds)
	}
	if v := names[bench.EffectsV]; v.VsNoEffects <= 0 || math.IsInf(v.VsNoEffects, 0) || v.VsRawFold <= 0 {
		t.Errorf("the effects variant has no ratio to the fold without effects: %+v", v)
	}
	// The state-sync of 2000 keys, one in twenty malformed: 1900 effects.
	if ef := res.Effects; ef == nil || ef.TimeRatio <= 0 || math.IsInf(ef.TimeRatio, 0) || math.IsNaN(ef.TimeRatio) ||
		ef.HeadRatio <= 0 || math.IsInf(ef.HeadRatio, 0) || math.IsNaN(ef.HeadRatio) ||
		len(ef.Seconds) != 2 || len(ef.HeadSeconds) != 2 || ef.Published != 1900 || ef.StreamMessages != ef.Published ||
		ef.EffectsPerUpdate != 0.95 || ef.Probes == 0 || ef.DrainP50Seconds <= 0 || ef.DrainP99Seconds < ef.DrainP50Seconds ||
		ef.LoadRate <= 0 || ef.LoadRate > 6000 {
		t.Errorf("effects %+v", res.Effects)
	} else {
		t.Logf("effects: to the head %.2f×, drained %.2f× the fold's time without; under %.0f writes/s: write-to-effect p50 %.3fs p99 %.3fs", ef.HeadRatio, ef.TimeRatio, ef.LoadRate, ef.DrainP50Seconds, ef.DrainP99Seconds)
	}
	// The queries variant: its clients were answered while the fold ran
	// (a client that never got an answer, or a failed query, fails it).
	if q := res.Queries; q == nil || len(q.Seconds) != 2 || q.Clients != bench.QueryClients || q.Answered <= 0 || q.PerSecond <= 0 ||
		q.ThroughputRatio <= 0 || math.IsInf(q.ThroughputRatio, 0) || q.P50Seconds <= 0 || q.P99Seconds < q.P50Seconds {
		t.Errorf("queries %+v", res.Queries)
	} else {
		t.Logf("queries: %d clients, throughput %.2f× the fold without; %d answered, p99 %.4fs", q.Clients, q.ThroughputRatio, q.Answered, q.P99Seconds)
	}
	// The read path's latencies, measured on the C router's fold at rest:
	// each read answered (the query's answer held its 100 hosts).
	if rd := res.Reads; rd == nil || rd.Module != "router-c.wasm" || rd.Points == 0 || rd.PointsFound == 0 || rd.Ranges == 0 || rd.Queries == 0 || rd.QueryKeys != 100 ||
		rd.PointP50Seconds <= 0 || rd.PointP99Seconds < rd.PointP50Seconds || rd.RangeP50Seconds <= 0 || rd.RangeP99Seconds < rd.RangeP50Seconds ||
		rd.QueryP50Seconds <= 0 || rd.QueryP99Seconds < rd.QueryP50Seconds {
		t.Errorf("reads %+v", res.Reads)
	} else {
		t.Logf("reads: point p99 %.4fs, a page of %d p99 %.4fs, a query of %d hosts p99 %.4fs", rd.PointP99Seconds, rd.RangeKeys, rd.RangeP99Seconds, rd.QueryKeys, rd.QueryP99Seconds)
	}
	var streams []string
	for name := range js.StreamNames(context.Background()).Name() {
		streams = append(streams, name)
	}
	if strings.Join(streams, ",") != "KV_users" {
		t.Errorf("streams after the bench: %v, want only KV_users", streams)
	}
	var buckets []string
	for name := range js.KeyValueStoreNames(context.Background()).Name() {
		buckets = append(buckets, name)
	}
	if strings.Join(buckets, ",") != "users" {
		t.Errorf("buckets after the bench: %v, want only users", buckets)
	}
	if e, err := kv.Get(context.Background(), "k"); err != nil || string(e.Value()) != "v" {
		t.Errorf("the other bucket's key: %v %v", e, err)
	}
	// The table form of the same figures (what `bench` prints without
	// --json).
	var table strings.Builder
	if err := printBench(&table, &res, nil, false); err != nil {
		t.Errorf("bench table: %v", err)
	}
	for _, want := range []string{"VS RAW FOLD", "read your writes (HTTP, ?min_revision)", "resume / replay", "bootstrap / replay",
		"× the fold without effects", "write-to-effect-in-stream latency", "× the fold without queries", "a query answering 100 hosts p50"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("bench table: no %q in\n%s", want, table.String())
		}
	}
}

// TestBenchPrintsItsFiguresWhateverFails: a bench whose check did not
// hold, or whose later phase failed, still prints every figure it measured
// (it used to exit 1 with none of them: "40 swaps asked for, 41
// accepted"), and still fails.
func TestBenchPrintsItsFiguresWhateverFails(t *testing.T) {
	res := &bench.Result{Keys: 10, Rounds: 1, Server: "embedded",
		Variants: []bench.Variant{{Name: bench.WatchAll, Seconds: []float64{1}, Rate: 10, VsWatchAll: 1}},
		Swap:     &bench.Swap{Swaps: 40, Accepted: 41, Modules: "a <-> b"},
		Checks:   []string{"hot swap: 40 swaps asked for, 41 accepted"}}
	for _, asJSON := range []bool{false, true} {
		var out strings.Builder
		err := printBench(&out, res, nil, asJSON)
		if err == nil || !strings.Contains(err.Error(), "41 accepted") {
			t.Errorf("json %v: err %v, want the failed check", asJSON, err)
		}
		if !strings.Contains(out.String(), bench.WatchAll) || !strings.Contains(out.String(), "41") {
			t.Errorf("json %v: the figures are not printed:\n%s", asJSON, out.String())
		}
	}
	var out strings.Builder
	phase := errors.New("bench: restart: boom")
	if err := printBench(&out, res, phase, false); !errors.Is(err, phase) || !strings.Contains(out.String(), bench.WatchAll) {
		t.Errorf("a failed phase: %v, printed:\n%s", err, out.String())
	}
}

// TestBenchFleet: `foldhost bench --fleet` measures the fleet instead of
// the variants (none of them run): its folding runs against one node
// (rates and ratios above 0), its reads on a fold's owner against
// forwarded ones, a node joining from artifacts against one hydrating,
// and --fleet-kills takeovers at the --fleet-ttl given, each timed; the goals are judged on what was measured; printed as JSON
// and as a table with a row for each run and each goal. A --fleet-ttl the
// fleet would refuse, or a --fleet-* flag without --fleet, is a usage
// error before anything runs.
func TestBenchFleet(t *testing.T) {
	for _, args := range [][]string{{"--fleet", "--fleet-ttl", "1s/500ms"}, {"--fleet-kills", "2"}} {
		code, _, errOut := runCLI(t, nil, append([]string{"bench"}, args...)...)
		if code != command.ExitUsage || !strings.Contains(errOut, args[len(args)-2]) {
			t.Fatalf("bench %v: exit %d, %s", args, code, errOut)
		}
	}
	srv, _ := natstest.Start(t)
	const kills, seed = 2, "7"
	t.Logf("workload seed %s", seed)
	code, out, errOut := runCLI(t, nil, "bench", "--fleet", "--fleet-kills", strconv.Itoa(kills), "--fleet-ttl", "1s/100ms",
		"--nats", srv.ClientURL(), "--keys", "1000", "--rounds", "1", "--seed", seed,
		"--plugins", filepath.Dir(builtPlugin(t, "example-router", "router-c")), "--json")
	if code != 0 {
		t.Fatalf("bench --fleet: exit %d: %s", code, errOut)
	}
	var res bench.Result
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("bench --fleet --json printed %s: %v", out, err)
	}
	fr := res.Fleet
	if fr == nil || len(res.Variants) != 0 || res.Restart != nil || res.Steady != nil || len(fr.Throughput) != 3 || fr.Reads == nil ||
		fr.Nodes != 3 || fr.Module != "router-c.wasm" || len(res.Checks) != 0 {
		t.Fatalf("bench --fleet: %s", out)
	}
	for i, name := range []string{bench.FleetOneNode, bench.FleetStandbys0, bench.FleetStandbys1} {
		if tp := fr.Throughput[i]; tp.Name != name || tp.Rate <= 0 || tp.VsOneNode <= 0 || len(tp.Seconds) != 1 || math.IsInf(tp.VsOneNode, 0) {
			t.Errorf("folding run %d: %+v, want %s", i, tp, name)
		}
	}
	if rd := fr.Reads; rd.Reads != bench.DefaultFleetReads || rd.Found == 0 || rd.LocalP99Seconds <= 0 || rd.ForwardedP99Seconds <= 0 ||
		rd.P50Ratio <= 0 || rd.P99Ratio <= 0 || math.IsInf(rd.P99Ratio, 0) {
		t.Errorf("reads %+v", rd)
	}
	if len(fr.Takeovers) != 1 {
		t.Fatalf("takeovers %+v, want one --fleet-ttl's", fr.Takeovers)
	}
	if to := fr.Takeovers[0]; to.Kills != kills || len(to.Seconds) != kills || to.NodeTTLSeconds != 1 || to.HeartbeatSeconds != 0.1 ||
		to.P50Seconds <= 0 || to.P99Seconds < to.P50Seconds {
		t.Errorf("takeover %+v", to)
	}
	if wu := fr.WarmUp; wu == nil || wu.Share < 1 || wu.ArtifactFolds != wu.Share || wu.FromArtifactsSeconds <= 0 || wu.HydrationSeconds <= 0 {
		t.Errorf("warm-up %+v", fr.WarmUp)
	}
	// Not at the fleet's default node_ttl: no takeover goal.
	if len(fr.Goals) != 3 || fr.Goals[0].Bound != bench.GoalVsOneNode || fr.Goals[1].Bound != bench.GoalForwardedP99 || fr.Goals[2].Bound != bench.GoalWarmUp {
		t.Errorf("goals %+v", fr.Goals)
	}
	t.Logf("fleet/one node %.2f× (goal ≥ %.2f×); read p99 forwarded/local %.2f× (goal ≤ %.2f×); takeover at node_ttl 1s p50 %.3fs p99 %.3fs",
		fr.Throughput[1].VsOneNode, bench.GoalVsOneNode, fr.Reads.P99Ratio, bench.GoalForwardedP99, fr.Takeovers[0].P50Seconds, fr.Takeovers[0].P99Seconds)
	var table strings.Builder
	if err := printBench(&table, &res, nil, false); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"VS ONE NODE", bench.FleetOneNode, bench.FleetStandbys0, bench.FleetStandbys1, "forwarded / local p50",
		"fleet takeover at node_ttl 1s, heartbeat 100ms (the owner killed, 2 times", "fleet goals", bench.FleetStandbys0 + ": rate / one node's", "read p99: forwarded / local",
		"fleet warm-up (a node joining", "a joining node's share: from artifacts / hydrating"} {
		if !strings.Contains(table.String(), want) {
			t.Errorf("bench --fleet's table: no %q in\n%s", want, table.String())
		}
	}
	if strings.Contains(table.String(), "VS WATCHALL") {
		t.Errorf("bench --fleet's table prints the variants' header:\n%s", table.String())
	}
}
