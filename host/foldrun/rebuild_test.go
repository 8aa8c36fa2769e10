package foldrun_test

import (
	"bufio"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// foldViews reads every view entry of f from one snapshot.
func foldViews(t testing.TB, f *host.Fold) map[string]string { return hosttest.ViewsOf(t, f) }

// keyviewOf is what the keyview plugin of schema makes of f's raw fold.
func keyviewOf(t testing.TB, f *host.Fold, schema int) map[string]string {
	t.Helper()
	_, want := viewsAndKeyview(t, f, schema)
	return want
}

// viewsAndKeyview reads, from one snapshot, f's views and what the keyview
// plugin of schema makes of its raw fold (two snapshots could straddle a
// commit).
func viewsAndKeyview(t testing.TB, f *host.Fold, schema int) (views, want map[string]string) {
	t.Helper()
	sn, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	views, want = map[string]string{}, map[string]string{}
	if err := sn.ViewRange(nil, func(k, v []byte) error { views[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := sn.RawRange("", func(k []byte, _ protocol.Revision, v []byte) error {
		want[fmt.Sprintf("s%d/%s", schema, k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return views, want
}

// mixedSchemas reports whether views hold keys of both schemas.
func mixedSchemas(views map[string]string) bool {
	var s1, s2 bool
	for k := range views {
		s1 = s1 || strings.HasPrefix(k, "s1/")
		s2 = s2 || strings.HasPrefix(k, "s2/")
	}
	return s1 && s2
}

// TestViewRebuildOnReload: a reload that brings a module of another view
// schema while the fold follows rebuilds the views beside the live fold,
// under a stream of writes and deletes: the old views (and module) serve
// and fold until one commit switches the new ones in; a reader never sees
// the two schemas mixed; at the end the views are exactly what the new
// plugin makes of the raw fold (a fresh fold of the same data), and the
// fold runs the new module. Mutations caught: the catch-up dropped (keys
// written during the rebuild keep their snapshot values or linger when
// deleted); a plain swap instead of a rebuild (both schemas mixed).
func TestViewRebuildOnReload(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	// The rebuild waits after its replay until the live fold folded
	// writes and deletes the snapshot did not have: the catch-up always
	// has work, however fast the replay (the writer below adds more, at
	// random moments).
	replayed, unblock := hosttest.HoldRebuilds(t)
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a"), BatchSize: 7}},
	})
	f := r.H.Fold("routes")
	var last uint64
	for i := range 5000 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%04d", i), fmt.Sprint(i))
	}
	hosttest.WaitCursor(t, f, last)

	// Writes and deletes go on while the rebuild runs.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writerErr error
	var mu sync.Mutex
	wg.Go(func() {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			key := fmt.Sprintf("k%04d", rng.IntN(6000))
			var err error
			if rng.IntN(4) == 0 {
				err = b.KV().Delete(context.Background(), key)
			} else {
				_, err = b.KV().Put(context.Background(), key, []byte(fmt.Sprintf("w%d", n)))
			}
			mu.Lock()
			if err != nil && writerErr == nil {
				writerErr = err
			}
			mu.Unlock()
		}
	})
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	<-replayed
	for i := range 50 {
		key := fmt.Sprintf("k%04d", i*7)
		if i%5 == 0 {
			if err := b.KV().Delete(context.Background(), key); err != nil {
				t.Fatal(err)
			}
			continue
		}
		hosttest.Put(t, b, key, "during")
	}
	held := hosttest.Put(t, b, "held", "h")
	hosttest.WaitCursor(t, f, held) // folded by the old module, into the old views
	if v := foldViews(t, f)["s1/held"]; v != "h" {
		t.Fatalf("the live fold during the rebuild: view s1/held = %q", v)
	}
	unblock()
	sawRunning, samples := false, 0
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		if st.Rebuild != nil && st.Rebuild.Running != nil {
			sawRunning = true
			if !st.Rebuild.Running.Live || st.State != httpapi.StateFollowing {
				t.Errorf("a rebuild begun by a reload while following: %+v, state %s", st.Rebuild.Running, st.State)
			}
		}
		if views := foldViews(t, f); mixedSchemas(views) {
			t.Fatalf("a reader saw both view schemas at once (%d entries)", len(views))
		}
		samples++
		return st.Rebuild != nil && st.Rebuild.Last != nil
	})
	close(stop)
	wg.Wait()
	if writerErr != nil {
		t.Fatal(writerErr)
	}
	// A sentinel put after the writer stopped: once folded, so is every
	// write and delete before it (a delete returns no revision to wait for).
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "sentinel", "s"))
	if got, want := viewsAndKeyview(t, f, 2); !maps.Equal(got, want) {
		t.Errorf("views after the rebuild: %d entries, want %d (the new plugin over the raw fold)%s", len(got), len(want), diffSample(got, want))
	}
	st := f.Status()
	// CaughtUp >= 51: the writes made while the rebuild was held (and
	// whatever the writer added).
	if l := st.Rebuild.Last; l.Outcome != "done" || !l.Live || l.Replayed == 0 || l.CaughtUp < 51 {
		t.Fatalf("the rebuild: %+v", l)
	}
	t.Logf("rebuild: %+v (seen running: %v, %d reads sampled)", *st.Rebuild.Last, sawRunning, samples)
	if st := f.Status(); st.Plugin.ViewSchema != 2 || st.Plugin.Version != "1.2" {
		t.Errorf("the fold runs %+v, want the schema 2 module", st.Plugin.PluginIdentity)
	}
	// And it folds on through the new module.
	rev := hosttest.Put(t, b, "after", "x")
	hosttest.WaitCursor(t, f, rev)
	if v := foldViews(t, f)["s2/after"]; v != "x" {
		t.Errorf("a write after the switch: view s2/after = %q", v)
	}
}

// TestViewRebuildFailureKeepsTheOldViews: a new module that traps on a key
// of the fold fails its rebuild: the old views and the old module stay, and
// the fold folds on with them.
func TestViewRebuildFailureKeepsTheOldViews(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a"), PluginRetries: wasm.NoRetries}},
	})
	f := r.H.Fold("routes")
	hosttest.Put(t, b, "a", "1")
	last := hosttest.Put(t, b, "poison", "trap2") // fine for schema 1
	hosttest.WaitCursor(t, f, last)
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.Rebuild != nil && st.Rebuild.Last != nil })
	st := f.Status()
	if l := st.Rebuild.Last; l.Outcome != "failed" || !strings.Contains(l.Error, "poison") {
		t.Errorf("the rebuild: %+v", l)
	}
	if st.Plugin.ViewSchema != 1 || st.State != httpapi.StateFollowing {
		t.Errorf("after a failed rebuild: plugin %+v, state %s", st.Plugin.PluginIdentity, st.State)
	}
	rev := hosttest.Put(t, b, "b", "2")
	hosttest.WaitCursor(t, f, rev)
	if got, want := viewsAndKeyview(t, f, 1); !maps.Equal(got, want) {
		t.Errorf("views after a failed rebuild: %v, want %v", got, want)
	}
}

// TestPluginAddedToARawOnlyFold: a fold that folded raw only, restarted
// with a plugin, rebuilds its views from the raw fold before it follows
// (state rebuilding), so the plugin sees the data it never saw; a restart
// with the same plugin rebuilds nothing. Mutation caught: no rebuild at
// start (the views hold only what was written after the restart).
func TestPluginAddedToARawOnlyFold(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	fo := host.FoldOptions{Name: "routes", DataDir: filepath.Join(dir, "a")}
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range 300 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	o.Folds[0].Plugin = hosttest.BuiltPlugin(t, "testdata", "keyview1")
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	rev := hosttest.Put(t, b, "new", "n")
	hosttest.WaitCursor(t, f, rev)
	st := f.Status()
	if st.Rebuild == nil || st.Rebuild.Last == nil || st.Rebuild.Last.Outcome != "done" || st.Rebuild.Last.Live ||
		!strings.Contains(st.Rebuild.Last.Why, "raw-only") || st.Rebuild.Last.Replayed != 300 {
		t.Fatalf("the start rebuild: %+v", st.Rebuild)
	}
	if got, want := viewsAndKeyview(t, f, 1); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	r = hosttest.StartHost(t, o)
	f = r.H.Fold("routes")
	rev = hosttest.Put(t, b, "again", "a")
	hosttest.WaitCursor(t, f, rev)
	if st := f.Status(); st.Rebuild != nil {
		t.Errorf("a restart with the same plugin rebuilt: %+v", st.Rebuild)
	}
}

// diffSample names a few keys where got and want differ.
func diffSample(got, want map[string]string) string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			out = append(out, fmt.Sprintf("%s: got %q (present %v), want %q", k, g, ok, v))
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: got %q, want absent", k, v))
		}
	}
	if len(out) > 5 {
		out = out[:5]
	}
	return "\n" + strings.Join(out, "\n")
}

// TestRequestedRebuild: POST /v1/folds/{name}/rebuild rebuilds the views
// through the plugin file's module even when its view schema is the
// recorded one: a view entry no plugin output explains (a plugin bug, a
// stray write) is gone afterwards. A raw-only fold has nothing to rebuild
// (409).
func TestRequestedRebuild(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "keyview1"), DataDir: filepath.Join(dir, "a")},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "b")},
		},
	})
	f := r.H.Fold("routes")
	var last uint64
	for i := range 200 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%03d", i), fmt.Sprint(i))
	}
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool { return f.Status().Ready && r.H.Fold("raw").Status().Ready })
	// A stray view entry, committed beside the fold at its cursor.
	if err := f.Store().Commit(fold.Commit{Views: []fold.ViewMutation{{Key: []byte("stray"), Op: fold.ViewPut, Value: []byte("x")}},
		Cursor: f.Store().Cursor()}); err != nil {
		t.Fatal(err)
	}
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	post := func(path string) int {
		resp, err := http.Post(web.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if code := post("/v1/folds/raw/rebuild"); code != http.StatusConflict {
		t.Errorf("rebuild of a raw-only fold: %d, want 409", code)
	}
	if code := post("/v1/folds/routes/rebuild"); code != http.StatusOK {
		t.Fatalf("rebuild: %d", code)
	}
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.Rebuild != nil && st.Rebuild.Last != nil })
	if l := f.Status().Rebuild.Last; l.Outcome != "done" || !strings.Contains(l.Why, "operator") {
		t.Errorf("the requested rebuild: %+v", l)
	}
	if got, want := viewsAndKeyview(t, f, 1); !maps.Equal(got, want) {
		t.Errorf("views after a requested rebuild: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
}

// TestRestartMidRebuild: a process that died during a rebuild left a
// half-written shadow and the old views with their schema recorded; the
// restart, whose plugin file now holds the new schema, serves the old views
// until the rebuild it runs before following switches in, and the shadow's
// leftovers are gone. (A half-written shadow is what a SIGKILL leaves: the
// shadow's writes never touch the views, the identity or the cursor.)
// Mutation caught: no rebuild at start when the schema differs (the views
// mix both schemas). The leftover is dropped twice over (by Open, see
// fold's TestShadowSwitchesInOneCommit, and by the rebuild's BeginShadow).
func TestRestartMidRebuild(t *testing.T) {
	b, pluginFile, o := seedKeyview(t, 300)
	// The dead rebuild's leftovers.
	st, _, err := fold.Open(o.Folds[0].DataDir, fold.Options{Logger: hosttest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	sh, err := st.BeginShadow()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Write([]fold.ViewMutation{{Key: []byte("s2/leftover"), Op: fold.ViewPut, Value: []byte("x")}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	rev := hosttest.Put(t, b, "after", "a")
	hosttest.WaitCursor(t, f, rev)
	st2 := f.Status()
	if l := st2.Rebuild; l == nil || l.Last == nil || l.Last.Outcome != "done" || l.Last.Live || !strings.Contains(l.Last.Why, "view schema 1") {
		t.Fatalf("the rebuild at start: %+v", st2.Rebuild)
	}
	if got, want := viewsAndKeyview(t, f, 2); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
}

// seedKeyview folds n keys through keyview1 into a fold under dir and
// stops; it returns the options to start it again.
func seedKeyview(t *testing.T, n int) (*natskv.Bucket, string, host.Options) {
	t.Helper()
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "a")}}}
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range n {
		last = hosttest.Put(t, b, fmt.Sprintf("k%05d", i), fmt.Sprint(i))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	return b, pluginFile, o
}

// TestReloadDuringARebuildBeforeFollowing: a reload that arrives while the
// fold rebuilds before following (it started with a module of another view
// schema) never reaches the plugin mid-replay: the attempt restarts with
// the reloaded module, which decides again (here: the file is put back to
// the recorded schema, so no rebuild), and the views are exactly that
// module's. Mutation caught (seen in review): the reload swapped into the
// replaying plugin, leaving views of both schemas for good.
func TestReloadDuringARebuildBeforeFollowing(t *testing.T) {
	b, pluginFile, o := seedKeyview(t, 500)
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	replayed, unblock := hosttest.HoldRebuilds(t)
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	<-replayed
	if st := f.Status(); st.State != httpapi.StateRebuilding {
		t.Fatalf("state %s, want rebuilding", st.State)
	}
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	if err := f.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	unblock()
	rev := hosttest.Put(t, b, "after", "x")
	hosttest.WaitCursor(t, f, rev)
	st := f.Status()
	if st.Plugin.ViewSchema != 1 || st.Rebuild.Last.Outcome != "cancelled" {
		t.Errorf("plugin %+v, last rebuild %+v", st.Plugin.PluginIdentity, st.Rebuild.Last)
	}
	if got, want := viewsAndKeyview(t, f, 1); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
}

// TestRevertDuringALiveRebuild: the plugin file goes from schema 1 to 2
// and back to 1 while the live rebuild for 2 runs: that rebuild is
// cancelled and the fold runs schema 1, its views untouched; a shutdown in
// the middle of another live rebuild returns and leaks no compiled module.
// Mutation caught (seen in review): a reload compared with the running
// module only, so the revert was "nothing to swap" and schema 2 switched in.
func TestRevertDuringALiveRebuild(t *testing.T) {
	b, pluginFile, o := seedKeyview(t, 500)
	replayed, _ := hosttest.HoldRebuilds(t)
	modules := wasm.OpenModules()
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitFor(t, func() bool { return f.Status().Ready })
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	if err := f.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-replayed
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview1")))
	if err := f.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	rev := hosttest.Put(t, b, "after", "x")
	hosttest.WaitCursor(t, f, rev)
	st := f.Status()
	if st.Plugin.ViewSchema != 1 || st.Rebuild.Running != nil || st.Rebuild.Last.Outcome != "cancelled" {
		t.Errorf("plugin %+v, rebuild %+v", st.Plugin.PluginIdentity, st.Rebuild)
	}
	if got, want := viewsAndKeyview(t, f, 1); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
	// Shut down in the middle of another live rebuild (held after its
	// replay until its context ends).
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	if err := f.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { st := f.Status(); return st.Rebuild.Running != nil })
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if n := wasm.OpenModules(); n != modules {
		t.Errorf("%d compiled modules open after the host closed, %d before it started", n, modules)
	}
}

// TestKilledRebuild: a process SIGKILLed during a view rebuild (mid-replay,
// or with the shadow complete but not switched in) leaves the store
// serving one schema's views, never a mix: the old views (and the old
// identity), or the new ones if the switch had committed; the restart runs
// the rebuild again and ends with the new plugin's views of the raw fold.
func TestKilledRebuild(t *testing.T) {
	for _, at := range []string{"mid-replay", "before-switch"} {
		t.Run(at, func(t *testing.T) {
			b, pluginFile, o := seedKeyview(t, 3000)
			hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
			cmd, out, stderr := hosttest.StartChild(t, killRebuildEnv+"="+at, killRebuildURL+"="+o.NATS.Conn.URL,
				killRebuildDir+"="+o.Folds[0].DataDir, killRebuildPlugin+"="+pluginFile)
			want := map[string]string{"mid-replay": "progress", "before-switch": "replayed"}[at]
			seen, scanned := make(chan bool, 1), make(chan struct{})
			go func() { // ends when the pipe closes (the child killed, Wait)
				defer close(scanned)
				sc := bufio.NewScanner(out)
				found := false
				for sc.Scan() {
					if !found && sc.Text() == want {
						found = true
						seen <- true
					}
				}
				if !found {
					seen <- false
				}
			}()
			select {
			case ok := <-seen:
				if !ok {
					t.Errorf("the child ended without printing %q", want)
				}
			case <-time.After(2 * time.Minute): // against a hang, not a measure of speed
				t.Errorf("the child printed no %q within 2m", want)
			}
			_ = cmd.Process.Signal(syscall.SIGKILL)
			err := cmd.Wait()
			<-scanned
			if t.Failed() {
				t.Fatalf("child stderr: %s", stderr.String())
			}
			if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
				t.Fatalf("the child was not killed (%v): %s", err, stderr.String())
			}

			// The store as the kill left it.
			st, _, err := fold.Open(o.Folds[0].DataDir, fold.Options{Logger: hosttest.Quiet})
			if err != nil {
				t.Fatal(err)
			}
			views := map[string]string{}
			if err := st.ViewRange(nil, func(k, v []byte) error { views[string(k)] = string(v); return nil }); err != nil {
				t.Fatal(err)
			}
			idb, _, err := st.PluginIdentity()
			if err != nil {
				t.Fatal(err)
			}
			id, err := fold.ParsePluginIdentity(idb)
			if err != nil {
				t.Fatal(err)
			}
			if err := st.Close(); err != nil {
				t.Fatal(err)
			}
			if mixedSchemas(views) || len(views) != 3000 {
				t.Fatalf("after the kill: %d view entries, mixed schemas %v", len(views), mixedSchemas(views))
			}
			for k := range views {
				if !strings.HasPrefix(k, fmt.Sprintf("s%d/", id.ViewSchema)) {
					t.Fatalf("after the kill: view %s under identity schema %d", k, id.ViewSchema)
				}
			}
			if at == "before-switch" && id.ViewSchema != 1 {
				t.Fatalf("killed before the switch, the store records schema %d", id.ViewSchema)
			}
			t.Logf("the kill left the schema %d views", id.ViewSchema)

			r := hosttest.StartHost(t, o)
			f := r.H.Fold("routes")
			rev := hosttest.Put(t, b, "after", "a")
			hosttest.WaitCursor(t, f, rev)
			if got, want := viewsAndKeyview(t, f, 2); !maps.Equal(got, want) {
				t.Errorf("views after the restart: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
			}
		})
	}
}
