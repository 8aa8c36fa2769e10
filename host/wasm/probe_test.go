package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// TestSDKProbes drives the C, AssemblyScript and Rust SDK probes (each
// update key is a command, see plugins/testdata/c/probe.c) through the real
// host: view writes, batched view and raw reads of the committed fold, the
// overlay of the batch's own writes, rejections, and failures from parse and
// apply.
func TestSDKProbes(t *testing.T) {
	for _, name := range []string{"probe-c", "probe-as", "probe-rust"} {
		t.Run(name, func(t *testing.T) {
			p, st := pluginAndStore(t, newRuntime(t, Options{}), testPlugin(t, name))
			rev := protocol.Revision(0)
			u := func(key, value string, op fold.Op) fold.Update {
				rev++
				return fold.Update{Key: key, Value: []byte(value), Rev: rev, Op: op}
			}
			put := func(k, v string) fold.Update { return u(k, v, fold.OpPut) }
			run := func(batch ...fold.Update) (int, error) {
				var rejected int
				_, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch) + 1,
					OnApplied: func(a fold.Applied) { rejected += a.Rejected }}).Run(context.Background(), newFeed(batch))
				return rejected, err
			}
			// Batch 1 commits view a=1 and the raw entry of key "w/a".
			if _, err := run(put("w/a", "1")); err != nil {
				t.Fatal(err)
			}
			// Batch 2: committed reads, the batch's own writes, rejections.
			rejected, err := run(
				put("pf/a", ""),             // 0: prefetch a
				put("r/a", ""),              // 1: committed: got/1/a = "11"
				put("w/b", "B"),             // 2: write b
				put("r/b", ""),              // 3: own write: got/3/b = "1B"
				u("w/a", "", fold.OpDelete), // 4: delete a
				put("r/a", ""),              // 5: own delete: got/5/a = "0"
				put("raw/w/a", ""),          // 6: raw entry at revision 1: rawgot/6/w/a = "1:1"
				put("raw/nope", ""),         // 7: rawgot/7/nope = "0"
				put("reject-me", ""),        // rejected
				put("log", "hello from the probe"),
			)
			if err != nil {
				t.Fatal(err)
			}
			v := views(t, st)
			for k, want := range map[string]string{
				"got/1/a":       "11",
				"got/3/b":       "1B",
				"got/5/a":       "0",
				"rawgot/6/w/a":  "1:1",
				"rawgot/7/nope": "0",
				"b":             "B",
			} {
				if got, ok := v[k]; !ok || got != want {
					t.Errorf("view %q = %q (present %v), want %q; view: %v", k, got, ok, want, v)
				}
			}
			if _, ok := v["a"]; ok {
				t.Errorf("view a survived its delete: %v", v)
			}
			if rejected != 1 {
				t.Errorf("rejected %d, want 1", rejected)
			}
			// Failures from apply and from parse: status-1, nothing committed.
			before := st.Cursor()
			for _, cmd := range []string{"fail", "parsefail"} {
				_, err := run(put("w/c", "C"), put(cmd, "probe says no"))
				var pe *PluginError
				if !errors.As(err, &pe) || pe.Kind != KindGuest || !strings.Contains(err.Error(), "probe says no") {
					t.Fatalf("%s: err = %v, want a guest error carrying the message", cmd, err)
				}
				if st.Cursor() != before {
					t.Fatalf("%s: cursor moved to %v", cmd, st.Cursor())
				}
				if _, ok := views(t, st)["c"]; ok {
					t.Fatalf("%s: the failed batch's write was committed", cmd)
				}
			}
		})
	}
}

// TestRustSDKPanicIsATrap: a panic in a Rust plugin (the probe's "panic"
// command) aborts, which is a wasm trap: the host contains it like any trap
// (nothing of the batch is committed, the instance is discarded), and the
// SDK's panic hook has written the panic message to stderr, which the error
// carries. A fresh instance then folds the next batch.
func TestRustSDKPanicIsATrap(t *testing.T) {
	p, st := pluginAndStore(t, newRuntime(t, Options{Retries: 1}), testPlugin(t, "probe-rust"))
	rev := protocol.Revision(0)
	put := func(k, v string) fold.Update {
		rev++
		return fold.Update{Key: k, Value: []byte(v), Rev: rev, Op: fold.OpPut}
	}
	run := func(batch ...fold.Update) error {
		_, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch) + 1}).Run(context.Background(), newFeed(batch))
		return err
	}
	if err := run(put("w/a", "1")); err != nil {
		t.Fatal(err)
	}
	before := st.Cursor()
	err := run(put("w/b", "2"), put("panic", "the probe panics"))
	var pe *PluginError
	if !errors.Is(err, fold.ErrPlugin) || !errors.As(err, &pe) || pe.Kind != KindTrap {
		t.Fatalf("err = %v, want ErrPlugin with a trap PluginError", err)
	}
	if !strings.Contains(pe.Stderr, "foldhost plugin panicked at") || !strings.Contains(pe.Stderr, "the probe panics") {
		t.Fatalf("stderr %q lacks the panic message", pe.Stderr)
	}
	if st.Cursor() != before {
		t.Fatalf("cursor moved to %v", st.Cursor())
	}
	if _, ok := views(t, st)["b"]; ok {
		t.Fatal("the panicking batch's write was committed")
	}
	if got := p.Status().Failures; got != 2 {
		t.Fatalf("%d failed attempts, want 2 (the first and one retry)", got)
	}
	rev = before.Rev
	if err := run(put("w/c", "3")); err != nil {
		t.Fatalf("after the panic: %v", err)
	}
	if v := views(t, st); v["a"] != "1" || v["c"] != "3" {
		t.Fatalf("view after the panic: %v", v)
	}
}
