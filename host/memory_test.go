package host_test

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/natstest"
)

// The measurement mode of TestHostilePluginsStayWithinMemory: the figures
// of RATIONALE.md ("What a plugin can make the host hold") come from
//
//	go test ./host -run '^TestHostilePluginsStayWithinMemory$' -v \
//	    -hostile.memory=256 [-hostile.gcoff]
//
// which runs every case with that plugin_memory_mb, prints each child's
// peak RSS and asserts nothing. -hostile.gcoff turns the collector off in
// the children, as the Go SDK's init used to do in every host process.
var (
	hostileMemory = flag.Int("hostile.memory", 0, "plugin_memory_mb of a measurement run of TestHostilePluginsStayWithinMemory (0: the test itself)")
	hostileGCOff  = flag.Bool("hostile.gcoff", false, "measurement run: the children run with the garbage collector off")
	hostileCap    = flag.Int("hostile.cap", 4096, "measurement run: a child whose RSS passes this many MiB is stopped (reported as over it)")
)

// hostMemoryOverhead is the constant the host's peak RSS may pass the
// plugin's memory by, its own baseline included (docs/plugins.md, "Plugin
// memory bounds"); twice that under the race detector.
const hostMemoryOverhead = 192 << 20

// hostileEnv carries a child's case: name, plugin memory MiB, GC off (0/1),
// RSS cap MiB, NATS URL, bucket, last revision.
const hostileEnv = "FOLDHOST_HOSTILE_CHILD"

// hostileCase is one way hostile.wasm tries to make the host hold memory:
// the values to put (in order) into the bucket the child folds.
type hostileCase struct {
	name   string
	values func(memMB int, measure bool) []string
	// What the test (not a measurement) expects: so many dead letters,
	// the first naming this.
	dead  int
	names string
	// slowRaced: skipped under the race detector (see the test).
	slowRaced bool
}

var hostileCases = []hostileCase{
	// A fold of ordinary updates: the reference the others are held to.
	{"baseline", func(int, bool) []string { return repeat("v", 2000) }, 0, "", false},
	// Reads whose answers fill half the plugin's memory, in a loop: of a
	// 512 KiB raw entry, committed by an earlier batch (a batch closes at
	// 100 updates).
	{"read-loop", func(memMB int, measure bool) []string {
		calls := 50
		if measure {
			calls = 200
		}
		return append(append([]string{strings.Repeat("x", 512<<10)}, repeat("v", 100)...), fmt.Sprintf("read %d %d", memMB, calls))
	}, 1, wasm.KeyMaxRead, true},
	// Reads of answers just under the one-read bound, in a loop.
	{"read-at-limit", func(memMB int, measure bool) []string {
		return append(append([]string{strings.Repeat("x", 512<<10)}, repeat("v", 100)...), "read 31 100")
	}, 1, wasm.KeyMaxCallRead, true},
	// Memory grown a page at a time up to the limit, then a trap.
	{"grow", func(int, bool) []string { return repeat("grow", 3) }, 3, "out-of-memory", false},
	// Updates the plugin traps on (poison records under "skip").
	{"poison", func(_ int, measure bool) []string {
		if measure {
			return repeat("trap", 3000)
		}
		return repeat("trap", 300)
	}, 300, "unreachable", false},
	// Poison records each failing with a 1 MiB error message.
	{"error-message", func(_ int, measure bool) []string {
		if measure {
			return repeat("error 1048576", 871)
		}
		return repeat("error 1048576", 100)
	}, 100, "a message of 1048576 bytes, cut", false},
	// 10^6 view keys in one batch (the test: 900,000, under the output
	// bound, so that only the count bound refuses them).
	{"view-keys", func(_ int, measure bool) []string {
		if measure {
			return []string{"keys 1000000"}
		}
		return []string{"keys 900000"}
	}, 1, wasm.KeyMaxViewMutations, false},
	// Everything the plugin's memory can hold written to stderr at once.
	{"stderr", func(memMB int, _ bool) []string { return []string{fmt.Sprintf("stderr %d", memMB<<20*3/4)} }, 0, "", false},
	// Outputs at the bounds: 15 values of 1 MiB less a little, and just
	// under 100,000 view keys.
	{"output-at-limit", func(int, bool) []string {
		return append(repeat(fmt.Sprintf("value %d", 1<<20-64), 15), "keys 99999")
	}, 0, "", false},
	// One view value of 8 MiB (a measurement: as large as the plugin's
	// memory allows, 100 MiB at most, over the output bound too).
	{"view-value", func(memMB int, measure bool) []string {
		if !measure {
			return []string{"value 8388608"}
		}
		return []string{fmt.Sprintf("value %d", min(100<<20, memMB<<20*3/4))}
	}, 1, wasm.KeyMaxViewValue, false},
}

func repeat(v string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = v
	}
	return out
}

// TestHostilePluginsStayWithinMemory: whatever hostile.wasm does (each
// case above), the host's peak RSS stays within the plugin's memory limit
// plus a constant. Each case runs a real fold (real NATS, pebble and
// wazero) in a child process of this test binary, under on_plugin_error =
// "skip" so that every hostile update is tried (with its retries, and the
// bisection) and the fold goes on; the child reports its VmHWM once the
// cursor covers every update.
func TestHostilePluginsStayWithinMemory(t *testing.T) {
	if env := os.Getenv(hostileEnv); env != "" {
		hostileChild(t, env)
		return
	}
	measure := *hostileMemory > 0
	memMB := 64
	if measure {
		memMB = *hostileMemory
	}
	srv, nc := natstest.Start(t)
	gcOff := 0
	if *hostileGCOff {
		gcOff = 1
	}
	for _, c := range hostileCases {
		t.Run(c.name, func(t *testing.T) {
			if raceEnabled && c.slowRaced {
				t.Skip("copies hundreds of MiB through the race detector's instrumented memmove (90 s on a loaded machine); the run without it asserts this case")
			}
			b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: c.name}, natskv.Options{})
			if err != nil {
				t.Fatal(err)
			}
			var last uint64
			for i, v := range c.values(memMB, measure) {
				key := fmt.Sprintf("k%05d", i)
				if strings.HasPrefix(v, "xxxx") {
					key = "big"
				}
				last = hosttest.Put(t, b, key, v)
			}
			start := time.Now()
			env := fmt.Sprintf("%s,%d,%d,%d,%s,%s,%d", c.name, memMB, gcOff, *hostileCap, srv.ClientURL(), c.name, last)
			got := runHostileChild(t, env)
			t.Logf("%s: peak RSS %d MiB (plugin memory %d MiB, GC off: %v) in %v; %d dead letters, the first: %.120q", c.name, got.hwm>>20, memMB,
				gcOff == 1, time.Since(start).Round(time.Millisecond), got.dead, got.first)
			if measure {
				return
			}
			if got.over {
				t.Fatalf("%s: the child's RSS passed the %d MiB cap", c.name, *hostileCap)
			}
			if got.dead != c.dead || !strings.Contains(got.first, c.names) {
				t.Errorf("%s: %d dead letters, the first %q; want %d naming %q", c.name, got.dead, got.first, c.dead, c.names)
			}
			overhead := int64(hostMemoryOverhead)
			if raceEnabled {
				// The race detector's shadow memory grows with the heap;
				// output-at-limit reached 532 MiB (constant 468) on a
				// run with both cores busy.
				overhead *= 3
			}
			if limit := int64(memMB)<<20 + overhead; got.hwm > limit {
				t.Errorf("%s: peak RSS %d MiB, over the plugin's memory (%d MiB) plus the host's constant (%d MiB)",
					c.name, got.hwm>>20, memMB, overhead>>20)
			}
		})
	}
}

type hostileResult struct {
	hwm   int64
	over  bool
	dead  int
	first string // the first dead letter's error
}

// runHostileChild runs one case in a child process and returns what it
// reported.
func runHostileChild(t *testing.T, env string) hostileResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHostilePluginsStayWithinMemory$", "-test.v=false")
	cmd.Env = append(os.Environ(), hostileEnv+"="+env)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var res hostileResult
	var said bool
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "child: ")
		if !ok {
			continue
		}
		// "peak HWM DEAD QUOTED-ERROR" or "over RSS"
		f := strings.SplitN(line, " ", 4)
		res.hwm, _ = strconv.ParseInt(f[1], 10, 64)
		res.over = f[0] == "over"
		if len(f) == 4 {
			res.dead, _ = strconv.Atoi(f[2])
			res.first, _ = strconv.Unquote(f[3])
		}
		said = true
	}
	if err := cmd.Wait(); err != nil && !res.over {
		t.Fatalf("child: %v", err)
	}
	if !said {
		t.Fatal("the child reported nothing")
	}
	return res
}

// hostileChild is a child's side: it folds the case's bucket with
// hostile.wasm until the cursor covers the last update, and prints its
// peak RSS. A watchdog stops it when its RSS passes the cap (a measurement
// of the unbounded host must not take the machine's memory).
func hostileChild(t *testing.T, env string) {
	f := strings.Split(env, ",")
	if len(f) != 7 {
		t.Fatalf("bad %s %q", hostileEnv, env)
	}
	memMB, _ := strconv.Atoi(f[1])
	capMB, _ := strconv.ParseInt(f[3], 10, 64)
	last, _ := strconv.ParseUint(f[6], 10, 64)
	if f[2] == "1" {
		debug.SetGCPercent(-1)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		for {
			if rss := procStatus(t, "VmRSS"); rss > capMB<<20 {
				fmt.Printf("child: over %d\n", rss)
				os.Exit(3)
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: f[4]}},
		Folds: []host.FoldOptions{{Name: f[0], Bucket: f[5], Plugin: hosttest.BuiltPlugin(t, "testdata", "hostile"),
			DataDir: filepath.Join(dir, "fold"), PluginMemoryMB: memMB, OnPluginError: host.PluginErrorSkip,
			// The cases bound memory, not time: a loaded machine must not
			// turn read-at-limit's 8 reads of 31 MiB into a deadline.
			PluginCallTimeout: 10 * time.Minute}},
	})
	fd := r.H.Fold(f[0])
	deadline := time.Now().Add(10 * time.Minute)
	for fd.Status().Cursor < last {
		if st := fd.Status(); st.State == httpapi.StateFailed {
			t.Fatalf("the fold failed: %s", st.LastError)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cursor %d, want %d", fd.Status().Cursor, last)
		}
		time.Sleep(5 * time.Millisecond)
	}
	hwm := procStatus(t, "VmHWM")
	dls, err := fd.DeadLetters()
	if err != nil {
		t.Fatal(err)
	}
	first := ""
	if len(dls) > 0 {
		first = dls[0].Error
	}
	fmt.Printf("child: peak %d %d %q\n", hwm, len(dls), first)
}

// procStatus is a /proc/self/status figure in bytes (Linux).
func procStatus(t *testing.T, field string) int64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == field+":" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/self/status", field)
	return 0
}
