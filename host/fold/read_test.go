package fold

import (
	"errors"
	"fmt"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// rangeKeys is the fixture of the range contract tests; ascending bytewise.
var rangeKeys = []string{
	"a",
	"a.1",
	"a.2",
	"ab",
	"a\xfe",
	"a\xff",
	"a\xff\x00",
	"a\xff\xff",
	"a\xff\xff\x01",
	"b",
	"b.1",
	"\xff",
	"\xff\xff",
}

// TestReaderContract runs the read contract against every Reader: the Store
// itself and a Snapshot of it.
func TestReaderContract(t *testing.T) {
	readers := map[string]func(t *testing.T, s *Store) Reader{
		"Store": func(t *testing.T, s *Store) Reader { return s },
		"Snapshot": func(t *testing.T, s *Store) Reader {
			sn, err := s.Snapshot()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sn.Close() })
			// Commits after the snapshot must not show through it.
			mustCommit(t, s, Commit{
				Raw:    []Update{put("a.3", 100, "late"), del("a.1")},
				Views:  []ViewMutation{vput("a.3", "late"), vdel("a.1")},
				Cursor: cursorAt(100),
			})
			return sn
		},
	}
	for name, mk := range readers {
		t.Run(name, func(t *testing.T) {
			s, _ := openTemp(t, Options{})
			c := Commit{Cursor: cursorAt(protocol.Revision(len(rangeKeys)))}
			for i, k := range slices.Backward(rangeKeys) { // insertion order must not matter
				c.Raw = append(c.Raw, put(k, protocol.Revision(i+1), "r"+k))
				c.Views = append(c.Views, vput(k, "v"+k))
			}
			mustCommit(t, s, c)
			r := mk(t, s)
			testRanges(t, r)
		})
	}
}

func testRanges(t *testing.T, r Reader) {
	if !slices.IsSorted(rangeKeys) {
		t.Fatal("fixture rangeKeys not sorted")
	}
	if r.Cursor() != cursorAt(protocol.Revision(len(rangeKeys))) {
		t.Fatalf("Cursor = %v", r.Cursor())
	}
	for _, prefix := range []string{"", "a", "a.", "a\xff", "a\xff\xff", "ab", "b", "\xff", "\xff\xff", "c", "a.3"} {
		var want []string
		for _, k := range rangeKeys {
			if strings.HasPrefix(k, prefix) {
				want = append(want, k)
			}
		}
		if got := collectKeys(t, r, prefix); !slices.Equal(got, want) {
			t.Errorf("RawKeys(%q) = %q, want %q", prefix, got, want)
		}
		items := collectRaw(t, r, prefix)
		if len(items) != len(want) {
			t.Errorf("RawRange(%q) = %v, want keys %q", prefix, items, want)
			continue
		}
		for i, it := range items {
			if it.Key != want[i] || it.Value != "r"+want[i] {
				t.Errorf("RawRange(%q)[%d] = %+v, want key %q", prefix, i, it, want[i])
			}
		}
		views := collectViews(t, r, prefix)
		if len(views) != len(want) {
			t.Errorf("ViewRange(%q) = %v, want keys %q", prefix, views, want)
		}
		for _, k := range want {
			if views[k] != "v"+k {
				t.Errorf("ViewRange(%q)[%q] = %q", prefix, k, views[k])
			}
		}
	}
	wantGet(t, r, "a.1", 2, "ra.1") // rangeKeys[1], revision = index+1
	wantMissing(t, r, "a.3")
	if _, ok, _ := r.ViewGet([]byte("a.3")); ok {
		t.Error("ViewGet(a.3) found")
	}

	// A callback error stops the range and comes back unchanged.
	stop := errors.New("stop here")
	n := 0
	err := r.RawRange("", func([]byte, protocol.Revision, []byte) error {
		n++
		if n == 3 {
			return stop
		}
		return nil
	})
	if err != stop || n != 3 {
		t.Errorf("RawRange with failing callback: err %v after %d calls", err, n)
	}
	n = 0
	if err := r.RawKeys("a", func([]byte) error { n++; return stop }); err != stop || n != 1 {
		t.Errorf("RawKeys with failing callback: err %v after %d calls", err, n)
	}
	if err := r.ViewRange(nil, func(_, _ []byte) error { return stop }); err != stop {
		t.Errorf("ViewRange with failing callback: %v", err)
	}
}

func TestPrefixBounds(t *testing.T) {
	cases := []struct{ prefix, lower, upper string }{
		{"", "r", "s"},
		{"a", "ra", "rb"},
		{"a\xff", "ra\xff", "rb"},
		{"a\xff\xff", "ra\xff\xff", "rb"},
		{"\xff", "r\xff", "s"},
		{"a\xfe", "ra\xfe", "ra\xff"},
	}
	for _, tc := range cases {
		lo, hi := prefixBounds(spaceRaw, tc.prefix)
		if string(lo) != tc.lower || string(hi) != tc.upper {
			t.Errorf("prefixBounds(%q) = %q, %q; want %q, %q", tc.prefix, lo, hi, tc.lower, tc.upper)
		}
	}
}

// A Snapshot's cursor and data come from the same instant.
func TestSnapshotIsolation(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{Raw: []Update{put("k", 1, "old")}, Cursor: cursorAt(1)})
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	mustCommit(t, s, Commit{Raw: []Update{put("k", 2, "new"), put("k2", 2, "x")}, Cursor: cursorAt(2)})
	if sn.Cursor() != cursorAt(1) || s.Cursor() != cursorAt(2) {
		t.Fatalf("cursors: snapshot %v store %v", sn.Cursor(), s.Cursor())
	}
	wantGet(t, sn, "k", 1, "old")
	wantMissing(t, sn, "k2")
	wantGet(t, s, "k", 2, "new")
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
	if err := sn.Close(); err != nil {
		t.Fatalf("second Snapshot.Close: %v", err)
	}
	if _, _, err := sn.Get("k"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Get on closed snapshot: %v", err)
	}
}

// A damaged raw record is reported as corruption, not returned as data.
func TestCorruptRecord(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{Raw: []Update{put("good", 1, "v")}, Cursor: cursorAt(1)})
	if err := s.db.Set(appendKey(nil, spaceRaw, "bad"), []byte{1, 2, 3}, pebble.NoSync); err != nil {
		t.Fatal(err)
	}
	s.rawFilter.Load().addString("bad") // a write beside Commit tells the key filter, as Commit does
	if _, _, err := s.Get("bad"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Get(bad): %v, want ErrCorrupt", err)
	}
	if err := s.RawRange("", func([]byte, protocol.Revision, []byte) error { return nil }); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("RawRange: %v, want ErrCorrupt", err)
	}
	// Keys-only listing does not decode values, so it still works.
	if got := collectKeys(t, s, ""); len(got) != 2 {
		t.Fatalf("keys = %q", got)
	}
}

// Listing 100k keys streams: allocations do not grow with the key count and
// the heap does not hold the fold.
func TestRawKeysStreamsWithBoundedAllocations(t *testing.T) {
	const n = 100_000
	s, _ := openTemp(t, Options{MemTableSize: 4 << 20}) // force flushes to sstables
	value := make([]byte, 100)
	for base := 0; base < n; base += 5000 {
		c := Commit{Cursor: cursorAt(protocol.Revision(base + 5000))}
		for i := base; i < base+5000; i++ {
			c.Raw = append(c.Raw, Update{Key: fmt.Sprintf("key.%07d", i), Op: OpPut, Rev: protocol.Revision(i + 1), Value: value})
		}
		mustCommit(t, s, c)
	}
	// The diff's use: membership against a listing, no per-key allocation.
	listing := make(map[string]struct{}, n)
	for i := 0; i < n; i += 2 {
		listing[fmt.Sprintf("key.%07d", i)] = struct{}{}
	}
	var seen, inListing int
	fn := func(k []byte) error {
		seen++
		if _, ok := listing[string(k)]; ok {
			inListing++
		}
		return nil
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	allocs := testing.AllocsPerRun(3, func() {
		seen, inListing = 0, 0
		if err := s.RawKeys("", fn); err != nil {
			t.Fatal(err)
		}
	})
	runtime.ReadMemStats(&after)
	if seen != n || inListing != n/2 {
		t.Fatalf("saw %d keys (%d in listing), want %d (%d)", seen, inListing, n, n/2)
	}
	perRun := (after.TotalAlloc - before.TotalAlloc) / 4 // AllocsPerRun runs once more to warm up
	t.Logf("RawKeys over %d keys: %.0f allocs, ~%d bytes allocated per run", n, allocs, perRun)
	if allocs > 1000 && !raceEnabled {
		t.Fatalf("RawKeys made %.0f allocations for %d keys: it allocates per key", allocs, n)
	}
	if perRun > 4<<20 && !raceEnabled {
		t.Fatalf("RawKeys allocated %d bytes for %d keys (~%d bytes of keys): not streaming", perRun, n, n*11)
	}

	// RawRange likewise does not allocate per entry.
	allocs = testing.AllocsPerRun(2, func() {
		if err := s.RawRange("key.", func([]byte, protocol.Revision, []byte) error { return nil }); err != nil {
			t.Fatal(err)
		}
	})
	if allocs > 1000 && !raceEnabled {
		t.Fatalf("RawRange made %.0f allocations for %d keys", allocs, n)
	}
}

// TestDigest: equal folds have equal digests; a value, a revision or a view
// that differs changes it.
func TestDigest(t *testing.T) {
	digest := func(c Commit) string {
		t.Helper()
		s, _ := openTemp(t, Options{})
		mustCommit(t, s, c)
		d, err := Digest(s)
		if err != nil {
			t.Fatal(err)
		}
		return d
	}
	base := Commit{Raw: []Update{put("a", 1, "x"), put("b", 2, "y")}, Views: []ViewMutation{vput("v", "1")}, Cursor: cursorAt(2)}
	d0 := digest(base)
	if d := digest(base); d != d0 {
		t.Fatal("equal folds, different digests")
	}
	for name, c := range map[string]Commit{
		"value":    {Raw: []Update{put("a", 1, "X"), put("b", 2, "y")}, Views: base.Views, Cursor: cursorAt(2)},
		"revision": {Raw: []Update{put("a", 1, "x"), put("b", 3, "y")}, Views: base.Views, Cursor: cursorAt(3)},
		"view":     {Raw: base.Raw, Views: []ViewMutation{vput("v", "2")}, Cursor: cursorAt(2)},
	} {
		if digest(c) == d0 {
			t.Errorf("a different %s, the same digest", name)
		}
	}
}

// TestSnapshotShare: a share reads the same instant as the snapshot it came
// from, outlives it, and is released with the store; the pebble snapshot
// is closed once, by the last share (a double close would panic in pebble
// or report an error from Store.Close).
func TestSnapshotShare(t *testing.T) {
	s, _ := openTemp(t, Options{})
	mustCommit(t, s, Commit{Raw: []Update{put("a", 1, "one")}, Cursor: cursorAt(1)})
	sn, err := s.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	sh, err := sn.Share()
	if err != nil {
		t.Fatal(err)
	}
	mustCommit(t, s, Commit{Raw: []Update{put("a", 2, "two")}, Cursor: cursorAt(2)})
	if err := sn.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Share(); !errors.Is(err, ErrClosed) {
		t.Fatalf("Share of a closed snapshot: %v, want ErrClosed", err)
	}
	e, ok, err := sh.Get("a")
	if err != nil || !ok || string(e.Value) != "one" || sh.Cursor().Rev != 1 {
		t.Fatalf("share after the original closed: %q %t %v, cursor %v; want the first instant", e.Value, ok, err, sh.Cursor())
	}
	sh2, err := sh.Share()
	if err != nil {
		t.Fatal(err)
	}
	if err := sh.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("store close with a share open: %v", err)
	}
	if _, _, err := sh2.Get("a"); !errors.Is(err, ErrClosed) {
		t.Fatalf("share read after the store closed: %v, want ErrClosed", err)
	}
	if err := sh2.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestViewGetBatch: the batched view read answers every key as ViewGet
// does (present, absent, asked twice, outside the keyspace's neighbours),
// each at its index.
func TestViewGetBatch(t *testing.T) {
	s, _ := openTemp(t, Options{})
	var views []ViewMutation
	for i := range 200 {
		views = append(views, ViewMutation{Op: ViewPut, Key: []byte(fmt.Sprintf("k%03d", i*2)), Value: []byte(fmt.Sprint(i))})
	}
	if err := s.Commit(Commit{Views: views, Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(Commit{Raw: []Update{{Key: "k001", Rev: 2, Op: OpPut, Value: []byte("raw")}}, Cursor: protocol.Cursor{Rev: 2}}); err != nil {
		t.Fatal(err)
	}
	keys := [][]byte{[]byte("k399"), []byte("k001"), []byte("k000"), []byte("zzz"), []byte("k398"), []byte("k000"), []byte(""), []byte("k2")}
	seen := make([]bool, len(keys))
	err := s.ViewGetBatch(keys, func(i int, v []byte, found bool) error {
		if seen[i] {
			t.Errorf("key %d answered twice", i)
		}
		seen[i] = true
		want, wantFound, err := s.ViewGet(keys[i])
		if err != nil {
			return err
		}
		if found != wantFound || string(v) != string(want) {
			t.Errorf("key %q: got %q %v, ViewGet says %q %v", keys[i], v, found, want, wantFound)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, ok := range seen {
		if !ok {
			t.Errorf("key %q never answered", keys[i])
		}
	}
}

// TestSnapshotCursorUnderCommits: a Snapshot taken while commits run (some
// of them switching the views to a rebuild's keyspace) states the cursor
// and view keyspace its own data holds, whether it took the Store's copies
// (no commit in between) or read them from pebble; both ways are taken.
// Mutation caught: Snapshot always taking the copies (a commit landing
// between reading them and taking the snapshot: the stated cursor lags
// the data).
func TestSnapshotCursorUnderCommits(t *testing.T) {
	s, _ := openTemp(t, Options{})
	const commits = 3000
	done := make(chan error, 1)
	go func() {
		for i := 1; i <= commits; i++ {
			c := Commit{Raw: []Update{put(fmt.Sprintf("k%d", i%50), protocol.Revision(i), "v")}, Cursor: cursorAt(protocol.Revision(i))}
			if i%500 == 0 { // a rebuild's switch: the view keyspace changes with this cursor
				sh, err := s.BeginShadow()
				if err != nil {
					done <- err
					return
				}
				c.Activate = sh
			}
			if err := s.Commit(c); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	var snaps, copies int
	check := func() {
		before := s.snapReads.Load()
		sn, err := s.Snapshot()
		if err != nil {
			t.Fatal(err)
		}
		defer sn.Close()
		if s.snapReads.Load() == before {
			copies++
		}
		snaps++
		cur, err := readCursor(sn.snap)
		if err != nil {
			t.Fatal(err)
		}
		view, err := readViewSpace(sn.snap)
		if err != nil {
			t.Fatal(err)
		}
		if sn.Cursor() != cur || sn.view != view {
			t.Fatalf("snapshot %d states cursor %v, view %c; its data holds %v, %c", snaps, sn.Cursor(), sn.view, cur, view)
		}
	}
	for running := true; running; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			running = false
		default:
			check()
		}
	}
	check()
	if reads := s.snapReads.Load(); copies == 0 || reads == 0 {
		t.Fatalf("%d snapshots: %d took the copies, %d read pebble; want both ways taken", snaps, copies, reads)
	}
	t.Logf("%d snapshots beside %d commits: %d took the Store's copies, %d read pebble", snaps, commits, copies, s.snapReads.Load())
}
