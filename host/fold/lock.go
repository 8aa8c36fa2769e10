package fold

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/foldhost/foldhost/internal/files"
)

// ErrLocked: the store's directory is in use, by another process (its lock
// file is held) or by another Store of this process (the same directory, or
// one nested in or around it, whatever the path's spelling: symlinks and
// relative paths are resolved first).
var ErrLocked = errors.New("fold: store in use")

// ErrNested: the store's directory lies inside another store's, or holds
// one (a directory with a LockFile), whichever process has it open, if
// any: one store's files are never another's (a reset of the outer store
// moves its whole directory aside).
var ErrNested = errors.New("fold: store nested in another")

// LockFile is the lock an open Store holds in its directory, beside
// pebble's own files (pebble ignores files it does not know, and a
// checkpoint or an export copies pebble's files only).
const LockFile = "foldhost.lock"

// open is the registry of the directories this process has open as stores,
// by real path.
var open = struct {
	sync.Mutex
	dirs map[string]bool
}{dirs: map[string]bool{}}

// dirLock is what an open Store holds on its directory.
type dirLock struct {
	real    string
	file    *files.Lock
	created bool // the lock file did not exist before
}

// lockDir claims dir for one Store: in this process first (no other Store
// may have it, or a directory inside or around it), then across processes
// (the lock file, then no store's lock file in a directory above or below
// it: see checkNesting). It is taken before pebble opens the directory, so
// a refused open leaves nothing behind (pebble's own failed open leaks a
// goroutine).
func lockDir(dir string) (*dirLock, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("fold: open %s: %w", dir, err)
	}
	if err := os.MkdirAll(abs, 0o755); err != nil {
		return nil, fmt.Errorf("fold: open %s: %w", dir, err)
	}
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, fmt.Errorf("fold: open %s: %w", dir, err)
	}
	open.Lock()
	defer open.Unlock()
	for other := range open.dirs {
		if Overlap(real, other) {
			if real == other {
				return nil, fmt.Errorf("%w: %s is open in this process already (another fold on the same directory?)", ErrLocked, dir)
			}
			return nil, fmt.Errorf("%w: %s (%s) overlaps %s, a store this process has open (one store may not hold another)", ErrLocked, dir, real, other)
		}
	}
	path := filepath.Join(real, LockFile)
	_, statErr := os.Lstat(path)
	f, err := files.TryLock(path)
	if errors.Is(err, files.ErrLocked) {
		return nil, fmt.Errorf("%w: %s is locked by another process (is another foldhost running on this data dir?)", ErrLocked, dir)
	}
	if err != nil {
		return nil, fmt.Errorf("fold: open %s: %w", dir, err)
	}
	l := &dirLock{real: real, file: f, created: os.IsNotExist(statErr)}
	// Checked with the lock held: two processes opening nested stores at
	// once each see the other's lock file, and both refuse.
	if err := checkNesting(real); err != nil {
		if l.created {
			_ = os.Remove(path)
		}
		f.Unlock()
		return nil, fmt.Errorf("%w: %s: %w", ErrLocked, dir, err)
	}
	open.dirs[real] = true
	return l, nil
}

// checkNesting refuses a store directory (real: resolved) that lies inside
// another store's, or holds one: a LockFile in any directory above it, up
// to the root, or in any directory below it. A lock file marks a store
// whether or not a process has it open now (a stopped store nested in a
// live one is as broken at its next start). Each directory's own listing is
// all the walk reads; symlinks are not followed, and a subdirectory that
// cannot be read is passed over.
func checkNesting(real string) error {
	for d := filepath.Dir(real); ; d = filepath.Dir(d) {
		if _, err := os.Lstat(filepath.Join(d, LockFile)); err == nil {
			return fmt.Errorf("%w: it lies inside %s, a store's directory (%s marks it; another foldhost may have it open): choose a data dir outside every store", ErrNested, d, LockFile)
		}
		if d == filepath.Dir(d) {
			break
		}
	}
	found := ""
	_ = filepath.WalkDir(real, func(p string, e fs.DirEntry, err error) error {
		switch {
		case err != nil && e != nil && e.IsDir():
			return fs.SkipDir
		case err != nil:
			return nil
		case p == real:
			return nil
		case e.IsDir():
			if _, err := os.Lstat(filepath.Join(p, LockFile)); err == nil {
				found = p
				return fs.SkipAll
			}
			return nil
		}
		return nil
	})
	if found != "" {
		return fmt.Errorf("%w: it holds %s, a store's directory (%s marks it; another foldhost may have it open): choose a data dir outside every store", ErrNested, found, LockFile)
	}
	return nil
}

// release gives the directory up. With tidy set (an open that failed) a
// lock file the open created is removed first, while still held, so a
// refused directory is left as it was found.
func (l *dirLock) release(tidy bool) {
	if tidy && l.created {
		_ = os.Remove(filepath.Join(l.real, LockFile))
	}
	open.Lock()
	delete(open.dirs, l.real)
	open.Unlock()
	l.file.Unlock()
}

// Overlap reports whether two clean absolute paths are the same directory
// or one lies inside the other.
func Overlap(a, b string) bool {
	if a == b {
		return true
	}
	inside := func(in, out string) bool {
		return strings.HasPrefix(in, strings.TrimSuffix(out, string(filepath.Separator))+string(filepath.Separator))
	}
	return inside(a, b) || inside(b, a)
}
