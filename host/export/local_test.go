package export

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
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
