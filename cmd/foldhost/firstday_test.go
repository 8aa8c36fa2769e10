package main

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/natstest"
)

// holdPort listens on a free loopback port for the test's length and
// returns its address: a port in use.
func holdPort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln.Addr().String()
}

// TestRunPortsInUse: an address in use fails 'run' at once, saying so and
// which key moves it. The embedded NATS server's (it waited out its
// 10-second start timeout and said only "server not ready"); the HTTP
// API's before the embedded server starts and the buckets are created
// (they were, then the start failed on the HTTP port).
func TestRunPortsInUse(t *testing.T) {
	dir := t.TempDir()
	natsAddr := holdPort(t)
	cfg := writeConfig(t, filepath.Join(dir, "nats"), fmt.Sprintf("[nats]\nembedded_listen = %q\n[http]\naddr = \"127.0.0.1:0\"\n[[fold]]\nname = \"a\"\n", natsAddr))
	start := time.Now()
	code, _, errOut := runCLI(t, nil, "run", "--config", cfg)
	if took := time.Since(start); code != command.ExitFailure || took > 5*time.Second ||
		!strings.Contains(errOut, "embedded NATS: its address "+natsAddr+" is in use or refused") || !strings.Contains(errOut, "[nats] embedded_listen") {
		t.Errorf("the embedded server's port in use: exit %d after %v: %s", code, took.Round(time.Millisecond), errOut)
	}

	httpAddr := holdPort(t)
	cfg = writeConfig(t, filepath.Join(dir, "http"), fmt.Sprintf("[nats]\nembedded_listen = \"127.0.0.1:0\"\n[http]\naddr = %q\n[[fold]]\nname = \"a\"\n", httpAddr))
	code, out, errOut := runCLI(t, nil, "run", "--config", cfg)
	if code != command.ExitFailure || !strings.Contains(errOut, "the HTTP API's address "+httpAddr+" is in use") || !strings.Contains(errOut, "[http] addr") {
		t.Errorf("the HTTP port in use: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(filepath.Join(dir, "http", "data", "nats")); !os.IsNotExist(err) || strings.Contains(out, "embedded NATS server listening") {
		t.Errorf("the embedded server started before the HTTP port was found in use (%v):\n%s", err, out)
	}
}

// TestKVDelLsHistory: kv del prints the revision of its delete, as put
// does (a read of your writes needs it: ?min_revision=); kv ls lists the
// keys, kv history a key's revisions (exit 3 for a key without any); a
// bucket that does not exist names the nearest one the server has, and
// so does a put that creates a misspelled bucket.
func TestKVDelLsHistory(t *testing.T) {
	srv, _ := natstest.Start(t)
	kv := func(args ...string) (int, string, string) {
		return runCLI(t, nil, append([]string{"kv", "--nats", srv.ClientURL()}, args...)...)
	}
	for _, kvs := range [][2]string{{"route.a", "1"}, {"route.b", "2"}, {"route.a", "3"}, {"other", "x"}} {
		if code, _, errOut := kv("--bucket", "routes", "put", kvs[0], kvs[1]); code != command.ExitOK {
			t.Fatalf("put: exit %d: %s", code, errOut)
		}
	}
	code, out, errOut := kv("--bucket", "routes", "del", "route.b")
	if code != command.ExitOK || !strings.Contains(out, `"op": "delete"`) || !strings.Contains(out, `"revision": 5`) {
		t.Errorf("del: exit %d: %s %s", code, out, errOut)
	}
	code, out, _ = kv("--bucket", "routes", "del", "--purge", "other")
	if code != command.ExitOK || !strings.Contains(out, `"op": "purge"`) || !strings.Contains(out, `"revision": 6`) {
		t.Errorf("del --purge: exit %d: %s", code, out)
	}
	if code, out, errOut := kv("--bucket", "routes", "ls"); code != command.ExitOK || out != "route.a\n" || !strings.Contains(errOut, "1 keys in bucket routes") {
		t.Errorf("ls: exit %d: %q %s", code, out, errOut)
	}
	if code, out, _ := kv("--bucket", "routes", "ls", "route."); code != command.ExitOK || out != "route.a\n" {
		t.Errorf("ls route.: exit %d: %q", code, out)
	}
	if code, _, errOut := kv("--bucket", "routes", "del", "route.*"); code != command.ExitFailure || !strings.Contains(errOut, "invalid key") {
		t.Errorf("del of a wildcard: exit %d: %s", code, errOut)
	}
	// The bucket keeps one revision per key (history 1): a's last.
	if code, out, _ := kv("--bucket", "routes", "history", "route.a"); code != command.ExitOK || strings.Count(out, "\n") != 1 ||
		!strings.Contains(out, `"key":"route.a"`) || !strings.Contains(out, `"revision":3`) || !strings.Contains(out, `"op":"put"`) {
		t.Errorf("history: exit %d: %s", code, out)
	}
	if code, out, _ := kv("--bucket", "routes", "history", "route.b"); code != command.ExitOK || !strings.Contains(out, `"op":"delete"`) || !strings.Contains(out, `"revision":5`) {
		t.Errorf("history of a deleted key: exit %d: %s", code, out)
	}
	if code, _, errOut := kv("--bucket", "routes", "history", "route.never"); code != command.ExitNotFound {
		t.Errorf("history of a key never written: exit %d: %s", code, errOut)
	}
	for _, action := range [][]string{{"get", "route.a"}, {"ls"}, {"history", "route.a"}, {"del", "route.a"}} {
		code, _, errOut := kv(append([]string{"--bucket", "rotues"}, action...)...)
		if code != command.ExitFailure || !strings.Contains(errOut, `bucket "rotues" does not exist (the server has a bucket "routes": did you mean it?)`) {
			t.Errorf("%v on a misspelled bucket: exit %d: %s", action, code, errOut)
		}
	}
	if code, _, errOut := kv("--bucket", "route", "put", "k", "v"); code != command.ExitOK || !strings.Contains(errOut, `the server has a bucket "routes": did you mean it?`) {
		t.Errorf("a put that creates a misspelled bucket: exit %d: %s", code, errOut)
	}
}
