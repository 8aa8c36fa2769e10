package export

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// openStore opens a fresh store in a temp dir, closed at cleanup.
func openStore(t testing.TB) *fold.Store {
	t.Helper()
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// commitN commits n raw puts and view puts with revisions above the store's
// cursor and a cursor with the eviction memo and a message time, so the
// extended cursor encoding travels through the artifact.
func commitN(t testing.TB, st *fold.Store, n int) protocol.Cursor {
	t.Helper()
	rev := st.Cursor().Rev
	var c fold.Commit
	for i := 0; i < n; i++ {
		rev++
		c.Raw = append(c.Raw, fold.Update{Key: fmt.Sprintf("route.k%06d", rev), Op: fold.OpPut, Rev: rev,
			Value: bytes.Repeat([]byte{byte(rev)}, 100)})
		c.Views = append(c.Views, fold.ViewMutation{Key: []byte(fmt.Sprintf("v/%06d", rev)), Op: fold.ViewPut,
			Value: []byte(fmt.Sprintf("view-%d", rev))})
	}
	c.Cursor = protocol.Cursor{Rev: rev, EvictionSeen: true, MsgUnixNano: int64(rev) * 1000}
	c.PluginIdentity = []byte(fmt.Sprintf(`{"sha256":"abc","view_schema":%d}`, rev))
	if err := st.Commit(c); err != nil {
		t.Fatal(err)
	}
	return c.Cursor
}

type dump struct {
	Raw   map[string]string
	Views map[string]string
	Ident string
}

func dumpStore(t testing.TB, st *fold.Store) dump {
	t.Helper()
	d := dump{Raw: map[string]string{}, Views: map[string]string{}}
	if err := st.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		d.Raw[string(k)] = fmt.Sprintf("%d:%x", rev, v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := st.ViewRange(nil, func(k, v []byte) error {
		d.Views[string(k)] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	id, ok, err := st.PluginIdentity()
	if err != nil {
		t.Fatal(err)
	}
	if ok {
		d.Ident = string(id)
	}
	return d
}

// checkImported opens the fold at dir and requires cursor and data to
// equal want's.
func checkImported(t testing.TB, dir string, wantCur protocol.Cursor, want dump) {
	t.Helper()
	st, cur, err := fold.Open(dir, fold.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if cur != wantCur {
		t.Fatalf("imported cursor %+v, want %+v", cur, wantCur)
	}
	if got := dumpStore(t, st); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported data differs: %d raw, %d views; want %d raw, %d views",
			len(got.Raw), len(got.Views), len(want.Raw), len(want.Views))
	}
}

type entry struct {
	hdr  tar.Header
	body []byte
}

func readEntries(t testing.TB, b []byte) []entry {
	t.Helper()
	var out []entry
	tr := tar.NewReader(bytes.NewReader(b))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, entry{hdr: *h, body: body})
	}
}

func buildTar(t testing.TB, es []entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if len(e.body) > 0 {
			if _, err := tw.Write(e.body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func tarOf(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readManifest(t testing.TB, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// listDir returns the names in dir (nil when absent).
func listDir(t testing.TB, dir string) []string {
	t.Helper()
	es, err := os.ReadDir(dir)
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range es {
		names = append(names, e.Name())
	}
	return names
}
