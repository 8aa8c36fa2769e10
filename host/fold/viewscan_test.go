package fold

import (
	"strings"
	"testing"

	"github.com/foldhost/foldhost/protocol"
)

// TestViewScanBoundsAndDirection: [start, end) in either direction, an
// empty end unbounded, and the snapshot's instant, not the store's.
func TestViewScanBoundsAndDirection(t *testing.T) {
	st, _, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var views []ViewMutation
	for _, k := range []string{"a", "b", "b/1", "b/2", "c", "\xff"} {
		views = append(views, ViewMutation{Op: ViewPut, Key: []byte(k), Value: []byte("v" + k)})
	}
	if err := st.Commit(Commit{Views: views, Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	sn, err := st.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	if err := st.Commit(Commit{Views: []ViewMutation{{Op: ViewPut, Key: []byte("b/3"), Value: []byte("x")}}, Cursor: protocol.Cursor{Rev: 2}}); err != nil {
		t.Fatal(err)
	}
	scan := func(start, end string, rev bool) string {
		var got []string
		if err := sn.ViewScan([]byte(start), []byte(end), rev, func(k, v []byte) error {
			if string(v) != "v"+string(k) {
				t.Fatalf("%q = %q", k, v)
			}
			got = append(got, string(k))
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		return strings.Join(got, ",")
	}
	for _, c := range []struct {
		start, end string
		rev        bool
		want       string
	}{
		{"b", "c", false, "b,b/1,b/2"},
		{"b", "c", true, "b/2,b/1,b"},
		{"b/", "b0", false, "b/1,b/2"},
		{"", "", false, "a,b,b/1,b/2,c,\xff"},
		{"c", "", true, "\xff,c"},
		{"c", "b", false, ""},
		{"b", "b", false, ""},
	} {
		if got := scan(c.start, c.end, c.rev); got != c.want {
			t.Errorf("[%q, %q) reverse %v = %q, want %q", c.start, c.end, c.rev, got, c.want)
		}
	}
}
