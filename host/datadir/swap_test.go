package datadir

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
)

var errKilledFake = errors.New("killed here (the test's step hook)")

// TestSwapKilledAtEveryStepRollsForward: a swap stopped before each of its
// steps (as a kill would stop it), then FinishSwap as the next open of the
// fold runs it: before the marker is written nothing happened (the old
// store in place, no swap to finish); from then on the fresh store ends in
// the data dir and the old one where the marker said, the marker gone.
// Mutations caught: FinishSwap not moving the fresh store in (a kill
// between the renames leaves no data dir); the marker written after the
// first rename.
func TestSwapKilledAtEveryStepRollsForward(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, step := range []string{stepMarker, stepOldAside, stepFreshIn, stepUnmark} {
		t.Run(step, func(t *testing.T) {
			root := t.TempDir()
			data := filepath.Join(root, "fold")
			sw := Swap{Data: data, Fresh: ResetFreshDir(data), Kept: data + ".replaced"}
			mkStore(t, sw.Data, "old")
			mkStore(t, sw.Fresh, "fresh")
			err := sw.Do(func(s string) error {
				if s == step {
					return errKilledFake
				}
				return nil
			})
			if !errors.Is(err, errKilledFake) {
				t.Fatalf("Do stopped at %s returned %v", step, err)
			}
			finished, err := FinishSwap(data, log)
			if err != nil {
				t.Fatal(err)
			}
			if want := step != stepMarker; finished != want {
				t.Errorf("FinishSwap after a stop at %s: finished %v, want %v", step, finished, want)
			}
			want, kept := "fresh", true
			if step == stepMarker {
				want, kept = "old", false
			}
			if got := storeOf(t, data); got != want {
				t.Errorf("after a stop at %s the data dir holds the %s store, want the %s one", step, got, want)
			}
			if Exists(sw.Kept) != kept {
				t.Errorf("after a stop at %s the replaced store kept: %v, want %v", step, Exists(sw.Kept), kept)
			}
			if Exists(resetMarker(data)) {
				t.Errorf("after a stop at %s the marker is still there", step)
			}
		})
	}
}

// TestFinishSwapRefusesAStateNoSwapLeaves: a marker whose directories are
// all gone is refused (an error naming them), not taken as a finished
// swap; a marker for another data dir is refused too.
func TestFinishSwapRefusesAStateNoSwapLeaves(t *testing.T) {
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	root := t.TempDir()
	data := filepath.Join(root, "fold")
	if err := writeMarker(Swap{Data: data, Fresh: ResetFreshDir(data), Kept: data + ".replaced"}); err != nil {
		t.Fatal(err)
	}
	if _, err := FinishSwap(data, log); err == nil {
		t.Fatal("a marker whose stores are all gone was taken as a swap to finish")
	}
	other := filepath.Join(root, "other")
	if err := os.Rename(resetMarker(data), resetMarker(other)); err != nil {
		t.Fatal(err)
	}
	if _, err := FinishSwap(other, log); err == nil {
		t.Fatal("a marker naming another data dir was accepted")
	}
}

func mkStore(t *testing.T, dir, name string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "which"), []byte(name), 0o644); err != nil {
		t.Fatal(err)
	}
}

func storeOf(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "which"))
	if err != nil {
		t.Fatalf("the data dir: %v", err)
	}
	return string(b)
}
