package export

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

type artifact struct {
	dir    string
	cursor protocol.Cursor
	data   dump
	addr   string
}

// exportAt commits n more updates to st and exports it.
func exportAt(t *testing.T, st *fold.Store, n int, scope []string) artifact {
	t.Helper()
	var cur protocol.Cursor
	if n > 0 {
		cur = commitN(t, st, n)
	} else {
		cur = st.Cursor()
	}
	dir, _, err := Export(st, t.TempDir(), Source{Scope: scope})
	if err != nil {
		t.Fatal(err)
	}
	return artifact{dir: dir, cursor: cur, data: dumpStore(t, st), addr: Address(readManifest(t, dir))}
}

func newLocal(t *testing.T) *LocalDir {
	t.Helper()
	l, err := NewLocalDir(filepath.Join(t.TempDir(), "remote"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// TestLocalLockHonoursContext: a pointer swap waiting for the key's lock,
// held by another process or goroutine, gives up when its context ends,
// and succeeds once the lock is free.
func TestLocalLockHonoursContext(t *testing.T) {
	l := newLocal(t)
	st := openStore(t)
	a := exportAt(t, st, 10, nil)
	manifest, err := l.UploadPayload(t.Context(), "k", a.dir)
	if err != nil {
		t.Fatal(err)
	}
	unlock, err := l.lock(t.Context(), "k") // another holder
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	if _, err := l.SwapPointer(ctx, "k", manifest); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("swap under a held lock: %v, want context.DeadlineExceeded", err)
	}
	if _, err := l.Pointer(t.Context(), "k"); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("pointer after the refused swap: %v", err)
	}
	unlock()
	if out, err := l.SwapPointer(t.Context(), "k", manifest); err != nil || out != Published {
		t.Fatalf("swap once the lock is free: %v %v", out, err)
	}
}

// TestLocalRefusesNonRegularFiles: a payload or pointer that is a FIFO (or
// any non-regular file) is refused without being read (a FIFO payload used
// to hang `foldhost bootstrap` forever), and a pointer over the manifest
// size limit is refused too (it used to be read whole).
func TestLocalRefusesNonRegularFiles(t *testing.T) {
	l := newLocal(t)
	st := openStore(t)
	a := exportAt(t, st, 10, nil)
	if _, err := publishRound(t, l, "k", a.dir); err != nil {
		t.Fatal(err)
	}
	manifest, err := l.Pointer(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	payload := l.payloadPath("k", Address(manifest))
	if err := os.Remove(payload); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(payload, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := Download(t.Context(), l, "k", filepath.Join(t.TempDir(), "dest"), DownloadOptions{})
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, files.ErrNotRegular) {
			t.Fatalf("download of a FIFO payload: %v, want ErrNotRegular", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("download of a FIFO payload blocked")
	}

	pointer := l.pointerPath("k")
	if err := os.Remove(pointer); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(pointer, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pointer(t.Context(), "k"); !errors.Is(err, files.ErrNotRegular) {
		t.Fatalf("a FIFO pointer: %v, want ErrNotRegular", err)
	}
	if err := os.Remove(pointer); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pointer, make([]byte, maxManifestSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pointer(t.Context(), "k"); !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("an oversized pointer: %v, want ErrTooLarge", err)
	}
}

// publishRound uploads the artifact in dir and swaps key's pointer to it.
func publishRound(t *testing.T, l *LocalDir, key, dir string) (Outcome, error) {
	t.Helper()
	manifest, err := l.UploadPayload(t.Context(), key, dir)
	if err != nil {
		return 0, err
	}
	return l.SwapPointer(t.Context(), key, manifest)
}
