package fold

import (
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2"

	"github.com/foldhost/foldhost/protocol"
)

// FormatVersion is the store layout version this build writes and the only
// one it opens. Bump it whenever the layout in the package doc changes.
const FormatVersion uint32 = 1

// Store is a durable fold on pebble. See the package doc for its contract.
// A Store is safe for concurrent use.
type Store struct {
	db    *pebble.DB
	dir   string
	opts  Options
	write *pebble.WriteOptions
	gate  gate

	stalls stallTracker

	// commitMu serializes Commit: validate against the stored cursor,
	// apply, then publish the new cursor.
	commitMu sync.Mutex
	points   pointWrites // a commit's point writes, under commitMu
	// outboxHigh is the outbox's high-water mark (readOutboxHigh), under
	// commitMu; outboxSig is signalled after a commit that added entries.
	outboxHigh     protocol.Revision
	outboxNext     uint32 // the next index under outboxHigh (EffectsAppend)
	outboxSig      chan struct{}
	effectsDropped atomic.Uint64
	outboxLen      atomic.Int64 // entries in the outbox (counted at open, then kept)
	// advanced is closed (and cleared) by the next commit: CursorAdvanced.
	advMu    sync.Mutex
	advanced chan struct{}
	// outboxFloor is the outbox's first entry as a scan last found it (a
	// key without the space byte; nil: none known): no entry is below it.
	outboxFloor atomic.Pointer[[]byte]
	cursor      atomic.Pointer[protocol.Cursor]
	view        atomic.Uint32 // the view keyspace (spaceView or spaceView2); changed by a commit
	// commits is odd while a Commit writes the cursor and view keys and
	// then these copies of them, even otherwise: a Snapshot whose reading
	// of the copies saw no commit start or end takes them for its own
	// (snapshot.go).
	commits atomic.Uint64
	// snapReads counts the Snapshots that read their cursor from pebble
	// (for the tests).
	snapReads atomic.Uint64
	shadow    atomic.Pointer[Shadow] // the last BeginShadow's, until activated
	// viewMu orders the Store's own view reads (which resolve the view
	// keyspace, then read it) with a commit that switches keyspaces and
	// drops the old one: held for reading by ViewGet and ViewRange, for
	// writing by an activating Commit.
	viewMu sync.RWMutex

	// rawFilter and viewFilter: the keys the raw keyspace and the views
	// in place ever held since the store opened them empty (keyfilter.go);
	// nil: no filter.
	rawFilter, viewFilter atomic.Pointer[keyFilter]

	snapMu sync.Mutex
	snaps  map[*Snapshot]struct{}

	lock *dirLock

	// A full disk (diskspace.go): the guarded filesystem, the reserve every
	// write leaves free, the serialization of writes behind the space
	// check, and the error that broke the store (nil while it writes).
	fs      *guardFS
	reserve uint64
	applyMu sync.Mutex
	broken  atomic.Pointer[StoreBrokenError]
	// wedged: pebble panicked on its commit path, possibly holding its
	// commit lock, so closing it could block forever; Close leaves it.
	wedged atomic.Bool

	// lifeMu orders Close and Reopen; closed is set by Close. s.db is nil
	// while a Reopen has it closed (or failed to open it).
	lifeMu sync.Mutex
	closed bool
}

// Open opens (creating if needed) the store in dir and returns it with the
// recovered cursor: the cursor of the last commit that survived, or the zero
// Cursor when nothing was ever committed. A new store gets the format marker
// (synced) before Open returns.
//
// Open fails with a [*FormatError] (errors.Is ErrFormatVersion) when the
// directory holds a store of an unknown format version, or a pebble database
// that is not a fold store; it never modifies such a directory's contents.
// A directory is used by one open Store at a time: Open fails with
// ErrLocked when another process holds it, or when this process has it, or
// a directory inside or around it, open already (see lockDir).
func Open(dir string, opts Options) (*Store, protocol.Cursor, error) {
	opts = opts.withDefaults()
	lock, err := lockDir(dir)
	if err != nil {
		return nil, protocol.Cursor{}, err
	}
	s := &Store{dir: dir, opts: opts, write: pebble.NoSync, snaps: map[*Snapshot]struct{}{}, lock: lock, outboxSig: make(chan struct{}, 1)}
	s.stalls.log = opts.Logger
	s.fs = &guardFS{FS: opts.FS, s: s}
	s.reserve = opts.diskReserve()
	db, err := pebble.Open(dir, opts.pebbleOptions(s.stalls.listener(), s.fs, s.onFatal))
	if err != nil {
		lock.release(true)
		return nil, protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", dir, err)
	}
	s.db = db
	if opts.Sync {
		s.write = pebble.Sync
	}
	cur, err := s.recover()
	if err != nil {
		_ = db.Close()
		lock.release(true)
		return nil, protocol.Cursor{}, err
	}
	s.cursor.Store(&cur)
	return s, cur, nil
}

// recover checks (or, for an empty database, writes) the format marker and
// reads the stored cursor.
func (s *Store) recover() (protocol.Cursor, error) {
	if err := s.checkFormat(); err != nil {
		return protocol.Cursor{}, err
	}
	view, err := readViewSpace(s.db)
	if err != nil {
		return protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", s.dir, err)
	}
	s.view.Store(uint32(view))
	for _, f := range []struct {
		space byte
		p     *atomic.Pointer[keyFilter]
	}{{spaceRaw, &s.rawFilter}, {view, &s.viewFilter}} {
		has, err := hasKeys(s.db, f.space)
		if err != nil {
			return protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", s.dir, err)
		}
		f.p.Store(nil)
		if !has {
			f.p.Store(newKeyFilter())
		}
	}
	if s.outboxHigh, s.outboxNext, err = readOutboxHigh(s.db); err != nil {
		return protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", s.dir, err)
	}
	n := 0
	if err := scan(s.db, spaceOutbox, "", true, func(k, v []byte) error {
		c, err := groupCount(k, v)
		n += c
		return err
	}); err != nil {
		return protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", s.dir, err)
	}
	s.outboxLen.Store(int64(n))
	s.outboxFloor.Store(nil) // a reopen may have lost commits: their entries come again
	// A shadow a rebuild was writing when the process died is dropped
	// (one range tombstone, only when it holds a key).
	if has, err := hasKeys(s.db, otherView(view)); err != nil || has {
		if err == nil {
			err = s.dropView(otherView(view))
		}
		if err != nil {
			return protocol.Cursor{}, fmt.Errorf("fold: open %s: %w", s.dir, err)
		}
	}
	return readCursor(s.db)
}

func (s *Store) checkFormat() error {
	v, ok, err := getCopy(s.db, metaFormatKey)
	if err != nil {
		return fmt.Errorf("fold: open %s: read format marker: %w", s.dir, err)
	}
	if ok {
		if len(v) != 4 {
			return &FormatError{Dir: s.dir, Supported: FormatVersion,
				Detail: fmt.Sprintf("malformed format marker (%d bytes)", len(v))}
		}
		if found := binary.BigEndian.Uint32(v); found != FormatVersion {
			return &FormatError{Dir: s.dir, Found: found, Supported: FormatVersion}
		}
		return nil
	}
	empty, err := isEmpty(s.db)
	if err != nil {
		return fmt.Errorf("fold: open %s: %w", s.dir, err)
	}
	if !empty {
		return &FormatError{Dir: s.dir, Supported: FormatVersion,
			Detail: "pebble database without a format marker (not a fold store)"}
	}
	marker := binary.BigEndian.AppendUint32(nil, FormatVersion)
	b := s.db.NewBatch()
	defer b.Close()
	if err := b.Set(metaFormatKey, marker, nil); err != nil {
		return fmt.Errorf("fold: open %s: write format marker: %w", s.dir, err)
	}
	if err := s.apply(b, pebble.Sync); err != nil {
		return fmt.Errorf("fold: open %s: write format marker: %w", s.dir, err)
	}
	return nil
}

// Close waits for in-flight operations, releases open Snapshots and closes
// pebble. Every later operation returns ErrClosed, and so does a second
// Close. Close must not be called from inside a range callback.
func (s *Store) Close() error {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	if s.closed {
		return ErrClosed
	}
	s.closed = true
	s.gate.close() // false when a failed Reopen left it closed (no pebble open)
	err := s.shutPebble()
	s.lock.release(false)
	if err != nil {
		return fmt.Errorf("fold: close %s: %w", s.dir, err)
	}
	return nil
}

// shutPebble releases the open Snapshots and closes pebble, if open; the
// gate is closed and s.lifeMu held.
func (s *Store) shutPebble() error {
	if s.db == nil {
		return nil
	}
	s.snapMu.Lock()
	var errs []error
	released := map[*pebble.Snapshot]bool{}
	for sn := range s.snaps {
		if !released[sn.snap] { // shares of one instant hold one pebble snapshot
			released[sn.snap] = true
			errs = append(errs, sn.snap.Close())
		}
	}
	s.snaps = nil
	s.snapMu.Unlock()
	// Flushing the memtables now keeps the next Open from replaying the
	// WALs and flushing them itself (the start's longest step after a
	// clean stop: RATIONALE.md, "A clean stop flushes"). A failed flush
	// loses nothing: the WALs still hold the data. A broken store, or one
	// short of space, is not flushed: pebble panics on a log it cannot
	// close and retries a failing flush without end.
	switch {
	case s.wedged.Load():
		// pebble may hold its commit lock: its Close would block forever.
		// Left open (its files stay locked for this process; a restart
		// reopens the store from its log).
		return fmt.Errorf("left open: %w", s.Broken())
	case s.Broken() != nil:
	case s.checkSpace(0) != nil:
		s.opts.Logger.Warn("fold: not flushing at close, the disk is short of space; the next open replays the log", "dir", s.dir)
	default:
		if err := s.db.Flush(); err != nil {
			s.opts.Logger.Warn("fold: flush at close failed; the next open replays the log", "dir", s.dir, "err", err)
		}
	}
	if err := s.db.Close(); err != nil && s.Broken() == nil {
		errs = append(errs, err) // a broken store's log error is reported already
	}
	s.db = nil
	return errors.Join(errs...)
}

// Reopen reopens a broken store ([ErrStoreBroken]) from its files: pebble
// is closed, unflushed, and opened again, replaying its log to where the
// write error struck, as after a crash. It returns the recovered cursor,
// which may be below the one Cursor reported before (the commits whose log
// writes were dropped are gone, each whole). Meanwhile every operation
// fails with ErrClosed; open Snapshots are released. The store must have
// the free space a write needs ([Store.SpaceFree]). A store that is not
// broken is left as it is; one whose pebble panicked on its commit path
// cannot be reopened by this process. A failed reopen leaves the store
// broken (by that failure), closed to reads, to be reopened again.
func (s *Store) Reopen() (protocol.Cursor, error) {
	s.lifeMu.Lock()
	defer s.lifeMu.Unlock()
	switch {
	case s.closed:
		return protocol.Cursor{}, ErrClosed
	case s.Broken() == nil:
		return s.Cursor(), nil
	case s.wedged.Load():
		return s.Cursor(), fmt.Errorf("fold: reopen %s: pebble panicked on its commit path and may hold its locks; restart the process: %w", s.dir, s.Broken())
	}
	if err := s.SpaceFree(); err != nil {
		return s.Cursor(), fmt.Errorf("fold: reopen %s: %w", s.dir, err)
	}
	// pebble's open flushes the log it replays and retries a failing flush
	// without end: it would hang. So the disk is tried first.
	if err := s.probeDisk(); err != nil { // still broken: by the disk's error now
		e := &StoreBrokenError{Dir: s.dir, Err: fmt.Errorf("reopen: the disk still fails: %w", err), Need: s.reserve}
		if du, err := s.fs.FS.GetDiskUsage(s.dir); err == nil {
			e.Free = du.AvailBytes
		}
		return s.Cursor(), e
	}
	s.gate.close() // waits for the operations in flight
	if err := s.shutPebble(); err != nil {
		s.opts.Logger.Warn("fold: closing the broken store before its reopen", "dir", s.dir, "err", err)
	}
	s.broken.Store(nil) // the new pebble's log writes are kept
	s.fs.reset()
	s.shadow.Store(nil)
	s.snapMu.Lock()
	s.snaps = map[*Snapshot]struct{}{}
	s.snapMu.Unlock()
	fail := func(err error) (protocol.Cursor, error) {
		err = fmt.Errorf("fold: reopen %s: %w", s.dir, err)
		s.breakWith(err)
		return s.Cursor(), s.Broken()
	}
	db, err := pebble.Open(s.dir, s.opts.pebbleOptions(s.stalls.listener(), s.fs, s.onFatal))
	if err != nil {
		return fail(err)
	}
	s.db = db
	cur, err := s.recover()
	if err != nil {
		_ = db.Close()
		s.db = nil
		return fail(err)
	}
	s.cursor.Store(&cur)
	s.gate.open()
	s.opts.Logger.Warn("fold: the broken store reopened from its files", "dir", s.dir, "cursor", uint64(cur.Rev))
	return cur, s.Broken() // broken again, by the reopen's own writes
}

// onFatal takes pebble's fatal errors: the store is broken, not the
// process. On a goroutine inside apply it panics for that recover
// (pebble's commit path does not expect Fatalf to return); elsewhere (a
// flush or compaction failing to record its result) it returns, and pebble
// fails that job.
func (s *Store) onFatal(msg string) {
	cause := fmt.Errorf("pebble: %s", msg)
	if w := s.fs.firstErr(); w != nil {
		cause = fmt.Errorf("%v (first write error: %w)", cause, w)
	}
	s.breakWith(cause)
	if inGuardedApply() {
		panic(pebbleFatal{msg: msg})
	}
}

// Dir is the directory the store was opened in.
func (s *Store) Dir() string { return s.dir }

// Cursor returns the cursor of the last successful Commit (or the recovered
// one). It reads memory, not pebble, and works after Close.
func (s *Store) Cursor() protocol.Cursor { return *s.cursor.Load() }

// readCursor reads the stored cursor from r; zero when none was committed.
func readCursor(r pebble.Reader) (protocol.Cursor, error) {
	v, ok, err := getCopy(r, metaCursorKey)
	if err != nil {
		return protocol.Cursor{}, fmt.Errorf("fold: read cursor: %w", err)
	}
	var c protocol.Cursor
	if !ok {
		return c, nil
	}
	if err := c.UnmarshalBinary(v); err != nil {
		return protocol.Cursor{}, fmt.Errorf("%w: cursor: %w", ErrCorrupt, err)
	}
	return c, nil
}

// getCopy reads key from r into a fresh slice the caller owns.
func getCopy(r pebble.Reader, key []byte) ([]byte, bool, error) {
	v, closer, err := r.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, err
	}
	out := make([]byte, len(v))
	copy(out, v)
	return out, true, closer.Close()
}

// isEmpty reports whether the database holds no key at all.
func isEmpty(r pebble.Reader) (bool, error) {
	it, err := r.NewIter(nil)
	if err != nil {
		return false, err
	}
	has := it.First()
	return !has, it.Close()
}

// hasKeys reports whether keyspace space holds a key.
func hasKeys(r pebble.Reader, space byte) (bool, error) {
	lower, upper := prefixBounds(space, "")
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return false, err
	}
	has := it.First()
	return has, errors.Join(it.Error(), it.Close())
}
