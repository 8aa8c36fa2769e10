package fold

import (
	"errors"
	"maps"
	"testing"
)

// TestShadowSwitchesInOneCommit: a shadow's writes are invisible to the
// store's and its snapshots' reads until the commit that activates it; that
// commit switches every later read to it and drops the old views; the
// switch survives a reopen, a shadow left by a dead process is dropped at
// Open, and a stale shadow is refused. Mutations caught: shadow writes to
// the live keyspace; the old views kept; the marker not written (a reopen
// reads the old keyspace).
func TestShadowSwitchesInOneCommit(t *testing.T) {
	s, dir := openTemp(t, Options{})
	mustCommit(t, s, Commit{Raw: []Update{put("a", 1, "1")}, Views: []ViewMutation{vput("old/a", "1")}, Cursor: cursorAt(1)})
	sh, err := s.BeginShadow()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Write([]ViewMutation{vput("new/a", "1"), vput("new/gone", "x")}); err != nil {
		t.Fatal(err)
	}
	before, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()
	if got := collectViews(t, s, ""); !maps.Equal(got, map[string]string{"old/a": "1"}) {
		t.Fatalf("views before the switch: %v", got)
	}
	if v, ok, err := sh.ViewGet([]byte("new/a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("shadow read: %q %v %v", v, ok, err)
	}
	// A live commit meanwhile goes to the old views.
	mustCommit(t, s, Commit{Raw: []Update{put("b", 2, "2")}, Views: []ViewMutation{vput("old/b", "2")}, Cursor: cursorAt(2)})
	// The switch, with the catch-up's own mutations.
	mustCommit(t, s, Commit{Views: []ViewMutation{vput("new/b", "2"), vdel("new/gone")}, Cursor: cursorAt(2), PluginIdentity: []byte("new"), Activate: sh})
	want := map[string]string{"new/a": "1", "new/b": "2"}
	if got := collectViews(t, s, ""); !maps.Equal(got, want) {
		t.Fatalf("views after the switch: %v, want %v", got, want)
	}
	if got := collectViews(t, before, ""); !maps.Equal(got, map[string]string{"old/a": "1"}) {
		t.Errorf("a snapshot from before the switch reads %v", got)
	}
	if err := sh.Write([]ViewMutation{vput("late", "x")}); !errors.Is(err, ErrShadowStale) {
		t.Errorf("write to an activated shadow: %v", err)
	}
	if err := s.Commit(Commit{Cursor: cursorAt(2), Activate: sh}); !errors.Is(err, ErrShadowStale) {
		t.Errorf("second activation: %v", err)
	}
	// A shadow begun and abandoned (the process dies) is dropped at Open.
	sh2, err := s.BeginShadow()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh2.Write([]ViewMutation{vput("half", "x")}); err != nil {
		t.Fatal(err)
	}
	before.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if got := collectViews(t, s2, ""); !maps.Equal(got, want) {
		t.Fatalf("views after a reopen: %v, want %v", got, want)
	}
	if err := viewRange(s2.db, otherView(s2.viewSpace()), nil, func(k, _ []byte) error { return errors.New("left over: " + string(k)) }); err != nil {
		t.Error(err)
	}
	sh3, err := s2.BeginShadow()
	if err != nil {
		t.Fatal(err)
	}
	// A second switch goes back to the first keyspace, emptied.
	mustCommit(t, s2, Commit{Views: []ViewMutation{vput("third", "3")}, Cursor: cursorAt(2), Activate: sh3})
	if got := collectViews(t, s2, ""); !maps.Equal(got, map[string]string{"third": "3"}) {
		t.Fatalf("views after a second switch: %v", got)
	}
}

// TestStoreViewReadsDuringSwitches: a Store view read (not a snapshot)
// that races a switch finds a key both keyspaces hold: it never resolves
// the old keyspace and reads it after the switch dropped it. Mutation
// caught: the activating commit not ordered with Store reads (viewMu).
func TestStoreViewReadsDuringSwitches(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{Views: []ViewMutation{vput("k", "v")}, Cursor: cursorAt(1)})
	stop := make(chan struct{})
	misses := make(chan int, 1)
	go func() {
		n := 0
		defer func() { misses <- n }()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, ok, err := s.ViewGet([]byte("k")); err != nil || !ok {
				n++
			}
			found := false
			_ = s.ViewRange(nil, func(k, _ []byte) error { found = found || string(k) == "k"; return nil })
			if !found {
				n++
			}
		}
	}()
	for range 300 {
		sh, err := s.BeginShadow()
		if err != nil {
			t.Fatal(err)
		}
		if err := sh.Write([]ViewMutation{vput("k", "v")}); err != nil {
			t.Fatal(err)
		}
		mustCommit(t, s, Commit{Cursor: cursorAt(1), Activate: sh})
	}
	close(stop)
	if n := <-misses; n > 0 {
		t.Errorf("%d Store view reads missed a key both keyspaces held", n)
	}
}
