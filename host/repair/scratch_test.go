package repair

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// TestSorterMatchesModel drives the external sort with tiny chunks and a
// fan-in of 3, so entries go through spills and merges of several levels,
// and compares what it yields with a map: every key once, in order, at its
// highest revision, its value intact (values larger than a run's read
// buffer included). Mutations caught: a merge that keeps the first entry
// of a key instead of the newest, a chunk source that does not skip a
// key's older entries (a key yielded twice).
func TestSorterMatchesModel(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(uint64(seed), 0))
	for round := range 20 {
		l := newSorter(filepath.Join(t.TempDir(), "s"))
		l.chunkLimit = 1 + rng.IntN(4096)
		l.fanIn = 2 + rng.IntN(3)
		model := map[string]entry{}
		used := map[protocol.Revision]bool{}
		keys := 1 + rng.IntN(300)
		for i := range rng.IntN(2000) {
			k := fmt.Sprintf("k%04d", rng.IntN(keys))
			v := bytes.Repeat([]byte{byte(i)}, rng.IntN(64))
			if rng.IntN(200) == 0 {
				v = bytes.Repeat([]byte{byte(i)}, runReadBuf+rng.IntN(1000))
			}
			// Revisions are distinct and mostly in order; some come out
			// of order: the highest of a key still wins.
			rev := protocol.Revision(2*i + 2)
			if r := protocol.Revision(2*rng.IntN(i+1) + 1); rng.IntN(10) == 0 && !used[r] {
				rev = r
			}
			used[rev] = true
			e := entry{Key: []byte(k), Value: v, Rev: rev, Op: fold.Op(rng.IntN(3)), Time: rng.Int64()}
			if old, ok := model[k]; !ok || old.Rev < e.Rev {
				model[k] = e
			}
			if err := sortAdd(l, k, e.Rev, e.Op, e.Time, e.Value); err != nil {
				t.Fatal(err)
			}
		}
		if maxRuns := (l.fanIn - 1) * (1 + levels(l)); len(l.runs) > maxRuns {
			t.Fatalf("round %d: %d runs wait for the final merge, want at most %d", round, len(l.runs), maxRuns)
		}
		it, err := l.iter()
		if err != nil {
			t.Fatal(err)
		}
		var got []string
		for ; it.valid(); it.next() {
			e := it.entry()
			want, ok := model[string(e.Key)]
			switch {
			case !ok:
				t.Fatalf("round %d: key %q never added", round, e.Key)
			case e.Rev != want.Rev:
				t.Fatalf("round %d: key %q at revision %d, want %d", round, e.Key, e.Rev, want.Rev)
			case e.Op != want.Op || e.Time != want.Time || !bytes.Equal(e.Value, want.Value):
				t.Fatalf("round %d: key %q: got %v/%d/%d bytes, want %v/%d/%d bytes", round, e.Key, e.Op, e.Time, len(e.Value), want.Op, want.Time, len(want.Value))
			}
			got = append(got, string(e.Key))
		}
		if err := it.err(); err != nil {
			t.Fatal(err)
		}
		it.close()
		want := make([]string, 0, len(model))
		for k := range model {
			want = append(want, k)
		}
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Fatalf("round %d (chunk %d bytes, fan-in %d): yielded %d keys, want %d distinct in order", round, l.chunkLimit, l.fanIn, len(got), len(want))
		}
	}
}

func levels(l *sorter) int {
	top := 0
	for _, r := range l.runs {
		top = max(top, r.level)
	}
	return top
}

// TestSorterReportsATruncatedRun: a run file cut short (a full disk, a
// file removed under the repair) ends the iterator with an error, never
// with a silently shorter listing (which would read as deleted keys).
func TestSorterReportsATruncatedRun(t *testing.T) {
	l := newSorter(filepath.Join(t.TempDir(), "s"))
	l.chunkLimit = 256
	for i := range 100 {
		if err := sortAdd(l, fmt.Sprintf("k%03d", i), protocol.Revision(i+1), fold.OpPut, 0, []byte(strings.Repeat("v", 20))); err != nil {
			t.Fatal(err)
		}
	}
	if len(l.runs) == 0 {
		t.Fatal("no run was written")
	}
	path := l.runs[0].path
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, fi.Size()-5); err != nil {
		t.Fatal(err)
	}
	it, err := l.iter()
	if err == nil {
		for ; it.valid(); it.next() {
		}
		err = it.err()
		it.close()
	}
	if err == nil || !strings.Contains(err.Error(), path) {
		t.Fatalf("err = %v, want a read error naming %s", err, path)
	}
}
