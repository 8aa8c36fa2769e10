package host

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// A fold of Partitions > 1 runs as that many units, one per partition of
// its bucket's keys (protocol.PartitionOf), each a Fold of its own: its
// own store, watch, loop, cursor, effects fence, artifact key and claim in
// a fleet. RATIONALE.md, "Partitions".

// partitionDirPrefix names a unit's data dir inside its fold's:
// DATA_DIR/partition-P.
const partitionDirPrefix = "partition-"

// partitionsFile, in a partitioned fold's data dir, records its count of
// partitions.
const partitionsFile = "partitions"

// UnitName is the name of partition p of fold: FOLD.P (a fold's name
// has no dot, so it never collides with another fold's).
func UnitName(fold string, p int) string { return fold + "." + strconv.Itoa(p) }

// UnitDataDir is the data dir of partition p of a fold whose data dir is
// dir.
func UnitDataDir(dir string, p int) string {
	return filepath.Join(dir, partitionDirPrefix+strconv.Itoa(p))
}

// Adopts reports whether the names given to --adopt pick the fold named
// fold: its own name, or one of its units' (FOLD.P adopts every unit of
// the fold).
func Adopts(names []string, fold string) bool {
	for _, a := range names {
		if f, _, ok := SplitUnitName(a); a == fold || (ok && f == fold) {
			return true
		}
	}
	return false
}

// SplitUnitName reads a unit's name, FOLD.P (UnitName), P a partition
// number as UnitName writes it; ok false for any other name.
func SplitUnitName(name string) (fold string, p int, ok bool) {
	fold, ps, ok := strings.Cut(name, ".")
	p, err := strconv.Atoi(ps)
	if !ok || fold == "" || err != nil || p < 0 || strconv.Itoa(p) != ps {
		return "", 0, false
	}
	return fold, p, true
}

// expandPartitions returns folds with each fold of Partitions > 1
// replaced by its units, in partition order.
func expandPartitions(folds []FoldOptions) []FoldOptions {
	out := make([]FoldOptions, 0, len(folds))
	for _, f := range folds {
		if f.Partitions < 2 || f.FoldName != "" {
			out = append(out, f)
			continue
		}
		for p := range min(f.Partitions, protocol.MaxPartitions) {
			u := f
			u.FoldName, u.Partition = f.Name, p
			u.Name = UnitName(f.Name, p)
			u.DataDir = UnitDataDir(f.DataDir, p)
			if f.Bucket == "" {
				u.Bucket = f.Name
			}
			if f.ArtifactKey != "" {
				u.ArtifactKey = UnitName(f.ArtifactKey, p)
			}
			if f.EffectsFence != "" {
				u.EffectsFence = UnitName(f.EffectsFence, p)
			}
			out = append(out, u)
		}
	}
	return out
}

// checkPartitionLayout refuses a fold's data dir laid out for another
// count of partitions than its options' (partitions are fixed for a
// fold's life): a store where units belong, or units where a store does,
// or a unit beyond the count. A unit whose store records another count is
// refused by its origin check. A partitioned fold's fresh data dir gets
// its count recorded (partitionsFile) before any unit's store is made.
func checkPartitionLayout(f FoldOptions) error {
	dir, n := f.DataDir, f.Partitions
	if f.FoldName != f.Name {
		dir = filepath.Dir(f.DataDir)
	}
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	how := fmt.Sprintf("partitions are fixed for a fold's life: to fold it with %d, move %s aside and fold the bucket again (or configure a new fold beside it)", n, dir)
	marker := filepath.Join(dir, partitionsFile)
	hasMarker := false
	if b, err := os.ReadFile(marker); err == nil {
		hasMarker = true
		if had, _ := strconv.Atoi(strings.TrimSpace(string(b))); had != n {
			return fmt.Errorf("fold %s: its data dir %s holds a fold of %d partitions, configured with %d: %s", f.Unit().Fold, dir, had, n, how)
		}
	} else if !os.IsNotExist(err) {
		return err
	}
	units := false
	for _, e := range entries {
		name := e.Name()
		if name == partitionsFile+".tmp" || name == "lost+found" || (name == partitionsFile && n >= 2) {
			continue
		}
		p, isUnit := strings.CutPrefix(name, partitionDirPrefix)
		// A unit's store kept by a reset: partition-P.replaced-TIME.
		p, _, kept := strings.Cut(p, ".replaced-")
		idx, err := strconv.Atoi(p)
		isUnit = isUnit && e.IsDir() && err == nil
		units = units || isUnit
		switch {
		case n < 2 && name == partitionsFile:
			return fmt.Errorf("fold %s: its data dir %s holds a fold of several partitions: %s", f.Unit().Fold, dir, how)
		case n < 2 && isUnit:
			return fmt.Errorf("fold %s: its data dir %s holds %s, a partition of a fold of several: %s", f.Unit().Fold, dir, name, how)
		case n >= 2 && isUnit && !kept && idx >= n:
			return fmt.Errorf("fold %s: its data dir %s holds %s, but the fold has %d partitions (0 to %d): %s", f.Unit().Fold, dir, name, n, n-1, how)
		case n >= 2 && !isUnit && !strings.HasPrefix(name, "."): // hidden: a unit's siblings (stage, repair, reset, locks)
			return fmt.Errorf("fold %s: its data dir %s holds %s, not a partition's directory: it is the store of the fold with one partition (or something else): %s", f.Unit().Fold, dir, name, how)
		}
	}
	if n < 2 || hasMarker || units {
		// Units without the record of their count: their stores' origins
		// say which count they were made for.
		return nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	tmp := marker + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(n)+"\n"), 0o644); err != nil {
		return err
	}
	if err := os.Rename(tmp, marker); err != nil {
		return err
	}
	return files.SyncDir(dir)
}

// noDemux makes every unit read the stream on its own, as before the
// Demux: set by tests that measure or prove what the Demux changes.
var noDemux bool
