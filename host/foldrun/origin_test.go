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

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// readOrigin opens the stopped store in dir and returns its record and cursor.
func readOrigin(t *testing.T, dir string) (fold.Origin, bool, protocol.Cursor) {
	t.Helper()
	st, cur, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	o, ok, err := st.Origin()
	if err != nil {
		t.Fatal(err)
	}
	return o, ok, cur
}

func streamCreated(t *testing.T, b *natskv.Bucket) time.Time {
	t.Helper()
	c, err := b.StreamCreated(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestStoreRecordsWhatItFolds: a fold's store records its bucket, scope and
// stream; a config that names another bucket or scope for that store is
// refused at start and by an offline export, naming both and touching
// nothing; --adopt (FoldOptions.Adopt) takes it over deliberately.
func TestStoreRecordsWhatItFolds(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	routes := host.FoldOptions{Name: "routes", Bucket: "routes", Scope: []string{"route."}, DataDir: dir}
	r := hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{routes}})
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), "v")
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	rec, ok, cur := readOrigin(t, dir)
	want := fold.NewOrigin("routes", []string{"route."}, streamCreated(t, b))
	if !ok || !rec.Equal(want) || rec.StreamCreated.IsZero() {
		t.Fatalf("recorded %v (%t), want %v", rec, ok, want)
	}

	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	arts := host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}
	for _, c := range []struct {
		name   string
		fo     host.FoldOptions
		naming []string
	}{
		{"another bucket", host.FoldOptions{Name: "o2", Bucket: "other2", Scope: []string{"route."}, DataDir: dir}, []string{`"routes"`, `"other2"`, "o2", "--adopt o2"}},
		{"another scope", host.FoldOptions{Name: "routes", Bucket: "routes", Scope: []string{"host."}, DataDir: dir}, []string{`"route."`, `"host."`}},
		{"the whole bucket", host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: dir}, []string{"whole bucket"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			o := host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{c.fo}}
			err := hosttest.StartErr(t, o)
			var oe *host.OriginError
			if !errors.As(err, &oe) || !errors.Is(err, host.ErrOriginMismatch) {
				t.Fatalf("start: err = %v, want an *OriginError", err)
			}
			_, err = host.ExportStopped(context.Background(), o, c.fo.Name, true)
			if !errors.As(err, &oe) {
				t.Fatalf("offline export: err = %v, want an *OriginError", err)
			}
			for _, s := range c.naming {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error does not name %s: %v", s, err)
				}
			}
			if got, ok, gotCur := readOrigin(t, dir); !ok || !got.Equal(rec) || gotCur != cur {
				t.Fatalf("refused start changed the store: %v %v", got, gotCur)
			}
		})
	}
	if _, err := store.Pointer(context.Background(), "routes"); !errors.Is(err, artifact.ErrNoPointer) {
		t.Fatal("a refused export published an artifact")
	}

	// Adopt: a deliberate takeover records the config's origin.
	other, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "other2"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// The adopted bucket carries the revisions the cursor names (as a
	// restored copy would): the fold resumes there.
	for i := range 5 {
		if _, err := other.KV().Put(context.Background(), fmt.Sprintf("route.h%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	logs := &syncbuf.Buffer{}
	adopt := host.FoldOptions{Name: "o2", Bucket: "other2", Scope: []string{"route."}, DataDir: dir, Adopt: true}
	r = hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{adopt}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got, _, _ := readOrigin(t, dir); !got.Equal(fold.NewOrigin("other2", []string{"route."}, streamCreated(t, other))) {
		t.Fatalf("adopted store records %v", got)
	}
	if !strings.Contains(logs.String(), "level=WARN") || !strings.Contains(logs.String(), "adopting") {
		t.Fatalf("adoption not logged as a warning:\n%s", logs)
	}
}

// TestRecreatedStreamIsRefused: a bucket deleted and made again has a new
// stream whose revisions start over; a store of the old one must not
// resume on it (its cursor would skip the new stream's first revisions).
func TestRecreatedStreamIsRefused(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: dir}}}
	r := hosttest.StartHost(t, o)
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	hosttest.WaitCursor(t, r.H.Fold("routes"), last)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	before, _, _ := readOrigin(t, dir)

	hosttest.RemakeBucket(t, url, "routes") // a new stream
	err := hosttest.StartErr(t, o)
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "deleted and made again") {
		t.Fatalf("start on a recreated stream: err = %v, want a stream mismatch", err)
	}
	if after, _, _ := readOrigin(t, dir); !after.Equal(before) {
		t.Fatalf("refused start changed the record: %v -> %v", before, after)
	}
}

// TestStoreWithoutRecordIsUpgraded: a store written before origins were
// recorded (cursor, data, no record) starts as before and gets the
// config's origin, stream included.
func TestStoreWithoutRecordIsUpgraded(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	rev := hosttest.Put(t, b, "k", "v")
	st, _, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = st.Commit(fold.Commit{Cursor: protocol.Cursor{Rev: protocol.Revision(rev)},
		Raw: []fold.Update{{Key: "k", Op: fold.OpPut, Rev: protocol.Revision(rev), Value: []byte("v")}}})
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncbuf.Buffer{}
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: dir}}})
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	got, ok, cur := readOrigin(t, dir)
	if !ok || !got.Equal(fold.NewOrigin("routes", nil, streamCreated(t, b))) || cur.Rev != protocol.Revision(rev) {
		t.Fatalf("upgraded store: %v (%t) at %v", got, ok, cur)
	}
	if !strings.Contains(logs.String(), "earlier version") {
		t.Fatalf("the upgrade was not logged:\n%s", logs)
	}
}

// TestBootstrapChecksOrigin: an artifact of another bucket is refused
// before anything downloads; one from the same bucket but an older stream
// installs (bootstrap does not reach NATS) and the fold's start refuses it.
func TestBootstrapChecksOrigin(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	base := t.TempDir()
	store, err := dirstore.New(filepath.Join(base, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	arts := host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}
	a := host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, "a")}
	r := hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{a}})
	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "k", "v"))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ExportStopped(context.Background(), host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{a}, Logger: hosttest.Quiet}, "routes", true); err != nil {
		t.Fatal(err)
	}

	wrong := host.FoldOptions{Name: "routes", Bucket: "elsewhere", DataDir: filepath.Join(base, "b")}
	_, err = host.Bootstrap(context.Background(), host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{wrong}, Logger: hosttest.Quiet}, "routes", host.BootstrapOptions{})
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("bootstrap from another bucket: err = %v", err)
	}
	if names, _ := filepath.Glob(filepath.Join(base, "b*")); len(names) != 0 {
		t.Fatalf("refused bootstrap left %v", names)
	}

	hosttest.RemakeBucket(t, url, "routes")
	c := host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, "c")}
	o := host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{c}, Logger: hosttest.Quiet}
	if _, err := host.Bootstrap(context.Background(), o, "routes", host.BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hosttest.StartErr(t, o); !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "deleted and made again") {
		t.Fatalf("start of a fold bootstrapped from an older stream: err = %v", err)
	}
}

// TestLiveStreamReplacementStopsTheFold: a bucket deleted and made again
// while the fold runs is caught when the watch re-arms on the new stream:
// the fold stops (failed, ErrStreamReplaced) instead of resuming its old
// cursor among the new stream's revisions (which would skip the new
// stream's first writes and keep the old stream's keys).
func TestLiveStreamReplacementStopsTheFold(t *testing.T) {
	t.Parallel() // it waits ~20 s for the consumer's missed heartbeats: the wait overlaps the other waiting tests (scripts/test runs four at once)
	url, b := hosttest.NATSServer(t)
	r := hosttest.StartHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: filepath.Join(t.TempDir(), "fold")}}})
	f := r.H.Fold("routes")
	var last uint64
	for i := range 3 {
		last = hosttest.Put(t, b, fmt.Sprintf("old.%d", i), "v")
	}
	hosttest.WaitCursor(t, f, last)
	kv := hosttest.RemakeBucket(t, url, "routes")
	for i := range 6 { // revisions 1..6 of the new stream, past the old cursor
		if _, err := kv.Put(context.Background(), fmt.Sprintf("new.%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	// The watch notices the deletion only when its consumer's heartbeats
	// stop (~10 s); the fold must stop then, at its old cursor.
	hosttest.WaitFor(t, func() bool { return f.Status().State == httpapi.StateFailed || f.Status().Cursor != last })
	st := f.Status()
	if !strings.Contains(st.LastError, "deleted and made again") || st.Cursor != last {
		t.Fatalf("after the replacement: state %s cursor %d (want %d), error %q", st.State, st.Cursor, last, st.LastError)
	}
	if err := r.Stop(t); !errors.Is(err, fold.ErrStreamReplaced) {
		t.Fatalf("Run: err = %v, want ErrStreamReplaced", err)
	}
}

// TestRefusedStartReportsEveryFoldAndWritesNothing: two folds whose data
// dirs were swapped are both named in one refusal, and a fold listed before
// them (new, or from an earlier version) gets no record from the failed
// start.
func TestRefusedStartReportsEveryFoldAndWritesNothing(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	if _, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "other"}, natskv.Options{}); err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	a := host.FoldOptions{Name: "a", Bucket: "routes", DataDir: filepath.Join(base, "a")}
	o := host.FoldOptions{Name: "o", Bucket: "other", DataDir: filepath.Join(base, "o")}
	r := hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{a, o}})
	hosttest.WaitCursor(t, r.H.Fold("a"), hosttest.Put(t, b, "k", "v"))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	legacy := filepath.Join(base, "legacy")
	st, _, err := fold.Open(legacy, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.Commit(fold.Commit{Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	a.DataDir, o.DataDir = o.DataDir, a.DataDir
	first := host.FoldOptions{Name: "first", Bucket: "routes", DataDir: legacy}
	err = hosttest.StartErr(t, host.Options{NATS: nats, Folds: []host.FoldOptions{first, a, o}})
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "fold a:") || !strings.Contains(err.Error(), "fold o:") {
		t.Fatalf("swapped data dirs: err = %v, want both folds named", err)
	}
	if strings.Contains(err.Error(), "stream") && strings.Contains(err.Error(), "deleted and made again") {
		t.Errorf("a bucket mismatch talks about streams: %v", err)
	}
	if _, ok, _ := readOrigin(t, legacy); ok {
		t.Fatal("a refused start recorded an origin in another fold's store")
	}
}

// TestUnreadableOriginRecord: a garbled record refuses the start, names
// the way out, and --adopt replaces it.
func TestUnreadableOriginRecord(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	fo := host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: dir}
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	r := hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{fo}})
	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "k", "v"))
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	garbleOrigin(t, dir)
	err := hosttest.StartErr(t, host.Options{NATS: nats, Folds: []host.FoldOptions{fo}})
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "unreadable") || !strings.Contains(err.Error(), "--adopt routes") {
		t.Fatalf("garbled record: err = %v", err)
	}
	fo.Adopt = true
	r = hosttest.StartHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{fo}})
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	if got, ok, _ := readOrigin(t, dir); !ok || !got.Equal(fold.NewOrigin("routes", nil, streamCreated(t, b))) {
		t.Fatalf("adopted record: %v %v", got, ok)
	}
}

// garbleOrigin overwrites the store's origin record (metadata key
// "morigin", see host/fold's layout) with bytes that do not decode.
func garbleOrigin(t *testing.T, dir string) {
	t.Helper()
	db, err := pebble.Open(dir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("morigin"), []byte("garbage{"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// quietPebble keeps a test's direct pebble.Open off stderr.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any) {}

func (quietPebble) Errorf(string, ...any) {}

func (quietPebble) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// TestKilledBootstrapLeftoversAreCleared: what a killed bootstrap left
// beside a fold's data dir is removed by a start and by an offline open,
// unless a bootstrap of the fold holds its lock (its import is live).
func TestKilledBootstrapLeftoversAreCleared(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	leftover := func() string {
		t.Helper()
		p := filepath.Join(filepath.Dir(dir), artifact.ImportTempPrefix(dir)+"killed")
		if err := os.MkdirAll(filepath.Join(p, "data"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	gone := func(p string) bool { _, err := os.Stat(p); return errors.Is(err, os.ErrNotExist) }
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: dir}}}

	p := leftover()
	r := hosttest.StartHost(t, o)
	if !gone(p) {
		t.Fatal("a start left a killed bootstrap's import dir")
	}
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}
	p = leftover()
	st, err := host.OpenStopped(dir, hosttest.Quiet)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	if !gone(p) {
		t.Fatal("an offline open left a killed bootstrap's import dir")
	}
	// A running bootstrap's import is not touched.
	lk, err := files.TryLock(filepath.Join(filepath.Dir(dir), "."+filepath.Base(dir)+".bootstrap.lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lk.Unlock()
	p = leftover()
	if st, err = host.OpenStopped(dir, hosttest.Quiet); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if gone(p) {
		t.Fatal("an open removed the import of a running bootstrap")
	}
}
