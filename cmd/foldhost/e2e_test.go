package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// buildBinary builds foldhost into a temp dir (with -race when the test
// runs under the race detector, so the daemon is checked too).
func buildBinary(t *testing.T) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go tool on PATH (the end-to-end test builds the binary): %v", err)
	}
	bin := filepath.Join(t.TempDir(), "foldhost")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, ".")...)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// binCommand runs the built binary. A race-enabled binary sleeps 1 s at exit
// by default (GORACE atexit_sleep_ms) to let reports flush; the test runs
// it a dozen times, so that is turned off. A race still exits with code 66.
func binCommand(bin string, args ...string) *exec.Cmd {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "GORACE=atexit_sleep_ms=0")
	return cmd
}

// daemonProc is a running `foldhost run`.
type daemonProc struct {
	cmd         *exec.Cmd
	out, errOut *syncbuf.Buffer
	done        chan struct{}
	natsURL     string
	base        string
}

func startDaemon(t *testing.T, bin, cfg string) *daemonProc {
	t.Helper()
	d := &daemonProc{cmd: binCommand(bin, "run", "--config", cfg), out: &syncbuf.Buffer{}, errOut: &syncbuf.Buffer{}, done: make(chan struct{})}
	d.cmd.Stdout, d.cmd.Stderr = d.out, d.errOut
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = d.cmd.Wait()
		close(d.done)
	}()
	t.Cleanup(func() {
		select {
		case <-d.done:
		default:
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("foldhost run stdout:\n%s\nstderr:\n%s", d.out, d.errOut)
		}
	})
	waitFor(t, 30*time.Second, "the addresses on stdout", func() (bool, string) {
		select {
		case <-d.done:
			t.Fatalf("foldhost run exited early: %v\n%s", d.cmd.ProcessState, d.errOut)
		default:
		}
		s := d.out.String()
		n, h := natsURLRE.FindStringSubmatch(s), httpURLRE.FindStringSubmatch(s)
		if n == nil || h == nil {
			return false, s
		}
		d.natsURL, d.base = n[1], h[1]
		return true, ""
	})
	waitFor(t, 20*time.Second, "/readyz 200", func() (bool, string) {
		code, body, err := httpGet(d.base + "/readyz")
		return code == 200, fmt.Sprint(code, body, err)
	})
	return d
}

// stop sends SIGTERM and returns the exit code.
func (d *daemonProc) stop(t *testing.T) int {
	t.Helper()
	if err := d.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(30 * time.Second):
		t.Fatal("foldhost run did not exit within 30s of SIGTERM")
	}
	return d.cmd.ProcessState.ExitCode()
}

func (d *daemonProc) status(t *testing.T) foldStatus {
	t.Helper()
	code, body, err := httpGet(d.base + "/v1/folds/routes")
	if err != nil || code != 200 {
		t.Fatalf("GET /v1/folds/routes: %d %v %s", code, err, body)
	}
	var st foldStatus
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatal(err)
	}
	return st
}

type foldStatus struct {
	State    string
	Cursor   uint64
	Counters struct {
		DeliveredSinceStart uint64 `json:"delivered_since_start"`
		Applied             uint64
		Batches             uint64
	}
}

// foldhost runs the binary to completion.
func foldhost(t *testing.T, bin string, args ...string) (int, string, string) {
	t.Helper()
	cmd := binCommand(bin, args...)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	if _, ok := err.(*exec.ExitError); err != nil && !ok {
		t.Fatalf("foldhost %v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

func kvPut(t *testing.T, bin, natsURL, key, value string) uint64 {
	t.Helper()
	code, out, errOut := foldhost(t, bin, "kv", "--nats", natsURL, "--bucket", "routes", "put", key, value)
	if code != 0 {
		t.Fatalf("kv put %s: exit %d: %s", key, code, errOut)
	}
	var r struct{ Revision uint64 }
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	return r.Revision
}

// checkGCOn fails unless the daemon at base runs with its garbage collector
// on, as /metrics reports it: a package linked into the binary once turned
// it off in its init, and the daemon never freed memory.
func checkGCOn(t *testing.T, base string) {
	t.Helper()
	code, body, err := httpGet(base + "/metrics")
	if err != nil || code != 200 {
		t.Fatalf("GET /metrics: %d %v", code, err)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, "go_gc_gogc_percent "); ok {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil || p <= 0 || p > 1e6 {
				t.Fatalf("the daemon runs with GOGC %q: its garbage collector is off", v)
			}
			return
		}
	}
	t.Fatal("/metrics has no go_gc_gogc_percent")
}

// waitRaw polls the HTTP raw read of key until it holds value.
func (d *daemonProc) waitRaw(t *testing.T, key, value string) {
	t.Helper()
	waitFor(t, 10*time.Second, key+" = "+value+" over HTTP", func() (bool, string) {
		code, body, err := httpGet(d.base + "/v1/folds/routes/raw/" + key)
		if err != nil || code != 200 {
			return false, fmt.Sprint(code, body, err)
		}
		var it struct{ Value string }
		_ = json.Unmarshal([]byte(body), &it)
		return it.Value == value, body
	})
}

// TestEndToEnd drives the built binary as a user would: run on embedded
// NATS, write with `kv put`, read back over HTTP, SIGTERM, restart, and
// check that the resume received exactly the delta.
func TestEndToEnd(t *testing.T) {
	bin := buildBinary(t)
	dir := t.TempDir()
	cfg := filepath.Join(dir, "config.toml")
	text := `
[nats]
url = "embedded"
embedded_listen = "127.0.0.1:0"   # a free port each start; the URL is printed
head_poll_interval = "100ms"
[http]
addr = "127.0.0.1:0"
[[fold]]
name = "routes"
scope = ["route."]
batch_window = "2ms"
`
	if err := os.WriteFile(cfg, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}

	// First run: a state-sync of an empty bucket, then 5 live writes.
	d := startDaemon(t, bin, cfg)
	checkGCOn(t, d.base)
	var last uint64
	for i := range 5 {
		last = kvPut(t, bin, d.natsURL, fmt.Sprintf("route.%d", i), fmt.Sprintf("v%d", i))
	}
	d.waitRaw(t, "route.4", "v4")
	d.waitRaw(t, "route.0", "v0")
	if st := d.status(t); st.Cursor != last || st.Counters.DeliveredSinceStart != 5 || st.State != "following" {
		t.Fatalf("first run status = %+v, want cursor %d and 5 delivered", st, last)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("first run: exit %d after SIGTERM, want 0", code)
	}

	// Offline, the store holds what was served.
	code, out, errOut := foldhost(t, bin, "inspect", "--config", cfg, "cursor")
	if code != 0 || !strings.Contains(out, fmt.Sprintf(`"cursor": %d`, last)) {
		t.Fatalf("inspect cursor: exit %d: %s %s", code, out, errOut)
	}

	// Second run: resumes from the cursor; only the delta arrives.
	d = startDaemon(t, bin, cfg)
	if st := d.status(t); st.Cursor != last || st.Counters.DeliveredSinceStart != 0 {
		t.Fatalf("after restart status = %+v, want cursor %d and nothing delivered", st, last)
	}
	kvPut(t, bin, d.natsURL, "route.0", "v0-again")
	kvPut(t, bin, d.natsURL, "route.5", "v5")
	last = kvPut(t, bin, d.natsURL, "route.6", "v6")
	waitFor(t, 10*time.Second, fmt.Sprintf("cursor %d", last), func() (bool, string) {
		st := d.status(t)
		return st.Cursor == last, fmt.Sprintf("%+v", st)
	})
	if st := d.status(t); st.Counters.DeliveredSinceStart != 3 || st.Counters.Applied != 3 {
		t.Fatalf("second run delivered_since_start = %d (applied %d), want exactly the delta 3", st.Counters.DeliveredSinceStart, st.Counters.Applied)
	}
	d.waitRaw(t, "route.0", "v0-again")
	d.waitRaw(t, "route.3", "v3") // from the first run
	d.waitRaw(t, "route.6", "v6")

	// kv get against the running embedded server.
	code, out, _ = foldhost(t, bin, "kv", "--nats", d.natsURL, "--bucket", "routes", "get", "route.5")
	if code != 0 || !strings.Contains(out, `"value": "v5"`) {
		t.Errorf("kv get: exit %d: %s", code, out)
	}
	if code, _, _ := foldhost(t, bin, "kv", "--nats", d.natsURL, "--bucket", "routes", "get", "route.nope"); code != command.ExitNotFound {
		t.Errorf("kv get of a missing key: exit %d, want %d", code, command.ExitNotFound)
	}
	if code := d.stop(t); code != 0 {
		t.Fatalf("second run: exit %d after SIGTERM, want 0", code)
	}
	if !strings.Contains(d.errOut.String(), "mode=resume") {
		t.Errorf("second run did not resume:\n%s", d.errOut)
	}
}
