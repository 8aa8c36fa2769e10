package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/s3test"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/freeport"
)

// freeAddr returns a loopback address with a port free right now (for a
// daemon that `foldhost export` must find through http.addr).
func freeAddr(t *testing.T) string {
	t.Helper()
	return fmt.Sprintf("127.0.0.1:%d", freeport.Port(t))
}

func writeConfig(t *testing.T, dir, text string) string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// foldStatusOf reads a fold's status from a daemon's HTTP API.
func foldStatusOf(t *testing.T, base, name string) map[string]any {
	t.Helper()
	code, body, err := httpGet(base + "/v1/folds/" + name)
	if err != nil || code != 200 {
		t.Fatalf("status %s: %d %v %s", name, code, err, body)
	}
	var m map[string]any
	if err := json.Unmarshal([]byte(body), &m); err != nil {
		t.Fatal(err)
	}
	return m
}

func exportResults(t *testing.T, out string) []host.ExportResult {
	t.Helper()
	var rs []host.ExportResult
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		var r host.ExportResult
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("export output %q: %v", out, err)
		}
		rs = append(rs, r)
	}
	return rs
}

// TestExportBootstrapDeltaOnly is the artifact path end to end through the
// commands: node A folds a bucket and exports it (`foldhost export` through
// the running daemon), more is written, node B bootstraps from the
// artifact (`foldhost bootstrap`) and its `run` receives exactly the delta
// and ends identical to A; B then exports on its interval. Refusals:
// bootstrapping a non-empty fold, another scope, a key with no artifact.
func TestExportBootstrapDeltaOnly(t *testing.T) {
	t.Run("local", func(t *testing.T) {
		exportBootstrapDeltaOnly(t, fmt.Sprintf("dir = %q", filepath.Join(t.TempDir(), "artifacts")))
	})
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		exportBootstrapDeltaOnly(t, fmt.Sprintf(`store = "s3"
[artifacts.s3]
endpoint = %q
bucket = %q
prefix = "fleet/"
path_style = true
access_key = %q
secret_key = %q
part_size_mb = 5`, srv.Endpoint, srv.NewBucket(t), s3test.AccessKey, s3test.SecretKey))
	})
}

// exportBootstrapDeltaOnly runs the test with store as the end of the
// [artifacts] section (after holder and lease_ttl).
func exportBootstrapDeltaOnly(t *testing.T, store string) {
	root := t.TempDir()
	aDir := filepath.Join(root, "a")
	aCfg := writeConfig(t, aDir, fmt.Sprintf(`
[nats]
embedded_listen = "127.0.0.1:0"
head_poll_interval = "50ms"
[http]
addr = %q
[[fold]]
name = "routes"
scope = ["route."]
batch_window = "2ms"
[artifacts]
holder = "node-a"
lease_ttl = "10s"
%s
`, freeAddr(t), store))
	cfgText, _ := os.ReadFile(aCfg)
	a := runInProcess(t, aDir, string(cfgText))

	ctx := context.Background()
	nc, err := natskv.Connect(natskv.ConnOptions{URL: a.natsURL})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var head uint64
	put := func(from, n int, prefix string) {
		t.Helper()
		for i := from; i < from+n; i++ {
			rev, err := b.KV().Put(ctx, fmt.Sprintf("%s%04d", prefix, i), []byte(fmt.Sprint(i)))
			if err != nil {
				t.Fatal(err)
			}
			head = rev
		}
	}
	waitCursor := func(base string, want uint64) map[string]any {
		t.Helper()
		var m map[string]any
		waitFor(t, 20*time.Second, fmt.Sprintf("cursor %d at %s", want, base), func() (bool, string) {
			m = foldStatusOf(t, base, "routes")
			return m["cursor"] == float64(want) && m["state"] == "following", fmt.Sprint(m)
		})
		return m
	}

	const before, outOfScope, delta = 300, 25, 40
	put(0, outOfScope, "other.") // out of scope: not delivered, not in the delta
	put(0, before, "route.")
	waitCursor(a.base, head)
	exported := head

	// A round through the running daemon (the store is locked by it).
	code, out, errOut := runCLI(t, nil, "export", "--config", aCfg, "--json")
	if code != 0 {
		t.Fatalf("export via the daemon: exit %d: %s %s", code, out, errOut)
	}
	if r := exportResults(t, out); len(r) != 1 || r[0].Outcome != host.ExportPublished || r[0].Cursor != exported || r[0].Key != "routes" {
		t.Fatalf("export result %+v, want published at %d", r, exported)
	}
	// The lease now holds the key for its TTL: another round is skipped
	// and names the holder; --force exports anyway.
	code, out, _ = runCLI(t, nil, "export", "--config", aCfg)
	if code != 0 || !strings.Contains(out, "skipped: node-a holds the export lease") || !strings.Contains(out, "it completed a round at") {
		t.Fatalf("second export within the lease: exit %d: %s", code, out)
	}
	code, out, _ = runCLI(t, nil, "export", "--config", aCfg, "--force", "--json")
	if r := exportResults(t, out); code != 0 || r[0].Outcome != host.ExportPublished || !r[0].Forced {
		t.Fatalf("forced export: exit %d: %+v", code, r)
	}
	if st := foldStatusOf(t, a.base, "routes"); st["export"].(map[string]any)["last_outcome"] != "published" {
		t.Errorf("status export = %v", st["export"])
	}
	_, metrics, _ := httpGet(a.base + "/metrics")
	for _, want := range []string{
		`foldhost_fold_export_rounds_total{fold="routes",outcome="published"} 2`,
		`foldhost_fold_export_rounds_total{fold="routes",outcome="skipped"} 1`,
		`foldhost_fold_export_rounds_total{fold="routes",outcome="failed"} 0`,
		`foldhost_fold_export_last_published_timestamp_seconds{fold="routes"}`,
	} {
		if !strings.Contains(metrics, want) {
			t.Errorf("metrics lack %s", want)
		}
	}

	put(before, delta, "route.") // written after the artifact's cursor
	final := head
	waitCursor(a.base, final)

	bDir := filepath.Join(root, "b")
	bText := fmt.Sprintf(`
[nats]
url = %q
head_poll_interval = "50ms"
[http]
addr = "127.0.0.1:0"
[[fold]]
name = "routes"
scope = ["route."]
batch_window = "2ms"
export_interval = "1s"
[artifacts]
holder = "node-b"
lease_ttl = "1s"
%s
`, a.natsURL, store)
	bCfg := writeConfig(t, bDir, bText)

	// Refusals first, each leaving the fold's data dir absent.
	bData := filepath.Join(bDir, "data", "folds", "routes")
	cDir := filepath.Join(root, "c")
	cCfg := writeConfig(t, cDir, strings.Replace(bText, `scope = ["route."]`, `scope = ["other."]`, 1))
	if code, _, errOut := runCLI(t, nil, "bootstrap", "--config", cCfg, "--key", "routes"); code != command.ExitFailure || !strings.Contains(errOut, "scope") {
		t.Errorf("bootstrap of another scope: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "bootstrap", "--config", bCfg, "--key", "nothing"); code != command.ExitFailure || !strings.Contains(errOut, `no artifact published under key "nothing"`) {
		t.Errorf("bootstrap of a missing key: exit %d: %s", code, errOut)
	}
	for _, d := range []string{bData, filepath.Join(cDir, "data", "folds", "routes")} {
		if _, err := os.Stat(d); !os.IsNotExist(err) {
			t.Errorf("%s after a refused bootstrap: %v", d, err)
		}
	}

	// A store that folded nothing (a first run against an empty bucket):
	// its export is skipped ("empty", exit 0), a bootstrap with no
	// artifact says so and leaves it, one with an artifact replaces it.
	empty, _, err := fold.Open(bData, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	empty.Close()
	if code, out, errOut := runCLI(t, nil, "export", "--config", bCfg, "--json"); code != 0 || !strings.Contains(out, `"outcome":"skipped"`) || !strings.Contains(out, `"reason":"empty"`) {
		t.Errorf("export of an empty fold: exit %d: %s %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "bootstrap", "--config", bCfg, "--key", "nothing"); code != command.ExitFailure || !strings.Contains(errOut, `no artifact published under key "nothing"`) {
		t.Errorf("bootstrap of an empty fold from a missing key: exit %d: %s", code, errOut)
	}
	if m, _ := filepath.Glob(filepath.Join(bData, "MANIFEST-*")); len(m) == 0 {
		t.Error("the empty store is gone after a bootstrap that found no artifact")
	}

	// What an import killed mid-way left beside the fold: removed.
	stale := filepath.Join(filepath.Dir(bData), ".routes.import-killed")
	if err := os.MkdirAll(filepath.Join(stale, "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "bootstrap", "--config", bCfg, "--fold", "routes")
	if code != 0 || !strings.Contains(out, fmt.Sprintf("cursor %d", exported)) {
		t.Fatalf("bootstrap: exit %d: %s %s", code, out, errOut)
	}
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale import dir survived the bootstrap: %v", err)
	}
	if !strings.Contains(errOut, "downloaded") || !strings.Contains(errOut, fmt.Sprintf("artifact at cursor %d", exported)) {
		t.Errorf("bootstrap progress on stderr: %q", errOut)
	}
	if code, _, errOut := runCLI(t, nil, "bootstrap", "--config", bCfg); code != command.ExitFailure || !strings.Contains(errOut, "already has data") {
		t.Errorf("second bootstrap: exit %d: %s", code, errOut)
	}

	nodeB := runInProcess(t, bDir, bText)
	st := waitCursor(nodeB.base, final)
	if got := st["counters"].(map[string]any)["delivered_since_start"]; got != float64(delta) {
		t.Fatalf("bootstrapped node received %v updates, want only the delta %d (a replay is %d)", got, delta, before+delta)
	}
	for _, space := range []string{"raw", "view"} {
		// The folds' data, not the marks beside it: B's cursor may not be
		// settled yet (a prefix fold settles its deliveries every second).
		path := "/v1/folds/routes/" + space + "?limit=10000"
		_, fromA, _ := httpGet(a.base + path)
		_, fromB, _ := httpGet(nodeB.base + path)
		if itemsA, itemsB := itemsOf(t, fromA), itemsOf(t, fromB); itemsA != itemsB {
			t.Fatalf("%s differs between A and B:\nA %.300s\nB %.300s", space, fromA, fromB)
		}
	}
	// B exports on its interval, publishing its cursor over A's artifact
	// once A's lease (10s: long enough for the "skipped" check above on a
	// loaded machine) has expired: skipped until then.
	waitFor(t, 45*time.Second, "B's interval export", func() (bool, string) {
		e := foldStatusOf(t, nodeB.base, "routes")["export"].(map[string]any)
		return e["last_outcome"] == "published" && e["last_cursor"] == float64(final), fmt.Sprint(e)
	})
	if code := nodeB.stop(t); code != 0 {
		t.Fatalf("B exit %d", code)
	}
	// Offline, B's stopped store exports directly (NATS is external: the
	// lease applies; B's own lease may still be live, so force).
	code, out, errOut = runCLI(t, nil, "export", "--config", bCfg, "--force", "--json")
	if r := exportResults(t, out); code != 0 || r[0].Outcome != host.ExportPublished || r[0].Cursor != final {
		t.Fatalf("offline export: exit %d: %s %s", code, out, errOut)
	}
	if code := a.stop(t); code != 0 {
		t.Fatalf("A exit %d", code)
	}
	// A stopped with embedded NATS (a single node): exported without a
	// lease.
	code, out, errOut = runCLI(t, nil, "export", "--config", aCfg)
	if code != 0 || !strings.Contains(out, fmt.Sprintf("published artifact \"routes\" at cursor %d", final)) || !strings.Contains(errOut, "without the fleet lease") {
		t.Fatalf("offline export of A: exit %d: %s %s", code, out, errOut)
	}
}

// TestExportOffline: a stopped fold on an external NATS exports with
// --force even when NATS is down (no lease, no NATS); without --force it
// fails naming the way out; a fold with no store is a failed round (exit 1,
// a "failed" JSON line), not a usage error; the round's staging dir holds
// nothing afterwards, not even what a killed export left there.
func TestExportOffline(t *testing.T) {
	dir := t.TempDir()
	store := makeStore(t)
	cfg := writeConfig(t, dir, fmt.Sprintf(`
[nats]
url = "nats://127.0.0.1:1"
connect_timeout = "200ms"
[[fold]]
name = "routes"
data_dir = %q
[[fold]]
name = "never-run"
`, store))
	// What an export killed mid-way left in the fold's staging dir.
	if err := os.MkdirAll(filepath.Join(datadir.StageDir(store), ".export-killed", "data"), 0o755); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, nil, "export", "--config", cfg, "--fold", "routes", "--force", "--json")
	if r := exportResults(t, out); code != 0 || len(r) != 1 || r[0].Outcome != host.ExportPublished || r[0].Cursor != 4 {
		t.Fatalf("forced offline export with NATS down: exit %d: %s %s", code, out, errOut)
	}
	if left, _ := os.ReadDir(datadir.StageDir(store)); len(left) != 0 {
		t.Errorf("staging dir holds %d entries after the round (a stale one, or the round's artifact)", len(left))
	}
	code, _, errOut = runCLI(t, nil, "export", "--config", cfg, "--fold", "routes")
	if code != command.ExitFailure || !strings.Contains(errOut, "--force exports without it") {
		t.Errorf("offline export with NATS down: exit %d: %s", code, errOut)
	}
	code, out, errOut = runCLI(t, nil, "export", "--config", cfg, "--force", "--json")
	r := exportResults(t, out)
	if code != command.ExitFailure || len(r) != 2 || r[0].Outcome != host.ExportPublished || r[1].Outcome != host.ExportFailed || !strings.Contains(r[1].Error, "no fold store") {
		t.Errorf("export with a never-run fold: exit %d: %s %s", code, out, errOut)
	}
}

// itemsOf is the items of a range answer, as JSON.
func itemsOf(t *testing.T, body string) string {
	t.Helper()
	var r struct{ Items json.RawMessage }
	if err := json.Unmarshal([]byte(body), &r); err != nil || len(r.Items) == 0 {
		t.Fatalf("not a range answer: %v: %.300s", err, body)
	}
	return string(r.Items)
}

// TestArtifactsCommand: `foldhost artifacts [list]` lists what the
// config's store holds (a local directory and S3): nothing at first, then
// each key's artifacts with what their manifests record and the published
// one (text and JSON), and a key asked for that holds nothing; `artifacts
// show` shows the pointer's artifact, or one by ID prefix, in full (text
// and JSON), and names an unknown ID. (There was no way to see a store's
// artifacts but its files, then no way to see an artifact's manifest.)
func TestArtifactsCommand(t *testing.T) {
	t.Run("local", func(t *testing.T) { artifactsCommand(t, "") })
	t.Run("s3", func(t *testing.T) {
		srv := s3test.Start(t)
		artifactsCommand(t, fmt.Sprintf(`[artifacts]
store = "s3"
[artifacts.s3]
endpoint = %q
bucket = %q
path_style = true
access_key = %q
secret_key = %q
`, srv.Endpoint, srv.NewBucket(t), s3test.AccessKey, s3test.SecretKey))
	})
}

// artifactsCommand runs the test with artifacts as the config's end.
func artifactsCommand(t *testing.T, artifacts string) {
	dir := t.TempDir()
	store := makeStore(t)
	cfg := writeConfig(t, dir, fmt.Sprintf("[nats]\nurl = \"nats://127.0.0.1:1\"\n[[fold]]\nname = \"routes\"\ndata_dir = %q\n%s", store, artifacts))
	if code, out, errOut := runCLI(t, nil, "artifacts", "--config", cfg); code != command.ExitOK || !strings.Contains(out, "no artifacts in") {
		t.Fatalf("an empty store: exit %d: %s %s", code, out, errOut)
	}
	if code, out, errOut := runCLI(t, nil, "export", "--config", cfg, "--force"); code != command.ExitOK {
		t.Fatalf("export: exit %d: %s %s", code, out, errOut)
	}
	row := regexp.MustCompile(`(?m)^routes +([0-9a-f]{16}) +4 +routes +\* +- +[0-9.]+ KiB +\d+s +published$`)
	var id string
	for _, args := range [][]string{{"artifacts"}, {"artifacts", "list"}} {
		code, out, errOut := runCLI(t, nil, append(args, "--config", cfg)...)
		m := row.FindStringSubmatch(out)
		if code != command.ExitOK || m == nil || !strings.Contains(out, "KEY     ID ") {
			t.Fatalf("%s: exit %d:\n%s%s", strings.Join(args, " "), code, out, errOut)
		}
		id = m[1]
	}
	code, out, _ := runCLI(t, nil, "artifacts", "list", "--config", cfg, "--json")
	var ls struct {
		Store string
		Keys  []struct {
			Key       string
			Published *struct{ Cursor uint64 }
			Payloads  []struct {
				Name      string
				Published bool
				Manifest  *struct {
					Cursor uint64
					Bucket string
				}
			}
		}
	}
	if err := json.Unmarshal([]byte(out), &ls); code != command.ExitOK || err != nil || len(ls.Keys) != 1 || ls.Keys[0].Key != "routes" ||
		ls.Keys[0].Published == nil || ls.Keys[0].Published.Cursor != 4 || len(ls.Keys[0].Payloads) != 1 || !ls.Keys[0].Payloads[0].Published ||
		ls.Keys[0].Payloads[0].Manifest == nil || ls.Keys[0].Payloads[0].Manifest.Cursor != 4 || ls.Keys[0].Payloads[0].Manifest.Bucket != "routes" {
		t.Fatalf("artifacts list --json: exit %d, %v:\n%s", code, err, out)
	}
	if code, out, _ := runCLI(t, nil, "artifacts", "--config", cfg, "--key", "other"); code != command.ExitOK || !strings.Contains(out, "other  (nothing published)") {
		t.Errorf("artifacts --key of an empty key: exit %d:\n%s", code, out)
	}

	code, out, errOut := runCLI(t, nil, "artifacts", "show", "--config", cfg)
	for _, re := range []string{`(?m)^id: +` + id + `$`, `(?m)^state: +published `, `(?m)^cursor: +4$`, `(?m)^bucket: +routes$`,
		`(?m)^plugin: +\(none: a raw-only fold\)$`, `(?m)^  data/\S+ +\d+ +[0-9a-f]{64}$`} {
		if code != command.ExitOK || !regexp.MustCompile(re).MatchString(out) {
			t.Fatalf("artifacts show: exit %d, no %s:\n%s%s", code, re, out, errOut)
		}
	}
	code, out, errOut = runCLI(t, nil, "artifacts", "show", "--config", cfg, "--json", id[:6])
	var sh struct {
		Store     string
		Key, ID   string
		Published bool
		Cursor    struct{ Rev uint64 }
		Manifest  struct {
			Bucket string
			Files  []struct{ Path, BLAKE3 string }
		}
	}
	if err := json.Unmarshal([]byte(out), &sh); code != command.ExitOK || err != nil || sh.Store == "" || sh.Key != "routes" || sh.ID != id || !sh.Published ||
		sh.Cursor.Rev != 4 || sh.Manifest.Bucket != "routes" || len(sh.Manifest.Files) == 0 || sh.Manifest.Files[0].BLAKE3 == "" {
		t.Fatalf("artifacts show --json %s: exit %d, %v:\n%s%s", id[:6], code, err, out, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "artifacts", "show", "--config", cfg, "zz"); code != command.ExitNotFound || !strings.Contains(errOut, "no such artifact") {
		t.Errorf("artifacts show of an unknown ID: exit %d (want %d, not found): %s", code, command.ExitNotFound, errOut)
	}
}
