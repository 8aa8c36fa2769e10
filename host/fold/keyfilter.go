package fold

import (
	"hash/maphash"
	"sync/atomic"
)

// keyFilter says, for one keyspace, "certainly absent" of a key that was
// never written to it since the store opened it empty: a Bloom filter of
// every key a commit wrote there (puts and deletes alike). A plugin's read
// of a key the fold never held (every read of a first hydration) then
// skips pebble's lookup, a seek through the memtable's skiplist and each
// level, which measured as the largest part of a router fold's loop
// (RATIONALE.md, "A filter of the keys a fold never held").
//
// It is exact in one direction only: "absent" is certain, "maybe" is
// answered by pebble. That holds while every write to the keyspace passes
// add before it is applied; the Store adds in Commit (its only writer of
// the raw keyspace and of the views in place) and drops the view filter
// when a commit switches the views to a rebuild's keyspace. A keyspace
// that held a key when the store opened has no filter (nil: always
// "maybe"), and so has one whose filter would pass maxFilterBytes.
//
// One writer (the committer, under Store.commitMu); readers from any
// goroutine. A level's bits are set with atomic ORs, and levels are
// published through an atomic pointer, so a reader never misses a bit set
// before the commit it read after.
type keyFilter struct {
	seed   maphash.Seed
	levels atomic.Pointer[[]*filterLevel]
	off    atomic.Bool // past maxFilterBytes: "maybe" from then on
}

// filterLevel is a blocked Bloom filter for up to cap keys: each key sets
// filterK bits in one 512-bit block (a cache line), so a lookup costs one
// cache miss. At 10 bits a key its false positive rate is about 1%.
type filterLevel struct {
	blocks []atomic.Uint64 // 8 words a block
	n, cap int             // keys added (by the one writer), capacity
}

const (
	filterK             = 7
	filterBitsPerKey    = 10
	filterFirstCap      = 1 << 16
	maxFilterBytes      = 64 << 20 // ~50M keys; past it the keyspace has no filter
	filterWordsPerBlock = 8
)

func newKeyFilter() *keyFilter {
	f := &keyFilter{seed: maphash.MakeSeed()}
	f.levels.Store(&[]*filterLevel{newFilterLevel(filterFirstCap)})
	return f
}

func newFilterLevel(capKeys int) *filterLevel {
	nblocks := max(1, capKeys*filterBitsPerKey/(64*filterWordsPerBlock))
	return &filterLevel{blocks: make([]atomic.Uint64, nblocks*filterWordsPerBlock), cap: capKeys}
}

// probe is where key's bits are: its block's first word, and the bits.
func (l *filterLevel) probe(h uint64) (int, [filterK]uint16) {
	nblocks := uint64(len(l.blocks) / filterWordsPerBlock)
	block := int(((h >> 32) * nblocks) >> 32)
	var bits [filterK]uint16
	h2 := h * 0x9e3779b97f4a7c15
	for i := range bits {
		bits[i] = uint16(h2>>(i*9)) & 511
	}
	return block * filterWordsPerBlock, bits
}

// add records that key was written; addString likewise (the same hash
// for the same bytes). Called by the one writer only, before the write is
// applied.
func (f *keyFilter) add(key []byte) {
	if f != nil && !f.off.Load() {
		f.addHash(maphash.Bytes(f.seed, key))
	}
}

func (f *keyFilter) addString(key string) {
	if f != nil && !f.off.Load() {
		f.addHash(maphash.String(f.seed, key))
	}
}

func (f *keyFilter) addHash(h uint64) {
	ls := *f.levels.Load()
	l := ls[len(ls)-1]
	if l.n >= l.cap {
		size := 0
		for _, l := range ls {
			size += len(l.blocks) * 8
		}
		if size+2*len(l.blocks)*8 > maxFilterBytes {
			f.off.Store(true)
			return
		}
		next := append(ls[:len(ls):len(ls)], newFilterLevel(l.cap*2))
		f.levels.Store(&next)
		l = next[len(next)-1]
	}
	first, bits := l.probe(h)
	for _, b := range bits {
		l.blocks[first+int(b>>6)].Or(1 << (b & 63))
	}
	l.n++
}

// absent reports whether key was certainly never added; absentString
// likewise.
func (f *keyFilter) absent(key []byte) bool {
	return f != nil && !f.off.Load() && f.absentHash(maphash.Bytes(f.seed, key))
}

func (f *keyFilter) absentString(key string) bool {
	return f != nil && !f.off.Load() && f.absentHash(maphash.String(f.seed, key))
}

func (f *keyFilter) absentHash(h uint64) bool {
	for _, l := range *f.levels.Load() {
		first, bits := l.probe(h)
		in := true
		for _, b := range bits {
			if l.blocks[first+int(b>>6)].Load()&(1<<(b&63)) == 0 {
				in = false
				break
			}
		}
		if in {
			return false
		}
	}
	return true
}
