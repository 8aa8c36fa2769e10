package host_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
)

// TestPartitionScaleUpMeasure is a measurement, run only with
// FOLDHOST_TEST_PARTITION_SCALE=KEYS: the time one node takes to hydrate
// a bucket of KEYS routes through the example router plugin as a fold of
// 1, 2 and 4 partitions (each run on a fresh data dir, in turns A B C A B
// C), logged with the ratios to 1 partition.
// FOLDHOST_TEST_PARTITION_PLUGIN names another plugin: router-go (the Go
// guest), or keyview-costly (an apply that spins 20,000 iterations per
// update: a fold bound by its plugin).
func TestPartitionScaleUpMeasure(t *testing.T) {
	v := os.Getenv("FOLDHOST_TEST_PARTITION_SCALE")
	if v == "" {
		t.Skip("a measurement: set FOLDHOST_TEST_PARTITION_SCALE=KEYS to run it")
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		t.Fatal(err)
	}
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "f0", History: 1}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	putMany(t, hosttest.JS(t, srv.ClientURL()), 0, n)
	last := lastRev(t, b)
	name := "router-c"
	if p := os.Getenv("FOLDHOST_TEST_PARTITION_PLUGIN"); p != "" {
		name = p
	}
	dir := "example-router"
	if name == "keyview-costly" {
		dir = "testdata"
	}
	plugin := hosttest.BuiltPlugin(t, dir, name)
	// Each configuration: partitions, and whether its units share one
	// read of the stream (the Demux) or each read it on its own.
	type config struct {
		parts  int
		shared bool
	}
	configs := []config{{1, true}, {2, true}, {4, true}, {2, false}, {4, false}}
	times := map[config][]time.Duration{}
	for round := range 3 {
		for _, c := range configs {
			restore := host.SetDemux(c.shared)
			dir := filepath.Join(t.TempDir(), fmt.Sprint(round, c.parts, c.shared))
			start := time.Now()
			r := hosttest.StartHost(t, host.Options{
				NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL()}},
				Folds: []host.FoldOptions{{Name: "f0", Plugin: plugin, DataDir: dir, Partitions: c.parts}},
			})
			for _, f := range r.H.Folds() {
				hosttest.WaitCursor(t, f, last)
			}
			times[c] = append(times[c], time.Since(start))
			if round == 2 {
				runtime.GC()
				t.Logf("%d partitions (shared read %v): RSS %s after hydrating (the process: server, client and host)", c.parts, c.shared, rss(t))
			}
			if err := r.Stop(t); err != nil {
				t.Fatal(err)
			}
			restore()
		}
	}
	med := func(ds []time.Duration) time.Duration { return slices.Sorted(slices.Values(ds))[len(ds)/2] }
	base := med(times[configs[0]])
	for _, c := range configs {
		how := "one shared read of the stream"
		if !c.shared {
			how = "a read of the stream per unit"
		}
		t.Logf("%s, %d keys, %d partitions, %s: median %v of %v, ratio to 1 partition %.2f", name, n, c.parts, how, med(times[c]), times[c], float64(med(times[c]))/float64(base))
	}
}

// rss is the process's resident set size, from /proc.
func rss(t *testing.T) string {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return "unknown"
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			return strings.TrimSpace(v)
		}
	}
	return "unknown"
}
