package fold

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"

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
//
// The ingest shape is the bulk-hydration design measured in RATIONALE.md
// ("Bulk hydration through ingested tables"), not a path the store takes:
// the same writes collected in memory and ingested as sorted tables
// (ingestCommits). Both are then timed until their data is in tables (the
// commit shape's memtable flushed): ingest/commit above 1 is what the
// ingest path would save on the store's work (wall time; cpu-ingest/commit
// is the process's CPU time, compactions included).
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
	// run times the commits, then (flushed) the commits and the flush of
	// the memtable, and the process's CPU time over the latter.
	run := func(commits []Commit, arrivalOrder bool) (took, flushed, cpu time.Duration) {
		s, _ := openTemp(b, Options{Logger: quiet})
		s.points.arrivalOrder = arrivalOrder
		cpu0, start := cpuTime(b), time.Now()
		for _, c := range commits {
			if err := s.Commit(c); err != nil {
				b.Fatal(err)
			}
		}
		took = time.Since(start)
		if err := s.db.Flush(); err != nil {
			b.Fatal(err)
		}
		flushed, cpu = time.Since(start), cpuTime(b)-cpu0
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		return took, flushed, cpu
	}
	ingest := func(commits []Commit) (took, cpu time.Duration) {
		s, _ := openTemp(b, Options{Logger: quiet})
		cpu0, start := cpuTime(b), time.Now()
		ingestCommits(b, s, commits)
		took, cpu = time.Since(start), cpuTime(b)-cpu0
		// What was ingested is what was committed: the last cursor, every key.
		want := map[string]bool{}
		for _, c := range commits {
			for _, u := range c.Raw {
				want[u.Key] = true
			}
		}
		got := 0
		if err := s.RawKeys("", func([]byte) error { got++; return nil }); err != nil || got != len(want) {
			b.Fatalf("the ingested store holds %d raw keys (%v), want %d", got, err, len(want))
		}
		cur, closer, err := s.db.Get(metaCursorKey)
		if err != nil {
			b.Fatal(err)
		}
		var c protocol.Cursor
		err = c.UnmarshalBinary(cur)
		closer.Close()
		if last := commits[len(commits)-1].Cursor; err != nil || c != last {
			b.Fatalf("the ingested store's cursor is %v (%v), want %v", c, err, last)
		}
		if err := s.Close(); err != nil {
			b.Fatal(err)
		}
		return took, cpu
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	var ratios, arrival, rawIngest, routerIngest, rawIngestCPU, routerIngestCPU []float64
	var rawRate, routerRate, arrivalRate, rawIngestRate, routerIngestRate float64
	b.ResetTimer()
	for range b.N {
		r, rf, rc := run(raw, false)
		v, vf, vc := run(router, false)
		a, _, _ := run(router, true)
		ri, ric := ingest(raw)
		vi, vic := ingest(router)
		ratios = append(ratios, float64(r)/float64(v))
		arrival = append(arrival, float64(a)/float64(v))
		rawIngest, routerIngest = append(rawIngest, float64(rf)/float64(ri)), append(routerIngest, float64(vf)/float64(vi))
		rawIngestCPU, routerIngestCPU = append(rawIngestCPU, float64(rc)/float64(ric)), append(routerIngestCPU, float64(vc)/float64(vic))
		rawRate, routerRate, arrivalRate = batches*batchSize/r.Seconds(), batches*batchSize/v.Seconds(), batches*batchSize/a.Seconds()
		rawIngestRate, routerIngestRate = batches*batchSize/ri.Seconds(), batches*batchSize/vi.Seconds()
	}
	b.ReportMetric(rawRate, "raw-only-updates/s")
	b.ReportMetric(routerRate, "router-updates/s")
	b.ReportMetric(median(ratios), "router/raw-only")
	b.ReportMetric(arrivalRate, "router-arrival-order-updates/s")
	b.ReportMetric(median(arrival), "key-order/arrival-order")
	b.ReportMetric(rawIngestRate, "raw-only-ingest-updates/s")
	b.ReportMetric(routerIngestRate, "router-ingest-updates/s")
	b.ReportMetric(median(rawIngest), "raw-only-ingest/commit")
	b.ReportMetric(median(routerIngest), "router-ingest/commit")
	b.ReportMetric(median(rawIngestCPU), "raw-only-cpu-ingest/commit")
	b.ReportMetric(median(routerIngestCPU), "router-cpu-ingest/commit")
}

// ingestOverlayBytes is how much ingestCommits collects before it writes
// a table (the size the measured design flushed at).
const ingestOverlayBytes = 32 << 20

// ingestCommits writes commits the way the bulk-hydration design would:
// each commit's writes (built by the code Commit builds them with, the
// cursor among them) go into an in-memory overlay, a key's last write
// winning; past ingestOverlayBytes, and at the end, the overlay is sorted
// into one table that pebble ingests. Only the raw and view writes and the
// cursor: the shapes have no effects, dead letters or view switch.
func ingestCommits(b *testing.B, s *Store, commits []Commit) {
	type write struct {
		val []byte
		del bool
	}
	overlay := map[string]write{}
	size, tables := 0, 0
	dir := b.TempDir()
	defer s.points.reset()
	flush := func() {
		path := filepath.Join(dir, fmt.Sprintf("%06d.sst", tables))
		tables++
		f, err := vfs.Default.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			b.Fatal(err)
		}
		w := sstable.NewWriter(objstorageprovider.NewFileWritable(f), sstable.WriterOptions{TableFormat: s.db.TableFormat()})
		for _, k := range slices.Sorted(maps.Keys(overlay)) {
			if e := overlay[k]; e.del {
				err = w.Delete([]byte(k))
			} else {
				err = w.Set([]byte(k), e.val)
			}
			if err != nil {
				b.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			b.Fatal(err)
		}
		if err := s.db.Ingest(context.Background(), []string{path}); err != nil {
			b.Fatal(err)
		}
		clear(overlay)
		size = 0
	}
	for _, c := range commits {
		batch := s.db.NewBatch()
		pw := &s.points
		pw.reset()
		pw.addRaw(c.Raw)
		pw.addViews(s.viewSpace(), c.Views)
		cur, err := c.Cursor.MarshalBinary()
		if err == nil {
			err = pw.writeTo(batch)
		}
		if err == nil {
			err = batch.Set(metaCursorKey, cur, nil)
		}
		if err != nil {
			b.Fatal(err)
		}
		for r := batch.Reader(); ; {
			kind, k, v, ok, err := r.Next()
			if err != nil {
				b.Fatal(err)
			}
			if !ok {
				break
			}
			overlay[string(k)] = write{val: slices.Clone(v), del: kind == pebble.InternalKeyKindDelete}
			size += len(k) + len(v)
		}
		if err := batch.Close(); err != nil {
			b.Fatal(err)
		}
		if size >= ingestOverlayBytes {
			flush()
		}
	}
	flush()
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
