package datadir

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/internal/files"
)

// sibling is the hidden sibling ".<name>.<what>" of dataDir.
func sibling(dataDir, what string) string {
	dataDir = filepath.Clean(dataDir) // "/x/fold/" must not give "/x/fold/.fold.<what>"
	return filepath.Join(filepath.Dir(dataDir), "."+filepath.Base(dataDir)+"."+what)
}

// StageDir is where the artifacts of the fold in dataDir are staged
// (".<name>.export"): on its filesystem, since the checkpoint hard-links
// sstables.
func StageDir(dataDir string) string { return sibling(dataDir, "export") }

// ResetStageDir empties the fold's stage dir: anything in it was left by
// an export that died mid-way. The caller holds the fold's store, so no
// other export of the fold runs.
func ResetStageDir(dataDir string) error {
	dir := StageDir(dataDir)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("clearing stale exports: %w", err)
	}
	return os.MkdirAll(dir, 0o755)
}

// RepairDir is where a repair of the fold in dataDir keeps its scratch
// store (the sorted bucket listing): ".<name>.repair", beside and never
// inside the fold's pebble directory.
func RepairDir(dataDir string) string { return sibling(dataDir, "repair") }

// BootstrapLock is the lock file that keeps two bootstraps of the fold in
// dataDir apart.
func BootstrapLock(dataDir string) string { return sibling(dataDir, "bootstrap.lock") }

// ClearStaleImportsIfIdle removes what a bootstrap killed mid-way left
// beside dataDir (a hidden import directory up to the payload's size),
// unless a bootstrap of the fold is running. Every command that opens a
// fold's store calls it, so the leftovers do not wait for the next
// bootstrap.
func ClearStaleImportsIfIdle(dataDir string) {
	lk, err := files.TryLock(BootstrapLock(dataDir))
	if err != nil {
		return // a bootstrap runs (its import is live), or the parent is not ours to write
	}
	defer lk.Unlock()
	ClearStaleImports(dataDir)
}

// ClearStaleImports removes what an import killed mid-way left beside
// dataDir; the caller holds the bootstrap lock, so none is running.
func ClearStaleImports(dataDir string) {
	parent := filepath.Dir(dataDir)
	prefix := artifact.ImportTempPrefix(dataDir)
	entries, _ := os.ReadDir(parent)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix) {
			_ = os.RemoveAll(filepath.Join(parent, e.Name()))
		}
	}
}

// Exists reports whether path exists (as anything, a dangling link too).
func Exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}
