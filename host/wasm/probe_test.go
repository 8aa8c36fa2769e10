package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/plugins/testdata/go/probe"
	"github.com/foldhost/foldhost/protocol"
)

// TestSDKProbes drives the C, AssemblyScript, Rust and Go SDK probes (each
// update key is a command, see plugins/testdata/c/probe.c) through the real
// host: view writes, batched view and raw reads of the committed fold
// (binary values byte for byte), the overlay of the batch's own writes,
// rejections, and failures from parse and apply. "probe-go-native" is the
// Go probe's code run through the host's native path (NewNative), whose
// reads the host answers with the same code as the read import.
func TestSDKProbes(t *testing.T) {
	for _, name := range []string{"probe-c", "probe-as", "probe-rust", "probe-go", "probe-go-native"} {
		t.Run(name, func(t *testing.T) {
			var p fold.Plugin
			var st *fold.Store
			if name == "probe-go-native" {
				st = openStore(t)
				p = NewNative[probe.Rec](&probe.Probe{})
			} else {
				p, st = pluginAndStore(t, newRuntime(t, Options{}), testPlugin(t, name))
			}
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
			// Batch 1 commits view a=1 and the raw entries of keys "w/a"
			// and "w/z" (a binary value, at revision 2).
			if _, err := run(put("w/a", "1"), put("w/z", binValue)); err != nil {
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
				put("pfraw/w/z", ""),        // 8: prefetch raw w/z
				put("raw/w/z", ""),          // 9: rawgot/9/w/z = "2:" + binValue
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
				"rawgot/9/w/z":  "2:" + binValue,
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
				var ge *abi.GuestError // the native path's error: no module, no PluginError
				if (!errors.As(err, &pe) || pe.Kind != KindGuest) && (name != "probe-go-native" || !errors.As(err, &ge)) ||
					!strings.Contains(err.Error(), "probe says no") {
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

// binValue is a raw value no C string survives: NUL and 0xff bytes.
const binValue = "\x00\xffz\x00"

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

// openStore opens a fold store closed at the test's end.
func openStore(t testing.TB) *fold.Store {
	t.Helper()
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return st
}
