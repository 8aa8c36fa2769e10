package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// TestEffectsNameTheirUpdateInEverySDK: effects each SDK's probe emits
// with its emit_for name the update their record came from (rejected
// updates counted), and the fold files each under that update's revision,
// whatever the batch; every SDK fails a batch that names a record apply
// did not receive, names records out of order, or mixes emit with
// emit_for. Mutations caught: the host filing them under the batch's
// revision (the outbox ids differ), an SDK sending the record's index for
// the update's, a check of the SDKs' removed.
func TestEffectsNameTheirUpdateInEverySDK(t *testing.T) {
	ctx := context.Background()
	r := newRuntime(t, Options{Retries: NoRetries})
	put := func(key string, rev uint64) fold.Update {
		return fold.Update{Key: key, Rev: protocol.Revision(rev), Op: fold.OpPut, Value: []byte(key)}
	}
	for _, lang := range []string{"c", "as", "rust", "go"} {
		t.Run(lang, func(t *testing.T) {
			probe := testPlugin(t, "probe-"+lang)
			p, st := pluginAndStore(t, r, probe)
			// One batch: records 0, 1, 2 are updates 11, 12, 14.
			batch := []fold.Update{put("reject-a", 10), put("emitfor/0/a", 11), put("emitfor/2/b", 12), put("reject-b", 13), put("emitfor/2/c", 14)}
			if _, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch)}).Run(ctx, newFeed(batch)); err != nil {
				t.Fatal(err)
			}
			var got []string
			if err := st.Outbox(0, func(e fold.OutboxEntry) error {
				got = append(got, fmt.Sprintf("%s %s %s", e.ID("f"), e.Subject, e.Payload))
				return nil
			}); err != nil {
				t.Fatal(err)
			}
			if want := "[f/11/0 a emitfor/0/a f/14/0 b emitfor/2/b f/14/1 c emitfor/2/c]"; fmt.Sprint(got) != want {
				t.Fatalf("outbox %v, want %s", got, want)
			}

			for name, c := range map[string]struct {
				keys []string
				msg  string
			}{
				"past the records":    {[]string{"emitfor/1/a"}, "record apply did not receive"},
				"out of order":        {[]string{"emitfor/1/a", "emitfor/0/b"}, "an earlier "},
				"mixed":               {[]string{"emit/a", "emitfor/1/b"}, "or none does"},
				"mixed the other way": {[]string{"emitfor/0/a", "emit/b"}, "or none does"},
			} {
				p, st := pluginAndStore(t, r, probe)
				var batch []fold.Update
				for i, k := range c.keys {
					batch = append(batch, put(k, uint64(i+1)))
				}
				_, err := fold.NewLoop(st, p, fold.LoopConfig{MaxBatch: len(batch)}).Run(ctx, newFeed(batch))
				var pe *PluginError
				if !errors.As(err, &pe) || pe.Kind != KindGuest || !strings.Contains(strings.ToLower(err.Error()), c.msg) {
					t.Errorf("%s: %v, want the SDK's failure naming %q", name, err, c.msg)
				}
				if st.Cursor().Rev != 0 || st.OutboxLen() != 0 {
					t.Errorf("%s: cursor %v, outbox %d: the failed batch committed", name, st.Cursor(), st.OutboxLen())
				}
			}
		})
	}
}

// TestAnEffectNamingNoUpdateOfTheBatchIsMalformed: the SDKs refuse an
// index past the records, but a module may write its output by hand; the
// host refuses an effect that names an update past the batch (it would
// otherwise index past it) and maps the others to their revisions.
func TestAnEffectNamingNoUpdateOfTheBatchIsMalformed(t *testing.T) {
	batch := []fold.Update{{Key: "a", Rev: 7}, {Key: "b", Rev: 9}}
	for _, c := range []struct {
		update int
		rev    protocol.Revision
		bad    bool
	}{{-1, 0, false}, {0, 7, false}, {1, 9, false}, {2, 0, true}} {
		rev, err := updateRevOf(batch, &abi.Effect{Update: c.update})
		if rev != c.rev || (err != nil) != c.bad {
			t.Errorf("update %d: revision %d, error %v; want %d, error %v", c.update, rev, err, c.rev, c.bad)
		}
	}
}
