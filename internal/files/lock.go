package files

import (
	"context"
	"errors"
	"fmt"
	"os"
	"syscall"
	"time"
)

// ErrLocked: another holder (another process, or another Lock of this
// one) has the lock.
var ErrLocked = errors.New("locked by another holder")

// Lock is an exclusive flock(2) on a file, held until Unlock. Each Lock
// opens its own file description, so it excludes other Locks of this
// process as well as other processes; the kernel releases it when the
// process dies, however it dies.
type Lock struct{ f *os.File }

// TryLock takes the lock on path (created if missing) without waiting.
func TryLock(path string) (*Lock, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err = syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		if err == syscall.EWOULDBLOCK {
			return nil, fmt.Errorf("%s: %w", path, ErrLocked)
		}
		return nil, fmt.Errorf("lock %s: %w", path, err)
	}
	return &Lock{f}, nil
}

// LockWait takes the lock on path, waiting until it is free or ctx is done.
func LockWait(ctx context.Context, path string) (*Lock, error) {
	wait := time.Millisecond
	for {
		l, err := TryLock(path)
		if !errors.Is(err, ErrLocked) {
			return l, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("lock %s: %w", path, ctx.Err())
		case <-time.After(wait):
		}
		wait = min(2*wait, 50*time.Millisecond)
	}
}

// Unlock releases the lock. Safe on a nil Lock and more than once.
func (l *Lock) Unlock() {
	if l == nil || l.f == nil {
		return
	}
	_ = syscall.Flock(int(l.f.Fd()), syscall.LOCK_UN)
	_ = l.f.Close()
	l.f = nil
}
