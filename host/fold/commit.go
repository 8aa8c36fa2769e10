package fold

import (
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// ViewOp is a view mutation's kind. The zero ViewOp is invalid.
type ViewOp uint8

const (
	ViewPut    ViewOp = iota + 1 // set the view key's value
	ViewDelete                   // remove the view key (a no-op when absent)
)

func (o ViewOp) String() string {
	switch o {
	case ViewPut:
		return "put"
	case ViewDelete:
		return "delete"
	}
	return fmt.Sprintf("ViewOp(%d)", uint8(o))
}

// ViewMutation is one plugin view change.
type ViewMutation struct {
	Key   []byte // non-empty
	Op    ViewOp
	Value []byte // ignored for a delete
}

// Commit is everything one apply produced. [Store.Commit] writes it in one
// atomic batch.
type Commit struct {
	// Raw updates in order; a later update of the same key wins. A put
	// stores its value and revision; a delete or purge removes the key
	// (Value, and Rev, ignored).
	Raw []Update
	// Views mutations in order; a later mutation of the same key wins.
	Views []ViewMutation
	// Cursor is the position after this commit. It must not be below the
	// stored cursor (see [Store.Commit]).
	Cursor protocol.Cursor
	// PluginIdentity, when non-nil, replaces the stored plugin identity
	// (which plugin build produced the views). nil leaves it unchanged; an
	// empty non-nil slice stores an empty identity.
	PluginIdentity []byte
}

// Commit applies c atomically: raw updates, view mutations, the cursor and
// the plugin identity go into one pebble batch, so after any crash the store
// holds either all of c or none of it. The cursor is always written, even
// when c carries no data (an apply of only irrelevant updates still advances
// it).
//
// Commit validates c before writing anything. It refuses, leaving the store
// untouched:
//   - malformed input (empty key, unknown Op, a put without a revision),
//     with an error wrapping ErrInvalidCommit;
//   - a cursor below the stored one, or one that clears the eviction memo,
//     with a [*CursorRegressionError]. That is a broken invariant in the
//     caller (cursor-after-apply only raises the cursor), not a transient
//     condition: do not retry. An equal cursor is allowed (repairs commit
//     corrections under the current cursor).
//
// With Options.Sync false the commit is durable against a process crash but
// not a power loss; see [Options.Sync]. Commit copies what it needs: the
// caller may reuse c's slices once it returns. Commits are serialized.
func (s *Store) Commit(c Commit) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	if err := validate(&c); err != nil {
		return err
	}

	s.commitMu.Lock()
	defer s.commitMu.Unlock()
	stored := *s.cursor.Load()
	if c.Cursor.Rev < stored.Rev || (stored.EvictionSeen && !c.Cursor.EvictionSeen) {
		return &CursorRegressionError{Stored: stored, Proposed: c.Cursor}
	}

	b := s.db.NewBatch()
	defer b.Close()
	var key []byte
	for _, u := range c.Raw {
		key = appendKey(key[:0], spaceRaw, u.Key)
		if u.Op != OpPut {
			if err := b.Delete(key, nil); err != nil {
				return fmt.Errorf("fold: commit: batch: %w", err)
			}
			continue
		}
		op := b.SetDeferred(len(key), recordLen(u.Value))
		copy(op.Key, key)
		putRecord(op.Value, u.Rev, u.Value)
		if err := op.Finish(); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	for _, m := range c.Views {
		key = appendKey(key[:0], spaceView, m.Key)
		var err error
		if m.Op == ViewDelete {
			err = b.Delete(key, nil)
		} else {
			err = b.Set(key, m.Value, nil)
		}
		if err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	if c.PluginIdentity != nil {
		if err := b.Set(metaPluginKey, c.PluginIdentity, nil); err != nil {
			return fmt.Errorf("fold: commit: batch: %w", err)
		}
	}
	cur, err := c.Cursor.MarshalBinary()
	if err != nil {
		return fmt.Errorf("fold: commit: encode cursor %v: %w", c.Cursor, err)
	}
	if err := b.Set(metaCursorKey, cur, nil); err != nil {
		return fmt.Errorf("fold: commit: batch: %w", err)
	}
	if err := s.db.Apply(b, s.write); err != nil {
		return fmt.Errorf("fold: commit at cursor %v: %w", c.Cursor, err)
	}
	next := c.Cursor
	s.cursor.Store(&next)
	return nil
}

// validate checks c's input without touching the store.
func validate(c *Commit) error {
	for i, u := range c.Raw {
		switch {
		case u.Key == "":
			return fmt.Errorf("%w: raw update %d: empty key", ErrInvalidCommit, i)
		case !u.Op.Valid():
			return fmt.Errorf("%w: raw update %d (%q): unknown op %v", ErrInvalidCommit, i, u.Key, u.Op)
		case u.Op == OpPut && !u.Rev.Known():
			return fmt.Errorf("%w: raw put %d (%q): no revision", ErrInvalidCommit, i, u.Key)
		}
	}
	for i, m := range c.Views {
		switch {
		case len(m.Key) == 0:
			return fmt.Errorf("%w: view mutation %d: empty key", ErrInvalidCommit, i)
		case m.Op != ViewPut && m.Op != ViewDelete:
			return fmt.Errorf("%w: view mutation %d (%q): unknown op %v", ErrInvalidCommit, i, m.Key, m.Op)
		}
	}
	return nil
}
