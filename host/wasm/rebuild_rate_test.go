package wasm

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

var rebuildKeys = flag.Int("rebuild.keys", 0, "fold size (keys) for TestRebuildRate, e.g. 1000000; 0 skips it")

// genFeed delivers n router updates of distinct keys, made as they are
// read (a million buffered events would dwarf what is measured).
type genFeed struct{ ch chan fold.Event }

func newGenFeed(n int) *genFeed {
	f := &genFeed{ch: make(chan fold.Event, 1024)}
	go func() {
		defer close(f.ch)
		for i := range n {
			f.ch <- fold.Event{Update: fold.Update{Key: fmt.Sprintf("route.h%07d", i), Rev: protocol.Revision(i + 1), Op: fold.OpPut,
				Value: fmt.Appendf(nil, `{"upstreams":[{"addr":"10.%d.%d.1:80","weight":%d},{"addr":"10.0.0.2:80"}]}`, i%251, i%13, 1+i%9)}}
		}
	}()
	return f
}

func (f *genFeed) Events() <-chan fold.Event { return f.ch }
func (f *genFeed) Stop()                     {}
func (f *genFeed) Err() error                { return nil }

// TestRebuildRate (behind -rebuild.keys=N) measures a view rebuild of an
// N-key fold through the C example router against a fresh fold of the same
// N updates through the same module into the same kind of store, in one
// process: the fresh fold (loop, plugin, commits), then the rebuild (replay
// of the raw fold into a shadow, the switch). It checks that the rebuilt
// views are exactly the fresh fold's (equal digests) and logs both rates and
// their ratio.
func TestRebuildRate(t *testing.T) {
	if *rebuildKeys == 0 {
		t.Skip("a measurement behind an explicit flag (no dependency is missing): run with -rebuild.keys=1000000")
	}
	n := *rebuildKeys
	r := newRuntime(t, Options{})
	load := func() *Plugin {
		m, err := r.LoadFile(context.Background(), builtPlugin(t, "example-router", "router-c"))
		if err != nil {
			t.Fatal(err)
		}
		p := r.NewPlugin(m)
		t.Cleanup(func() { p.Close(context.Background()) })
		return p
	}
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()

	start := time.Now()
	if _, err := fold.NewLoop(st, load(), fold.LoopConfig{MaxBatch: fold.DefaultMaxBatch}).Run(context.Background(), newGenFeed(n)); err != nil && st.Cursor().Rev != protocol.Revision(n) {
		t.Fatal(err)
	}
	fresh := time.Since(start)
	want, err := fold.Digest(st)
	if err != nil {
		t.Fatal(err)
	}

	start = time.Now()
	sh, err := st.BeginShadow()
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	p := load()
	prog, err := fold.Replay(context.Background(), snap, sh, p, fold.RebuildConfig{MaxBatch: fold.DefaultMaxBatch}, 0)
	snap.Close()
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(fold.Commit{Cursor: st.Cursor(), PluginIdentity: p.Upcoming().Encode(), Activate: sh}); err != nil {
		t.Fatal(err)
	}
	rebuild := time.Since(start)
	if got, err := fold.Digest(st); err != nil || got != want {
		t.Fatalf("the rebuilt fold's digest %s (%v), the fresh fold's %s", got, err, want)
	}
	t.Logf("%d keys: fresh fold %v (%.0f updates/s), rebuild %v (%.0f keys/s, replayed %d): rebuild rate = %.2f x the fresh fold's",
		n, fresh.Round(time.Millisecond), float64(n)/fresh.Seconds(), rebuild.Round(time.Millisecond), float64(n)/rebuild.Seconds(),
		prog.Replayed, fresh.Seconds()/rebuild.Seconds())
}
