package host_test

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
)

// faultVisibleWithin is how soon a fault must show in /metrics: an alert
// rule or a dashboard can only be as quick as the series it reads.
const faultVisibleWithin = 30 * time.Second

// series names one Prometheus series of GET /metrics by its metric name and
// a subset of its labels; every scraped series matching it is summed (a
// counter split by outcome or plan reads as its total). Absent is NaN.
type series struct {
	name   string
	labels map[string]string
}

func (s series) String() string {
	var ls []string
	for k, v := range s.labels {
		ls = append(ls, fmt.Sprintf("%s=%q", k, v))
	}
	sort.Strings(ls)
	return s.name + "{" + strings.Join(ls, ",") + "}"
}

// change is what a fault must do to a series: its value before the fault
// and the value now decide.
type change struct {
	what string
	ok   func(before, now float64) bool
}

var (
	increases = change{"increases", func(b, n float64) bool { return !math.IsNaN(n) && (math.IsNaN(b) && n > 0 || n > b) }}
	becomes1  = change{"becomes 1", func(b, n float64) bool { return b != 1 && n == 1 }}
	becomes0  = change{"becomes 0", func(b, n float64) bool { return b != 0 && n == 0 }}
)

// watch is one series a fault must change.
type watch struct {
	series
	change
}

// scrapeMetrics reads GET url/metrics (the text format) into one value
// per watched series.
func scrapeMetrics(t *testing.T, url string, ws []watch) ([]float64, error) {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	out := make([]float64, len(ws))
	for i, w := range ws {
		out[i] = math.NaN()
		fam, ok := fams[w.name]
		if !ok {
			continue
		}
	metrics:
		for _, m := range fam.GetMetric() {
			have := map[string]string{}
			for _, l := range m.GetLabel() {
				have[l.GetName()] = l.GetValue()
			}
			for k, v := range w.labels {
				if have[k] != v {
					continue metrics
				}
			}
			var v float64
			switch {
			case m.GetCounter() != nil:
				v = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				v = m.GetGauge().GetValue()
			default:
				t.Fatalf("%s: neither a counter nor a gauge", w.name)
			}
			if math.IsNaN(out[i]) {
				out[i] = 0
			}
			out[i] += v
		}
	}
	return out, nil
}

// faultCase is one fault the red-team tests inject: setup starts a real
// host with real components and returns its API's URL and the fault.
type faultCase struct {
	name  string
	setup func(t *testing.T) (api string, inject func())
	watch []watch
}

func onFold(name, fold string, more ...string) series {
	s := series{name: name, labels: map[string]string{"fold": fold}}
	for i := 0; i+1 < len(more); i += 2 {
		s.labels[more[i]] = more[i+1]
	}
	return s
}

// servedAPI serves the host's HTTP API for the test.
func servedAPI(t *testing.T, r *hosttest.Running) string {
	web := httptest.NewServer(r.H.Handler())
	t.Cleanup(web.Close)
	return web.URL
}

// pluginFault is a fold of a fresh bucket through plugin (one call
// deadline, no retries); the fault is an update the plugin fails on.
func pluginFault(plugin string) func(t *testing.T) (string, func()) {
	return func(t *testing.T) (string, func()) {
		url, b := hosttest.NATSServer(t)
		r := hosttest.StartHost(t, host.Options{
			NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", plugin), DataDir: filepath.Join(t.TempDir(), "a"),
				PluginCallTimeout: 300 * time.Millisecond, PluginRetries: wasm.NoRetries}},
		})
		hosttest.WaitFor(t, func() bool { return r.H.Fold("routes").Status().Ready })
		return servedAPI(t, r), func() { hosttest.Put(t, b, "route.a", "x") }
	}
}

// TestEveryFaultIsVisible (issue 25, "every fault visible"): for each fault
// the red-team tests inject, a named series of GET /metrics (one the alert
// rules or the dashboard in deploy/ read) changes within 30 s. The polls
// end as soon as every watched series moved, so a quick metric costs no
// 30 s. Mutations caught: the plugin error counter not exported (trap,
// spin); nats_connected stuck at 1 (NATS down); the repair counts not
// exported (cursor expired); failed export rounds not counted (S3 down);
// commit failures not exported (disk full). The stream replacement shows
// only when the client's consumer misses its heartbeats (~20 s).
func TestEveryFaultIsVisible(t *testing.T) {
	t.Parallel() // its bucket-recreated case waits ~20 s for the consumer's missed heartbeats: the wait overlaps the other waiting tests (scripts/test runs four at once)
	cases := []faultCase{
		{
			name:  "trapping plugin",
			setup: pluginFault("trap"),
			watch: []watch{
				{onFold("foldhost_fold_plugin_errors_total", "routes"), increases},
				{onFold("foldhost_fold_failed", "routes"), becomes1},
			},
		},
		{
			name:  "spinning plugin (deadline)",
			setup: pluginFault("spin"),
			watch: []watch{
				{onFold("foldhost_fold_plugin_errors_total", "routes"), increases},
				{onFold("foldhost_fold_failed", "routes"), becomes1},
			},
		},
		{
			name: "NATS down",
			setup: func(t *testing.T) (string, func()) {
				srv, err := embeddednats.Start(embeddednats.Options{Dir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(srv.Shutdown)
				url := srv.ClientURL()
				if _, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "routes"}, natskv.Options{}); err != nil {
					t.Fatal(err)
				}
				r := hosttest.StartHost(t, host.Options{
					NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a")}},
				})
				hosttest.WaitFor(t, func() bool { return r.H.Fold("routes").Status().Ready })
				return servedAPI(t, r), srv.Shutdown
			},
			watch: []watch{
				{onFold("foldhost_fold_nats_connected", "routes"), becomes0},
				{onFold("foldhost_fold_nats_disconnects_total", "routes"), increases},
			},
		},
		{
			name: "bucket recreated (stream replaced)",
			setup: func(t *testing.T) (string, func()) {
				url, b := hosttest.NATSServer(t)
				r := hosttest.StartHost(t, host.Options{
					NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a")}},
				})
				hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "old", "v"))
				return servedAPI(t, r), func() {
					kv := hosttest.RemakeBucket(t, url, "routes")
					for i := range 3 {
						if _, err := kv.Put(context.Background(), fmt.Sprintf("new.%d", i), []byte("v")); err != nil {
							t.Fatal(err)
						}
					}
				}
			},
			watch: []watch{
				{onFold("foldhost_fold_failed", "routes"), becomes1},
			},
		},
		{
			// A live fold's cursor expires when NATS drops revisions it
			// has not folded: here while it is paused, on a history-1
			// bucket whose every key is written twice; the resume finds
			// its cursor expired and repairs.
			name: "cursor expired (NATS compacted past the cursor)",
			setup: func(t *testing.T) (string, func()) {
				url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
				r := hosttest.StartHost(t, host.Options{
					NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					Folds: []host.FoldOptions{{Name: "rt", DataDir: filepath.Join(t.TempDir(), "a")}},
				})
				f := r.H.Fold("rt")
				var last uint64
				for i := range 3 {
					last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), "v0")
				}
				hosttest.WaitCursor(t, f, last)
				return servedAPI(t, r), func() {
					if err := f.Pause(); err != nil {
						t.Fatal(err)
					}
					hosttest.WaitState(t, f, httpapi.StatePaused)
					for round := 1; round <= 2; round++ {
						for i := range 3 {
							hosttest.Put(t, b, fmt.Sprintf("k%d", i), fmt.Sprint("v", round))
						}
					}
					if err := f.Resume(); err != nil {
						t.Fatal(err)
					}
				}
			},
			watch: []watch{
				{onFold("foldhost_fold_repairs_total", "rt", "outcome", "done"), increases},
			},
		},
		{
			name: "S3 artifact store down",
			setup: func(t *testing.T) (string, func()) {
				url, b := hosttest.NATSServer(t)
				g := s3test.Start(t)
				store, err := s3store.New(s3store.Options{Endpoint: g.Endpoint, Region: s3test.Region, Bucket: g.NewBucket(t), Prefix: "exports",
					AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, UsePathStyle: true})
				if err != nil {
					t.Fatal(err)
				}
				r := hosttest.StartHost(t, host.Options{
					NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					// A round's lease is held to its end: rounds skip until
					// it expires, so the next after that meets the outage.
					Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t", LeaseTTL: time.Second},
					Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "a"),
						ExportInterval: 200 * time.Millisecond}},
				})
				f := r.H.Fold("routes")
				hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k", "v"))
				hosttest.WaitFor(t, func() bool { return f.Status().Export.Rounds.Published > 0 })
				return servedAPI(t, r), func() {
					g.Stop()
					hosttest.Put(t, b, "k", "v2") // a round has something to publish
				}
			},
			watch: []watch{
				{onFold("foldhost_fold_export_rounds_total", "routes", "outcome", "failed"), increases},
			},
		},
		{
			name: "disk full",
			setup: func(t *testing.T) (string, func()) {
				url, b := hosttest.NATSServer(t)
				dir := t.TempDir()
				fake := hosttest.NewFullDiskFSFake(filepath.Join(dir, "a"))
				testhook.Set(t, &testhook.StoreOptions, func(name string, o *fold.Options) {
					if name == "a" {
						o.FS, o.DiskReserve = fake, 1<<20
					}
				})
				testhook.Set(t, &testhook.DiskPoll, 20*time.Millisecond)
				r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
					Folds: []host.FoldOptions{{Name: "a", Bucket: "routes", DataDir: filepath.Join(dir, "a")}}})
				hosttest.WaitCursor(t, r.H.Fold("a"), hosttest.Put(t, b, "k1", "v1"))
				return servedAPI(t, r), func() {
					fake.Avail.Store(64 << 10) // below the 1 MiB reserve
					hosttest.Put(t, b, "k2", "v2")
				}
			},
			watch: []watch{
				{onFold("foldhost_fold_commit_failures_total", "a"), increases},
				{onFold("foldhost_fold_failed", "a"), becomes1},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			api, inject := c.setup(t)
			before, err := scrapeMetrics(t, api, c.watch)
			if err != nil {
				t.Fatal(err)
			}
			at := time.Now()
			inject()
			var now []float64
			for {
				now, err = scrapeMetrics(t, api, c.watch)
				if err != nil {
					t.Fatal(err)
				}
				moved := true
				for i, w := range c.watch {
					moved = moved && w.ok(before[i], now[i])
				}
				if moved {
					t.Logf("visible after %v", time.Since(at).Round(time.Millisecond))
					return
				}
				if time.Since(at) > faultVisibleWithin {
					break
				}
				time.Sleep(50 * time.Millisecond)
			}
			for i, w := range c.watch {
				if !w.ok(before[i], now[i]) {
					t.Errorf("%s: %v before the fault, %v %v after it; want it %s", w.series, before[i], now[i], faultVisibleWithin, w.what)
				}
			}
		})
	}
}
