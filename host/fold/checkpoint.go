package fold

import (
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Checkpoint writes a consistent copy of the store into dir, which must not
// exist. The copy is a complete store: [Open] on dir recovers the cursor and
// data of one commit boundary at or after the moment Checkpoint was called
// (commits may run concurrently; none is split). The WAL is synced first, so
// NoSync commits made before the call are included. sstables are hard-linked
// when dir is on the same filesystem, so the copy is cheap but shares disk
// blocks until the store compacts them away.
//
// This is the export path's source: archive dir, then remove it.
func (s *Store) Checkpoint(dir string) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	if err := s.db.Checkpoint(dir, pebble.WithFlushedWAL()); err != nil {
		return fmt.Errorf("fold: checkpoint %s to %s: %w", s.dir, dir, err)
	}
	return nil
}
