package wasm

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// TestGuestLogIsBounded: a plugin that logs per update passes LogBurst
// lines, then LogRate a second; the next line that passes counts what was
// dropped; a huge line is cut to MaxLogLine bytes.
func TestGuestLogIsBounded(t *testing.T) {
	logs := &syncbuf.Buffer{}
	r := newRuntime(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	clock := time.Unix(1700000000, 0)
	r.logs.now = func() time.Time { return clock }
	p, st := pluginAndStore(t, r, testPlugin(t, "probe-c"))
	rev := protocol.Revision(0)
	run := func(values ...string) {
		t.Helper()
		var batch []fold.Update
		for _, v := range values {
			rev++
			batch = append(batch, fold.Update{Key: "log", Value: []byte(v), Rev: rev, Op: fold.OpPut})
		}
		if _, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch) + 1}).Run(context.Background(), newFeed(batch)); err != nil {
			t.Fatal(err)
		}
	}
	flood := make([]string, 3*LogBurst)
	for i := range flood {
		flood[i] = "flood-line"
	}
	run(flood...)
	if n := len(logs.Lines("flood-line")); n != LogBurst {
		t.Fatalf("%d of %d lines passed at once, want the burst %d", n, len(flood), LogBurst)
	}
	clock = clock.Add(time.Second)
	run("after-a-second", "a"+strings.Repeat("é", MaxLogLine)) // 2 bytes a rune: the cut falls mid-rune
	after := logs.Lines("after-a-second")
	if len(after) != 1 || !strings.Contains(after[0], "dropped_before=200") {
		t.Fatalf("the next line does not count the dropped ones: %q", after)
	}
	long := logs.Lines("cut_from_bytes=")
	if len(long) != 1 || !strings.Contains(long[0], "cut_from_bytes=8193") || strings.Count(long[0], "é") != MaxLogLine/2-1 || strings.Contains(long[0], `\x`) {
		t.Fatalf("the long line was not cut to %d bytes on a rune boundary: %d lines, %d runes", MaxLogLine, len(long), strings.Count(strings.Join(long, ""), "é"))
	}
}

func TestCutRunes(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"abc", "abc"}, {"ab\xc3", "ab"}, {"a\xe2\x82", "a"}, {"a\xe2\x82\xac", "a\xe2\x82\xac"},
		{"\xffabc", "\xffabc"}, // an invalid byte elsewhere stays: only the cut's tail is trimmed
		{"", ""},
	} {
		if got := string(cutRunes([]byte(c.in))); got != c.want {
			t.Errorf("cutRunes(%q) = %q, want %q", c.in, got, c.want)
		}
	}
}

// TestGuestLogBelowTheLevelCostsNothing: lines the host's level filters out
// do not spend the budget of the ones it prints.
func TestGuestLogBelowTheLevelCostsNothing(t *testing.T) {
	logs := &syncbuf.Buffer{}
	r := newRuntime(t, Options{Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelWarn}))})
	st := r.newCallState("m")
	for range 10 * LogBurst {
		st.logGuest(context.Background(), slog.LevelInfo, []byte("chatter"))
	}
	st.logGuest(context.Background(), slog.LevelWarn, []byte("important"))
	if got := logs.Lines("important"); len(got) != 1 || strings.Contains(got[0], "dropped_before") {
		t.Fatalf("a warning after filtered chatter: %q", got)
	}
}

// TestGuestOutputReachesTheLog: what a plugin writes to stdout and stderr
// on a call that succeeds reaches the host log a line at a time (stdout at
// INFO, stderr at WARN), within the SDK log's rate limit; a last line with
// no newline is passed on when the instance closes. (Both were kept only
// for errors, though ABI.md says they reach the host log.)
func TestGuestOutputReachesTheLog(t *testing.T) {
	logs := &syncbuf.Buffer{}
	r := newRuntime(t, Options{Logger: slog.New(slog.NewTextHandler(logs, nil))})
	clock := time.Unix(1700000000, 0)
	r.logs.now = func() time.Time { return clock }
	p, st := pluginAndStore(t, r, testPlugin(t, "probe-c"))
	rev := protocol.Revision(0)
	run := func(kv ...string) {
		t.Helper()
		var batch []fold.Update
		for i := 0; i < len(kv); i += 2 {
			rev++
			batch = append(batch, fold.Update{Key: kv[i], Value: []byte(kv[i+1]), Rev: rev, Op: fold.OpPut})
		}
		if _, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch) + 1}).Run(context.Background(), newFeed(batch)); err != nil {
			t.Fatal(err)
		}
	}
	run("stdout", "out-one\nout-two\r\n\nout-", "stdout", "three\n", "stderr", "err-one\n")
	for _, want := range []string{"level=INFO msg=out-one plugin=", "level=INFO msg=out-two plugin=", "level=INFO msg=out-three plugin=", "level=WARN msg=err-one plugin="} {
		stream := "stream=stdout"
		if strings.Contains(want, "err-") {
			stream = "stream=stderr"
		}
		if got := logs.Lines(want); len(got) != 1 || !strings.Contains(got[0], stream) {
			t.Errorf("want one line %q with %s, got %q\nlog:\n%s", want, stream, got, logs)
		}
	}
	if n := len(logs.Lines("msg=")); n != 4 {
		t.Errorf("%d lines logged, want 4 (a blank line is not logged):\n%s", n, logs)
	}
	clock = clock.Add(time.Hour) // a full bucket
	run("stdout", strings.Repeat("flood-line\n", 3*LogBurst))
	if n := len(logs.Lines("flood-line")); n != LogBurst {
		t.Errorf("%d of %d lines passed at once, want the burst %d", n, 3*LogBurst, LogBurst)
	}
	clock = clock.Add(time.Second)
	run("stdout", strings.Repeat("y", 3*MaxLogLine)+"\n")
	long := logs.Lines("cut_from_bytes=")
	if len(long) != 1 || !strings.Contains(long[0], "cut_from_bytes=12288") || !strings.Contains(long[0], "msg="+strings.Repeat("y", MaxLogLine)+" ") || !strings.Contains(long[0], "dropped_before=200") {
		t.Errorf("the long line was not cut to %d bytes, counting the dropped lines: %d lines, %d y, ...%q", MaxLogLine, len(long), strings.Count(strings.Join(long, ""), "y"), long[0][len(long[0])-200:])
	}
	run("stdout", "out-partial")
	if got := logs.Lines("out-partial"); len(got) != 0 {
		t.Fatalf("a line without its newline was passed on early: %q", got)
	}
	p.Close(context.Background())
	if got := logs.Lines("out-partial"); len(got) != 1 {
		t.Errorf("the last line without a newline was not passed on at close: %q", got)
	}
}
