package foldrun_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// diskHost runs a host with two raw folds, "a" on fake (its bucket a;
// syncing every commit if sync) and "b" on the OS's filesystem (bucket b),
// and its HTTP API.
type diskHost struct {
	url    string
	dir    string
	a, b   *natskv.Bucket
	fake   *hosttest.FullDiskFSFake
	opts   host.Options
	r      *hosttest.Running
	web    *httptest.Server
	fa, fb *host.Fold
}

func newDiskHost(t *testing.T, sync bool) *diskHost {
	t.Helper()
	srv, nc := natstest.Start(t)
	d := &diskHost{url: srv.ClientURL(), dir: t.TempDir()}
	d.a, d.b = openTestBucket(t, nc, "a"), openTestBucket(t, nc, "b")
	d.fake = hosttest.NewFullDiskFSFake(filepath.Join(d.dir, "a"))
	testhook.Set(t, &testhook.StoreOptions, func(name string, o *fold.Options) {
		if name == "a" {
			o.FS, o.DiskReserve = d.fake, 1<<20
		}
	})
	testhook.Set(t, &testhook.DiskPoll, 20*time.Millisecond)
	d.opts = host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: d.url}},
		Folds: []host.FoldOptions{
			{Name: "a", DataDir: filepath.Join(d.dir, "a"), Sync: sync},
			{Name: "b", DataDir: filepath.Join(d.dir, "b")},
		},
	}
	d.start(t)
	return d
}

func (d *diskHost) start(t *testing.T) {
	t.Helper()
	d.r = hosttest.StartHost(t, d.opts)
	d.web = httptest.NewServer(d.r.H.Handler())
	d.fa, d.fb = d.r.H.Fold("a"), d.r.H.Fold("b")
}

func (d *diskHost) Stop(t *testing.T) error {
	t.Helper()
	d.web.Close()
	return d.r.Stop(t)
}

func openTestBucket(t *testing.T, nc *nats.Conn, name string) *natskv.Bucket {
	t.Helper()
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: name, History: 8}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// othersRun checks that fold b still folds and the API answers, naming a
// (failed, or retrying) as not ready.
func (d *diskHost) othersRun(t *testing.T, key string) {
	t.Helper()
	rev := hosttest.Put(t, d.b, key, "v")
	hosttest.WaitCursor(t, d.fb, rev)
	if code, body := hosttest.HTTPGet(t, d.web.URL+"/v1/folds/b/raw/"+key); code != http.StatusOK {
		t.Errorf("GET fold b's %s while a is failed: %d %q", key, code, body)
	}
	if code, body := hosttest.HTTPGet(t, d.web.URL+"/readyz"); code != http.StatusServiceUnavailable || !strings.Contains(body, "fold a: ") || strings.Contains(body, "fold b") {
		t.Errorf("readyz with fold a failed: %d %q", code, body)
	}
}

// rawListing is fold a's raw entries as the API lists them.
func (d *diskHost) rawListing(t *testing.T) string {
	t.Helper()
	code, body := hosttest.HTTPGet(t, d.web.URL+"/v1/folds/a/raw?prefix=&format=ndjson")
	if code != http.StatusOK {
		t.Fatalf("GET fold a's raw entries: %d %q", code, body)
	}
	return body
}

// TestFullDiskFailsTheFoldNotTheProcess: fold a's filesystem runs short of
// space (below its reserve). Its next commit is refused before pebble
// writes anything: fold a fails, naming its store's path, the bytes needed
// and the bytes free; fold b keeps folding and the API answers; a's store
// is as it was (cursor and entries); once the space is free again a
// resumes by itself and folds what it missed. Before the space check, the
// write reached pebble, whose log write failed on the fake's ENOSPC; the
// fold never failed (and the next commit panicked the process).
func TestFullDiskFailsTheFoldNotTheProcess(t *testing.T) {
	d := newDiskHost(t, false)
	defer d.Stop(t)
	hosttest.Put(t, d.a, "k1", "v1")
	rev := hosttest.Put(t, d.a, "k2", "v2")
	hosttest.WaitCursor(t, d.fa, rev)
	before, listed := d.fa.Status().Cursor, d.rawListing(t)

	d.fake.Avail.Store(64 << 10) // below the 1 MiB reserve
	missed := hosttest.Put(t, d.a, "k3", "v3")
	hosttest.WaitFor(t, func() bool { return d.fa.Status().State == httpapi.StateFailed })
	st := d.fa.Status()
	for _, want := range []string{"disk full", filepath.Join(d.dir, "a"), "needs", "its filesystem has 65536", "nothing was written"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("fold a's last_error %q does not say %q", st.LastError, want)
		}
	}
	d.othersRun(t, "x1")
	if st := d.fa.Status(); st.Cursor != before || st.State != httpapi.StateFailed {
		t.Errorf("fold a after the refused commit: cursor %d (want %d), state %s", st.Cursor, before, st.State)
	}
	if got := d.rawListing(t); got != listed {
		t.Errorf("fold a's entries changed by the refused commit:\n%s\nwant\n%s", got, listed)
	}
	if n := d.fake.Fails.Load(); n != 0 {
		t.Errorf("%d writes reached the full disk", n)
	}

	d.fake.Avail.Store(1 << 40) // space freed: a resumes by itself
	hosttest.WaitFor(t, func() bool {
		st := d.fa.Status()
		return st.Cursor >= missed && st.State == httpapi.StateFollowing
	})
	if code, body := hosttest.HTTPGet(t, d.web.URL+"/v1/folds/a/raw/k3"); code != http.StatusOK {
		t.Errorf("GET fold a's k3 after the resume: %d %q", code, body)
	}
	if err := d.Stop(t); err != nil {
		t.Errorf("a host whose fold recovered: Run returned %v", err)
	}
}

// TestWriteErrorBreaksTheStoreNotTheProcess: fold a's filesystem reports
// free space but fails every write with ENOSPC (something else took the
// space after the check), so a commit's log write reaches pebble and
// fails. The store is broken, not the process: fold a fails naming its
// store and the error, fold b keeps folding and the API answers. Once the
// disk works again the store is reopened from its files: synced
// (sync=true), reopened by hand while the fold is paused, it holds every
// commit the fold reached and whole commits up to its cursor at most to
// the last write; then resumed, the fold folds the rest. Without syncs
// (sync=false) the log's unwritten tail is lost, as in a crash, big
// commits make pebble rotate its log, and the fold reopens its store and
// resumes by itself. Either way the store ends equal to the bucket, and
// the host shuts down cleanly. Before the store guarded its writes,
// pebble's next commit after the failed log write panicked the process;
// with the log's errors passed on to pebble, a rotation of the log
// (sync=false) still does, unrecoverably (an unlock of an unlocked mutex).
func TestWriteErrorBreaksTheStoreNotTheProcess(t *testing.T) {
	for _, sync := range []bool{false, true} {
		t.Run(fmt.Sprint("sync=", sync), func(t *testing.T) { testWriteErrorBreaksTheStore(t, sync) })
	}
}

func testWriteErrorBreaksTheStore(t *testing.T, sync bool) {
	d := newDiskHost(t, sync)
	defer d.Stop(t)
	rev := hosttest.Put(t, d.a, "k0", "v0")
	hosttest.WaitCursor(t, d.fa, rev)
	before := d.fa.Status().Cursor

	d.fake.Lie.Store(true)
	d.fake.Avail.Store(0)
	// NoSync commits reach the log file a block (32 KiB) at a time: write
	// until one fails.
	big := strings.Repeat("x", 8<<10)
	last := rev
	deadline := time.Now().Add(2 * time.Minute)
	for i := 1; d.fa.Status().State != httpapi.StateFailed; i++ {
		if time.Now().After(deadline) {
			t.Fatalf("fold a still %s after %d writes of 8 KiB on a disk failing every write", d.fa.Status().State, i)
		}
		last = hosttest.Put(t, d.a, "big"+strconv.Itoa(i), big)
	}
	st := d.fa.Status()
	for _, want := range []string{"store broken", filepath.Join(d.dir, "a"), "no space left on device"} {
		if !strings.Contains(st.LastError, want) {
			t.Errorf("fold a's last_error %q does not say %q", st.LastError, want)
		}
	}
	reached := st.Cursor
	if reached < before {
		t.Errorf("the fold's cursor went from %d to %d", before, reached)
	}
	d.othersRun(t, "x1")

	if sync {
		// Paused, the fold does not retry: the reopen is the test's.
		if err := d.fa.Pause(); err != nil {
			t.Fatal(err)
		}
		hosttest.WaitFor(t, func() bool { return d.fa.Status().State == httpapi.StatePaused })
		d.fake.Lie.Store(false)
		d.fake.Avail.Store(1 << 40)
		st := d.fa.Store()
		cur, err := st.Reopen()
		if err != nil {
			t.Fatal(err)
		}
		// The batch whose log write broke the store was refused, but
		// pebble may have flushed its memtable since (whole batches).
		if uint64(cur.Rev) < reached || uint64(cur.Rev) > last {
			t.Errorf("reopened cursor %d, want between %d (the fold's, synced) and %d (the last write)", cur.Rev, reached, last)
		}
		sameAsBucketUpTo(t, st, uint64(cur.Rev))
		if err := d.fa.Resume(); err != nil {
			t.Fatal(err)
		}
	} else {
		d.fake.Lie.Store(false)
		d.fake.Avail.Store(1 << 40)
	}
	hosttest.WaitFor(t, func() bool {
		st := d.fa.Status()
		return st.Cursor >= last && st.State == httpapi.StateFollowing
	})
	sameAsBucketUpTo(t, d.fa.Store(), last)
	if err := d.Stop(t); err != nil {
		t.Errorf("the host whose store was reopened: Run returned %v", err)
	}
}

// sameAsBucketUpTo checks that st holds exactly the keys of bucket a up to
// revision rev: one key per revision (none deleted), none past its cursor.
func sameAsBucketUpTo(t *testing.T, st *fold.Store, rev uint64) {
	t.Helper()
	n := uint64(0)
	err := st.RawRange("", func(key []byte, r protocol.Revision, _ []byte) error {
		n++
		if uint64(r) > rev {
			t.Errorf("the store holds %s at revision %d, past %d", key, r, rev)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if c := st.Cursor(); uint64(c.Rev) != rev || n != rev {
		t.Errorf("the store holds %d entries at cursor %d, want %d at %d", n, c.Rev, rev, rev)
	}
}
