package fold

import (
	"bytes"
	"cmp"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// pointWrites puts a commit's point writes (raw records and view
// mutations) into its pebble batch in key order, one write per key: the
// last one given, as a commit's contract says.
//
// Why: pebble inserts a batch into the memtable's skiplist entry by entry,
// and its inserter starts each search from the previous entry's position
// when the new key lies just after it. In key order most of a search is
// skipped; in arrival order (a plugin's view keys are scattered across the
// keyspace) every entry searches from the top of a skiplist that holds
// hundreds of thousands of keys, a cache miss per level. Measured with
// BenchmarkCommitShapes: router-shaped commits 1.27-1.40x faster in key order.
// RATIONALE.md, "Commits go into pebble in key order".
//
// The zero value is ready; a Store keeps one, used under commitMu, so its
// buffers are reused from commit to commit.
type pointWrites struct {
	keys []byte // every key, back to back
	ops  []pointWrite
	// arrivalOrder writes every op in the order given instead (the
	// equivalent pebble batch): BenchmarkCommitShapes measures the sort
	// against it. Never set outside benchmarks.
	arrivalOrder bool
}

type pointWrite struct {
	start, end int  // the key, keys[start:end]; start also orders equal keys
	del        bool // a delete; otherwise a put of val
	record     bool // val is a raw value stored with rev
	rev        protocol.Revision
	val        []byte // the caller's, valid until the batch is built
}

func (w *pointWrites) reset() {
	w.keys = w.keys[:0]
	clear(w.ops) // drop references to the caller's values
	w.ops = w.ops[:0]
}

// addWrite appends op for the key name in keyspace space.
func addWrite[T string | []byte](w *pointWrites, space byte, name T, op pointWrite) {
	op.start = len(w.keys)
	w.keys = appendKey(w.keys, space, name)
	op.end = len(w.keys)
	w.ops = append(w.ops, op)
}

func (w *pointWrites) addRaw(raw []Update) {
	for _, u := range raw {
		addWrite(w, spaceRaw, u.Key, pointWrite{del: u.Op != OpPut, record: true, rev: u.Rev, val: u.Value})
	}
}

func (w *pointWrites) addViews(space byte, views []ViewMutation) {
	for _, m := range views {
		addWrite(w, space, m.Key, pointWrite{del: m.Op == ViewDelete, val: m.Value})
	}
}

func (w *pointWrites) key(op *pointWrite) []byte { return w.keys[op.start:op.end] }

// writeTo adds the writes to b in key order, dropping every write a later
// write of the same key replaces. Equal keys are ordered by where they sit
// in keys, which is the order they were added in: the last added stays
// last.
func (w *pointWrites) writeTo(b *pebble.Batch) error {
	if w.arrivalOrder {
		return w.write(b, false)
	}
	slices.SortFunc(w.ops, func(x, y pointWrite) int {
		if c := bytes.Compare(w.keys[x.start:x.end], w.keys[y.start:y.end]); c != 0 {
			return c
		}
		return cmp.Compare(x.start, y.start)
	})
	return w.write(b, true)
}

// write adds the ops to b in their order; with sorted, an op whose key the
// next op's repeats is left out (it replaces it).
func (w *pointWrites) write(b *pebble.Batch, sorted bool) error {
	for i := range w.ops {
		op := &w.ops[i]
		key := w.key(op)
		if sorted && i+1 < len(w.ops) && bytes.Equal(key, w.key(&w.ops[i+1])) {
			continue // replaced by the next
		}
		var err error
		switch {
		case op.del:
			err = b.Delete(key, nil)
		case op.record:
			d := b.SetDeferred(len(key), recordLen(op.val))
			copy(d.Key, key)
			putRecord(d.Value, op.rev, op.val)
			err = d.Finish()
		default:
			err = b.Set(key, op.val, nil)
		}
		if err != nil {
			return fmt.Errorf("batch: %w", err)
		}
	}
	return nil
}
