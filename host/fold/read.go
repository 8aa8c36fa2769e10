package fold

import (
	"bytes"
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// Reader is the read side of a fold, what query surfaces and the repair diff
// need. [*Store] reads the latest committed state; [*Snapshot] reads one
// frozen state, cursor included.
//
// Range callbacks run in key order (bytewise) and receive slices that alias
// pebble's buffers: they are valid only until the callback returns, and must
// not be modified. Copy what you keep (string(key) copies; a map lookup
// m[string(key)] does not allocate). A callback's non-nil error stops the
// range and is returned unchanged. Ranges stream: memory does not grow with
// the number of keys.
type Reader interface {
	// Cursor is the position of the data read through this Reader. For a
	// Snapshot it is exact. For a Store it is the latest commit's cursor,
	// and data read afterwards is at least that new (a commit may land in
	// between): a safe staleness bound, never an overstatement.
	Cursor() protocol.Cursor
	// Get returns the raw entry of a NATS key. The Entry is the caller's.
	Get(key string) (Entry, bool, error)
	// RawRange calls fn for every raw entry whose key starts with prefix
	// ("" = all).
	RawRange(prefix string, fn func(key []byte, rev protocol.Revision, value []byte) error) error
	// RawKeys is RawRange without revision and value: the repair diff's
	// key listing. It never reads or copies values.
	RawKeys(prefix string, fn func(key []byte) error) error
	// ViewGet returns the value of a plugin view key (a fresh copy).
	ViewGet(key []byte) ([]byte, bool, error)
	// ViewRange calls fn for every view key starting with prefix (nil = all).
	ViewRange(prefix []byte, fn func(key, value []byte) error) error
	// PluginIdentity returns the identity stored by the last Commit that
	// set one.
	PluginIdentity() ([]byte, bool, error)
}

var (
	_ Reader = (*Store)(nil)
	_ Reader = (*Snapshot)(nil)
)

// Entry is a raw fold entry: the value of a NATS key and the revision of the
// message that wrote it.
type Entry struct {
	Rev   protocol.Revision
	Value []byte
}

// Get implements [Reader]; it reads the latest committed state.
func (s *Store) Get(key string) (Entry, bool, error) {
	if !s.gate.enter() {
		return Entry{}, false, ErrClosed
	}
	defer s.gate.exit()
	if s.rawFilter.Load().absentString(key) {
		return Entry{}, false, nil // never held (keyfilter.go)
	}
	return getRaw(s.db, key)
}

// RawRange implements [Reader]. The range reads one consistent state (a
// pebble iterator pins it): commits made while it runs are not seen.
func (s *Store) RawRange(prefix string, fn func(key []byte, rev protocol.Revision, value []byte) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	return rawRange(s.db, prefix, fn)
}

// RawKeys implements [Reader], with RawRange's consistency.
func (s *Store) RawKeys(prefix string, fn func(key []byte) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	return rawKeys(s.db, prefix, fn)
}

// ViewGet implements [Reader].
func (s *Store) ViewGet(key []byte) ([]byte, bool, error) {
	if !s.gate.enter() {
		return nil, false, ErrClosed
	}
	defer s.gate.exit()
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	if s.viewFilter.Load().absent(key) {
		return nil, false, nil // never held (keyfilter.go)
	}
	return viewGet(s.db, s.viewSpace(), key)
}

// ViewRange implements [Reader], with RawRange's consistency.
func (s *Store) ViewRange(prefix []byte, fn func(key, value []byte) error) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	s.viewMu.RLock()
	defer s.viewMu.RUnlock()
	return viewRange(s.db, s.viewSpace(), prefix, fn)
}

// PluginIdentity implements [Reader].
func (s *Store) PluginIdentity() ([]byte, bool, error) {
	if !s.gate.enter() {
		return nil, false, ErrClosed
	}
	defer s.gate.exit()
	return pluginIdentity(s.db)
}

func getRaw(r pebble.Reader, key string) (Entry, bool, error) {
	rec, ok, err := getCopy(r, appendKey(nil, spaceRaw, key))
	if err != nil {
		return Entry{}, false, fmt.Errorf("fold: get %q: %w", key, err)
	}
	if !ok {
		return Entry{}, false, nil
	}
	rev, value, err := decodeRecord(rec)
	if err != nil {
		return Entry{}, false, fmt.Errorf("fold: get %q: %w", key, err)
	}
	return Entry{Rev: rev, Value: value}, true, nil
}

func viewGet(r pebble.Reader, space byte, key []byte) ([]byte, bool, error) {
	v, ok, err := getCopy(r, appendKey(nil, space, key))
	if err != nil {
		return nil, false, fmt.Errorf("fold: view get %q: %w", key, err)
	}
	return v, ok, nil
}

func pluginIdentity(r pebble.Reader) ([]byte, bool, error) {
	v, ok, err := getCopy(r, metaPluginKey)
	if err != nil {
		return nil, false, fmt.Errorf("fold: read plugin identity: %w", err)
	}
	return v, ok, nil
}

func rawRange(r pebble.Reader, prefix string, fn func([]byte, protocol.Revision, []byte) error) error {
	return scan(r, spaceRaw, prefix, true, func(key, rec []byte) error {
		rev, value, err := decodeRecord(rec)
		if err != nil {
			return fmt.Errorf("fold: raw range: key %q: %w", key, err)
		}
		return fn(key, rev, value)
	})
}

func rawKeys(r pebble.Reader, prefix string, fn func([]byte) error) error {
	return scan(r, spaceRaw, prefix, false, func(key, _ []byte) error { return fn(key) })
}

func viewRange(r pebble.Reader, space byte, prefix []byte, fn func(key, value []byte) error) error {
	return scan(r, space, prefix, true, fn)
}

// scan iterates the keys of space starting with prefix, in order, calling fn
// with the key (space byte stripped) and, if values, the stored value.
// Errors from fn are returned unchanged; pebble's are wrapped.
func scan[T string | []byte](r pebble.Reader, space byte, prefix T, values bool, fn func(key, value []byte) error) error {
	return scanAfter(r, space, prefix, nil, values, fn)
}

// scanAfter is scan over the keys greater than after (nil: all).
func scanAfter[T string | []byte](r pebble.Reader, space byte, prefix T, after []byte, values bool, fn func(key, value []byte) error) error {
	lower, upper := prefixBounds(space, prefix)
	if after != nil {
		// The smallest key greater than after: after followed by 0x00.
		if from := append(appendKey(nil, space, after), 0); bytes.Compare(from, lower) > 0 {
			lower = from
		}
		if bytes.Compare(lower, upper) >= 0 {
			return nil
		}
	}
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return fmt.Errorf("fold: range %c%q: %w", space, prefix, err)
	}
	for ok := it.First(); ok; ok = it.Next() {
		var v []byte
		if values {
			if v, err = it.ValueAndErr(); err != nil {
				break
			}
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
		return fmt.Errorf("fold: range %c%q: %w", space, prefix, err)
	}
	return nil
}

// RepairPending reports whether a repair began on the store and has not
// finished ([Commit.Repair]): some of its data may be newer than its
// cursor, so reads cannot claim the cursor describes them exactly, and no
// artifact should be made of it. The next repair (the cursor is still the
// expired one) finishes it.
func (s *Store) RepairPending() (bool, error) {
	if !s.gate.enter() {
		return false, ErrClosed
	}
	defer s.gate.exit()
	return repairPending(s.db)
}

// RepairPending is [Store.RepairPending] at the Snapshot's instant.
func (sn *Snapshot) RepairPending() (bool, error) {
	if !sn.enter() {
		return false, ErrClosed
	}
	defer sn.s.gate.exit()
	return repairPending(sn.snap)
}

func repairPending(r pebble.Reader) (bool, error) {
	_, ok, err := getCopy(r, metaRepairKey)
	return ok, err
}

// AnyRawKey reports whether r's raw fold holds a key.
func AnyRawKey(r Reader) (bool, error) {
	errFound := errors.New("found")
	if err := r.RawKeys("", func([]byte) error { return errFound }); !errors.Is(err, errFound) {
		return false, err
	}
	return true, nil
}
