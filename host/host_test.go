package host_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/leakcheck"
)

// TestShutdownWithCallsInFlight: a host shut down while HTTP reads, status
// calls and export rounds are in flight returns, releases everything, and
// leaves no goroutine behind (Run waits for every fold's helpers, Close for
// the plugin watchers).
func TestShutdownWithCallsInFlight(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	base := leakcheck.Take() // the test's server and client end at its cleanup
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Artifacts:      host.ArtifactOptions{Store: store, Where: "test", Holder: "t"},
		PluginCacheDir: filepath.Join(dir, "cache"),
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "a"), ExportInterval: time.Second},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	var last uint64
	for i := range 50 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), fmt.Sprintf(`{"upstreams":[{"addr":"10.0.0.%d:80"}]}`, i))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	srv := hosttest.LoopbackAPI(t, r.H.Handler())
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
	hosttest.WaitFor(t, func() bool { return r.H.Fold("routes").Status().Export.Rounds.Published > 0 })
	if err := r.Stop(t); err != nil {
		t.Fatalf("Run: %v", err)
	}
	close(stop)
	wg.Wait()
	srv.Close()
	client.CloseIdleConnections()
	base.Check(t)
}

// TestReloadPlugins: the explicit reload (SIGHUP for the CLI) validates
// every fold's plugin file again and swaps a changed one at the next batch;
// a raw-only fold has nothing to reload, and a broken file is refused and
// named.
func TestReloadPlugins(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	cBuild, err := os.ReadFile(hosttest.BuiltPlugin(t, "example-router", "router-c"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pluginFile, cBuild, 0o644); err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a")},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	f := r.H.Fold("routes")
	before := f.Status().Plugin.SHA256
	asBuild, err := os.ReadFile(hosttest.BuiltPlugin(t, "example-router", "router-as"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pluginFile, asBuild, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.H.ReloadPlugins(context.Background()); err != nil {
		t.Fatal(err)
	}
	rev := hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	hosttest.WaitCursor(t, f, rev)
	if after := f.Status().Plugin.SHA256; after == before {
		t.Fatal("the reloaded module did not replace the running one at the next batch")
	}
	if err := os.WriteFile(pluginFile, []byte("not wasm"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := r.H.ReloadPlugins(context.Background()); err == nil || !strings.Contains(err.Error(), "fold routes") {
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
