package fold

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

var keyFilterSeed = flag.Uint64("keyfilter.seed", 0, "seed of TestKeyFilterNeverHidesAKey (0: from the clock)")

// TestKeyFilterLevels: every key added is never reported absent, across
// the filter's growth to several levels, whether added and asked as bytes
// or as a string; keys never added are mostly reported absent (the
// false positive rate stays near its design's 1%); a filter switched off
// reports nothing absent. Mutation caught: a level's probe that sets bits
// in another block than it reads (keys reported absent).
func TestKeyFilterLevels(t *testing.T) {
	f := newKeyFilter()
	const n = 300_000 // about 2 levels past the first
	for i := range n {
		if i%2 == 0 {
			f.add(fmt.Appendf(nil, "k%d", i))
		} else {
			f.addString(fmt.Sprintf("k%d", i))
		}
	}
	if len(*f.levels.Load()) < 3 {
		t.Fatalf("%d levels after %d keys, want growth", len(*f.levels.Load()), n)
	}
	for i := range n {
		if f.absentString(fmt.Sprintf("k%d", i)) || f.absent(fmt.Appendf(nil, "k%d", i)) {
			t.Fatalf("key k%d reported absent", i)
		}
	}
	fp := 0
	for i := range n {
		if !f.absentString(fmt.Sprintf("x%d", i)) {
			fp++
		}
	}
	if rate := float64(fp) / n; rate > 0.05 {
		t.Errorf("false positive rate %.3f over %d levels", rate, len(*f.levels.Load()))
	}
	f.off.Store(true)
	if f.absentString("never") {
		t.Error("a filter switched off reported a key absent")
	}
	var none *keyFilter
	none.add([]byte("k"))
	if none.absent([]byte("k")) {
		t.Error("no filter reported a key absent")
	}
}

// TestKeyFilterNeverHidesAKey: seeded random commits of raw updates and
// view mutations (puts and deletes), reopens, and a rebuild's shadow
// activated between them: every read through the store (Get, ViewGet,
// ViewGetBatch) answers what a model of the commits holds. Mutations
// caught: the filter made at open whatever the keyspace holds (keys from
// before the reopen read as absent); a commit that does not tell the
// filter its keys; an activation that keeps the old views' filter.
func TestKeyFilterNeverHidesAKey(t *testing.T) {
	seed := *keyFilterSeed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	t.Logf("seed %d (-args -keyfilter.seed=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	s, dir := openTemp(t, Options{})
	raw, view := map[string]string{}, map[string]string{}
	key := func() string { return fmt.Sprintf("k%03d", rng.IntN(300)) }
	check := func(when string) {
		t.Helper()
		for i := range 300 {
			k := fmt.Sprintf("k%03d", i)
			e, ok, err := s.Get(k)
			if want, has := raw[k]; err != nil || ok != has || (ok && string(e.Value) != want) {
				t.Fatalf("%s: Get(%s) = %q %v %v, want %q %v", when, k, e.Value, ok, err, want, has)
			}
			v, ok, err := s.ViewGet([]byte(k))
			if want, has := view[k]; err != nil || ok != has || (ok && string(v) != want) {
				t.Fatalf("%s: ViewGet(%s) = %q %v %v, want %q %v", when, k, v, ok, err, want, has)
			}
		}
		keys := make([][]byte, 300)
		for i := range keys {
			keys[i] = fmt.Appendf(nil, "k%03d", i)
		}
		if err := s.ViewGetBatch(keys, func(i int, v []byte, ok bool) error {
			if want, has := view[string(keys[i])]; ok != has || (ok && string(v) != want) {
				return fmt.Errorf("ViewGetBatch(%s) = %q %v, want %q %v", keys[i], v, ok, want, has)
			}
			return nil
		}); err != nil {
			t.Fatalf("%s: %v", when, err)
		}
	}
	rev := 0
	for step := range 60 {
		switch r := rng.IntN(10); {
		case r == 0:
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			var err error
			if s, _, err = Open(dir, Options{}); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { s.Close() })
			check(fmt.Sprintf("step %d, after a reopen", step))
			continue
		case r == 1:
			// A rebuild: new views written to a shadow, then activated.
			sh, err := s.BeginShadow()
			if err != nil {
				t.Fatal(err)
			}
			next := map[string]string{}
			var ms []ViewMutation
			for range 20 {
				k, v := key(), fmt.Sprint(rng.Int())
				next[k] = v
				ms = append(ms, vput(k, v))
			}
			if err := sh.Write(ms); err != nil {
				t.Fatal(err)
			}
			rev++
			mustCommit(t, s, Commit{Cursor: cursorAt(protocol.Revision(rev)), Activate: sh})
			view = next
			check(fmt.Sprintf("step %d, after a rebuild", step))
			continue
		}
		var c Commit
		for range 1 + rng.IntN(30) {
			k := key()
			if rng.IntN(4) == 0 {
				c.Raw = append(c.Raw, del(k))
				delete(raw, k)
				c.Views = append(c.Views, vdel(k))
				delete(view, k)
				continue
			}
			rev++
			v := fmt.Sprint(rng.Int())
			c.Raw = append(c.Raw, put(k, protocol.Revision(rev), v))
			raw[k] = v
			if rng.IntN(2) == 0 {
				c.Views = append(c.Views, vput(k, v))
				view[k] = v
			}
		}
		rev++
		c.Cursor = cursorAt(protocol.Revision(rev))
		mustCommit(t, s, c)
		check(fmt.Sprintf("step %d", step))
	}
}
