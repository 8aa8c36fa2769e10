package storetest

import (
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
)

func contractPrune(t *testing.T, h Harness) {
	st := OpenStore(t)
	old1 := ExportAt(t, st, 5, nil)
	old2 := ExportAt(t, st, 5, nil)
	young := ExportAt(t, st, 5, nil)
	target := ExportAt(t, st, 5, nil)
	sameRank := ExportAt(t, st, 0, []string{"other"}) // at the pointer's rank, not its target
	above := ExportAt(t, st, 5, nil)                  // uploaded, never swapped
	for _, a := range []Artifact{old1, old2, sameRank, above} {
		if _, err := h.UploadPayload(t.Context(), "f", a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	// Before any pointer: nothing is prunable.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(24*time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune without pointer: %v %v", del, err)
	}
	if out, err := artifact.Upload(t.Context(), h, "f", target.Dir); err != nil || out != artifact.Published {
		t.Fatalf("publish target: %v %v", out, err)
	}
	const junk = "0123456789abcdef.tar"
	h.PutPayload(t, "f", junk, []byte("not a tar"))
	// Stores keep times at whole seconds: everything above was written
	// before mid, young is written at or after it.
	mid := time.Now().Add(time.Second).Truncate(time.Second)
	time.Sleep(time.Until(mid) + 10*time.Millisecond)
	if _, err := h.UploadPayload(t.Context(), "f", young.Dir); err != nil {
		t.Fatal(err)
	}
	now := mid.Add(time.Hour)
	del, err := h.Prune(t.Context(), "f", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(del)
	want := []string{old1.Addr + ".tar", old2.Addr + ".tar"}
	slices.Sort(want)
	if !slices.Equal(del, want) {
		t.Fatalf("pruned %v, want %v", del, want)
	}
	left := h.PayloadNames(t, "f")
	for _, keep := range []string{young.Addr + ".tar", target.Addr + ".tar", sameRank.Addr + ".tar", above.Addr + ".tar", junk} {
		if !slices.Contains(left, keep) {
			t.Fatalf("pruned %s; left %v", keep, left)
		}
	}
	// Once aged out, young goes too; the target, the payload at the
	// pointer's rank and the one above never do, even with zero grace.
	del, err = h.Prune(t.Context(), "f", 0, now.Add(time.Hour))
	if err != nil || !slices.Equal(del, []string{young.Addr + ".tar"}) {
		t.Fatalf("second prune: %v %v", del, err)
	}
	if del, err := h.Prune(t.Context(), "f", 0, now.Add(100*time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("third prune: %v %v", del, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	CheckImported(t, dest, target.Cursor, target.Data)
}

// contractAbandonedUploads: what an upload killed mid-way leaves behind is
// collected by the next Prune once idle for MinAbandonedAge, never before,
// whatever the payloads' grace, with or without a published pointer.
func contractAbandonedUploads(t *testing.T, h Harness) {
	now := time.Now()
	h.AbandonUpload(t, "f")
	n := h.Leftovers(t, "f")
	if n == 0 {
		t.Fatal("abandonUpload left nothing behind")
	}
	// No pointer yet: a young leftover stays, an idle one goes.
	if _, err := h.Prune(t.Context(), "f", time.Second, now.Add(artifact.MinAbandonedAge/2)); err != nil {
		t.Fatal(err)
	}
	if got := h.Leftovers(t, "f"); got != n {
		t.Fatalf("prune took %d of %d leftovers idle for less than MinAbandonedAge (they may be live)", n-got, n)
	}
	if _, err := h.Prune(t.Context(), "f", time.Second, now.Add(2*artifact.MinAbandonedAge)); err != nil {
		t.Fatal(err)
	}
	if got := h.Leftovers(t, "f"); got != 0 {
		t.Fatalf("%d leftovers after a prune without a pointer", got)
	}

	st := OpenStore(t)
	a := ExportAt(t, st, 10, nil)
	if _, err := artifact.Upload(t.Context(), h, "f", a.Dir); err != nil {
		t.Fatal(err)
	}
	h.AbandonUpload(t, "f")
	// A payload grace far longer than the idle time does not keep them.
	if _, err := h.Prune(t.Context(), "f", 100*artifact.MinAbandonedAge, now.Add(2*artifact.MinAbandonedAge)); err != nil {
		t.Fatal(err)
	}
	if got := h.Leftovers(t, "f"); got != 0 {
		t.Fatalf("%d leftovers after a prune with a published pointer", got)
	}
	if _, err := artifact.Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), artifact.DownloadOptions{}); err != nil {
		t.Fatalf("the published artifact after the cleanup: %v", err)
	}
}

// contractConcurrentPrune: two nodes pruning the same key at once both
// succeed (a payload the other deleted first is not an error), and
// together they delete exactly the prunable payloads.
func contractConcurrentPrune(t *testing.T, h Harness) {
	st := OpenStore(t)
	var old []string
	for range 6 {
		a := ExportAt(t, st, 3, nil)
		if _, err := h.UploadPayload(t.Context(), "f", a.Dir); err != nil {
			t.Fatal(err)
		}
		old = append(old, a.Addr+".tar")
	}
	target := ExportAt(t, st, 3, nil)
	if out, err := artifact.Upload(t.Context(), h, "f", target.Dir); err != nil || out != artifact.Published {
		t.Fatalf("publish: %v %v", out, err)
	}
	later := time.Now().Add(time.Hour)
	var wg sync.WaitGroup
	var errs [2]error
	var dels [2][]string
	for i := range 2 {
		wg.Go(func() { dels[i], errs[i] = h.Prune(t.Context(), "f", 0, later) })
	}
	wg.Wait()
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("concurrent prunes: %v / %v", errs[0], errs[1])
	}
	left := h.PayloadNames(t, "f")
	if !slices.Equal(left, []string{target.Addr + ".tar"}) {
		t.Fatalf("left %v, want only the target", left)
	}
	all := slices.Compact(slices.Sorted(slices.Values(append(slices.Clone(dels[0]), dels[1]...))))
	slices.Sort(old)
	if !slices.Equal(all, old) {
		t.Fatalf("deleted %v, want %v", all, old)
	}
}
