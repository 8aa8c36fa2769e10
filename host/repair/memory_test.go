package repair_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

var memSizes = flag.String("repair.memory", "", "comma-separated fold sizes (keys) for TestRepairMemoryIsFlat, e.g. 1000000,4000000; empty skips it")

const memEnvNATS = "REPAIR_MEMORY_NATS_DIR"

// memNATSChild runs a NATS server for TestRepairMemoryIsFlat in its own
// process (so its memory is not the repair's), prints its URL and serves
// until stdin closes.
func memNATSChild() {
	srv, err := embeddednats.Start(embeddednats.Options{Dir: os.Getenv(memEnvNATS)})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	fmt.Println(srv.ClientURL())
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	srv.Shutdown()
	os.Exit(0)
}

// rss is the process' resident set size in bytes (Linux).
func rss(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatal("no VmRSS")
	return 0
}

// TestRepairMemoryIsFlat (behind -repair.memory): the key-listing repair's
// memory does not grow with the fold. For each size it folds a bucket of
// that many keys, deletes 1% (markers purged), and runs the repair while a
// sampler records the peak RSS over the idle fold; the growth at the
// largest size must be within 20% (plus 16 MiB of noise) of the smallest.
// NATS runs in a child process.
func TestRepairMemoryIsFlat(t *testing.T) {
	if *memSizes == "" {
		t.Skip("a measurement behind an explicit flag (no dependency is missing): run with -repair.memory=1000000,4000000")
	}
	var sizes []int
	for _, s := range strings.Split(*memSizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, n)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), memEnvNATS+"="+t.TempDir())
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { stdin.Close(); _ = cmd.Wait() }()
	url, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natskv.Connect(natskv.ConnOptions{URL: strings.TrimSpace(url)})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	var growth []int64
	for _, n := range sizes {
		g := measureRepair(t, nc, n)
		growth = append(growth, g)
	}
	lo, hi := growth[0], growth[len(growth)-1]
	if float64(hi) > 1.2*float64(lo)+16<<20 {
		t.Errorf("repair memory grows with the fold: %d MiB at %d keys, %d MiB at %d", lo>>20, sizes[0], hi>>20, sizes[len(sizes)-1])
	}
}

// measureRepair folds a bucket of n keys, deletes 1% of them (markers
// purged), and returns the peak RSS growth over the idle fold while the
// key-listing repair runs.
func measureRepair(t *testing.T, nc *nats.Conn, n int) int64 {
	ctx := context.Background()
	name := fmt.Sprintf("mem%d", n)
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: name, History: 1}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	val := []byte(strings.Repeat("v", 64))
	start := time.Now()
	for i := range n {
		if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.k%08d", name, i), val); err != nil {
			t.Fatal(err)
		}
		if i%2000 == 1999 {
			<-js.PublishAsyncComplete()
		}
	}
	<-js.PublishAsyncComplete()
	ret, _, err := b.Retention(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d keys published in %v", n, time.Since(start).Round(time.Second))
	dir := t.TempDir()
	st, _, err := fold.Open(filepath.Join(dir, "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	start = time.Now()
	stop := follow(t, b, st, fold.NopPlugin, nil)
	waitCursorLong(t, st, ret.Last)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("folded in %v", time.Since(start).Round(time.Second))
	for i := 0; i < n; i += 100 {
		if err := b.KV().Delete(ctx, fmt.Sprintf("k%08d", i)); err != nil {
			t.Fatal(err)
		}
	}
	purgeMarkers(t, b)

	// The idle floor: the heap the fold left returned to the OS first
	// (runtime.GC alone keeps freed spans resident, 15-30 MiB of noise that
	// read as "growth" of the smaller size).
	runtime.GC()
	debug.FreeOSMemory()
	idle := rss(t)
	var peak atomic.Int64
	peak.Store(idle)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if r := rss(t); r > peak.Load() {
					peak.Store(r)
				}
			}
		}
	})
	start = time.Now()
	src, err := b.Feed(natskv.Scope{}, natskv.WatchOptions{}).Watch(ctx, protocol.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	res, err := repair.Relist(ctx, src, st, fold.NopPlugin, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "scratch"), Logger: quiet})
	src.Stop()
	close(done)
	wg.Wait()
	if err != nil {
		t.Fatal(err)
	}
	took := time.Since(start)
	growth := peak.Load() - idle
	t.Logf("%d keys: repair listed %d, deleted %d in %v (%.0f keys/s); RSS idle %d MiB, peak %d MiB, growth %d MiB",
		n, res.Listed, res.Deleted, took.Round(time.Millisecond), float64(res.Listed)/took.Seconds(), idle>>20, peak.Load()>>20, growth>>20)
	return growth
}

// waitCursorLong is waitCursor for folds of millions of keys.
func waitCursorLong(t *testing.T, st *fold.Store, rev protocol.Revision) {
	t.Helper()
	waitCursorWithin(t, st, rev, 30*time.Minute, 50*time.Millisecond)
}
