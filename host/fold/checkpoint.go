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
	// The WAL sync (what pebble.WithFlushedWAL does first) is a write on
	// pebble's commit path: guarded like one. The copy then runs beside
	// the commits, its own write errors (outside the store) returned.
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.LogData(nil, nil); err != nil {
		return fmt.Errorf("fold: checkpoint %s: sync the log: %w", s.dir, err)
	}
	if err := s.apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("fold: checkpoint %s: sync the log: %w", s.dir, err)
	}
	if err := s.db.Checkpoint(dir); err != nil {
		return fmt.Errorf("fold: checkpoint %s to %s: %w", s.dir, dir, err)
	}
	return nil
}
