package host_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// syncBuffer is a log sink safe for the host's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

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

// startErr starts a host with o and returns Start's error (the host is
// closed either way; a host that starts is stopped at once).
func startErr(t *testing.T, o host.Options) error {
	t.Helper()
	if o.Logger == nil {
		o.Logger = quiet
	}
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.Start(context.Background())
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
	url, b := natsServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	routes := host.FoldOptions{Name: "routes", Bucket: "routes", Scope: []string{"route."}, DataDir: dir}
	r := startHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{routes}})
	var last uint64
	for i := range 5 {
		last = put(t, b, fmt.Sprintf("route.h%d", i), "v")
	}
	waitCursor(t, r.h.Fold("routes"), last)
	if err := r.stop(t); err != nil {
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
			err := startErr(t, o)
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
	other, err := natskv.OpenBucket(context.Background(), nc(t, url), natskv.BucketConfig{Name: "other2"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	logs := &syncBuffer{}
	adopt := host.FoldOptions{Name: "o2", Bucket: "other2", Scope: []string{"route."}, DataDir: dir, Adopt: true}
	r = startHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{adopt}, Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err := r.stop(t); err != nil {
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
	url, b := natsServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: dir}}}
	r := startHost(t, o)
	var last uint64
	for i := range 5 {
		last = put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	waitCursor(t, r.h.Fold("routes"), last)
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	before, _, _ := readOrigin(t, dir)

	js, err := jetstream.New(nc(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), "routes"); err != nil {
		t.Fatal(err)
	}
	err = startErr(t, o) // the host makes the bucket again, with a new stream
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "stream created") {
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
	url, b := natsServer(t)
	dir := filepath.Join(t.TempDir(), "fold")
	rev := put(t, b, "k", "v")
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
	logs := &syncBuffer{}
	r := startHost(t, host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: dir}}})
	if err := r.stop(t); err != nil {
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
	url, b := natsServer(t)
	base := t.TempDir()
	store, err := dirstore.New(filepath.Join(base, "artifacts"))
	if err != nil {
		t.Fatal(err)
	}
	nats := host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}
	arts := host.ArtifactOptions{Store: store, Where: "test", Holder: "t"}
	a := host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, "a")}
	r := startHost(t, host.Options{NATS: nats, Folds: []host.FoldOptions{a}})
	waitCursor(t, r.h.Fold("routes"), put(t, b, "k", "v"))
	if err := r.stop(t); err != nil {
		t.Fatal(err)
	}
	if _, err := host.ExportStopped(context.Background(), host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{a}, Logger: quiet}, "routes", true); err != nil {
		t.Fatal(err)
	}

	wrong := host.FoldOptions{Name: "routes", Bucket: "elsewhere", DataDir: filepath.Join(base, "b")}
	_, err = host.Bootstrap(context.Background(), host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{wrong}, Logger: quiet}, "routes", host.BootstrapOptions{})
	if !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "elsewhere") {
		t.Fatalf("bootstrap from another bucket: err = %v", err)
	}
	if names, _ := filepath.Glob(filepath.Join(base, "b*")); len(names) != 0 {
		t.Fatalf("refused bootstrap left %v", names)
	}

	js, err := jetstream.New(nc(t, url))
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), "routes"); err != nil {
		t.Fatal(err)
	}
	c := host.FoldOptions{Name: "routes", Bucket: "routes", DataDir: filepath.Join(base, "c")}
	o := host.Options{NATS: nats, Artifacts: arts, Folds: []host.FoldOptions{c}, Logger: quiet}
	if _, err := host.Bootstrap(context.Background(), o, "routes", host.BootstrapOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := startErr(t, o); !errors.Is(err, host.ErrOriginMismatch) || !strings.Contains(err.Error(), "stream created") {
		t.Fatalf("start of a fold bootstrapped from an older stream: err = %v", err)
	}
}

// nc is a NATS client for one test.
func nc(t *testing.T, url string) *nats.Conn {
	t.Helper()
	c, err := natskv.Connect(natskv.ConnOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}
