package wasm

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// goRouterWasm is the Go build of the example router, built by
// scripts/build-plugins (the test command runs it).
func goRouterWasm(t testing.TB) string {
	t.Helper()
	return builtPlugin(t, "example-router", "router-go")
}

// builtPlugin is plugins/<dir>/build/<name>.wasm, which must exist.
func builtPlugin(t testing.TB, dir, name string) string {
	t.Helper()
	p := filepath.Join(repoRoot(t), "plugins", dir, "build", name+".wasm")
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
	}
	return p
}

// newRuntime makes a runtime closed at the test's end, sharing the test
// binary's compilation cache unless o names one.
func newRuntime(t testing.TB, o Options) *Runtime {
	t.Helper()
	if o.CacheDir == "" {
		o.CacheDir = testCacheDir
	}
	r, err := NewRuntime(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Close(context.Background()) })
	return r
}

// feed is a fold.Source over a fixed list of events: the tests' way to hand
// the real loop exact batches.
type feed struct {
	ch chan fold.Event
}

func newFeed(batches ...[]fold.Update) *feed {
	n := 0
	for _, b := range batches {
		n += len(b)
	}
	f := &feed{ch: make(chan fold.Event, n)}
	for _, b := range batches {
		for _, u := range b {
			f.ch <- fold.Event{Update: u}
		}
	}
	close(f.ch)
	return f
}

func (f *feed) Events() <-chan fold.Event { return f.ch }
func (f *feed) Stop()                     {}
func (f *feed) Err() error                { return nil }

func views(t testing.TB, st *fold.Store) map[string]string {
	t.Helper()
	out := map[string]string{}
	if err := st.ViewRange(nil, func(k, v []byte) error {
		out[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestLoadReadsInfoAndIdentity(t *testing.T) {
	r := newRuntime(t, Options{})
	m, err := r.LoadFile(context.Background(), goRouterWasm(t))
	if err != nil {
		t.Fatal(err)
	}
	if m.Info.Name != "example-router" || m.Info.Version != "1.0.0" || m.Info.ViewSchema != 1 || len(m.SHA256) != 64 {
		t.Fatalf("module %+v", m)
	}
	if !strings.Contains(string(m.Identity().Encode()), `"abi":"v1.3"`) {
		t.Fatalf("identity %+v", m.Identity())
	}
}

func TestLoadRejectsGarbage(t *testing.T) {
	r := newRuntime(t, Options{})
	for name, b := range map[string][]byte{
		"empty":      {},
		"text":       []byte("not wasm"),
		"truncated":  []byte("\x00asm\x01\x00\x00\x00\x01"),
		"bare magic": []byte("\x00asm\x01\x00\x00\x00"),
	} {
		_, err := r.Load(context.Background(), b)
		if !errors.Is(err, ErrInvalidModule) {
			t.Errorf("%s: err = %v, want ErrInvalidModule", name, err)
		}
	}
}

// pluginAndStore loads the module at path into r as a Plugin and opens a
// fresh fold store; both close at the test's end.
func pluginAndStore(t testing.TB, r *Runtime, path string) (*Plugin, *fold.Store) {
	t.Helper()
	m, err := r.LoadFile(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	t.Cleanup(func() { p.Close(context.Background()) })
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return p, st
}

func TestRouterThroughTheLoop(t *testing.T) {
	r := newRuntime(t, Options{})
	m, err := r.LoadFile(context.Background(), goRouterWasm(t))
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	put := func(rev protocol.Revision, key, val string) fold.Update {
		return fold.Update{Key: key, Value: []byte(val), Rev: rev, Op: fold.OpPut}
	}
	var rejected int
	loop := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: 3, OnApplied: func(a fold.Applied) { rejected += a.Rejected }})
	src := newFeed(
		[]fold.Update{
			put(1, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`),
			put(2, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`),
			put(3, "route.c", `{"upstreams":[]}`), // rejected: empty
		},
		[]fold.Update{
			put(4, "route.a", `{"upstreams":[{"addr":"10.0.0.3:80","weight":2}]}`),
			put(5, "other", `x`), // rejected: not a route
			{Key: "route.b", Rev: 6, Op: fold.OpDelete},
		},
	)
	cur, err := loop.Run(context.Background(), src)
	if err != nil {
		t.Fatal(err)
	}
	if cur.Rev != 6 || rejected != 2 {
		t.Fatalf("cursor %v rejected %d", cur, rejected)
	}
	got := views(t, st)
	want := map[string]string{
		"host/a":                 "10.0.0.3:80=2",
		"upstream/10.0.0.3:80/a": "",
	}
	if len(got) != len(want) {
		t.Fatalf("views %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Fatalf("views %v, want %v", got, want)
		}
	}
	id, ok, err := st.PluginIdentity()
	if err != nil || !ok || !strings.Contains(string(id), m.SHA256) {
		t.Fatalf("plugin identity %s %v %v", id, ok, err)
	}
}

// emptyReader is a fold.Reader over an empty fold, for calls that need no
// committed state.
type emptyReader struct{}

func (emptyReader) Cursor() protocol.Cursor                  { return protocol.Cursor{} }
func (emptyReader) Get(string) (fold.Entry, bool, error)     { return fold.Entry{}, false, nil }
func (emptyReader) ViewGet([]byte) ([]byte, bool, error)     { return nil, false, nil }
func (emptyReader) PluginIdentity() ([]byte, bool, error)    { return nil, false, nil }
func (emptyReader) RawKeys(string, func([]byte) error) error { return nil }
func (emptyReader) RawRange(string, func([]byte, protocol.Revision, []byte) error) error {
	return nil
}
func (emptyReader) ViewRange([]byte, func(k, v []byte) error) error { return nil }
