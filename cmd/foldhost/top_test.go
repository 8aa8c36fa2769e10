package main

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/nats-io/nats.go/jetstream"
)

// topTestDaemon runs a daemon with two folds: "routes" (raw) and
// "views" (the example-router plugin), on bucket routes, and returns it
// with a KV handle to write with.
func topTestDaemon(t *testing.T) (*inProcess, jetstream.KeyValue) {
	t.Helper()
	cfgText := fmt.Sprintf(`
[nats]
embedded_listen = "127.0.0.1:0"
head_poll_interval = "50ms"
[http]
addr = "127.0.0.1:0"
[[fold]]
name = "routes"
bucket = "routes"
batch_window = "2ms"
[[fold]]
name = "views"
bucket = "routes"
scope = ["route."]
plugin = %q
batch_window = "2ms"
`, routerBuild(t))
	d := runInProcess(t, t.TempDir(), cfgText)
	nc, err := natskv.Connect(natskv.ConnOptions{URL: d.natsURL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	return d, b.KV()
}

// TestTopOnce: `foldhost top --once` against a running host with two
// folds prints one plain frame (no escape codes) that lists both with
// their state and cursor and the plugin, within 80 columns ($COLUMNS
// unset and the output not a terminal), or within $COLUMNS.
// Mutations caught: the frame not cut to the width; the cursor column
// fed another field; the plugin not shown.
func TestTopOnce(t *testing.T) {
	d, kv := topTestDaemon(t)
	ctx := context.Background()
	for i := range 5 {
		if _, err := kv.Put(ctx, fmt.Sprintf("route.%d", i), []byte(`{"to":"10.0.0.1"}`)); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, time.Minute, "both folds at cursor 5", func() (bool, string) {
		a, b := foldStatusOf(t, d.base, "routes"), foldStatusOf(t, d.base, "views")
		return a["cursor"] == 5.0 && b["cursor"] == 5.0 && a["state"] == "following" && b["state"] == "following", fmt.Sprint(a["cursor"], b["cursor"], a["state"], b["state"])
	})
	plugin := foldStatusOf(t, d.base, "views")["plugin"].(map[string]any)
	wantPlugin := fmt.Sprintf("%s@%s", plugin["name"], plugin["version"])

	for _, tc := range []struct {
		env   map[string]string
		width int
	}{{nil, 80}, {map[string]string{"COLUMNS": "50"}, 50}} {
		code, out, errOut := runCLI(t, tc.env, "top", "--once", "--interval", "100ms", "--url", d.base, "--sort", "name")
		if code != 0 {
			t.Fatalf("top --once: exit %d: %s", code, errOut)
		}
		t.Logf("width %d:\n%s", tc.width, out)
		if strings.Contains(out, "\x1b") {
			t.Errorf("escape codes in --once output: %q", out)
		}
		lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > tc.width {
				t.Errorf("a line of %d columns (want <= %d): %q", n, tc.width, l)
			}
		}
		if len(lines) != 3 || !strings.HasPrefix(lines[0], "NAME") {
			t.Fatalf("want a header and two rows:\n%s", out)
		}
		for i, name := range []string{"routes", "views"} {
			f := strings.Fields(lines[i+1])
			// No writes between the two samples: no batch in the interval,
			// so no p99 (the batches before it are not counted).
			if len(f) < 6 || f[0] != name || f[1] != "following" || f[2] != "5" || f[5] != "-" {
				t.Errorf("row of %s: %q", name, lines[i+1])
			}
		}
		if tc.width == 80 && !strings.Contains(lines[2], wantPlugin) {
			t.Errorf("no plugin %s in %q", wantPlugin, lines[2])
		}
	}
	if code, _, errOut := runCLI(t, nil, "top", "--once", "--sort", "size", "--url", d.base); code != command.ExitUsage || !strings.Contains(errOut, `--sort "size"`) {
		t.Errorf("a bad --sort: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "top", "--once", "--url", "http://"+freeAddr(t)); code != command.ExitFailure || !strings.Contains(errOut, "connect") {
		t.Errorf("nothing listening: exit %d: %s", code, errOut)
	}
}

// topRate is the RATE/s of fold's row in a frame; -1 when absent.
func topRate(frame []string, fold string) float64 {
	for _, l := range frame {
		f := strings.Fields(l)
		if len(f) >= 5 && f[0] == fold {
			if r, err := strconv.ParseFloat(f[4], 64); err == nil {
				return r
			}
			if strings.HasSuffix(f[4], "k") {
				return 1000
			}
		}
	}
	return -1
}

// ptyFrames splits the output of an interactive top into its complete
// frames (each drawn from the cursor's home to an erase of the rest),
// their lines free of escape codes.
func ptyFrames(s string) [][]string {
	var frames [][]string
	for _, chunk := range strings.Split(s, "\x1b[H")[1:] {
		body, ok := strings.CutSuffix(chunk, "\x1b[J")
		if !ok {
			continue
		}
		// The pty's output processing makes each "\n" a "\r\n".
		body = strings.NewReplacer("\x1b[K", "", "\r", "").Replace(body)
		frames = append(frames, strings.Split(strings.TrimSuffix(body, "\n"), "\n"))
	}
	return frames
}
