package export

import (
	"path/filepath"
	"testing"

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
