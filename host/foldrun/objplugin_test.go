package foldrun_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// records reads the plugin record bucket, by node.
func records(t testing.TB, js jetstream.JetStream) map[string]pluginobj.Record {
	t.Helper()
	recs, bad, err := pluginobj.List(context.Background(), js, pluginobj.DefaultRecordBucket)
	if err != nil || bad != 0 {
		t.Fatalf("records: %v (%d unreadable)", err, bad)
	}
	m := map[string]pluginobj.Record{}
	for _, r := range recs {
		m[r.Node] = r
	}
	return m
}

// TestPluginRolloutThroughNATS: two nodes whose fold loads its module from
// a NATS object store pick up each new version pushed there (validated,
// swapped at a batch boundary) and record what they run; a version that
// fails validation is refused on both, which keep the module they ran.
// Mutations caught: the object watch not reloading (nodes stay on v1); a
// refused module swapped in anyway (the nodes would fail on it).
func TestPluginRolloutThroughNATS(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	v1 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	dir := t.TempDir()
	opts := func(node string) host.Options {
		return host.Options{
			NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Admin: host.AdminOptions{Node: node},
			Folds: []host.FoldOptions{{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(dir, node)}},
		}
	}
	nodes := []string{"x", "y"}
	var folds []*host.Fold
	for _, n := range nodes {
		folds = append(folds, hosttest.StartHost(t, opts(n)).H.Fold("routes"))
	}
	// runs waits until every node folded a new key with module sha (a
	// swap lands at a batch boundary) and recorded it.
	runs := func(sha, key string) {
		t.Helper()
		rev := hosttest.Put(t, b, key, "v")
		for _, f := range folds {
			hosttest.WaitCursor(t, f, rev)
			if got := f.Status().Plugin.SHA256; got != sha {
				t.Fatalf("node folds with %.12s, want %.12s (last reload %+v)", got, sha, f.Status().Plugin.LastReload)
			}
			if v := foldViews(t, f)["s1/"+key]; v != "v" {
				t.Fatalf("view of %s = %q", key, v)
			}
		}
		hosttest.WaitFor(t, func() bool {
			recs := records(t, js)
			for _, n := range nodes {
				if r := recs[n]; r.Module != sha || r.Fold != "routes" || r.Source != ref.String() {
					return false
				}
			}
			return true
		})
	}
	runs(v1, "a")

	// v2 (another build, same view schema): every node takes it.
	v2bytes := hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	v2bytes = append(v2bytes, customSection("rollout", "v2")...)
	if _, err := pluginobj.Push(context.Background(), js, ref, v2bytes, "v2"); err != nil {
		t.Fatal(err)
	}
	v2 := wasm.ModuleHash(v2bytes)
	for _, f := range folds {
		hosttest.WaitFor(t, func() bool { rl := f.Status().Plugin.LastReload; return rl != nil && rl.Module == v2 })
	}
	runs(v2, "b")

	// A module that fails validation: refused everywhere, v2 stays.
	hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "noexport"))
	for _, f := range folds {
		hosttest.WaitFor(t, func() bool { rl := f.Status().Plugin.LastReload; return rl != nil && rl.Outcome == "refused" })
	}
	runs(v2, "c")
	for _, n := range nodes {
		if r := records(t, js)[n]; r.LastReload == nil || r.LastReload.Outcome != "refused" || r.LastReload.Reason == "" {
			t.Errorf("node %s's record: %+v, want its refusal", n, r)
		}
	}
	if st := folds[0].Status().Plugin; st.Source != ref.String() || st.Reloads.Accepted != 1 || st.Reloads.Refused != 1 {
		t.Errorf("plugin status %+v", st)
	}
}

// customSection is a WASM custom section: another module's bytes for the
// same code.
func customSection(name, data string) []byte {
	payload := append([]byte{byte(len(name))}, name...)
	payload = append(payload, data...)
	return append([]byte{0, byte(len(payload))}, payload...)
}

// TestPinnedPluginObject: a reference pinned to a digest loads only that
// content: a start against another one fails naming it; a node pinned to
// v1 keeps running v1 when v2 is pushed, and still starts with v1 after
// that push (Push keeps each version beside the latest: the staged
// rollout's restart). Mutations caught: the pin check removed (the first
// start runs); the version object not used (the restart fails).
func TestPinnedPluginObject(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	v1 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	dir := t.TempDir()
	o := func(pin string) host.Options {
		r := ref
		r.Pin = pin
		return host.Options{
			NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Logger: hosttest.Quiet,
			Folds:  []host.FoldOptions{{Name: "routes", Plugin: r.String(), DataDir: filepath.Join(dir, "a")}},
		}
	}
	if err := hosttest.StartErr(t, o(strings.Repeat("0", 64))); !errors.Is(err, pluginobj.ErrPinMismatch) || !strings.Contains(err.Error(), v1) {
		t.Fatalf("a start pinned to another digest: %v", err)
	}
	r := hosttest.StartHost(t, o(v1))
	hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview2"))
	rev := hosttest.Put(t, b, "k", "v")
	hosttest.WaitCursor(t, r.H.Fold("routes"), rev)
	if st := r.H.Fold("routes").Status().Plugin; st.SHA256 != v1 {
		t.Fatalf("runs %.12s, want the pinned %.12s", st.SHA256, v1)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	r = hosttest.StartHost(t, o(v1)) // after the push of v2: still v1
	rev = hosttest.Put(t, b, "k2", "v")
	hosttest.WaitCursor(t, r.H.Fold("routes"), rev)
	if st := r.H.Fold("routes").Status().Plugin; st.SHA256 != v1 || foldViews(t, r.H.Fold("routes"))["s1/k2"] != "v" {
		t.Fatalf("restarted pinned node runs %.12s, want %.12s", st.SHA256, v1)
	}
}

// TestPluginObjectDownloadStall: a download whose chunks never come (what
// a fetch in flight meets when a push replaces the object) is not a verdict
// on the module: it ends within its budget and the version is looked at
// again, so once its chunks arrive it is taken; a host stopped during such
// a download stops at once. Mutations caught: a failed download final for
// its digest (v2 never taken); the fetch not returning on cancellation
// (the stop waits).
func TestPluginObjectDownloadStall(t *testing.T) {
	testhook.Set(t, &testhook.ObjectPoll, time.Second)
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	v1b := hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	logs := &syncbuf.Buffer{}
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(t.TempDir(), "a")}}})
	f := r.H.Fold("routes")
	v2b := append(bytes.Clone(v1b), customSection("x", "v2")...)
	chunk := chunklessMeta(t, js, ref, v2b)
	hosttest.WaitFor(t, func() bool { return strings.Contains(logs.String(), "could not download the plugin object; retried") })
	if st := f.Status().Plugin; st.Reloads.Refused != 0 || st.LastReload != nil {
		t.Errorf("a stalled download counted as a verdict: %+v", st)
	}
	// The object becomes whole, its digest unchanged: only a retry sees it.
	if _, err := js.Publish(context.Background(), chunk, v2b); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { rl := f.Status().Plugin.LastReload; return rl != nil && rl.Module == wasm.ModuleHash(v2b) })
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k", "v"))

	n := strings.Count(logs.String(), "plugin object changed; loading it")
	chunklessMeta(t, js, ref, append(bytes.Clone(v1b), customSection("x", "gone again")...))
	hosttest.WaitFor(t, func() bool { return strings.Count(logs.String(), "plugin object changed; loading it") > n })
	start := time.Now()
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the stop during a stalled download took %v", d)
	}
}

// chunklessMeta publishes a meta record for ref whose chunks do not exist:
// what a download in flight finds after a push replaced the object.
// It returns the subject of the missing chunk.
func chunklessMeta(t *testing.T, js jetstream.JetStream, ref pluginobj.Ref, body []byte) string {
	t.Helper()
	id, d := nats.NewInbox()[7:], sha256.Sum256(body)
	mb, err := json.Marshal(map[string]any{"name": ref.Name, "bucket": ref.Bucket, "nuid": id,
		"size": len(body), "chunks": 1, "digest": "SHA-256=" + base64.URLEncoding.EncodeToString(d[:])})
	if err != nil {
		t.Fatal(err)
	}
	m := nats.NewMsg("$O." + ref.Bucket + ".M." + base64.URLEncoding.EncodeToString([]byte(ref.Name)))
	m.Data = mb
	m.Header.Set("Nats-Rollup", "sub")
	if _, err := js.PublishMsg(context.Background(), m); err != nil {
		t.Fatal(err)
	}
	return "$O." + ref.Bucket + ".C." + id
}

// TestPluginObjectAwaited: a fold whose plugin object has not been pushed
// does not hold up the host: Start returns, the other fold follows, and the
// HTTP API answers; the waiting fold is in state waiting with the reason,
// not ready (/readyz 503 naming it, the state gauge), refuses pause and
// rebuild (409). A version the runtime refuses keeps it waiting, saying
// so; the next valid version starts it, and it folds with it. Mutation
// caught: the start waiting for the object (it did: the whole process hung
// until a push, the HTTP API never listening).
func TestPluginObjectAwaited(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	logs := &syncbuf.Buffer{}
	dir := t.TempDir()
	h, err := host.New(host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(dir, "a")},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	// Bounded only against a hang: the start touches the object once.
	sctx, scancel := context.WithTimeout(context.Background(), time.Minute)
	defer scancel()
	if err := h.Start(sctx); err != nil {
		t.Fatalf("the start with a plugin object not pushed yet: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	defer func() { cancel(); <-done }()
	web := hosttest.LoopbackAPI(t, h.Handler())
	defer web.Close()

	f, raw := h.Fold("routes"), h.Fold("raw")
	rev := hosttest.Put(t, b, "k", "v")
	hosttest.WaitCursor(t, raw, rev) // the other fold runs
	st := f.Status()
	want := "waiting for its plugin module nats-object://plugins/router to be pushed (foldhost plugin push FILE --fold routes)"
	if st.State != httpapi.StateWaiting || st.Ready || !strings.Contains(st.Reason, want) || st.Plugin.Source != ref.String() {
		t.Fatalf("the waiting fold: state %s, ready %v, reason %q, plugin source %q", st.State, st.Ready, st.Reason, st.Plugin.Source)
	}
	if code, body := hosttest.HTTPGet(t, web.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "fold routes: "+want) || strings.Contains(body, "fold raw") {
		t.Errorf("readyz with a waiting fold: %d %q", code, body)
	}
	if _, m := hosttest.HTTPGet(t, web.URL+"/metrics"); !strings.Contains(m, `foldhost_fold_state{fold="routes",state="waiting"} 1`) ||
		!strings.Contains(m, `foldhost_fold_state{fold="raw",state="following"} 1`) {
		t.Errorf("state gauges:\n%s", hosttest.GrepLines(m, "foldhost_fold_state"))
	}
	for path, code := range map[string]int{"pause": 409, "resume": 409, "rebuild": 409, "reload": 200} {
		resp, err := http.Post(web.URL+"/v1/folds/routes/"+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("POST %s on a waiting fold: %d, want %d", path, resp.StatusCode, code)
		}
	}

	// A version that fails validation: refused, still waiting.
	if _, err := pluginobj.Push(context.Background(), js, ref, []byte("not a wasm module"), "bad"); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { return strings.Contains(f.Status().Reason, "was refused") })
	if st := f.Status(); st.State != httpapi.StateWaiting || st.Ready {
		t.Fatalf("after a refused version: state %s, ready %v", st.State, st.Ready)
	}
	v1 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	hosttest.WaitCursor(t, f, rev)
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })
	if st := f.Status().Plugin; st.SHA256 != v1 {
		t.Fatalf("runs %.12s, want %.12s", st.SHA256, v1)
	}
	if v := foldViews(t, f)["s1/k"]; v != "v" {
		t.Errorf("view of k = %q", v)
	}
	if code, body := hosttest.HTTPGet(t, web.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("readyz once the module loaded: %d %q", code, body)
	}
	if l := logs.String(); !strings.Contains(l, "the plugin module has not been pushed: the fold waits for it, the rest of the host starts") {
		t.Errorf("no log line at the start:\n%s", hosttest.GrepLines(l, "plugin"))
	}
}

// TestPluginObjectAwaitedStops: a host stopped while a fold still waits
// for its module stops cleanly (the fold is stopped, Run returns nil).
func TestPluginObjectAwaitedStops(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	h, err := host.New(host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Logger: hosttest.Quiet,
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: "nats-object://plugins/router", DataDir: filepath.Join(t.TempDir(), "a")}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	f := h.Fold("routes")
	hosttest.WaitFor(t, func() bool { return f.Status().State == httpapi.StateWaiting })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	if st := f.Status().State; st != httpapi.StateStopped {
		t.Errorf("state after the stop: %s", st)
	}
}

// TestPluginObjectSizeBound: an object over plugin_max_mb is refused
// before it is downloaded.
func TestPluginObjectSizeBound(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	err := hosttest.StartErr(t, host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Logger: hosttest.Quiet,
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: ref.String(), PluginMaxBytes: 100, DataDir: filepath.Join(t.TempDir(), "a")}},
	})
	if !errors.Is(err, pluginobj.ErrTooLarge) {
		t.Fatalf("a start with an object over the bound: %v", err)
	}
}

// TestPluginObjectNames: a host with an object-store fold refuses a node or
// fold name that cannot be a token of its record's KV key (the records
// would never be written).
func TestPluginObjectNames(t *testing.T) {
	for _, o := range []host.Options{
		{Admin: host.AdminOptions{Node: "web:1"}, Folds: []host.FoldOptions{{Name: "routes", Plugin: "nats-object://p/r", DataDir: "/x"}}},
		{Admin: host.AdminOptions{Node: "n1"}, Folds: []host.FoldOptions{{Name: "rou tes", Plugin: "nats-object://p/r", DataDir: "/x"}}},
	} {
		if _, err := host.New(o); err == nil || !strings.Contains(err.Error(), "A-Z a-z 0-9 - _ =") {
			t.Errorf("node %q, fold %q: %v", o.Admin.Node, o.Folds[0].Name, err)
		}
	}
	if _, err := host.New(host.Options{Admin: host.AdminOptions{Node: "web:1"},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: "/plugin.wasm", DataDir: "/x"}}}); err != nil {
		t.Errorf("a file plugin's host with that node name: %v", err)
	}
}

// TestPluginObjectRebuildFailureRecorded: a pushed version of another view
// schema whose rebuild fails (it traps on a key of the fold) leaves the node
// on the old module, and the node's record says the rebuild failed, not
// only that the version was accepted. Mutation caught: the rebuild's
// outcome left out of the record.
func TestPluginObjectRebuildFailureRecorded(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	v1 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	f := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Admin: host.AdminOptions{Node: "x"},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(t.TempDir(), "a")}}}).H.Fold("routes")
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k", "trap2")) // schema 2 traps on it
	v2 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview2"))
	hosttest.WaitFor(t, func() bool {
		rb := records(t, js)["x"].LastRebuild
		return rb != nil && rb.Module == v2 && rb.Outcome == "failed"
	})
	if r := records(t, js)["x"]; r.Module != v1 || r.LastRebuild.Error == "" {
		t.Errorf("record %+v, want module v1 and the failed rebuild's error", r)
	}
}

// TestPluginObjectReloadWithoutTheObject: a reload asked for (SIGHUP, the
// admin's reload) when the object cannot be read, here deleted, is no
// verdict on any module: it fails, saying why, and records no refusal; the
// running module stays. It used to count as a refused reload.
func TestPluginObjectReloadWithoutTheObject(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	js := hosttest.JS(t, url)
	ref := pluginobj.Ref{Bucket: "plugins", Name: "router"}
	v1 := hosttest.Push(t, js, ref, hosttest.BuiltPlugin(t, "testdata", "keyview1"))
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: ref.String(), DataDir: filepath.Join(t.TempDir(), "a")}}})
	f := r.H.Fold("routes")
	store, err := js.ObjectStore(context.Background(), ref.Bucket)
	if err != nil {
		t.Fatal(err)
	}
	if err := store.Delete(context.Background(), ref.Name); err != nil {
		t.Fatal(err)
	}
	if err := f.Reload(context.Background()); err == nil || !strings.Contains(err.Error(), "could not download") {
		t.Errorf("reload of a deleted object: %v, want a failure to download", err)
	}
	if st := f.Status().Plugin; st.Reloads.Refused != 0 || st.LastReload != nil || st.SHA256 != v1 {
		t.Errorf("after a reload that could not download: %+v, want no verdict and %.12s running", st, v1)
	}
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k", "v"))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
}
