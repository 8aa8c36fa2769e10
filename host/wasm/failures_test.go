package wasm

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// testPlugin returns a failure test plugin built by scripts/build-plugins.
func testPlugin(t *testing.T, name string) string {
	t.Helper()
	return builtPlugin(t, "testdata", name)
}

func TestInvalidModulesAreRefusedWithTheReason(t *testing.T) {
	r := newRuntime(t, Options{})
	for name, want := range map[string]string{
		"noexport": "required export foldhost_apply is missing",
		"abi2":     "module speaks ABI v2; this host speaks v1",
		// The Go router built without -buildmode=c-shared: its exports
		// trap ("call _start first"), which said nothing of the fix.
		"router-go-command": "built without -buildmode=c-shared",
		// ABI minor 2: a query list breaking a rule.
		"query-badname": `foldhost_queries: abi: malformed record: query name "bad name"`,
	} {
		_, err := r.LoadFile(context.Background(), testPlugin(t, name))
		if !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want ErrInvalidModule saying %q", name, err, want)
		}
	}
	// A module whose memory minimum exceeds the limit.
	small := newRuntime(t, Options{MemoryLimitPages: 1})
	if _, err := small.LoadFile(context.Background(), goRouterWasm(t)); !errors.Is(err, ErrInvalidModule) || !strings.Contains(err.Error(), "memory over the limit of 1 pages") {
		t.Errorf("memory over the limit: %v", err)
	}
}

// TestFailingPluginsCommitNothing: each failure becomes a typed PluginError,
// the loop stops with ErrPlugin, the cursor does not move and no view is
// written; a fixed plugin then resumes from the cursor and loses nothing.
func TestFailingPluginsCommitNothing(t *testing.T) {
	for _, c := range []struct {
		name string
		kind Kind
		opts Options
		text string
	}{
		{"trap", KindTrap, Options{Retries: 1}, ""},
		{"spin", KindTimeout, Options{CallTimeout: 300 * time.Millisecond, Retries: 1}, ""},
		{"oom", KindOOM, Options{MemoryLimitPages: 512, Retries: 1}, ""},
		{"status1", KindGuest, Options{}, "deliberate failure"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRuntime(t, c.opts)
			m, err := r.LoadFile(context.Background(), testPlugin(t, c.name))
			if err != nil {
				t.Fatal(err)
			}
			p := r.NewPlugin(m)
			defer p.Close(context.Background())
			st, _, err := fold.Open(t.TempDir(), fold.Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer st.Close()
			batch := []fold.Update{
				{Key: "route.a", Rev: 1, Op: fold.OpPut, Value: []byte(`{"upstreams":[{"addr":"a:1"}]}`)},
				{Key: "route.b", Rev: 2, Op: fold.OpPut, Value: []byte(`{"upstreams":[{"addr":"b:1"}]}`)},
			}
			start := time.Now()
			_, err = fold.NewLoop(st, p, fold.LoopConfig{}).Run(context.Background(), newFeed(batch))
			var pe *PluginError
			if !errors.Is(err, fold.ErrPlugin) || !errors.As(err, &pe) || pe.Kind != c.kind || !strings.Contains(err.Error(), c.text) {
				t.Fatalf("err = %v, want ErrPlugin with a %s PluginError", err, c.kind)
			}
			t.Logf("%s after %v: %v", c.kind, time.Since(start).Round(time.Millisecond), err)
			if cur := st.Cursor(); cur.Rev != 0 {
				t.Fatalf("cursor moved to %v on a failed batch", cur)
			}
			if v := views(t, st); len(v) != 0 {
				t.Fatalf("views written by a failed batch: %v", v)
			}
			if st := p.Status(); st.Failures == 0 || st.LastError == "" {
				t.Fatalf("status does not show the failure: %+v", st)
			}

			// The operator ships a fixed plugin: the same batch, re-delivered
			// from the unmoved cursor, now commits.
			good, err := r.LoadFile(context.Background(), goRouterWasm(t))
			if err != nil {
				t.Fatal(err)
			}
			p.Swap(good)
			if _, err := fold.NewLoop(st, p, fold.LoopConfig{}).Run(context.Background(), newFeed(batch)); err != nil {
				t.Fatalf("fixed plugin: %v", err)
			}
			if cur := st.Cursor(); cur.Rev != 2 || len(views(t, st)) != 4 {
				t.Fatalf("after the fix: cursor %v views %v", cur, views(t, st))
			}
		})
	}
}

// TestEmptyViewKeyIsMalformedOutput: a plugin that writes a view entry
// with an empty key (the ABI's encoding allows it, the store refuses it)
// fails its batch as malformed output, with retries on fresh instances and
// a message naming the problem; it used to stop the fold as an invalid
// commit, counted as a store failure.
func TestEmptyViewKeyIsMalformedOutput(t *testing.T) {
	p, st := pluginAndStore(t, newRuntime(t, Options{Retries: 1}), testPlugin(t, "probe-c"))
	var commitErrs int
	_, err := fold.NewLoop(st, p, fold.LoopConfig{OnCommitError: func(error) { commitErrs++ }}).Run(context.Background(),
		newFeed([]fold.Update{{Key: "w/", Rev: 1, Op: fold.OpPut, Value: []byte("x")}}))
	var pe *PluginError
	if !errors.Is(err, fold.ErrPlugin) || !errors.As(err, &pe) || pe.Kind != KindMalformed || !strings.Contains(err.Error(), "empty key") {
		t.Fatalf("err = %v, want a malformed-output PluginError naming the empty key", err)
	}
	if commitErrs != 0 || st.Cursor().Rev != 0 {
		t.Fatalf("%d commit failures, cursor %v: the store must not see it", commitErrs, st.Cursor())
	}
	if got := p.Status().Failures; got != 2 {
		t.Fatalf("%d failed attempts, want 2 (the first and one retry)", got)
	}
}

// TestRetriesAreExact: Options.Retries = 2 makes exactly three attempts of
// a failing batch (the first and two retries) and logs exactly two
// "retrying" lines (it used to log one after the last attempt too, which
// retried nothing).
func TestRetriesAreExact(t *testing.T) {
	var logs syncbuf.Buffer
	r := newRuntime(t, Options{Retries: 2, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	p, st := pluginAndStore(t, r, testPlugin(t, "trap"))
	_, err := fold.NewLoop(st, p, fold.LoopConfig{}).Run(context.Background(),
		newFeed([]fold.Update{{Key: "route.a", Rev: 1, Op: fold.OpPut, Value: []byte(`{}`)}}))
	if !errors.Is(err, fold.ErrPlugin) {
		t.Fatalf("err = %v, want ErrPlugin", err)
	}
	if got := p.Status().Failures; got != 3 {
		t.Errorf("%d attempts, want 3", got)
	}
	if n := strings.Count(logs.String(), "retrying on a fresh instance"); n != 2 {
		t.Errorf("%d retry lines, want 2:\n%s", n, logs.String())
	}
}

// TestBadEffectSubjectIsMalformedOutput: an effect to a wildcard subject
// fails its batch as malformed output (retried on a fresh instance),
// naming the problem; nothing of the batch is committed.
func TestBadEffectSubjectIsMalformedOutput(t *testing.T) {
	p, st := pluginAndStore(t, newRuntime(t, Options{Retries: 1}), testPlugin(t, "hostile"))
	_, err := fold.NewLoop(st, p, fold.LoopConfig{}).Run(context.Background(),
		newFeed([]fold.Update{{Key: "k", Rev: 1, Op: fold.OpPut, Value: []byte("badsubject")}}))
	var pe *PluginError
	if !errors.Is(err, fold.ErrPlugin) || !errors.As(err, &pe) || pe.Kind != KindMalformed || !strings.Contains(err.Error(), "wildcard") {
		t.Fatalf("err = %v, want a malformed-output PluginError naming the wildcard", err)
	}
	if st.Cursor().Rev != 0 {
		t.Fatalf("cursor %v: nothing may be committed", st.Cursor())
	}
	if got := p.Status().Failures; got != 2 {
		t.Fatalf("%d failed attempts, want 2 (the first and one retry)", got)
	}
}
