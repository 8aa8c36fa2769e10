package wasm

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// TestSDKProbes drives the C and AssemblyScript SDK probes (each update key
// is a command, see plugins/testdata/c/probe.c) through the real host: view
// writes, batched view and raw reads of the committed fold, the overlay of
// the batch's own writes, rejections, and failures from parse and apply.
func TestSDKProbes(t *testing.T) {
	for _, name := range []string{"probe-c", "probe-as"} {
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
