package files

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

func TestReadRegular(t *testing.T) {
	dir := t.TempDir()
	ok := filepath.Join(dir, "ok")
	if err := os.WriteFile(ok, []byte("12345"), 0o644); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(dir, "link")
	if err := os.Symlink(ok, link); err != nil {
		t.Fatal(err)
	}
	if b, err := ReadRegular(ok, 5); err != nil || string(b) != "12345" {
		t.Fatalf("ReadRegular(ok, 5) = %q, %v", b, err)
	}
	if b, err := ReadRegular(link, 5); err != nil || string(b) != "12345" {
		t.Fatalf("through a symlink: %q, %v", b, err)
	}
	if _, err := ReadRegular(ok, 4); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("over the limit: %v", err)
	}
	for name, p := range map[string]string{"dir": dir, "fifo": fifo, "device": "/dev/zero"} {
		done := make(chan error, 1)
		go func() { _, err := ReadRegular(p, 1<<20); done <- err }()
		select {
		case err := <-done:
			if !errors.Is(err, ErrNotRegular) {
				t.Errorf("%s: %v, want ErrNotRegular", name, err)
			}
		case <-time.After(time.Minute):
			t.Fatalf("%s: ReadRegular blocked (a FIFO must not wait for a writer)", name)
		}
	}
}

func TestLock(t *testing.T) {
	path := filepath.Join(t.TempDir(), "lock")
	a, err := TryLock(path)
	if err != nil {
		t.Fatal(err)
	}
	// A second Lock of this process is excluded too.
	if _, err := TryLock(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second TryLock: %v, want ErrLocked", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := LockWait(ctx, path); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("LockWait on a held lock: %v", err)
	}
	a.Unlock()
	a.Unlock() // idempotent
	b, err := LockWait(context.Background(), path)
	if err != nil {
		t.Fatalf("after Unlock: %v", err)
	}
	b.Unlock()
}
