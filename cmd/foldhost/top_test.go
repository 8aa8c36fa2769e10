package main

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTopRender: the table fits the width it is given, truncating then
// dropping columns in the documented order; the sorts; the p99 estimate
// from histogram buckets (as histogram_quantile) over an interval.
// Mutations caught: fitTop not dropping (lines cut mid-column instead),
// the shrink order reversed (the name cut before the error), a sort key
// ignored, the quantile taken over the whole histogram instead of the
// interval's difference.
func TestTopRender(t *testing.T) {
	rows := []topRow{
		{name: "routes-eu-west-1a", state: "repairing", cursor: 123456, lag: 0, rate: 1234.5, p99: "1.2ms", plugin: "example-router@1.2.3", error: ""},
		{name: "b", state: "failed", cursor: 7, lag: 2500000, rate: math.NaN(), p99: "-", plugin: "-", error: "plugin: apply: wasm error: unreachable\nwasm stack trace: ..."},
		{name: "c", state: "following", cursor: 9, lag: 3000000, rate: 3, p99: ">6.6s", plugin: "x@1", error: ""},
	}
	for _, width := range []int{200, 80, 60, 40, 20} {
		lines := renderTop(rows, width)
		if len(lines) != 4 {
			t.Fatalf("width %d: %d lines", width, len(lines))
		}
		for _, l := range lines {
			if n := utf8.RuneCountInString(l); n > width {
				t.Errorf("width %d: a line of %d: %q", width, n, l)
			}
		}
		head := strings.Fields(lines[0])
		t.Logf("width %d:\n%s", width, strings.Join(lines, "\n"))
		switch width {
		case 200: // everything, untruncated, the error on one line
			if !slices.Equal(head, []string{"NAME", "STATE", "CURSOR", "LAG", "RATE/s", "P99", "PLUGIN", "LAST", "ERROR"}) ||
				!strings.HasPrefix(lines[1], "routes-eu-west-1a  repairing") ||
				!strings.Contains(lines[2], "2.5M") || !strings.HasSuffix(lines[2], "unreachable wasm stack trace: ...") ||
				!strings.Contains(lines[1], "1234") || !strings.Contains(lines[1], "example-router@1.2.3") {
				t.Errorf("width 200:\n%s", strings.Join(lines, "\n"))
			}
		case 80: // the plugin dropped for the error, truncated; the name whole
			if !strings.Contains(lines[0], "LAST ERROR") || slices.Contains(head, "PLUGIN") || !strings.HasPrefix(lines[1], "routes-eu-west-1a ") || !strings.HasSuffix(lines[2], "…") {
				t.Errorf("width 80:\n%s", strings.Join(lines, "\n"))
			}
		case 40: // the error, plugin and p99 dropped; name, state, cursor kept
			if slices.Contains(head, "PLUGIN") || slices.Contains(head, "P99") || head[0] != "NAME" || head[2] != "CURSOR" || !strings.Contains(lines[1], "123456") {
				t.Errorf("width 40:\n%s", strings.Join(lines, "\n"))
			}
		}
	}
	// With no errors, no error column.
	if l := renderTop(rows[2:], 200)[0]; strings.Contains(l, "ERROR") {
		t.Errorf("an empty error column shown: %q", l)
	}

	names := func(key string) string {
		rs := slices.Clone(rows)
		sortTopRows(rs, key)
		var n []string
		for _, r := range rs {
			n = append(n, r.name[:1])
		}
		return strings.Join(n, "")
	}
	for key, want := range map[string]string{"name": "bcr", "lag": "cbr", "rate": "rcb", "state": "brc"} {
		if got := names(key); got != want {
			t.Errorf("--sort %s: %s, want %s", key, got, want)
		}
	}

	metrics := func(counts ...int) string {
		les := []string{"0.0001", "0.0004", "0.0016", "0.0064", "+Inf"}
		var b strings.Builder
		b.WriteString("# TYPE foldhost_fold_batch_duration_seconds histogram\n")
		for i, le := range les {
			fmt.Fprintf(&b, "foldhost_fold_batch_duration_seconds_bucket{fold=\"a\",le=%q} %d\n", le, counts[i])
		}
		b.WriteString("foldhost_fold_batch_duration_seconds_count{fold=\"a\"} 1\nfoldhost_fold_cursor_revision{fold=\"a\"} 3\n")
		return b.String()
	}
	// Since start: 1000 fast batches (100-400us); in the interval, 10 more
	// between 1.6 and 6.4 ms (since start, the p99 is 400us).
	h0 := parseBatchHists(strings.NewReader(metrics(0, 1000, 1000, 1000, 1000)))["a"]
	h1 := parseBatchHists(strings.NewReader(metrics(0, 1000, 1000, 1010, 1010)))["a"]
	if got := h1.since(h0).quantileText(0.99); got != "6.4ms" { // 1.6 + 4.8*0.99
		t.Errorf("interval p99 = %s (since start: %s)", got, h1.quantileText(0.99))
	}
	if got := h1.since(h1).quantileText(0.99); got != "-" {
		t.Errorf("p99 of an interval without batches = %s", got)
	}
	if got := parseBatchHists(strings.NewReader(metrics(0, 0, 0, 0, 5)))["a"].quantileText(0.99); got != ">6.4ms" {
		t.Errorf("p99 beyond the last bound = %s", got)
	}
}

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
	if code, _, errOut := runCLI(t, nil, "top", "--once", "--sort", "size", "--url", d.base); code != exitUsage || !strings.Contains(errOut, `--sort "size"`) {
		t.Errorf("a bad --sort: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "top", "--once", "--url", "http://"+freeAddr(t)); code != exitFailure || !strings.Contains(errOut, "connect") {
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
