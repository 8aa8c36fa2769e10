package fold

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// Snapshot is a frozen, consistent view of a Store: its cursor and data come
// from the same instant, so a reader can state exactly how stale an answer
// is, and the repair diff can compare a listing against one fixed fold.
// Commits made after the Snapshot was taken are not visible through it.
//
// A Snapshot pins old data in pebble (compactions cannot drop what it
// sees): close it when done. Reads may run concurrently; Close must come
// after the last read (like closing a file). It is released (reads return
// ErrClosed) when its Store closes.
type Snapshot struct {
	s      *Store
	snap   *pebble.Snapshot
	cursor protocol.Cursor
	view   byte // the view keyspace at the snapshot's instant
}

// Snapshot takes a consistent read view of the latest committed state.
func (s *Store) Snapshot() (*Snapshot, error) {
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.exit()
	// The cursor and view keyspace of the snapshot's instant: the Store's
	// copies when no commit started or ended from before reading them
	// until the snapshot was taken (the state then is the last commit's,
	// whose copies were set before it ended), else read from the snapshot
	// (two point reads: about a quarter of a small query's cost).
	seq := s.commits.Load()
	cur, view := s.Cursor(), s.viewSpace()
	snap := s.db.NewSnapshot()
	if seq%2 == 1 || s.commits.Load() != seq {
		s.snapReads.Add(1)
		var err error
		cur, err = readCursor(snap)
		if err == nil {
			view, err = readViewSpace(snap)
		}
		if err != nil {
			_ = snap.Close()
			return nil, fmt.Errorf("fold: snapshot: %w", err)
		}
	}
	sn := &Snapshot{s: s, snap: snap, cursor: cur, view: view}
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if s.snaps == nil { // Close already released the others
		_ = snap.Close()
		return nil, ErrClosed
	}
	s.snaps[sn] = struct{}{}
	return sn, nil
}

// Share returns another Snapshot of the same instant, closed on its own: the
// underlying pebble snapshot is released when the last share closes. A
// repair pins the fold's pre-repair state this way and hands every reader a
// share.
func (sn *Snapshot) Share() (*Snapshot, error) {
	s := sn.s
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.exit()
	s.snapMu.Lock()
	defer s.snapMu.Unlock()
	if _, open := s.snaps[sn]; !open {
		return nil, ErrClosed
	}
	o := &Snapshot{s: s, snap: sn.snap, cursor: sn.cursor, view: sn.view}
	s.snaps[o] = struct{}{}
	return o, nil
}

// Close releases the Snapshot. Closing twice, or after the Store closed, is
// a no-op.
func (sn *Snapshot) Close() error {
	s := sn.s
	if !s.gate.enter() {
		return nil // the Store released it
	}
	defer s.gate.exit()
	s.snapMu.Lock()
	_, open := s.snaps[sn]
	delete(s.snaps, sn)
	shared := false
	for o := range s.snaps {
		shared = shared || o.snap == sn.snap
	}
	s.snapMu.Unlock()
	if !open || shared {
		return nil // another share still reads the pebble snapshot
	}
	if err := sn.snap.Close(); err != nil {
		return fmt.Errorf("fold: close snapshot: %w", err)
	}
	return nil
}

// enter admits an operation on the snapshot; the caller must call
// sn.s.gate.exit() when ok.
func (sn *Snapshot) enter() bool {
	if !sn.s.gate.enter() {
		return false
	}
	sn.s.snapMu.Lock()
	_, open := sn.s.snaps[sn]
	sn.s.snapMu.Unlock()
	if !open {
		sn.s.gate.exit()
	}
	return open
}

// Cursor implements [Reader]: the cursor committed with the data this
// Snapshot sees.
func (sn *Snapshot) Cursor() protocol.Cursor { return sn.cursor }

// Get implements [Reader].
func (sn *Snapshot) Get(key string) (Entry, bool, error) {
	if !sn.enter() {
		return Entry{}, false, ErrClosed
	}
	defer sn.s.gate.exit()
	return getRaw(sn.snap, key)
}

// RawRange implements [Reader].
func (sn *Snapshot) RawRange(prefix string, fn func(key []byte, rev protocol.Revision, value []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	return rawRange(sn.snap, prefix, fn)
}

// RawKeys implements [Reader].
func (sn *Snapshot) RawKeys(prefix string, fn func(key []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	return rawKeys(sn.snap, prefix, fn)
}

// ViewGet implements [Reader].
func (sn *Snapshot) ViewGet(key []byte) ([]byte, bool, error) {
	if !sn.enter() {
		return nil, false, ErrClosed
	}
	defer sn.s.gate.exit()
	return viewGet(sn.snap, sn.view, key)
}

// ViewRange implements [Reader].
func (sn *Snapshot) ViewRange(prefix []byte, fn func(key, value []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	return viewRange(sn.snap, sn.view, prefix, fn)
}

// RawRangeAfter is RawRange over the keys greater than after: the next page
// of a range whose last page ended at after.
func (sn *Snapshot) RawRangeAfter(prefix, after string, fn func(key []byte, rev protocol.Revision, value []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	return scanAfter(sn.snap, spaceRaw, prefix, []byte(after), true, func(key, rec []byte) error {
		rev, value, err := decodeRecord(rec)
		if err != nil {
			return fmt.Errorf("fold: raw range: key %q: %w", key, err)
		}
		return fn(key, rev, value)
	})
}

// ViewRangeAfter is ViewRange over the keys greater than after.
func (sn *Snapshot) ViewRangeAfter(prefix, after []byte, fn func(key, value []byte) error) error {
	if !sn.enter() {
		return ErrClosed
	}
	defer sn.s.gate.exit()
	if after == nil {
		after = []byte{}
	}
	return scanAfter(sn.snap, sn.view, prefix, after, true, fn)
}

// PluginIdentity implements [Reader].
func (sn *Snapshot) PluginIdentity() ([]byte, bool, error) {
	if !sn.enter() {
		return nil, false, ErrClosed
	}
	defer sn.s.gate.exit()
	return pluginIdentity(sn.snap)
}
