package repair_test

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// announcer is mirror that also emits one effect per update, as a plugin
// announcing its changes would.
type announcer struct {
	mirror
	emitted int
}

func (a *announcer) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	out, err := a.mirror.Apply(ctx, batch, r)
	for _, u := range batch {
		out.Effects = append(out.Effects, fold.Effect{Subject: "changed", Payload: []byte(u.Key)})
	}
	a.emitted += len(batch)
	return out, err
}

// TestRepairDropsEffects: a key-listing repair folds its difference
// through the plugin (the views change) but commits none of the plugin's
// effects: the outbox stays empty. Mutation caught: the repair's commit
// carrying out.Effects.
func TestRepairDropsEffects(t *testing.T) {
	b := bucket(t, "eff")
	put(t, b, "a", "new")
	put(t, b, "b", "new")
	dir := t.TempDir()
	st, _, err := fold.Open(filepath.Join(dir, "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The fold holds "gone", which the bucket no longer lists.
	if err := st.Commit(fold.Commit{Raw: []fold.Update{{Key: "gone", Op: fold.OpPut, Rev: 1, Value: []byte("x")}},
		Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	src, err := b.Feed(natskv.Scope{}, natskv.WatchOptions{}).Watch(t.Context(), protocol.Cursor{})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Stop()
	p := &announcer{}
	if _, err := repair.Relist(t.Context(), src, st, p, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "s"), Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	if p.emitted == 0 {
		t.Fatal("the repair folded nothing through the plugin")
	}
	if v, ok, err := st.ViewGet([]byte("v/a")); err != nil || !ok || string(v) != "new" {
		t.Fatalf("the repair's views: v/a = %q %v %v", v, ok, err)
	}
	n := 0
	if err := st.Outbox(0, func(fold.OutboxEntry) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("%d effects in the outbox after a repair (the plugin emitted %d), want none", n, p.emitted)
	}
}
