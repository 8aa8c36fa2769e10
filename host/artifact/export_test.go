package artifact_test

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"

	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

func TestManifestCanonical(t *testing.T) {
	id := hex.EncodeToString([]byte("plugin"))
	cur, _ := protocol.Cursor{Rev: 42, EvictionSeen: true, MsgUnixNano: 7}.MarshalBinary()
	m := artifact.Manifest{Schema: artifact.SchemaVersion, Backend: artifact.Backend, StoreFormat: fold.FormatVersion,
		PebbleFormat: uint64(artifact.PebbleFormat), Cursor: hex.EncodeToString(cur), Bucket: "routes", Scope: []string{"route.", "a<b&c"},
		PluginIdentity: &id, Files: []artifact.File{{Path: "data/000001.sst", Size: 3, BLAKE3: strings.Repeat("ab", 32)}}}
	b1, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	got, err := artifact.ParseManifest(b1)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("round trip: %+v != %+v", got, m)
	}
	b2, _ := got.Encode()
	if !bytes.Equal(b1, b2) || artifact.Address(b1) != artifact.Address(b2) || len(artifact.Address(b1)) != 16 {
		t.Fatalf("not canonical: %s vs %s", b1, b2)
	}
	c, err := got.DecodeCursor()
	if err != nil || c != (protocol.Cursor{Rev: 42, EvictionSeen: true, MsgUnixNano: 7}) {
		t.Fatalf("cursor %+v %v", c, err)
	}
	t.Logf("manifest: %s", b1)

	bad := map[string]func(m *artifact.Manifest){
		"schema":   func(m *artifact.Manifest) { m.Schema = 3 },
		"schema 0": func(m *artifact.Manifest) { m.Schema = 0 },
		"schema 1 with a stream": func(m *artifact.Manifest) {
			m.Schema, m.StreamCreated = 1, time.Unix(1700000000, 5).UTC()
		},
		"backend":       func(m *artifact.Manifest) { m.Backend = "rocksdb" },
		"store format":  func(m *artifact.Manifest) { m.StoreFormat++ },
		"pebble format": func(m *artifact.Manifest) { m.PebbleFormat++ },
		"cursor":        func(m *artifact.Manifest) { m.Cursor = "zz" },
		"cursor enc":    func(m *artifact.Manifest) { m.Cursor = "0102" },
		"abs path":      func(m *artifact.Manifest) { m.Files[0].Path = "/data/x" },
		"dotdot":        func(m *artifact.Manifest) { m.Files[0].Path = "data/../x" },
		"outside data":  func(m *artifact.Manifest) { m.Files[0].Path = "x" },
		"hash":          func(m *artifact.Manifest) { m.Files[0].BLAKE3 = "ab" },
		"unsorted": func(m *artifact.Manifest) {
			m.Files = append(m.Files, artifact.File{Path: "data/0", BLAKE3: strings.Repeat("ab", 32)})
		},
		"duplicate": func(m *artifact.Manifest) { m.Files = append(m.Files, m.Files[0]) },
	}
	for name, mut := range bad {
		mm := m
		mm.Files = append([]artifact.File(nil), m.Files...)
		mut(&mm)
		b, _ := mm.Encode()
		if _, err := artifact.ParseManifest(b); !errors.Is(err, artifact.ErrArtifactInvalid) {
			t.Errorf("%s: ParseManifest err = %v, want ErrArtifactInvalid", name, err)
		}
	}
	if _, err := artifact.ParseManifest(append(b1[:len(b1)-1:len(b1)-1], []byte(`,"extra":1}`)...)); !errors.Is(err, artifact.ErrArtifactInvalid) {
		t.Errorf("unknown field accepted: %v", err)
	}
	// The stream identity round-trips; a schema 1 manifest (written before
	// streams were recorded) still reads, with none.
	ms := m
	ms.StreamCreated = time.Unix(1700000000, 123456789).UTC()
	bs, _ := ms.Encode()
	if got, err := artifact.ParseManifest(bs); err != nil || !got.StreamCreated.Equal(ms.StreamCreated) || !got.Origin().Equal(ms.Origin()) {
		t.Errorf("stream identity round trip: %+v, %v", got.StreamCreated, err)
	}
	m1 := m
	m1.Schema = 1
	b1v, _ := m1.Encode()
	if got, err := artifact.ParseManifest(b1v); err != nil || !got.StreamCreated.IsZero() {
		t.Errorf("schema 1 manifest: %+v, %v", got, err)
	}
}

func TestExportImportRoundTrip(t *testing.T) {
	st := storetest.OpenStore(t)
	storetest.CommitN(t, st, 500)
	live := storetest.CommitN(t, st, 500)
	want := storetest.DumpStore(t, st)
	parent := t.TempDir()
	setOrigin(t, st, []string{"route.>"})
	dir, m, err := artifact.Export(st, parent)
	if err != nil {
		t.Fatal(err)
	}
	// Only the final artifact remains; the stage was renamed.
	if names := storetest.ListDir(t, parent); len(names) != 1 || names[0] != filepath.Base(dir) {
		t.Fatalf("stage parent holds %v", names)
	}
	mb := storetest.ReadManifest(t, dir)
	if filepath.Base(dir) != "artifact-"+artifact.Address(mb) {
		t.Fatalf("artifact dir %s, address %s", dir, artifact.Address(mb))
	}
	enc, _ := m.Encode()
	if !bytes.Equal(enc, mb) {
		t.Fatal("returned manifest differs from MANIFEST.json")
	}
	if c, err := m.DecodeCursor(); err != nil || c != live {
		t.Fatalf("manifest cursor %+v (%v), live %+v", c, err, live)
	}
	if m.PluginIdentity == nil || *m.PluginIdentity != hex.EncodeToString([]byte(want.Ident)) {
		t.Fatalf("plugin identity %v", m.PluginIdentity)
	}
	if !reflect.DeepEqual(m.Scope, []string{"route.>"}) || len(m.Files) == 0 {
		t.Fatalf("manifest %+v", m)
	}
	for _, f := range m.Files {
		size, sum, err := artifact.HashFile(filepath.Join(dir, filepath.FromSlash(f.Path)))
		if err != nil || size != f.Size || sum != f.BLAKE3 {
			t.Fatalf("file %s: %d %s %v", f.Path, size, sum, err)
		}
	}
	tb := storetest.TarOf(t, dir)
	if !bytes.Equal(tb, storetest.TarOf(t, dir)) {
		t.Fatal("WriteTar not deterministic")
	}
	es := storetest.ReadEntries(t, tb)
	if last := es[len(es)-1]; last.Hdr.Name != artifact.ManifestName || !bytes.Equal(last.Body, mb) {
		t.Fatal("manifest is not the last tar entry")
	}

	// The store keeps working while the artifact exists.
	storetest.CommitN(t, st, 10)

	dest := filepath.Join(t.TempDir(), "restored")
	got, err := artifact.Import(bytes.NewReader(tb), mb, dest)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatal("Import returned a different manifest")
	}
	storetest.CheckImported(t, dest, live, want)

	// An empty existing directory is an acceptable destination.
	empty := filepath.Join(t.TempDir(), "empty")
	if err := os.Mkdir(empty, 0o755); err != nil {
		t.Fatal(err)
	}
	// The imported fold has the mode of a directory made in place (not
	// a temp dir's 0700).
	if di, ei := statMode(t, dest), statMode(t, empty); di != ei {
		t.Fatalf("imported fold mode %v, a fold made in place has %v", di, ei)
	}
	if _, err := artifact.Import(bytes.NewReader(tb), mb, empty); err != nil {
		t.Fatal(err)
	}
	storetest.CheckImported(t, empty, live, want)
}

func TestExportEmptyStore(t *testing.T) {
	st := storetest.OpenStore(t)
	setOrigin(t, st, nil)
	dir, m, err := artifact.Export(st, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := m.DecodeCursor(); c != (protocol.Cursor{}) || m.PluginIdentity != nil || m.Scope == nil {
		t.Fatalf("manifest %+v", m)
	}
	dest := filepath.Join(t.TempDir(), "f")
	if _, err := artifact.Import(bytes.NewReader(storetest.TarOf(t, dir)), storetest.ReadManifest(t, dir), dest); err != nil {
		t.Fatal(err)
	}
}

func TestExportFailureLeavesNothing(t *testing.T) {
	st := storetest.OpenStore(t)
	storetest.CommitN(t, st, 10)
	parent := t.TempDir()
	setOrigin(t, st, nil)
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := artifact.Export(st, parent); err == nil {
		t.Fatal("export of a closed store succeeded")
	}
	if names := storetest.ListDir(t, parent); len(names) != 0 {
		t.Fatalf("failed export left %v", names)
	}
}

// reencode returns manifest bytes with mut applied.
func reencode(t *testing.T, mb []byte, mut func(*artifact.Manifest)) []byte {
	t.Helper()
	m, err := artifact.ParseManifest(mb)
	if err != nil {
		t.Fatal(err)
	}
	mut(&m)
	b, err := m.Encode()
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestImportRefusesBadInput(t *testing.T) {
	st := storetest.OpenStore(t)
	storetest.CommitN(t, st, 300)
	setOrigin(t, st, []string{">"})
	dir, m, err := artifact.Export(st, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	good := storetest.TarOf(t, dir)
	mb := storetest.ReadManifest(t, dir)
	es := storetest.ReadEntries(t, good)
	nData := len(es) - 1
	clone := func() []storetest.Entry {
		out := make([]storetest.Entry, len(es))
		for i, e := range es {
			out[i] = storetest.Entry{Hdr: e.Hdr, Body: append([]byte(nil), e.Body...)}
		}
		return out
	}
	// withEntry inserts e before the manifest.
	withEntry := func(e storetest.Entry) []byte {
		c := clone()
		return storetest.BuildTar(t, append(c[:nData:nData], e, c[nData]))
	}
	reg := func(name string, body []byte) storetest.Entry {
		return storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644}, Body: body}
	}
	// swapManifest replaces the embedded manifest with b.
	swapManifest := func(b []byte) []byte {
		c := clone()
		c[nData].Body = b
		return storetest.BuildTar(t, c)
	}

	type tc struct {
		name     string
		tar      []byte
		manifest []byte
	}
	cases := []tc{
		{"absolute path", withEntry(reg("/"+es[0].Hdr.Name, es[0].Body)), mb},
		{"dotdot", withEntry(reg("data/../../evil", []byte("x"))), mb},
		{"dotdot inside data", withEntry(reg("data/x/../"+strings.TrimPrefix(es[0].Hdr.Name, "data/"), es[0].Body)), mb},
		{"symlink", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: "data/link", Linkname: "/etc/passwd"}}), mb},
		{"hardlink", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeLink, Name: "data/hard", Linkname: es[0].Hdr.Name}}), mb},
		{"char device", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeChar, Name: "data/null", Devmajor: 1, Devminor: 3}}), mb},
		{"block device", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeBlock, Name: "data/sda", Devmajor: 8}}), mb},
		{"fifo", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeFifo, Name: "data/fifo"}}), mb},
		{"directory", withEntry(storetest.Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: "data/sub/", Mode: 0o755}}), mb},
		{"duplicate", withEntry(es[0]), mb},
		{"duplicate manifest", func() []byte { c := clone(); return storetest.BuildTar(t, append(c, c[nData])) }(), mb},
		{"extra file", withEntry(reg("data/EXTRA", []byte("surprise"))), mb},
		{"file outside data", withEntry(reg("evil.sh", []byte("x"))), mb},
		{"missing file", func() []byte { c := clone(); return storetest.BuildTar(t, c[1:]) }(), mb},
		{"missing manifest", func() []byte { c := clone(); return storetest.BuildTar(t, c[:nData]) }(), mb},
		{"flipped bit in embedded manifest", swapManifest(func() []byte {
			b := append([]byte(nil), mb...)
			b[len(b)/2] ^= 0x01
			return b
		}()), mb},
		{"embedded manifest differs from pointer", good, reencode(t, mb, func(m *artifact.Manifest) { m.Scope = []string{"other"} })},
		{"wrong backend", swapManifest(reencode(t, mb, func(m *artifact.Manifest) { m.Backend = "fjall" })),
			reencode(t, mb, func(m *artifact.Manifest) { m.Backend = "fjall" })},
		{"wrong store format", swapManifest(reencode(t, mb, func(m *artifact.Manifest) { m.StoreFormat = 99 })),
			reencode(t, mb, func(m *artifact.Manifest) { m.StoreFormat = 99 })},
		{"wrong pebble format", swapManifest(reencode(t, mb, func(m *artifact.Manifest) { m.PebbleFormat-- })),
			reencode(t, mb, func(m *artifact.Manifest) { m.PebbleFormat-- })},
		{"wrong schema", swapManifest(reencode(t, mb, func(m *artifact.Manifest) { m.Schema = 3 })),
			reencode(t, mb, func(m *artifact.Manifest) { m.Schema = 3 })},
		// A consistent tar and pointer whose manifest names another origin
		// than the store inside records.
		{"origin differs from staged copy", swapManifest(reencode(t, mb, otherBucket)), reencode(t, mb, otherBucket)},
		{"stream differs from staged copy", swapManifest(reencode(t, mb, otherStream)), reencode(t, mb, otherStream)},
		{"cursor differs from staged copy", swapManifest(reencode(t, mb, bumpCursor(t))), reencode(t, mb, bumpCursor(t))},
		{"corrupt pointer", good, []byte("{not json")},
		{"not a tar", []byte(strings.Repeat("garbage!", 200)), mb},
		{"empty input", nil, mb},
	}
	for i, e := range es[:nData] {
		for _, at := range []int{0, len(e.Body) / 2, len(e.Body) - 1} {
			if len(e.Body) == 0 {
				continue
			}
			c := clone()
			c[i].Body[at] ^= 0x10
			cases = append(cases, tc{"flipped bit in " + e.Hdr.Name, storetest.BuildTar(t, c), mb})
		}
	}
	for _, cut := range []int{512, len(good) / 3, len(good) / 2, len(good) - 1536 - 512, len(good) - 1025, len(good) - 1024, len(good) - 513, len(good) - 512, len(good) - 1} {
		cases = append(cases, tc{"truncated", good[:cut], mb})
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			parent := t.TempDir()
			dest := filepath.Join(parent, "fold")
			_, err := artifact.Import(bytes.NewReader(c.tar), c.manifest, dest)
			if !errors.Is(err, artifact.ErrArtifactInvalid) {
				t.Fatalf("err = %v, want ErrArtifactInvalid", err)
			}
			if seg := repeatedSegment(err.Error()); seg != "" {
				t.Errorf("the error repeats %q: %v", seg, err)
			}
			t.Logf("refused: %v", err)
			if names := storetest.ListDir(t, parent); len(names) != 0 {
				t.Fatalf("refused import left %v", names)
			}
		})
	}
	// An existing, non-empty destination is refused and left untouched,
	// even with a good artifact.
	parent := t.TempDir()
	dest := filepath.Join(parent, "fold")
	if err := os.MkdirAll(dest, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dest, "keep"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := artifact.Import(bytes.NewReader(good), mb, dest); !errors.Is(err, artifact.ErrDestNotEmpty) {
		t.Fatalf("non-empty dest: err = %v", err)
	}
	if names := storetest.ListDir(t, dest); len(names) != 1 || names[0] != "keep" {
		t.Fatalf("dest changed: %v", names)
	}
	if names := storetest.ListDir(t, parent); len(names) != 1 {
		t.Fatalf("parent holds %v", names)
	}
	// The untampered artifact still imports.
	if _, err := artifact.Import(bytes.NewReader(good), mb, filepath.Join(parent, "ok")); err != nil {
		t.Fatal(err)
	}
	_ = m
}

func bumpCursor(t *testing.T) func(*artifact.Manifest) {
	return func(m *artifact.Manifest) {
		c, err := m.DecodeCursor()
		if err != nil {
			t.Fatal(err)
		}
		c.Rev++
		b, _ := c.MarshalBinary()
		m.Cursor = hex.EncodeToString(b)
	}
}

func statMode(t *testing.T, p string) os.FileMode {
	t.Helper()
	st, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

func otherBucket(m *artifact.Manifest) { m.Bucket = "elsewhere" }
func otherStream(m *artifact.Manifest) { m.StreamCreated = time.Unix(1700000000, 1).UTC() }

// setOrigin records what st folds, as a host does before it exports.
func setOrigin(t *testing.T, st *fold.Store, scope []string) {
	t.Helper()
	if err := st.SetOrigin(fold.NewOrigin("routes", scope, time.Time{})); err != nil {
		t.Fatal(err)
	}
}

func TestExportRefusesAStoreWithoutOrigin(t *testing.T) {
	st, _, err := fold.Open(filepath.Join(t.TempDir(), "fold"), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	storetest.CommitN(t, st, 10)
	parent := t.TempDir()
	if _, _, err := artifact.Export(st, parent); !errors.Is(err, artifact.ErrNoOrigin) {
		t.Fatalf("err = %v, want ErrNoOrigin", err)
	}
	if names := storetest.ListDir(t, parent); len(names) != 0 {
		t.Fatalf("refused export left %v", names)
	}
}

// repeatedSegment returns a ": "-separated segment of msg that occurs twice
// ("artifact: import: artifact: invalid ..."), or "".
func repeatedSegment(msg string) string {
	seen := map[string]bool{}
	for _, seg := range strings.Split(msg, ": ") {
		if seen[seg] {
			return seg
		}
		seen[seg] = true
	}
	return ""
}
