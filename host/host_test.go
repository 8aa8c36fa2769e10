package host_test

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
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/leakcheck"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

// builtPlugin is plugins/<dir>/build/<name>.wasm, made by
// scripts/build-plugins (the test command runs it first).
func builtPlugin(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(testDir, "..", "plugins", dir, "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
	}
	abs, _ := filepath.Abs(p)
	return abs
}

// natsServer is an embedded NATS server for one test, with a client.
func natsServer(t testing.TB) (string, *natskv.Bucket) {
	t.Helper()
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: 64}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), b
}

func put(t testing.TB, b *natskv.Bucket, key, value string) uint64 {
	t.Helper()
	rev, err := b.KV().Put(context.Background(), key, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// waitCursor waits until the fold's cursor reaches rev; the ceiling is
// against a hang, not a measure of speed.
func waitCursor(t testing.TB, f *host.Fold, rev uint64) {
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

// running is a started host whose Run goroutine the test stops.
type running struct {
	h      *host.Host
	cancel context.CancelFunc
	done   chan error
}

func startHost(t testing.TB, o host.Options) *running {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
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
	r := &running{h: h, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- h.Run(ctx) }()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// startChild runs this test binary again with env added (TestMain makes
// it the child those variables name), its stdout piped to the caller and
// its stderr kept.
func startChild(t *testing.T, env ...string) (*exec.Cmd, io.ReadCloser, *syncbuf.Buffer) {
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

func (r *running) stop(t testing.TB) error {
	if r.cancel == nil {
		return nil
	}
	r.cancel()
	r.cancel = nil
	err := <-r.done
	r.h.Close()
	return err
}

// TestShutdownWithCallsInFlight: a host shut down while HTTP reads, status
// calls and export rounds are in flight returns, releases everything, and
// leaves no goroutine behind (Run waits for every fold's helpers, Close for
// the plugin watchers).
func TestShutdownWithCallsInFlight(t *testing.T) {
	url, b := natsServer(t)
	base := leakcheck.Take() // the test's server and client end at its cleanup
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := startHost(t, host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Artifacts:      host.ArtifactOptions{Store: store, Where: "test", Holder: "t"},
		PluginCacheDir: filepath.Join(dir, "cache"),
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: builtPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "a"), ExportInterval: time.Second},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	var last uint64
	for i := range 50 {
		last = put(t, b, fmt.Sprintf("route.h%d", i), fmt.Sprintf(`{"upstreams":[{"addr":"10.0.0.%d:80"}]}`, i))
	}
	waitCursor(t, r.h.Fold("routes"), last)
	srv := loopbackAPI(t, r.h.Handler())
	stop := make(chan struct{})
	var wg sync.WaitGroup
	client := &http.Client{}
	for _, path := range []string{"/v1/folds", "/v1/folds/routes/view?prefix=host/", "/v1/folds/raw/raw?prefix=route.", "/metrics", "/readyz"} {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if resp, err := client.Get(srv.URL + path); err == nil {
					_, _ = io.Copy(io.Discard, resp.Body)
					resp.Body.Close()
				}
			}
		})
	}
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			if resp, err := client.Post(srv.URL+"/v1/folds/routes/export?force=true", "", nil); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}
	})
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			_, _ = b.KV().Put(context.Background(), "route.busy", []byte(`{"upstreams":[{"addr":"10.9.9.9:80"}]}`))
		}
	})
	// Let some of each happen, then shut down under them.
	waitFor(t, func() bool { return r.h.Fold("routes").Status().Export.Rounds.Published > 0 })
	if err := r.stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	close(stop)
	wg.Wait()
	srv.Close()
	client.CloseIdleConnections()
	base.Check(t)
}

// waitState waits until f is in state want; on the deadline it fails with
// the fold's whole status (what it was doing instead).
func waitState(t testing.TB, f *host.Fold, want httpapi.State) httpapi.Status {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := f.Status()
		if st.State == want {
			return st
		}
		if time.Now().After(deadline) {
			b, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("fold %s not %s within 2m; its status:\n%s", f.Name(), want, b)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// loopbackAPI serves h on a loopback listener, with the server's Addr set
// to it as ListenAndServe would (the HTTP API admits token-less admin POSTs
// only when the listener is known to be loopback).
func loopbackAPI(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Addr = srv.Listener.Addr().String()
	srv.Start()
	return srv
}

func waitFor(t testing.TB, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 2m")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestReloadPlugins: the explicit reload (SIGHUP for the CLI) validates
// every fold's plugin file again and swaps a changed one at the next batch;
// a raw-only fold has nothing to reload, and a broken file is refused and
// named.
func TestReloadPlugins(t *testing.T) {
	url, b := natsServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	cBuild, err := os.ReadFile(builtPlugin(t, "example-router", "router-c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pluginFile, cBuild, 0o644); err != nil {
		t.Fatal(err)
	}
	r := startHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a")},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	f := r.h.Fold("routes")
	before := f.Status().Plugin.SHA256
	asBuild, err := os.ReadFile(builtPlugin(t, "example-router", "router-as"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pluginFile, asBuild, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.h.ReloadPlugins(context.Background()); err != nil {
		t.Fatal(err)
	}
	rev := put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	waitCursor(t, f, rev)
	if after := f.Status().Plugin.SHA256; after == before {
		t.Fatal("the reloaded module did not replace the running one at the next batch")
	}
	if err := os.WriteFile(pluginFile, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.h.ReloadPlugins(context.Background()); err == nil || !strings.Contains(err.Error(), "fold routes") {
		t.Fatalf("reload of a broken file: %v, want a refusal naming the fold", err)
	}
}

// TestLifecycleMisuse: Run before Start, and a second Run, are errors.
func TestLifecycleMisuse(t *testing.T) {
	h, err := host.New(host.Options{Folds: []host.FoldOptions{{Name: "a", DataDir: t.TempDir()}}})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Run(context.Background()); err == nil {
		t.Fatal("Run before Start succeeded")
	}
	if _, err := host.New(host.Options{}); err == nil {
		t.Fatal("New with no folds succeeded")
	}
	if _, err := host.New(host.Options{Folds: []host.FoldOptions{{Name: "a", DataDir: "relative"}}}); err == nil {
		t.Fatal("New with a relative data dir succeeded")
	}
}

// testDir is this package's directory: go test starts a test binary there
// (read once, before any test changes directory). runtime.Caller would not
// do: the test command builds with -trimpath, which leaves no file paths.
var testDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()
