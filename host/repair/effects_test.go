package repair_test

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
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

// TestRepairAnnouncesTheNetChange: a key-listing repair folds its
// difference through the plugin and commits the plugin's effects with
// each batch, all filed under the revision the repair moves the cursor
// to, each batch's after the last. A repair cut short by a plugin failure
// and run again announces the rest only: the outbox holds one effect per
// changed key, under distinct ids, none twice. Mutations caught: the
// repair's commit dropping out.Effects (an empty outbox), the store
// ignoring EffectsAppend (the later batches' effects dropped as a
// re-delivery).
func TestRepairAnnouncesTheNetChange(t *testing.T) {
	b := bucket(t, "eff")
	put(t, b, "a", "new")
	head := put(t, b, "b", "new")
	dir := t.TempDir()
	st, _, err := fold.Open(filepath.Join(dir, "fold"), fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// The fold holds "gone", which the bucket no longer lists, and lacks
	// a and b.
	if err := st.Commit(fold.Commit{Raw: []fold.Update{{Key: "gone", Op: fold.OpPut, Rev: 1, Value: []byte("x")}},
		Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	relist := func(p fold.Plugin) error {
		src, err := b.Feed(natskv.Scope{}, natskv.WatchOptions{}).Watch(t.Context(), protocol.Cursor{})
		if err != nil {
			t.Fatal(err)
		}
		defer src.Stop()
		_, err = repair.Relist(t.Context(), src, st, p, repair.Config{Deletes: true, MaxBatch: 1, ScratchDir: filepath.Join(dir, "s"), Logger: quiet})
		return err
	}
	// The first attempt folds "a", then the plugin fails on "b".
	if err := relist(&failingAfter{announcer: announcer{}, ok: 1}); err == nil {
		t.Fatal("the repair with a failing plugin succeeded")
	}
	if err := relist(&announcer{}); err != nil {
		t.Fatal(err)
	}
	if v, ok, err := st.ViewGet([]byte("v/a")); err != nil || !ok || string(v) != "new" {
		t.Fatalf("the repair's views: v/a = %q %v %v", v, ok, err)
	}
	got := outboxOf(t, st)
	want := []string{fmt.Sprintf("f/%d/0=a", head), fmt.Sprintf("f/%d/1=b", head), fmt.Sprintf("f/%d/2=gone", head)}
	if !slices.Equal(got, want) {
		t.Fatalf("the outbox after the repairs: %q, want %q", got, want)
	}
}

// TestRestoreAnnouncesTheNetChangeUnderItsCursor: a restore folds its
// difference with the artifact through the plugin like a listing, and
// files the effects under the artifact's cursor, the revision it moves
// the fold's cursor to, numbered across its batches. Mutation caught:
// the restore's effects filed under the fold's old cursor (ids of its
// history: f/1/n, which a replica's effects of revision 1 also take).
func TestRestoreAnnouncesTheNetChangeUnderItsCursor(t *testing.T) {
	dir := t.TempDir()
	open := func(name string, c fold.Commit) *fold.Store {
		st, _, err := fold.Open(filepath.Join(dir, name), fold.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { st.Close() })
		if err := st.Commit(c); err != nil {
			t.Fatal(err)
		}
		return st
	}
	st := open("fold", fold.Commit{Raw: []fold.Update{{Key: "gone", Op: fold.OpPut, Rev: 1, Value: []byte("x")}}, Cursor: protocol.Cursor{Rev: 1}})
	art := open("artifact", fold.Commit{Raw: []fold.Update{{Key: "a", Op: fold.OpPut, Rev: 5, Value: []byte("new")}, {Key: "b", Op: fold.OpPut, Rev: 9, Value: []byte("new")}},
		Cursor: protocol.Cursor{Rev: 10}})
	notListed := func(context.Context, string) (bool, error) { return false, nil }
	if _, err := repair.Restore(t.Context(), st, art, &announcer{}, repair.RestoreConfig{MaxBatch: 1, Listed: notListed, Logger: quiet}); err != nil {
		t.Fatal(err)
	}
	got := outboxOf(t, st)
	if want := []string{"f/10/0=a", "f/10/1=b", "f/10/2=gone"}; !slices.Equal(got, want) || st.Cursor().Rev != 10 {
		t.Fatalf("the outbox after the restore: %q at cursor %d, want %q at 10", got, st.Cursor().Rev, want)
	}
}

// outboxOf is st's outbox, "id=payload" per effect (the fold "f").
func outboxOf(t *testing.T, st *fold.Store) []string {
	t.Helper()
	var got []string
	if err := st.Outbox(0, func(e fold.OutboxEntry) error {
		got = append(got, fmt.Sprintf("%s=%s", e.ID("f"), e.Payload))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return got
}

// failingAfter is announcer failing every batch after its first ok ones.
type failingAfter struct {
	announcer
	ok int
}

func (f *failingAfter) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	if f.ok == 0 {
		return fold.Output{}, errors.New("the plugin fails")
	}
	f.ok--
	return f.announcer.Apply(ctx, batch, r)
}
