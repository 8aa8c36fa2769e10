package foldrun_test

import (
	"context"
	"errors"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestFailedFoldLifecycle walks a fold through its supervised states with a
// real plugin file and a real NATS server: a trapping plugin fails the
// fold, which is then not ready (readyz 503 naming it, the ready gauge 0)
// while its head is still polled; a reload (SIGHUP's path) retries it; a
// file that fails validation is refused and shows in the status; a fixed
// module dropped in place resumes it from its cursor without a restart;
// pause and resume hold it and let it go again. Mutations caught: a failed
// fold left ready; the head poll stopped with the watch; the retry on an
// accepted reload or on ReloadPlugins removed; Resume a no-op.
func TestFailedFoldLifecycle(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "trap")))
	r := hosttest.StartHost(t, host.Options{
		NATS:             host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		HeadPollInterval: 20 * time.Millisecond,
		Folds:            []host.FoldOptions{{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a")}},
	})
	f := r.H.Fold("routes")
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	state := func(want httpapi.State) func() bool {
		return func() bool { return f.Status().State == want }
	}

	hosttest.WaitFor(t, func() bool { return f.Status().Ready }) // caught up with the empty bucket
	rev1 := hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	hosttest.WaitFor(t, state(httpapi.StateFailed))
	st := f.Status()
	if st.Ready || !strings.Contains(st.Reason, "failed") {
		t.Errorf("a failed fold: ready %v, reason %q", st.Ready, st.Reason)
	}
	if code, body := hosttest.HTTPGet(t, web.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "fold routes: failed") {
		t.Errorf("readyz of a failed fold: %d %q", code, body)
	}
	if _, m := hosttest.HTTPGet(t, web.URL+"/metrics"); !strings.Contains(m, `foldhost_fold_ready{fold="routes"} 0`) ||
		!strings.Contains(m, `foldhost_fold_state{fold="routes",state="failed"} 1`) {
		t.Errorf("metrics of a failed fold: ready and state gauges wrong:\n%s", hosttest.GrepLines(m, "foldhost_fold_ready", "foldhost_fold_state"))
	}

	// The head is still polled: the lag shows writes the fold cannot take.
	rev2 := hosttest.Put(t, b, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.StreamLastSeq >= rev2 && st.Lag >= rev2-rev1+1 })

	// A reload (what SIGHUP does) retries the failed fold, which fails
	// again on the same module: one more plugin error.
	errsBefore := f.Status().Counters.PluginErrors
	if err := r.H.ReloadPlugins(context.Background()); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		return st.State == httpapi.StateFailed && st.Counters.PluginErrors > errsBefore
	})

	// A file that fails validation is refused, shown, and retries nothing.
	hosttest.PlaceFile(t, pluginFile, []byte("not a wasm module"))
	hosttest.WaitFor(t, func() bool { return f.Status().Plugin.LastReload != nil })
	st = f.Status()
	if rl := st.Plugin.LastReload; rl.Outcome != "refused" || rl.Reason == "" || st.Plugin.Reloads.Refused != 1 || st.State != httpapi.StateFailed {
		t.Errorf("a refused reload: %+v, reloads %+v, state %s", rl, st.Plugin.Reloads, st.State)
	}

	// The fixed module resumes the fold from its cursor, no restart.
	fixed := hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "example-router", "router-c"))
	hosttest.PlaceFile(t, pluginFile, fixed)
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.Cursor >= rev2 && st.Ready })
	st = f.Status()
	if st.State != httpapi.StateFollowing || st.Plugin.LastReload.Outcome != "accepted" || st.Plugin.SHA256 != st.Plugin.LastReload.Module {
		t.Errorf("after the fix: state %s, plugin %+v", st.State, st.Plugin)
	}
	if code, body := hosttest.HTTPGet(t, web.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("readyz after the fix: %d %q", code, body)
	}

	// Pause: the watch stops at a batch boundary, the head is still polled.
	if err := f.Resume(); !errors.Is(err, foldrun.ErrNothingToResume) {
		t.Errorf("resume of a following fold: %v", err)
	}
	if err := f.Pause(); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, state(httpapi.StatePaused))
	rev3 := hosttest.Put(t, b, "route.c", `{"upstreams":[{"addr":"10.0.0.3:80"}]}`)
	hosttest.WaitFor(t, func() bool { return f.Status().StreamLastSeq >= rev3 })
	if st := f.Status(); st.Cursor >= rev3 || st.Ready || !strings.Contains(st.Reason, "paused") {
		t.Errorf("a paused fold: cursor %d (the write at %d folded?), ready %v, reason %q", st.Cursor, rev3, st.Ready, st.Reason)
	}
	// A reload does not unpause a paused fold.
	if err := r.H.ReloadPlugins(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Resumed through the HTTP API (a loopback listener: admitted).
	resp, err := http.Post(web.URL+"/v1/folds/routes/resume", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST resume: %s", resp.Status)
	}
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		return st.Cursor >= rev3 && st.Ready && st.State == httpapi.StateFollowing
	})
	if err := r.Stop(t); err != nil {
		t.Errorf("a host whose fold recovered: Run returned %v", err)
	}
}

// TestShutdownOfAFailedFold: a fold still failed when the host shuts down
// makes Run return its error (the CLI exits 1), and the fold stays failed.
func TestShutdownOfAFailedFold(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "trap"), DataDir: filepath.Join(dir, "a")}},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "route.a", `{}`)
	hosttest.WaitFor(t, func() bool { return f.Status().State == httpapi.StateFailed })
	if err := r.Stop(t); err == nil || !strings.Contains(err.Error(), "fold routes") {
		t.Errorf("Run of a host with a failed fold returned %v", err)
	}
	if st := f.Status(); st.State != httpapi.StateFailed {
		t.Errorf("state after shutdown: %s, want failed", st.State)
	}
	if err := f.Pause(); err == nil {
		t.Error("Pause after shutdown succeeded")
	}
}

// TestStatusFollowsReloadsAndRecovery: the status names the module the
// fold folds with as soon as it is settled, without waiting for a write:
// after an accepted reload of the same view schema, after a live rebuild
// for another one, and after a fold that failed recovers; and last_error
// is cleared once the fold recovered. (Both showed the old module, and
// last_error the old error, until the next write.)
func TestStatusFollowsReloadsAndRecovery(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a")}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k1", "v1"))
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })
	running := func(name, version string) func() bool {
		return func() bool {
			p := f.Status().Plugin
			return p.Name == name && p.Version == version
		}
	}

	// The same view schema: a swap, named before any write.
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "example-router", "router-c")))
	hosttest.WaitFor(t, func() bool { rl := f.Status().Plugin.LastReload; return rl != nil && rl.Outcome == "accepted" })
	if !running("example-router", "1.0.0")() {
		t.Errorf("after an accepted reload the status names %+v, want example-router 1.0.0", f.Status().Plugin.PluginIdentity)
	}

	// Another view schema: a live rebuild, whose module is named once it
	// switched in.
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.Rebuild != nil && st.Rebuild.Last != nil })
	if st := f.Status(); st.Rebuild.Last.Outcome != "done" || !running("testdata-keyview", "1.2")() {
		t.Errorf("after a live rebuild (%+v) the status names %+v, want testdata-keyview 1.2", st.Rebuild.Last, st.Plugin.PluginIdentity)
	}

	// keyview2 traps on "trap2": the fold fails, and says why.
	hosttest.Put(t, b, "k2", "trap2")
	hosttest.WaitFor(t, func() bool { return f.Status().State == httpapi.StateFailed })
	if e := f.Status().LastError; e == "" {
		t.Fatal("a failed fold without last_error")
	}
	// keyview1 folds it: the fold rebuilds its views, follows again, and
	// the error it recovered from is gone.
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	hosttest.WaitFor(t, func() bool { return f.Status().State == httpapi.StateFollowing })
	if st := f.Status(); st.LastError != "" || !running("testdata-keyview", "1.1")() {
		t.Errorf("a fold that recovered: last_error %q, plugin %+v (want none, testdata-keyview 1.1)", st.LastError, st.Plugin.PluginIdentity)
	}
}
