package fold_test

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// End-to-end and hot-path benchmarks of the fold:
//
//	go test ./host/fold -run XXX -bench 'FoldEndToEnd|LoopSliceSource' -benchtime 1x
//	go test ./host/fold -run XXX -bench CommitTo10M -benchtime 1x -fold.bigbench

const (
	// e2eKeys is the size of the preloaded bucket: big enough that consumer
	// creation and the first batch are noise, small enough that the whole
	// BenchmarkFoldEndToEnd stays well under a minute at -benchtime 1x.
	e2eKeys = 500_000
	// e2eValueLen is the value size of every preloaded key.
	e2eValueLen = 64
	// e2ePublishChunk is how many PublishAsync calls are in flight before
	// waiting on PublishAsyncComplete: below the client's outstanding-ack
	// limit (e2eMaxPending), so PublishAsync never blocks or fails on it.
	e2ePublishChunk = 2000
	e2eMaxPending   = 4000
)

// e2eBucket is an in-process nats-server with a bucket preloaded with
// e2eKeys distinct keys (revisions 1..e2eKeys).
type e2eBucket struct {
	*natsEnv
	n    int
	last protocol.Revision
}

// e2eKey is the key of the i-th preloaded update (distinct for i < 9e8).
func e2eKey(i int) string { return "bench.k" + strconv.Itoa(i + 100_000_000)[1:] }

// preloadBucket starts a server and fills a bucket with n keys through
// PublishAsync in chunks, each chunk acknowledged before the next (never
// core Publish: without acks it silently lost 42% of a bulk load here). It
// verifies the stream holds exactly n messages.
func preloadBucket(b *testing.B, name string, n int) *e2eBucket {
	b.Helper()
	env := startNATS(b, name)
	// A connection of its own, so the publisher's state (pending acks) is
	// gone before anything is measured.
	nc, err := natskv.Connect(natskv.ConnOptions{URL: env.srv.ClientURL()})
	if err != nil {
		b.Fatal(err)
	}
	defer nc.Close()
	var ackErrs atomic.Int64
	js, err := jetstream.New(nc,
		jetstream.WithPublishAsyncMaxPending(e2eMaxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { ackErrs.Add(1) }),
	)
	if err != nil {
		b.Fatal(err)
	}
	val := make([]byte, e2eValueLen)
	for i := range val {
		val[i] = 'a' + byte(i%26)
	}
	prefix := "$KV." + name + "."
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(prefix+e2eKey(i), val); err != nil {
			b.Fatalf("PublishAsync %d: %v", i, err)
		}
		if (i+1)%e2ePublishChunk == 0 || i == n-1 {
			select {
			case <-js.PublishAsyncComplete():
			case <-time.After(60 * time.Second):
				b.Fatalf("preload: chunk ending at %d not acknowledged within 60s", i)
			}
		}
	}
	took := time.Since(start)
	if e := ackErrs.Load(); e != 0 {
		b.Fatalf("preload: %d publishes failed", e)
	}
	st, err := js.Stream(context.Background(), "KV_"+name)
	if err != nil {
		b.Fatal(err)
	}
	if s := st.CachedInfo().State; s.Msgs != uint64(n) || s.LastSeq != uint64(n) {
		b.Fatalf("preload: stream holds %d messages up to %d, want %d", s.Msgs, s.LastSeq, n)
	}
	b.Logf("preloaded %d keys (%d-byte values) in %v: %.0f puts/s", n, e2eValueLen, took.Round(time.Millisecond), float64(n)/took.Seconds())
	return &e2eBucket{natsEnv: env, n: n, last: protocol.Revision(n)}
}

// labelPhase labels the calling goroutine, and every goroutine it starts
// until the returned func is called, with phase (for -cpuprofile:
// go tool pprof -tagfocus phase=baseline). The server's goroutines and the
// connection's read loop predate the phase and stay unlabelled.
func labelPhase(phase string) (restore func()) {
	pprof.SetGoroutineLabels(pprof.WithLabels(context.Background(), pprof.Labels("phase", phase)))
	return func() { pprof.SetGoroutineLabels(context.Background()) }
}

// readWatchAll is the baseline: how long plain nats.go jetstream WatchAll
// takes to deliver the bucket's initial values (up to the nil marker),
// consumer creation included. It reads each entry's fields, as the natskv
// watcher does, and nothing else.
func readWatchAll(b *testing.B, e *e2eBucket) time.Duration {
	b.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	defer labelPhase("baseline")()
	start := time.Now()
	kw, err := e.bucket.KV().WatchAll(ctx)
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	var sink int
	for entry := range kw.Updates() {
		if entry == nil {
			break
		}
		sink += len(entry.Key()) + len(entry.Value()) + int(entry.Revision()) + int(entry.Operation())
		_ = entry.Created()
		n++
	}
	took := time.Since(start)
	_ = kw.Stop()
	if n != e.n || sink == 0 {
		b.Fatalf("WatchAll delivered %d initial values, want %d", n, e.n)
	}
	return took
}

// readWatcher drains a natskv.Watcher state-sync up to its Synced event: the
// baseline plus natskv's goroutine hop, without the loop or a store.
func readWatcher(b *testing.B, e *e2eBucket, buffer int) time.Duration {
	b.Helper()
	defer labelPhase("watcher")()
	start := time.Now()
	w, err := e.bucket.Watch(context.Background(), natskv.Scope{}, protocol.Cursor{}, natskv.WatchOptions{Buffer: buffer})
	if err != nil {
		b.Fatal(err)
	}
	n := 0
	for ev := range w.Events() {
		if ev.Synced {
			break
		}
		n++
	}
	took := time.Since(start)
	w.Stop()
	if n != e.n {
		b.Fatalf("watcher delivered %d updates before Synced, want %d", n, e.n)
	}
	return took
}

// foldRun is the outcome of one Follow from an empty target to OnSynced.
type foldRun struct {
	took    time.Duration
	updates int
	commits int
}

// runFollow folds the bucket with NopPlugin into a fresh target (a real
// Store unless nopStore) until OnSynced, and returns how long that took,
// consumer creation included.
func runFollow(b *testing.B, e *e2eBucket, cfg fold.FollowConfig, buffer int, nopStore bool) foldRun {
	b.Helper()
	b.StopTimer()
	st, _, err := fold.Open(filepath.Join(b.TempDir(), "fold"), fold.Options{Logger: quiet})
	if err != nil {
		b.Fatal(err)
	}
	var target fold.Target = st
	if nopStore {
		target = &fold.CursorTarget{Store: st}
	}
	var run foldRun
	synced := make(chan protocol.Cursor, 1)
	cfg.Loop.Logger = quiet
	cfg.Loop.OnApplied = func(a fold.Applied) { run.updates += a.Updates; run.commits++ }
	cfg.Loop.OnSynced = func(c protocol.Cursor) { synced <- c }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	b.StartTimer()
	start := time.Now()
	// The label marks the fold's own goroutines (loop, watcher, the
	// client's delivery goroutine) in a -cpuprofile: -tagfocus phase=fold.
	go pprof.Do(ctx, pprof.Labels("phase", "fold"), func(ctx context.Context) {
		_, err := fold.Follow(ctx, e.bucket.Feed(natskv.Scope{}, natskv.WatchOptions{Buffer: buffer}), target, fold.NopPlugin, cfg)
		done <- err
	})
	select {
	case c := <-synced:
		run.took = time.Since(start)
		b.StopTimer()
		if c.Rev != e.last {
			b.Fatalf("synced at %v, want revision %d", c, e.last)
		}
	case err := <-done:
		b.Fatalf("Follow returned before OnSynced: %v", err)
	case <-time.After(5 * time.Minute):
		b.Fatal("fold not synced within 5 minutes")
	}
	cancel()
	if err := <-done; err != nil {
		b.Fatalf("Follow: %v", err)
	}
	if run.updates != e.n {
		b.Fatalf("fold applied %d updates, want %d", run.updates, e.n)
	}
	if err := st.Close(); err != nil {
		b.Fatal(err)
	}
	b.StartTimer()
	return run
}

// BenchmarkFoldEndToEnd measures hydrating a fresh fold from a bucket of
// e2eKeys keys over a real in-process nats-server, against the same-process
// baseline of plain nats.go jetstream WatchAll reading the same bucket.
//
// Every iteration of a variant is paired with a baseline read, alternately
// just before and just after it, so fold/baseline (the median of the
// per-pair ratios) compares runs a second apart on this noisy machine. At
// -benchtime 1x the whole benchmark takes ~20 s; 3x or 5x gives steadier
// ratios. The variants:
//
//	watchall                       the baseline alone
//	watcher/buffer=B               natskv.Watcher drained (+1 goroutine hop)
//	fold/maxbatch=M/buffer=B       Follow + NopPlugin into a real Store
//	nostore/maxbatch=M/buffer=B    Follow + NopPlugin, commits only move a cursor
//
// updates/s is the variant's rate; baseline-updates/s the paired WatchAll
// rate; updates/commit the mean batch actually committed. Both rates include
// consumer creation; the store is opened before the clock starts.
func BenchmarkFoldEndToEnd(b *testing.B) {
	e := preloadBucket(b, "e2e", e2eKeys)
	readWatchAll(b, e) // warm the server's block cache once, untimed

	b.Run("watchall", func(b *testing.B) {
		var p pairs
		for b.Loop() {
			p.add(e.n, readWatchAll(b, e), 0)
		}
		p.report(b)
	})
	for _, buffer := range []int{256, 4096} {
		b.Run(fmt.Sprintf("watcher/buffer=%d", buffer), func(b *testing.B) {
			var p pairs
			for i := 0; b.Loop(); i++ {
				p.pair(b, e, i, func() (int, time.Duration) { return e.n, readWatcher(b, e, buffer) })
			}
			p.report(b)
		})
	}
	for _, nopStore := range []bool{false, true} {
		for _, maxBatch := range []int{100, 1024} {
			for _, buffer := range []int{256, 4096} {
				kind := "fold"
				if nopStore {
					kind = "nostore"
				}
				b.Run(fmt.Sprintf("%s/maxbatch=%d/buffer=%d", kind, maxBatch, buffer), func(b *testing.B) {
					var p pairs
					commits := 0
					for i := 0; b.Loop(); i++ {
						p.pair(b, e, i, func() (int, time.Duration) {
							r := runFollow(b, e, fold.FollowConfig{Loop: fold.LoopConfig{MaxBatch: maxBatch}}, buffer, nopStore)
							commits += r.commits
							return r.updates, r.took
						})
					}
					p.report(b)
					b.ReportMetric(float64(p.n)/float64(commits), "updates/commit")
				})
			}
		}
	}
}

// pairs accumulates a variant's runs, each paired with a baseline read of the
// same bucket moments apart.
type pairs struct {
	n          int           // updates read by the variant
	took, base time.Duration // summed
	ratios     []float64     // per pair: variant rate / baseline rate
}

// add records one run of the variant (n updates in took) and, when base > 0,
// its paired baseline read (of as many updates).
func (p *pairs) add(n int, took, base time.Duration) {
	p.n += n
	p.took += took
	if base > 0 {
		p.base += base
		p.ratios = append(p.ratios, base.Seconds()/took.Seconds())
	}
}

// pair runs the variant and a baseline read, alternating which goes first so
// that a drift in the machine's load does not favour either.
func (p *pairs) pair(b *testing.B, e *e2eBucket, i int, variant func() (int, time.Duration)) {
	var n int
	var took, base time.Duration
	if i%2 == 0 {
		base = readWatchAll(b, e)
		n, took = variant()
	} else {
		n, took = variant()
		base = readWatchAll(b, e)
	}
	p.add(n, took, base)
}

// report: updates/s is the variant's rate over all its runs,
// baseline-updates/s the paired baseline's; fold/baseline is the median of
// the per-pair ratios (robust to a load spike hitting one run).
func (p *pairs) report(b *testing.B) {
	b.ReportMetric(float64(p.n)/p.took.Seconds(), "updates/s")
	if len(p.ratios) == 0 {
		return
	}
	b.ReportMetric(float64(p.n)/p.base.Seconds(), "baseline-updates/s")
	r := slices.Clone(p.ratios)
	slices.Sort(r)
	med := r[len(r)/2]
	if len(r)%2 == 0 {
		med = (r[len(r)/2-1] + r[len(r)/2]) / 2
	}
	b.ReportMetric(med, "fold/baseline")
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
