package host_test

import (
	"context"
	"fmt"
	"net/http"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
)

// holdLoop holds f's loop (StallLoop) until the returned func (which may
// be called again) or the test's end.
func holdLoop(t testing.TB, f *host.Fold) func() {
	t.Helper()
	release, err := hosttest.StallLoop(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	rel := func() { once.Do(release) }
	t.Cleanup(rel)
	return rel
}

// natsQuery sends one query over NATS and returns its reply as a
// queryReply: code is the micro error code, 200 when there is none.
func natsQuery(t testing.TB, c *nats.Conn, subject, input string, hdr map[string]string) queryReply {
	t.Helper()
	msg := nats.NewMsg(subject)
	msg.Data = []byte(input)
	for k, v := range hdr {
		msg.Header.Set(k, v)
	}
	resp, err := c.RequestMsg(msg, time.Minute)
	if err != nil {
		t.Fatalf("request %s: %v", subject, err)
	}
	rep := queryReply{code: 200, body: string(resp.Data), ctype: resp.Header.Get("Content-Type"), module: resp.Header.Get("Foldhost-Module")}
	if e := resp.Header.Get(micro.ErrorCodeHeader); e != "" {
		if rep.code, err = strconv.Atoi(e); err != nil {
			t.Fatalf("%s: error code %q", subject, e)
		}
	}
	if h := resp.Header.Get("Foldhost-Cursor"); h != "" {
		rep.cursor, err = strconv.ParseUint(h, 10, 64)
		rep.hasCurs = err == nil
	}
	return rep
}

// queryHost starts a host with the admin service on NATS (node n1) and
// three folds of the bucket routes: "routes" running the C router (query
// inputs up to 1024 bytes), "q" the query test plugin (its "trap" query
// traps), "raw" none.
func queryHost(t testing.TB) (*hosttest.Running, *natskv.Bucket, string) {
	t.Helper()
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Admin: host.AdminOptions{NATS: true, Node: "n1"},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "routes"),
				PluginLimits: wasm.Limits{MaxQueryInputBytes: 1024}},
			{Name: "q", Bucket: "routes", Plugin: hosttest.BuiltPlugin(t, "testdata", "query"), DataDir: filepath.Join(dir, "q")},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "raw")},
		},
	})
	for _, name := range []string{"routes", "q", "raw"} {
		hosttest.WaitState(t, r.H.Fold(name), httpapi.StateFollowing)
	}
	return r, b, url
}

// TestQueriesOverNATS: the admin service's query endpoint of each fold
// (<subject>.<node>.query.<fold>.<query>, the payload as the input)
// answers the C router's queries exactly as HTTP does: the same body,
// content type, cursor and module headers; the refusals with HTTP's
// codes (unknown query and a fold without queries 404, an input over
// plugin_max_query_input_kb 413, the plugin's verdict 422, a trap 500
// with its message); and read-your-writes through the
// Foldhost-Min-Revision and Foldhost-Wait headers (with the loop held,
// 504 with the cursor reached; released, the new answer). Mutations
// caught: the endpoints not registered (no responders); the min_revision
// header not passed on (the held query answers 200 at once); the reply
// headers dropped; the input not passed (hosts_of_upstream answers 422).
func TestQueriesOverNATS(t *testing.T) {
	r, b, url := queryHost(t)
	f := r.H.Fold("routes")
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	c := hosttest.Conn(t, url)
	hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`)
	hosttest.Put(t, b, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	rev := hosttest.Put(t, b, "route.c", `{"upstreams":[{"addr":"10.0.0.2:80"},{"addr":"10.0.0.3:80"}]}`)
	hosttest.WaitCursor(t, f, rev)
	hosttest.WaitCursor(t, r.H.Fold("q"), rev)
	subj := "foldhost.admin.n1.query.routes."

	// The same answers as over HTTP.
	for _, c2 := range []struct{ query, input, want string }{
		{"hosts_of_upstream", "10.0.0.2:80", `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}`},
		{"top_upstreams", "1", `[{"addr":"10.0.0.2:80","hosts":3}]`},
	} {
		got := natsQuery(t, c, subj+c2.query, c2.input, nil)
		over := doQuery(t, "POST", web.URL+"/v1/folds/routes/query/"+c2.query, c2.input)
		if got.code != 200 || got.body != c2.want || got != over || got.ctype != "application/json" || !got.hasCurs || got.cursor < rev ||
			got.module != f.Status().Plugin.SHA256 {
			t.Errorf("%s %s: %+v; over HTTP %+v", c2.query, c2.input, got, over)
		}
	}

	// The refusals, with HTTP's codes and messages.
	for _, c2 := range []struct {
		subject, input string
		hdr            map[string]string
		code           int
		says           string
	}{
		{subj + "nope", "", nil, 404, "hosts_of_upstream top_upstreams"},
		{"foldhost.admin.n1.query.raw.top_upstreams", "", nil, 404, "raw entries only"},
		{subj + "top_upstreams", strings.Repeat("9", 1025), nil, 413, "1024"},
		{subj + "top_upstreams", "many", nil, 422, "count from 1 to 1000"},
		{"foldhost.admin.n1.query.q.trap", "", nil, 500, "query.wasm: about to trap"},
		{subj + "top_upstreams", "1", map[string]string{"Foldhost-Wait": "soon"}, 400, "wait"},
	} {
		got := natsQuery(t, c, c2.subject, c2.input, c2.hdr)
		if got.code != c2.code || !strings.Contains(got.body, c2.says) {
			t.Errorf("%s %q %v: %d %s, want %d saying %q", c2.subject, c2.input, c2.hdr, got.code, got.body, c2.code, c2.says)
		}
	}
	if st := r.H.Fold("q").Status(); st.State != httpapi.StateFollowing || st.Counters.PluginErrors != 0 {
		t.Fatalf("the fold after a trapping query over NATS: %+v", st)
	}

	// Read your writes, with the loop held.
	release := holdLoop(t, f)
	held := hosttest.Put(t, b, "route.d", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	want := `{"upstream":"10.0.0.2:80","hosts":["a","b","c"]}`
	if got := natsQuery(t, c, subj+"hosts_of_upstream", "10.0.0.2:80", nil); got.code != 200 || got.body != want || got.cursor != rev {
		t.Fatalf("while held: %+v, want the answer at cursor %d", got, rev)
	}
	wait := map[string]string{"Foldhost-Min-Revision": strconv.FormatUint(held, 10), "Foldhost-Wait": "100ms"}
	if got := natsQuery(t, c, subj+"hosts_of_upstream", "10.0.0.2:80", wait); got.code != http.StatusGatewayTimeout || got.cursor != rev {
		t.Fatalf("min_revision %d while held: %+v", held, got)
	}
	release()
	wait["Foldhost-Wait"] = "1m"
	if got := natsQuery(t, c, subj+"hosts_of_upstream", "10.0.0.2:80", wait); got.code != 200 ||
		got.body != `{"upstream":"10.0.0.2:80","hosts":["a","b","c","d"]}` || got.cursor < held {
		t.Fatalf("min_revision %d after the release: %+v", held, got)
	}
}

// queryMetrics reads foldhost_fold_queries_total by outcome (the outcomes
// counted: every series exists at 0 from the fold's start) and the
// duration histogram's count for one fold's query.
func queryMetrics(t testing.TB, h *host.Host, fold, query string) (map[string]float64, uint64) {
	t.Helper()
	fams, err := h.Metrics().Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts, n := map[string]float64{}, uint64(0)
	for _, fam := range fams {
		for _, m := range fam.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["fold"] != fold || l["query"] != query {
				continue
			}
			switch fam.GetName() {
			case "foldhost_fold_queries_total":
				if v := m.GetCounter().GetValue(); v != 0 {
					counts[l["outcome"]] = v
				}
			case "foldhost_fold_query_duration_seconds":
				n = m.GetHistogram().GetSampleCount()
			}
		}
	}
	return counts, n
}

// TestQueryMetrics: every query answer, over HTTP and NATS, moves
// foldhost_fold_queries_total by its fold, query and outcome, and the
// ones that ran the plugin the duration histogram; a name the plugin does
// not declare is counted under the query label "(unknown)", not its own,
// and an unknown fold not at all. Mutations caught: the count not taken
// (every count stays 0); the outcome taken from the wrong status (a 413
// counted ok); the label of an unknown name its own.
func TestQueryMetrics(t *testing.T) {
	r, b, url := queryHost(t)
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	c := hosttest.Conn(t, url)
	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80"}]}`))
	q := web.URL + "/v1/folds/routes/query/"
	for _, call := range []func(){
		func() { doQuery(t, "GET", q+"top_upstreams?input=2", "") },
		func() { natsQuery(t, c, "foldhost.admin.n1.query.routes.top_upstreams", "2", nil) },
		func() { doQuery(t, "GET", q+"top_upstreams?input=many", "") },
		func() { doQuery(t, "POST", q+"top_upstreams", strings.Repeat("9", 1025)) },
		func() { doQuery(t, "GET", q+"top_upstreams?limit=1", "") },
		func() { doQuery(t, "GET", q+"top_upstreams?min_revision=99&wait=1ms", "") },
		func() { doQuery(t, "GET", q+"no_such_query", "") },
		func() { natsQuery(t, c, "foldhost.admin.n1.query.routes.other", "", nil) },
		func() { doQuery(t, "GET", web.URL+"/v1/folds/nofold/query/top_upstreams", "") },
		func() { doQuery(t, "GET", web.URL+"/v1/folds/q/query/trap", "") },
	} {
		call()
	}
	counts, n := queryMetrics(t, r.H, "routes", "top_upstreams")
	want := map[string]float64{"ok": 2, "refused": 1, "too_large": 1, "bad_request": 1, "timeout": 1}
	if fmt.Sprint(counts) != fmt.Sprint(want) || n != 3 {
		t.Errorf("routes top_upstreams: counts %v, %d timed; want %v, 3 timed", counts, n, want)
	}
	if counts, _ := queryMetrics(t, r.H, "routes", httpapi.UnknownQueryLabel); fmt.Sprint(counts) != fmt.Sprint(map[string]float64{"not_found": 2}) {
		t.Errorf("routes, undeclared names: %v", counts)
	}
	if counts, n := queryMetrics(t, r.H, "q", "trap"); fmt.Sprint(counts) != fmt.Sprint(map[string]float64{"error": 1}) || n != 1 {
		t.Errorf("q trap: %v, %d timed", counts, n)
	}
	if counts, _ := queryMetrics(t, r.H, "nofold", "top_upstreams"); len(counts) != 0 {
		t.Errorf("an unknown fold counted: %v", counts)
	}
	for _, name := range []string{"no_such_query", "other"} {
		if counts, _ := queryMetrics(t, r.H, "routes", name); len(counts) != 0 {
			t.Errorf("an undeclared name has series of its own: %s %v", name, counts)
		}
	}
}
