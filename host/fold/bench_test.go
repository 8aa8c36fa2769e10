package fold

import (
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

const benchKeySpace = 1 << 20

// benchValueLen is the value size of the benchmarks' updates.
const benchValueLen = 64

var benchKeys = sync.OnceValue(func() []string {
	keys := make([]string, benchKeySpace)
	for i := range keys {
		keys[i] = fmt.Sprintf("bench.key.%07d", i)
	}
	return keys
})

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// BenchmarkCommit measures sustained commit throughput: each iteration is one
// Commit of `batch` raw puts (128-byte values, keys scattered over a 1M-key
// space, so the LSM sees overwrites and compactions), reported as updates/s,
// with the slowest single commit (a stall shows there first).
//
// Variants: batch size 100 / 1024, NoSync / Sync, pebble's default options
// (untuned) / this package's tuning. Use a time-based -benchtime (e.g. 3s):
// flush and compaction stalls only appear once enough data has been written.
func BenchmarkCommit(b *testing.B) {
	for _, batch := range []int{100, 1024} {
		for _, sync := range []bool{false, true} {
			for _, tuned := range []bool{false, true} {
				name := fmt.Sprintf("batch=%d/sync=%v/tuned=%v", batch, sync, tuned)
				b.Run(name, func(b *testing.B) {
					benchCommit(b, batch, Options{Sync: sync, untuned: !tuned, Logger: quiet})
				})
			}
		}
	}
}

func benchCommit(b *testing.B, batch int, opts Options) {
	keys := benchKeys()
	s, _ := openTemp(b, opts)
	value := make([]byte, 128)
	for i := range value {
		value[i] = byte(i * 7)
	}
	c := Commit{Raw: make([]Update, batch)}
	var rev protocol.Revision
	var slowest time.Duration
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		for j := range c.Raw {
			rev++
			c.Raw[j] = Update{Key: keys[(uint64(rev)*2654435761)%benchKeySpace], Op: OpPut, Rev: rev, Value: value}
		}
		c.Cursor = protocol.Cursor{Rev: rev}
		start := time.Now()
		if err := s.Commit(c); err != nil {
			b.Fatal(err)
		}
		slowest = max(slowest, time.Since(start))
	}
	b.StopTimer()
	st, err := s.Stats()
	if err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(uint64(rev))/b.Elapsed().Seconds(), "updates/s")
	b.ReportMetric(float64(st.WriteStalls), "stalls")
	b.ReportMetric(st.WriteStallTime.Seconds(), "stall-s")
	b.ReportMetric(float64(slowest.Microseconds())/1000, "max-ms/commit")
}

// BenchmarkRawKeys measures the repair diff's key listing over 100k keys.
func BenchmarkRawKeys(b *testing.B) {
	s, _ := openTemp(b, Options{Logger: quiet})
	keys := benchKeys()
	const n = 100_000
	for base := 0; base < n; base += 10_000 {
		c := Commit{Cursor: protocol.Cursor{Rev: protocol.Revision(base + 10_000)}}
		for i := base; i < base+10_000; i++ {
			c.Raw = append(c.Raw, Update{Key: keys[i], Op: OpPut, Rev: protocol.Revision(i + 1), Value: make([]byte, 128)})
		}
		mustCommit(b, s, c)
	}
	b.ReportAllocs()
	for b.Loop() {
		count := 0
		if err := s.RawKeys("", func([]byte) error { count++; return nil }); err != nil || count != n {
			b.Fatal(count, err)
		}
	}
	b.ReportMetric(float64(n*b.N)/b.Elapsed().Seconds(), "keys/s")
}

// BenchmarkCommitShapes is the store's ceiling for the example router's
// fold: it commits batches of 1000 updates (random keys among 300k) shaped
// as a raw-only fold commits them (the raw entry and the cursor) and as the
// router's fold does (plus its four view mutations per update), into fresh
// stores, rounds alternating, with no NATS, no plugin and no reads.
// router/raw-only is the most the router's fold can reach relative to the
// raw-only fold on this store layout. key-order/arrival-order is what
// sorting a commit's writes by key gains on the router's commits (> 1: the
// sort pays; see batchorder.go).
func BenchmarkCommitShapes(b *testing.B) {
	const hosts, batchSize, batches = 300_000, 1000, 200
	rng := rand.New(rand.NewPCG(3, 4))
	raw := make([]Commit, batches)
	router := make([]Commit, batches)
	for i := range batches {
		for j := range batchSize {
			h := rng.IntN(hosts)
			rev := protocol.Revision(i*batchSize + j + 1)
			u := Update{Key: fmt.Sprintf("route.h%06d", h), Rev: rev, Op: OpPut, Value: make([]byte, 90)}
			raw[i].Raw = append(raw[i].Raw, u)
			router[i].Raw = append(router[i].Raw, u)
			router[i].Views = append(router[i].Views,
				ViewMutation{Op: ViewDelete, Key: []byte(fmt.Sprintf("upstream/10.%d.1:8080/h%06d", rng.IntN(250), h))},
				ViewMutation{Op: ViewPut, Key: []byte(fmt.Sprintf("upstream/10.%d.1:8080/h%06d", rng.IntN(250), h))},
				ViewMutation{Op: ViewPut, Key: []byte(fmt.Sprintf("upstream/10.0.0.%d:8080/h%06d", h%20, h))},
				ViewMutation{Op: ViewPut, Key: []byte(fmt.Sprintf("host/h%06d", h)), Value: make([]byte, 40)})
			raw[i].Cursor = protocol.Cursor{Rev: rev}
			router[i].Cursor = raw[i].Cursor
		}
	}
	run := func(commits []Commit, arrivalOrder bool) time.Duration {
		s, _ := openTemp(b, Options{})
		s.points.arrivalOrder = arrivalOrder
		start := time.Now()
		for _, c := range commits {
			if err := s.Commit(c); err != nil {
				b.Fatal(err)
			}
		}
		took := time.Since(start)
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		return took
	}
	var ratios, arrival []float64
	var rawRate, routerRate, arrivalRate float64
	b.ResetTimer()
	for range b.N {
		r, v, a := run(raw, false), run(router, false), run(router, true)
		ratios = append(ratios, float64(r)/float64(v))
		arrival = append(arrival, float64(a)/float64(v))
		rawRate, routerRate, arrivalRate = batches*batchSize/r.Seconds(), batches*batchSize/v.Seconds(), batches*batchSize/a.Seconds()
	}
	slices.Sort(ratios)
	slices.Sort(arrival)
	b.ReportMetric(rawRate, "raw-only-updates/s")
	b.ReportMetric(routerRate, "router-updates/s")
	b.ReportMetric(ratios[len(ratios)/2], "router/raw-only")
	b.ReportMetric(arrivalRate, "router-arrival-order-updates/s")
	b.ReportMetric(arrival[len(arrival)/2], "key-order/arrival-order")
}

// BenchmarkCommitEffects is the outbox's cost in the fold's own commit:
// commits of 100 raw puts and 100 view puts (the router's shape), with no
// effect or with one per update (subject and a ~40-byte payload, as the
// router emits), left in the outbox (a state-sync outruns its publisher).
// Run with -count: the two variants then alternate, and their ratio is
// what effects add to a commit; cpu-ns/op is the process's CPU time (its
// background flushes and compactions included), which a busy machine
// disturbs less than the wall time.
func BenchmarkCommitEffects(b *testing.B) {
	for _, perUpdate := range []int{0, 1} {
		b.Run(fmt.Sprintf("effects=%d", perUpdate), func(b *testing.B) {
			keys := benchKeys()
			s, _ := openTemp(b, Options{Logger: quiet})
			value := make([]byte, benchValueLen)
			c := Commit{Raw: make([]Update, 100), Views: make([]ViewMutation, 100)}
			payloads := make([][]byte, len(c.Raw))
			for j := range payloads {
				payloads[j] = fmt.Appendf(nil, "bench.key.%07d\n10.9.%d.%d:80=1", j, j, j%250)
			}
			var rev protocol.Revision
			b.ReportAllocs()
			cpu0 := cpuTime(b)
			for b.Loop() {
				c.Effects = c.Effects[:0]
				for j := range c.Raw {
					rev++
					k := keys[(uint64(rev)*2654435761)%benchKeySpace]
					c.Raw[j] = Update{Key: k, Op: OpPut, Rev: rev, Value: value}
					c.Views[j] = ViewMutation{Key: []byte("v." + k), Op: ViewPut, Value: value[:32]}
					for range perUpdate {
						c.Effects = append(c.Effects, Effect{Subject: "route.changed", Payload: payloads[j]})
					}
				}
				c.Cursor, c.EffectRev = protocol.Cursor{Rev: rev}, rev
				if err := s.Commit(c); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// cpuTime is the process's CPU time so far (user and system).
func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSnapshot is what taking and closing a Snapshot costs on a store
// whose memtable holds 200k keys (a hydrating fold's): "copies" takes the
// Store's copies of the cursor and the view keyspace (no commit running),
// "read" reads them from the snapshot (two point reads), as a Snapshot
// taken while a commit runs does. Every read and query takes one.
func BenchmarkSnapshot(b *testing.B) {
	s, _ := openTemp(b, Options{Logger: quiet})
	keys := benchKeys()
	value := make([]byte, benchValueLen)
	for i := 0; i < 200_000; i += 1000 {
		c := Commit{Cursor: cursorAt(protocol.Revision(i + 1000))}
		for j := range 1000 {
			c.Raw = append(c.Raw, Update{Key: keys[(i+j)*7919%benchKeySpace], Op: OpPut, Rev: protocol.Revision(i + j + 1), Value: value})
		}
		if err := s.Commit(c); err != nil {
			b.Fatal(err)
		}
	}
	for _, mode := range []string{"copies", "read"} {
		b.Run(mode, func(b *testing.B) {
			if mode == "read" {
				s.commits.Add(1) // as if a commit ran: the snapshot reads its own
				defer s.commits.Add(1)
			}
			reads := s.snapReads.Load()
			for b.Loop() {
				sn, err := s.Snapshot()
				if err != nil {
					b.Fatal(err)
				}
				sn.Close()
			}
			if read := s.snapReads.Load() != reads; read != (mode == "read") {
				b.Fatalf("%s: read from pebble: %v", mode, read)
			}
		})
	}
}
