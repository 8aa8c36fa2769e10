package host_test

import (
	"fmt"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
)

// scrapeAll reads GET url/metrics into one value per series, keyed by the
// series' name and labels as the text format writes them (labels sorted):
// name{a="x",b="y"}. A histogram contributes its _count.
func scrapeAll(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /metrics: %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for name, fam := range fams {
		for _, m := range fam.GetMetric() {
			key := name
			if h := m.GetHistogram(); h != nil {
				key += "_count"
			}
			key += "{"
			for i, l := range m.GetLabel() {
				if i > 0 {
					key += ","
				}
				key += fmt.Sprintf("%s=%q", l.GetName(), l.GetValue())
			}
			key += "}"
			switch {
			case m.GetCounter() != nil:
				out[key] = m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				out[key] = m.GetGauge().GetValue()
			case m.GetHistogram() != nil:
				out[key] = float64(m.GetHistogram().GetSampleCount())
			}
		}
	}
	return out
}

// TestCountersStartAtZero (issue 41, item 5): the first scrape after a
// host started, before anything happened, shows every counter of every
// fold at 0, so that increase() over it sees the first event: the repairs
// of every plan with each outcome it can end with, the queries of every
// query the plugin declares (and of undeclared names) with every outcome
// and their latency histograms, the plugin reloads, the export rounds.
// A query then moves its series from 0 to 1. Fails when the repairs or
// the queries are created at their first event (the series absent before).
func TestCountersStartAtZero(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t"},
		Folds: []host.FoldOptions{
			{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(dir, "routes"), ExportInterval: time.Hour},
			{Name: "raw", Bucket: "routes", DataDir: filepath.Join(dir, "raw")},
		},
	})
	web := hosttest.LoopbackAPI(t, r.H.Handler())
	defer web.Close()
	got := scrapeAll(t, web.URL) // right after the start: nothing has happened

	var want []string
	for _, fold := range []string{"routes", "raw"} {
		for _, s := range httpapi.RepairSeries {
			want = append(want, fmt.Sprintf(`foldhost_fold_repairs_total{fold=%q,outcome=%q,plan=%q}`, fold, s.Outcome, s.Plan))
		}
		for _, o := range httpapi.QueryOutcomes {
			want = append(want, fmt.Sprintf(`foldhost_fold_queries_total{fold=%q,outcome=%q,query=%q}`, fold, o, httpapi.UnknownQueryLabel))
		}
		for _, n := range []string{"updates_total", "rejected_updates_total", "batches_total", "plugin_errors_total", "commit_failures_total",
			"dead_lettered_total", "nats_disconnects_total", "effects_published_total", "effects_dead_lettered_total"} {
			want = append(want, fmt.Sprintf(`foldhost_fold_%s{fold=%q}`, n, fold))
		}
		want = append(want, fmt.Sprintf(`foldhost_fold_batch_duration_seconds_count{fold=%q}`, fold))
		for _, o := range []string{"published", "superseded", "skipped", "failed"} {
			want = append(want, fmt.Sprintf(`foldhost_fold_export_rounds_total{fold=%q,outcome=%q}`, fold, o))
		}
	}
	for _, q := range []string{"hosts_of_upstream", "top_upstreams"} {
		for _, o := range httpapi.QueryOutcomes {
			want = append(want, fmt.Sprintf(`foldhost_fold_queries_total{fold="routes",outcome=%q,query=%q}`, o, q))
		}
		want = append(want, fmt.Sprintf(`foldhost_fold_query_duration_seconds_count{fold="routes",query=%q}`, q))
	}
	for _, o := range []string{"accepted", "refused"} {
		want = append(want, fmt.Sprintf(`foldhost_fold_plugin_reloads_total{fold="routes",outcome=%q}`, o))
	}
	for _, s := range want {
		if v, ok := got[s]; !ok || v != 0 {
			t.Errorf("first scrape: %s = %v (present %v), want 0", s, v, ok)
		}
	}

	hosttest.WaitCursor(t, r.H.Fold("routes"), hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80")))
	if code, _ := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/query/top_upstreams?input=1"); code != http.StatusOK {
		t.Fatalf("query: %d", code)
	}
	got = scrapeAll(t, web.URL)
	for s, v := range map[string]float64{
		`foldhost_fold_queries_total{fold="routes",outcome="ok",query="top_upstreams"}`:   1,
		`foldhost_fold_query_duration_seconds_count{fold="routes",query="top_upstreams"}`: 1,
		`foldhost_fold_updates_total{fold="routes"}`:                                      1,
	} {
		if got[s] != v {
			t.Errorf("after a query: %s = %v, want %v", s, got[s], v)
		}
	}
}

// TestAnIdleFoldsArtifactStaysUpToDate (issue 41, item 1): once an
// artifact holds the fold's cursor, every interval tick that finds nothing
// new to export notes the artifact up to date (the alert on artifact
// staleness reads that time, not the last publish's): an idle fold's
// up_to_date_at advances while last_published_at and the round counts
// stand still. Once the fold holds a revision no artifact has (its rounds
// skipped: the lease of the last one still holds), up_to_date_at stands
// still until a round publishes it. Fails when the ticks that find nothing
// to export leave the time alone (the idle fold's goes stale), or when
// they note it whatever the cursor (a fold with unexported revisions
// would look up to date).
func TestAnIdleFoldsArtifactStaysUpToDate(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	store, err := dirstore.New(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	const interval, ttl = 100 * time.Millisecond, 5 * time.Second
	r := hosttest.StartHost(t, host.Options{
		NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Artifacts: host.ArtifactOptions{Store: store, Where: "test", Holder: "t", LeaseTTL: ttl},
		Folds: []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"),
			DataDir: filepath.Join(t.TempDir(), "a"), ExportInterval: interval}},
	})
	f := r.H.Fold("routes")
	last := hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80"))
	var published httpapi.Status
	hosttest.WaitFor(t, func() bool {
		published = f.Status()
		e := published.Export
		return e.ExportedCursor != nil && *e.ExportedCursor >= last && e.UpToDateAt != nil
	})
	// Idle: the ticks find nothing to export and say so (five of them
	// take half a second; the deadline is for a loaded machine).
	var idle httpapi.Status
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		idle = f.Status()
		if idle.Export.UpToDateAt.Sub(*published.Export.UpToDateAt) >= 5*interval {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("idle for 30s, up_to_date_at still %v (published %v): the ticks that find nothing to export do not note it", *idle.Export.UpToDateAt, *published.Export.UpToDateAt)
		}
	}
	if e := idle.Export; *e.LastPublishedAt != *published.Export.LastPublishedAt || e.Rounds != published.Export.Rounds ||
		*e.ExportedCursor != idle.Cursor {
		t.Fatalf("idle: a round ran or the cursors differ: before %+v, after %+v (cursor %d)", published.Export, e, idle.Cursor)
	}

	// A write the lease keeps from being exported for a while.
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "route.b", hosttest.Route("10.0.0.2:80")))
	hosttest.WaitFor(t, func() bool { return f.Status().Export.Rounds.Skipped > idle.Export.Rounds.Skipped })
	behind := f.Status() // a tick after the write skipped a round: none notes the time since
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		if st.Export.Rounds.Published > behind.Export.Rounds.Published {
			return true
		}
		if *st.Export.UpToDateAt != *behind.Export.UpToDateAt {
			t.Fatalf("up_to_date_at moved from %v to %v while cursor %d is past the exported %d", *behind.Export.UpToDateAt, *st.Export.UpToDateAt, st.Cursor, *st.Export.ExportedCursor)
		}
		return false
	})
	if behind.Export.Rounds.Skipped == idle.Export.Rounds.Skipped || behind.Cursor <= *behind.Export.ExportedCursor {
		t.Fatalf("want rounds skipped while the cursor is past the exported one: %+v", behind.Export)
	}
	hosttest.WaitFor(t, func() bool {
		st := f.Status()
		return *st.Export.ExportedCursor == st.Cursor && st.Export.UpToDateAt.After(*behind.Export.UpToDateAt)
	})
}
