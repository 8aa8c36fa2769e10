package fold

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

func TestOriginRecordSurvivesReopenAndSnapshots(t *testing.T) {
	s, dir := openTemp(t, Options{})
	if _, ok, err := s.Origin(); ok || err != nil {
		t.Fatalf("new store: origin recorded (%v, %v)", ok, err)
	}
	created := time.Unix(1700000000, 123456789)
	want := NewOrigin("routes", []string{"route.", "host.", "route."}, created)
	if err := s.SetOrigin(want); err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, Commit{Cursor: cursorAt(3), Raw: []Update{put("route.a", 3, "x")}})
	s = reopen(t, s, dir)
	got, ok, err := s.Origin()
	if err != nil || !ok || !got.Equal(want) {
		t.Fatalf("reopened: %v %v %v, want %v", got, ok, err, want)
	}
	if got.Bucket != "routes" || len(got.Scope) != 2 || got.Scope[0] != "host." || !got.StreamCreated.Equal(created) {
		t.Fatalf("not normalized: %+v", got)
	}
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	if so, ok, err := sn.Origin(); err != nil || !ok || !so.Equal(want) {
		t.Fatalf("snapshot origin %v %v %v", so, ok, err)
	}
	// A record that does not decode is corruption, not "no record".
	if err := s.db.Set(metaOriginKey, []byte("{"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Origin(); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("garbled record: err = %v, want ErrCorrupt", err)
	}
}

func TestOriginMismatch(t *testing.T) {
	t1, t2 := time.Unix(1700000000, 1), time.Unix(1700000000, 2)
	base := NewOrigin("routes", []string{"route."}, t1)
	for _, c := range []struct {
		name string
		want Origin
		diff string // "" = agrees
	}{
		{"same", NewOrigin("routes", []string{"route."}, t1), ""},
		{"prefix order and duplicates do not matter", NewOrigin("routes", []string{"route.", "route."}, t1), ""},
		{"unknown stream agrees", NewOrigin("routes", []string{"route."}, time.Time{}), ""},
		{"bucket", NewOrigin("other", []string{"route."}, t1), `bucket "routes", not "other"`},
		{"scope", NewOrigin("routes", nil, t1), "scope"},
		{"stream", NewOrigin("routes", []string{"route."}, t2), "stream created"},
		{"another bucket's stream is not compared", NewOrigin("other", []string{"route."}, t2), `bucket "routes", not "other"`},
	} {
		d := base.Mismatch(c.want)
		if (c.diff == "") != (d == "") || !strings.Contains(d, c.diff) || (c.want.Bucket != base.Bucket && strings.Contains(d, "stream")) {
			t.Errorf("%s: Mismatch = %q, want %q", c.name, d, c.diff)
		}
	}
	if base.Equal(NewOrigin("routes", []string{"route."}, time.Time{})) {
		t.Error("Equal ignores an unknown stream identity")
	}
}
