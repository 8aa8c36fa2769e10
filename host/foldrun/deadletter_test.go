package foldrun_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// TestPoisonRecordsAreSkipped: with on_plugin_error = "skip", a plugin
// that traps on two records of a bucket does not stop the fold: every other
// record is folded (views exactly the plugin's over the raw fold minus the
// two), the raw fold holds all (NATS truth), the cursor covers all, the two
// are dead letters (status, metrics, GET …/deadletter); a replay after the
// data was fixed folds the fixed one and keeps the other with its new
// error; deadletter_max bounds what is kept. Mutation caught: no Poison
// hook (the fold fails on the first trap).
func TestPoisonRecordsAreSkipped(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	plugin := hosttest.BuiltPlugin(t, "testdata", "keyview1")
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: plugin, DataDir: filepath.Join(dir, "a"), OnPluginError: host.PluginErrorSkip,
				BatchSize: 50, PluginRetries: wasm.NoRetries},
			{Name: "bounded", Bucket: "routes", Plugin: plugin, DataDir: filepath.Join(dir, "b"), OnPluginError: host.PluginErrorSkip,
				DeadLetterMax: 1, PluginRetries: wasm.NoRetries},
		},
	})
	f := r.H.Fold("routes")
	var last uint64
	for i := range 100 {
		v := fmt.Sprint(i)
		if i == 50 || i == 77 {
			v = "trap1"
		}
		last = hosttest.Put(t, b, fmt.Sprintf("k%03d", i), v)
	}
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitCursor(t, r.H.Fold("bounded"), last)
	// The cursor moves with the commit; the dead letter figures right
	// after it (the loop's OnApplied).
	hosttest.WaitFor(t, func() bool { d := f.Status().DeadLetters; return d != nil && d.Stored == 2 && d.SkippedSinceStart == 2 })
	hosttest.WaitFor(t, func() bool {
		d := r.H.Fold("bounded").Status().DeadLetters
		return d != nil && d.SkippedSinceStart == 2 && d.Stored == 1
	})
	st := f.Status()
	if st.State != httpapi.StateFollowing || st.DeadLetters == nil || st.DeadLetters.Stored != 2 || st.DeadLetters.SkippedSinceStart != 2 {
		t.Fatalf("state %s, dead letters %+v", st.State, st.DeadLetters)
	}
	want := keyviewOf(t, f, 1)
	delete(want, "s1/k050")
	delete(want, "s1/k077")
	if got := foldViews(t, f); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	var list struct {
		Count int
		Items []struct {
			Key      string
			Revision uint64
			Error    string
			Plugin   string
		}
	}
	_, body := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/deadletter")
	if err := json.Unmarshal([]byte(body), &list); err != nil {
		t.Fatal(err)
	}
	if list.Count != 2 || list.Items[0].Key != "k050" || list.Items[1].Key != "k077" || !strings.Contains(list.Items[0].Error, "trap") ||
		list.Items[0].Plugin != st.Plugin.SHA256 {
		t.Errorf("dead letters: %s", body)
	}
	if _, m := hosttest.HTTPGet(t, web.URL+"/metrics"); !strings.Contains(m, `foldhost_fold_dead_lettered_total{fold="routes"} 2`) ||
		!strings.Contains(m, `foldhost_fold_dead_letters{fold="bounded"} 1`) {
		t.Errorf("metrics:\n%s", hosttest.GrepLines(m, "dead_letter"))
	}

	// The data is fixed for one key; the replay folds it, the other fails
	// again and stays.
	fixed := hosttest.Put(t, b, "k050", "fixed")
	hosttest.WaitCursor(t, f, fixed)
	resp, err := http.Post(web.URL+"/v1/folds/routes/deadletter/replay", "", nil)
	if err != nil {
		t.Fatal(err)
	}
	var res httpapi.ReplayResult
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if res.Replayed != 1 || res.Failed != 1 {
		t.Errorf("replay: %+v, want 1 replayed, 1 failed", res)
	}
	if st := f.Status(); st.DeadLetters.Stored != 1 {
		t.Errorf("after the replay: %+v", st.DeadLetters)
	}
	if v := foldViews(t, f)["s1/k050"]; v != "fixed" {
		t.Errorf("view of the fixed key: %q", v)
	}
}

// TestReplayLetsTheLiveFoldThrough: a replay of many dead letters that the
// plugin still fails (spin.wasm: each call runs to its deadline) goes one
// dead letter per loop request: a write made while it runs is folded
// before it ends, and the caller giving up stops it between two. Mutation
// caught (seen in review): the whole replay as one request on the loop (the
// live fold frozen for dead letters x deadline x retries, whatever the
// caller did).
func TestReplayLetsTheLiveFoldThrough(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "spin"), DataDir: filepath.Join(t.TempDir(), "a"),
			OnPluginError: host.PluginErrorSkip, BatchSize: 1, PluginCallTimeout: 100 * time.Millisecond, PluginRetries: wasm.NoRetries}},
	})
	f := r.H.Fold("routes")
	const n = 30
	var last uint64
	for i := range n {
		last = hosttest.Put(t, b, fmt.Sprintf("p%03d", i), "x")
	}
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitFor(t, func() bool { d := f.Status().DeadLetters; return d != nil && d.Stored == n }) // counted after the commit
	if st := f.Status(); st.DeadLetters == nil || st.DeadLetters.Stored != n {
		t.Fatalf("dead letters %+v", st.DeadLetters)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type result struct {
		res httpapi.ReplayResult
		err error
	}
	done := make(chan result, 1)
	go func() {
		res, err := f.ReplayDeadLetters(ctx, "")
		done <- result{res, err}
	}()
	began := time.Now()
	hosttest.WaitFor(t, func() bool { // the replay runs: a dead letter was failed again
		ds, err := f.DeadLetters()
		return err == nil && len(ds) > 0 && ds[0].At.After(began)
	})
	rev := hosttest.Put(t, b, "live", "y")
	hosttest.WaitCursor(t, f, rev) // folded between two dead letters (the plugin fails it too: a dead letter)
	select {
	case res := <-done:
		t.Fatalf("the replay ended (%+v, %v) before the live write was folded: the test proves nothing; make it longer", res.res, res.err)
	default:
	}
	cancel()
	res := <-done
	if !errors.Is(res.err, context.Canceled) || res.res.Failed+res.res.Replayed >= n {
		t.Errorf("a cancelled replay: %+v, %v; want it cut short with the context's error", res.res, res.err)
	}
}

// TestRebuildSkipsPoisonRecords: with on_plugin_error = "skip", a rebuild
// through a module that traps on one record (keyview2 on "trap2") does not
// fail: the record is a dead letter, every other key is rebuilt, the new
// module switches in and the fold follows. Mutation caught (seen in review):
// the rebuild ignored the policy and the fold failed at start.
func TestRebuildSkipsPoisonRecords(t *testing.T) {
	b, pluginFile, o := seedKeyview(t, 100)
	last := hosttest.Put(t, b, "poison", "trap2") // fine for schema 1
	o.Folds[0].OnPluginError = host.PluginErrorSkip
	o.Folds[0].PluginRetries = wasm.NoRetries
	r := hosttest.StartHost(t, o)
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	hosttest.PlaceFile(t, pluginFile, hosttest.ReadFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2")))
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	rev := hosttest.Put(t, b, "after", "x")
	hosttest.WaitCursor(t, f, rev)
	st := f.Status()
	if l := st.Rebuild.Last; l.Outcome != "done" || l.DeadLettered != 1 || st.Plugin.ViewSchema != 2 || st.DeadLetters.Stored != 1 {
		t.Fatalf("rebuild %+v, plugin %+v, dead letters %+v", st.Rebuild.Last, st.Plugin.PluginIdentity, st.DeadLetters)
	}
	want := keyviewOf(t, f, 2)
	delete(want, "s2/poison")
	if got := foldViews(t, f); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
}

// TestRepairSkipsPoisonRecords: with on_plugin_error = "skip", a key-listing
// repair (cursor "expired" on a history-1 bucket after an outage) through a
// plugin that traps on one listed record finishes: the record is a dead
// letter committed raw (its view keeps what the plugin made of the key
// before), the deleted key leaves raw fold and views, the rest is folded,
// and the fold follows. Mutation caught: no Poison in the repair
// (the repair fails and the fold with it).
func TestRepairSkipsPoisonRecords(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	fo := host.FoldOptions{Name: "routes", Bucket: "rt", Plugin: hosttest.BuiltPlugin(t, "testdata", "keyview1"), DataDir: filepath.Join(t.TempDir(), "a"),
		OnPluginError: host.PluginErrorSkip, PluginRetries: wasm.NoRetries, Repair: protocol.RepairAuto}
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range 20 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%02d", i), fmt.Sprint(i))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	// The outage: one key deleted (its marker purged below), every other
	// rewritten, one to a value the plugin traps on: the stream no longer
	// holds the revision after the cursor, which is "expired".
	if err := b.KV().Delete(context.Background(), "k03"); err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		v := fmt.Sprint("new", i)
		if i == 7 {
			v = "trap1"
		}
		if i != 3 {
			hosttest.Put(t, b, fmt.Sprintf("k%02d", i), v)
		}
	}
	if err := b.KV().PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	st := hosttest.WaitRepair(t, f, "done")
	rev := hosttest.Put(t, b, "after", "x")
	hosttest.WaitCursor(t, f, rev)
	st = f.Status()
	if st.State != httpapi.StateFollowing || st.DeadLetters.Stored != 1 {
		t.Fatalf("state %s, dead letters %+v, repairs %+v", st.State, st.DeadLetters, st.Repairs.Last)
	}
	want := keyviewOf(t, f, 1)
	want["s1/k07"] = "7" // the view skipped the update: it keeps what the plugin made of the key before
	if _, ok := want["s1/k03"]; ok {
		t.Errorf("the deleted key is still in the raw fold; repair %+v", st.Repairs.Last)
	}
	if got := foldViews(t, f); !maps.Equal(got, want) {
		t.Errorf("views: %d entries, want %d%s", len(got), len(want), diffSample(got, want))
	}
}
