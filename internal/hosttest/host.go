package hosttest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/internal/testhook"
)

// Quiet is a logger that drops everything.
var Quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// RepoRoot is the repository's root: the first directory up from where go
// test started the binary (the package's, read once before any test
// changes directory) that holds go.mod. runtime.Caller would not do: the
// test command builds with -trimpath, which leaves no file paths.
var RepoRoot = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	for dir := wd; ; dir = filepath.Dir(dir) {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		if filepath.Dir(dir) == dir {
			panic("hosttest: no go.mod above " + wd)
		}
	}
}()

// BuiltPlugin is plugins/<dir>/build/<name>.wasm, made by
// scripts/build-plugins (the test command runs it first).
func BuiltPlugin(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(RepoRoot, "plugins", dir, "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
	}
	return p
}

// Running is a started host whose Run goroutine the test stops (Stop, or
// at the test's end).
type Running struct {
	H      *host.Host
	cancel context.CancelFunc
	done   chan error
}

// StartHost starts a host with o and runs it until Stop or the test's end.
// A nil Logger is Quiet; an empty PluginCacheDir takes the test command's
// compile cache.
func StartHost(t testing.TB, o host.Options) *Running {
	t.Helper()
	if o.Logger == nil {
		o.Logger = Quiet
	}
	if o.PluginCacheDir == "" {
		// The test command's compile cache, kept across runs (""
		// without it: every host compiles its plugins, which under the
		// race detector cost a query test 80 s of its 83).
		o.PluginCacheDir = os.Getenv("FOLDHOST_TEST_WASM_CACHE")
	}
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		h.Close()
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &Running{H: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(ctx) }()
	t.Cleanup(func() { r.Stop(t) })
	return r
}

// Stop stops the host and closes it, returning Run's error (nil when it
// was stopped already).
func (r *Running) Stop(t testing.TB) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	err := <-r.done
	r.H.Close()
	return err
}

// StartErr starts a host with o and returns Start's error (the host is
// closed either way; a host that starts is stopped at once).
func StartErr(t testing.TB, o host.Options) error {
	t.Helper()
	if o.Logger == nil {
		o.Logger = Quiet
	}
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.Start(context.Background())
}

// StartChild runs this test binary again with env added (the package's
// TestMain makes it the child those variables name), its stdout piped to
// the caller and its stderr kept.
func StartChild(t *testing.T, env ...string) (*exec.Cmd, io.ReadCloser, *syncbuf.Buffer) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env...)
	stderr := &syncbuf.Buffer{}
	cmd.Stderr = stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return cmd, out, stderr
}

// WaitFor waits until cond holds.
func WaitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 2m")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitCursor waits until the fold's cursor reaches rev; a fold that fails
// first fails the test.
func WaitCursor(t testing.TB, f *host.Fold, rev uint64) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for f.Status().Cursor < rev {
		if st := f.Status(); st.State == httpapi.StateFailed {
			t.Fatalf("cursor %d, want %d: the fold failed: %s", st.Cursor, rev, st.LastError)
		}
		if time.Now().After(deadline) {
			t.Fatalf("cursor %d, want %d: %+v", f.Status().Cursor, rev, f.Status())
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// WaitState waits until f is in state want; on the deadline it fails with
// the fold's whole status (what it was doing instead).
func WaitState(t testing.TB, f *host.Fold, want httpapi.State) httpapi.Status {
	t.Helper()
	return waitStatus(t, f, string(want), func(st httpapi.Status) bool { return st.State == want })
}

// WaitRepair waits until the fold's last repair ended with outcome.
func WaitRepair(t testing.TB, f *host.Fold, outcome string) httpapi.Status {
	t.Helper()
	return waitStatus(t, f, "done with a repair that ended "+outcome, func(st httpapi.Status) bool {
		return st.Repairs.Last != nil && st.Repairs.Last.Outcome == outcome && st.Repairs.Running == nil
	})
}

func waitStatus(t testing.TB, f *host.Fold, what string, ok func(httpapi.Status) bool) httpapi.Status {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := f.Status()
		if ok(st) {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("fold %s not %s within 2m; its status:\n%s", f.Name(), what, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// LoopbackAPI serves h on a loopback listener, with the server's Addr set
// to it as ListenAndServe would (the HTTP API admits token-less admin POSTs
// only when the listener is known to be loopback).
func LoopbackAPI(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Addr = srv.Listener.Addr().String()
	srv.Start()
	return srv
}

// HoldRebuilds holds every view rebuild after its replay until unblock is
// called (or its context ends); replayed is closed when the first one gets
// there.
func HoldRebuilds(t *testing.T) (replayed <-chan struct{}, unblock func()) {
	r, release := make(chan struct{}), make(chan struct{})
	var once, released sync.Once
	unblock = func() { released.Do(func() { close(release) }) }
	testhook.Set(t, &testhook.AfterReplay, func(ctx context.Context, _ bool) {
		once.Do(func() { close(r) })
		select {
		case <-release:
		case <-ctx.Done():
		}
	})
	t.Cleanup(unblock) // before the host stops (cleanups run last first)
	return r, unblock
}

// OutboxLen counts the entries of f's outbox (what is committed and not
// yet published) by reading them, not from the store's counter.
func OutboxLen(f *host.Fold) int {
	n := 0
	if err := f.Store().Outbox(0, func(_ fold.OutboxEntry) error { n++; return nil }); err != nil {
		return -1
	}
	return n
}

// StallLoop holds the fold's live loop on a request, as a stopped process
// would hold it: its watch's channel fills, then the client's, then the
// server's flow control stalls the consumer. It returns once the loop is
// held; release lets it go (and waits until it went). It fails when no
// loop runs.
func StallLoop(ctx context.Context, f *host.Fold) (release func(), err error) {
	l := f.LiveLoop()
	if l == nil {
		return nil, fmt.Errorf("fold %s: no live loop", f.Name())
	}
	held, rel, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- l.Do(ctx, func(context.Context, fold.Target) error {
			close(held)
			<-rel
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		return nil, fmt.Errorf("fold %s: the loop took no request: %v", f.Name(), err)
	}
	return func() { close(rel); <-done }, nil
}
