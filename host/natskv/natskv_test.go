package natskv

import (
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// startServer runs a real, in-process nats-server with JetStream for one test.
func startServer(t *testing.T, dir string, port int) *embeddednats.Server {
	t.Helper()
	s, err := embeddednats.Start(embeddednats.Options{Dir: dir, Port: port})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(s.Shutdown)
	return s
}

func connect(t *testing.T, url string) *nats.Conn {
	t.Helper()
	nc, err := Connect(ConnOptions{URL: url, Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

func openBucket(t *testing.T, nc *nats.Conn, cfg BucketConfig) *Bucket {
	t.Helper()
	b, err := OpenBucket(t.Context(), nc, cfg, Options{RequestTimeout: 5 * time.Second, ProbeInterval: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func put(t *testing.T, b *Bucket, key, val string) protocol.Revision {
	t.Helper()
	rev, err := b.KV().Put(t.Context(), key, []byte(val))
	if err != nil {
		t.Fatalf("put %s: %v", key, err)
	}
	return protocol.Revision(rev)
}

// next receives one event or fails the test at the deadline.
func next(t *testing.T, w *Watcher) (fold.Event, bool) {
	t.Helper()
	select {
	case ev, ok := <-w.Events():
		return ev, ok
	case <-time.After(10 * time.Second):
		t.Fatal("no event within 10s")
	}
	return fold.Event{}, false
}

// collect reads events until it has seen want updates (Synced markers and
// settle marks are not counted) and returns their revisions.
func collect(t *testing.T, w *Watcher, want int) []protocol.Revision {
	t.Helper()
	var revs []protocol.Revision
	for len(revs) < want {
		ev, ok := next(t, w)
		if !ok {
			t.Fatalf("watch ended after %v: %v", revs, w.Err())
		}
		if !ev.Synced && !ev.SettleOnly() {
			revs = append(revs, ev.Rev)
		}
	}
	return revs
}

func TestStateSyncThenLive(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "sync"})
	put(t, b, "a", "1")
	put(t, b, "a", "2") // supersedes rev 1 (history 1)
	put(t, b, "b", "1")
	if err := b.KV().Delete(t.Context(), "b"); err != nil {
		t.Fatal(err)
	}
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if w.HeadAtStart() != 4 {
		t.Fatalf("HeadAtStart = %d, want 4", w.HeadAtStart())
	}
	var got []string
	for {
		ev, _ := next(t, w)
		if ev.Synced {
			break
		}
		got = append(got, fmt.Sprintf("%s@%d:%s:%s", ev.Key, ev.Rev, ev.Op, ev.Value))
	}
	want := []string{"a@2:put:2", "b@4:delete:"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("state-sync delivered %v, want %v", got, want)
	}
	put(t, b, "c", "live")
	ev, _ := next(t, w)
	if ev.Key != "c" || ev.Rev != 5 || ev.Time == 0 {
		t.Fatalf("live event %+v", ev)
	}
}

func TestResumeDeliversOnlyTheDelta(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "delta", History: 10})
	for i := range 10 {
		put(t, b, fmt.Sprintf("k%d", i%3), "v")
	}
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 7}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if got := collect(t, w, 3); fmt.Sprint(got) != "[8 9 10]" {
		t.Fatalf("resume from 7 delivered %v, want [8 9 10]", got)
	}
}

func TestScopePrefixesOnOneConsumer(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "scoped"})
	put(t, b, "route.a", "1")
	put(t, b, "other.x", "1")
	put(t, b, "tenant.t1.k", "1")
	w, err := b.Watch(t.Context(), Scope{Prefixes: []string{"route.", "tenant.t1."}}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var keys []string
	for {
		ev, _ := next(t, w)
		if ev.Synced {
			break
		}
		keys = append(keys, ev.Key)
	}
	put(t, b, "other.y", "2")
	put(t, b, "route.b", "2")
	ev, _ := next(t, w)
	keys = append(keys, ev.Key)
	if fmt.Sprint(keys) != "[route.a tenant.t1.k route.b]" {
		t.Fatalf("scoped watch delivered %v", keys)
	}
	info, err := b.js.Stream(t.Context(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	if n := info.CachedInfo().State.Consumers; n != 1 {
		t.Fatalf("%d consumers for a two-prefix watch, want 1", n)
	}
}

func TestScopeValidate(t *testing.T) {
	for _, tc := range []struct {
		s  Scope
		ok bool
	}{
		{Scope{}, true},
		{Scope{Prefixes: []string{"route."}}, true},
		{Scope{Prefixes: []string{"a.", "b.c."}}, true},
		{Scope{Prefixes: []string{""}}, false},
		{Scope{Prefixes: []string{"rou"}}, false},
		{Scope{Prefixes: []string{"a.*."}}, false},
		{Scope{Prefixes: []string{"a..b."}}, false},
		{Scope{Prefixes: []string{"a.", "a.b."}}, false},
	} {
		if err := tc.s.Validate(); (err == nil) != tc.ok {
			t.Errorf("Validate(%v) = %v, want ok=%v", tc.s.Prefixes, err, tc.ok)
		}
	}
}

// TestNATSSilentClampIsCaught pins the server behaviour the guard exists for:
// a raw resume below the first retained revision starts at the first one
// without any error, while Watch refuses with fold.ErrCursorExpired.
func TestNATSSilentClampIsCaught(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "clamp"})
	for i := 1; i <= 5; i++ {
		put(t, b, "k", fmt.Sprint(i)) // history 1: revisions 1..4 are gone
	}
	put(t, b, "j", "x") // rev 6

	raw, err := b.KV().WatchAll(t.Context(), jetstream.ResumeFromRevision(3))
	if err != nil {
		t.Fatalf("raw resume below first revision errored (NATS behaviour changed?): %v", err)
	}
	defer raw.Stop()
	select {
	case e := <-raw.Updates():
		if e == nil || e.Revision() != 5 {
			t.Fatalf("raw resume from 3: got %v, want silent clamp to revision 5", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("raw watch delivered nothing")
	}

	_, err = b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 2}, WatchOptions{})
	var ce *CursorError
	if !errors.Is(err, fold.ErrCursorExpired) || !errors.As(err, &ce) || ce.Retention.First != 5 {
		t.Fatalf("Watch from 2 with first=5: err = %v, want fold.ErrCursorExpired with first 5", err)
	}
	// The boundary: cursor 4 reads 5 onward, which is retained.
	w, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 4}, WatchOptions{})
	if err != nil {
		t.Fatalf("Watch from 4 with first=5: %v", err)
	}
	w.Stop()
}

// TestNATSSilentSkipBeyondHeadIsCaught: a raw resume beyond the last revision
// waits, then silently skips every revision up to it; Watch refuses.
func TestNATSSilentSkipBeyondHeadIsCaught(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "beyond", History: 64})
	for i := 1; i <= 3; i++ {
		put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	raw, err := b.KV().WatchAll(t.Context(), jetstream.ResumeFromRevision(9))
	if err != nil {
		t.Fatalf("raw resume beyond head errored (NATS behaviour changed?): %v", err)
	}
	defer raw.Stop()
	for i := 4; i <= 10; i++ {
		put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	var first uint64
	deadline := time.After(10 * time.Second)
	for first == 0 {
		select {
		case e := <-raw.Updates():
			if e != nil {
				first = e.Revision()
			}
		case <-deadline:
			t.Fatal("raw watch delivered nothing")
		}
	}
	if first != 9 {
		t.Fatalf("raw resume from 9 first delivered %d; pinned behaviour: silently skips 4..8 and delivers 9", first)
	}

	_, err = b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 11}, WatchOptions{})
	if !errors.Is(err, fold.ErrCursorBeyondHead) {
		t.Fatalf("Watch from 11 with last=10: err = %v, want fold.ErrCursorBeyondHead", err)
	}
	_, err = b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: protocol.MaxRevision}, WatchOptions{})
	if !errors.Is(err, fold.ErrCursorBeyondHead) {
		t.Fatalf("Watch from MaxRevision: err = %v, want fold.ErrCursorBeyondHead", err)
	}
}

// TestRecreatedBucketIsRefused: a fold's cursor from a deleted bucket's
// history is refused against the recreated bucket.
func TestRecreatedBucketIsRefused(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "phoenix"})
	for i := 1; i <= 6; i++ {
		put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	js, _ := jetstream.New(nc)
	if err := js.DeleteKeyValue(t.Context(), "phoenix"); err != nil {
		t.Fatal(err)
	}
	// The server removes a deleted stream's files after it answered: a
	// create right after it can fail ("error creating store for stream").
	for deadline := time.Now().Add(time.Minute); ; {
		nb, err := OpenBucket(t.Context(), nc, BucketConfig{Name: "phoenix"}, Options{})
		if err == nil {
			b = nb
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	put(t, b, "k1", "new")
	put(t, b, "k2", "new")
	_, err := b.Watch(t.Context(), Scope{}, protocol.Cursor{Rev: 6}, WatchOptions{})
	if !errors.Is(err, fold.ErrCursorBeyondHead) {
		t.Fatalf("resume from 6 on a recreated bucket at 2: err = %v, want fold.ErrCursorBeyondHead", err)
	}
}

func TestRetentionReadLive(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "ret", MaxAge: time.Hour})
	put(t, b, "a", "1")
	r, now, err := b.Retention(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxAge != time.Hour || !r.EvictsCurrentValues() || r.Last != 1 || r.First != 1 || now.IsZero() {
		t.Fatalf("retention %+v now %v", r, now)
	}
	// An operator edits the stream out of band: discard old with a limit.
	js, _ := jetstream.New(nc)
	st, err := js.Stream(t.Context(), b.stream)
	if err != nil {
		t.Fatal(err)
	}
	cfg := st.CachedInfo().Config
	cfg.MaxAge = 0
	cfg.Discard = jetstream.DiscardOld
	cfg.MaxMsgs = 100
	if _, err := js.UpdateStream(t.Context(), cfg); err != nil {
		t.Fatal(err)
	}
	r, _, err = b.Retention(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if r.MaxAge != 0 || !r.DiscardOldLimit || !r.EvictsCurrentValues() {
		t.Fatalf("after edit: retention %+v, want discard-old limit", r)
	}
}

func TestConnectErrorsNameTheProblem(t *testing.T) {
	if _, err := Connect(ConnOptions{}); err == nil {
		t.Fatal("no URL accepted")
	}
	if _, err := Connect(ConnOptions{URL: "nats://127.0.0.1:1", CertFile: "x"}); err == nil {
		t.Fatal("cert without key accepted")
	}
	if _, err := Connect(ConnOptions{URL: "nats://127.0.0.1:1", Creds: "garbage"}); err == nil {
		t.Fatal("garbage creds accepted")
	}
	// Files the client would read itself: a FIFO is refused, not read
	// (which would block the connect forever).
	fifo := filepath.Join(t.TempDir(), "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, o := range []ConnOptions{{CredsFile: fifo}, {CAFile: fifo}, {CertFile: fifo, KeyFile: fifo}} {
		o.URL = "nats://127.0.0.1:1"
		done := make(chan error, 1)
		go func() { _, err := Connect(o); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, files.ErrNotRegular) {
				t.Errorf("%+v: err = %v, want ErrNotRegular", o, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%+v: connect blocked on a FIFO", o)
		}
	}
	big := filepath.Join(t.TempDir(), "big.creds")
	if err := os.WriteFile(big, make([]byte, MaxSecretFileSize+1), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := Connect(ConnOptions{URL: "nats://127.0.0.1:1", CredsFile: big}); !errors.Is(err, files.ErrTooLarge) {
		t.Errorf("an oversized creds file: err = %v, want ErrTooLarge", err)
	}
	_, err := Connect(ConnOptions{URL: "nats://bob:s3cret@127.0.0.1:1", Timeout: time.Second})
	if err == nil {
		t.Fatal("connect to a closed port succeeded")
	}
	if got := err.Error(); strings.Contains(got, "s3cret") {
		t.Fatalf("error leaks the password: %s", got)
	}
}

func TestOpenExistingDoesNotCreate(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	nc := connect(t, s.ClientURL())
	if _, err := OpenExisting(t.Context(), nc, "nope", 5*time.Second); !errors.Is(err, ErrNoBucket) {
		t.Fatalf("OpenExisting(missing) err = %v, want ErrNoBucket", err)
	}
	openBucket(t, nc, BucketConfig{Name: "there"})
	if _, err := OpenExisting(t.Context(), nc, "there", 5*time.Second); err != nil {
		t.Fatalf("OpenExisting(existing): %v", err)
	}
	if _, err := OpenExisting(t.Context(), nc, "nope", 5*time.Second); !errors.Is(err, ErrNoBucket) {
		t.Fatalf("the failed lookup created the bucket: err = %v", err)
	}
}

// TestConnectRefusesNonNATSURLs: a URL whose scheme the client does not
// speak is refused at once, naming it; the client took any scheme for
// nats:// (an http:// URL, often foldhost's own HTTP API, was dialled as a
// NATS server and timed out).
func TestConnectRefusesNonNATSURLs(t *testing.T) {
	web := httptest.NewServer(http.NotFoundHandler())
	defer web.Close()
	for _, u := range []string{web.URL, "nats://127.0.0.1:1, " + web.URL, "https://nats.example:4222", "file:///tmp/x"} {
		start := time.Now()
		_, err := Connect(ConnOptions{URL: u, Timeout: 10 * time.Second})
		if err == nil || !strings.Contains(err.Error(), "is not a NATS scheme") {
			t.Errorf("%s: err = %v, want a refusal of the scheme", u, err)
		}
		if took := time.Since(start); took > 5*time.Second {
			t.Errorf("%s: refused after %v: it dialled", u, took)
		}
	}
	for _, u := range []string{"nats://a:1", "NATS://a:1", "tls://a:1", "ws://a:1", "wss://a:1", "a:4222", " nats://a:1 , b:2 "} {
		if err := CheckURL(u); err != nil {
			t.Errorf("%q: %v", u, err)
		}
	}
	if err := CheckURL(" , "); err == nil {
		t.Error("a list of no URL accepted")
	}
}
