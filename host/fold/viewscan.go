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
	it, err := sn.ViewIter(start, end, reverse)
	if err != nil {
		return err
	}
	for {
		k, v, ok := it.Next()
		if !ok {
			break
		}
		if err := fn(k, v); err != nil {
			_ = it.Close()
			return err
		}
	}
	return it.Close()
}

// ViewIter is ViewScan's range pulled one entry at a time, by a caller
// that steps several at once (a partitioned fold's query merges its
// units' ranges). It holds the store open until Close.
type ViewIter struct {
	sn      *Snapshot // nil once closed
	it      *pebble.Iterator
	reverse bool
	started bool
	err     error
}

// ViewIter opens an iterator over ViewScan's range; the caller closes it.
func (sn *Snapshot) ViewIter(start, end []byte, reverse bool) (*ViewIter, error) {
	if !sn.enter() {
		return nil, ErrClosed
	}
	vi := &ViewIter{sn: sn, reverse: reverse}
	lower := appendKey(nil, sn.view, start)
	_, upper := prefixBounds(sn.view, []byte(nil)) // the end of the space
	if len(end) > 0 {
		upper = appendKey(nil, sn.view, end)
	}
	if bytes.Compare(lower, upper) >= 0 {
		return vi, nil // empty
	}
	it, err := sn.snap.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		sn.s.gate.exit()
		return nil, fmt.Errorf("fold: view scan: %w", err)
	}
	vi.it = it
	return vi, nil
}

// Next returns the next entry; its slices alias pebble's buffers, valid
// until the next call of Next or Close. ok false: the range ended, or
// failed (Close says).
func (vi *ViewIter) Next() (key, value []byte, ok bool) {
	if vi.it == nil || vi.err != nil {
		return nil, nil, false
	}
	switch {
	case !vi.started && vi.reverse:
		ok = vi.it.Last()
	case !vi.started:
		ok = vi.it.First()
	case vi.reverse:
		ok = vi.it.Prev()
	default:
		ok = vi.it.Next()
	}
	vi.started = true
	if !ok {
		return nil, nil, false
	}
	if value, vi.err = vi.it.ValueAndErr(); vi.err != nil {
		return nil, nil, false
	}
	return vi.it.Key()[1:], value, true
}

// Close ends the iteration and returns its error, if any.
func (vi *ViewIter) Close() error {
	if vi.sn == nil {
		return nil
	}
	err := vi.err
	if vi.it != nil {
		if cerr := vi.it.Close(); err == nil {
			err = cerr
		}
	}
	vi.sn.s.gate.exit()
	vi.sn = nil
	if err != nil {
		return fmt.Errorf("fold: view scan: %w", err)
	}
	return nil
}
