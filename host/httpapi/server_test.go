package httpapi_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// testFold serves a real pebble fold store with a settable status.
type testFold struct {
	name  string
	store *fold.Store
	mu    sync.Mutex
	st    httpapi.Status
}

func (f *testFold) Name() string                      { return f.name }
func (f *testFold) Snapshot() (*fold.Snapshot, error) { return f.store.Snapshot() }
func (f *testFold) Status() httpapi.Status {
	f.mu.Lock()
	defer f.mu.Unlock()
	st := f.st
	st.Name = f.name
	st.Cursor = uint64(f.store.Cursor().Rev)
	return st
}

func (f *testFold) set(fn func(*httpapi.Status)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	fn(&f.st)
}

func openFold(t testing.TB, name string) *testFold {
	t.Helper()
	s, _, err := fold.Open(filepath.Join(t.TempDir(), name), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, fold.ErrClosed) {
			t.Error(err)
		}
	})
	return &testFold{name: name, store: s, st: httpapi.Status{State: httpapi.StateFollowing, Ready: true, Scope: []string{}}}
}

func commit(t testing.TB, f *testFold, rev protocol.Revision, raw []fold.Update, views []fold.ViewMutation) {
	t.Helper()
	if err := f.store.Commit(fold.Commit{Raw: raw, Views: views, Cursor: protocol.Cursor{Rev: rev}}); err != nil {
		t.Fatal(err)
	}
}

func rawPut(key string, rev protocol.Revision, v string) fold.Update {
	return fold.Update{Key: key, Op: fold.OpPut, Rev: rev, Value: []byte(v)}
}

func viewPut(key, v string) fold.ViewMutation {
	return fold.ViewMutation{Key: []byte(key), Op: fold.ViewPut, Value: []byte(v)}
}

// fixture: fold "routes" at cursor 7 with raw and view data, fold "empty"
// at cursor 0 and not ready.
func fixture(t *testing.T) (*httptest.Server, *testFold, *testFold) {
	t.Helper()
	routes := openFold(t, "routes")
	commit(t, routes, 5, []fold.Update{
		rawPut("route.a", 1, "alpha"),
		rawPut("route.b", 2, "beta"),
		rawPut("route.bin", 3, "\xff\x00\x01"),
		rawPut("other.x", 4, "x"),
		rawPut("route.c/d", 5, "slash"),
	}, []fold.ViewMutation{
		viewPut("table/a", `{"to":"a"}`),
		viewPut("table/b", "<b&>"),
		viewPut("\xfe\xffbin", "v"),
	})
	commit(t, routes, 7, []fold.Update{rawPut("route.a", 7, "alpha2")}, nil)
	empty := openFold(t, "empty")
	empty.set(func(s *httpapi.Status) {
		s.State, s.Ready, s.Reason = httpapi.StateHydrating, false, "hydrating: cursor 0, stream head at start 10"
	})
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{routes, empty}}))
	t.Cleanup(srv.Close)
	return srv, routes, empty
}

func get(t *testing.T, srv *httptest.Server, path string) (int, string) {
	t.Helper()
	resp, err := http.Get(srv.URL + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func getJSON(t *testing.T, srv *httptest.Server, path string, wantCode int, v any) {
	t.Helper()
	code, body := get(t, srv, path)
	if code != wantCode {
		t.Fatalf("GET %s = %d %s, want %d", path, code, body, wantCode)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %s", path, err, body)
	}
}

func TestHealthAndReadiness(t *testing.T) {
	srv, _, empty := fixture(t)
	if code, body := get(t, srv, "/healthz"); code != 200 || body != "ok\n" {
		t.Fatalf("healthz = %d %q", code, body)
	}
	code, body := get(t, srv, "/readyz")
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "fold empty: hydrating: cursor 0, stream head at start 10") {
		t.Fatalf("readyz before sync = %d %q", code, body)
	}
	if strings.Contains(body, "routes") {
		t.Fatalf("readyz names a ready fold: %q", body)
	}
	empty.set(func(s *httpapi.Status) { s.Ready, s.Reason = true, "" })
	if code, body := get(t, srv, "/readyz"); code != 200 || body != "ok\n" {
		t.Fatalf("readyz after sync = %d %q", code, body)
	}
}

func TestFoldStatus(t *testing.T) {
	srv, routes, _ := fixture(t)
	routes.set(func(s *httpapi.Status) {
		s.Bucket, s.StreamLastSeq, s.Lag = "routes", 9, 2
		s.Counters = httpapi.Counters{DeliveredSinceStart: 6, Applied: 5, Rejected: 1, Batches: 2}
	})
	var list struct{ Folds []map[string]any }
	getJSON(t, srv, "/v1/folds", 200, &list)
	if len(list.Folds) != 2 || list.Folds[0]["name"] != "routes" || list.Folds[1]["name"] != "empty" {
		t.Fatalf("folds = %v", list.Folds)
	}
	var st map[string]any
	getJSON(t, srv, "/v1/folds/routes", 200, &st)
	for _, k := range []string{"name", "state", "cursor", "stream_last_seq", "lag", "plugin", "counters", "last_error"} {
		if _, ok := st[k]; !ok {
			t.Errorf("status lacks %q: %v", k, st)
		}
	}
	if st["cursor"] != 7.0 || st["state"] != "following" || st["lag"] != 2.0 {
		t.Errorf("status = %v", st)
	}
	plugin := st["plugin"].(map[string]any)
	for _, k := range []string{"name", "version", "sha256", "abi"} {
		if _, ok := plugin[k]; !ok {
			t.Errorf("plugin lacks %q: %v", k, plugin)
		}
	}
	counters := st["counters"].(map[string]any)
	if counters["delivered_since_start"] != 6.0 || counters["applied"] != 5.0 || counters["rejected"] != 1.0 || counters["batches"] != 2.0 {
		t.Errorf("counters = %v", counters)
	}
	var e struct{ Error string }
	getJSON(t, srv, "/v1/folds/nope", 404, &e)
	if !strings.Contains(e.Error, `unknown fold "nope"`) {
		t.Errorf("error = %q", e.Error)
	}
}

type rawItem struct {
	Fold     string
	Cursor   uint64
	Key      string
	Revision uint64
	Value    *string
	ValueB64 string `json:"value_b64"`
}

func TestRawGet(t *testing.T) {
	srv, _, _ := fixture(t)
	var it rawItem
	getJSON(t, srv, "/v1/folds/routes/raw/route.a", 200, &it)
	if it.Fold != "routes" || it.Cursor != 7 || it.Key != "route.a" || it.Revision != 7 || it.Value == nil || *it.Value != "alpha2" || it.ValueB64 != "YWxwaGEy" {
		t.Fatalf("raw get = %+v", it)
	}
	// A key with a slash, by path and by ?key=.
	for _, p := range []string{"/v1/folds/routes/raw/route.c/d", "/v1/folds/routes/raw?key=" + url.QueryEscape("route.c/d")} {
		it = rawItem{}
		getJSON(t, srv, p, 200, &it)
		if it.Key != "route.c/d" || *it.Value != "slash" {
			t.Fatalf("GET %s = %+v", p, it)
		}
	}
	// Not valid UTF-8: no "value", exact bytes in value_b64.
	code, body := get(t, srv, "/v1/folds/routes/raw/route.bin")
	if code != 200 || strings.Contains(body, `"value":`) {
		t.Fatalf("binary value = %d %s", code, body)
	}
	it = rawItem{}
	_ = json.Unmarshal([]byte(body), &it)
	if b, _ := base64.StdEncoding.DecodeString(it.ValueB64); string(b) != "\xff\x00\x01" {
		t.Fatalf("value_b64 decodes to %q", b)
	}
	// Missing key: 404 with the cursor it was missing at.
	var nf struct {
		Error  string
		Cursor uint64
	}
	getJSON(t, srv, "/v1/folds/routes/raw/route.zzz", 404, &nf)
	if nf.Cursor != 7 || !strings.Contains(nf.Error, "not found") {
		t.Fatalf("missing key = %+v", nf)
	}
	getJSON(t, srv, "/v1/folds/nope/raw/route.a", 404, &nf)
}

type rangeResp[T any] struct {
	Fold      string
	Cursor    uint64
	Prefix    string
	Limit     int
	Count     int
	Truncated bool
	Items     []T
}

func TestRawRange(t *testing.T) {
	srv, _, _ := fixture(t)
	var r rangeResp[rawItem]
	getJSON(t, srv, "/v1/folds/routes/raw?prefix=route.", 200, &r)
	if r.Cursor != 7 || r.Limit != httpapi.DefaultLimit || r.Count != 4 || r.Truncated || len(r.Items) != 4 {
		t.Fatalf("range = %+v", r)
	}
	var keys []string
	for _, it := range r.Items {
		keys = append(keys, it.Key)
	}
	if strings.Join(keys, ",") != "route.a,route.b,route.bin,route.c/d" {
		t.Fatalf("keys = %v", keys)
	}
	r = rangeResp[rawItem]{}
	getJSON(t, srv, "/v1/folds/routes/raw?prefix=route.&limit=2", 200, &r)
	if r.Count != 2 || !r.Truncated || r.Items[1].Key != "route.b" {
		t.Fatalf("limited range = %+v", r)
	}
	r = rangeResp[rawItem]{}
	getJSON(t, srv, "/v1/folds/routes/raw?prefix=route.&limit=4", 200, &r)
	if r.Count != 4 || r.Truncated {
		t.Fatalf("exact-limit range = %+v", r)
	}
	r = rangeResp[rawItem]{}
	getJSON(t, srv, "/v1/folds/routes/raw", 200, &r)
	if r.Count != 5 {
		t.Fatalf("whole range = %+v", r)
	}
	r = rangeResp[rawItem]{}
	getJSON(t, srv, "/v1/folds/empty/raw?prefix=x", 200, &r)
	if r.Count != 0 || r.Items == nil {
		t.Fatalf("empty range = %+v (items must be [], not null)", r)
	}
}

func TestBadParameters(t *testing.T) {
	srv, _, _ := fixture(t)
	for _, p := range []string{
		"/v1/folds/routes/raw?limit=0",
		"/v1/folds/routes/raw?limit=10001",
		"/v1/folds/routes/raw?limit=-1",
		"/v1/folds/routes/raw?limit=ten",
		"/v1/folds/routes/view?limit=",
		"/v1/folds/routes/raw?prefx=route.",
		"/v1/folds/routes/raw?prefix=a&prefix=b",
		"/v1/folds/routes/raw?key=route.a&limit=2",
		"/v1/folds/routes/raw?key=",
		"/v1/folds/routes/raw/",
		"/v1/folds/routes/view/table/a?limit=3",
		"/v1/folds/routes/raw/route.c//d", // not a redirect to another key
		"/v1/folds/routes/raw/x/../route.a",
	} {
		var e struct{ Error string }
		getJSON(t, srv, p, 400, &e)
		if e.Error == "" {
			t.Errorf("GET %s: no error message", p)
		}
	}
	var r rangeResp[rawItem]
	getJSON(t, srv, "/v1/folds/routes/raw?limit=10000", 200, &r)
	getJSON(t, srv, "/v1/folds/routes/raw?limit=1", 200, &r)
	if code, _ := get(t, srv, "/v2/nothing"); code != 404 {
		t.Errorf("unknown endpoint = %d", code)
	}
}

// TestWrongMethodIs405: a path served for another method answers 405
// with Allow; a path served for none stays 404.
func TestWrongMethodIs405(t *testing.T) {
	srv, _, _ := fixture(t)
	for _, c := range []struct {
		method, path string
		code         int
		allow        string
	}{
		{"POST", "/v1/folds/routes/raw/route.a", 405, "GET, HEAD"},
		{"DELETE", "/v1/folds/routes", 405, "GET, HEAD"},
		{"PUT", "/readyz", 405, "GET, HEAD"},
		{"GET", "/v1/folds/routes/export", 405, "POST"},
		{"DELETE", "/v1/folds/routes/export", 405, "POST"},
		{"POST", "/v2/nothing", 404, ""},
		{"HEAD", "/v1/folds/routes", 200, ""},
	} {
		req, err := http.NewRequest(c.method, srv.URL+c.path, nil)
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.code || resp.Header.Get("Allow") != c.allow {
			t.Errorf("%s %s = %d Allow %q, want %d Allow %q", c.method, c.path, resp.StatusCode, resp.Header.Get("Allow"), c.code, c.allow)
		}
	}
}

// TestPrefixEchoKeepsItsBytes: a prefix that is not UTF-8 comes back
// exactly, in prefix_b64, and not as lossy text.
func TestPrefixEchoKeepsItsBytes(t *testing.T) {
	srv, _, _ := fixture(t)
	var r struct {
		Prefix    *string `json:"prefix"`
		PrefixB64 string  `json:"prefix_b64"`
	}
	getJSON(t, srv, "/v1/folds/routes/view?prefix=%FF%00a", 200, &r)
	if r.Prefix != nil || r.PrefixB64 != "/wBh" {
		t.Errorf("binary prefix echoed as %v / %q", r.Prefix, r.PrefixB64)
	}
	getJSON(t, srv, "/v1/folds/routes/raw?prefix=route.", 200, &r)
	if r.Prefix == nil || *r.Prefix != "route." || r.PrefixB64 != "cm91dGUu" {
		t.Errorf("text prefix echoed as %v / %q", r.Prefix, r.PrefixB64)
	}
}

type viewItem struct {
	Fold     string
	Cursor   uint64
	Key      *string
	KeyB64   string `json:"key_b64"`
	Value    *string
	ValueB64 string `json:"value_b64"`
}

func TestView(t *testing.T) {
	srv, _, _ := fixture(t)
	var it viewItem
	getJSON(t, srv, "/v1/folds/routes/view/table/a", 200, &it)
	if it.Cursor != 7 || it.Key == nil || *it.Key != "table/a" || *it.Value != `{"to":"a"}` {
		t.Fatalf("view get = %+v", it)
	}
	// No HTML escaping of values.
	if _, body := get(t, srv, "/v1/folds/routes/view/table/b"); !strings.Contains(body, `"value":"<b&>"`) {
		t.Errorf("view value escaped: %s", body)
	}
	// A binary view key, percent-encoded in the query.
	it = viewItem{}
	getJSON(t, srv, "/v1/folds/routes/view?key="+url.QueryEscape("\xfe\xffbin"), 200, &it)
	if it.Key != nil || it.KeyB64 != base64.StdEncoding.EncodeToString([]byte("\xfe\xffbin")) || *it.Value != "v" {
		t.Fatalf("binary view key = %+v", it)
	}
	var r rangeResp[viewItem]
	getJSON(t, srv, "/v1/folds/routes/view?prefix=table/&limit=1", 200, &r)
	if r.Count != 1 || !r.Truncated || *r.Items[0].Key != "table/a" {
		t.Fatalf("view range = %+v", r)
	}
	var nf struct{ Cursor uint64 }
	getJSON(t, srv, "/v1/folds/routes/view/table/zzz", 404, &nf)
	getJSON(t, srv, "/v1/folds/routes/view/route.a", 404, &nf) // raw keys are not views
	if nf.Cursor != 7 {
		t.Fatalf("404 cursor = %d", nf.Cursor)
	}
}

func TestClosedStoreIs503(t *testing.T) {
	srv, routes, _ := fixture(t)
	if err := routes.store.Close(); err != nil {
		t.Fatal(err)
	}
	var e struct{ Error string }
	getJSON(t, srv, "/v1/folds/routes/raw/route.a", 503, &e)
	getJSON(t, srv, "/v1/folds/routes/view?prefix=", 503, &e)
}

func TestMetrics(t *testing.T) {
	routes := openFold(t, "routes")
	commit(t, routes, 3, []fold.Update{rawPut("k", 3, "v")}, nil)
	routes.set(func(s *httpapi.Status) {
		s.StreamLastSeq, s.Lag = 10, 7
		lag := 2.5
		s.LagSeconds = &lag
		s.Counters = httpapi.Counters{DeliveredSinceStart: 3, Rejected: 1, Batches: 2, PluginErrors: 1, CommitFailures: 4}
		at := time.Unix(1700000000, 250e6)
		s.LastCommitAt = &at
		s.Export = &httpapi.ExportStatus{Interval: (90 * time.Second).String()}
		s.Effects = &httpapi.EffectsStatus{Outbox: 5, Held: "joined midway: until the fence passes revision 9"}
	})
	m := httpapi.NewMetrics()
	m.Track([]httpapi.Fold{routes})
	m.ObserveBatch("routes", 3*time.Millisecond)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{routes}, Metrics: m}))
	defer srv.Close()
	code, body := get(t, srv, "/metrics")
	if code != 200 {
		t.Fatalf("metrics = %d", code)
	}
	for _, want := range []string{
		`foldhost_fold_cursor_revision{fold="routes"} 3`,
		`foldhost_fold_stream_last_revision{fold="routes"} 10`,
		`foldhost_fold_lag_revisions{fold="routes"} 7`,
		`foldhost_fold_lag_seconds{fold="routes"} 2.5`,
		`foldhost_fold_ready{fold="routes"} 1`,
		`foldhost_fold_updates_total{fold="routes"} 3`,
		`foldhost_fold_rejected_updates_total{fold="routes"} 1`,
		`foldhost_fold_batches_total{fold="routes"} 2`,
		`foldhost_fold_plugin_errors_total{fold="routes"} 1`,
		`foldhost_fold_commit_failures_total{fold="routes"} 4`,
		`foldhost_fold_batch_duration_seconds_count{fold="routes"} 1`,
		`foldhost_fold_batch_duration_seconds_bucket{fold="routes",le="0.0064"} 1`,
		`foldhost_fold_last_commit_timestamp_seconds{fold="routes"} 1.70000000025e+09`,
		`foldhost_fold_export_interval_seconds{fold="routes"} 90`,
		`foldhost_fold_effects_outbox{fold="routes"} 5`,
		`foldhost_fold_effects_held{fold="routes"} 1`,
		`go_goroutines`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
}

// exportingFold records the export requests it gets and answers with a
// canned result or error (the real round is tested in cmd/foldhost).
type exportingFold struct {
	*testFold
	calls []bool
	err   error
}

func (f *exportingFold) Export(_ context.Context, force bool) (any, error) {
	f.calls = append(f.calls, force)
	return map[string]any{"outcome": "published", "force": force}, f.err
}

// loopbackAPI serves h on a loopback listener, with the server's Addr set
// to it as ListenAndServe would (the HTTP API admits token-less admin POSTs
// only when the listener is known to be loopback).
func loopbackAPI(t testing.TB, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(h)
	srv.Config.Addr = srv.Listener.Addr().String()
	srv.Start()
	return srv
}

func TestExportEndpoint(t *testing.T) {
	plain := openFold(t, "plain")
	ex := &exportingFold{testFold: openFold(t, "ex")}
	srv := loopbackAPI(t, httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{plain, ex}}))
	t.Cleanup(srv.Close)
	post := func(path string) (int, string) {
		t.Helper()
		resp, err := http.Post(srv.URL+path, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	for _, c := range []struct {
		path string
		code int
		want string
	}{
		{"/v1/folds/ex/export", 200, `"force":false`},
		{"/v1/folds/ex/export?force=true", 200, `"force":true`},
		{"/v1/folds/ex/export?force=maybe", 400, "force"},
		{"/v1/folds/ex/export?forse=1", 400, "unknown parameter"},
		{"/v1/folds/ex/export?force=true&force=false", 400, "given 2 times"},
		{"/v1/folds/plain/export", 501, "not configured"},
		{"/v1/folds/nope/export", 404, "unknown fold"},
	} {
		code, body := post(c.path)
		if code != c.code || !strings.Contains(body, c.want) {
			t.Errorf("POST %s = %d %s, want %d containing %q", c.path, code, body, c.code, c.want)
		}
	}
	if len(ex.calls) != 2 || ex.calls[0] || !ex.calls[1] {
		t.Errorf("export calls %v, want [false true]", ex.calls)
	}
	if code, _ := get(t, srv, "/v1/folds/ex/export"); code != 405 {
		t.Errorf("GET export = %d, want 405", code)
	}
	ex.err = errors.New("disk full")
	if code, body := post("/v1/folds/ex/export"); code != 500 || !strings.Contains(body, "disk full") {
		t.Errorf("failed export = %d %s", code, body)
	}
	ex.err = fmt.Errorf("fold ex: %w", httpapi.ErrExportNotConfigured)
	if code, _ := post("/v1/folds/ex/export"); code != 501 {
		t.Errorf("not-configured export = %d, want 501", code)
	}
}

// snapCountingFold signals each snapshot taken of its testFold.
type snapCountingFold struct {
	*testFold
	snaps chan struct{}
}

func (f snapCountingFold) Snapshot() (*fold.Snapshot, error) {
	sn, err := f.testFold.Snapshot()
	select {
	case f.snaps <- struct{}{}:
	default:
	}
	return sn, err
}

// TestMinRevisionPollsAFoldThatCannotSignal: a Fold without
// CursorAdvanced is polled: a read waiting for a revision (its first
// snapshot too old) answers once a commit reaches it. Mutation caught: no
// polling (the read waits out its 10 s and answers 504).
func TestMinRevisionPollsAFoldThatCannotSignal(t *testing.T) {
	routes := openFold(t, "routes")
	commit(t, routes, 7, []fold.Update{rawPut("a", 7, "v")}, nil)
	f := snapCountingFold{routes, make(chan struct{}, 1)}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	defer srv.Close()
	type answer struct {
		code int
		hdr  string
	}
	done := make(chan answer, 1)
	go func() {
		resp, err := http.Get(srv.URL + "/v1/folds/routes/raw/late?min_revision=8&wait=10s")
		if err != nil {
			done <- answer{}
			return
		}
		resp.Body.Close()
		done <- answer{resp.StatusCode, resp.Header.Get(httpapi.CursorHeader)}
	}()
	<-f.snaps // the read looked, at cursor 7
	commit(t, routes, 8, []fold.Update{rawPut("late", 8, "v")}, nil)
	if a := <-done; a.code != http.StatusOK || a.hdr != "8" {
		t.Fatalf("answer %+v, want 200 at cursor 8", a)
	}
}
