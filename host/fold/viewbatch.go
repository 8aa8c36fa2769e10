package fold

import (
	"bytes"
	"fmt"
	"slices"

	"github.com/cockroachdb/pebble/v2"
)

// ViewBatchReader reads many view keys at once: a plugin's batched read
// (one request per batch of updates). fn gets each key's index in keys and
// its value (a fresh copy), or found false; calls come in key order, not
// index order.
type ViewBatchReader interface {
	ViewGetBatch(keys [][]byte, fn func(i int, value []byte, found bool) error) error
}

var _ ViewBatchReader = (*Store)(nil)

// ViewGetBatch implements ViewBatchReader with one pebble iterator,
// positioned by SeekGE in ascending key order (pebble then tries a few
// Next steps before a full seek), instead of a Get per key.
func (s *Store) ViewGetBatch(keys [][]byte, fn func(i int, value []byte, found bool) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	return viewGetBatch(s.db, s.viewSpace(), s.viewFilter.Load(), keys, fn)
}

// viewGetBatch reads keys of space from r; a key filter says absent
// (keyfilter.go; nil: none) is answered without a seek.
func viewGetBatch(r pebble.Reader, space byte, filter *keyFilter, keys [][]byte, fn func(int, []byte, bool) error) error {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return bytes.Compare(keys[a], keys[b]) })
	// The iterator is opened at the first key the filter does not rule
	// out: a batch of keys the fold never held opens none.
	var it *pebble.Iterator
	defer func() {
		if it != nil {
			it.Close() // fn may panic (a plugin call's deadline)
		}
	}()
	var full []byte
	for _, i := range order {
		if filter.absent(keys[i]) {
			if err := fn(i, nil, false); err != nil {
				return err
			}
			continue
		}
		if it == nil {
			lower, upper := prefixBounds(space, "")
			var err error
			if it, err = r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper}); err != nil {
				return fmt.Errorf("fold: view get: %w", err)
			}
		}
		full = appendKey(full[:0], space, keys[i])
		var v []byte
		found := it.SeekGE(full) && bytes.Equal(it.Key(), full)
		if found {
			raw, err := it.ValueAndErr()
			if err != nil {
				return fmt.Errorf("fold: view get %q: %w", keys[i], err)
			}
			v = bytes.Clone(raw)
		}
		if err := fn(i, v, found); err != nil {
			return err
		}
	}
	if it != nil {
		if err := it.Error(); err != nil {
			return fmt.Errorf("fold: view get: %w", err)
		}
	}
	return nil
}
