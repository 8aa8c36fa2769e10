package wasm

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// TestEveryGuestEntryHasADeadline: a module that spins in _initialize or in
// foldhost_info fails Runtime.Load's trial run at its deadline (it used to
// hang startup, reloads and the file watcher whatever the timeout); one
// that spins in foldhost_alloc or foldhost_gc fails its batch with a
// timeout. Without the meter (containNone) none of these calls returns.
func TestEveryGuestEntryHasADeadline(t *testing.T) {
	const timeout = 200 * time.Millisecond
	for _, at := range []string{"init", "info", "alloc", "gc"} {
		t.Run(at, func(t *testing.T) {
			r := newRuntime(t, Options{CallTimeout: timeout, Retries: -1, GCEvery: 1})
			err := within(t, func() error {
				m, err := r.LoadFile(context.Background(), testPlugin(t, "spin-"+at))
				if err != nil {
					return err
				}
				p := r.NewPlugin(m)
				defer p.Close(context.Background())
				_, err = p.Apply(context.Background(), []fold.Update{{Key: "k", Rev: 1}}, emptyReader{})
				return err
			})
			switch at {
			case "init", "info":
				if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), errDeadline.Error()) {
					t.Fatalf("Load: %v, want ErrInvalidModule naming the deadline", err)
				}
			default:
				var pe *PluginError
				if !errors.As(err, &pe) || pe.Kind != KindTimeout {
					t.Fatalf("Apply: %v, want a timeout PluginError", err)
				}
			}
		})
	}
}

// TestLoadHonoursCancellation: without a deadline, the trial run of a module
// that spins in _initialize still ends when the caller's context does (a
// shutdown during start or a reload).
func TestLoadHonoursCancellation(t *testing.T) {
	r := newRuntime(t, Options{CallTimeout: NoCallTimeout})
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(100*time.Millisecond, cancel)
	err := within(t, func() error {
		_, err := r.LoadFile(ctx, testPlugin(t, "spin-init"))
		return err
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Load: %v, want the cancellation", err)
	}
}

// within runs f, failing the test if it has not returned after a ceiling
// far above any deadline here (what it guards against is forever).
func within(t *testing.T, f func() error) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- f() }()
	select {
	case err := <-done:
		return err
	case <-time.After(2 * time.Minute):
		t.Fatal("a guest call did not return: it is not contained")
		return nil
	}
}

const spinChildEnv = "FOLDHOST_WASM_SPIN_CHILD"

// TestSpinningGuestDoesNotFreezeTheProcess: while one plugin spins with no
// deadline, the rest of the process goes on: the Go runtime's
// stop-the-world phases complete (200 forced GCs), and cancelling the
// call's context (a shutdown) ends it. It runs in a child process, because
// the failure it guards against freezes the whole process, test runner
// included. The control runs the same child without containment and
// expects the freeze: the test can tell the two apart.
func TestSpinningGuestDoesNotFreezeTheProcess(t *testing.T) {
	if mode := os.Getenv(spinChildEnv); mode != "" {
		spinChild(t, mode)
		return
	}
	for _, c := range []struct {
		mode   string
		freeze bool
	}{{"metered", false}, {"uncontained", true}} {
		t.Run(c.mode, func(t *testing.T) {
			lines, wait := startChild(t, c.mode)
			expect := func(want string, within time.Duration) bool {
				t.Helper()
				select {
				case line, ok := <-lines:
					if !ok {
						t.Fatalf("child exited before %q: %v", want, wait())
					}
					if line != want {
						t.Fatalf("child said %q, want %q", line, want)
					}
					return true
				case <-time.After(within):
					return false
				}
			}
			if !expect("spinning", 2*time.Minute) {
				t.Fatal("the child's plugin never started")
			}
			if c.freeze {
				// The freeze is forever; a few seconds show it.
				if expect("gc done", 5*time.Second) {
					t.Fatal("GC completed beside an uncontained spinning guest: this test no longer shows what the meter is for")
				}
				return // startChild's cleanup kills the frozen child
			}
			if !expect("gc done", 2*time.Minute) {
				t.Fatal("stop-the-world did not complete while a metered guest spun")
			}
			if !expect("cancelled", 2*time.Minute) {
				t.Fatal("cancelling the context did not end the metered guest's call")
			}
			if err := wait(); err != nil {
				t.Fatalf("child: %v", err)
			}
		})
	}
}

// startChild runs this test in a child process in the given mode and
// returns its stdout lines; the child is killed and reaped at cleanup.
func startChild(t *testing.T, mode string) (<-chan string, func() error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestSpinningGuestDoesNotFreezeTheProcess$", "-test.v=false")
	cmd.Env = append(os.Environ(), spinChildEnv+"="+mode)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string)
	read := make(chan struct{})
	go func() {
		defer close(read)
		defer close(lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), "child: "); ok {
				lines <- l
			}
		}
	}()
	waited := false
	wait := func() error {
		waited = true
		<-read
		return cmd.Wait()
	}
	t.Cleanup(func() {
		if !waited {
			_ = cmd.Process.Kill()
			go func() {
				for range lines { // drain, so the reader ends
				}
			}()
			_ = wait()
		}
	})
	return lines, wait
}

// spinChild is the child's side: it starts spin.wasm with no deadline,
// waits for it to log that it spins, forces GCs, then cancels the call.
func spinChild(t *testing.T, mode string) {
	// No collection until the test forces one: an automatic one starting
	// while the uncontained guest spins would freeze this process before
	// it can say "spinning", and the control would fail for the wrong
	// reason.
	debug.SetGCPercent(-1)
	contain := containMetered
	if mode == "uncontained" {
		contain = containNone
	}
	spinning := make(chan struct{}, 1)
	logger := slog.New(logSignal{ch: spinning})
	r, err := NewRuntime(context.Background(), Options{CallTimeout: NoCallTimeout, Retries: -1, Logger: logger, containment: contain})
	if err != nil {
		t.Fatal(err)
	}
	m, err := r.LoadFile(context.Background(), testPlugin(t, "spin"))
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Apply(ctx, []fold.Update{{Key: "k", Rev: 1}}, emptyReader{})
		done <- err
	}()
	<-spinning
	fmt.Println("child: spinning")
	for range 200 {
		runtime.GC()
	}
	fmt.Println("child: gc done")
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("the spinning call ended with %v, want the cancellation", err)
	}
	fmt.Println("child: cancelled")
	p.Close(context.Background())
	r.Close(context.Background())
}

// logSignal is a slog handler that signals when spin.wasm says it spins.
// logSignal signals ch when a log record's message is msg (default
// "spin.wasm: spinning").
type logSignal struct {
	ch  chan struct{}
	msg string
}

func (h logSignal) Enabled(context.Context, slog.Level) bool { return true }
func (h logSignal) Handle(_ context.Context, r slog.Record) error {
	if want := h.msg; r.Message == want || want == "" && r.Message == "spin.wasm: spinning" {
		select {
		case h.ch <- struct{}{}:
		default:
		}
	}
	return nil
}
func (h logSignal) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h logSignal) WithGroup(string) slog.Handler      { return h }

// TestModuleFileBounds: a plugin path naming something other than a
// regular file, or a file over the size limit, is refused without being
// read (plugin = "/dev/zero" used to read until the machine ran out of
// memory, a FIFO blocked forever), and so is the hot-reload path.
func TestModuleFileBounds(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "fifo.wasm")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Options{MaxModuleBytes: 1 << 20})
	for _, path := range []string{"/dev/zero", fifo, dir} {
		err := within(t, func() error { _, err := r.LoadFile(context.Background(), path); return err })
		if !errors.Is(err, files.ErrNotRegular) {
			t.Errorf("%s: %v, want ErrNotRegular", path, err)
		}
	}
	// The Go router is 2.7 MB: over a 1 MiB limit.
	if _, err := r.LoadFile(context.Background(), goRouterWasm(t)); !errors.Is(err, files.ErrTooLarge) {
		t.Errorf("over the limit: %v, want ErrTooLarge", err)
	}
	// Reload from /dev/zero: refused, the running module stays.
	m, err := r.LoadFile(context.Background(), cRouterWasm(t))
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	if err := within(t, func() error { return r.Reload(context.Background(), p, "/dev/zero") }); !errors.Is(err, files.ErrNotRegular) {
		t.Fatalf("reload from /dev/zero: %v", err)
	}
	if st := p.Status(); !st.ReloadFailed || st.Module.SHA256 != m.SHA256 {
		t.Fatalf("status after the refused reload: %+v", st)
	}
}

// TestSwapsDoNotAccumulateMemory: a module's custom sections are not kept
// (the meter drops them) and a module swapped out is released, so swapping
// in modules that each carry an 8 MiB custom section, ten times, leaves
// the heap where it was (it used to climb by the section's size per swap).
func TestSwapsDoNotAccumulateMemory(t *testing.T) {
	base, err := os.ReadFile(cRouterWasm(t))
	if err != nil {
		t.Fatal(err)
	}
	r := newRuntime(t, Options{})
	m, err := r.Load(context.Background(), base)
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	const section = 8 << 20
	heap := func() uint64 {
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapInuse
	}
	before, open := heap(), openModules.Load()
	for i := range 10 {
		// A custom section named "pad" holding section bytes (and i, so
		// every module differs).
		big := append([]byte{}, base...)
		payload := append([]byte{3, 'p', 'a', 'd', byte(i)}, make([]byte, section)...)
		big = append(append(big, 0), uleb(uint32(len(payload)))...)
		big = append(big, payload...)
		next, err := r.Load(context.Background(), big)
		if err != nil {
			t.Fatal(err)
		}
		p.Swap(next)
		if _, err := p.Apply(context.Background(), []fold.Update{{Key: "route.a", Rev: protocol.Revision(i + 1),
			Value: []byte(`{"upstreams":[{"addr":"a:1"}]}`)}}, emptyReader{}); err != nil {
			t.Fatal(err)
		}
	}
	after := heap()
	t.Logf("heap in use: %d MiB before, %d MiB after 10 swaps of modules with an 8 MiB custom section", before>>20, after>>20)
	if after > before+2*section {
		t.Fatalf("heap grew by %d MiB over 10 swaps", (after-before)>>20)
	}
	if n := openModules.Load(); n != open {
		t.Fatalf("%d modules open after 10 swaps, %d before: swapped-out modules are not released", n, open)
	}
}

func uleb(v uint32) []byte {
	var b []byte
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v == 0 {
			return append(b, c)
		}
		b = append(b, c|0x80)
	}
}

// cRouterWasm is the C build of the example router (small and quick to
// compile).
func cRouterWasm(t testing.TB) string {
	t.Helper()
	return builtPlugin(t, "example-router", "router-c")
}
