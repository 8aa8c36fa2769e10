package artifact

import (
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/zeebo/blake3"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// Export writes a verified artifact of store into a new directory under
// stageParent and returns its path (stageParent/artifact-<address>) and
// manifest.
//
// The manifest records the store's origin ([fold.Store.Origin]); a store
// without one is refused ([ErrNoOrigin]). It reads the live cursor, checkpoints the store into a hidden temp
// directory under stageParent, reopens the staged copy with [fold.Open] and
// requires its recovered cursor to equal the live one (else
// [ErrCursorMoved]), hashes every file, writes MANIFEST.json last, fsyncs,
// and renames the staged directory to its final name: an artifact directory
// that exists is complete. On failure the temp directory is removed.
//
// The caller must not commit to store while Export runs: the cursor
// recorded is the one read before the checkpoint. In production Export runs
// on the fold loop's goroutine between flushes (pending batch flushed
// first), via [fold.Loop.Do]. stageParent must be on the store's filesystem
// (sstables are hard-linked) and must exist. The artifact pins disk blocks
// the store may later compact away: upload it, then remove it.
func Export(store *fold.Store, stageParent string) (dir string, m Manifest, err error) {
	live := store.Cursor()
	if pending, err := store.RepairPending(); err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: %w", err)
	} else if pending {
		return "", Manifest{}, fmt.Errorf("artifact: export: %w", ErrRepairPending)
	}
	src, ok, err := store.Origin()
	if err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: %w", err)
	}
	if !ok {
		return "", Manifest{}, fmt.Errorf("artifact: export: %w", ErrNoOrigin)
	}
	ident, hasIdent, err := store.PluginIdentity()
	if err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: %w", err)
	}
	stage, err := os.MkdirTemp(stageParent, ".export-*")
	if err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: stage: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(stage)
		}
	}()
	data := filepath.Join(stage, DataDir)
	if err := store.Checkpoint(data); err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: %w", err)
	}
	// Verify by reopening: every commit carries its cursor, so a recovered
	// cursor equal to the live one proves no tail was lost.
	if err := verifyStaged(data, live, &src); err != nil {
		if errors.Is(err, ErrArtifactInvalid) {
			return "", Manifest{}, fmt.Errorf("%w: live cursor %v (commit during export?): %v", ErrCursorMoved, live, err)
		}
		return "", Manifest{}, fmt.Errorf("artifact: verify staged copy: %w", err)
	}
	desc, err := pebble.Peek(data, vfs.Default)
	if err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: peek staged copy: %w", err)
	}
	if desc.FormatMajorVersion != PebbleFormat {
		return "", Manifest{}, fmt.Errorf("artifact: staged copy has pebble format %d, artifact.PebbleFormat is %d (update it with host/fold's pinned format)",
			desc.FormatMajorVersion, PebbleFormat)
	}

	cur, err := live.MarshalBinary()
	if err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: encode cursor: %w", err)
	}
	m = Manifest{
		Schema:        SchemaVersion,
		Backend:       Backend,
		StoreFormat:   fold.FormatVersion,
		PebbleFormat:  uint64(PebbleFormat),
		Cursor:        hex.EncodeToString(cur),
		Bucket:        src.Bucket,
		Scope:         slices.Clone(src.Scope),
		StreamCreated: src.StreamCreated,
		Partition:     src.Partition,
	}
	if m.Scope == nil {
		m.Scope = []string{}
	}
	if hasIdent {
		h := hex.EncodeToString(ident)
		m.PluginIdentity = &h
	}
	if m.Files, err = hashTree(stage); err != nil {
		return "", Manifest{}, err
	}
	b, err := m.Encode()
	if err != nil {
		return "", Manifest{}, err
	}
	if err := writeFileSync(filepath.Join(stage, ManifestName), b); err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: write manifest: %w", err)
	}
	if err := files.SyncDir(stage); err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: %w", err)
	}
	dir = filepath.Join(stageParent, "artifact-"+Address(b))
	if err := os.Rename(stage, dir); err != nil {
		return "", Manifest{}, fmt.Errorf("artifact: publish artifact: %w", err)
	}
	if err := files.SyncDir(stageParent); err != nil {
		return dir, m, fmt.Errorf("artifact: %w", err)
	}
	return dir, m, nil
}

// verifyStaged opens the store in dir and requires its recovered cursor to
// equal want and, when origin is not nil, its recorded origin to equal
// *origin; a mismatch wraps ErrArtifactInvalid. Opening lets pebble write
// its own bookkeeping files, so callers hash after, not before.
func verifyStaged(dir string, want protocol.Cursor, origin *fold.Origin) error {
	st, got, err := fold.Open(dir, fold.Options{})
	if err != nil {
		if errors.Is(err, fold.ErrFormatVersion) {
			return invalid("staged copy: %v", err)
		}
		return err
	}
	rec, hasRec, err := st.Origin()
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	if origin != nil && (!hasRec || !rec.Equal(*origin)) {
		return invalid("staged copy records origin %s (recorded: %t), the manifest says %s", rec, hasRec, *origin)
	}
	if got != want {
		return invalid("staged copy recovered cursor %v (memo %v, time %d), want %v (memo %v, time %d)",
			got, got.EvictionSeen, got.MsgUnixNano, want, want.EvictionSeen, want.MsgUnixNano)
	}
	return nil
}

// hashTree hashes every regular file under stage/data, refusing anything
// else (the checkpoint holds only regular files).
func hashTree(stage string) ([]File, error) {
	var files []File
	root := filepath.Join(stage, DataDir)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		if !d.Type().IsRegular() {
			return fmt.Errorf("artifact: %s: not a regular file", p)
		}
		rel, err := filepath.Rel(stage, p)
		if err != nil {
			return err
		}
		size, sum, err := HashFile(p)
		if err != nil {
			return err
		}
		files = append(files, File{Path: filepath.ToSlash(rel), Size: size, BLAKE3: sum})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("artifact: hash: %w", err)
	}
	slices.SortFunc(files, func(a, b File) int {
		switch {
		case a.Path < b.Path:
			return -1
		case a.Path > b.Path:
			return 1
		}
		return 0
	})
	return files, nil
}

// HashFile is the size and hex BLAKE3 digest of the file at p, as a
// manifest records them.
func HashFile(p string) (int64, string, error) {
	f, _, err := files.OpenRegular(p, math.MaxInt64) // a FIFO or device would block or never end
	if err != nil {
		return 0, "", err
	}
	defer f.Close()
	h := blake3.New()
	n, err := io.Copy(h, f)
	if err != nil {
		return 0, "", err
	}
	return n, hex.EncodeToString(h.Sum(nil)), nil
}

func writeFileSync(p string, b []byte) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
