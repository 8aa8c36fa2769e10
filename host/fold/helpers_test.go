package fold

import (
	"bytes"
	"errors"
	"path/filepath"
	"testing"

	"github.com/foldhost/foldhost/protocol"
)

// openTemp opens a fresh store in a temp dir; it is closed at cleanup unless
// the test closed it.
func openTemp(t testing.TB, opts Options) (*Store, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "fold")
	s, cur, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	if cur != (protocol.Cursor{}) {
		t.Fatalf("fresh store cursor = %v, want zero", cur)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && !errors.Is(err, ErrClosed) {
			t.Errorf("Close: %v", err)
		}
	})
	return s, dir
}

func mustCommit(t testing.TB, s *Store, c Commit) {
	t.Helper()
	if err := s.Commit(c); err != nil {
		t.Fatalf("Commit(cursor %v): %v", c.Cursor, err)
	}
}

func put(key string, rev protocol.Revision, value string) Update {
	return Update{Key: key, Op: OpPut, Rev: rev, Value: []byte(value)}
}

func del(key string) Update { return Update{Key: key, Op: OpDelete} }

func vput(key, value string) ViewMutation {
	return ViewMutation{Key: []byte(key), Op: ViewPut, Value: []byte(value)}
}

func vdel(key string) ViewMutation { return ViewMutation{Key: []byte(key), Op: ViewDelete} }

func cursorAt(rev protocol.Revision) protocol.Cursor { return protocol.Cursor{Rev: rev} }

// rawItem is a copied raw entry, for comparisons.
type rawItem struct {
	Key   string
	Rev   protocol.Revision
	Value string
}

func collectRaw(t testing.TB, r Reader, prefix string) []rawItem {
	t.Helper()
	var out []rawItem
	err := r.RawRange(prefix, func(k []byte, rev protocol.Revision, v []byte) error {
		out = append(out, rawItem{string(k), rev, string(v)})
		return nil
	})
	if err != nil {
		t.Fatalf("RawRange(%q): %v", prefix, err)
	}
	return out
}

func collectKeys(t testing.TB, r Reader, prefix string) []string {
	t.Helper()
	var out []string
	if err := r.RawKeys(prefix, func(k []byte) error { out = append(out, string(k)); return nil }); err != nil {
		t.Fatalf("RawKeys(%q): %v", prefix, err)
	}
	return out
}

func collectViews(t testing.TB, r Reader, prefix string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var last []byte
	err := r.ViewRange([]byte(prefix), func(k, v []byte) error {
		if last != nil && bytes.Compare(last, k) >= 0 {
			t.Errorf("ViewRange out of order: %q then %q", last, k)
		}
		last = append(last[:0], k...)
		out[string(k)] = string(v)
		return nil
	})
	if err != nil {
		t.Fatalf("ViewRange(%q): %v", prefix, err)
	}
	return out
}

func wantGet(t testing.TB, r Reader, key string, rev protocol.Revision, value string) {
	t.Helper()
	e, ok, err := r.Get(key)
	if err != nil || !ok || e.Rev != rev || string(e.Value) != value {
		t.Fatalf("Get(%q) = %v %q found=%v err=%v, want %v %q", key, e.Rev, e.Value, ok, err, rev, value)
	}
}

func wantMissing(t testing.TB, r Reader, key string) {
	t.Helper()
	e, ok, err := r.Get(key)
	if err != nil || ok {
		t.Fatalf("Get(%q) = %v %q found=%v err=%v, want missing", key, e.Rev, e.Value, ok, err)
	}
}

// reopen closes s and opens its directory dir again (closed at the
// test's end): what a restart reads back.
func reopen(t *testing.T, s *Store, dir string) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, _, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}
