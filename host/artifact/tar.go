package artifact

import (
	"archive/tar"
	"bytes"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/zeebo/blake3"
)

// WriteTar writes the artifact in dir as a tar to w: the manifest's data
// files in manifest order, then MANIFEST.json last. Entries are regular
// files with fixed mode and time, so the same artifact always gives the same
// bytes. Each file is re-hashed while written and a mismatch with the
// manifest is an error (the tar written so far must be discarded).
func WriteTar(w io.Writer, dir string) error {
	mb, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return fmt.Errorf("artifact: tar: %w", err)
	}
	m, err := ParseManifest(mb)
	if err != nil {
		return fmt.Errorf("artifact: tar %s: %w", dir, err)
	}
	tw := tar.NewWriter(w)
	for _, f := range m.Files {
		if err := tarFile(tw, dir, f); err != nil {
			return fmt.Errorf("artifact: tar %s: %w", f.Path, err)
		}
	}
	if err := tw.WriteHeader(tarHeader(ManifestName, int64(len(mb)))); err != nil {
		return fmt.Errorf("artifact: tar manifest: %w", err)
	}
	if _, err := tw.Write(mb); err != nil {
		return fmt.Errorf("artifact: tar manifest: %w", err)
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("artifact: tar: %w", err)
	}
	return nil
}

func tarHeader(name string, size int64) *tar.Header {
	return &tar.Header{
		Typeflag: tar.TypeReg,
		Name:     name,
		Size:     size,
		Mode:     0o644,
		ModTime:  time.Unix(0, 0),
		Format:   tar.FormatPAX,
	}
}

func tarFile(tw *tar.Writer, dir string, f File) error {
	src, err := os.Open(filepath.Join(dir, filepath.FromSlash(f.Path)))
	if err != nil {
		return err
	}
	defer src.Close()
	if err := tw.WriteHeader(tarHeader(f.Path, f.Size)); err != nil {
		return err
	}
	h := blake3.New()
	n, err := io.Copy(io.MultiWriter(tw, h), io.LimitReader(src, f.Size+1))
	if err != nil {
		return err
	}
	if n != f.Size {
		return fmt.Errorf("size %d, manifest says %d", n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.BLAKE3 {
		return fmt.Errorf("blake3 %s, manifest says %s", got, f.BLAKE3)
	}
	return nil
}

// Import verifies the artifact tar read from r against the trusted manifest
// bytes (the pointer's content) and installs its data as a fold store at
// dest, returning the manifest. dest must be absent or an empty directory
// (else [ErrDestNotEmpty]); its parent must exist and be on the filesystem
// the fold will live on.
//
// The tar is streamed into a hidden temp directory beside dest. Import
// refuses, with an error wrapping [ErrArtifactInvalid]: entries that are not
// regular files (symlinks, hardlinks, devices, directories), absolute or
// unclean paths or "..", duplicates, files not in the manifest or with a
// different size, missing files, any hash mismatch, an embedded
// MANIFEST.json not byte-equal to manifest, a truncated tar, a manifest of
// another schema, backend or format version, and a staged copy whose pebble
// format, recovered cursor or recorded origin differs from the manifest's. Only then is the
// staged copy renamed to dest. On any failure dest is left as it was and the
// temp directory is removed.
func Import(r io.Reader, manifest []byte, dest string) (Manifest, error) {
	m, err := ParseManifest(manifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: %w", err)
	}
	want, err := m.DecodeCursor()
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: %w", err)
	}
	if err := checkDest(dest); err != nil {
		return Manifest{}, err
	}
	parent := filepath.Dir(filepath.Clean(dest))
	stage, err := mkdirStage(parent, ImportTempPrefix(dest))
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: stage: %w", err)
	}
	done := false
	defer func() {
		if !done {
			_ = os.RemoveAll(stage)
		}
	}()
	if err := extract(r, m, manifest, stage); err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: %w", err)
	}
	desc, err := pebble.Peek(stage, vfs.Default)
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: %w", invalid("staged copy: %v", err))
	}
	if uint64(desc.FormatMajorVersion) != m.PebbleFormat {
		return Manifest{}, fmt.Errorf("artifact: import: %w",
			invalid("staged copy has pebble format %d, manifest says %d", desc.FormatMajorVersion, m.PebbleFormat))
	}
	var origin *fold.Origin // schema 1 stores did not record one
	if m.Schema >= 2 {
		o := m.Origin()
		origin = &o
	}
	if err := verifyStaged(stage, want, origin); err != nil {
		if !errors.Is(err, ErrArtifactInvalid) {
			err = invalid("open staged copy: %v", err)
		}
		return Manifest{}, fmt.Errorf("artifact: import: %w", err)
	}
	if err := files.SyncDir(stage); err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: %w", err)
	}
	// Re-check just before the rename; rename(2) itself refuses to replace
	// a non-empty directory, so a racing writer cannot be overwritten.
	if err := checkDest(dest); err != nil {
		return Manifest{}, err
	}
	// syscall.Rename, not os.Rename: it atomically replaces an empty
	// directory and refuses a non-empty one (os.Rename refuses both).
	if err := syscall.Rename(stage, dest); err != nil {
		return Manifest{}, fmt.Errorf("artifact: import: install %s: %w", dest, err)
	}
	done = true
	if err := files.SyncDir(parent); err != nil {
		return m, fmt.Errorf("artifact: import: %w", err)
	}
	return m, nil
}

func checkDest(dest string) error {
	entries, err := os.ReadDir(dest)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("artifact: import: destination: %w", err)
	case len(entries) > 0:
		return fmt.Errorf("%w: %s", ErrDestNotEmpty, dest)
	}
	return nil
}

// extract streams the tar into stage (data/X becomes stage/X), verifying
// every entry against m and the embedded manifest against manifest.
func extract(r io.Reader, m Manifest, manifest []byte, stage string) error {
	expect := make(map[string]File, len(m.Files))
	for _, f := range m.Files {
		expect[f.Path] = f
	}
	seen := make(map[string]bool, len(m.Files)+1)
	cr := &countingReader{r: r}
	tr := tar.NewReader(cr)
	var lastEnd, lastPad int64
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			// archive/tar reports a clean io.EOF also when the input stops
			// right after an entry's content, padding or first trailer
			// block: demand the full end-of-archive marker.
			if cr.n-lastEnd < lastPad+2*blockSize {
				return invalid("tar truncated: no end-of-archive marker")
			}
			break
		}
		if err != nil {
			return invalid("read tar: %v", err)
		}
		name := hdr.Name
		if hdr.Typeflag != tar.TypeReg {
			return invalid("entry %q: type %q is not a regular file", name, hdr.Typeflag)
		}
		if seen[name] {
			return invalid("entry %q: duplicate", name)
		}
		seen[name] = true
		lastPad = (blockSize - hdr.Size%blockSize) % blockSize
		if name == ManifestName {
			if err := checkEmbeddedManifest(tr, hdr, manifest); err != nil {
				return err
			}
			lastEnd = cr.n
			continue
		}
		if err := checkDataPath(name); err != nil {
			return err
		}
		f, ok := expect[name]
		if !ok {
			return invalid("entry %q: not in the manifest", name)
		}
		if hdr.Size != f.Size {
			return invalid("entry %q: size %d, manifest says %d", name, hdr.Size, f.Size)
		}
		if err := extractFile(tr, f, filepath.Join(stage, filepath.FromSlash(strings.TrimPrefix(name, DataDir+"/")))); err != nil {
			return err
		}
		lastEnd = cr.n
	}
	if !seen[ManifestName] {
		return invalid("tar has no %s (truncated?)", ManifestName)
	}
	for _, f := range m.Files {
		if !seen[f.Path] {
			return invalid("file %q missing from tar", f.Path)
		}
	}
	return nil
}

func checkEmbeddedManifest(tr *tar.Reader, hdr *tar.Header, manifest []byte) error {
	manifest = WithoutEpoch(manifest) // the pointer's, not the payload's
	if hdr.Size != int64(len(manifest)) || hdr.Size > MaxManifestSize {
		return invalid("embedded manifest differs from the pointer (size %d, want %d)", hdr.Size, len(manifest))
	}
	b, err := io.ReadAll(tr)
	if err != nil {
		return invalid("read embedded manifest: %v", err)
	}
	if !bytes.Equal(b, manifest) {
		return invalid("embedded manifest differs from the pointer")
	}
	return nil
}

func extractFile(tr *tar.Reader, f File, dst string) error {
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return fmt.Errorf("stage %s: %w", f.Path, err)
	}
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("stage %s: %w", f.Path, err)
	}
	defer out.Close()
	h := blake3.New()
	n, err := io.Copy(io.MultiWriter(out, h), tr)
	if err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return invalid("entry %q: truncated after %d bytes", f.Path, n)
		}
		return fmt.Errorf("stage %s: %w", f.Path, err)
	}
	if n != f.Size {
		return invalid("entry %q: %d bytes, manifest says %d", f.Path, n, f.Size)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != f.BLAKE3 {
		return invalid("entry %q: blake3 %s, manifest says %s", f.Path, got, f.BLAKE3)
	}
	if err := out.Sync(); err != nil {
		return fmt.Errorf("stage %s: %w", f.Path, err)
	}
	return out.Close()
}

const blockSize = 512

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// ImportTempPrefix is the name prefix of the hidden directory, beside
// dest, an Import into dest stages in: what a killed import leaves behind
// starts with it.
func ImportTempPrefix(dest string) string { return "." + filepath.Base(dest) + ".import-" }

// mkdirStage creates a new directory named prefix + a random suffix under
// parent, with the mode a fold created in place gets (0755 less the
// umask; os.MkdirTemp's 0700 would follow the fold after the rename).
func mkdirStage(parent, prefix string) (string, error) {
	for range 100 {
		p := filepath.Join(parent, prefix+strconv.FormatUint(rand.Uint64(), 36))
		err := os.Mkdir(p, 0o755)
		if err == nil {
			return p, nil
		}
		if !errors.Is(err, os.ErrExist) {
			return "", err
		}
	}
	return "", fmt.Errorf("artifact: no free stage name under %s", parent)
}
