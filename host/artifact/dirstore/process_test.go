package dirstore

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/storetest"
	"github.com/foldhost/foldhost/protocol"
)

// helperUploader is the child side of TestLocalRaceAcrossProcesses: the test
// binary re-run with EXPORT_HELPER_ROOT set uploads the artifacts named in
// its environment, in order, several times.
func helperUploader(t *testing.T, root string) {
	l, err := New(root)
	if err != nil {
		t.Fatal(err)
	}
	dirs := strings.Split(os.Getenv("EXPORT_HELPER_DIRS"), string(os.PathListSeparator))
	for i := 0; i < 30; i++ {
		for _, d := range dirs {
			if _, err := artifact.Upload(t.Context(), l, "f", d); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// TestLocalRaceAcrossProcesses: two processes swap the pointer
// concurrently, one uploading newest-first, the other oldest-first; the
// flock(2) CAS keeps the observed rank monotone.
func TestLocalRaceAcrossProcesses(t *testing.T) {
	if root := os.Getenv("EXPORT_HELPER_ROOT"); root != "" {
		helperUploader(t, root)
		return
	}
	st := storetest.OpenStore(t)
	var arts []storetest.Artifact
	for i := 0; i < 3; i++ {
		arts = append(arts, storetest.ExportAt(t, st, 10, nil))
	}
	l := newLocal(t)
	var fwd, rev []string
	for _, a := range arts {
		fwd = append(fwd, a.Dir)
	}
	rev = slices.Clone(fwd)
	slices.Reverse(rev)
	var cmds []*exec.Cmd
	for _, order := range [][]string{fwd, rev} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestLocalRaceAcrossProcesses$", "-test.count=1")
		cmd.Env = append(os.Environ(), "EXPORT_HELPER_ROOT="+l.root,
			"EXPORT_HELPER_DIRS="+strings.Join(order, string(os.PathListSeparator)))
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, cmd)
	}
	done := make(chan error, len(cmds))
	for _, c := range cmds {
		go func() { done <- c.Wait() }()
	}
	var observed []protocol.Revision
	for finished := 0; finished < len(cmds); {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("helper: %v", err)
			}
			finished++
		default:
		}
		if b, err := os.ReadFile(filepath.Join(l.root, "f.manifest.json")); err == nil {
			r, ok := artifact.PointerState(b).Rank()
			if !ok {
				t.Fatalf("torn pointer read: %q", b)
			}
			observed = append(observed, r)
		}
	}
	if !slices.IsSorted(observed) {
		t.Fatalf("pointer regressed across processes: %v", observed)
	}
	if r := storetest.PointerRank(t, l, "f"); r != arts[len(arts)-1].Cursor.Rev {
		t.Fatalf("final rank %d", r)
	}
	t.Logf("%d pointer observations, monotone", len(observed))
}
