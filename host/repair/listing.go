package repair

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// listing is the bucket's state as one state-sync delivered it, sorted by
// key on disk: a scratch pebble database with small memtables, so the sort
// spills to sorted runs (sstables) that pebble merges, and memory stays
// bounded whatever the bucket's size. Each key holds its latest delivered
// entry: rev:u64be op:u8 time:i64be value.
type listing struct {
	dir   string
	db    *pebble.DB
	batch *pebble.Batch
	n     int // entries in batch
}

const (
	listingMemTable   = 4 << 20 // small on purpose: the sort spills, memory stays flat
	listingCache      = 8 << 20
	listingBatch      = 1024    // entries, or
	listingBatchBytes = 1 << 20 // bytes: big values must not pile up in a batch
	entryHeader       = 8 + 1 + 8
)

// openListing creates the scratch database in dir, which must not exist or
// be a leftover of an earlier repair (it is removed first).
func openListing(dir string) (*listing, error) {
	if err := os.RemoveAll(dir); err != nil {
		return nil, fmt.Errorf("repair: clearing scratch dir: %w", err)
	}
	cache := pebble.NewCache(listingCache)
	defer cache.Unref()
	db, err := pebble.Open(dir, &pebble.Options{
		FS:           vfs.Default,
		Cache:        cache,
		MemTableSize: listingMemTable,
		DisableWAL:   true, // scratch: a crash throws it away
		Logger:       quietLogger{},
	})
	if err != nil {
		return nil, fmt.Errorf("repair: scratch store: %w", err)
	}
	return &listing{dir: dir, db: db, batch: db.NewBatch()}, nil
}

// add records u as its key's latest entry. Deliveries come in revision
// order, so the last one written for a key is its latest.
func (l *listing) add(u fold.Update) error {
	v := make([]byte, entryHeader+len(u.Value))
	binary.BigEndian.PutUint64(v, uint64(u.Rev))
	v[8] = byte(u.Op)
	binary.BigEndian.PutUint64(v[9:], uint64(u.Time))
	copy(v[entryHeader:], u.Value)
	if err := l.batch.Set([]byte(u.Key), v, nil); err != nil {
		return fmt.Errorf("repair: scratch store: %w", err)
	}
	l.n++
	if l.n >= listingBatch || l.batch.Len() >= listingBatchBytes {
		return l.flush()
	}
	return nil
}

func (l *listing) flush() error {
	if l.n == 0 {
		return nil
	}
	if err := l.checkSpace(); err != nil {
		return fmt.Errorf("repair: scratch store: %w", err)
	}
	if err := l.db.Apply(l.batch, pebble.NoSync); err != nil {
		return fmt.Errorf("repair: scratch store: %w", err)
	}
	l.batch.Reset()
	l.n = 0
	return nil
}

// listingReserve is the free space every write to the scratch store
// leaves: the memtables it may hold unflushed (pebble's default of two).
// Like the fold's store (fold.ErrDiskFull), it refuses a write that would
// leave less, rather than let pebble's writes fail on a full disk.
const listingReserve = 2 * listingMemTable

func (l *listing) checkSpace() error {
	du, err := vfs.Default.GetDiskUsage(l.dir)
	if err != nil {
		return nil // unknown: pebble's own errors are left
	}
	if need := uint64(l.batch.Len()) + listingReserve; du.AvailBytes < need {
		return &fold.DiskFullError{Dir: l.dir, Free: du.AvailBytes, Need: need, Reserve: listingReserve}
	}
	return nil
}

// iter returns an iterator over the listed keys starting with prefix.
func (l *listing) iter(prefix string) (*pebble.Iterator, error) {
	o := &pebble.IterOptions{}
	if prefix != "" {
		o.LowerBound = []byte(prefix)
		o.UpperBound = prefixEnd([]byte(prefix))
	}
	return l.db.NewIter(o)
}

// decodeEntry turns an iterator position into the update it records. The
// value aliases the iterator's buffer.
func decodeEntry(key, v []byte) (fold.Update, error) {
	if len(v) < entryHeader {
		return fold.Update{}, fmt.Errorf("repair: scratch entry %q: %d bytes", key, len(v))
	}
	return fold.Update{
		Key:   string(key),
		Rev:   protocol.Revision(binary.BigEndian.Uint64(v)),
		Op:    fold.Op(v[8]),
		Time:  int64(binary.BigEndian.Uint64(v[9:])),
		Value: v[entryHeader:],
	}, nil
}

// close closes and removes the scratch database.
func (l *listing) close() error {
	err := l.batch.Close()
	err = errors.Join(err, l.db.Close())
	return errors.Join(err, os.RemoveAll(l.dir))
}

// prefixEnd is the smallest key greater than every key starting with p
// (nil when there is none: p is all 0xff).
func prefixEnd(p []byte) []byte {
	end := append([]byte(nil), p...)
	for i := len(end) - 1; i >= 0; i-- {
		if end[i] != 0xff {
			end[i]++
			return end[:i+1]
		}
	}
	return nil
}

// quietLogger drops the scratch store's informational log.
type quietLogger struct{}

func (quietLogger) Infof(string, ...any)  {}
func (quietLogger) Errorf(string, ...any) {}
func (quietLogger) Fatalf(format string, args ...any) {
	panic(fmt.Sprintf("repair: scratch store: "+format, args...))
}
