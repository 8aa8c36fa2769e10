package foldrun_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// routerFold is a fold "routes" of bucket rt's route. keys through the C
// example-router, repair auto, in a fresh data dir.
func routerFold(t *testing.T, url string) (string, host.Options) {
	dir := filepath.Join(t.TempDir(), "fold")
	fo := host.FoldOptions{Name: "routes", Bucket: "rt", Scope: []string{"route."}, Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"),
		DataDir: dir, Repair: protocol.RepairAuto}
	return dir, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
}

// routerViews is what example-router derives from a bucket of single-upstream
// routes: host/<h> = "addr=1" and upstream/<addr>/<h> = "".
func routerViews(t *testing.T, entries map[string]hosttest.KVEntry) map[string]string {
	t.Helper()
	v := map[string]string{}
	for k, e := range entries {
		h := strings.TrimPrefix(k, "route.")
		addr := strings.TrimSuffix(strings.TrimPrefix(e.Value, `{"upstreams":[{"addr":"`), `"}]}`)
		v["host/"+h] = addr + "=1"
		v["upstream/"+addr+"/"+h] = ""
	}
	return v
}

func viewsOf(t *testing.T, f *host.Fold) map[string]string {
	t.Helper()
	v := map[string]string{}
	if err := f.Store().ViewRange(nil, func(k, val []byte) error {
		v[string(k)] = string(val)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return v
}

// TestRepairAfterAnOutage: the everyday case the default `repair = "auto"`
// exists for. A fold of a small, hot history-1 bucket (no max_age) is down
// while every key is rewritten or deleted (the delete markers purged): its
// cursor is "expired" though nothing was evicted. At the restart the fold
// repairs itself with the key-listing diff through the WASM plugin: the raw
// fold equals the bucket, the views equal the plugin over it (no upstream
// of a deleted or rewritten route left), the status and log say what
// happened, and the fold follows live updates. Mutations caught: repair
// switched off (the fold stops "failed": waitRepair times out... and the
// first check below names it), no synthetic deletes (h1, h2 stay).
func TestRepairAfterAnOutage(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	_, o := routerFold(t, url)
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range 10 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), hosttest.Route(fmt.Sprintf("10.0.0.%d:80", i)))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	// The outage: deletes (markers purged), a delete and re-create,
	// every other route rewritten, a new one.
	kv := b.KV()
	for _, k := range []string{"route.h1", "route.h2", "route.h3"} {
		if err := kv.Delete(context.Background(), k); err != nil {
			t.Fatal(err)
		}
	}
	hosttest.Put(t, b, "route.h3", hosttest.Route("10.9.9.9:80"))
	for _, i := range []int{0, 4, 5, 6, 7, 8, 9} {
		hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), hosttest.Route(fmt.Sprintf("10.1.1.%d:80", i)))
	}
	hosttest.Put(t, b, "route.h10", hosttest.Route("10.0.0.10:80"))
	if err := kv.PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}

	logs := &syncbuf.Buffer{}
	o.Logger = slog.New(slog.NewTextHandler(logs, nil))
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		if st.State == httpapi.StateFailed {
			t.Fatalf("the fold stopped instead of repairing: %s", st.LastError)
		}
		return st.Repairs.Last != nil && st.Repairs.Running == nil
	})
	st := hosttest.WaitRepair(t, f, "done")
	want := hosttest.TruthOf(t, kv)
	hosttest.SameEntries(t, "fold after the repair", hosttest.FoldOf(t, f), want)
	sameStrings(t, "views after the repair", viewsOf(t, f), routerViews(t, want))
	if l := st.Repairs.Last; l.Plan != "key-listing-diff" || l.Deleted != 2 {
		t.Errorf("last repair %+v: want a key-listing diff with 2 synthetic deletes", l)
	}
	if st.State != httpapi.StateFollowing || !st.Ready {
		t.Errorf("after the repair: state %s ready %t (%s)", st.State, st.Ready, st.Reason)
	}
	if !strings.Contains(logs.String(), "repair done") {
		t.Errorf("no repair in the log:\n%s", logs)
	}

	live := hosttest.Put(t, b, "route.h11", hosttest.Route("10.0.0.11:80"))
	hosttest.WaitCursor(t, f, live)
	want = hosttest.TruthOf(t, kv)
	hosttest.SameEntries(t, "fold after a live update", hosttest.FoldOf(t, f), want)
	sameStrings(t, "views after a live update", viewsOf(t, f), routerViews(t, want))
}

func sameStrings(t *testing.T, who string, got, want map[string]string) {
	t.Helper()
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: %s = %q (present %t), want %q", who, k, g, ok, w)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("%s: %s present, not expected", who, k)
		}
	}
}

// TestRepairRefusedWhereTheListingIsNotTheTruth: on a max_age bucket a key
// missing from the listing may have aged out, so the key-listing repair is
// refused: relist and auto (whose restore is not built) stop the fold with
// a message naming max_age, and leave the fold's data as it was (values
// NATS no longer has stay served). The eviction memo is set the first time
// eviction is seen and outlives turning max_age off: the repair is still
// refused, naming the memo. Mode none re-lists and keeps every key.
// Mutations caught: PlanRepair's refusal removed (the aged-out keys are
// deleted); the memo not committed (the repair after max_age is turned off
// deletes them).
func TestRepairRefusedWhereTheListingIsNotTheTruth(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1, MaxAge: time.Second})
	dir := filepath.Join(t.TempDir(), "fold")
	fo := host.FoldOptions{Name: "ages", Bucket: "rt", DataDir: dir, Repair: protocol.RepairRelist}
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Folds: []host.FoldOptions{fo}}
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), "old")
	}
	hosttest.WaitCursor(t, r.H.Fold("ages"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	// k5, written after the cursor, ages out unseen (with k0..k4); k6
	// makes the stream go on past it: the cursor expired.
	gone := hosttest.Put(t, b, "k5", "gone")
	hosttest.WaitFor(t, func() bool {
		ret, _, err := b.Retention(context.Background())
		return err == nil && ret.Window.Last == protocol.Revision(gone) && ret.Window.First > protocol.Revision(gone)
	})
	// k6 must outlive the refused starts below (mode none lists it): an
	// hour, which still evicts.
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour })
	hosttest.Put(t, b, "k6", "new")

	failed := func(mode protocol.RepairMode, naming string) {
		t.Helper()
		o.Folds[0].Repair = mode
		r := hosttest.StartHost(t, o)
		f := r.H.Fold("ages")
		hosttest.WaitFor(t, func() bool {
			st := f.Status()
			if st.Repairs.Last != nil && st.Repairs.Last.Outcome == "done" {
				t.Fatalf("mode %s: the repair ran: %+v", mode, st.Repairs.Last)
			}
			return st.State == httpapi.StateFailed
		})
		st := f.Status()
		if !strings.Contains(st.LastError, "repair refused") || !strings.Contains(st.LastError, naming) {
			t.Errorf("mode %s: last error %q, want a refusal naming %q", mode, st.LastError, naming)
		}
		if err := r.Stop(t); err == nil {
			t.Errorf("mode %s: Run returned nil for a failed fold", mode)
		}
		if got := len(foldOfDir(t, dir)); got != 5 {
			t.Errorf("mode %s: the refused repair left %d keys of 5", mode, got)
		}
		if c := storeCursor(t, dir); c.Rev != protocol.Revision(last) || !c.EvictionSeen {
			t.Errorf("mode %s: cursor %v, want %d with the eviction memo", mode, c, last)
		}
	}
	failed(protocol.RepairRelist, "max_age")
	failed(protocol.RepairAuto, "max_age")

	// max_age off: the bucket no longer evicts, but the fold saw it did.
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge = 0 })
	failed(protocol.RepairRelist, "eviction memo")

	// none: re-list what is there, delete nothing.
	o.Folds[0].Repair = protocol.RepairNone
	r = hosttest.StartHost(t, o)
	st := hosttest.WaitRepair(t, r.H.Fold("ages"), "done")
	if l := st.Repairs.Last; l.Plan != "relist-only" || l.Kept != 5 || l.Deleted != 0 {
		t.Errorf("mode none: last repair %+v, want relist-only keeping 5", l)
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got := foldOfDir(t, dir); len(got) != 6 || got["k6"].Value != "new" {
		t.Errorf("mode none: fold %v, want k0..k4 kept and k6", got)
	}
}

// foldOfDir reads the raw entries of the stopped store in dir.
func foldOfDir(t *testing.T, dir string) map[string]hosttest.KVEntry {
	t.Helper()
	st, _, err := fold.Open(dir, fold.Options{Logger: hosttest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	m := map[string]hosttest.KVEntry{}
	if err := st.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		m[string(k)] = hosttest.KVEntry{Rev: rev, Value: string(v)}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return m
}

func storeCursor(t *testing.T, dir string) protocol.Cursor {
	t.Helper()
	_, _, cur := readOrigin(t, dir)
	return cur
}

// TestSupersessionOnlyGapResumesWithoutRepair: on an age-only bucket
// (max_age, history 1) a fold down while every key was overwritten reads
// as expired, but its cursor keeps the message time (the eviction memo is
// set: the first revision passed 1) and that message is young, so every
// missing revision was superseded, not evicted: the fold resumes from the
// first retained revision with no repair (the listing is not the truth
// there, so a repair would be refused) and equals the bucket. Mutation
// caught: GapHoldsNoEviction not consulted at resume (the fold stops,
// repair refused).
func TestSupersessionOnlyGapResumesWithoutRepair(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1, MaxAge: time.Hour})
	hosttest.Put(t, b, "k0", "first")
	for i := range 5 {
		hosttest.Put(t, b, fmt.Sprintf("k%d", i), "v1") // k0 supersedes revision 1
	}
	dir := filepath.Join(t.TempDir(), "fold")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "ages", Bucket: "rt", DataDir: dir, Repair: protocol.RepairAuto}}}
	r := hosttest.StartHost(t, o)
	hosttest.WaitCursor(t, r.H.Fold("ages"), 6)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if c := storeCursor(t, dir); !c.EvictionSeen || c.MsgUnixNano == 0 {
		t.Fatalf("cursor %+v: want the memo and the message time", c)
	}
	var last uint64
	for _, v := range []string{"v2", "v3"} { // v3 supersedes the first revision after the cursor
		for i := range 5 {
			last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), v)
		}
	}
	if ret, _, _ := b.Retention(context.Background()); protocol.CheckResume(6, ret.Window) != protocol.ResumeExpired {
		t.Fatalf("setup: cursor 6 not expired against %d..%d", ret.First, ret.Last)
	}
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("ages")
	hosttest.WaitCursor(t, f, last)
	if st := f.Status(); len(st.Repairs.Counts) != 0 {
		t.Errorf("a supersession-only gap was repaired: %+v", st.Repairs)
	}
	hosttest.SameEntries(t, "fold", hosttest.FoldOf(t, f), hosttest.TruthOf(t, b.KV()))
}

// artifactStores are the two backends a restore is tested against.
func artifactStores(t *testing.T) map[string]func(t *testing.T) artifact.Store {
	return map[string]func(t *testing.T) artifact.Store{
		"dir": func(t *testing.T) artifact.Store {
			s, err := dirstore.New(t.TempDir())
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		"s3": func(t *testing.T) artifact.Store {
			g := s3test.Start(t)
			s, err := s3store.New(s3store.Options{Endpoint: g.Endpoint, Region: s3test.Region, Bucket: g.NewBucket(t), Prefix: "exports",
				AccessKey: s3test.AccessKey, SecretKey: s3test.SecretKey, UsePathStyle: true})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
	}
}

// TestRestoreFromANewerArtifact: on a max_age bucket a fold X is down
// while the bucket changes (a delete, a rewrite, a new key) and then every
// message ages out: X's cursor expired, and a key listing would lose
// what aged out. Another node Y folded on and exported an artifact. X
// restores from it (a local directory and S3 via versitygw): its raw fold
// equals Y's (every write minus every real delete, aged-out values kept)
// plus a key written again after the artifact's cursor (kept, not deleted,
// then updated by the resume),
// its views equal the plugin over it, exactly one key was deleted (the
// real delete), the cursor is the artifact's, and X follows live updates.
// Then, with no artifact ahead of X (a node never restores from its own
// exports), the next expiry is refused, naming why. A new node's first
// start restores from the artifact too (a state-sync would miss every
// aged-out value). Mutations caught:
// restore deleting fold keys the bucket lists live (none here: caught by
// the deleted count), the cursor left behind (the fold re-restores and
// fails "not ahead").
func TestRestoreFromANewerArtifact(t *testing.T) {
	for name, newStore := range artifactStores(t) {
		t.Run(name, func(t *testing.T) {
			// An hour: nothing ages out while the nodes start, however
			// loaded the machine (with a second, a loaded run aged the six
			// routes out before X started: "cursor 0, want 6"); the
			// expiry below turns it down to a second for a moment.
			url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1, MaxAge: time.Hour})
			store := newStore(t)
			base := t.TempDir()
			plugin := hosttest.BuiltPlugin(t, "example-router", "router-c")
			opts := func(node string) host.Options {
				return host.Options{
					NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: url, Name: node}},
					Artifacts: host.ArtifactOptions{Store: store, Where: name, Holder: node, LeaseTTL: time.Minute},
					Folds: []host.FoldOptions{{Name: "routes", Bucket: "rt", Scope: []string{"route."}, Plugin: plugin,
						DataDir: filepath.Join(base, node), Repair: protocol.RepairAuto}},
				}
			}
			var last uint64
			for i := range 6 {
				last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), hosttest.Route(fmt.Sprintf("10.0.0.%d:80", i)))
			}
			x, y := hosttest.StartHost(t, opts("x")), hosttest.StartHost(t, opts("y"))
			hosttest.WaitCursor(t, x.H.Fold("routes"), last)
			hosttest.WaitCursor(t, y.H.Fold("routes"), last)
			if err := x.Stop(t); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{"route.h1", "route.h3"} {
				if err := b.KV().Delete(context.Background(), k); err != nil {
					t.Fatal(err)
				}
			}
			hosttest.Put(t, b, "route.h2", hosttest.Route("10.2.2.2:80"))
			last = hosttest.Put(t, b, "route.h9", hosttest.Route("10.9.9.9:80"))
			fy := y.H.Fold("routes")
			hosttest.WaitCursor(t, fy, last)
			if _, err := fy.Export(context.Background(), true); err != nil {
				t.Fatal(err)
			}
			want := hosttest.FoldOf(t, fy)
			if err := y.Stop(t); err != nil {
				t.Fatal(err)
			}
			hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge, c.Duplicates = time.Second, time.Second })
			hosttest.WaitFor(t, func() bool { // everything ages out: X's cursor expires
				ret, _, err := b.Retention(context.Background())
				return err == nil && ret.Window.First > protocol.Revision(last)
			})
			// Messages now live an hour: what follows must stay retained
			// until both restores resumed past it, however slow the
			// machine (with a second, a loaded run aged out h3's new value
			// before z started, and z's restore was rightly refused). An
			// hour still evicts: the plan stays a restore.
			hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour })
			// h3, deleted before the artifact's cursor, lives again after
			// it: X holds its old value, the artifact lacks it, the bucket
			// lists it. The restore keeps it, the resume delivers the new.
			again := hosttest.Put(t, b, "route.h3", hosttest.Route("10.3.3.3:80"))

			x = hosttest.StartHost(t, opts("x"))
			fx := x.H.Fold("routes")
			st := hosttest.WaitRepair(t, fx, "done")
			if l := st.Repairs.Last; l.Plan != "restore" || l.Deleted != 1 || l.Kept != 1 || l.Cursor != last {
				t.Errorf("last repair %+v: want a restore to %d deleting 1 key (h1) and keeping 1 (h3)", l, last)
			}
			hosttest.WaitCursor(t, fx, again)
			want["route.h3"] = hosttest.KVEntry{Rev: protocol.Revision(again), Value: hosttest.Route("10.3.3.3:80")}
			hosttest.SameEntries(t, "restored fold", hosttest.FoldOf(t, fx), want)
			sameStrings(t, "restored views", viewsOf(t, fx), routerViews(t, want))
			// A new node on this evicting bucket: a state-sync would miss
			// every aged-out value; it starts from the artifact instead.
			z := hosttest.StartHost(t, opts("z"))
			fz := z.H.Fold("routes")
			if l := hosttest.WaitRepair(t, fz, "done").Repairs.Last; l.Plan != "restore" {
				t.Errorf("a new node's start: %+v, want a restore", l)
			}
			hosttest.WaitCursor(t, fz, again)
			hosttest.SameEntries(t, "new node", hosttest.FoldOf(t, fz), want)
			sameStrings(t, "new node's views", viewsOf(t, fz), routerViews(t, want))
			if err := z.Stop(t); err != nil {
				t.Fatal(err)
			}

			live := hosttest.Put(t, b, "route.h10", hosttest.Route("10.0.0.10:80"))
			hosttest.WaitCursor(t, fx, live)
			if _, ok := hosttest.FoldOf(t, fx)["route.h10"]; !ok {
				t.Error("the restored fold does not follow")
			}
			if err := x.Stop(t); err != nil {
				t.Fatal(err)
			}

			// X is now ahead of every artifact: the next expiry is refused.
			hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge = time.Second })
			gone := hosttest.Put(t, b, "route.h11", hosttest.Route("10.0.0.11:80"))
			hosttest.WaitFor(t, func() bool {
				ret, _, err := b.Retention(context.Background())
				return err == nil && ret.Window.First > protocol.Revision(gone)
			})
			hosttest.Put(t, b, "route.h12", hosttest.Route("10.0.0.12:80"))
			x = hosttest.StartHost(t, opts("x"))
			hosttest.WaitState(t, x.H.Fold("routes"), httpapi.StateFailed)
			if e := x.H.Fold("routes").Status().LastError; !strings.Contains(e, "not ahead") || !strings.Contains(e, "another node") {
				t.Errorf("refusal %q does not say the artifact is not ahead", e)
			}
			_ = x.Stop(t)
		})
	}
}

// TestResetAfterARecreatedBucket: a bucket deleted and made again (and
// written past the old cursor) while the fold was down: the start refuses
// the store, naming both streams; ResetStopped refolds the new bucket into
// a fresh store through the plugin and swaps it in, keeping the old one;
// the next start follows the new stream. The refold drops the plugin's
// effects: the effects stream gets the old fold's and the live ones, none
// of the refolded history. Mutations caught: swapping before the fresh
// fold caught up (its cursor falls short of the head); the refold
// committing its effects (the next start publishes 200 of them).
func TestResetAfterARecreatedBucket(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	dir, o := routerFold(t, url)
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	ev, err := js.CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	o.Folds[0].EffectsStream = "EV"
	evMsgs := func() uint64 {
		info, err := ev.Info(context.Background(), jetstream.WithSubjectFilter("route.changed"))
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Subjects["route.changed"]
	}
	r := hosttest.StartHost(t, o)
	hosttest.WaitState(t, r.H.Fold("routes"), httpapi.StateFollowing)
	var last uint64
	for i := range 3 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.old%d", i), hosttest.Route("10.0.0.1:80"))
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	hosttest.WaitFor(t, func() bool { return evMsgs() == 3 })
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	hosttest.RemakeBucket(t, url, "rt")
	nb, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "rt", History: 1}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var head uint64
	for i := range 200 { // past the old cursor
		head = hosttest.Put(t, nb, fmt.Sprintf("route.new%03d", i), hosttest.Route(fmt.Sprintf("10.1.0.%d:80", i%250)))
	}
	if err := hosttest.StartErr(t, o); !errors.Is(err, host.ErrOriginMismatch) {
		t.Fatalf("start on the recreated bucket: %v, want an origin mismatch", err)
	}
	res, err := host.ResetStopped(context.Background(), o, "routes", nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(res.Kept); err != nil {
		t.Errorf("the old store is not kept: %v", err)
	}
	if c := storeCursor(t, dir); c.Rev < protocol.Revision(head) {
		t.Fatalf("the swapped-in store is at cursor %v, short of the head %d", c, head)
	}
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	live := hosttest.Put(t, nb, "route.live", hosttest.Route("10.2.0.1:80"))
	hosttest.WaitCursor(t, f, live)
	want := hosttest.TruthOf(t, nb.KV())
	hosttest.SameEntries(t, "reset fold", hosttest.FoldOf(t, f), want)
	sameStrings(t, "reset views", viewsOf(t, f), routerViews(t, want))
	hosttest.WaitFor(t, func() bool { return hosttest.OutboxLen(f) == 0 && evMsgs() >= 4 })
	if n := evMsgs(); n != 4 {
		t.Fatalf("the effects stream holds %d messages, want 4 (3 before the reset, 1 live): the refold's reached it", n)
	}
}

// TestRepairRefusedOnEvictingRetentions: the two other retentions that
// evict current values, a stream-wide limit under discard-old and
// per-message TTLs, make the key listing not the truth too: an expired
// cursor's relist is refused naming the retention, the fold keeps its
// keys and the eviction memo is committed. Mutation caught: the retention
// reading ignoring the discard-old limit or the TTL flag (the relist runs
// and deletes the keys the listing lacks).
func TestRepairRefusedOnEvictingRetentions(t *testing.T) {
	for _, tc := range []struct {
		name, naming string
		cfg          natskv.BucketConfig
		limit        bool // a discard-old MaxMsgs limit set on the stream
	}{
		{"discard-old", "discard-old", natskv.BucketConfig{History: 1}, true},
		{"per-message-TTL", "per-message TTL", natskv.BucketConfig{History: 1, LimitMarkerTTL: time.Minute}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			url, b := hosttest.RepairServer(t, tc.cfg)
			if tc.limit {
				hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.Discard, c.MaxMsgs = jetstream.DiscardOld, 6 })
			}
			dir := filepath.Join(t.TempDir(), "fold")
			o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
				Folds: []host.FoldOptions{{Name: "ev", Bucket: "rt", DataDir: dir, Repair: protocol.RepairRelist}}}
			r := hosttest.StartHost(t, o)
			var last uint64
			for i := range 5 {
				last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), "old")
			}
			hosttest.WaitCursor(t, r.H.Fold("ev"), last)
			if err := r.Stop(t); err != nil {
				t.Fatal(err)
			}
			// While the fold is down: new keys (the limit evicts k0..k4)
			// and rewrites, until the revision after the cursor is gone.
			for i := 5; i < 19; i++ {
				hosttest.Put(t, b, fmt.Sprintf("k%d", i%12), "new")
			}
			if ret, _, err := b.Retention(context.Background()); err != nil || ret.Window.First <= protocol.Revision(last+1) {
				t.Fatalf("the cursor %d did not expire: %+v %v", last, ret, err)
			}
			r = hosttest.StartHost(t, o)
			f := r.H.Fold("ev")
			hosttest.WaitFor(t, func() bool {
				st := f.Status()
				return st.State == httpapi.StateFailed || (st.Repairs.Last != nil && st.Repairs.Last.Outcome == "done")
			})
			if st := f.Status(); !strings.Contains(st.LastError, "repair refused") || !strings.Contains(st.LastError, tc.naming) {
				t.Errorf("last error %q, want a refusal naming %q (repairs %+v)", st.LastError, tc.naming, st.Repairs.Last)
			}
			if err := r.Stop(t); err == nil {
				t.Error("Run returned nil for a failed fold")
			}
			if got := len(foldOfDir(t, dir)); got != 5 {
				t.Errorf("the refused repair left %d keys of 5", got)
			}
			if c := storeCursor(t, dir); c.Rev != protocol.Revision(last) || !c.EvictionSeen {
				t.Errorf("cursor %v, want %d with the eviction memo", c, last)
			}
		})
	}
}

// TestRestoreScope: three folds of scope route.eu. on one node (X), each
// offered, under its own key, the artifact of another node's fold (Y) of
// another scope, once X's cursors expired on an evicting bucket: a narrower
// scope (route.eu.par.), a disjoint one (route.us.) and a wider one
// (route.). The narrower and the disjoint are refused before any download,
// naming both scopes, and leave the fold as it was: taken, they would
// delete the fold's keys they lack, which the bucket no longer lists (aged
// out). The wider one restores the fold's scope only: the artifact's keys
// outside route.eu. are not imported. Mutations caught (the source
// mutation check, -repair.mutations.full): covers() testing the prefixes
// the wrong way round (the narrower is taken and deletes route.eu.lon.a;
// the wider is refused), covers() with the scopes swapped (the same), the
// restore skipping the artifact check (the narrower and the disjoint are
// taken).
func TestRestoreScope(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1, MaxAge: time.Hour})
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	names := []string{"narrower", "disjoint", "wider"}
	ours := []string{"route.eu."}
	theirs := map[string][]string{"narrower": {"route.eu.par."}, "disjoint": {"route.us."}, "wider": {"route."}}
	scope := func(node, name string) []string {
		if node == "y" {
			return theirs[name]
		}
		return ours
	}
	opts := func(node string) host.Options {
		o := host.Options{
			NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: url, Name: node}},
			Artifacts: host.ArtifactOptions{Store: store, Where: "dir", Holder: node, LeaseTTL: time.Minute},
		}
		for _, name := range names {
			o.Folds = append(o.Folds, host.FoldOptions{Name: name, Bucket: "rt", Scope: scope(node, name), ArtifactKey: name,
				DataDir: filepath.Join(base, node, name), Repair: protocol.RepairAuto})
		}
		return o
	}
	revs := map[string]uint64{}
	write := func(v string, keys ...string) uint64 {
		var last uint64
		for _, k := range keys {
			last = hosttest.Put(t, b, k, v)
			revs[k] = last
		}
		return last
	}
	// caughtUp waits until each fold of r reached the last revision
	// written in its scope (a fold's cursor moves with its scope's
	// messages only).
	caughtUp := func(r *hosttest.Running, node string) {
		for _, name := range names {
			var last uint64
			for k, rev := range revs {
				if (natskv.Scope{Prefixes: scope(node, name)}).Contains(k) {
					last = max(last, rev)
				}
			}
			hosttest.WaitCursor(t, r.H.Fold(name), last)
		}
	}
	// Nothing ages out while X runs (max_age an hour): its cursors get no
	// eviction memo, which would let an age-only gap resume unrepaired.
	write("1", "route.eu.par.a", "route.eu.lon.a", "route.us.ny.a", "route.as.tyo.a")
	x, y := hosttest.StartHost(t, opts("x")), hosttest.StartHost(t, opts("y"))
	caughtUp(x, "x")
	caughtUp(y, "y")
	if err := x.Stop(t); err != nil {
		t.Fatal(err)
	}
	before := map[string]map[string]hosttest.KVEntry{}
	for _, name := range names {
		before[name] = foldOfDir(t, filepath.Join(base, "x", name))
	}
	// While X is down, Y follows new keys and values in and out of X's
	// scope, and then everything ages out: X's cursors expire.
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge, c.Duplicates = time.Second, time.Second })
	last := write("2", "route.eu.par.a", "route.eu.par.b", "route.eu.lon.b", "route.us.ny.b", "route.as.tyo.b")
	caughtUp(y, "y")
	hosttest.WaitFor(t, func() bool {
		ret, _, err := b.Retention(context.Background())
		return err == nil && ret.Window.First > protocol.Revision(last)
	})
	// What follows lives an hour (which still evicts: the plan stays a
	// restore). A write in each of Y's scopes makes its artifact one a
	// resume can start from (its cursor at or after the first retained
	// revision).
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.MaxAge = time.Hour })
	last = write("3", "route.eu.par.c", "route.us.ny.c", "route.as.tyo.c")
	caughtUp(y, "y")
	exported := map[string]map[string]hosttest.KVEntry{}
	for _, name := range names {
		f := y.H.Fold(name)
		if _, err := f.Export(context.Background(), true); err != nil {
			t.Fatal(err)
		}
		exported[name] = hosttest.FoldOf(t, f)
	}
	if err := y.Stop(t); err != nil {
		t.Fatal(err)
	}

	x = hosttest.StartHost(t, opts("x"))
	for _, name := range []string{"narrower", "disjoint"} {
		f := x.H.Fold(name)
		var st httpapi.Status
		hosttest.WaitFor(t, func() bool { st = f.Status(); return st.Repairs.Last != nil && st.Repairs.Running == nil })
		if l := st.Repairs.Last; l.Plan != "restore" || l.Outcome != "refused" {
			t.Errorf("%s: last repair %+v, want a refused restore", name, l)
		} else {
			st = hosttest.WaitState(t, f, httpapi.StateFailed)
			want := fmt.Sprintf("its scope %q does not cover the fold's %q", theirs[name], ours)
			if !strings.Contains(st.LastError, "repair refused") || !strings.Contains(st.LastError, want) {
				t.Errorf("%s: last error %q, want a refusal saying %s", name, st.LastError, want)
			}
		}
		hosttest.SameEntries(t, name+": the fold after the refusal", hosttest.FoldOf(t, f), before[name])
	}
	f := x.H.Fold("wider")
	var st httpapi.Status
	hosttest.WaitFor(t, func() bool { st = f.Status(); return st.Repairs.Last != nil && st.Repairs.Running == nil })
	if l := st.Repairs.Last; l.Plan != "restore" || l.Outcome != "done" || l.Cursor != last {
		t.Errorf("wider: last repair %+v, want a restore done to %d", l, last)
	}
	want := map[string]hosttest.KVEntry{}
	for k, e := range exported["wider"] {
		if strings.HasPrefix(k, "route.eu.") {
			want[k] = e
		}
	}
	if len(want) != 5 || len(exported["wider"]) != 11 {
		t.Fatalf("setup: the wider artifact holds %v", exported["wider"])
	}
	hosttest.SameEntries(t, "wider: the restored fold (the fold's scope only)", hosttest.FoldOf(t, f), want)
	if err := x.Stop(t); err == nil {
		t.Error("Run returned nil with two folds refused")
	}
}
