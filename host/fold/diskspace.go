package fold

import (
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A full disk (RATIONALE.md, "A full disk fails the fold, not the
// process"). Pebble treats a failed write of its log or manifest as fatal:
// it panics, some of those panics with its locks held, so a commit that
// runs out of space there would take the whole process down. Every write
// of the store therefore first checks the filesystem's free space and
// refuses, writing nothing, when fewer than the write's size plus
// Options.DiskReserve bytes are free: the reserve is what pebble may still
// need for the writes already accepted (flushing the memtables). A write
// error that reaches pebble anyway (something else took the space between
// the check and the write) breaks the store instead of the process: see
// [ErrStoreBroken].

var (
	// ErrDiskFull is wrapped by a [*DiskFullError]: a write was refused,
	// nothing written, because the store's filesystem is short of space.
	// The store is intact: the same write succeeds once space is freed.
	ErrDiskFull = errors.New("fold: disk full")

	// ErrStoreBroken is wrapped by a [*StoreBrokenError]: a write error
	// reached pebble's log (or pebble reported a fatal error), after which
	// pebble cannot go on writing. The store refuses every later write and
	// serves reads as they were; its files on disk hold every commit up to
	// some point, whole (as after a crash). [Store.Reopen] (or a restart)
	// replays them.
	ErrStoreBroken = errors.New("fold: store broken by a write error")
)

// DiskFullError reports a write refused for lack of space.
type DiskFullError struct {
	Dir string
	// Free is what the filesystem had available; Need is the write's size
	// plus the reserve.
	Free, Need uint64
	Reserve    uint64
}

func (e *DiskFullError) Error() string {
	return fmt.Sprintf("%v: store %s needs %d bytes free (the write plus a %d-byte reserve), its filesystem has %d; nothing was written",
		ErrDiskFull, e.Dir, e.Need, e.Reserve, e.Free)
}

// Unwrap makes errors.Is(err, ErrDiskFull) hold.
func (e *DiskFullError) Unwrap() error { return ErrDiskFull }

// StoreBrokenError reports the write error that broke the store.
type StoreBrokenError struct {
	Dir string
	// Err is the first write error of pebble's log (naming the file), or
	// pebble's fatal message.
	Err error
	// Free is what the filesystem had available when the store broke (0
	// when unknown); Need the reserve a write needs on top of its size.
	Free, Need uint64
}

func (e *StoreBrokenError) Error() string {
	return fmt.Sprintf("%v: store %s: %v (filesystem free: %d bytes, a write needs its size plus %d); it takes no more writes until reopened",
		ErrStoreBroken, e.Dir, e.Err, e.Free, e.Need)
}

// Unwrap makes errors.Is hold for ErrStoreBroken, for the write error, and
// for ErrDiskFull when that error is a lack of space.
func (e *StoreBrokenError) Unwrap() []error {
	errs := []error{ErrStoreBroken, e.Err}
	if isNoSpace(e.Err) {
		errs = append(errs, ErrDiskFull)
	}
	return errs
}

// isNoSpace reports whether err is the filesystem out of space or quota.
func isNoSpace(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// diskReserve is o's reserve in bytes (o defaulted).
func (o Options) diskReserve() uint64 {
	switch {
	case o.DiskReserve < 0:
		return 0
	case o.DiskReserve == 0:
		return o.MemTableSize * memTableStopWrites
	}
	return uint64(o.DiskReserve)
}

// checkSpace refuses a write of size bytes when the filesystem has less
// than size plus the reserve available. A filesystem that cannot tell its
// free space is not refused (pebble's own error handling is left).
func (s *Store) checkSpace(size uint64) error {
	du, err := s.fs.FS.GetDiskUsage(s.dir)
	if err != nil {
		return nil
	}
	if need := size + s.reserve; du.AvailBytes < need {
		return &DiskFullError{Dir: s.dir, Free: du.AvailBytes, Need: need, Reserve: s.reserve}
	}
	return nil
}

// probeDisk tries the store's disk before a Reopen: a scratch file in the
// store's directory gets the space the reopen's flush may write (the log
// files' size, allocated), a block written and synced, and is removed.
func (s *Store) probeDisk() (err error) {
	fs := s.fs.FS
	names, err := fs.List(s.dir)
	if err != nil {
		return err
	}
	var logBytes int64
	for _, n := range names {
		if strings.HasSuffix(n, ".log") {
			if fi, err := fs.Stat(fs.PathJoin(s.dir, n)); err == nil {
				logBytes += fi.Size()
			}
		}
	}
	path := fs.PathJoin(s.dir, "reopen-probe.tmp")
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return err
	}
	defer func() {
		err = errors.Join(err, fs.Remove(path))
	}()
	if logBytes > 0 {
		err = f.Preallocate(0, logBytes)
	}
	if err == nil {
		_, err = f.Write(make([]byte, 4<<10))
	}
	if err == nil {
		err = f.Sync()
	}
	return errors.Join(err, f.Close())
}

// SpaceFree reports whether the store's filesystem has room for a small
// write and its reserve: what a fold that failed on a full disk waits for.
func (s *Store) SpaceFree() error { return s.checkSpace(4 << 10) }

// Broken is the [*StoreBrokenError] that stopped the store's writes, nil
// while it writes.
func (s *Store) Broken() error {
	if e := s.broken.Load(); e != nil {
		return e
	}
	return nil
}

// breakWith marks the store broken by cause (the first cause wins) and
// returns the error its writes now fail with.
func (s *Store) breakWith(cause error) error {
	e := &StoreBrokenError{Dir: s.dir, Err: cause, Need: s.reserve}
	if du, err := s.fs.FS.GetDiskUsage(s.dir); err == nil {
		e.Free = du.AvailBytes
	}
	if s.broken.CompareAndSwap(nil, e) {
		s.opts.Logger.Error("fold: the store is broken by a write error; it refuses every write until reopened", "dir", s.dir, "err", cause)
	}
	return s.broken.Load()
}

// pebbleFatal is what the store's pebble logger panics with when pebble
// reports a fatal error on a goroutine inside [Store.apply], which
// recovers it.
type pebbleFatal struct{ msg string }

// apply writes b (of Sync or NoSync opts) unless the store is broken or
// short of space (returning why). A panic out of pebble (its fatal error,
// or a panic on its commit path) breaks the store and returns as an error;
// so does a log write error pebble met during the write (its outcome is
// unknown: the reopen decides). Writes are serialized behind the checks.
func (s *Store) apply(b *pebble.Batch, opts *pebble.WriteOptions) (err error) {
	s.applyMu.Lock()
	defer s.applyMu.Unlock()
	if e := s.Broken(); e != nil {
		return e
	}
	if err := s.checkSpace(uint64(len(b.Repr()))); err != nil {
		return err
	}
	defer func() {
		r := recover()
		if r == nil {
			if e := s.Broken(); e != nil && err == nil {
				err = e
			}
			return
		}
		var cause error
		switch v := r.(type) {
		case pebbleFatal: // onFatal broke the store already
			err = s.Broken()
			return
		case error:
			cause = fmt.Errorf("pebble panicked: %w", v)
			s.wedged.Store(true) // its commit lock may be held: never closed
		default:
			cause = fmt.Errorf("pebble panicked: %v", v)
			s.wedged.Store(true)
		}
		if w := s.fs.firstErr(); w != nil { // the write error behind it, naming the file
			cause = fmt.Errorf("%v (first write error: %w)", cause, w)
		}
		err = s.breakWith(cause)
	}()
	return s.db.Apply(b, opts)
}

// guardFS is the store's filesystem: the configured one, with every write
// error of the store's files recorded (the first is kept, for messages).
//
// The log (the WAL's *.log files) is special: pebble panics on a failed log
// write, close or creation, in some places with its locks held or in a way
// Go cannot recover (an unlock of an unlocked mutex when rotating the log).
// So no log error ever reaches pebble. The first one breaks the store, and
// from then on every write of the log is dropped, reported as done: the
// log on disk ends where the error struck, exactly as if the process had
// died there, and what pebble holds in memory past it is never made
// durable. The store refuses every later commit (apply), so what
// reopens is whole commits up to one: the log replayed to the tear, or a
// memtable pebble flushed since (whole batches, in order).
type guardFS struct {
	vfs.FS
	s  *Store
	mu sync.Mutex
	// first is the first write error of the store's own files.
	first error
}

// reset forgets the recorded error (a Reopen).
func (g *guardFS) reset() {
	g.mu.Lock()
	g.first = nil
	g.mu.Unlock()
}

func (g *guardFS) firstErr() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.first
}

// isLog reports whether path is one of the store's log files.
func (g *guardFS) isLog(path string) bool {
	return strings.HasSuffix(path, ".log") && filepath.Dir(path) == g.s.dir
}

// note records err, a failed write-side operation op on path, and returns
// it. Files outside the store's directory (a checkpoint's copy) are the
// caller's concern. An error of the log breaks the store.
func (g *guardFS) note(op, path string, err error) error {
	if err == nil || filepath.Dir(path) != g.s.dir {
		return err
	}
	this := err
	if !strings.Contains(err.Error(), path) {
		this = fmt.Errorf("%s %s: %w", op, path, err)
	}
	g.mu.Lock()
	if g.first == nil {
		g.first = this
	}
	g.mu.Unlock()
	if g.isLog(path) {
		g.s.breakWith(this)
	}
	return err
}

// dropping reports whether the log's writes are dropped: the store is
// broken.
func (g *guardFS) dropping() bool { return g.s.broken.Load() != nil }

func (g *guardFS) wrap(f vfs.File, name string, err error, op string) (vfs.File, error) {
	if g.isLog(name) && (err != nil || g.dropping()) {
		// A log file that cannot be made: the store breaks, and pebble
		// gets a file that drops what it writes.
		if err != nil {
			g.note(op, name, err)
		} else {
			_ = f.Close()
		}
		return droppedLogFile{}, nil
	}
	if err != nil {
		return nil, g.note(op, name, err)
	}
	return &guardFile{File: f, g: g, name: name, log: g.isLog(name)}, nil
}

func (g *guardFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.Create(name, c)
	return g.wrap(f, name, err, "create")
}

func (g *guardFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := g.FS.OpenReadWrite(name, c, opts...)
	return g.wrap(f, name, err, "open")
}

func (g *guardFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := g.FS.ReuseForWrite(oldname, newname, c)
	return g.wrap(f, newname, err, "reuse")
}

func (g *guardFS) Link(oldname, newname string) error {
	return g.note("link", newname, g.FS.Link(oldname, newname))
}

func (g *guardFS) Rename(oldname, newname string) error {
	return g.note("rename", newname, g.FS.Rename(oldname, newname))
}

func (g *guardFS) Unwrap() vfs.FS { return g.FS }

// guardFile records its write errors with its guardFS; a log file's
// errors break the store and are not returned (see guardFS).
type guardFile struct {
	vfs.File
	g    *guardFS
	name string
	log  bool
}

// logged turns a log write's error into a break of the store.
func (f *guardFile) logged(op string, err error) error {
	err = f.g.note(op, f.name, err)
	if f.log {
		return nil
	}
	return err
}

func (f *guardFile) Write(p []byte) (int, error) {
	if f.log && f.g.dropping() {
		return len(p), nil
	}
	n, err := f.File.Write(p)
	if err = f.logged("write", err); err == nil {
		n = len(p)
	}
	return n, err
}

func (f *guardFile) WriteAt(p []byte, off int64) (int, error) {
	if f.log && f.g.dropping() {
		return len(p), nil
	}
	n, err := f.File.WriteAt(p, off)
	if err = f.logged("write", err); err == nil {
		n = len(p)
	}
	return n, err
}

func (f *guardFile) Sync() error {
	if f.log && f.g.dropping() {
		return nil
	}
	return f.logged("sync", f.File.Sync())
}

func (f *guardFile) SyncData() error {
	if f.log && f.g.dropping() {
		return nil
	}
	return f.logged("sync", f.File.SyncData())
}

func (f *guardFile) SyncTo(length int64) (bool, error) {
	if f.log && f.g.dropping() {
		return true, nil
	}
	full, err := f.File.SyncTo(length)
	return full, f.logged("sync", err)
}

func (f *guardFile) Close() error { return f.logged("close", f.File.Close()) }

// droppedLogFile is the log file of a broken store that could not be
// made: it drops every write.
type droppedLogFile struct{}

var _ vfs.File = droppedLogFile{}

func (droppedLogFile) Close() error                           { return nil }
func (droppedLogFile) Read([]byte) (int, error)               { return 0, io.EOF }
func (droppedLogFile) ReadAt([]byte, int64) (int, error)      { return 0, io.EOF }
func (droppedLogFile) Write(p []byte) (int, error)            { return len(p), nil }
func (droppedLogFile) WriteAt(p []byte, _ int64) (int, error) { return len(p), nil }
func (droppedLogFile) Preallocate(int64, int64) error         { return nil }
func (droppedLogFile) Stat() (vfs.FileInfo, error) {
	return nil, errors.New("fold: a dropped log file")
}
func (droppedLogFile) Sync() error                 { return nil }
func (droppedLogFile) SyncTo(int64) (bool, error)  { return true, nil }
func (droppedLogFile) SyncData() error             { return nil }
func (droppedLogFile) Prefetch(int64, int64) error { return nil }
func (droppedLogFile) Fd() uintptr                 { return vfs.InvalidFd }

// inGuardedApply reports whether the calling goroutine runs inside
// apply (its recover is on the stack). Only pebble's fatal path
// asks, so the stack walk costs nothing in normal operation.
func inGuardedApply() bool {
	pcs := make([]uintptr, 64)
	n := runtime.Callers(2, pcs)
	frames := runtime.CallersFrames(pcs[:n])
	for {
		fr, more := frames.Next()
		if strings.HasSuffix(fr.Function, "fold.(*Store).apply") {
			return true
		}
		if !more {
			return false
		}
	}
}
