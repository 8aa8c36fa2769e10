// Package leakcheck fails a test binary whose tests leave goroutines
// behind: every goroutine a test starts must be done before the test
// returns (a goroutine that outlives its test can touch what the test
// closed, and did: a plugin file watcher panicked inside a closed runtime).
//
// It also fails a binary that starts with the garbage collector off: a
// package linked into the host turned it off in its init once (the Go
// plugin SDK's guest-only setting), and every foldhost process then grew
// without bound. Only an explicit GOGC=off in the environment is exempt.
//
// Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }
package leakcheck

import (
	"fmt"
	"math"
	"os"
	"runtime"
	"runtime/metrics"
	"strings"
	"testing"
	"time"
)

// settle bounds how long goroutines that are already ending (a connection's
// reader after Close, a timer's function) get to finish: long, because on a
// loaded machine an ending goroutine may wait for a CPU.
const settle = time.Minute

// Run runs the tests and returns the exit code: failed, too, if goroutines
// other than the runtime's and the test framework's are still running once
// they settled.
func Run(m *testing.M) int {
	if msg := gcOff(); msg != "" {
		fmt.Fprintln(os.Stderr, "leakcheck:", msg)
		return 1
	}
	code := m.Run()
	if code == 0 {
		if leaked := wait(settle); leaked != "" {
			fmt.Fprintf(os.Stderr, "leakcheck: goroutines still running after every test returned:\n\n%s\n", leaked)
			code = 1
		}
	}
	return code
}

// wait returns the stacks of the goroutines still running after d, or "".
func wait(d time.Duration) string {
	deadline := time.Now().Add(d)
	for {
		leaked := running()
		if leaked == "" || time.Now().After(deadline) {
			return leaked
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ignored are goroutines that belong to the runtime, the test framework or
// the standard library's process-wide machinery, not to a test.
var ignored = []string{
	"foldhost/internal/leakcheck.", // the checking goroutine
	"testing.(*M).",                // the test main
	"testing.runFuzzing",           // the fuzzing engine
	"os/signal.signal_recv",        // signal.Notify's reader, process-wide
	"runtime.ensureSigM",           // signal mask handler
	"runtime.goexit1",              // exiting
	"created by runtime.gc",        // GC workers
	"runtime.ReadTrace",            // tracing
}

func running() string {
	var leaked []string
	for _, g := range goroutines() {
		if !isIgnored(g) {
			leaked = append(leaked, g)
		}
	}
	return strings.Join(leaked, "\n\n")
}

// goroutines are the stacks of every goroutine, one string each.
func goroutines() []string {
	buf := make([]byte, 1<<20)
	for {
		n := runtime.Stack(buf, true)
		if n < len(buf) {
			buf = buf[:n]
			break
		}
		buf = make([]byte, 2*len(buf))
	}
	var gs []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		if g != "" {
			gs = append(gs, g)
		}
	}
	return gs
}

func isIgnored(g string) bool {
	for _, s := range ignored {
		if strings.Contains(g, s) {
			return true
		}
	}
	return isObjectPutLeak(g)
}

// isObjectPutLeak reports the one goroutine nats.go (v1.55.0) itself leaks:
// ObjectStore.Put makes a private JetStream context, whose first async
// publish starts resetPendingAcksOnReconnect; Put's deferred cleanup sets
// the status channel that goroutine is about to read to nil, and when the
// cleanup wins the race the goroutine blocks on a nil channel for ever. Only
// that exact state is ignored: the same goroutine blocked on a live channel
// (a JetStream context a test never closed) is still a leak.
func isObjectPutLeak(g string) bool {
	return strings.Contains(g, "[chan receive (nil chan)") &&
		strings.Contains(g, "nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect")
}

// Baseline is the set of goroutines running at one moment.
type Baseline map[string]bool

// Take records the goroutines running now.
func Take() Baseline {
	b := Baseline{}
	for _, g := range goroutines() {
		b[goroutineID(g)] = true
	}
	return b
}

// Check fails t if goroutines started since b (other than the runtime's
// and the test framework's) are still running once they had time to end.
func (b Baseline) Check(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(settle)
	for {
		var leaked []string
		for _, g := range goroutines() {
			if !b[goroutineID(g)] && !isIgnored(g) {
				leaked = append(leaked, g)
			}
		}
		if len(leaked) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("goroutines still running:\n\n%s", strings.Join(leaked, "\n\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func goroutineID(g string) string {
	id, _, _ := strings.Cut(g, " [")
	return id
}

// gcOff explains why the process runs with its collector off, or is "".
func gcOff() string {
	if strings.EqualFold(os.Getenv("GOGC"), "off") {
		return "" // asked for
	}
	if p := GCPercent(); p < 0 {
		return "the garbage collector is off (GOGC=off without the environment asking): a package's init turned it off, and a foldhost process linking it would never free memory"
	}
	return ""
}

// GCPercent is the process' GOGC as the runtime reports it, -1 when the
// collector is off.
func GCPercent() int64 {
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if s[0].Value.Kind() != metrics.KindUint64 {
		return 0 // unknown to this runtime: not off as far as anyone can tell
	}
	v := s[0].Value.Uint64()
	if v > math.MaxInt64 {
		return -1
	}
	return int64(v)
}
