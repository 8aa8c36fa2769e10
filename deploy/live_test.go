package deploy

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// liveIdle is how long the live test watches an idle healthy host for
// pending alerts; FOLDHOST_ALERTS_SOAK (a duration, e.g. 20m, with go
// test's -timeout above it) makes it longer.
const liveIdle = 60 * time.Second

// liveExportInterval is the export_interval of the live host's exporting
// fold: the artifact rule's threshold is 3 of them, so the idle window
// outlasts it several times (the rule on the last publish's age goes
// pending 15 s into it).
const liveExportInterval = 5 * time.Second

// proc is a child process the test runs and stops.
type proc struct {
	name string
	cmd  *exec.Cmd
	out  syncbuf.Buffer
	done chan struct{}
}

// startProc starts bin with args; the test's end stops it (SIGTERM, then
// SIGKILL after 30 s) and waits for it.
func startProc(t *testing.T, name, bin string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, cmd: exec.Command(bin, args...), done: make(chan struct{})}
	p.cmd.Stdout, p.cmd.Stderr = &p.out, &p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait()
		close(p.done)
	}()
	t.Cleanup(func() {
		p.stop(t)
		if t.Failed() {
			t.Logf("%s output:\n%s", name, p.out.String())
		}
	})
	return p
}

func (p *proc) stop(t *testing.T) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(30 * time.Second):
		t.Errorf("%s did not exit within 30s of SIGTERM: killed", p.name)
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// eventually polls cond every 200ms until it holds; past the deadline the
// test fails with what cond last said.
func eventually(t *testing.T, within time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		ok, said := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("not %s within %v: %s", what, within, said)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// getJSON GETs url into v; an error says why not.
func getJSON(u string, v any) error {
	resp, err := http.Get(u)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, b)
	}
	return json.Unmarshal(b, v)
}

// promRule and promAlert are what Prometheus' /api/v1/rules and
// /api/v1/alerts say of an alerting rule and an alert.
type promRule struct {
	Name           string    `json:"name"`
	Health         string    `json:"health"`
	LastError      string    `json:"lastError"`
	LastEvaluation time.Time `json:"lastEvaluation"`
}

type promAlert struct {
	Labels map[string]string `json:"labels"`
	State  string            `json:"state"`
}

func (a promAlert) String() string {
	return fmt.Sprintf("%s %s{fold=%q, instance=%q, severity=%q}", a.State, a.Labels["alertname"], a.Labels["fold"], a.Labels["instance"], a.Labels["severity"])
}

type prometheusAPI struct{ base string }

func (p prometheusAPI) rules() ([]promRule, error) {
	var r struct {
		Data struct {
			Groups []struct {
				Rules []promRule `json:"rules"`
			} `json:"groups"`
		} `json:"data"`
	}
	if err := getJSON(p.base+"/api/v1/rules?type=alert", &r); err != nil {
		return nil, err
	}
	var out []promRule
	for _, g := range r.Data.Groups {
		out = append(out, g.Rules...)
	}
	return out, nil
}

func (p prometheusAPI) alerts() ([]promAlert, error) {
	var r struct {
		Data struct {
			Alerts []promAlert `json:"alerts"`
		} `json:"data"`
	}
	err := getJSON(p.base+"/api/v1/alerts", &r)
	return r.Data.Alerts, err
}

// up is the value of up{job="foldhost"} now (-1: no such series).
func (p prometheusAPI) up() (float64, error) {
	var r struct {
		Data struct {
			Result []struct {
				Value [2]any `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := getJSON(p.base+"/api/v1/query?query="+url.QueryEscape(`up{job="`+scrapeJob+`"}`), &r); err != nil {
		return 0, err
	}
	if len(r.Data.Result) == 0 {
		return -1, nil
	}
	var v float64
	_, err := fmt.Sscan(fmt.Sprint(r.Data.Result[0].Value[1]), &v)
	return v, err
}

// healthy checks every rule is one the file ships, and is evaluated
// without error; it returns the oldest evaluation.
func (p prometheusAPI) healthy() (time.Time, error) {
	rules, err := p.rules()
	if err != nil {
		return time.Time{}, err
	}
	var names []string
	oldest := time.Now()
	for _, r := range rules {
		names = append(names, r.Name)
		if r.Health != "ok" {
			return time.Time{}, fmt.Errorf("rule %s: health %q: %s", r.Name, r.Health, r.LastError)
		}
		if r.LastEvaluation.Before(oldest) {
			oldest = r.LastEvaluation
		}
	}
	if !slices.Equal(names, wantAlerts) {
		return time.Time{}, fmt.Errorf("Prometheus evaluates %v, want %v", names, wantAlerts)
	}
	return oldest, nil
}

// buildFoldhost builds the repository's binary (go build: the test
// command's GOFLAGS, -trimpath, make it reuse the build cache).
func buildFoldhost(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH (the live alerts test builds foldhost): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "foldhost")
	cmd := exec.Command(goBin, "build", "-o", bin, "./cmd/foldhost")
	cmd.Dir = filepath.Join(here(t), "..")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

var httpURLRE = regexp.MustCompile(`HTTP API listening on (http://\S+)`)

// TestRulesUnderARealPrometheus (issue 41): Debian's Prometheus scrapes
// the repository's foldhost (built, run with a config file, on a NATS
// server of the test's) every second and evaluates the shipped rules,
// unchanged, every second. The host runs a fold exporting every 5 s (its
// last publish soon older than 3 intervals: it goes idle), a raw fold, and
// a fold whose plugin traps on any update (its bucket empty at first).
// promtool finds nothing to say of its /metrics. Every rule's health stays
// ok; over a minute of the idle healthy host no
// alert is even pending (the longest for is 30 minutes: pending at all is
// the stronger claim; FOLDHOST_ALERTS_SOAK=20m watches 20 minutes); then
// an update fails the trapping fold, and FoldhostFoldFailed goes pending
// and fires (its for: 1m) while no other alert is pending or firing. Fails
// with the rule on the last publish's age (ArtifactStale pending 15 s into
// the idle minute) and with FoldStalled on a series younger than its window
// or without failed among its exclusions (pending beside FoldFailed).
func TestRulesUnderARealPrometheus(t *testing.T) {
	prometheus := promBinary(t, "FOLDHOST_PROMETHEUS", "prometheus")
	idle := liveIdle
	if s := os.Getenv("FOLDHOST_ALERTS_SOAK"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("FOLDHOST_ALERTS_SOAK=%q: %v", s, err)
		}
		idle = d
	}
	start := time.Now()
	bin := buildFoldhost(t)
	router := filepath.Join(here(t), "..", "plugins", "example-router", "build", "router-c.wasm")
	trap := filepath.Join(here(t), "..", "plugins", "testdata", "build", "trap.wasm")
	for _, p := range []string{router, trap} {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("missing %s: run scripts/build-plugins first (the test command does): %v", p, err)
		}
	}

	srv, nc := natstest.Start(t)
	ctx := context.Background()
	routes, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes", History: 8}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	traps, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "traps"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if _, err := routes.KV().Put(ctx, fmt.Sprintf("route.h%d", i), fmt.Appendf(nil, `{"upstreams":[{"addr":"10.0.0.%d:80"}]}`, i)); err != nil {
			t.Fatal(err)
		}
	}

	dir := t.TempDir()
	cfg := filepath.Join(dir, "foldhost.toml")
	text := fmt.Sprintf(`data_dir = %q
[nats]
url = %q
head_poll_interval = "1s"
[http]
addr = "127.0.0.1:0"
[log]
level = "warn"
[artifacts]
store = "local"
dir = %q
lease_ttl = "1s"
holder = "live"
[[fold]]
name = "routes"
plugin = %q
export_interval = %q
[[fold]]
name = "raw"
bucket = "routes"
[[fold]]
name = "traps"
plugin = %q
plugin_retries = 0
`, filepath.Join(dir, "data"), srv.ClientURL(), filepath.Join(dir, "artifacts"), router, liveExportInterval.String(), trap)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	host := startProc(t, "foldhost", bin, "run", "--config", cfg)
	var api string
	eventually(t, time.Minute, "foldhost serving its HTTP API", func() (bool, string) {
		if host.exited() {
			t.Fatalf("foldhost exited: %v\n%s", host.cmd.ProcessState, host.out.String())
		}
		m := httpURLRE.FindStringSubmatch(host.out.String())
		if m == nil {
			return false, host.out.String()
		}
		api = m[1]
		return true, ""
	})
	eventually(t, time.Minute, "foldhost ready", func() (bool, string) {
		resp, err := http.Get(api + "/readyz")
		if err != nil {
			return false, err.Error()
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status
	})

	// promtool's lint of what the host exports (names, types, help).
	resp, err := http.Get(api + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	lint := exec.Command(promBinary(t, "FOLDHOST_PROMTOOL", "promtool"), "check", "metrics")
	lint.Stdin = resp.Body
	out, err := lint.CombinedOutput()
	resp.Body.Close()
	if err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics on the host's /metrics: %v\n%s", err, out)
	}

	promPort := hosttest.FreePort(t)
	promCfg := filepath.Join(dir, "prometheus.yml")
	rulesFile := filepath.Join(here(t), "prometheus", "foldhost-rules.yml")
	if err := os.WriteFile(promCfg, fmt.Appendf(nil, `global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: %s
    static_configs:
      - targets: [%q]
`, rulesFile, scrapeJob, strings.TrimPrefix(api, "http://")), 0o644); err != nil {
		t.Fatal(err)
	}
	pr := startProc(t, "prometheus", prometheus, "--config.file="+promCfg, "--storage.tsdb.path="+t.TempDir(),
		fmt.Sprintf("--web.listen-address=127.0.0.1:%d", promPort), "--log.level=warn")
	p := prometheusAPI{base: fmt.Sprintf("http://127.0.0.1:%d", promPort)}
	eventually(t, time.Minute, "Prometheus scraping foldhost (up 1)", func() (bool, string) {
		if pr.exited() {
			t.Fatalf("prometheus exited: %v\n%s", pr.cmd.ProcessState, pr.out.String())
		}
		v, err := p.up()
		return err == nil && v == 1, fmt.Sprint(v, err)
	})
	// Every rule evaluated since the first scrape: FoldhostAbsent may
	// have gone pending on an evaluation before it.
	scraped := time.Now()
	eventually(t, 30*time.Second, "every rule evaluated after the first scrape, health ok", func() (bool, string) {
		oldest, err := p.healthy()
		if err != nil {
			return false, err.Error()
		}
		return oldest.After(scraped.Add(time.Second)), "oldest evaluation " + oldest.String()
	})
	t.Logf("set up in %v (build, host, Prometheus)", time.Since(start).Round(time.Second))

	// The idle healthy host: no alert pending, every rule healthy.
	watchStart := time.Now()
	for time.Since(watchStart) < idle {
		if host.exited() || pr.exited() {
			t.Fatalf("a process exited: foldhost %v, prometheus %v", host.cmd.ProcessState, pr.cmd.ProcessState)
		}
		alerts, err := p.alerts()
		if err != nil {
			t.Fatal(err)
		}
		if len(alerts) > 0 {
			t.Fatalf("%v into the idle healthy host, alerts %v", time.Since(watchStart).Round(time.Second), alerts)
		}
		if _, err := p.healthy(); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second)
	}
	var st struct {
		Cursor uint64 `json:"cursor"`
		Export struct {
			LastPublishedAt *time.Time `json:"last_published_at"`
			ExportedCursor  *uint64    `json:"exported_cursor"`
		} `json:"export"`
	}
	if err := getJSON(api+"/v1/folds/routes", &st); err != nil {
		t.Fatal(err)
	}
	if e := st.Export; e.LastPublishedAt == nil || e.ExportedCursor == nil || *e.ExportedCursor != st.Cursor || time.Since(*e.LastPublishedAt) < 3*liveExportInterval {
		t.Fatalf("want the fold idle since a publish over 3 export intervals ago at its cursor %d: %+v", st.Cursor, e)
	}
	t.Logf("%v idle: no alert pending; the artifact published %v ago", idle, time.Since(*st.Export.LastPublishedAt).Round(time.Second))

	// A failed fold: FoldhostFoldFailed alone.
	if _, err := traps.KV().Put(ctx, "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	var pendingAfter time.Duration
	eventually(t, 3*time.Minute, "FoldhostFoldFailed firing for fold traps", func() (bool, string) {
		alerts, err := p.alerts()
		if err != nil {
			return false, err.Error()
		}
		firing := false
		for _, a := range alerts {
			if a.Labels["alertname"] != "FoldhostFoldFailed" || a.Labels["fold"] != "traps" {
				t.Fatalf("%v after the fold failed: %v beside FoldhostFoldFailed (all: %v)", time.Since(failed).Round(time.Second), a, alerts)
			}
			if pendingAfter == 0 {
				pendingAfter = time.Since(failed)
			}
			firing = firing || a.State == "firing"
		}
		return firing, fmt.Sprint(alerts)
	})
	if _, err := p.healthy(); err != nil {
		t.Fatal(err)
	}
	t.Logf("FoldhostFoldFailed pending %v after the failing update, firing %v after; nothing else. Took %v in all",
		pendingAfter.Round(100*time.Millisecond), time.Since(failed).Round(100*time.Millisecond), time.Since(start).Round(time.Second))
}
