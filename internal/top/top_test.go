package top

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"testing"
	"unicode/utf8"
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
