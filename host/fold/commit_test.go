package fold

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// A commit that fails validation writes nothing: not its valid updates, not
// its views, not its cursor or plugin identity.
func TestCommitValidationIsAtomic(t *testing.T) {
	bad := []struct {
		name string
		raw  []Update
		view []ViewMutation
	}{
		{"empty raw key", []Update{put("ok", 5, "v"), {Key: "", Op: OpPut, Rev: 6}}, nil},
		{"zero op", []Update{put("ok", 5, "v"), {Key: "k", Rev: 6}}, nil},
		{"unknown op", []Update{{Key: "k", Op: 9, Rev: 6}}, nil},
		{"put without revision", []Update{put("ok", 5, "v"), {Key: "k", Op: OpPut}}, nil},
		{"empty view key", []Update{put("ok", 5, "v")}, []ViewMutation{vput("fine", "x"), {Op: ViewPut}}},
		{"view zero op", []Update{put("ok", 5, "v")}, []ViewMutation{{Key: []byte("v")}}},
	}
	s, dir := openTemp(t, Options{})
	mustCommit(t, s, Commit{Raw: []Update{put("base", 1, "b")}, Cursor: cursorAt(1), PluginIdentity: []byte("p1")})
	for _, tc := range bad {
		err := s.Commit(Commit{Raw: tc.raw, Views: tc.view, Cursor: cursorAt(9), PluginIdentity: []byte("p2")})
		if !errors.Is(err, ErrInvalidCommit) {
			t.Fatalf("%s: Commit error %v, want ErrInvalidCommit", tc.name, err)
		}
		t.Logf("%s: %v", tc.name, err)
	}
	check := func(r Reader, cur protocol.Cursor) {
		t.Helper()
		if cur != cursorAt(1) {
			t.Fatalf("cursor = %v, want 1", cur)
		}
		if got := collectRaw(t, r, ""); len(got) != 1 || got[0] != (rawItem{"base", 1, "b"}) {
			t.Fatalf("raw = %v, want only base", got)
		}
		if v := collectViews(t, r, ""); len(v) != 0 {
			t.Fatalf("views = %v, want none", v)
		}
		if id, _, _ := r.PluginIdentity(); string(id) != "p1" {
			t.Fatalf("plugin identity = %q, want p1", id)
		}
	}
	check(s, s.Cursor())
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, cur, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	check(s2, cur)
}

func TestCommitRefusesCursorRegression(t *testing.T) {
	s, dir := openTemp(t, Options{})
	stored := protocol.Cursor{Rev: 10, EvictionSeen: true, MsgUnixNano: 42}
	mustCommit(t, s, Commit{Raw: []Update{put("k", 10, "v10")}, Cursor: stored})

	for _, proposed := range []protocol.Cursor{
		{Rev: 9, EvictionSeen: true},
		{Rev: 0},
		{Rev: 11}, // clears the eviction memo
	} {
		err := s.Commit(Commit{
			Raw:            []Update{put("k", 9, "stale"), put("new", 9, "x")},
			Views:          []ViewMutation{vput("v", "x")},
			Cursor:         proposed,
			PluginIdentity: []byte("p"),
		})
		var re *CursorRegressionError
		if !errors.Is(err, ErrCursorRegression) || !errors.As(err, &re) {
			t.Fatalf("Commit(%+v) = %v, want *CursorRegressionError", proposed, err)
		}
		if re.Stored != stored || re.Proposed != proposed {
			t.Fatalf("error %+v", re)
		}
		t.Logf("refused: %v", err)
	}
	if s.Cursor() != stored {
		t.Fatalf("cursor moved to %v", s.Cursor())
	}
	wantGet(t, s, "k", 10, "v10")
	wantMissing(t, s, "new")
	if _, ok, _ := s.PluginIdentity(); ok {
		t.Fatal("refused commit stored a plugin identity")
	}

	// An equal cursor is allowed (repair corrections under the current
	// cursor), and so is moving forward.
	mustCommit(t, s, Commit{Raw: []Update{del("k")}, Cursor: stored})
	mustCommit(t, s, Commit{Cursor: protocol.Cursor{Rev: 12, EvictionSeen: true}})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s2, cur, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if cur != (protocol.Cursor{Rev: 12, EvictionSeen: true}) {
		t.Fatalf("recovered %+v", cur)
	}
	wantMissing(t, s2, "k")
	// The guard survives reopen: it checks the stored cursor.
	if err := s2.Commit(Commit{Cursor: protocol.Cursor{Rev: 11, EvictionSeen: true}}); !errors.Is(err, ErrCursorRegression) {
		t.Fatalf("regression after reopen: %v", err)
	}
}

func TestCommitDeletes(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{
		Raw:    []Update{put("a", 1, "1"), put("b", 2, "2"), put("c", 3, "3")},
		Views:  []ViewMutation{vput("va", "1"), vput("vb", "2")},
		Cursor: cursorAt(3),
	})
	mustCommit(t, s, Commit{
		Raw: []Update{
			del("a"),
			del("never-existed"),
			put("c", 4, "3'"), del("c"), // later update of a key wins
			del("b"), put("b", 6, "2'"),
		},
		Views:  []ViewMutation{vdel("va"), vdel("nope")},
		Cursor: cursorAt(6),
	})
	wantMissing(t, s, "a")
	wantMissing(t, s, "c")
	wantGet(t, s, "b", 6, "2'")
	if got := collectKeys(t, s, ""); len(got) != 1 || got[0] != "b" {
		t.Fatalf("keys = %v", got)
	}
	if _, ok, err := s.ViewGet([]byte("va")); ok || err != nil {
		t.Fatalf("deleted view still there (%v)", err)
	}
	if v, ok, err := s.ViewGet([]byte("vb")); !ok || err != nil || string(v) != "2" {
		t.Fatalf("ViewGet(vb) = %q %v %v", v, ok, err)
	}
}

// Raw and view keyspaces are separate: the same name in both never collides,
// and a range over one never yields the other (or metadata).
func TestViewsSeparateFromRaw(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{
		Raw:            []Update{put("same", 1, "raw"), put("only-raw", 1, "r")},
		Views:          []ViewMutation{vput("same", "view"), vput("only-view", "v")},
		Cursor:         cursorAt(1),
		PluginIdentity: []byte("id"),
	})
	wantGet(t, s, "same", 1, "raw")
	if v, ok, _ := s.ViewGet([]byte("same")); !ok || string(v) != "view" {
		t.Fatalf("ViewGet(same) = %q %v", v, ok)
	}
	wantMissing(t, s, "only-view")
	if _, ok, _ := s.ViewGet([]byte("only-raw")); ok {
		t.Fatal("raw key visible as a view")
	}
	for _, name := range []string{"format", "cursor", "plugin"} {
		wantMissing(t, s, name)
	}
	if got := collectKeys(t, s, ""); len(got) != 2 || got[0] != "only-raw" || got[1] != "same" {
		t.Fatalf("raw keys = %v", got)
	}
	if v := collectViews(t, s, ""); len(v) != 2 || v["same"] != "view" || v["only-view"] != "v" {
		t.Fatalf("views = %v", v)
	}

	// Deleting the view leaves the raw entry, and vice versa.
	mustCommit(t, s, Commit{Views: []ViewMutation{vdel("same")}, Cursor: cursorAt(2)})
	wantGet(t, s, "same", 1, "raw")
	mustCommit(t, s, Commit{Raw: []Update{del("only-raw")}, Views: []ViewMutation{vput("only-raw", "now a view")}, Cursor: cursorAt(3)})
	wantMissing(t, s, "only-raw")
	if v, ok, _ := s.ViewGet([]byte("only-raw")); !ok || string(v) != "now a view" {
		t.Fatalf("ViewGet(only-raw) = %q %v", v, ok)
	}
}

// Commit copies its input: reusing the caller's buffers afterwards does not
// change what was stored, and values returned by Get are the caller's.
func TestCommitCopiesInput(t *testing.T) {
	s, _ := openTemp(t, Options{})
	buf := []byte("original")
	vkey := []byte("view-key")
	mustCommit(t, s, Commit{
		Raw:    []Update{{Key: "k", Op: OpPut, Rev: 1, Value: buf}},
		Views:  []ViewMutation{{Key: vkey, Op: ViewPut, Value: buf}},
		Cursor: cursorAt(1),
	})
	copy(buf, "CLOBBERD")
	copy(vkey, "XXXXXXXX")
	wantGet(t, s, "k", 1, "original")
	v, ok, _ := s.ViewGet([]byte("view-key"))
	if !ok || string(v) != "original" {
		t.Fatalf("view = %q %v", v, ok)
	}
	e, _, _ := s.Get("k")
	copy(e.Value, "mutated!")
	wantGet(t, s, "k", 1, "original")
}

func TestPluginIdentity(t *testing.T) {
	s, _ := openTemp(t, Options{})
	if _, ok, err := s.PluginIdentity(); ok || err != nil {
		t.Fatalf("fresh store identity found=%v err=%v", ok, err)
	}
	mustCommit(t, s, Commit{Cursor: cursorAt(1), PluginIdentity: []byte("v1")})
	mustCommit(t, s, Commit{Cursor: cursorAt(2)}) // nil: unchanged
	if id, ok, _ := s.PluginIdentity(); !ok || string(id) != "v1" {
		t.Fatalf("identity = %q %v, want v1", id, ok)
	}
	mustCommit(t, s, Commit{Cursor: cursorAt(3), PluginIdentity: []byte{}})
	if id, ok, _ := s.PluginIdentity(); !ok || len(id) != 0 {
		t.Fatalf("identity = %q %v, want empty", id, ok)
	}
}

func TestEmptyValues(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{
		Raw:    []Update{{Key: "k", Op: OpPut, Rev: 1}},
		Views:  []ViewMutation{{Key: []byte("v"), Op: ViewPut}},
		Cursor: cursorAt(1),
	})
	wantGet(t, s, "k", 1, "")
	if v, ok, err := s.ViewGet([]byte("v")); !ok || err != nil || len(v) != 0 {
		t.Fatalf("ViewGet = %q %v %v", v, ok, err)
	}
}

// A commit's writes go into pebble sorted by key (batchorder.go), so the
// contract "a later write of the same key wins" rests on the sort keeping
// the order of equal keys: many writes to few keys, in random order, over
// several commits, against a map of the last write per key.
func TestCommitLastWriteWinsInKeyOrder(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 7))
	s, _ := openTemp(t, Options{})
	raw := map[string]string{}
	views := map[string]string{}
	rev := protocol.Revision(0)
	for range 20 {
		var c Commit
		for range 200 {
			k := fmt.Sprintf("k%d", rng.IntN(12))
			v := fmt.Sprint(rng.Uint32())
			if rng.IntN(4) == 0 {
				c.Raw = append(c.Raw, del(k))
				delete(raw, k)
			} else {
				rev++
				c.Raw = append(c.Raw, put(k, rev, v))
				raw[k] = v
			}
			if rng.IntN(4) == 0 {
				c.Views = append(c.Views, vdel(k))
				delete(views, k)
			} else {
				c.Views = append(c.Views, vput(k, v))
				views[k] = v
			}
		}
		c.Cursor = cursorAt(rev)
		mustCommit(t, s, c)
	}
	for k := range 12 {
		name := fmt.Sprintf("k%d", k)
		e, ok, err := s.Get(name)
		if err != nil || ok != (raw[name] != "") || string(e.Value) != raw[name] {
			t.Fatalf("raw %s = %q %v %v, want %q", name, e.Value, ok, err, raw[name])
		}
	}
	if got := collectViews(t, s, ""); !maps.Equal(got, views) {
		t.Fatalf("views = %v\nwant %v", got, views)
	}
}
