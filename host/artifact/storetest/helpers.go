package storetest

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// OpenStore opens a fresh store in a temp dir, closed at cleanup, that
// records the origin Origin (as a host's stores do before they export).
func OpenStore(t testing.TB) *fold.Store {
	t.Helper()
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.SetOrigin(Origin); err != nil {
		t.Fatal(err)
	}
	return st
}

// Origin is the origin OpenStore records.
var Origin = fold.NewOrigin("routes", nil, time.Unix(1700000000, 0))

// CommitN commits n raw puts and view puts with revisions above the store's
// cursor and a cursor with the eviction memo and a message time, so the
// extended cursor encoding travels through the artifact.
func CommitN(t testing.TB, st *fold.Store, n int) protocol.Cursor {
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

type Dump struct {
	Raw   map[string]string
	Views map[string]string
	Ident string
}

func DumpStore(t testing.TB, st *fold.Store) Dump {
	t.Helper()
	d := Dump{Raw: map[string]string{}, Views: map[string]string{}}
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

// CheckImported opens the fold at dir and requires cursor and data to
// equal want's.
func CheckImported(t testing.TB, dir string, wantCur protocol.Cursor, want Dump) {
	t.Helper()
	st, cur, err := fold.Open(dir, fold.Options{CacheSize: 1 << 20, MemTableSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if cur != wantCur {
		t.Fatalf("imported cursor %+v, want %+v", cur, wantCur)
	}
	if got := DumpStore(t, st); !reflect.DeepEqual(got, want) {
		t.Fatalf("imported data differs: %d raw, %d views; want %d raw, %d views",
			len(got.Raw), len(got.Views), len(want.Raw), len(want.Views))
	}
}

// Entry is one tar entry.
type Entry struct {
	Hdr  tar.Header
	Body []byte
}

func ReadEntries(t testing.TB, b []byte) []Entry {
	t.Helper()
	var out []Entry
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
		out = append(out, Entry{Hdr: *h, Body: body})
	}
}

func BuildTar(t testing.TB, es []Entry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range es {
		h := e.Hdr
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(&h); err != nil {
			t.Fatal(err)
		}
		if len(e.Body) > 0 {
			if _, err := tw.Write(e.Body); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func TarOf(t testing.TB, dir string) []byte {
	t.Helper()
	var buf bytes.Buffer
	if err := artifact.WriteTar(&buf, dir); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func ReadManifest(t testing.TB, dir string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, artifact.ManifestName))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// ListDir returns the names in dir (nil when absent).
func ListDir(t testing.TB, dir string) []string {
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

// Artifact is an exported artifact with what the tests check it against.
type Artifact struct {
	Dir    string
	Cursor protocol.Cursor
	Data   Dump
	Addr   string
}

// ExportAt commits n more updates to st and exports it.
func ExportAt(t testing.TB, st *fold.Store, n int, scope []string) Artifact {
	t.Helper()
	var cur protocol.Cursor
	if n > 0 {
		cur = CommitN(t, st, n)
	} else {
		cur = st.Cursor()
	}
	if err := st.SetOrigin(fold.NewOrigin(Origin.Bucket, scope, Origin.StreamCreated)); err != nil {
		t.Fatal(err)
	}
	dir, _, err := artifact.Export(st, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return Artifact{Dir: dir, Cursor: cur, Data: DumpStore(t, st), Addr: artifact.Address(ReadManifest(t, dir))}
}
