package foldrun

import (
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// TestReadsDuringARepairSeeThePreRepairState: while a repair runs, every
// read the fold hands out is a share of the state pinned when the repair
// began (its cursor, its data), never the half-repaired store; the status
// says repairing and not ready; afterwards reads see the repaired store.
// Mutation caught: Snapshot ignoring the pin (the read sees "a" deleted).
func TestReadsDuringARepairSeeThePreRepairState(t *testing.T) {
	dir := t.TempDir()
	f, err := New(Options{Name: "a", DataDir: filepath.Join(dir, "a")}, quietEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer f.CloseStore()
	a := fold.Update{Key: "a", Value: []byte("one"), Rev: 1, Op: fold.OpPut}
	if err := f.store.Commit(fold.Commit{Raw: []fold.Update{a}, Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	unpin := f.pinForRepair(protocol.PlanKeyListingDiff)
	// A repair batch: a synthetic delete under the unchanged cursor.
	if err := f.store.Commit(fold.Commit{Raw: []fold.Update{{Key: "a", Op: fold.OpDelete}}, Cursor: protocol.Cursor{Rev: 1}, Repair: fold.RepairBegin}); err != nil {
		t.Fatal(err)
	}
	sn, err := f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	if e, ok, err := sn.Get("a"); err != nil || !ok || string(e.Value) != "one" {
		t.Errorf("read during the repair: %q %t %v, want the pre-repair value", e.Value, ok, err)
	}
	_ = sn.Close()
	if st := f.Status(); st.State != httpapi.StateRepairing || st.Ready || st.Repairs.Running == nil {
		t.Errorf("status during the repair: state %s ready %t running %v", st.State, st.Ready, st.Repairs.Running)
	}

	// The repair fails here (to be retried): the fold is back in its
	// state, and the half-repaired store says so in every answer, the
	// status, and to an export.
	unpin()
	f.repairEnded(protocol.PlanKeyListingDiff, "failed", errors.New("listing cut"), repair.Result{})
	st := f.Status()
	if st.State != httpapi.StateStarting || !st.Repairs.Pending || st.Repairs.Running != nil || st.Repairs.Last.Outcome != "failed" {
		t.Errorf("status after a failed repair: state %s, repairs %+v", st.State, st.Repairs)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	defer srv.Close()
	for _, path := range []string{"/v1/folds/a/raw/a", "/v1/folds/a/raw?prefix=", "/v1/folds/a/raw?prefix=&format=ndjson"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), `"repair_pending":true`) {
			t.Errorf("GET %s after a failed repair: %s, want repair_pending", path, body)
		}
	}
	if _, _, err := artifact.Export(f.store, t.TempDir()); !errors.Is(err, artifact.ErrRepairPending) {
		t.Errorf("export of a half-repaired store: %v, want ErrRepairPending", err)
	}

	// The next repair finishes: its last commit clears the mark.
	if err := f.store.Commit(fold.Commit{Cursor: protocol.Cursor{Rev: 2}, Repair: fold.RepairEnd}); err != nil {
		t.Fatal(err)
	}
	f.endRepair(protocol.PlanKeyListingDiff, "done", nil, repair.Result{})
	sn, err = f.Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	defer sn.Close()
	if _, ok, _ := sn.Get("a"); ok {
		t.Error("read after the repair still sees the pre-repair state")
	}
	if st := f.Status(); st.Repairs.Running != nil || st.Repairs.Pending || len(st.Repairs.Counts) != 2 {
		t.Errorf("status after the repair: %+v", st.Repairs)
	}
}

// TestAnswersSayHowFarTheyAreSettled: a prefix fold's answer read while its
// cursor is unsettled (a delivery its settle probe has not confirmed yet)
// carries the settled revision beside the cursor, in every kind of read;
// once settled, no answer carries it.
func TestAnswersSayHowFarTheyAreSettled(t *testing.T) {
	f, err := New(Options{Name: "a", DataDir: filepath.Join(t.TempDir(), "a")}, quietEnv())
	if err != nil {
		t.Fatal(err)
	}
	defer f.CloseStore()
	a := fold.Update{Key: "a", Value: []byte("one"), Rev: 9, Op: fold.OpPut}
	if err := f.store.Commit(fold.Commit{Raw: []fold.Update{a}, Cursor: protocol.Cursor{Rev: 9, Unsettled: true, Settled: 4}}); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	defer srv.Close()
	paths := []string{"/v1/folds/a/raw/a", "/v1/folds/a/raw/nope", "/v1/folds/a/raw?prefix=", "/v1/folds/a/raw?prefix=&format=ndjson"}
	get := func(path string) string {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return string(body)
	}
	for _, path := range paths {
		if body := get(path); !strings.Contains(body, `"cursor":9`) || !strings.Contains(body, `"settled":4`) {
			t.Errorf("GET %s with an unsettled cursor: %s, want cursor 9 and settled 4", path, body)
		}
	}
	if st := f.Status(); st.Cursor != 9 || st.Settled != 4 {
		t.Errorf("status: cursor %d settled %d, want 9 and 4", st.Cursor, st.Settled)
	}
	if err := f.store.Commit(fold.Commit{Cursor: protocol.Cursor{Rev: 9}}); err != nil {
		t.Fatal(err)
	}
	for _, path := range paths {
		if body := get(path); strings.Contains(body, `"settled"`) {
			t.Errorf("GET %s with a settled cursor: %s, want no settled mark", path, body)
		}
	}
}

// quietEnv is the Env of a fold that runs nothing: no NATS, no metrics, a
// discarded log.
func quietEnv() *Env {
	return &Env{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: &natskv.Health{}}
}
