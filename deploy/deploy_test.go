package deploy

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// here is this package's directory.
func here(t *testing.T) string {
	return testDir
}

// exported is what a real host exports: the families one scrape of its
// /metrics shows (name -> family), and the name and variable labels of
// every descriptor its registry holds (families a scrape shows only once
// something happened: a repair's counts).
type exported struct {
	scraped map[string]*dto.MetricFamily
	desc    map[string][]string
}

// realHost starts a host on an embedded NATS server with one fold running
// the example router and exporting to a directory every 200ms, folds a few
// updates, waits for a published artifact, and reads its metrics.
func realHost(t *testing.T) exported {
	t.Helper()
	srv, nc := natstest.Start(t)
	ctx := context.Background()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes", History: 8}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	plugin := filepath.Join(here(t), "..", "plugins", "example-router", "build", "router-c.wasm")
	if _, err := os.Stat(plugin); err != nil {
		t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", plugin, err)
	}
	cache := os.Getenv("FOLDHOST_TEST_WASM_CACHE")
	if cache == "" {
		cache = t.TempDir()
	}
	dir := t.TempDir()
	h, err := host.New(host.Options{
		NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL()}},
		Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"},
		// A fleet of one: the fleet's series are exported too.
		Fleet:          host.FleetOptions{Name: "deploy", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
		PluginCacheDir: cache,
		Folds: []host.FoldOptions{{Name: "routes", Plugin: plugin, DataDir: filepath.Join(dir, "routes"),
			ExportInterval: 200 * time.Millisecond}},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(ctx); err != nil {
		h.Close()
		t.Fatal(err)
	}
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(runCtx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("run: %v", err)
		}
		h.Close()
	}()

	var last uint64
	for i := range 5 {
		if last, err = b.KV().Put(ctx, fmt.Sprintf("route.h%d", i), fmt.Appendf(nil, `{"upstreams":[{"addr":"10.0.0.%d:80"}]}`, i)); err != nil {
			t.Fatal(err)
		}
	}
	f := h.Fold("routes")
	// The ceiling is against a hang, not a measure of speed.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := f.Status()
		if st.Cursor >= last && st.Export != nil && st.Export.LastPublishedAt != nil && st.LastCommitAt != nil {
			break
		}
		if st.State == httpapi.StateFailed || time.Now().After(deadline) {
			t.Fatalf("want cursor %d, a published artifact and a last commit time: %+v", last, st)
		}
		time.Sleep(10 * time.Millisecond)
	}

	api := httptest.NewServer(h.Handler())
	defer api.Close()
	// Queries, declared and not, for the query metrics' series.
	for _, q := range []string{"hosts_of_upstream?input=10.0.0.1:80", "top_upstreams", "no_such_query"} {
		resp, err := http.Get(api.URL + "/v1/folds/routes/query/" + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
	}
	resp, err := http.Get(api.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}

	descs := make(chan *prometheus.Desc)
	go func() {
		h.Metrics().Registry().Describe(descs)
		close(descs)
	}()
	// Desc has no accessors; its String is
	// Desc{fqName: "…", help: "…", …, variableLabels: {a,b}}.
	re := regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)
	desc := map[string][]string{}
	for d := range descs {
		m := re.FindStringSubmatch(d.String())
		if m == nil {
			t.Fatalf("unparsable descriptor %s", d)
		}
		var labels []string
		if m[2] != "" {
			labels = strings.Split(m[2], ",")
		}
		desc[m[1]] = labels
	}
	return exported{scraped: fams, desc: desc}
}

// query is one PromQL expression and where it was found.
type query struct{ where, expr string }

// dashboardQueries are the expressions of every panel target and the
// queries of the template variables; the test also checks the dashboard's
// shape an import relies on.
func dashboardQueries(t *testing.T, path string) []query {
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	type target struct {
		Expr       string `json:"expr"`
		Datasource struct {
			Type string `json:"type"`
			UID  string `json:"uid"`
		} `json:"datasource"`
	}
	type panel struct {
		Type    string   `json:"type"`
		Title   string   `json:"title"`
		Targets []target `json:"targets"`
	}
	var d struct {
		Title         string  `json:"title"`
		UID           string  `json:"uid"`
		SchemaVersion int     `json:"schemaVersion"`
		Panels        []panel `json:"panels"`
		Templating    struct {
			List []struct {
				Name  string          `json:"name"`
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	if d.Title == "" || d.UID == "" || d.SchemaVersion < 36 {
		t.Errorf("dashboard title %q uid %q schemaVersion %d: want both set and a schema of Grafana 10 or later", d.Title, d.UID, d.SchemaVersion)
	}
	var qs []query
	vars := map[string]string{}
	for _, v := range d.Templating.List {
		var q string
		if err := json.Unmarshal(v.Query, &q); err != nil { // a string, or {"query": "…"}
			var obj struct {
				Query string `json:"query"`
			}
			if err := json.Unmarshal(v.Query, &obj); err != nil {
				t.Fatalf("variable %s: query %s", v.Name, v.Query)
			}
			q = obj.Query
		}
		vars[v.Name] = v.Type + " " + q
		if v.Type == "query" {
			qs = append(qs, query{"variable " + v.Name, q})
		}
	}
	if vars["DS_PROMETHEUS"] != "datasource prometheus" {
		t.Errorf("variable DS_PROMETHEUS = %q, want a prometheus datasource variable", vars["DS_PROMETHEUS"])
	}
	if !strings.HasPrefix(vars["fold"], "query label_values(foldhost_fold_cursor_revision") {
		t.Errorf("variable fold = %q, want label_values(foldhost_fold_cursor_revision…, fold)", vars["fold"])
	}
	panels := 0
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		panels++
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		for _, tg := range p.Targets {
			if tg.Datasource.Type != "prometheus" || tg.Datasource.UID != "${DS_PROMETHEUS}" {
				t.Errorf("panel %q: datasource %+v, want the DS_PROMETHEUS variable", p.Title, tg.Datasource)
			}
			if !balanced(tg.Expr) {
				t.Errorf("panel %q: unbalanced brackets in %s", p.Title, tg.Expr)
			}
			qs = append(qs, query{"panel " + p.Title, tg.Expr})
		}
	}
	if panels == 0 {
		t.Fatalf("%s: no panels", path)
	}
	return qs
}

// rule is one alerting rule of the rules file.
type rule struct {
	alert, expr, forDur, severity, summary string
}

// rulesOf reads the alerting rules. The file keeps a form read without a
// YAML library: `- alert: NAME` opens a rule, `expr: |` is followed by the
// expression's lines (indented deeper), and for, severity and summary sit
// on their keys' lines.
func rulesOf(t *testing.T, path string) []rule {
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var rules []rule
	var cur *rule
	exprIndent := -1 // > 0 while reading an expr block: the indent of its key
	sc := bufio.NewScanner(f)
	n := 0
	for sc.Scan() {
		n++
		line := sc.Text()
		trimmed := strings.TrimSpace(line)
		indent := len(line) - len(strings.TrimLeft(line, " "))
		if exprIndent >= 0 {
			if trimmed == "" || indent > exprIndent {
				cur.expr += trimmed + "\n"
				continue
			}
			exprIndent = -1
		}
		if trimmed == "" || strings.HasPrefix(trimmed, "#") {
			continue
		}
		if strings.Contains(line, "\t") {
			t.Fatalf("%s:%d: a tab", path, n)
		}
		key, val, _ := strings.Cut(strings.TrimPrefix(trimmed, "- "), ":")
		val = strings.TrimSpace(val)
		switch key {
		case "alert":
			rules = append(rules, rule{alert: val})
			cur = &rules[len(rules)-1]
		case "expr":
			if cur == nil || val != "|" {
				t.Fatalf("%s:%d: want `expr: |` inside a rule", path, n)
			}
			exprIndent = indent
		case "for":
			cur.forDur = val
		case "severity":
			cur.severity = val
		case "summary":
			cur.summary = val
		case "record":
			t.Fatalf("%s:%d: a recording rule: the file holds alerts only", path, n)
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	for _, r := range rules {
		if strings.TrimSpace(r.expr) == "" || r.forDur == "" || r.severity == "" || r.summary == "" {
			t.Errorf("rule %s: want expr, for, severity and summary: %+v", r.alert, r)
		}
		if _, err := model.ParseDuration(r.forDur); err != nil {
			t.Errorf("rule %s: for %q: %v", r.alert, r.forDur, err)
		}
		if !balanced(r.expr) {
			t.Errorf("rule %s: unbalanced brackets in %s", r.alert, r.expr)
		}
	}
	return rules
}

// balanced reports whether the (), [] and {} of a PromQL expression nest,
// quoted strings aside.
func balanced(expr string) bool {
	var stack []rune
	pair := map[rune]rune{')': '(', ']': '[', '}': '{'}
	var quote rune
	for _, c := range expr {
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '"' || c == '\'' || c == '`':
			quote = c
		case c == '(' || c == '[' || c == '{':
			stack = append(stack, c)
		case pair[c] != 0:
			if len(stack) == 0 || stack[len(stack)-1] != pair[c] {
				return false
			}
			stack = stack[:len(stack)-1]
		}
	}
	return len(stack) == 0 && quote == 0
}

var (
	identifier = regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*`)
	quoted     = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)
)

// metricNames are the names of the metrics an expression queries: its
// identifiers (outside label values) of the host's namespaces, and up
// (Prometheus' own series of each scrape target, which no host exports).
func metricNames(expr string) []string {
	var out []string
	for _, id := range identifier.FindAllString(quoted.ReplaceAllString(expr, `""`), -1) {
		if strings.HasPrefix(id, "foldhost_") || strings.HasPrefix(id, "process_") || strings.HasPrefix(id, "go_") || id == "up" {
			out = append(out, id)
		}
	}
	return out
}

// upOfTheJob matches every selector of up in an expression: each must
// name foldhost's scrape job, or the rule watches other targets (or none).
var upOfTheJob = regexp.MustCompile(`\bup\b(\{[^}]*\})?`)

// known reports whether name is a series the host exports: a family's name
// or, for a histogram or a summary, one of its _bucket, _sum and _count.
func (e exported) known(name string) bool {
	if _, ok := e.scraped[name]; ok {
		return true
	}
	if _, ok := e.desc[name]; ok {
		return true
	}
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suf)
		if !ok {
			continue
		}
		if fam, ok := e.scraped[base]; ok {
			switch fam.GetType() {
			case dto.MetricType_HISTOGRAM:
				return true
			case dto.MetricType_SUMMARY:
				return suf != "_bucket"
			}
		}
	}
	return false
}

// The alerts the rules file must keep (docs/operations.md, "Dashboard and
// alerts").
var wantAlerts = []string{"FoldhostFoldFailed", "FoldhostFoldLagging", "FoldhostFoldStalled", "FoldhostRepairLong",
	"FoldhostArtifactStale", "FoldhostNATSDisconnected", "FoldhostEffectsStuck", "FoldhostDeadLetters",
	"FoldhostDown", "FoldhostAbsent", "FoldhostFoldUnowned", "FoldhostFleetTakeovers"}

// scrapeJob is the job label the rules on Prometheus' own up series
// select foldhost's targets by (the rules file's header documents it).
const scrapeJob = "foldhost"

// boundedLabels are the labels a foldhost metric may carry besides fold,
// each with every value it can take: a label outside them, or a value
// outside its set, would make a series per something unbounded (a key, an
// error text, a module hash).
// The query label is bounded by the plugin: the names it declares (at
// most 256, abi/ABI.md), every other name counted as
// httpapi.UnknownQueryLabel; these are the C router's.
var boundedLabels = map[string][]string{
	"state": stateNames(),
	"outcome": append([]string{"published", "superseded", "skipped", "failed", "accepted", "refused", "done", "cancelled",
		"answered", "no_owner", "fenced"}, httpapi.QueryOutcomes...),
	"plan":  {"key-listing-diff", "relist-only", "refuse", "restore"},
	"query": {"hosts_of_upstream", "top_upstreams", httpapi.UnknownQueryLabel},
	"role":  httpapi.FleetRoles,
}

func stateNames() []string {
	var out []string
	for _, s := range httpapi.States {
		out = append(out, string(s))
	}
	return out
}

// TestDashboardAndAlerts: every metric the Grafana dashboard and the
// alerting rules query is one a real host exports (a renamed metric, on
// either side, fails here), the dashboard shows every foldhost metric, and
// no foldhost metric has a label beyond fold and a few small enums.
func TestDashboardAndAlerts(t *testing.T) {
	dir := here(t)
	qs := dashboardQueries(t, filepath.Join(dir, "grafana", "foldhost.json"))
	rules := rulesOf(t, filepath.Join(dir, "prometheus", "foldhost-rules.yml"))
	var alerts []string
	for _, r := range rules {
		alerts = append(alerts, r.alert)
		qs = append(qs, query{"alert " + r.alert, r.expr})
	}
	if !slices.Equal(alerts, wantAlerts) {
		t.Errorf("alerts %v, want %v", alerts, wantAlerts)
	}

	e := realHost(t)
	onDashboard := map[string]bool{}
	for _, q := range qs {
		names := metricNames(q.expr)
		if len(names) == 0 {
			t.Errorf("%s queries no foldhost metric: %s", q.where, q.expr)
		}
		for _, n := range names {
			if n == "up" {
				for _, sel := range upOfTheJob.FindAllStringSubmatch(q.expr, -1) {
					if sel[1] != `{job="`+scrapeJob+`"}` {
						t.Errorf("%s queries up%s: want up{job=%q}, the scrape job the rules file documents", q.where, sel[1], scrapeJob)
					}
				}
				continue
			}
			if !e.known(n) {
				t.Errorf("%s queries %s, which the host does not export: %s", q.where, n, q.expr)
			}
			if !strings.HasPrefix(q.where, "alert ") {
				onDashboard[n] = true
			}
		}
	}

	for _, name := range slices.Sorted(maps.Keys(e.desc)) {
		if !strings.HasPrefix(name, "foldhost_") {
			continue
		}
		shown := onDashboard[name]
		for _, suf := range []string{"_bucket", "_sum", "_count"} {
			shown = shown || onDashboard[name+suf]
		}
		if !shown {
			t.Errorf("the dashboard does not show %s", name)
		}
		for _, l := range e.desc[name] {
			if _, ok := boundedLabels[l]; !ok && l != "fold" {
				t.Errorf("%s has label %q: not fold nor one of the bounded labels %v", name, l, slices.Sorted(maps.Keys(boundedLabels)))
			}
		}
	}
	for name, fam := range e.scraped {
		if !strings.HasPrefix(name, "foldhost_") {
			continue
		}
		if _, ok := e.desc[name]; !ok {
			t.Errorf("scraped %s, which no descriptor of the registry names", name)
		}
		for _, m := range fam.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "fold" {
					if lp.GetValue() != "routes" {
						t.Errorf("%s{fold=%q}: want the fold's name", name, lp.GetValue())
					}
					continue
				}
				if l := lp.GetName(); l != "le" && !slices.Contains(boundedLabels[l], lp.GetValue()) {
					t.Errorf("%s{%s=%q}: a value outside %v", name, l, lp.GetValue(), boundedLabels[l])
				}
			}
		}
	}
	// Without these the checks above would pass vacuously.
	for _, n := range []string{"foldhost_fold_export_last_published_timestamp_seconds", "foldhost_fold_export_interval_seconds",
		"foldhost_fold_last_commit_timestamp_seconds", "foldhost_fold_plugin_reloads_total", "process_resident_memory_bytes", "go_gc_duration_seconds",
		"foldhost_fold_queries_total", "foldhost_fold_query_duration_seconds",
		"foldhost_fold_export_cursor_revision", "foldhost_fold_export_up_to_date_timestamp_seconds",
		"foldhost_fold_fleet_role", "foldhost_fold_fleet_epoch", "foldhost_fleet_claims_total", "foldhost_fleet_takeovers_total"} {
		if _, ok := e.scraped[n]; !ok {
			t.Errorf("the host's scrape lacks %s", n)
		}
	}
}

// testDir is this package's directory: go test starts a test binary there
// (read once, before any test changes directory). runtime.Caller would not
// do: the test command builds with -trimpath, which leaves no file paths.
var testDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()
