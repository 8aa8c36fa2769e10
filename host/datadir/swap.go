package datadir

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/foldhost/foldhost/internal/files"
)

// The swap of `repair --reset` (host.ResetStopped) replaces a fold's data dir
// by the fresh store it folded beside it. It takes two renames (the old
// store aside, the fresh one in), and a process killed between them would
// leave no data dir at all: the next run would silently start an empty
// fold. So the swap is recorded first, in a marker file beside the data
// dir naming the three directories, and whatever opens the fold's store
// (run, repair, bootstrap, the next reset) first completes a recorded swap
// (FinishSwap): the fresh store was finished before the marker was
// written, so the swap always rolls forward. A kill before the marker is
// in place leaves the old store where it was (and the unfinished fresh one
// beside it, which the next reset clears). RATIONALE.md, "The reset's swap".

// Swap is a swap of a fresh store into a fold's data dir, as its marker
// records it.
type Swap struct {
	Data  string `json:"data"`  // the fold's data dir
	Fresh string `json:"fresh"` // the finished fresh store
	Kept  string `json:"kept"`  // where the replaced store goes
}

// ResetFreshDir is where a reset folds the fresh store of dataDir.
func ResetFreshDir(dataDir string) string { return sibling(dataDir, "reset") }

// resetMarker is the marker of a swap into dataDir.
func resetMarker(dataDir string) string { return sibling(dataDir, "reset-swap") }

// Steps of the swap, in order.
const (
	stepMarker   = "write-marker"
	stepOldAside = "move-old-aside"
	stepFreshIn  = "move-fresh-in"
	stepUnmark   = "remove-marker"
)

// Do moves sw.Data to sw.Kept and sw.Fresh to sw.Data, through the
// marker. Every step is synced to disk before the next. hook, when set
// (tests only), is called before each step with its name; an error stops
// the swap there, as if the process had died (nothing is undone).
func (sw Swap) Do(hook func(step string) error) error {
	step := func(name string) error {
		if hook != nil {
			return hook(name)
		}
		return nil
	}
	if err := step(stepMarker); err != nil {
		return err
	}
	if err := writeMarker(sw); err != nil {
		return err
	}
	if err := step(stepOldAside); err != nil {
		return err
	}
	if err := renameSynced(sw.Data, sw.Kept); err != nil {
		if Exists(sw.Data) && removeSynced(resetMarker(sw.Data)) == nil { // nothing moved: no swap
			return fmt.Errorf("moving the old store aside: %w (it is still in place; the fresh one is in %s)", err, sw.Fresh)
		}
		return fmt.Errorf("moving the old store aside: %w (the fresh one is in %s; the next start completes the swap)", err, sw.Fresh)
	}
	if err := step(stepFreshIn); err != nil {
		return err
	}
	if err := renameSynced(sw.Fresh, sw.Data); err != nil {
		return fmt.Errorf("swapping the fresh store in: %w (the old one is in %s, the fresh one in %s; the next start completes the swap)", err, sw.Kept, sw.Fresh)
	}
	if err := step(stepUnmark); err != nil {
		return err
	}
	return removeSynced(resetMarker(sw.Data))
}

// FinishSwap completes a swap into dataDir that a killed reset left
// recorded, and reports whether there was one. It refuses (an error naming
// the directories) a state the swap cannot have left, rather than let the
// fold start on something else.
func FinishSwap(dataDir string, log *slog.Logger) (bool, error) {
	dataDir = filepath.Clean(dataDir)
	marker := resetMarker(dataDir)
	_ = os.Remove(marker + ".tmp") // a marker never put in place: no swap began
	b, err := files.ReadRegular(marker, 64<<10)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("reading the marker of an interrupted repair --reset: %w", err)
	}
	var sw Swap
	if err := json.Unmarshal(b, &sw); err != nil || sw.Data != dataDir || sw.Fresh == "" || sw.Kept == "" {
		return false, fmt.Errorf("the marker of an interrupted repair --reset, %s, is not one for %s (%q): move it aside once the data dir is what it should be", marker, dataDir, b)
	}
	data, fresh, kept := Exists(sw.Data), Exists(sw.Fresh), Exists(sw.Kept)
	switch {
	case fresh && data && !kept: // killed before the old store moved
		if err := renameSynced(sw.Data, sw.Kept); err != nil {
			return false, fmt.Errorf("completing an interrupted repair --reset: moving the old store aside: %w", err)
		}
		fallthrough
	case fresh && !data: // killed between the renames
		if err := renameSynced(sw.Fresh, sw.Data); err != nil {
			return false, fmt.Errorf("completing an interrupted repair --reset: moving the fresh store %s in: %w", sw.Fresh, err)
		}
	case !fresh && data: // killed before the marker was removed
	default:
		return false, fmt.Errorf("an interrupted repair --reset (%s) left data dir %s (exists: %v), fresh store %s (exists: %v), replaced store %s (exists: %v): not a state its swap leaves; put the right store in place and remove the marker",
			marker, sw.Data, data, sw.Fresh, fresh, sw.Kept, kept)
	}
	if err := removeSynced(marker); err != nil {
		return false, fmt.Errorf("completing an interrupted repair --reset: %w", err)
	}
	log.Warn("completed an interrupted repair --reset: the fresh store is in place, the replaced one kept aside", "data_dir", sw.Data, "replaced_kept_as", sw.Kept)
	return true, nil
}

// writeMarker puts sw's marker in place atomically and durably.
func writeMarker(sw Swap) error {
	b, err := json.Marshal(sw)
	if err != nil {
		return err
	}
	marker := resetMarker(sw.Data)
	tmp := marker + ".tmp"
	f, err := os.Create(tmp)
	if err != nil {
		return fmt.Errorf("recording the swap: %w", err)
	}
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = renameSynced(tmp, marker)
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("recording the swap in %s: %w", marker, err)
	}
	return nil
}

// renameSynced renames from to to and syncs their parent directory.
func renameSynced(from, to string) error {
	if err := os.Rename(from, to); err != nil {
		return err
	}
	return files.SyncDir(filepath.Dir(to))
}

// removeSynced removes path and syncs its parent directory.
func removeSynced(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return files.SyncDir(filepath.Dir(path))
}
