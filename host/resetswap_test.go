package host_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/testhook"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

var errKilledFake = errors.New("killed here (a test's step hook)")

// openedCursor is the cursor of the fold's store as a run opens it: the
// host started (stores opened, nothing folded yet) and closed.
func openedCursor(t *testing.T, o host.Options) protocol.Revision {
	t.Helper()
	o.Logger = hosttest.Quiet
	h, err := host.New(o)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	return h.Fold("routes").Store().Cursor().Rev
}

// TestResetKilledAtEveryStep: repair --reset (ResetStopped) killed before
// each step of its swap of the fresh store in; then a run opens the fold.
// A kill before the swap is recorded leaves the old store (its cursor);
// from then on the run completes the swap: the fresh store (its cursor,
// the head) is in the data dir and the old one kept aside; never a new
// empty fold. A second reset then works. Mutation caught: the run not
// completing a recorded swap (a kill between the renames starts an empty
// fold at cursor 0, as before the swap was recorded).
func TestResetKilledAtEveryStep(t *testing.T) {
	for _, step := range []string{"write-marker", "move-old-aside", "move-fresh-in", "remove-marker"} {
		t.Run(step, func(t *testing.T) {
			url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
			dir := filepath.Join(t.TempDir(), "fold")
			o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
				Logger: hosttest.Quiet, Folds: []host.FoldOptions{{Name: "routes", Bucket: "rt", DataDir: dir}}} // raw: the swap is the point
			r := hosttest.StartHost(t, o)
			old := hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80"))
			hosttest.WaitCursor(t, r.H.Fold("routes"), old)
			if err := r.Stop(t); err != nil {
				t.Fatal(err)
			}
			head := hosttest.Put(t, b, "route.b", hosttest.Route("10.0.0.2:80")) // the fresh store reaches it, the old one not

			testhook.Set(t, &testhook.ResetStep, func(s string) error {
				if s == step {
					return errKilledFake
				}
				return nil
			})
			_, err := host.ResetStopped(context.Background(), o, "routes", nil)
			testhook.ResetStep = nil
			if !errors.Is(err, errKilledFake) {
				t.Fatalf("the reset killed at %s returned %v", step, err)
			}

			got := openedCursor(t, o)
			want := protocol.Revision(head)
			if step == "write-marker" {
				want = protocol.Revision(old) // killed before the swap was recorded
			}
			if got != want {
				t.Fatalf("after a reset killed at %s, the run opened the fold at cursor %d, want %d (old %d, fresh %d)", step, got, want, old, head)
			}
			kept, _ := filepath.Glob(dir + ".replaced-*")
			if step != "write-marker" {
				if len(kept) != 1 {
					t.Fatalf("the replaced store is not kept aside once: %v", kept)
				}
				st, cur, err := fold.Open(kept[0], fold.Options{Logger: hosttest.Quiet})
				if err != nil {
					t.Fatal(err)
				}
				st.Close()
				if cur.Rev != protocol.Revision(old) {
					t.Errorf("the kept store is at cursor %d, want the old %d", cur.Rev, old)
				}
			}
			if _, err := os.Stat(filepath.Join(filepath.Dir(dir), ".fold.reset-swap")); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("the swap's marker is left after the run: %v", err)
			}

			// A reset again, not killed, works from what the run left.
			res, err := host.ResetStopped(context.Background(), o, "routes", nil)
			if err != nil {
				t.Fatal(err)
			}
			if res.Cursor != head || openedCursor(t, o) != protocol.Revision(head) {
				t.Errorf("the reset after: cursor %d (opened %d), want %d", res.Cursor, openedCursor(t, o), head)
			}
		})
	}
}

// TestResetMarkerOfAnotherDirIsRefused: a swap marker that does not name
// the fold's data dir, or does not parse, or records a state the swap
// cannot leave (no store at all), makes the start fail naming the marker
// instead of opening (or making) something else.
func TestResetMarkerOfAnotherDirIsRefused(t *testing.T) {
	url, _ := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	dir := filepath.Join(t.TempDir(), "fold")
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Logger: hosttest.Quiet,
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "rt", DataDir: dir}}}
	marker := filepath.Join(filepath.Dir(dir), ".fold.reset-swap")
	for _, content := range []string{
		"not json",
		`{"data":"/elsewhere","fresh":"/elsewhere.reset","kept":"/elsewhere.kept"}`,
		`{"data":"` + dir + `","fresh":"` + dir + `.gone","kept":"` + dir + `.kept"}`, // neither store exists
	} {
		if err := os.WriteFile(marker, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := hosttest.StartErr(t, o); err == nil || !strings.Contains(err.Error(), "repair --reset") {
			t.Errorf("start with the marker %s: %v, want a refusal naming the interrupted reset", content, err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the refused start made the data dir: %v", err)
		}
	}
}
