package host_test

import (
	"context"
	"encoding/xml"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestStatusPageInABrowser: GET / on a real host's API, loaded by a real
// headless browser (chromium --dump-dom), shows one row per fold with the
// values its status has: a following fold publishing effects (outbox 0)
// and a fold failed on a plugin error holding HTML, which the page shows
// as text (no element of it in the DOM, its script not run) and whose
// head poll shows it one message and some seconds behind. A second load,
// after more updates, shows the rate measured between the two. HEAD / is
// the page's headers; other unknown paths stay 404.
func TestStatusPageInABrowser(t *testing.T) {
	browser := chromium(t)
	b, _, fo, url := hosttest.EffectsSetup(t, 0)
	probes, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "probes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := hosttest.StartHost(t, host.Options{
		NATS:             host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		HeadPollInterval: 20 * time.Millisecond,
		Folds: []host.FoldOptions{fo, {Name: "probe", Bucket: "probes", Plugin: hosttest.BuiltPlugin(t, "testdata", "probe-c"),
			DataDir: filepath.Join(t.TempDir(), "probe")}},
	})
	routes, probe := r.H.Fold("routes"), r.H.Fold("probe")
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.h%d", i), `{"upstreams":[{"addr":"10.0.0.1:80"}]}`)
	}
	hosttest.WaitCursor(t, routes, last)
	hosttest.WaitFor(t, func() bool {
		e := routes.Status().Effects
		return e != nil && e.Outbox == 0 && e.PublishedByThisNode > 0
	})

	// The injected markup would, were it markup, add an element and
	// retitle the page.
	const evil = `<script>document.title="pwned"</script><b id="injected">bold</b>`
	hosttest.WaitCursor(t, probe, hosttest.Put(t, probes, "ignored", "x"))
	// The fold idles at the head for a while, where the head polls find
	// it: its lag in seconds counts from the last of them, not from its
	// last commit.
	time.Sleep(2 * time.Second)
	beforeFail := time.Now()
	hosttest.Put(t, probes, "fail", evil)
	afterFail := time.Now()
	hosttest.WaitState(t, probe, httpapi.StateFailed)
	hosttest.WaitFor(t, func() bool { return probe.Status().Lag == 1 })

	// The page's requests are timed: the lag in seconds it shows is
	// checked against them.
	var mu sync.Mutex
	var reqStart, reqEnd time.Time
	api := r.H.Handler()
	web := hosttest.LoopbackAPI(t, http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		start := time.Now()
		api.ServeHTTP(w, req)
		if req.URL.Path == "/" && req.Method == http.MethodGet {
			mu.Lock()
			reqStart, reqEnd = start, time.Now()
			mu.Unlock()
		}
	}))
	defer web.Close()

	dom := dumpDOM(t, browser, web.URL+"/")
	firstDone := time.Now()
	if !strings.Contains(dom, `<tr data-fold="routes">`) {
		t.Fatalf("GET / is not the status page; the DOM:\n%s", dom)
	}
	if !strings.Contains(dom, "<title>foldhost</title>") || strings.Contains(strings.ToLower(dom), "<script") ||
		strings.Contains(dom, `<b id="injected"`) {
		t.Fatalf("the plugin's error was not escaped; the DOM:\n%s", dom)
	}
	rows := pageRows(t, dom)
	if len(rows) != 2 {
		t.Fatalf("%d fold rows, want 2 (routes, probe); the DOM:\n%s", len(rows), dom)
	}
	rst, pst := routes.Status(), probe.Status()
	want := map[string]map[string]string{
		"routes": {
			"name": "routes", "state": "following", "cursor": u64(rst.Cursor), "head": u64(rst.StreamLastSeq),
			"lag": "0", "lag_seconds": "0.0", "rate": "-", "plugin": rst.Plugin.Name + " " + rst.Plugin.Version,
			"outbox": "0", "error": "-",
		},
		"probe": {
			"name": "probe", "state": "failed (not ready)", "cursor": u64(pst.Cursor), "head": u64(pst.Cursor + 1),
			"lag": "1", "rate": "-", "plugin": pst.Plugin.Name + " " + pst.Plugin.Version, "outbox": "-",
		},
	}
	if rst.Plugin.Name == "" || pst.Plugin.Name == "" {
		t.Fatalf("plugins without a name: %+v, %+v", rst.Plugin, pst.Plugin)
	}
	for name, cols := range want {
		for col, v := range cols {
			if got := rows[name][col]; got != v {
				t.Errorf("fold %s, column %s: %q, want %q", name, col, got, v)
			}
		}
	}
	if e := rows["probe"]["error"]; !strings.Contains(e, evil) || e != pst.LastError {
		t.Errorf("probe's error cell %q, want the status's last error %q, holding %q as text", e, pst.LastError, evil)
	}
	// The probe fold was last found at the head by a poll (every 20ms;
	// a second allowed for a busy machine) before the put of "fail"; the page
	// was rendered between reqStart and reqEnd (seconds after, as the
	// browser takes its time to start). The cell has one decimal.
	mu.Lock()
	lo, hi := reqStart.Sub(afterFail).Seconds()-0.05, reqEnd.Sub(beforeFail).Seconds()+1+0.05
	mu.Unlock()
	if s, err := strconv.ParseFloat(rows["probe"]["lag_seconds"], 64); err != nil || s < lo || s > hi {
		t.Errorf("probe's lag in seconds: %q, want %.2f..%.2f", rows["probe"]["lag_seconds"], lo, hi)
	}
	for name := range want {
		if age := rows[name]["last_commit"]; !strings.HasSuffix(age, " ago") {
			t.Errorf("fold %s's last commit: %q, want an age", name, age)
		}
	}
	if t.Failed() {
		t.Fatalf("the DOM:\n%s", dom)
	}

	// More updates, then a second view: the rate is measured between the
	// two views (at least a second apart).
	for i := range 10 {
		last = hosttest.Put(t, b, fmt.Sprintf("route.g%d", i), `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	}
	hosttest.WaitCursor(t, routes, last)
	time.Sleep(time.Until(firstDone.Add(time.Second))) // the page's shortest rate interval
	dom = dumpDOM(t, browser, web.URL+"/")
	rows = pageRows(t, dom)
	if rate, err := strconv.ParseFloat(rows["routes"]["rate"], 64); err != nil || rate <= 0 {
		t.Errorf("routes' rate on the second view: %q, want a positive number", rows["routes"]["rate"])
	}
	if rows["probe"]["rate"] != "0.0" {
		t.Errorf("probe's rate on the second view: %q, want 0.0", rows["probe"]["rate"])
	}
	if t.Failed() {
		t.Fatalf("the DOM:\n%s", dom)
	}

	// Exactly "/", GET and HEAD.
	for _, get := range []func(string) (*http.Response, error){http.Get, http.Head} {
		resp, err := get(web.URL + "/")
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if ct := resp.Header.Get("Content-Type"); err != nil || resp.StatusCode != http.StatusOK || ct != "text/html; charset=utf-8" {
			t.Errorf("%s /: %d, %q, %v", resp.Request.Method, resp.StatusCode, ct, err)
		}
		if head := resp.Request.Method == http.MethodHead; head != (len(body) == 0) {
			t.Errorf("%s /: a body of %d bytes", resp.Request.Method, len(body))
		}
	}
	for _, p := range []string{"/index.html", "/x", "/v1"} {
		if code, body, err := hosttest.HTTPGetBody(web.URL + p); err != nil || code != http.StatusNotFound {
			t.Errorf("GET %s: %d %s %v, want 404", p, code, body, err)
		}
	}
	resp, err := http.Post(web.URL+"/", "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST /: %d, want 405", resp.StatusCode)
	}
}

func u64(n uint64) string { return strconv.FormatUint(n, 10) }

// chromium is the browser the page tests run: $FOLDHOST_CHROMIUM, else
// chromium or chromium-browser on PATH. Missing, the test fails (the test
// command installs it).
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("FOLDHOST_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium for the status page test: install it (Debian: apt-get install chromium; scripts/test does) or set FOLDHOST_CHROMIUM to its binary")
	return ""
}

// dumpDOM loads url in a headless browser and returns the DOM it built.
func dumpDOM(t *testing.T, browser, url string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, browser, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
		"--user-data-dir="+t.TempDir(), "--dump-dom", url)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%s --dump-dom %s: %v\n%s", browser, url, err, stderr.String())
	}
	return string(out)
}

// pageRows reads the fold rows of the status page's DOM: fold name to
// column (data-col) to the cell's text.
func pageRows(t *testing.T, dom string) map[string]map[string]string {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(dom))
	d.Strict, d.AutoClose, d.Entity = false, xml.HTMLAutoClose, xml.HTMLEntity
	rows := map[string]map[string]string{}
	var row map[string]string
	var col string
	var text strings.Builder
	attr := func(e xml.StartElement, name string) (string, bool) {
		for _, a := range e.Attr {
			if a.Name.Local == name {
				return a.Value, true
			}
		}
		return "", false
	}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return rows
		}
		if err != nil {
			t.Fatalf("parsing the DOM: %v\n%s", err, dom)
		}
		switch e := tok.(type) {
		case xml.StartElement:
			if name, ok := attr(e, "data-fold"); ok && e.Name.Local == "tr" {
				row = map[string]string{}
				rows[name] = row
			}
			if c, ok := attr(e, "data-col"); ok && row != nil {
				col = c
				text.Reset()
			}
		case xml.CharData:
			if col != "" {
				text.Write(e)
			}
		case xml.EndElement:
			switch {
			case e.Name.Local == "td" && col != "":
				row[col] = strings.TrimSpace(text.String())
				col = ""
			case e.Name.Local == "tr":
				row = nil
			}
		}
	}
}
