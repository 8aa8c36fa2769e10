package artifact_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// Benchmarks of artifacts on a fold of a real bucket:
//
//	export FOLDHOST_VERSITYGW="$PWD/bin/versitygw"
//	go test ./host/artifact -run '^$' -bench Artifact -benchtime 1x                    # 20k keys, ~1 s
//	go test ./host/artifact -run '^$' -bench Artifact -benchtime 1x -artifact.bigbench   # 1M keys, ~35 s
//
// BenchmarkArtifact sets up once: an embedded nats-server with a bucket of
// N keys (values of 80..120 random bytes, ~100 on average; keys in a random
// order; both from -artifact.benchseed, which the name carries), folded with
// fold.Follow and NopPlugin into store A. Then, under
// BenchmarkArtifact/keys=N/seed=S:
//
//	export          Export(A): MB/s of artifact bytes (data files + manifest),
//	                artifact-MB
//	local/upload    Upload of A's artifact to a fresh local store: MB/s of
//	                payload (tar) bytes, payload-MB
//	local/download  Pointer + OpenPayload, read to the end: MB/s
//	local/bootstrap each iteration, in one run: Download into an empty dir
//	                (download + verify + install) and a full replay (a fresh
//	                fold.Follow of the whole bucket into an empty store until
//	                it reaches the stream head), in alternating order.
//	                bootstrap-s, replay-s, replay/bootstrap (ratio of the
//	                summed times), MB/s of the bootstrap, and its memory:
//	                peak-heap-MiB (HeapInuse sampled every 10 ms; absolute,
//	                so it includes store A and the NATS server, which live in
//	                this process), peak-heap-delta-MiB (above HeapInuse just
//	                before, after debug.FreeOSMemory) and peak-rss-delta-MiB
//	                (VmHWM after the Download minus VmRSS before, the
//	                high-water mark reset through /proc/self/clear_refs; not
//	                reported when the reset is refused)
//	s3/...          the same three on a real S3 server (versitygw, started
//	                like the S3 contract tests: FOLDHOST_VERSITYGW or PATH; a
//	                missing binary fails, never skips)
//
// N is benchSmallKeys by default, so that -bench . stays quick;
// -artifact.bigbench or FOLDHOST_BIGBENCH=1 selects benchBigKeys (~1 GB of
// temp disk; -benchtime 3x for steadier figures, with -timeout on a slow
// machine), -artifact.benchkeys any N. Each iteration of export and upload
// works on fresh directories and buckets, removed untimed.

const (
	benchSmallKeys = 20_000
	benchBigKeys   = 1_000_000
	benchKey       = "routes" // the artifact key in the transports
	// benchPublishChunk PublishAsync calls are in flight before waiting on
	// PublishAsyncComplete, below the client's outstanding-ack limit
	// (benchMaxPending), so PublishAsync never blocks or fails on it.
	benchPublishChunk = 2000
	benchMaxPending   = 4000
	// memSampleEvery is the bootstrap memory sampling period.
	memSampleEvery = 10 * time.Millisecond
)

var (
	benchBig  = flag.Bool("artifact.bigbench", false, fmt.Sprintf("run BenchmarkArtifact on %d keys instead of %d (about a minute here, ~1 GB of temp disk; pass -timeout 60m)", benchBigKeys, benchSmallKeys))
	benchN    = flag.Int("artifact.benchkeys", 0, "BenchmarkArtifact's number of keys (overrides -artifact.bigbench)")
	benchSeed = flag.Uint64("artifact.benchseed", 1, "seed of BenchmarkArtifact's keys and values")
)

func benchKeys() int {
	switch {
	case *benchN > 0:
		return *benchN
	case *benchBig || os.Getenv("FOLDHOST_BIGBENCH") == "1":
		return benchBigKeys
	}
	return benchSmallKeys
}

func BenchmarkArtifact(b *testing.B) {
	n, seed := benchKeys(), *benchSeed
	// The random seed is in the name: a parent benchmark's log is shown only
	// with -v.
	b.Run(fmt.Sprintf("keys=%d", n), func(b *testing.B) {
		b.Run(fmt.Sprintf("seed=%d", seed), func(b *testing.B) { benchArtifact(b, n, seed) })
	})
}

func benchArtifact(b *testing.B, n int, seed uint64) {
	e := newBenchBucket(b, n, seed)
	tmp := b.TempDir()
	a, took := e.follow(b, filepath.Join(tmp, "fold-a"))
	b.Cleanup(func() { _ = a.Close() })
	b.Logf("store A: folded %d keys in %v (%.0f updates/s)", n, took.Round(time.Millisecond), float64(n)/took.Seconds())
	if err := a.SetOrigin(fold.NewOrigin(e.bucket.Name(), nil, time.Time{})); err != nil {
		b.Fatal(err)
	}

	b.Run("export", func(b *testing.B) {
		var took time.Duration
		var size int64
		for b.Loop() {
			start := time.Now()
			dir, m, err := artifact.Export(a, tmp)
			took += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			b.StopTimer()
			size = artifactBytes(b, dir, m)
			if err := os.RemoveAll(dir); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
		}
		b.ReportMetric(mbps(size*int64(b.N), took), "MB/s")
		b.ReportMetric(float64(size)/1e6, "artifact-MB")
	})

	// One artifact for every transfer below.
	art, m, err := artifact.Export(a, tmp)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = os.RemoveAll(art) })
	var cw countWriter
	if err := artifact.WriteTar(&cw, art); err != nil {
		b.Fatal(err)
	}
	payload := cw.n
	cursor, err := m.DecodeCursor()
	if err != nil || cursor.Rev != e.head {
		b.Fatalf("artifact at %v (%v), want the head %d", cursor, err, e.head)
	}
	b.Logf("artifact: %d files, %.1f MB; payload %.1f MB", len(m.Files), float64(artifactBytes(b, art, m))/1e6, float64(payload)/1e6)

	b.Run("local", func(b *testing.B) {
		root := b.TempDir()
		fresh := func(b *testing.B, i int) (artifact.Store, func()) {
			dir := filepath.Join(root, fmt.Sprintf("up-%d", i))
			tr, err := dirstore.New(dir)
			if err != nil {
				b.Fatal(err)
			}
			return tr, func() { _ = os.RemoveAll(dir) }
		}
		published, _ := fresh(b, -1)
		benchStore(b, e, art, payload, published, fresh)
	})
	b.Run("s3", func(b *testing.B) {
		gw := s3test.Start(b)
		fresh := func(b *testing.B, _ int) (artifact.Store, func()) {
			bucket := gw.NewBucket(b)
			s, err := s3store.New(s3store.Options{Endpoint: gw.Endpoint, Region: s3test.Region, Bucket: bucket,
				Prefix: "exports/bench", AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, UsePathStyle: true})
			if err != nil {
				b.Fatal(err)
			}
			return s, func() { gw.DeleteBucket(b, bucket) }
		}
		published, _ := fresh(b, -1)
		benchStore(b, e, art, payload, published, fresh)
	})
}

// benchStore runs upload, download and bootstrap on one store.
// published receives art before download and bootstrap; fresh returns an
// empty transport for one upload and a func that deletes what it holds.
func benchStore(b *testing.B, e *benchBucket, art string, payload int64, published artifact.Store,
	fresh func(b *testing.B, i int) (artifact.Store, func())) {
	b.Run("upload", func(b *testing.B) {
		var took time.Duration
		for i := 0; b.Loop(); i++ {
			b.StopTimer()
			tr, clean := fresh(b, i)
			b.StartTimer()
			start := time.Now()
			out, err := artifact.Upload(b.Context(), tr, benchKey, art)
			took += time.Since(start)
			if err != nil || out != artifact.Published {
				b.Fatalf("upload: %v %v", out, err)
			}
			b.StopTimer()
			clean()
			b.StartTimer()
		}
		b.ReportMetric(mbps(payload*int64(b.N), took), "MB/s")
		b.ReportMetric(float64(payload)/1e6, "payload-MB")
	})

	if out, err := artifact.Upload(b.Context(), published, benchKey, art); err != nil || out != artifact.Published {
		b.Fatalf("upload: %v %v", out, err)
	}

	b.Run("download", func(b *testing.B) {
		var took time.Duration
		for b.Loop() {
			start := time.Now()
			mb, err := published.Pointer(b.Context(), benchKey)
			if err != nil {
				b.Fatal(err)
			}
			body, size, err := published.OpenPayload(b.Context(), benchKey, mb)
			if err != nil {
				b.Fatal(err)
			}
			got, err := io.Copy(io.Discard, body)
			body.Close()
			took += time.Since(start)
			if err != nil || got != size || got != payload {
				b.Fatalf("read %d of %d bytes (%v), want %d", got, size, err, payload)
			}
		}
		b.ReportMetric(mbps(payload*int64(b.N), took), "MB/s")
	})

	b.Run("bootstrap", func(b *testing.B) {
		root := b.TempDir()
		var boot, replay time.Duration
		var peak memPeak
		hwm := true
		for i := 0; b.Loop(); i++ {
			dest := filepath.Join(root, fmt.Sprintf("boot-%d", i))
			replayDir := filepath.Join(root, fmt.Sprintf("replay-%d", i))
			var bt, rt time.Duration
			var p memPeak
			runBoot := func() { bt, p = e.bootstrap(b, published, dest) }
			runReplay := func() {
				var st *fold.Store
				st, rt = e.follow(b, replayDir)
				if err := st.Close(); err != nil {
					b.Fatal(err)
				}
			}
			// Alternate the order, so that a drift in the machine's load
			// or a warm cache favours neither.
			if i%2 == 0 {
				runBoot()
				runReplay()
			} else {
				runReplay()
				runBoot()
			}
			boot += bt
			replay += rt
			peak.max(p)
			hwm = hwm && p.hwm
			b.Logf("iteration %d: bootstrap %v, replay %v (x%.2f); bootstrap peak heap %.1f MiB (%+.1f), RSS %+.1f MiB (VmHWM reset: %v), sampled RSS %+.1f MiB",
				i, bt.Round(time.Millisecond), rt.Round(time.Millisecond), rt.Seconds()/bt.Seconds(),
				mib(p.heap), mib(p.heapDelta), mib(p.rssDelta), p.hwm, mib(p.sampledRSSDelta))
			for _, d := range []string{dest, replayDir} {
				if err := os.RemoveAll(d); err != nil {
					b.Fatal(err)
				}
			}
		}
		b.ReportMetric(boot.Seconds()/float64(b.N), "bootstrap-s")
		b.ReportMetric(replay.Seconds()/float64(b.N), "replay-s")
		b.ReportMetric(replay.Seconds()/boot.Seconds(), "replay/bootstrap")
		b.ReportMetric(mbps(payload*int64(b.N), boot), "MB/s")
		b.ReportMetric(mib(peak.heap), "peak-heap-MiB")
		b.ReportMetric(mib(peak.heapDelta), "peak-heap-delta-MiB")
		if hwm {
			b.ReportMetric(mib(peak.rssDelta), "peak-rss-delta-MiB")
		} else {
			b.Log("VmHWM could not be reset (/proc/self/clear_refs): peak RSS not reported")
		}
	})
}

// benchBucket is an in-process nats-server with a bucket of n keys at
// revisions 1..n.
type benchBucket struct {
	bucket  *natskv.Bucket
	n       int
	head    protocol.Revision
	timeout time.Duration // for one full fold
}

// newBenchBucket starts a server and fills a bucket with n keys through
// PublishAsync in acknowledged chunks (core Publish can silently lose
// messages), then requires the stream to hold exactly n messages.
func newBenchBucket(b *testing.B, n int, seed uint64) *benchBucket {
	b.Helper()
	b.Logf("seed %d (-artifact.benchseed), %d keys", seed, n)
	srv, err := embeddednats.Start(embeddednats.Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(srv.Shutdown)
	nc, err := natskv.Connect(natskv.ConnOptions{URL: srv.ClientURL(), Name: b.Name()})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(nc.Close)
	ctx := b.Context()
	bucket, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "bench"}, natskv.Options{RequestTimeout: 30 * time.Second})
	if err != nil {
		b.Fatal(err)
	}

	// The publisher has a connection of its own, closed before anything is
	// measured.
	pc, err := natskv.Connect(natskv.ConnOptions{URL: srv.ClientURL(), Name: b.Name() + "-publisher"})
	if err != nil {
		b.Fatal(err)
	}
	defer pc.Close()
	var ackErrs atomic.Int64
	js, err := jetstream.New(pc,
		jetstream.WithPublishAsyncMaxPending(benchMaxPending),
		jetstream.WithPublishAsyncErrHandler(func(jetstream.JetStream, *nats.Msg, error) { ackErrs.Add(1) }),
	)
	if err != nil {
		b.Fatal(err)
	}
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	rng := rand.NewChaCha8(key)
	r := rand.New(rng)
	perm := r.Perm(n)
	prefix := "$KV." + bucket.Name() + ".bench.k"
	var valueBytes int64
	start := time.Now()
	for i, k := range perm {
		v := make([]byte, 80+r.IntN(41)) // a fresh slice: a retried publish resends it
		_, _ = rng.Read(v)
		valueBytes += int64(len(v))
		if _, err := js.PublishAsync(prefix+strconv.Itoa(k + 100_000_000)[1:], v); err != nil {
			b.Fatalf("PublishAsync %d: %v", i, err)
		}
		if (i+1)%benchPublishChunk == 0 || i == n-1 {
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
	st, err := js.Stream(ctx, "KV_"+bucket.Name())
	if err != nil {
		b.Fatal(err)
	}
	if s := st.CachedInfo().State; s.Msgs != uint64(n) || s.LastSeq != uint64(n) {
		b.Fatalf("preload: stream holds %d messages up to %d, want %d", s.Msgs, s.LastSeq, n)
	} else {
		b.Logf("preloaded %d keys, %.1f MB of values, in %v (%.0f puts/s); stream %.1f MB",
			n, float64(valueBytes)/1e6, took.Round(time.Millisecond), float64(n)/took.Seconds(), float64(s.Bytes)/1e6)
	}
	return &benchBucket{bucket: bucket, n: n, head: protocol.Revision(n), timeout: 5*time.Minute + time.Duration(n)*time.Millisecond}
}

// follow folds the whole bucket from scratch with fold.Follow and NopPlugin
// into a new store at dir until it reaches the stream head (OnSynced at the
// head's revision), stops the fold, and returns the open store and the time
// from Follow's start to the head.
func (e *benchBucket) follow(b *testing.B, dir string) (*fold.Store, time.Duration) {
	b.Helper()
	st, cur, err := fold.Open(dir, fold.Options{})
	if err != nil {
		b.Fatal(err)
	}
	if cur != (protocol.Cursor{}) {
		b.Fatalf("fresh store at %v", cur)
	}
	var updates atomic.Int64
	synced := make(chan protocol.Cursor, 1)
	ctx, cancel := context.WithCancel(b.Context())
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := fold.Follow(ctx, e.bucket.Feed(natskv.Scope{}, natskv.WatchOptions{}), st, fold.NopPlugin, fold.FollowConfig{Loop: fold.LoopConfig{
			OnApplied: func(a fold.Applied) { updates.Add(int64(a.Updates)) },
			OnSynced: func(c protocol.Cursor) {
				select { // once per watch attempt: keep the first
				case synced <- c:
				default:
				}
			},
		}})
		done <- err
	}()
	stop := sync.OnceValue(func() error { cancel(); return <-done })
	defer stop() // on a failure below
	deadline := time.NewTimer(e.timeout)
	defer deadline.Stop()
	var took time.Duration
	select {
	case c := <-synced:
		took = time.Since(start)
		if c.Rev != e.head {
			b.Fatalf("fold synced at %v, want the head %d", c, e.head)
		}
	case err := <-done:
		b.Fatalf("Follow returned before reaching the head: %v", err)
	case <-deadline.C:
		b.Fatalf("fold at %v did not reach the head %d within %v", st.Cursor(), e.head, e.timeout)
	}
	if err := stop(); err != nil {
		b.Fatalf("Follow: %v", err)
	}
	if u := updates.Load(); u != int64(e.n) {
		b.Fatalf("fold applied %d updates, want %d", u, e.n)
	}
	if c := countKeys(b, st); c != e.n {
		b.Fatalf("fold holds %d keys, want %d", c, e.n)
	}
	return st, took
}

// bootstrap Downloads tr's artifact into dest (which must not exist),
// sampling memory meanwhile, checks the result and returns the Download's
// time and memory peak.
func (e *benchBucket) bootstrap(b *testing.B, tr artifact.Store, dest string) (time.Duration, memPeak) {
	b.Helper()
	s := startMemSampler(memSampleEvery)
	start := time.Now()
	m, err := artifact.Download(b.Context(), tr, benchKey, dest, artifact.DownloadOptions{})
	took := time.Since(start)
	peak := s.stop()
	if err != nil {
		b.Fatal(err)
	}
	want, err := m.DecodeCursor()
	if err != nil {
		b.Fatal(err)
	}
	st, cur, err := fold.Open(dest, fold.Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	if cur != want || cur.Rev != e.head {
		b.Fatalf("bootstrapped fold at %v, manifest %v, head %d", cur, want, e.head)
	}
	if c := countKeys(b, st); c != e.n {
		b.Fatalf("bootstrapped fold holds %d keys, want %d", c, e.n)
	}
	return took, peak
}

func countKeys(b *testing.B, st *fold.Store) int {
	b.Helper()
	n := 0
	if err := st.RawKeys("", func([]byte) error { n++; return nil }); err != nil {
		b.Fatal(err)
	}
	return n
}

// artifactBytes is the size of the artifact in dir: its data files (from
// the manifest, checked against the disk) and the manifest.
func artifactBytes(b *testing.B, dir string, m artifact.Manifest) int64 {
	b.Helper()
	var n int64
	for _, f := range m.Files {
		fi, err := os.Stat(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil {
			b.Fatal(err)
		}
		if fi.Size() != f.Size {
			b.Fatalf("%s: %d bytes on disk, manifest says %d", f.Path, fi.Size(), f.Size)
		}
		n += f.Size
	}
	return n + int64(len(storetest.ReadManifest(b, dir)))
}

type countWriter struct{ n int64 }

func (w *countWriter) Write(p []byte) (int, error) { w.n += int64(len(p)); return len(p), nil }

func mbps(bytes int64, d time.Duration) float64 { return float64(bytes) / 1e6 / d.Seconds() }

func mib(bytes int64) float64 { return float64(bytes) / (1 << 20) }

// memPeak is the memory a bootstrap took.
type memPeak struct {
	heap            int64 // peak HeapInuse
	heapDelta       int64 // peak HeapInuse above the heap before (after a GC)
	rssDelta        int64 // VmHWM after, minus VmRSS before; valid when hwm
	sampledRSSDelta int64 // peak sampled VmRSS minus VmRSS before
	hwm             bool  // VmHWM was reset before, so rssDelta is valid
}

func (p *memPeak) max(q memPeak) {
	p.heap = max(p.heap, q.heap)
	p.heapDelta = max(p.heapDelta, q.heapDelta)
	p.rssDelta = max(p.rssDelta, q.rssDelta)
	p.sampledRSSDelta = max(p.sampledRSSDelta, q.sampledRSSDelta)
}

// memSampler samples HeapInuse (runtime/metrics: heap objects + unused
// heap) and VmRSS in a goroutine.
type memSampler struct {
	quit, done chan struct{}
	samples    []metrics.Sample
	baseHeap   int64
	baseRSS    int64
	peakHeap   int64 // written by the sampling goroutine until done
	peakRSS    int64
	hwm        bool
}

func startMemSampler(every time.Duration) *memSampler {
	// A GC that also returns the free heap to the OS: otherwise the
	// bootstrap reuses pages the preload and the fold left mapped, and its
	// RSS delta reads ~0 whatever it allocates.
	debug.FreeOSMemory()
	s := &memSampler{
		quit: make(chan struct{}), done: make(chan struct{}),
		samples: []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}, {Name: "/memory/classes/heap/unused:bytes"}},
	}
	s.baseHeap = s.heapInuse()
	// Writing 5 to clear_refs resets the process's VmHWM to its current RSS
	// (Linux 4.0+).
	if f, err := os.OpenFile("/proc/self/clear_refs", os.O_WRONLY, 0); err == nil {
		_, err = f.Write([]byte("5"))
		s.hwm = f.Close() == nil && err == nil
	}
	s.baseRSS, _ = procStatus("VmRSS")
	if s.hwm {
		// The reset must have taken: the high-water mark is back near RSS.
		if h, ok := procStatus("VmHWM"); !ok || h > s.baseRSS+(8<<20) {
			s.hwm = false
		}
	}
	s.peakHeap, s.peakRSS = s.baseHeap, s.baseRSS
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			s.sample()
			select {
			case <-s.quit:
				s.sample()
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *memSampler) heapInuse() int64 {
	metrics.Read(s.samples)
	var n int64
	for _, x := range s.samples {
		if x.Value.Kind() == metrics.KindUint64 {
			n += int64(x.Value.Uint64())
		}
	}
	return n
}

func (s *memSampler) sample() {
	s.peakHeap = max(s.peakHeap, s.heapInuse())
	if r, ok := procStatus("VmRSS"); ok {
		s.peakRSS = max(s.peakRSS, r)
	}
}

func (s *memSampler) stop() memPeak {
	close(s.quit)
	<-s.done
	p := memPeak{heap: s.peakHeap, heapDelta: s.peakHeap - s.baseHeap, sampledRSSDelta: s.peakRSS - s.baseRSS, hwm: s.hwm}
	if s.hwm {
		if h, ok := procStatus("VmHWM"); ok {
			p.rssDelta = h - s.baseRSS
		} else {
			p.hwm = false
		}
	}
	return p
}

// procStatus reads a "kB" field of /proc/self/status, in bytes.
func procStatus(field string) (int64, bool) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || name != field {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, false
		}
		return kb << 10, true
	}
	return 0, false
}
