package bench

import (
	"context"
	"io"
	"math"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// TestFleetBench: the fleet's bench at a tiny size, on a server of the
// test's: the folding runs each fold every fold's copies to the head, one
// owner a fold as placed (one node's rate its own ratio, the fleet with a
// standby folding twice the copies), the reads on the owner and forwarded
// to it are answered alike by the owner (else the run fails), and each
// takeover, timed from the owner's connection cut, takes about node_ttl:
// not less than half of it (a hand-over, a leave, would take
// milliseconds), and never the bounded wait's whole; a node joining takes
// its share from the folds' artifacts (installing those of its share
// only), another with no artifact store by folding the bucket (else the
// run fails). The goals are judged on the
// figures; the table has a row for each. The server is left with no
// bucket of the bench's or its fleets' (export leases included).
// Mutations caught: the victim stopped (leaving, handing the fold over)
// before the wait (takeovers of milliseconds); the standbys' option not
// passed (the standbys 0 run folds 12 copies: it never settles at 6); the
// host's warm-up off (the warm joiner folds the bucket); the artifact
// store given to the bare joiner too; every fresh fold warmed up, not the
// joiner's share (6 artifacts installed for a share of 1 or 2).
func TestFleetBench(t *testing.T) {
	srv, nc := natstest.Start(t)
	// node_ttl 1 s: a takeover takes from node_ttl less a heartbeat on,
	// far above the lower bound below even when a starved victim's last
	// beat came late; a leave takes milliseconds.
	const ttl, hb, kills, seed = time.Second, 100 * time.Millisecond, 3, 1
	t.Logf("workload seed %d", seed)
	res, err := Run(context.Background(), Config{Dir: t.TempDir(), Keys: 1000, Rounds: 1, Delta: 1, Probes: 1, Seed: seed,
		Shapes: []workload.Shape{workload.Ordered}, NATSURL: srv.ClientURL(), PluginDir: DefaultPlugins,
		Fleet:    &FleetConfig{Kills: kills, TTLs: []FleetTTL{{NodeTTL: ttl, Heartbeat: hb}}, Reads: 50},
		Progress: progress.New(io.Discard, "", time.Hour), Warn: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Checks) > 0 {
		t.Errorf("failed checks: %v", res.Checks)
	}
	fr := res.Fleet
	if fr == nil || len(res.Variants) != 0 || fr.Module != "router-c.wasm" || fr.Nodes != 3 || fr.Folds != FleetFolds || fr.Updates < FleetFolds*1000 {
		t.Fatalf("the fleet's figures: %+v (variants %d)", fr, len(res.Variants))
	}
	finite := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) && !math.IsNaN(x) }
	want := []struct {
		name                    string
		nodes, standbys, copies int
	}{{FleetOneNode, 1, 0, 6}, {FleetStandbys0, 3, 0, 6}, {FleetStandbys1, 3, 1, 12}}
	if len(fr.Throughput) != len(want) {
		t.Fatalf("folding runs %+v", fr.Throughput)
	}
	for i, w := range want {
		tp := fr.Throughput[i]
		owned := 0
		for n, k := range tp.Owned {
			if !strings.HasPrefix(n, "n") || k <= 0 {
				t.Errorf("%s: owned %v", w.name, tp.Owned)
			}
			owned += k
		}
		if tp.Name != w.name || tp.Nodes != w.nodes || tp.Standbys != w.standbys || tp.Copies != w.copies || owned != FleetFolds ||
			len(tp.Seconds) != 1 || len(tp.CopiesSeconds) != 1 || tp.CopiesSeconds[0] < tp.Seconds[0] || !finite(tp.Rate) || !finite(tp.VsOneNode) {
			t.Errorf("folding run %d: %+v, want %+v", i, tp, w)
		}
	}
	if v := fr.Throughput[0].VsOneNode; v != 1 {
		t.Errorf("one node against itself: %v", v)
	}
	rd := fr.Reads
	if rd == nil || rd.Reads != 50 || rd.Found == 0 || rd.LocalP50Seconds <= 0 || rd.LocalP99Seconds < rd.LocalP50Seconds ||
		rd.ForwardedP50Seconds <= 0 || rd.ForwardedP99Seconds < rd.ForwardedP50Seconds || !finite(rd.P50Ratio) || !finite(rd.P99Ratio) {
		t.Errorf("reads %+v", rd)
	}
	if len(fr.Takeovers) != 1 {
		t.Fatalf("takeovers %+v", fr.Takeovers)
	}
	to := fr.Takeovers[0]
	if to.Kills != kills || len(to.Seconds) != kills || to.NodeTTLSeconds != ttl.Seconds() || to.HeartbeatSeconds != hb.Seconds() ||
		to.P99Seconds < to.P50Seconds || to.MaxSeconds < to.P99Seconds || !finite(to.P50VsNodeTTL) {
		t.Errorf("takeover %+v", to)
	}
	for _, s := range to.Seconds {
		if s < ttl.Seconds()/2 || s > ttl.Seconds()+30 {
			t.Errorf("a takeover took %.3fs at node_ttl %v: %+v", s, ttl, to)
		}
	}
	t.Logf("fleet/one node %.2f× (standbys 0), %.2f× (standbys 1); reads forwarded/local p50 %.2f× p99 %.2f×; takeover p50 %.3fs p99 %.3fs at node_ttl %v",
		fr.Throughput[1].VsOneNode, fr.Throughput[2].VsOneNode, rd.P50Ratio, rd.P99Ratio, to.P50Seconds, to.P99Seconds, ttl)
	wu := fr.WarmUp
	if wu == nil || wu.Share < 1 || wu.Share > FleetFolds || wu.ArtifactFolds != wu.Share || wu.FromArtifactsSeconds <= 0 ||
		wu.HydrationSeconds <= 0 || wu.Ratio != wu.FromArtifactsSeconds/wu.HydrationSeconds {
		t.Errorf("warm-up %+v", wu)
	} else {
		t.Logf("warm-up: a share of %d folds from artifacts in %.3fs, hydrating in %.3fs: %.2f×", wu.Share, wu.FromArtifactsSeconds, wu.HydrationSeconds, wu.Ratio)
	}
	// No takeover at the fleet's default node_ttl: three goals, each on
	// its figure.
	if len(fr.Goals) != 3 || fr.Goals[0].Value != fr.Throughput[1].VsOneNode || fr.Goals[0].Bound != GoalVsOneNode ||
		fr.Goals[0].Met != (fr.Throughput[1].VsOneNode >= GoalVsOneNode) ||
		fr.Goals[1].Value != rd.P99Ratio || fr.Goals[1].Bound != GoalForwardedP99 || fr.Goals[1].Met != (rd.P99Ratio <= GoalForwardedP99) ||
		wu == nil || fr.Goals[2].Value != wu.Ratio || fr.Goals[2].Bound != GoalWarmUp || fr.Goals[2].Met != (wu.Ratio <= GoalWarmUp) {
		t.Errorf("goals %+v", fr.Goals)
	}

	var table strings.Builder
	if err := res.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"VS ONE NODE", FleetOneNode, FleetStandbys0, FleetStandbys1, "forwarded / local p50",
		"fleet takeover at node_ttl 1s, heartbeat 100ms (the owner killed, 3 times", "fleet goals", "read p99: forwarded / local",
		"fleet warm-up (a node joining 2 nodes", "a joining node's share: from artifacts / hydrating"} {
		if !strings.Contains(table.String(), s) {
			t.Errorf("the table has no %q:\n%s", s, table.String())
		}
	}
	if strings.Contains(table.String(), "VS WATCHALL") {
		t.Errorf("the fleet's table prints the variants' header:\n%s", table.String())
	}

	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for name := range js.KeyValueStoreNames(context.Background()).Name() {
		left = append(left, name)
	}
	if len(left) > 0 {
		t.Errorf("buckets left on the server: %v", left)
	}
}

// TestFleetGoals: each goal is judged on its figure, on the right side
// of its bound (the bound itself meets it); the takeover's only at the
// fleet's default node_ttl and heartbeat; the table says which were met.
func TestFleetGoals(t *testing.T) {
	def := Takeover{NodeTTLSeconds: fleet.DefaultNodeTTL.Seconds(), HeartbeatSeconds: fleet.DefaultHeartbeat.Seconds(), Kills: 20, P99Seconds: 5}
	fr := &Fleet{
		Throughput: []FleetThroughput{{Name: FleetOneNode, VsOneNode: 1, CopiesSeconds: []float64{1}}, {Name: FleetStandbys0, VsOneNode: 0.89, CopiesSeconds: []float64{1}},
			{Name: FleetStandbys1, VsOneNode: 0.5, CopiesSeconds: []float64{2}}},
		Reads:     &FleetReads{P99Ratio: 2},
		Takeovers: []Takeover{def, {NodeTTLSeconds: 1, HeartbeatSeconds: 0.1, Kills: 20, P99Seconds: 9}},
	}
	fr.judge()
	type g struct {
		value float64
		met   bool
	}
	var got []g
	for _, x := range fr.Goals {
		got = append(got, g{x.Value, x.Met})
	}
	if want := []g{{0.89, false}, {5, true}, {2, true}}; !slices.Equal(got, want) {
		t.Fatalf("goals %+v, want %v", fr.Goals, want)
	}
	fr.Throughput[1].VsOneNode, fr.Takeovers[0].P99Seconds, fr.Reads.P99Ratio = 0.9, 5.01, 2.01
	fr.judge()
	got = got[:0]
	for _, x := range fr.Goals {
		got = append(got, g{x.Value, x.Met})
	}
	if want := []g{{0.9, true}, {5.01, false}, {2.01, false}}; !slices.Equal(got, want) {
		t.Fatalf("goals %+v, want %v", fr.Goals, want)
	}
	var table strings.Builder
	if err := fr.writeTable(&table); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		`(?m)^` + FleetStandbys0 + `: rate / one node's +0\.90× +≥ 0\.90× +yes$`,
		`(?m)^takeover p99 at node_ttl 3s, heartbeat 1s \(20 kills\) +5\.01s +≤ 5s +no$`,
		`(?m)^read p99: forwarded / local +2\.01× +≤ 2\.00× +no$`,
	} {
		if !regexp.MustCompile(row).MatchString(table.String()) {
			t.Errorf("the table has no row %q:\n%s", row, table.String())
		}
	}
}

// TestNewFleetConfig: --fleet-ttl's pairs parse, and what the fleet
// would refuse (node_ttl not above twice the heartbeat) is refused.
func TestNewFleetConfig(t *testing.T) {
	c, err := NewFleetConfig(20, DefaultFleetTTLs)
	if err != nil || c.Kills != 20 || len(c.TTLs) != 2 || c.TTLs[0] != (FleetTTL{3 * time.Second, time.Second}) ||
		c.TTLs[1] != (FleetTTL{time.Second, 100 * time.Millisecond}) {
		t.Fatalf("%q: %+v, %v", DefaultFleetTTLs, c, err)
	}
	for _, bad := range []string{"3s", "2s/1s", "1s/0s", "x/1s", ""} {
		if _, err := NewFleetConfig(1, bad); err == nil {
			t.Errorf("--fleet-ttl %q accepted", bad)
		}
	}
	if _, err := NewFleetConfig(-1, DefaultFleetTTLs); err == nil {
		t.Error("--fleet-kills -1 accepted")
	}
}
