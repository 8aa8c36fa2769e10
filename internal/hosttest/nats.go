package hosttest

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// NATSServer is an embedded NATS server for one test, with the bucket
// "routes" (history 64) open on a client of it.
func NATSServer(t testing.TB) (string, *natskv.Bucket) {
	t.Helper()
	return ServerWithBucket(t, natskv.BucketConfig{Name: "routes", History: 64})
}

// RepairServer is an embedded server with the bucket "rt" made from cfg.
func RepairServer(t testing.TB, cfg natskv.BucketConfig) (string, *natskv.Bucket) {
	t.Helper()
	cfg.Name = "rt"
	return ServerWithBucket(t, cfg)
}

// ServerWithBucket is an embedded server with the bucket cfg, open on a
// client of it.
func ServerWithBucket(t testing.TB, cfg natskv.BucketConfig) (string, *natskv.Bucket) {
	t.Helper()
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, cfg, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return srv.ClientURL(), b
}

// Conn is a NATS client for one test.
func Conn(t testing.TB, url string) *nats.Conn {
	t.Helper()
	c, err := natskv.Connect(natskv.ConnOptions{URL: url})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// JS is a JetStream client of the server at url, for one test.
func JS(t testing.TB, url string) jetstream.JetStream {
	t.Helper()
	js, err := jetstream.New(Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	return js
}

// Put writes key and returns its revision.
func Put(t testing.TB, b *natskv.Bucket, key, value string) uint64 {
	t.Helper()
	rev, err := b.KV().Put(context.Background(), key, []byte(value))
	if err != nil {
		t.Fatal(err)
	}
	return rev
}

// Route is the example router's value of a route with one upstream.
func Route(addr string) string { return `{"upstreams":[{"addr":"` + addr + `"}]}` }

// UpdateStream changes the config of the stream name on the server at url.
func UpdateStream(t testing.TB, url, name string, edit func(*jetstream.StreamConfig)) {
	t.Helper()
	js := JS(t, url)
	s, err := js.Stream(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	cfg := s.CachedInfo().Config
	edit(&cfg)
	if _, err := js.UpdateStream(context.Background(), cfg); err != nil {
		t.Fatal(err)
	}
}

// RemakeBucket deletes the KV bucket name and makes it again (History 1),
// retrying the create: the server removes a deleted stream's files after it
// answered, and a create right after it can fail ("error creating store for
// stream").
func RemakeBucket(t testing.TB, url, name string) jetstream.KeyValue {
	t.Helper()
	js := JS(t, url)
	if err := js.DeleteKeyValue(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	var kv jetstream.KeyValue
	var err error
	WaitFor(t, func() bool {
		kv, err = js.CreateKeyValue(context.Background(), jetstream.KeyValueConfig{Bucket: name, History: 1})
		return err == nil
	})
	return kv
}

// Push stores the plugin file as ref's object and returns its hash.
func Push(t testing.TB, js jetstream.JetStream, ref pluginobj.Ref, file string) string {
	t.Helper()
	b := ReadFile(t, file)
	if _, err := pluginobj.Push(context.Background(), js, ref, b, "test"); err != nil {
		t.Fatal(err)
	}
	return wasm.ModuleHash(b)
}

// EffectsStream is a stream the host publishes effects to: it captures
// subjects and the folds' fences, and allows atomic batches.
func EffectsStream(name string, subjects ...string) jetstream.StreamConfig {
	return jetstream.StreamConfig{Name: name, Subjects: append(subjects, "foldhost.fence.>"), AllowAtomicPublish: true}
}

// EffectsSetup is a routes bucket, an effects stream EV (duplicate window
// dup; 0: the server's default) and the C router fold's options
// publishing to it with batches of one update, and the server's URL.
func EffectsSetup(t testing.TB, dup time.Duration) (*natskv.Bucket, jetstream.Stream, host.FoldOptions, string) {
	t.Helper()
	url, b := NATSServer(t)
	cfg := EffectsStream("EV", "route.changed")
	cfg.Duplicates = dup
	s, err := JS(t, url).CreateStream(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b, s, host.FoldOptions{Name: "routes", Plugin: BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes"),
		EffectsStream: "EV", BatchSize: 1}, url
}

// Retry runs op until it succeeds (a cluster electing a leader refuses for
// a while), failing the test after a generous ceiling.
func Retry[T any](t testing.TB, what string, op func(ctx context.Context) (T, error)) T {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		v, err := op(ctx)
		cancel()
		if err == nil {
			return v
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: still failing after 2m: %v", what, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// KVEntry is a key's revision and value, in a bucket or a fold.
type KVEntry struct {
	Rev   protocol.Revision
	Value string
}

// TruthOf reads the bucket's current entries.
func TruthOf(t testing.TB, kv jetstream.KeyValue) map[string]KVEntry {
	t.Helper()
	keys := Retry(t, "list keys", func(ctx context.Context) ([]string, error) { return kv.Keys(ctx) })
	m := map[string]KVEntry{}
	for _, k := range keys {
		e := Retry(t, "get "+k, func(ctx context.Context) (jetstream.KeyValueEntry, error) { return kv.Get(ctx, k) })
		m[k] = KVEntry{Rev: protocol.Revision(e.Revision()), Value: string(e.Value())}
	}
	return m
}

// FoldOf reads a fold's raw entries.
func FoldOf(t testing.TB, f *host.Fold) map[string]KVEntry {
	t.Helper()
	m := map[string]KVEntry{}
	err := f.Store().RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		m[string(k)] = KVEntry{Rev: rev, Value: string(v)}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// ViewsOf reads every view entry of f from one snapshot.
func ViewsOf(t testing.TB, f *host.Fold) map[string]string {
	t.Helper()
	return entriesOf(t, f, func(sn *fold.Snapshot, add func(k, v []byte) error) error { return sn.ViewRange(nil, add) })
}

// RawOf reads every raw entry (key and value) of f from one snapshot.
func RawOf(t testing.TB, f *host.Fold) map[string]string {
	t.Helper()
	return entriesOf(t, f, func(sn *fold.Snapshot, add func(k, v []byte) error) error {
		return sn.RawRange("", func(k []byte, _ protocol.Revision, v []byte) error { return add(k, v) })
	})
}

func entriesOf(t testing.TB, f *host.Fold, scan func(sn *fold.Snapshot, add func(k, v []byte) error) error) map[string]string {
	t.Helper()
	sn, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	got := map[string]string{}
	if err := scan(sn, func(k, v []byte) error { got[string(k)] = string(v); return nil }); err != nil {
		t.Fatal(err)
	}
	return got
}

// SameEntries fails the test (naming who) where got differs from want.
func SameEntries(t testing.TB, who string, got, want map[string]KVEntry) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("%s: %d keys, the bucket has %d", who, len(got), len(want))
	}
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			t.Errorf("%s: key %s = %+v (present %t), the bucket has %+v", who, k, g, ok, w)
		}
	}
}
