package main

import (
	"context"
	"encoding/json"

	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// runCLI runs the CLI in-process.
func runCLI(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb syncbuf.Buffer
	c := &cli{ctx: context.Background(), stdout: &out, stderr: &errb, stdin: strings.NewReader(""), getenv: envOf(env)}
	code = c.main(args)
	return code, out.String(), errb.String()
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, state := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last state: %s", timeout, what, state)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCLI(t, nil, "--help")
	if code != command.ExitOK {
		t.Fatalf("--help exit %d", code)
	}
	for _, want := range []string{"run ", "inspect ", "kv ", "demo ", "export ", "bootstrap ", "bench ", "top ", "Exit codes:", "3  not found"} {
		if !strings.Contains(out, want) {
			t.Errorf("--help lacks %q:\n%s", want, out)
		}
	}
	for _, cmd := range []string{"run", "inspect", "kv", "demo", "export", "bootstrap", "bench", "top"} {
		for _, args := range [][]string{{cmd, "--help"}, {cmd, "-h"}, {"help", cmd}} {
			code, out, errOut := runCLI(t, nil, args...)
			if code != command.ExitOK || !strings.HasPrefix(out, "Usage:\n  foldhost "+cmd) || errOut != "" {
				t.Errorf("%v: exit %d, stdout %q, stderr %q", args, code, out, errOut)
			}
		}
	}
	if code, _, errOut := runCLI(t, nil); code != command.ExitUsage || !strings.Contains(errOut, "Commands:") {
		t.Errorf("no args: exit %d, stderr %q", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "frobnicate"); code != command.ExitUsage || !strings.Contains(errOut, `unknown command "frobnicate"`) {
		t.Errorf("unknown command: exit %d, stderr %q", code, errOut)
	}
}

func TestUsageErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(bad, []byte("[[fold]]\nname = \"a b\"\nbatch_size = 0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.toml")
	if err := os.WriteFile(good, []byte("[[fold]]\nname = \"a\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"run", "--config", bad}, "2 problems"},
		{[]string{"run", "--config", filepath.Join(dir, "missing.toml")}, "no such file"},
		// No config: how to get one.
		{[]string{"run"}, "open config.toml: no such file or directory: start from the example, which documents every key (cp config.toml.example config.toml"},
		{[]string{"run", "--bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"run", "extra"}, `unexpected argument "extra"`},
		// An unknown fold: the folds there are.
		{[]string{"run", "--config", good, "--adopt", "nope"}, `--adopt "nope": no fold named "nope" in the config: its folds are "a"`},
		{[]string{"inspect", "--config", good, "--fold", "b", "cursor"}, `no fold named "b" in the config: its folds are "a"`},
		{[]string{"inspect", "cursor"}, "--data DIR or --config FILE"},
		{[]string{"inspect", "--data", dir}, "missing action"},
		{[]string{"inspect", "--data", dir, "frob"}, `unknown action "frob"`},
		{[]string{"inspect", "--data", dir, "get"}, "get takes one KEY"},
		{[]string{"inspect", "--data", dir, "view"}, "missing view action"},
		{[]string{"inspect", "--data", dir, "cursor"}, "not a pebble directory"},
		{[]string{"inspect", "--data", filepath.Join(dir, "nope"), "cursor"}, "no such directory"},
		{[]string{"kv", "get", "k"}, "--bucket NAME"},
		{[]string{"kv", "--bucket", "b", "put", "k", "v", "w"}, "wrong number of arguments for put"},
		{[]string{"kv", "--bucket", "b", "--raw", "put", "k", "v"}, "--raw applies to get only"},
		{[]string{"kv", "--bucket", "a.b", "get", "k"}, "not a valid bucket name"},
	} {
		code, _, errOut := runCLI(t, nil, tc.args...)
		if code != command.ExitUsage || !strings.Contains(errOut, tc.want) {
			t.Errorf("%v: exit %d, stderr %q, want exit 2 and %q", tc.args, code, errOut, tc.want)
		}
	}
}

// TestBadFlagSaysWhereHelpIs: a mistyped flag prints the error and one
// line on where the help is, not the whole help before it (which buried
// the error under a screen of flags).
func TestBadFlagSaysWhereHelpIs(t *testing.T) {
	for _, cmd := range [][]string{{"run"}, {"kv", "get", "k"}, {"plugin", "test"}, {"inspect"}} {
		code, out, errOut := runCLI(t, nil, append(cmd, "--bogus")...)
		want := "foldhost " + cmd[0] + ": flag provided but not defined: -bogus\nRun 'foldhost " + cmd[0] + " --help' for usage.\n"
		if code != command.ExitUsage || out != "" || errOut != want {
			t.Errorf("%v --bogus: exit %d, stdout %q, stderr %q; want only %q on stderr", cmd, code, out, errOut, want)
		}
	}
}

func TestFlagsAfterArguments(t *testing.T) {
	fs := (&cli{stdout: io.Discard}).flagSet("x", "x", "")
	a := fs.String("a", "", "")
	b := fs.Bool("b", false, "")
	pos, err := parse(fs, []string{"get", "-a", "1", "key", "-b", "--", "-literal"})
	if err != nil || *a != "1" || !*b || strings.Join(pos, " ") != "get key -literal" {
		t.Fatalf("pos %q, a %q, b %v, err %v", pos, *a, *b, err)
	}
}

// makeStore writes a small fold store and closes it.
func makeStore(t *testing.T) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fold")
	s, _, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	err = s.Commit(fold.Commit{
		Raw: []fold.Update{
			{Key: "route.a", Op: fold.OpPut, Rev: 1, Value: []byte("alpha")},
			{Key: "route.b", Op: fold.OpPut, Rev: 2, Value: []byte("\xff")},
			{Key: "other", Op: fold.OpPut, Rev: 3, Value: []byte("<&>")},
		},
		Views:  []fold.ViewMutation{{Key: []byte("\x00v"), Op: fold.ViewPut, Value: []byte("view")}},
		Cursor: protocol.Cursor{Rev: 4},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestInspect(t *testing.T) {
	dir := makeStore(t)
	jsonOf := func(args ...string) map[string]any {
		t.Helper()
		code, out, errOut := runCLI(t, nil, append([]string{"inspect", "--data", dir}, args...)...)
		if code != command.ExitOK {
			t.Fatalf("inspect %v: exit %d: %s", args, code, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("inspect %v: %v in %s", args, err, out)
		}
		return m
	}
	if m := jsonOf("cursor"); m["cursor"] != 4.0 || m["eviction_seen"] != false {
		t.Errorf("cursor = %v", m)
	}
	if m := jsonOf("get", "route.a"); m["cursor"] != 4.0 || m["revision"] != 1.0 || m["value"] != "alpha" || m["value_b64"] != "YWxwaGE=" {
		t.Errorf("get = %v", m)
	}
	if m := jsonOf("get", "route.b"); m["value"] != nil || m["value_b64"] != "/w==" {
		t.Errorf("get binary = %v", m)
	}
	m := jsonOf("range", "route.")
	if m["count"] != 2.0 || m["truncated"] != false || len(m["items"].([]any)) != 2 {
		t.Errorf("range = %v", m)
	}
	m = jsonOf("range", "--limit", "1")
	if m["count"] != 1.0 || m["truncated"] != true {
		t.Errorf("range --limit 1 = %v", m)
	}
	if it := m["items"].([]any)[0].(map[string]any); it["key"] != "other" || it["value"] != "<&>" {
		t.Errorf("first item = %v", it)
	}
	m = jsonOf("view", "range")
	if m["count"] != 1.0 {
		t.Errorf("view range = %v", m)
	}
	if m := jsonOf("view", "get", "--b64", "AHY="); m["value"] != "view" || m["key_b64"] != "AHY=" {
		t.Errorf("view get = %v", m)
	}
	if m := jsonOf("stats"); m["raw_keys"] != 3.0 || m["view_keys"] != 1.0 || m["cursor"] != 4.0 {
		t.Errorf("stats = %v", m)
	}
	code, out, errOut := runCLI(t, nil, "inspect", "--data", dir, "get", "nope")
	if code != command.ExitNotFound || out != "" || !strings.Contains(errOut, `key "nope" not found (cursor 4)`) {
		t.Errorf("missing key: exit %d, %q, %q", code, out, errOut)
	}
	// A store in use is refused, with the reason.
	s, _, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	code, _, errOut = runCLI(t, nil, "inspect", "--data", dir, "cursor")
	if code != command.ExitFailure || !strings.Contains(errOut, "store in use") {
		t.Errorf("locked store: exit %d, %q", code, errOut)
	}
}

func TestInspectByConfig(t *testing.T) {
	dir := t.TempDir()
	storeDir := makeStore(t)
	cfg := filepath.Join(dir, "c.toml")
	text := fmt.Sprintf("[[fold]]\nname = \"a\"\ndata_dir = %q\n[[fold]]\nname = \"b\"\n", storeDir)
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := runCLI(t, nil, "inspect", "--config", cfg, "--fold", "a", "cursor")
	if code != command.ExitOK || !strings.Contains(out, `"fold": "a"`) || !strings.Contains(out, `"cursor": 4`) {
		t.Errorf("exit %d, %s %s", code, out, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "inspect", "--config", cfg, "cursor"); code != command.ExitUsage || !strings.Contains(errOut, "choose one with --fold") {
		t.Errorf("exit %d, %s", code, errOut)
	}
	if strings.Contains(errOut, "WARNING") || !strings.Contains(out, `"origin": null`) {
		t.Errorf("a store without a record: %s %s", out, errOut)
	}
	// A store recording another bucket: shown, and the mismatch named.
	st, _, err := fold.Open(storeDir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := st.SetOrigin(fold.NewOrigin("elsewhere", []string{"route."}, time.Unix(1700000000, 0))); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "inspect", "--config", cfg, "--fold", "a", "stats")
	if code != command.ExitOK || !strings.Contains(out, `"bucket": "elsewhere"`) || !strings.Contains(out, `"stream_created": "2023-11-14T22:13:20Z"`) {
		t.Errorf("stats of a recorded store: exit %d, %s %s", code, out, errOut)
	}
	if !strings.Contains(errOut, "WARNING") || !strings.Contains(errOut, `bucket "elsewhere", not "a"`) {
		t.Errorf("origin mismatch not reported: %q", errOut)
	}
	// export refuses it, naming the fold once.
	code, _, errOut = runCLI(t, nil, "export", "--config", cfg, "--fold", "a", "--force")
	if code != command.ExitFailure || !strings.Contains(errOut, `folds bucket "elsewhere"`) || strings.Count(errOut, "fold a:") != 1 {
		t.Errorf("export of a store of another bucket: exit %d, %q", code, errOut)
	}
	// An unreadable record does not lock the operator out of inspect.
	db, err := pebble.Open(storeDir, &pebble.Options{Logger: quietPebble{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("morigin"), []byte("garbage{"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runCLI(t, nil, "inspect", "--config", cfg, "--fold", "a", "range")
	if code != command.ExitOK || !strings.Contains(out, `"count": 3`) || !strings.Contains(errOut, "origin record") {
		t.Errorf("inspect of a store with a garbled record: exit %d, %s %q", code, out, errOut)
	}
}

// TestRunRefusesAnInvalidPlugin: a module that fails validation stops the
// start with the reason, before anything is folded.
func TestRunRefusesAnInvalidPlugin(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "p.wasm"), []byte("\x00asm"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "c.toml")
	if err := os.WriteFile(cfg, []byte("[nats]\nembedded_listen = \"127.0.0.1:0\"\n[http]\naddr = \"127.0.0.1:0\"\n[[fold]]\nname = \"a\"\nplugin = \"p.wasm\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, nil, "run", "--config", cfg)
	if code != command.ExitFailure || !strings.Contains(errOut, "invalid plugin module") || !strings.Contains(errOut, "p.wasm") {
		t.Fatalf("exit %d, %s", code, errOut)
	}
}

var (
	natsURLRE = regexp.MustCompile(`embedded NATS server listening on (nats://\S+)`)
	httpURLRE = regexp.MustCompile(`HTTP API listening on (http://\S+)`)
)

func httpGet(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// inProcess is a `foldhost run` running in the test's process.
type inProcess struct {
	natsURL, base string
	exit          chan int
	cancel        context.CancelFunc
	out, errb     *syncbuf.Buffer
}

// runInProcess writes cfgText to dir/config.toml, starts `foldhost run` on
// it in this process, and waits for the addresses it prints (the NATS one
// only when the config runs the embedded server).
func runInProcess(t *testing.T, dir, cfgText string) *inProcess {
	t.Helper()
	return runInProcessEnv(t, dir, cfgText, nil)
}

// runInProcessEnv is runInProcess with env as the process environment.
func runInProcessEnv(t *testing.T, dir, cfgText string, env map[string]string) *inProcess {
	t.Helper()
	d := startInProcess(t, dir, cfgText, env)
	d.waitAddrs(t, !strings.Contains(cfgText, `url = "nats://`))
	return d
}

// startInProcess is runInProcessEnv without waiting for the addresses.
func startInProcess(t *testing.T, dir, cfgText string, env map[string]string) *inProcess {
	t.Helper()
	cfgPath := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	d := &inProcess{exit: make(chan int, 1), cancel: cancel, out: &syncbuf.Buffer{}, errb: &syncbuf.Buffer{}}
	done := make(chan struct{})
	// Joined at cleanup (which runs before the TempDir's removal): a daemon
	// still writing its embedded NATS store makes the removal fail.
	t.Cleanup(func() { cancel(); <-done })
	c := &cli{ctx: ctx, stdout: d.out, stderr: d.errb, getenv: envOf(env)}
	go func() {
		defer close(done)
		d.exit <- c.main([]string{"run", "--config", cfgPath})
	}()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", d.errb.String())
		}
	})
	return d
}

// waitAddrs waits for the addresses the daemon prints once started (the
// NATS one only with an embedded server).
func (d *inProcess) waitAddrs(t *testing.T, embedded bool) {
	t.Helper()
	waitFor(t, 20*time.Second, "the addresses on stdout", func() (bool, string) {
		s := d.out.String()
		n, h := natsURLRE.FindStringSubmatch(s), httpURLRE.FindStringSubmatch(s)
		if (embedded && n == nil) || h == nil {
			return false, s + d.errb.String()
		}
		if n != nil {
			d.natsURL = n[1]
		}
		d.base = h[1]
		return true, ""
	})
}

// stop cancels the run (as a signal would) and returns its exit code.
func (d *inProcess) stop(t *testing.T) int {
	t.Helper()
	d.cancel()
	select {
	case code := <-d.exit:
		return code
	case <-time.After(20 * time.Second):
		t.Fatal("run did not shut down")
	}
	return -1
}

// TestRunInProcess runs the daemon in this (race-instrumented) process: a
// healthy fold and one whose cursor is beyond the stream head (the bucket
// was "recreated"), which must fail, be reported, and make the exit code 1.
func TestRunInProcess(t *testing.T) {
	dir := t.TempDir()
	// A store whose cursor (1000) the fresh bucket never reached.
	stale, _, err := fold.Open(filepath.Join(dir, "stale"), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := stale.Commit(fold.Commit{Raw: []fold.Update{{Key: "old", Op: fold.OpPut, Rev: 1000, Value: []byte("v")}}, Cursor: protocol.Cursor{Rev: 1000}}); err != nil {
		t.Fatal(err)
	}
	if err := stale.Close(); err != nil {
		t.Fatal(err)
	}
	cfgText := `
[nats]
embedded_listen = "127.0.0.1:0"
head_poll_interval = "50ms"
[http]
addr = "127.0.0.1:0"
[log]
level = "debug"
progress_interval = "50ms"
[[fold]]
name = "good"
bucket = "routes"
scope = ["route."]
batch_window = "2ms"
[[fold]]
name = "stale"
bucket = "routes"
data_dir = "stale"
`
	d := runInProcess(t, dir, cfgText)
	ctx := context.Background()
	natsURL, base := d.natsURL, d.base

	status := func(name string) map[string]any {
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
	waitFor(t, 10*time.Second, "the stale fold to fail and the good one to sync", func() (bool, string) {
		s, g := status("stale"), status("good")
		return s["state"] == "failed" && g["ready"] == true, fmt.Sprint(s, g)
	})
	if m := status("stale"); !strings.Contains(m["last_error"].(string), "beyond-head") || m["cursor"] != 1000.0 {
		t.Errorf("stale status = %v", m)
	}
	code, body, _ := httpGet(base + "/readyz")
	if code != 503 || !strings.Contains(body, "fold stale: failed:") || strings.Contains(body, "fold good") {
		t.Errorf("readyz = %d %q", code, body)
	}
	// The failed fold is still served.
	if code, body, _ := httpGet(base + "/v1/folds/stale/raw/old"); code != 200 || !strings.Contains(body, `"value":"v"`) {
		t.Errorf("stale read = %d %s", code, body)
	}

	nc, err := natskv.Connect(natskv.ConnOptions{URL: natsURL})
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		key := fmt.Sprintf("route.%02d", i)
		if i%2 == 1 {
			key = fmt.Sprintf("other.%02d", i) // out of scope
		}
		if _, err := b.KV().Put(ctx, key, []byte(fmt.Sprint(i))); err != nil {
			t.Fatal(err)
		}
	}
	// The last write (20) is out of scope: the prefix watch's settle probe
	// carries the cursor over it, so the fold shows no lag.
	waitFor(t, 30*time.Second, "the good fold to apply 10 updates and settle at cursor 20", func() (bool, string) {
		m := status("good")
		c := m["counters"].(map[string]any)
		return m["cursor"] == 20.0 && c["delivered_since_start"] == 10.0 && m["state"] == "following", fmt.Sprint(m)
	})
	waitFor(t, 5*time.Second, "the head poll", func() (bool, string) {
		m := status("good")
		return m["stream_last_seq"] == 20.0 && m["lag"] == 0.0, fmt.Sprint(m)
	})
	code, body, _ = httpGet(base + "/v1/folds/good/raw?prefix=route.&limit=3")
	if code != 200 || !strings.Contains(body, `"count":3,"truncated":true`) || !strings.Contains(body, `"key":"route.00"`) {
		t.Errorf("range = %d %s", code, body)
	}
	code, body, _ = httpGet(base + "/metrics")
	if code != 200 || !strings.Contains(body, `foldhost_fold_updates_total{fold="good"} 10`) || !strings.Contains(body, `foldhost_fold_failed{fold="stale"} 1`) {
		t.Errorf("metrics = %d", code)
	}

	if code := d.stop(t); code != command.ExitFailure {
		t.Fatalf("exit %d, want %d (a fold failed)", code, command.ExitFailure)
	}
	if s := d.errb.String(); !strings.Contains(s, "fold stale stopped on an error") || !strings.Contains(s, `msg="fold stopped" fold=good cursor=20`) {
		t.Errorf("stderr:\n%s", s)
	}
}

// TestHydrationProgress folds a pre-filled bucket slowly (one update per
// batch, synced) and checks the progress lines and the readiness gate.
func TestHydrationProgress(t *testing.T) {
	dir := t.TempDir()
	natsDir := filepath.Join(dir, "nats")
	srv, err := embeddednats.Start(embeddednats.Options{Dir: natsDir})
	if err != nil {
		t.Fatal(err)
	}
	nc, err := natskv.Connect(natskv.ConnOptions{URL: srv.ClientURL()})
	if err != nil {
		t.Fatal(err)
	}
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "big"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	const n = 500
	js := b.KV()
	for i := range n {
		if _, err := js.Put(context.Background(), fmt.Sprintf("k.%05d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	nc.Close()
	srv.Shutdown()

	cfgPath := filepath.Join(dir, "config.toml")
	cfgText := fmt.Sprintf(`
[nats]
embedded_listen = "127.0.0.1:0"
embedded_dir = %q
[http]
addr = "127.0.0.1:0"
[log]
progress_interval = "2ms"
[[fold]]
name = "big"
batch_size = 1
buffer = 1
sync = true   # an fsync per update: hydration takes a while even without -race
`, natsDir)
	if err := os.WriteFile(cfgPath, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errb syncbuf.Buffer
	c := &cli{ctx: ctx, stdout: &out, stderr: &errb, getenv: noEnv}
	exit := make(chan int, 1)
	go func() { exit <- c.main([]string{"run", "--config", cfgPath}) }()
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("stderr:\n%s", errb.String())
		}
	})
	waitFor(t, 30*time.Second, "the fold to catch up", func() (bool, string) {
		s := errb.String()
		return strings.Contains(s, `msg="fold caught up" fold=big cursor=500 head_at_start=500 delivered=500`), s
	})
	logs := errb.String()
	if m := regexp.MustCompile(`msg="fold caught up".*`).FindString(logs); m != "" {
		t.Log(m)
	}
	if !strings.Contains(logs, `msg="fold starting" fold=big bucket=big scope=bucket mode=state-sync cursor=0 stream_head=500`) {
		t.Errorf("no start line")
	}
	if !regexp.MustCompile(`msg="fold hydrating" fold=big cursor=\d+ head_at_start=500 delivered=\d+ rate_per_s=\d+ elapsed=\S+ percent=\d+\.\d`).MatchString(logs) {
		t.Errorf("no progress line")
	}
	h := httpURLRE.FindStringSubmatch(out.String())
	if code, body, err := httpGet(h[1] + "/readyz"); code != 200 {
		t.Errorf("readyz after catching up = %d %s %v", code, body, err)
	}
	cancel()
	if code := <-exit; code != command.ExitOK {
		t.Fatalf("exit %d", code)
	}
}

func noEnv(string) (string, bool) { return "", false }

func envOf(m map[string]string) config.Getenv {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

// quietPebble keeps a test's direct pebble.Open off stderr.
type quietPebble struct{}

func (quietPebble) Infof(string, ...any)         {}
func (quietPebble) Errorf(string, ...any)        {}
func (quietPebble) Fatalf(f string, args ...any) { panic(fmt.Sprintf(f, args...)) }

// TestFlagsBeforeArguments: every command that takes arguments answers the
// same whether its flags come before or after them, as docs/commands.md says
// (`admin --config X --fold Y pause` was refused as "unexpected argument").
func TestFlagsBeforeArguments(t *testing.T) {
	dir := t.TempDir()
	// Nothing listens at the HTTP address: admin gets as far as calling it.
	cfg := writeConfig(t, dir, fmt.Sprintf("[http]\naddr = %q\n[[fold]]\nname = \"a\"\n", freeAddr(t)))
	missing := filepath.Join(dir, "missing.wasm")
	for _, tc := range []struct {
		after, before []string
		want          string
	}{
		{[]string{"admin", "pause", "--config", cfg, "--fold", "a"}, []string{"admin", "--config", cfg, "--fold", "a", "pause"}, "connect"},
		{[]string{"admin", "replay", "--key", "k", "--config", cfg}, []string{"admin", "--key", "k", "--config", cfg, "replay"}, "connect"},
		{[]string{"inspect", "cursor", "--data", dir}, []string{"inspect", "--data", dir, "cursor"}, "not a pebble directory"},
		{[]string{"kv", "get", "k", "--bucket", "a.b"}, []string{"kv", "--bucket", "a.b", "get", "k"}, "not a valid bucket name"},
		{[]string{"plugin", "push", missing, "--to", "nats-object://b/n"}, []string{"plugin", "--to", "nats-object://b/n", "push", missing}, "missing.wasm"},
	} {
		codeA, _, errA := runCLI(t, nil, tc.after...)
		codeB, _, errB := runCLI(t, nil, tc.before...)
		if codeA != codeB || errA != errB || !strings.Contains(errB, tc.want) {
			t.Errorf("%v: exit %d, stderr %q\n%v: exit %d, stderr %q\nwant the same, naming %q", tc.after, codeA, errA, tc.before, codeB, errB, tc.want)
		}
	}
}

// TestInspectOutbox: inspect outbox reads a stopped fold's unpublished
// effects: the count, the first and last ids, and the oldest --limit with
// subject and size, and the store's effects hold; an empty outbox says
// so. Mutations caught: the last id taken from the oldest shown (--limit),
// a count of the shown only, the hold not shown.
func TestInspectOutbox(t *testing.T) {
	dir := makeStore(t)
	outbox := func(dir string, args ...string) map[string]any {
		t.Helper()
		code, out, errOut := runCLI(t, nil, append([]string{"inspect", "--data", dir, "outbox"}, args...)...)
		if code != command.ExitOK {
			t.Fatalf("inspect outbox: exit %d: %s", code, errOut)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("inspect outbox: %v in %s", err, out)
		}
		return m
	}
	if m := outbox(dir); m["count"] != 0.0 || m["first"] != nil || m["last"] != nil || len(m["oldest"].([]any)) != 0 {
		t.Errorf("empty outbox = %v", m)
	}

	s, _, err := fold.Open(dir, fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i, rev := range []protocol.Revision{5, 6, 7} {
		var effects []fold.Effect
		for j := range 2 {
			effects = append(effects, fold.Effect{Subject: "route.changed", Headers: []fold.EffectHeader{{Name: "Route-Op", Value: "put"}},
				Payload: []byte(strings.Repeat("x", i*10+j))})
		}
		if err := s.Commit(fold.Commit{Raw: []fold.Update{{Key: fmt.Sprint("k", rev), Op: fold.OpPut, Rev: rev, Value: []byte("v")}},
			Cursor: protocol.Cursor{Rev: rev}, Effects: effects, EffectRev: rev}); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	m := outbox(dir, "--limit", "3")
	oldest := m["oldest"].([]any)
	if m["count"] != 6.0 || m["first"] != "fold/5/0" || m["last"] != "fold/7/1" || m["cursor"] != 7.0 || len(oldest) != 3 {
		t.Fatalf("outbox = %v", m)
	}
	for i, want := range []string{"fold/5/0", "fold/5/1", "fold/6/0"} {
		it := oldest[i].(map[string]any)
		size := float64(len("route.changed") + len("Route-Op") + len("put") + []int{0, 1, 10}[i])
		if it["id"] != want || it["subject"] != "route.changed" || it["size"] != size {
			t.Errorf("oldest[%d] = %v, want id %s size %v", i, it, want, size)
		}
	}
	if m := outbox(dir); len(m["oldest"].([]any)) != 6 || m["held"] != nil {
		t.Errorf("the default limit shows %d of 6; held %v", len(m["oldest"].([]any)), m["held"])
	}
	// A store that joined another publisher's effects midway shows its hold.
	if s, _, err = fold.Open(dir, fold.Options{}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetEffectsHold(&fold.EffectsHold{Rev: 7, Index: 1}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if h, _ := outbox(dir)["held"].(map[string]any); fmt.Sprint(h["rev"], "/", h["index"]) != "7/1" {
		t.Errorf("held = %v, want rev 7 index 1", h)
	}
}
