package fold

import (
	"errors"
	"fmt"
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
// (the lock file). It is taken before pebble opens the directory, so a
// refused open leaves nothing behind (pebble's own failed open leaks a
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
	open.dirs[real] = true
	return &dirLock{real: real, file: f, created: os.IsNotExist(statErr)}, nil
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
