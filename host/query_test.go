package host_test

import (
	"context"
	"encoding/base64"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
)

type queryReply struct {
	code    int
	body    string
	ctype   string
	cursor  uint64
	module  string
	hasCurs bool
}

func doQuery(t testing.TB, method, url, body string) queryReply {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	rep := queryReply{code: resp.StatusCode, body: string(b), ctype: resp.Header.Get("Content-Type"), module: resp.Header.Get(httpapi.ModuleHeader)}
	if h := resp.Header.Get(httpapi.CursorHeader); h != "" {
		rep.cursor, err = strconv.ParseUint(h, 10, 64)
		rep.hasCurs = err == nil
	}
	return rep
}

func copyFile(t testing.TB, from, to string) {
	t.Helper()
	b, err := os.ReadFile(from)
	if err != nil {
		t.Fatal(err)
	}
	tmp := to + ".tmp"
	if err := os.WriteFile(tmp, b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, to); err != nil {
		t.Fatal(err)
	}
}

// TestQueriesOverHTTP: the C router's queries over HTTP on a fold of an
// embedded NATS server: each answers from one snapshot, at the revision
// its cursor header states (with the loop held, the answer and the header
// are the state before the held put); min_revision waits for a put as
// every read does; GET and POST inputs; every refusal with its code.
func TestQueriesOverHTTP(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "routes"),
				PluginLimits: wasm.Limits{MaxQueryInputBytes: 1024}, PluginQueryInstances: 3},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "raw")},
			{Name: "gorouter", Bucket: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-go"), DataDir: filepath.Join(dir, "gorouter")},
			{Name: "noq", Bucket: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "keyview1"), DataDir: filepath.Join(dir, "noq")},
		},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`)
	hosttest.Put(t, b, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	rev := hosttest.Put(t, b, "route.c", `{"upstreams":[{"addr":"10.0.0.2:80"},{"addr":"10.0.0.3:80"}]}`)
	q := web.URL + "/v1/folds/routes/query/"
	if qs := f.Status().Plugin.Queries; len(qs) != 2 || qs[0] != (httpapi.PluginQuery{Name: "hosts_of_upstream", ContentType: "application/json"}) || qs[1].Name != "top_upstreams" {
		t.Fatalf("the status's queries: %+v", qs)
	}
	if qs := r.H.Fold("noq").Status().Plugin.Queries; qs != nil {
		t.Fatalf("a plugin without queries lists %+v", qs)
	}
	// plugin_query_instances reaches the plugin's pool (the default: 2).
	for fold, want := range map[string]int{"routes": 3, "gorouter": wasm.DefaultQueryInstances, "noq": 0} {
		if got := r.H.Fold(fold).Status().Plugin.QueryInstances; got != want {
			t.Errorf("fold %s: %d query instances, want %d", fold, got, want)
		}
	}
	// The Go build declares the same queries and answers alike.
	if qs := r.H.Fold("gorouter").Status().Plugin.Queries; len(qs) != 2 || qs[0].Name != "hosts_of_upstream" || qs[1].Name != "top_upstreams" {
		t.Fatalf("the Go router's queries: %+v", qs)
	}
	got := doQuery(t, "GET", fmt.Sprintf("%s/v1/folds/gorouter/query/hosts_of_upstream?input=10.0.0.2:80&min_revision=%d", web.URL, rev), "")
	if got.code != 200 || got.body != `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}` || got.ctype != "application/json" {
		t.Fatalf("the Go router's hosts_of_upstream: %+v", got)
	}

	got = doQuery(t, "GET", fmt.Sprintf("%shosts_of_upstream?input=10.0.0.2:80&min_revision=%d", q, rev), "")
	if got.code != 200 || got.body != `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}` || got.ctype != "application/json" ||
		!got.hasCurs || got.cursor < rev || got.module != f.Status().Plugin.SHA256 {
		t.Fatalf("hosts_of_upstream: %+v", got)
	}
	got = doQuery(t, "POST", fmt.Sprintf("%stop_upstreams?min_revision=%d", q, rev), "1")
	if got.code != 200 || got.body != `[{"addr":"10.0.0.2:80","hosts":3}]` || got.cursor < rev {
		t.Fatalf("top_upstreams (POST): %+v", got)
	}
	got = doQuery(t, "GET", q+"hosts_of_upstream?input_b64="+base64.StdEncoding.EncodeToString([]byte("10.0.0.3:80")), "")
	if got.code != 200 || got.body != `{"upstream":"10.0.0.3:80","hosts":["c"]}` {
		t.Fatalf("input_b64: %+v", got)
	}

	// Held: a put is not folded. A query answers the state before it and
	// says so in its cursor header; one asking for the put waits, and
	// times out.
	release, err := hosttest.StallLoop(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	held := hosttest.Put(t, b, "route.d", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	got = doQuery(t, "GET", q+"hosts_of_upstream?input=10.0.0.2:80", "")
	if got.code != 200 || got.body != `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}` || got.cursor != rev {
		t.Fatalf("while held: %+v, want the answer at cursor %d", got, rev)
	}
	got = doQuery(t, "GET", fmt.Sprintf("%shosts_of_upstream?input=10.0.0.2:80&min_revision=%d&wait=100ms", q, held), "")
	if got.code != http.StatusGatewayTimeout || got.cursor != rev {
		t.Fatalf("min_revision while held: %+v", got)
	}
	release()
	got = doQuery(t, "GET", fmt.Sprintf("%shosts_of_upstream?input=10.0.0.2:80&min_revision=%d&wait=1m", q, held), "")
	if got.code != 200 || got.body != `{"upstream":"10.0.0.2:80","hosts":["a","b","c","d"]}` || got.cursor < held {
		t.Fatalf("after the release: %+v", got)
	}

	for _, c := range []struct {
		method, path, body string
		code               int
		says               string
	}{
		{"GET", q + "nope", "", 404, "hosts_of_upstream top_upstreams"},
		{"GET", web.URL + "/v1/folds/raw/query/top_upstreams", "", 404, "raw entries only"},
		{"GET", web.URL + "/v1/folds/noq/query/top_upstreams", "", 404, "declares none"},
		{"GET", web.URL + "/v1/folds/nofold/query/top_upstreams", "", 404, "unknown fold"},
		{"GET", q + "top_upstreams?input=" + strings.Repeat("9", 1025), "", 413, "1024"},
		{"POST", q + "top_upstreams", strings.Repeat("9", 1025), 413, "1024"},
		{"GET", q + "top_upstreams?input=many", "", 422, "count from 1 to 1000"},
		{"GET", q + "top_upstreams?limit=3", "", 400, "unknown query parameter"},
		{"POST", q + "top_upstreams?input=3", "", 400, "its body"},
		{"GET", q + "top_upstreams?input=3&input_b64=Mw==", "", 400, "not both"},
	} {
		got := doQuery(t, c.method, c.path, c.body)
		if got.code != c.code || !strings.Contains(got.body, c.says) {
			t.Errorf("%s %s: %d %s, want %d saying %q", c.method, c.path, got.code, got.body, c.code, c.says)
		}
	}
	// The largest input is served.
	if got := doQuery(t, "POST", q+"hosts_of_upstream", strings.Repeat("x", 255)); got.code != 200 {
		t.Fatalf("an input at the limit: %+v", got)
	}
}

// TestATrappingQueryLeavesTheFoldAlone: a query that traps answers 500 with
// the trap and the plugin's stderr; the fold goes on folding (no plugin
// error counted, still following), and the next query answers. After a
// hot reload the queries are the new module's at once, before any batch
// ran it.
func TestATrappingQueryLeavesTheFoldAlone(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	plugin := filepath.Join(dir, "plugin.wasm")
	copyFile(t, hosttest.BuiltPlugin(t, "testdata", "query"), plugin)
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "q", Bucket: "routes", Plugin: plugin, DataDir: filepath.Join(dir, "q")}},
	})
	f := r.H.Fold("q")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	q := web.URL + "/v1/folds/q/query/"
	rev := hosttest.Put(t, b, "k1", "v1")
	hosttest.WaitCursor(t, f, rev)

	got := doQuery(t, "GET", q+"trap", "")
	if got.code != 500 || !strings.Contains(got.body, "query.wasm: about to trap") || !strings.Contains(got.body, "trap") {
		t.Fatalf("trap: %+v", got)
	}
	if st := f.Status(); st.State != httpapi.StateFollowing || st.Counters.PluginErrors != 0 || st.LastError != "" {
		t.Fatalf("the fold after a trapping query: %+v", st)
	}
	rev = hosttest.Put(t, b, "k2", "v2")
	hosttest.WaitCursor(t, f, rev)
	if st := f.Status(); st.State != httpapi.StateFollowing || st.Counters.PluginErrors != 0 || st.LastError != "" {
		t.Fatalf("the fold folding after a trapping query: %+v", st)
	}
	if got := doQuery(t, "GET", q+"get?input=k2", ""); got.code != 200 || got.body != "v2" || got.ctype != "application/octet-stream" {
		t.Fatalf("get after the trap: %+v", got)
	}
	if got := doQuery(t, "GET", q+"write?input=x", ""); got.code != 422 || !strings.Contains(got.body, "a query cannot write") {
		t.Fatalf("write: %+v", got)
	}

	// Hot reload to the router: its queries at once, no batch folded.
	cur := f.Status().Cursor
	copyFile(t, hosttest.BuiltPlugin(t, "example-router", "router-c"), plugin)
	if err := f.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := doQuery(t, "GET", q+"top_upstreams", ""); got.code != 200 || got.body != "[]" || got.cursor != cur {
		t.Fatalf("top_upstreams after the reload: %+v", got)
	}
	if got := doQuery(t, "GET", q+"get?input=k2", ""); got.code != 404 {
		t.Fatalf("the old module's query after the reload: %+v", got)
	}
}

// TestQueriesWaitForTheirViewSchema: a fold started with a module of
// another view schema than its views' rebuilds them before following, the
// old views serving meanwhile; a query then would run the new module over
// the old schema's views, and is refused (503, saying why) until the
// rebuilt views are switched in.
func TestQueriesWaitForTheirViewSchema(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	pluginFile := filepath.Join(dir, "plugin.wasm")
	copyFile(t, hosttest.BuiltPlugin(t, "testdata", "keyview2"), pluginFile)
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "q", Bucket: "routes", Plugin: pluginFile, DataDir: filepath.Join(dir, "q")}}}
	r := hosttest.StartHost(t, o)
	rev := hosttest.Put(t, b, "k", "v")
	hosttest.WaitCursor(t, r.H.Fold("q"), rev)
	if err := r.Stop(t); err != nil {
		t.Fatal(err)
	}

	copyFile(t, hosttest.BuiltPlugin(t, "testdata", "query"), pluginFile) // view schema 1
	replayed, unblock := hosttest.HoldRebuilds(t)
	r = hosttest.StartHost(t, o)
	f := r.H.Fold("q")
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	select {
	case <-replayed:
	case <-time.After(2 * time.Minute):
		t.Fatalf("no view rebuild at the start: %+v", f.Status())
	}
	if got := doQuery(t, "GET", web.URL+"/v1/folds/q/query/get?input=k", ""); got.code != 503 || !strings.Contains(got.body, "view schema 2, the plugin's is 1") {
		t.Fatalf("a query over the old schema's views: %+v", got)
	}
	unblock()
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	if got := doQuery(t, "GET", web.URL+"/v1/folds/q/query/get?input=k", ""); got.code != 200 || got.body != "v" {
		t.Fatalf("a query over the rebuilt views: %+v", got)
	}
}
