package host_test

import (
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// queryAnswer is one query's answer as a client sees it.
type queryAnswer struct {
	code         int
	body, cursor string
	node         string
}

func askQuery(t testing.TB, base, fold, query, input, params string) queryAnswer {
	t.Helper()
	u := base + "/v1/folds/" + fold + "/query/" + query + "?input=" + url.QueryEscape(input)
	if params != "" {
		u += "&" + params
	}
	resp, err := (&http.Client{Transport: &http.Transport{DisableKeepAlives: true}}).Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return queryAnswer{resp.StatusCode, string(body), resp.Header.Get("X-Foldhost-Cursor"), resp.Header.Get(host.NodeHeader)}
}

// TestPartitionedQueriesAnswerAsOneFold: the example router's queries
// asked by the name of a fold of 4 partitions answer byte for byte what
// the same plugin folding the same bucket whole answers (hosts_of_upstream
// for every addr, top_upstreams at several counts, the refusal of a bad
// input), over a seeded random history of puts and deletes; the query
// test plugin's scans (ranges of 2 keys, paged, forward and reverse) and
// view gets by the fold's name list every key of every partition once, in
// order. The answer's cursor is the least of the units'; min_revision is
// honoured. Mutations caught: the query reading one unit only; the units'
// ranges concatenated instead of merged (hosts out of order, addrs
// counted twice); the merge ignoring the reverse flag; a view get
// answered by the first unit only.
func TestPartitionedQueriesAnswerAsOneFold(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	url, b := hosttest.NATSServer(t)
	dir := t.TempDir()
	router := hosttest.BuiltPlugin(t, "example-router", "router-c")
	qp := hosttest.BuiltPlugin(t, "testdata", "query")
	const n = 4
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: router, DataDir: filepath.Join(dir, "routes"), Partitions: n},
			{Name: "whole", Bucket: "routes", Plugin: router, DataDir: filepath.Join(dir, "whole")},
			{Name: "q", Bucket: "routes", Plugin: qp, DataDir: filepath.Join(dir, "q"), Partitions: 3},
		},
	})
	addrs := make([]string, 12)
	for i := range addrs {
		addrs[i] = fmt.Sprintf("10.0.%d.%d:80", i%3, i)
	}
	live := map[string]bool{}
	var last uint64
	for range 600 {
		h := fmt.Sprintf("h%03d", rng.IntN(250))
		if live[h] && rng.IntN(5) == 0 {
			if err := b.KV().Delete(t.Context(), "route."+h); err != nil {
				t.Fatal(err)
			}
			delete(live, h)
			continue
		}
		var ups []string
		for range 1 + rng.IntN(4) {
			ups = append(ups, fmt.Sprintf(`{"addr":%q,"weight":%d}`, addrs[rng.IntN(len(addrs))], 1+rng.IntN(9)))
		}
		last = hosttest.Put(t, b, "route."+h, `{"upstreams":[`+strings.Join(ups, ",")+`]}`)
		live[h] = true
	}
	last = hosttest.Put(t, b, "zz.end", "x") // the router rejects it; the query plugin's view zz.end
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(t, f, last)
	}
	srv := hosttest.LoopbackAPI(t, r.H.Handler())
	defer srv.Close()
	at := fmt.Sprintf("min_revision=%d", last)

	same := func(query, input string) {
		t.Helper()
		want := askQuery(t, srv.URL, "whole", query, input, at)
		got := askQuery(t, srv.URL, "routes", query, input, at)
		want.body = strings.Replace(want.body, "fold whole:", "fold routes:", 1) // an error names the fold asked
		if got.code != want.code || got.body != want.body {
			t.Errorf("%s(%q) by the partitioned fold's name: %d %s\nwant (the whole fold's): %d %s", query, input, got.code, got.body, want.code, want.body)
		}
		if got.code == 200 && got.cursor != fmt.Sprint(last) {
			t.Errorf("%s(%q): cursor %q, want the units' least, %d", query, input, got.cursor, last)
		}
	}
	for _, a := range append(addrs, "10.9.9.9:80") {
		same("hosts_of_upstream", a)
	}
	for _, k := range []string{"", "1", "3", "12", "1000", "0", "many"} {
		same("top_upstreams", k)
	}
	if a := askQuery(t, srv.URL, "whole", "hosts_of_upstream", addrs[0], at); !strings.Contains(a.body, `"hosts":["h`) {
		t.Errorf("the reference answer lists no host: %s (the history did not exercise the query)", a.body)
	}

	// The query plugin: view K = V for every key K, so a scan of a prefix
	// lists the live keys, in order, across the 3 units.
	keys := slices.Sorted(func(yield func(string) bool) {
		for h := range live {
			if !yield("route." + h) {
				return
			}
		}
	})
	for _, prefix := range []string{"route.", "route.h1", "route.h0"} {
		var want []string
		for _, k := range keys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		got := askQuery(t, srv.URL, "q", "scan", prefix, at)
		if got.code != 200 || got.body != strings.Join(want, "\n")+"\n" {
			t.Errorf("scan(%q) by the fold's name: %d, %d bytes, want the %d keys in order", prefix, got.code, len(got.body), len(want))
		}
		slices.Reverse(want)
		got = askQuery(t, srv.URL, "q", "rscan", prefix, at)
		if got.code != 200 || got.body != strings.Join(want, "\n")+"\n" {
			t.Errorf("rscan(%q) by the fold's name: %d, %d bytes, want the %d keys in reverse order", prefix, got.code, len(got.body), len(want))
		}
	}
	for _, k := range keys[:20] {
		if got := askQuery(t, srv.URL, "q", "get", k, at); got.code != 200 || !strings.Contains(got.body, "upstreams") {
			t.Errorf("get(%q) by the fold's name: %d %s", k, got.code, got.body)
		}
	}
	if got := askQuery(t, srv.URL, "q", "get", "route.none", at); got.code != 422 || !strings.Contains(got.body, "not found") {
		t.Errorf("get of a key no unit holds: %d %s, want the plugin's 422", got.code, got.body)
	}

	// Two keys of different partitions write the view key "shared": a
	// query that reads it fails with 409 naming both; one that does not
	// still answers.
	var writers []string
	for i := 0; len(writers) < 2; i++ {
		k := fmt.Sprintf("w%d", i)
		if len(writers) == 0 || protocol.PartitionOf("routes", k, 3) != protocol.PartitionOf("routes", writers[0], 3) {
			writers = append(writers, k)
		}
	}
	hosttest.Put(t, b, writers[0], "to:shared")
	last = hosttest.Put(t, b, writers[1], "to:shared")
	at = fmt.Sprintf("min_revision=%d", last)
	for _, q := range [][2]string{{"get", "shared"}, {"scan", ""}, {"rscan", "s"}} {
		if got := askQuery(t, srv.URL, "q", q[0], q[1], at); got.code != http.StatusConflict || !strings.Contains(got.body, `view key \"shared\" is held by partitions`) {
			t.Errorf("%s(%q) over a view key two units hold: %d %s, want 409 naming it", q[0], q[1], got.code, got.body)
		}
	}
	if got := askQuery(t, srv.URL, "q", "scan", "route.", at); got.code != 200 {
		t.Errorf("scan(route.), which never reads the key two units hold: %d %s", got.code, got.body)
	}

	// The view scan form reads one unit: by the fold's name it is refused.
	if code, body := hosttest.HTTPGet(t, srv.URL+"/v1/folds/q/view?start=a&end=b"); code != http.StatusBadRequest || !strings.Contains(body, "one unit's view range") {
		t.Errorf("a view scan by the fold's name: %d %s, want 400 naming the units", code, body)
	}

	// min_revision beyond every unit: 504 within the wait.
	if got := askQuery(t, srv.URL, "routes", "top_upstreams", "", fmt.Sprintf("min_revision=%d&wait=50ms", last+1000)); got.code != http.StatusGatewayTimeout {
		t.Errorf("a query waiting for a revision no unit reaches: %d %s, want 504", got.code, got.body)
	}
}

// TestUnitsReaderReadsUnitsAsOneFold: three real stores read as the units
// of one fold: a raw key is read from its partition's store only (a copy
// planted in another store is never seen); a view key from the one store
// that holds it; a range merges the stores in key order, forward and
// reverse, within its bounds, stopping when its reader says; a view key
// two stores hold ends the read with a *wasm.ReadRefusal naming both
// partitions, from a get and from a range, never one of the two values,
// and only when the range reaches that key. Mutations caught: a raw key
// read from the first store holding it; the check for a key held twice
// off (in the get, or in the merge), made against a key not yet the
// least, or made for the entry a limited reader takes only to learn more
// follow.
func TestUnitsReaderReadsUnitsAsOneFold(t *testing.T) {
	const n = 3
	dir := t.TempDir()
	sns := make([]*fold.Snapshot, n)
	views := map[int][]string{0: {"a", "d", "g"}, 1: {"b", "e"}, 2: {"c", "f", "h"}}
	for p := range n {
		st, _, err := fold.Open(filepath.Join(dir, fmt.Sprint(p)), fold.Options{Logger: hosttest.Quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		var c fold.Commit
		for i := range 30 {
			k := fmt.Sprintf("k%d", i)
			v := fmt.Sprintf("p%d", p)
			if protocol.PartitionOf("b", k, n) != p {
				v = "planted" // a copy of another partition's key: never read
			}
			c.Raw = append(c.Raw, fold.Update{Key: k, Op: fold.OpPut, Rev: protocol.Revision(i + 1), Value: []byte(v)})
		}
		for _, k := range views[p] {
			c.Views = append(c.Views, fold.ViewMutation{Key: []byte(k), Op: fold.ViewPut, Value: []byte(fmt.Sprint(p))})
		}
		c.Cursor = protocol.Cursor{Rev: 30}
		if err := st.Commit(c); err != nil {
			t.Fatal(err)
		}
		if sns[p], err = st.Snapshot(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { sns[p].Close() })
	}
	rd := host.NewUnitsReader("b", sns)
	for i := range 30 {
		k := fmt.Sprintf("k%d", i)
		e, ok, err := rd.Get(k)
		if want := fmt.Sprintf("p%d", protocol.PartitionOf("b", k, n)); err != nil || !ok || string(e.Value) != want {
			t.Errorf("raw %s: %q %v %v, want %q", k, e.Value, ok, err, want)
		}
	}
	for p, ks := range views {
		for _, k := range ks {
			if v, ok, err := rd.ViewGet([]byte(k)); err != nil || !ok || string(v) != fmt.Sprint(p) {
				t.Errorf("view %s: %q %v %v, want %d's", k, v, ok, err, p)
			}
		}
	}
	if _, ok, err := rd.ViewGet([]byte("zz")); ok || err != nil {
		t.Errorf("a view key none holds: %v %v", ok, err)
	}
	scan := func(start, end string, reverse bool, stopAfter int) (string, error) {
		var got []byte
		err := rd.ViewScan([]byte(start), []byte(end), reverse, func(k, _ []byte) error {
			if len(got) == stopAfter {
				return io.EOF
			}
			got = append(got, k...)
			return nil
		})
		return string(got), err
	}
	for _, c := range []struct {
		start, end string
		reverse    bool
		stop       int
		want       string
		err        error
	}{
		{"", "", false, -1, "abcdefgh", nil},
		{"", "", true, -1, "hgfedcba", nil},
		{"b", "g", false, -1, "bcdef", nil},
		{"b", "g", true, -1, "fedcb", nil},
		{"", "", false, 3, "abc", io.EOF},
		{"", "", true, 2, "hg", io.EOF},
	} {
		if got, err := scan(c.start, c.end, c.reverse, c.stop); got != c.want || err != c.err {
			t.Errorf("scan [%q, %q) reverse %v: %q %v, want %q %v", c.start, c.end, c.reverse, got, err, c.want, c.err)
		}
	}

	// Partition 2 writes view "e" too: partition 1 holds it.
	st, _, err := fold.Open(filepath.Join(dir, "twice"), fold.Options{Logger: hosttest.Quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.Commit(fold.Commit{Views: []fold.ViewMutation{{Key: []byte("e"), Op: fold.ViewPut, Value: []byte("2")}}, Cursor: protocol.Cursor{Rev: 30}}); err != nil {
		t.Fatal(err)
	}
	sn, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	rd = host.NewUnitsReader("b", []*fold.Snapshot{sns[0], sns[1], sn})
	var rr *wasm.ReadRefusal
	if v, _, err := rd.ViewGet([]byte("e")); !errors.As(err, &rr) || !strings.Contains(err.Error(), "partitions 1 and 2") {
		t.Errorf("a view key two units hold, read: %q %v, want a refusal naming partitions 1 and 2", v, err)
	}
	for _, reverse := range []bool{false, true} {
		if got, err := scan("", "", reverse, -1); !errors.As(err, &rr) || !strings.Contains(err.Error(), `"e"`) || strings.Contains(got, "e") {
			t.Errorf("a range over a view key two units hold (reverse %v): %q %v, want a refusal before it", reverse, got, err)
		}
	}
	// Two units whose next key is "e", a third's keys before it: a read
	// of the first 2 entries (and a third to learn more follow, as a
	// plugin's range does) never meets the refusal; one of 3 does.
	rd = host.NewUnitsReader("b", []*fold.Snapshot{sn, sn, sns[0]})
	for _, c := range []struct {
		limit int
		want  string
		err   error
	}{{3, "ad", nil}, {4, "ad", &wasm.ReadRefusal{}}} {
		var got []byte
		err := rd.(wasm.LimitedRangeReader).ViewScanLimit(nil, nil, false, c.limit, func(k, _ []byte) error {
			if len(got) == c.limit-1 {
				return io.EOF // the one past the plugin's limit: more follow
			}
			got = append(got, k...)
			return nil
		})
		if refused := errors.As(err, &rr); string(got) != c.want || (c.err == nil) != (err == io.EOF) || (c.err != nil) != refused {
			t.Errorf("the first %d entries (and one to learn more follow), before a key two units hold: %q %v, want %q, refused %v", c.limit-1, got, err, c.want, c.err != nil)
		}
	}
}

// BenchmarkPartitionedQuery: the example router's top_upstreams (one
// range over every upstream/ key) asked by the name of a fold of 4
// partitions on one node, against the same query of one fold of the
// whole bucket, in the same run (b.ReportMetric "x-whole": the ratio).
func BenchmarkPartitionedQuery(b *testing.B) {
	url, bk := hosttest.NATSServer(b)
	dir := b.TempDir()
	router := hosttest.BuiltPlugin(b, "example-router", "router-c")
	r := hosttest.StartHost(b, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: router, DataDir: filepath.Join(dir, "routes"), Partitions: 4},
			{Name: "whole", Bucket: "routes", Plugin: router, DataDir: filepath.Join(dir, "whole")},
		},
	})
	var last uint64
	for i := range 5000 {
		last = hosttest.Put(b, bk, fmt.Sprintf("route.h%05d", i), fmt.Sprintf(`{"upstreams":[{"addr":"10.0.0.%d:80"},{"addr":"10.0.1.%d:80"},{"addr":"10.0.2.%d:80"}]}`, i%50, i%70, i%90))
	}
	for _, f := range r.H.Folds() {
		hosttest.WaitCursor(b, f, last)
	}
	srv := hosttest.LoopbackAPI(b, r.H.Handler())
	defer srv.Close()
	var took [2]time.Duration
	b.ResetTimer()
	for range b.N {
		for i, fold := range []string{"whole", "routes"} {
			t0 := time.Now()
			if a := askQuery(b, srv.URL, fold, "top_upstreams", "5", ""); a.code != 200 {
				b.Fatalf("%s: %d %s", fold, a.code, a.body)
			}
			took[i] += time.Since(t0)
		}
	}
	b.ReportMetric(float64(took[1])/float64(took[0]), "x-whole")
	b.ReportMetric(float64(took[0].Microseconds())/float64(b.N), "µs-whole/op")
}
