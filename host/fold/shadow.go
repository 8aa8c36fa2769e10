package fold

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// A Shadow is the view keyspace a view rebuild writes while the fold's
// views keep serving (and folding) from the other one; [Commit.Activate]
// switches it in, in one commit. Reads through the Store and its Snapshots
// never see a Shadow's keys. A store has at most one shadow at a time: a
// new BeginShadow empties it again, and Open drops what a dead process left
// in it.
type Shadow struct {
	s     *Store
	space byte
}

// ErrShadowStale: the shadow is the fold's view keyspace now (activated by
// an earlier commit), or a newer BeginShadow replaced it.
var ErrShadowStale = errors.New("fold: the shadow view is stale")

// viewSpace is the keyspace the fold's views are in.
func (s *Store) viewSpace() byte { return byte(s.view.Load()) }

// readViewSpace reads which keyspace holds the views.
func readViewSpace(r pebble.Reader) (byte, error) {
	v, ok, err := getCopy(r, metaViewKey)
	switch {
	case err != nil:
		return 0, fmt.Errorf("read the view keyspace: %w", err)
	case !ok:
		return spaceView, nil
	case len(v) != 1 || (v[0] != spaceView && v[0] != spaceView2):
		return 0, fmt.Errorf("%w: view keyspace marker %q", ErrCorrupt, v)
	}
	return v[0], nil
}

// dropView deletes every key of the view keyspace space.
func (s *Store) dropView(space byte) error {
	lower, upper := prefixBounds(space, "")
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.DeleteRange(lower, upper, nil); err != nil {
		return fmt.Errorf("clear view keyspace %c: %w", space, err)
	}
	if err := s.apply(b, s.write); err != nil {
		return fmt.Errorf("clear view keyspace %c: %w", space, err)
	}
	return nil
}

// BeginShadow empties the keyspace the views are not in and returns it as
// a Shadow for a rebuild to write.
func (s *Store) BeginShadow() (*Shadow, error) {
	if !s.gate.enter() {
		return nil, ErrClosed
	}
	defer s.gate.exit()
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	sh := &Shadow{s: s, space: otherView(s.viewSpace())}
	if err := s.dropView(sh.space); err != nil {
		return nil, fmt.Errorf("fold: begin shadow: %w", err)
	}
	s.shadow.Store(sh)
	return sh, nil
}

// live reports whether sh is still the store's shadow (callers hold the
// gate).
func (sh *Shadow) live() bool {
	return sh.s.shadow.Load() == sh && sh.s.viewSpace() != sh.space
}

// ViewGet reads a key of the shadow (a fresh copy).
func (sh *Shadow) ViewGet(key []byte) ([]byte, bool, error) {
	if !sh.s.gate.enter() {
		return nil, false, ErrClosed
	}
	defer sh.s.gate.exit()
	return viewGet(sh.s.db, sh.space, key)
}

// ViewRange calls fn for every shadow key starting with prefix, in order
// (Reader.ViewRange's rules).
func (sh *Shadow) ViewRange(prefix []byte, fn func(key, value []byte) error) error {
	if !sh.s.gate.enter() {
		return ErrClosed
	}
	defer sh.s.gate.exit()
	return viewRange(sh.s.db, sh.space, prefix, fn)
}

// Write commits view mutations to the shadow, and dead letters (of
// updates the rebuilding plugin failed on alone) to the store's dead
// letters: nothing else (the cursor, raw fold and views are untouched).
// Serialized with Commit; refused with ErrShadowStale once the shadow was
// activated or replaced.
func (sh *Shadow) Write(views []ViewMutation, dead ...DeadLetter) error {
	s := sh.s
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	if err := validate(&Commit{Views: views}); err != nil {
		return err
	}
	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	if !sh.live() {
		return ErrShadowStale
	}
	b := s.db.NewBatch()
	defer b.Close()
	pw := &s.points
	pw.reset()
	defer pw.reset()
	pw.addViews(sh.space, views)
	if err := pw.writeTo(b); err != nil {
		return fmt.Errorf("fold: shadow write: %w", err)
	}
	if err := putDeadLetters(b, dead); err != nil {
		return fmt.Errorf("fold: shadow write: %w", err)
	}
	if err := s.apply(b, s.write); err != nil {
		return fmt.Errorf("fold: shadow write: %w", err)
	}
	return nil
}
