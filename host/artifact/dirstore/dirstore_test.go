package dirstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/internal/files"
)

func newLocal(t *testing.T) *Store {
	t.Helper()
	l, err := New(filepath.Join(t.TempDir(), "remote"))
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
	st := storetest.OpenStore(t)
	a := storetest.ExportAt(t, st, 10, nil)
	manifest, err := l.UploadPayload(t.Context(), "k", a.Dir)
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
	if _, err := l.Pointer(t.Context(), "k"); !errors.Is(err, artifact.ErrNoPointer) {
		t.Fatalf("pointer after the refused swap: %v", err)
	}
	unlock()
	if out, err := l.SwapPointer(t.Context(), "k", manifest); err != nil || out != artifact.Published {
		t.Fatalf("swap once the lock is free: %v %v", out, err)
	}
}

// TestLocalRefusesNonRegularFiles: a payload or pointer that is a FIFO (or
// any non-regular file) is refused without being read (a FIFO payload used
// to hang `foldhost bootstrap` forever), and a pointer over the manifest
// size limit is refused too (it used to be read whole).
func TestLocalRefusesNonRegularFiles(t *testing.T) {
	l := newLocal(t)
	st := storetest.OpenStore(t)
	a := storetest.ExportAt(t, st, 10, nil)
	if _, err := publishRound(t, l, "k", a.Dir); err != nil {
		t.Fatal(err)
	}
	manifest, err := l.Pointer(t.Context(), "k")
	if err != nil {
		t.Fatal(err)
	}
	payload := l.payloadPath("k", artifact.Address(manifest))
	if err := os.Remove(payload); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(payload, 0o644); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		_, err := artifact.Download(t.Context(), l, "k", filepath.Join(t.TempDir(), "dest"), artifact.DownloadOptions{})
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
	// Uploading the same artifact again finds the FIFO where its payload
	// goes, and compares with it: refused, not blocked.
	go func() {
		_, err := l.UploadPayload(t.Context(), "k", a.Dir)
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, files.ErrNotRegular) {
			t.Fatalf("upload onto a FIFO payload: %v, want ErrNotRegular", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatal("upload onto a FIFO payload blocked")
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
	if err := os.WriteFile(pointer, make([]byte, artifact.MaxManifestSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Pointer(t.Context(), "k"); !errors.Is(err, files.ErrTooLarge) {
		t.Fatalf("an oversized pointer: %v, want ErrTooLarge", err)
	}
}

// publishRound uploads the artifact in dir and swaps key's pointer to it.
func publishRound(t *testing.T, l *Store, key, dir string) (artifact.Outcome, error) {
	t.Helper()
	manifest, err := l.UploadPayload(t.Context(), key, dir)
	if err != nil {
		return 0, err
	}
	return l.SwapPointer(t.Context(), key, manifest)
}

func TestContract(t *testing.T) {
	storetest.Run(t, func(t *testing.T) storetest.Harness {
		l := newLocal(t)
		return storetest.Harness{
			Store: l,
			PutPointer: func(t *testing.T, key string, b []byte) {
				if err := os.WriteFile(l.pointerPath(key), b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			PutPayload: func(t *testing.T, key, name string, b []byte) {
				if err := os.MkdirAll(l.payloadDir(key), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(l.payloadDir(key), name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			PayloadNames: func(t *testing.T, key string) []string { return storetest.ListDir(t, l.payloadDir(key)) },
			AbandonUpload: func(t *testing.T, key string) {
				if err := os.MkdirAll(l.payloadDir(key), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{filepath.Join(l.payloadDir(key), ".upload-123"), filepath.Join(l.root, "."+key+".pointer-456")} {
					if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			Leftovers: func(t *testing.T, key string) int {
				a, _ := filepath.Glob(filepath.Join(l.payloadDir(key), ".upload-*"))
				b, _ := filepath.Glob(filepath.Join(l.root, "."+key+".pointer-*"))
				return len(a) + len(b)
			},
			RaceRounds: 25,
		}
	})
}
