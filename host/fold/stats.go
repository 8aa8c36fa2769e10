package fold

import (
	"fmt"
	"time"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// Stats is a cheap, approximate picture of a Store, for metrics and the
// admin surface. Nothing in it is exact enough to make decisions on.
type Stats struct {
	Cursor protocol.Cursor

	// DiskBytes is everything pebble holds on disk: sstables, WAL,
	// manifests, and obsolete files not yet deleted.
	DiskBytes uint64
	// RawBytes and ViewBytes estimate the sstable bytes of each keyspace.
	// Data still in memtables (the last MemTableSize or so of writes) is not
	// counted.
	RawBytes, ViewBytes uint64
	// MemTableBytes is the memory held by memtables.
	MemTableBytes uint64

	// ApproxRawEntries and ApproxViewEntries estimate the live keys of each
	// keyspace from sstable statistics: entries minus deletions in the
	// tables overlapping it, a table straddling keyspaces in proportion to
	// its bytes in each. Memtables are not counted, overwritten versions
	// in different levels are counted twice, and statistics of freshly
	// written tables arrive asynchronously. Good for orders of magnitude.
	ApproxRawEntries, ApproxViewEntries uint64

	// WriteStalls counts the times since Open that pebble blocked commits
	// because flushes or compactions fell behind; WriteStallTime is their
	// total duration. Both are also logged at Warn.
	WriteStalls    uint64
	WriteStallTime time.Duration
}

// Stats returns the current [Stats]. It reads pebble's in-memory metadata
// and, for the few sstables straddling a keyspace boundary, their index
// blocks (usually cached); cost grows with the number of sstables, not keys.
func (s *Store) Stats() (Stats, error) {
	if !s.gate.enter() {
		return Stats{}, ErrClosed
	}
	defer s.gate.exit()
	m := s.db.Metrics()
	st := Stats{
		Cursor:        s.Cursor(),
		DiskBytes:     m.DiskSpaceUsage(),
		MemTableBytes: m.MemTable.Size,
	}
	st.WriteStalls, st.WriteStallTime = s.stalls.stalled()
	var err error
	if st.RawBytes, st.ApproxRawEntries, err = s.spaceStats(spaceRaw); err != nil {
		return Stats{}, err
	}
	if st.ViewBytes, st.ApproxViewEntries, err = s.spaceStats(s.viewSpace()); err != nil {
		return Stats{}, err
	}
	return st, nil
}

func (s *Store) spaceStats(space byte) (bytes, entries uint64, err error) {
	lower, upper := prefixBounds(space, "")
	// EstimateDiskUsage takes an inclusive end; upper is the keyspace's
	// exclusive bound, and no key equals it exactly but the next keyspace's
	// empty name, which is never written.
	if bytes, err = s.db.EstimateDiskUsage(lower, upper); err != nil {
		return 0, 0, fmt.Errorf("fold: stats: %w", err)
	}
	levels, err := s.db.SSTables(pebble.WithKeyRangeFilter(lower, upper), pebble.WithApproximateSpanBytes())
	if err != nil {
		return 0, 0, fmt.Errorf("fold: stats: %w", err)
	}
	for _, level := range levels {
		for _, t := range level {
			n, d := t.TableStats.NumEntries, t.TableStats.NumDeletions
			if n <= d || t.Size == 0 {
				continue
			}
			// A table straddling keyspaces counts in proportion to its
			// bytes inside this one.
			entries += uint64(float64(n-d) * min(1, float64(t.ApproximateSpanBytes)/float64(t.Size)))
		}
	}
	return bytes, entries, nil
}
