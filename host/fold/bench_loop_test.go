package fold

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// cursorTarget is a Target whose Commit only moves an in-memory cursor:
// the fold without pebble, to separate the store's cost from the rest.
// Reads go to an empty Store (NopPlugin reads nothing).
type cursorTarget struct {
	*Store
	cur protocol.Cursor
}

func (t *cursorTarget) Cursor() protocol.Cursor { return t.cur }

func (t *cursorTarget) Commit(c Commit) error {
	if err := validate(&c); err != nil {
		return err
	}
	t.cur = c.Cursor
	return nil
}

var _ Target = (*cursorTarget)(nil)

// sliceSource is a benchmark harness, not a production Source: it replays a
// pre-built slice of updates, cyclically, as n updates with revisions 1..n,
// through an Events channel of the watcher's default capacity, then the
// Synced marker, then closes; so the real Loop runs without NATS.
type sliceSource struct {
	events chan Event
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
}

var _ Source = (*sliceSource)(nil)

func newSliceSource(updates []Update, n, buffer int) *sliceSource {
	s := &sliceSource{events: make(chan Event, buffer), stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		defer close(s.events)
		for i := range n {
			u := updates[i%len(updates)]
			u.Rev = protocol.Revision(i + 1)
			select {
			case s.events <- Event{Update: u}:
			case <-s.stop:
				return
			}
		}
		select {
		case s.events <- Event{Synced: true}:
		case <-s.stop:
		}
	}()
	return s
}

func (s *sliceSource) Events() <-chan Event { return s.events }
func (s *sliceSource) Stop()                { s.once.Do(func() { close(s.stop) }); <-s.done }
func (s *sliceSource) Err() error           { <-s.done; return nil }

// BenchmarkLoopSliceSource measures the fold's hot path without NATS: one op
// is one update, fed by a sliceSource into the real Loop with NopPlugin,
// committed to a real Store (target=store) or to a cursor-only target
// (target=nostore, the loop's own cost). allocs/update counts every heap
// allocation in the process during the run (pebble's background flushes
// included) divided by the updates; B/update likewise.
//
// Updates carry 64-byte values; keys cycle through a 1M-key space, so the
// fold grows past a memtable rather than overwriting a few keys.
func BenchmarkLoopSliceSource(b *testing.B) {
	keys := benchKeys()
	value := make([]byte, benchValueLen)
	for _, nopStore := range []bool{false, true} {
		for _, maxBatch := range []int{100, 1024} {
			kind := "store"
			if nopStore {
				kind = "nostore"
			}
			b.Run(fmt.Sprintf("target=%s/maxbatch=%d", kind, maxBatch), func(b *testing.B) {
				st, _ := openTemp(b, Options{Logger: quiet})
				var target Target = st
				if nopStore {
					target = &cursorTarget{Store: st}
				}
				updates := make([]Update, benchKeySpace)
				for i := range updates {
					updates[i] = Update{Key: keys[i], Value: value, Op: OpPut, Time: int64(i)}
				}
				loop := NewLoop(target, NopPlugin, LoopConfig{MaxBatch: maxBatch, Logger: quiet})
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				b.ReportAllocs()
				b.ResetTimer()
				cur, err := loop.Run(context.Background(), newSliceSource(updates, b.N, 256))
				b.StopTimer()
				runtime.ReadMemStats(&after)
				if err != nil || cur.Rev != protocol.Revision(b.N) {
					b.Fatalf("loop ended at %v with %v, want revision %d", cur, err, b.N)
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "updates/s")
				b.ReportMetric(float64(after.Mallocs-before.Mallocs)/float64(b.N), "allocs/update")
				b.ReportMetric(float64(after.TotalAlloc-before.TotalAlloc)/float64(b.N), "B/update")
			})
		}
	}
}

var bigBench = flag.Bool("fold.bigbench", false, "run BenchmarkCommitTo10M (10M keys into one store: ~20 s here, ~0.5 GB of disk)")

func bigBenchEnabled() bool { return *bigBench || os.Getenv("FOLDHOST_BIGBENCH") == "1" }

// BenchmarkCommitTo10M commits 10M distinct keys (64-byte values) in
// 1024-update NoSync batches into one store with the default tuning, and
// reports the cumulative rate at 1M, 5M and 10M keys, the rate of the last
// million, pebble's write stalls and the slowest commit; every million is
// logged. Keys are a permutation of the 10M-key space, so inserts land all
// over the LSM rather than append at its end.
//
// Off by default: enable with -fold.bigbench or FOLDHOST_BIGBENCH=1, and run
// with -benchtime 1x.
func BenchmarkCommitTo10M(b *testing.B) {
	if !bigBenchEnabled() {
		b.Skip("commits 10M keys (~20 s on the reference machine, ~0.5 GB of temp disk): enable with -fold.bigbench or FOLDHOST_BIGBENCH=1, and -benchtime 1x")
	}
	const (
		total = 10_000_000
		batch = 1024
		// stride is coprime with total, so i*stride mod total visits every
		// key exactly once.
		stride = 2654435761
	)
	value := make([]byte, benchValueLen)
	for i := range value {
		value[i] = byte(i * 7)
	}
	for b.Loop() {
		b.StopTimer()
		s, _, err := Open(filepath.Join(b.TempDir(), "fold"), Options{Logger: quiet})
		if err != nil {
			b.Fatal(err)
		}
		c := Commit{Raw: make([]Update, 0, batch)}
		keyBuf := []byte("bench.k")
		var slowest, slowestAll time.Duration
		b.StartTimer()
		start := time.Now()
		mark, markAt := start, 0
		for i := 0; i < total; {
			c.Raw = c.Raw[:0]
			for ; len(c.Raw) < batch && i < total; i++ {
				k := strconv.AppendUint(keyBuf[:7], uint64(i)*stride%total+total, 10)
				c.Raw = append(c.Raw, Update{Key: string(k), Op: OpPut, Rev: protocol.Revision(i + 1), Value: value})
			}
			c.Cursor = protocol.Cursor{Rev: protocol.Revision(i)}
			t0 := time.Now()
			if err := s.Commit(c); err != nil {
				b.Fatal(err)
			}
			slowest = max(slowest, time.Since(t0))
			if i%1_000_000 < batch || i == total {
				now := time.Now()
				st, err := s.Stats()
				if err != nil {
					b.Fatal(err)
				}
				b.Logf("%2dM keys: %6.0f updates/s since the last mark, %6.0f cumulative; stalls %d (%v); slowest commit %v; disk %d MiB",
					i/1_000_000, float64(i-markAt)/now.Sub(mark).Seconds(), float64(i)/now.Sub(start).Seconds(),
					st.WriteStalls, st.WriteStallTime.Round(time.Millisecond), slowest.Round(time.Microsecond), st.DiskBytes>>20)
				switch i / 1_000_000 {
				case 1:
					b.ReportMetric(float64(i)/now.Sub(start).Seconds(), "updates/s-to-1M")
				case 5:
					b.ReportMetric(float64(i)/now.Sub(start).Seconds(), "updates/s-to-5M")
				case 10:
					b.ReportMetric(float64(i)/now.Sub(start).Seconds(), "updates/s-to-10M")
					b.ReportMetric(float64(i-markAt)/now.Sub(mark).Seconds(), "updates/s-last-1M")
					b.ReportMetric(float64(st.WriteStalls), "stalls")
					b.ReportMetric(st.WriteStallTime.Seconds(), "stall-s")
				}
				slowestAll = max(slowestAll, slowest)
				mark, markAt, slowest = now, i, 0
			}
		}
		b.StopTimer()
		b.ReportMetric(float64(slowestAll.Microseconds())/1000, "max-ms/commit")
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
