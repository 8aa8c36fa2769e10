package fold

import (
	"bytes"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// ViewScan calls fn for every view key k with start <= k < end (an empty
// end: no upper bound), in key order or, with reverse, from the last key
// down: a plugin query's range read (ABI minor 2). fn's slices alias
// pebble's buffers, valid during the call only (as [Reader]'s ranges); its
// non-nil error stops the scan and is returned unchanged.
func (sn *Snapshot) ViewScan(start, end []byte, reverse bool, fn func(key, value []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	return viewScan(sn.snap, sn.view, start, end, reverse, fn)
}

func viewScan(r pebble.Reader, space byte, start, end []byte, reverse bool, fn func(key, value []byte) error) error {
	lower := appendKey(nil, space, start)
	_, upper := prefixBounds(space, []byte(nil)) // the end of the space
	if len(end) > 0 {
		upper = appendKey(nil, space, end)
	}
	if bytes.Compare(lower, upper) >= 0 {
		return nil
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("fold: view scan: %w", err)
	}
	first, next := it.First, it.Next
	if reverse {
		first, next = it.Last, it.Prev
	}
	for ok := first(); ok; ok = next() {
		var v []byte
		if v, err = it.ValueAndErr(); err != nil {
			break
		}
		if err := fn(it.Key()[1:], v); err != nil {
			_ = it.Close()
			return err
		}
	}
	if cerr := it.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("fold: view scan: %w", err)
	}
	return nil
}
