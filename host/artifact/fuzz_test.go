package artifact_test

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/host/fold"
)

// FuzzParseManifest: any bytes are refused with ErrArtifactInvalid or
// accepted; an accepted manifest re-encodes to bytes that parse to the same
// manifest, at the same address once canonical.
func FuzzParseManifest(f *testing.F) {
	st := storetest.OpenStore(f)
	a := storetest.ExportAt(f, st, 20, []string{"route."})
	f.Add(storetest.ReadManifest(f, a.Dir))
	f.Add([]byte(`{"schema":1}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := artifact.ParseManifest(b)
		if err != nil {
			if !errors.Is(err, artifact.ErrArtifactInvalid) {
				t.Fatalf("refusal is not ErrArtifactInvalid: %v", err)
			}
			return
		}
		enc, err := m.Encode()
		if err != nil {
			t.Fatalf("accepted manifest does not encode: %v", err)
		}
		m2, err := artifact.ParseManifest(enc)
		if err != nil {
			t.Fatalf("re-encoded manifest refused: %v\n%s", err, enc)
		}
		enc2, _ := m2.Encode()
		if !bytes.Equal(enc, enc2) {
			t.Fatalf("encoding is not canonical:\n%s\n%s", enc, enc2)
		}
	})
}

// FuzzImport: a payload tar mutated anywhere is either refused, leaving
// nothing behind, or installs a store that recovers the manifest's cursor.
func FuzzImport(f *testing.F) {
	st := storetest.OpenStore(f)
	a := storetest.ExportAt(f, st, 50, nil)
	mb := storetest.ReadManifest(f, a.Dir)
	good := storetest.TarOf(f, a.Dir)
	f.Add(good)
	f.Add(good[:len(good)/2])
	f.Add([]byte{})
	m, err := artifact.ParseManifest(mb)
	if err != nil {
		f.Fatal(err)
	}
	want, _ := m.DecodeCursor()
	f.Fuzz(func(t *testing.T, tb []byte) {
		parent := t.TempDir()
		dest := filepath.Join(parent, "fold")
		_, err := artifact.Import(bytes.NewReader(tb), mb, dest)
		if err != nil {
			if names, _ := os.ReadDir(parent); len(names) != 0 {
				t.Fatalf("refused import (%v) left %v", err, names)
			}
			return
		}
		s, cur, err := fold.Open(dest, fold.Options{})
		if err != nil {
			t.Fatalf("installed store does not open: %v", err)
		}
		defer s.Close()
		if cur != want {
			t.Fatalf("installed store recovers %v, manifest says %v", cur, want)
		}
	})
}
