package fold

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

var keyFilterSeed = flag.Uint64("keyfilter.seed", 0, "seed of TestKeyFilterNeverHidesAKey's random walk (0: seed 1, then one from the clock)")

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

// TestKeyFilterNeverHidesAKey: every read through the store (Get,
// ViewGet, ViewGetBatch) answers what a model of the commits holds, first
// along a fixed script, then along seeded random walks.
//
// The script, on a fresh store, catches each of these mutations in every
// run, before any random walk: a commit that does not add its raw or its view
// keys to the filter (its keys are read right after the first commit, with
// both filters live); an activation (a rebuild's shadow switched in) that
// keeps the old views' filter (the shadow holds keys the old views never
// did, read right after the activation, with no reopen in between); the
// filter made at open whatever the keyspace holds (keys from before a
// reopen read as absent).
//
// The random walks (commits of raw updates and view mutations, puts and
// deletes, reopens, rebuilds) run seed 1 and one from the clock, or only
// -keyfilter.seed when it is set; a failing walk logs its seed.
func TestKeyFilterNeverHidesAKey(t *testing.T) {
	t.Run("script", func(t *testing.T) {
		r := newFilterRig(t)
		// Fresh store: both filters live, so the first commit's keys are
		// read through them.
		var c Commit
		for i := range 20 {
			k := fmt.Sprintf("k%03d", i)
			c.Raw = append(c.Raw, r.rawPut(k))
			if i < 10 {
				c.Views = append(c.Views, r.viewPut(k))
			}
		}
		r.commit(c, "after the first commit")
		r.commit(Commit{
			Raw:   []Update{r.rawDel("k000"), r.rawPut("k020")},
			Views: []ViewMutation{r.viewDel("k000"), r.viewPut("k020")},
		}, "after a second commit")
		// A rebuild whose views hold keys the old views never held (raw
		// only, or never written), read with no reopen in between.
		var next []string
		for i := 5; i < 15; i++ {
			next = append(next, fmt.Sprintf("k%03d", i))
		}
		for i := 100; i < 110; i++ {
			next = append(next, fmt.Sprintf("k%03d", i))
		}
		r.rebuild(next, "after a rebuild")
		r.commit(Commit{
			Raw:   []Update{r.rawPut("k200")},
			Views: []ViewMutation{r.viewPut("k200"), r.viewDel("k005")},
		}, "after a commit past the rebuild")
		r.reopen("after a reopen")
		r.commit(Commit{
			Raw:   []Update{r.rawPut("k201")},
			Views: []ViewMutation{r.viewPut("k201")},
		}, "after a commit past the reopen")
	})
	seeds := []uint64{1, uint64(time.Now().UnixNano())}
	if *keyFilterSeed != 0 {
		seeds = []uint64{*keyFilterSeed}
	}
	for _, seed := range seeds {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Logf("seed %d (-args -keyfilter.seed=%d)", seed, seed)
			keyFilterWalk(t, rand.New(rand.NewPCG(seed, seed)))
		})
	}
}

// keyFilterWalk: 60 random steps of TestKeyFilterNeverHidesAKey.
func keyFilterWalk(t *testing.T, rng *rand.Rand) {
	r := newFilterRig(t)
	key := func() string { return fmt.Sprintf("k%03d", rng.IntN(filterRigKeys)) }
	for step := range 60 {
		switch n := rng.IntN(10); {
		case n == 0:
			r.reopen(fmt.Sprintf("step %d, after a reopen", step))
			continue
		case n == 1:
			var next []string
			for range 20 {
				next = append(next, key())
			}
			r.rebuild(next, fmt.Sprintf("step %d, after a rebuild", step))
			continue
		}
		var c Commit
		for range 1 + rng.IntN(30) {
			k := key()
			if rng.IntN(4) == 0 {
				c.Raw = append(c.Raw, r.rawDel(k))
				c.Views = append(c.Views, r.viewDel(k))
				continue
			}
			c.Raw = append(c.Raw, r.rawPut(k))
			if rng.IntN(2) == 0 {
				c.Views = append(c.Views, r.viewPut(k))
			}
		}
		r.commit(c, fmt.Sprintf("step %d", step))
	}
}

// filterRigKeys: the keys a filterRig reads, k000 to k299.
const filterRigKeys = 300

// filterRig is a store and a model of what its raw fold and views hold.
// Its mutation makers (rawPut, viewDel...) update the model as they make
// the mutation; commit commits them and checks every key.
type filterRig struct {
	t         *testing.T
	s         *Store
	dir       string
	raw, view map[string]string
	rev       int
}

func newFilterRig(t *testing.T) *filterRig {
	s, dir := openTemp(t, Options{})
	return &filterRig{t: t, s: s, dir: dir, raw: map[string]string{}, view: map[string]string{}}
}

func (r *filterRig) rawPut(k string) Update {
	r.rev++
	v := fmt.Sprintf("raw %s at %d", k, r.rev)
	r.raw[k] = v
	return put(k, protocol.Revision(r.rev), v)
}

func (r *filterRig) rawDel(k string) Update {
	delete(r.raw, k)
	return del(k)
}

func (r *filterRig) viewPut(k string) ViewMutation {
	r.rev++
	v := fmt.Sprintf("view %s at %d", k, r.rev)
	r.view[k] = v
	return vput(k, v)
}

func (r *filterRig) viewDel(k string) ViewMutation {
	delete(r.view, k)
	return vdel(k)
}

func (r *filterRig) commit(c Commit, when string) {
	r.t.Helper()
	r.rev++
	c.Cursor = cursorAt(protocol.Revision(r.rev))
	mustCommit(r.t, r.s, c)
	r.check(when)
}

// rebuild writes views of keys to a shadow and activates it.
func (r *filterRig) rebuild(keys []string, when string) {
	r.t.Helper()
	sh, err := r.s.BeginShadow()
	if err != nil {
		r.t.Fatal(err)
	}
	r.view = map[string]string{}
	var ms []ViewMutation
	for _, k := range keys {
		ms = append(ms, r.viewPut(k))
	}
	if err := sh.Write(ms); err != nil {
		r.t.Fatal(err)
	}
	r.commit(Commit{Activate: sh}, when)
}

func (r *filterRig) reopen(when string) {
	r.t.Helper()
	if err := r.s.Close(); err != nil {
		r.t.Fatal(err)
	}
	s, _, err := Open(r.dir, Options{})
	if err != nil {
		r.t.Fatal(err)
	}
	r.s = s
	r.t.Cleanup(func() { s.Close() })
	r.check(when)
}

// check reads every key through Get, ViewGet and ViewGetBatch.
func (r *filterRig) check(when string) {
	r.t.Helper()
	keys := make([][]byte, filterRigKeys)
	for i := range keys {
		keys[i] = fmt.Appendf(nil, "k%03d", i)
		k := string(keys[i])
		e, ok, err := r.s.Get(k)
		if want, has := r.raw[k]; err != nil || ok != has || (ok && string(e.Value) != want) {
			r.t.Fatalf("%s: Get(%s) = %q %v %v, want %q %v", when, k, e.Value, ok, err, want, has)
		}
		v, ok, err := r.s.ViewGet(keys[i])
		if want, has := r.view[k]; err != nil || ok != has || (ok && string(v) != want) {
			r.t.Fatalf("%s: ViewGet(%s) = %q %v %v, want %q %v", when, k, v, ok, err, want, has)
		}
	}
	if err := r.s.ViewGetBatch(keys, func(i int, v []byte, ok bool) error {
		if want, has := r.view[string(keys[i])]; ok != has || (ok && string(v) != want) {
			return fmt.Errorf("ViewGetBatch(%s) = %q %v, want %q %v", keys[i], v, ok, want, has)
		}
		return nil
	}); err != nil {
		r.t.Fatalf("%s: %v", when, err)
	}
}
