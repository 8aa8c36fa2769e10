// Package storetest is the contract suite every artifact.Store runs, and the
// helpers its tests and the artifact tests share (a real fold store, real
// artifacts).
package storetest

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

// Harness is one store under the contract suite plus the backdoors the
// suite needs to play a broken or hostile store.
type Harness struct {
	artifact.Store
	// PutPointer writes b as key's pointer, bypassing the guard.
	PutPointer func(t *testing.T, key string, b []byte)
	// PutPayload writes b as key's payload named name, bypassing checks.
	PutPayload func(t *testing.T, key, name string, b []byte)
	// PayloadNames lists key's payload names, bypassing the store.
	PayloadNames func(t *testing.T, key string) []string
	// AbandonUpload leaves what an upload killed mid-way leaves behind
	// (a temp file, an open multipart upload); Leftovers counts it.
	AbandonUpload func(t *testing.T, key string)
	Leftovers     func(t *testing.T, key string) int
	// RaceRounds is how many rounds the race test runs.
	RaceRounds int
}

// Run runs the store contract against fresh, empty stores made by newT.
func Run(t *testing.T, newT func(t *testing.T) Harness) {
	t.Run("RoundTrip", func(t *testing.T) { contractRoundTrip(t, newT(t)) })
	t.Run("SupersededByNewer", func(t *testing.T) { contractSuperseded(t, newT(t)) })
	t.Run("FencedByANewerOwner", func(t *testing.T) { contractFenced(t, newT(t)) })
	t.Run("RaceNeverRegresses", func(t *testing.T) { contractRace(t, newT(t)) })
	t.Run("CrashBetweenPayloadAndSwap", func(t *testing.T) { contractCrash(t, newT(t)) })
	t.Run("SwapNeedsPayload", func(t *testing.T) { contractSwapNeedsPayload(t, newT(t)) })
	t.Run("CorruptPointerReplaced", func(t *testing.T) { contractCorruptPointer(t, newT(t)) })
	t.Run("Prune", func(t *testing.T) { contractPrune(t, newT(t)) })
	t.Run("BadKey", func(t *testing.T) { contractBadKey(t, newT(t)) })
	t.Run("CancelledDownloadLeavesDest", func(t *testing.T) { contractCancelledDownload(t, newT(t)) })
	t.Run("PruneCollectsAbandonedUploads", func(t *testing.T) { contractAbandonedUploads(t, newT(t)) })
	t.Run("ConcurrentPruneIsIdempotent", func(t *testing.T) { contractConcurrentPrune(t, newT(t)) })
	t.Run("List", func(t *testing.T) { contractList(t, newT(t)) })
	t.Run("DescribeAndShow", func(t *testing.T) { contractDescribe(t, newT(t)) })
}

// PointerRank is the rank of key's pointer in tr, which must parse.
func PointerRank(t *testing.T, tr artifact.Store, key string) protocol.Revision {
	t.Helper()
	b, err := tr.Pointer(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := artifact.PointerState(b).Rank()
	if !ok {
		t.Fatalf("pointer not parseable: %q", b)
	}
	return r
}

func contractRoundTrip(t *testing.T, h Harness) {
	st := OpenStore(t)
	a := ExportAt(t, st, 1000, []string{"route.>"})
	if _, err := h.Pointer(t.Context(), "f"); !errors.Is(err, artifact.ErrNoPointer) {
		t.Fatalf("empty pointer: %v", err)
	}
	if _, err := artifact.Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), artifact.DownloadOptions{}); !errors.Is(err, artifact.ErrNoPointer) {
		t.Fatalf("download without pointer: %v", err)
	}
	out, err := artifact.Upload(t.Context(), h, "f", a.Dir)
	if err != nil || out != artifact.Published {
		t.Fatalf("upload: %v %v", out, err)
	}
	if got := h.PayloadNames(t, "f"); !slices.Equal(got, []string{a.Addr + ".tar"}) {
		t.Fatalf("payload layout: %v, want %s.tar", got, a.Addr)
	}
	if b, err := h.Pointer(t.Context(), "f"); err != nil || string(b) != string(ReadManifest(t, a.Dir)) {
		t.Fatalf("pointer bytes: %v %q", err, b)
	}
	// Re-uploading the same artifact is idempotent.
	if out, err := artifact.Upload(t.Context(), h, "f", a.Dir); err != nil || out != artifact.Published {
		t.Fatalf("re-upload: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	m, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := m.DecodeCursor(); c != a.Cursor {
		t.Fatalf("downloaded manifest cursor %v", c)
	}
	CheckImported(t, dest, a.Cursor, a.Data)
	if _, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{}); !errors.Is(err, artifact.ErrDestNotEmpty) {
		t.Fatalf("download over a fold: %v", err)
	}
}

func contractSuperseded(t *testing.T, h Harness) {
	st := OpenStore(t)
	older := ExportAt(t, st, 10, nil)
	newer := ExportAt(t, st, 10, nil)
	if out, err := artifact.Upload(t.Context(), h, "f", newer.Dir); err != nil || out != artifact.Published {
		t.Fatalf("newer: %v %v", out, err)
	}
	if out, err := artifact.Upload(t.Context(), h, "f", older.Dir); err != nil || out != artifact.SupersededByNewer {
		t.Fatalf("older after newer: %v %v, want superseded", out, err)
	}
	if r := PointerRank(t, h, "f"); r != newer.Cursor.Rev {
		t.Fatalf("pointer rank %d, want %d", r, newer.Cursor.Rev)
	}
	// Same rank, different artifact (another scope): allowed.
	same := ExportAt(t, st, 0, []string{"other"})
	if same.Addr == newer.Addr {
		t.Fatal("expected a different address")
	}
	if out, err := artifact.Upload(t.Context(), h, "f", same.Dir); err != nil || out != artifact.Published {
		t.Fatalf("same rank: %v %v", out, err)
	}
	if b, _ := h.Pointer(t.Context(), "f"); artifact.Address(b) != same.Addr {
		t.Fatalf("pointer names %s, want %s", artifact.Address(b), same.Addr)
	}
}

// contractFenced: a fleet's pointer carries its owner's epoch; an older
// owner's swap is refused (FencedOut) whatever its rank; a newer owner
// raises the epoch of the pointer as it is (the same artifact, which still
// downloads whole), fencing the older one out before its own first export;
// an exporter outside a fleet (epoch 0) is judged by rank alone.
func contractFenced(t *testing.T, h Harness) {
	ctx := t.Context()
	st := OpenStore(t)
	epochOf := func() protocol.Revision {
		t.Helper()
		b, err := h.Pointer(ctx, "f")
		if err != nil {
			t.Fatal(err)
		}
		return artifact.PointerState(b).Epoch()
	}
	first := ExportAt(t, st, 5, nil)
	if out, err := artifact.UploadAt(ctx, h, "f", first.Dir, 4); err != nil || out != artifact.Published || epochOf() != 4 {
		t.Fatalf("an owner at epoch 4: %v %v, pointer epoch %d", out, err, epochOf())
	}
	ahead := ExportAt(t, st, 5, nil)
	if out, err := artifact.UploadAt(ctx, h, "f", ahead.Dir, 3); err != nil || out != artifact.FencedOut {
		t.Fatalf("an older owner, ahead in rank: %v %v, want fenced out", out, err)
	}
	if out, err := artifact.RaisePointerEpoch(ctx, h, "f", 9); err != nil || out != artifact.Published || epochOf() != 9 {
		t.Fatalf("raising the epoch to 9: %v %v, pointer epoch %d", out, err, epochOf())
	}
	if b, _ := h.Pointer(ctx, "f"); artifact.Address(b) != first.Addr || PointerRank(t, h, "f") != first.Cursor.Rev {
		t.Fatalf("the raised pointer names %s at rank %d, want the artifact it named: %s at %d", artifact.Address(b), PointerRank(t, h, "f"), first.Addr, first.Cursor.Rev)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(ctx, h, "f", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatalf("downloading the artifact a raised pointer names: %v", err)
	}
	CheckImported(t, dest, first.Cursor, first.Data)
	if out, err := artifact.UploadAt(ctx, h, "f", ahead.Dir, 4); err != nil || out != artifact.FencedOut {
		t.Fatalf("the owner at epoch 4, resumed after the raise: %v %v, want fenced out", out, err)
	}
	if out, err := artifact.RaisePointerEpoch(ctx, h, "f", 4); err != nil || out != artifact.FencedOut || epochOf() != 9 {
		t.Fatalf("raising to 4 over 9: %v %v (epoch %d), want fenced out", out, err, epochOf())
	}
	if out, err := artifact.UploadAt(ctx, h, "f", ahead.Dir, 9); err != nil || out != artifact.Published || PointerRank(t, h, "f") != ahead.Cursor.Rev {
		t.Fatalf("the owner at epoch 9: %v %v", out, err)
	}
	outside := ExportAt(t, st, 5, nil)
	if out, err := artifact.Upload(ctx, h, "f", outside.Dir); err != nil || out != artifact.Published {
		t.Fatalf("an exporter outside a fleet, newer: %v %v", out, err)
	}
}

func contractRace(t *testing.T, h Harness) {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("EXPORT_RACE_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = v
	}
	t.Logf("seed %d (rerun with EXPORT_RACE_SEED=%d)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))
	st := OpenStore(t)
	var arts []Artifact
	for i := 0; i < 4; i++ {
		arts = append(arts, ExportAt(t, st, 20, nil))
	}
	top := arts[len(arts)-1].Cursor.Rev
	superseded := 0
	for round := 0; round < h.RaceRounds; round++ {
		key := "race" + strconv.Itoa(round)
		delays := make([]time.Duration, len(arts))
		for i := range delays {
			delays[i] = time.Duration(rng.IntN(3000)) * time.Microsecond
		}
		stop := make(chan struct{})
		var observed []protocol.Revision
		var obsDone sync.WaitGroup
		obsDone.Add(1)
		go func() { // observer: the published rank never regresses
			defer obsDone.Done()
			for {
				if b, err := h.Pointer(t.Context(), key); err == nil {
					r, ok := artifact.PointerState(b).Rank()
					if !ok {
						t.Errorf("torn or corrupt pointer read: %q", b)
						return
					}
					observed = append(observed, r)
				}
				select {
				case <-stop:
					return
				default:
				}
			}
		}()
		outs := make([]artifact.Outcome, len(arts))
		var wg sync.WaitGroup
		for i, a := range arts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delays[i])
				out, err := artifact.Upload(t.Context(), h, key, a.Dir)
				if err != nil {
					t.Errorf("seed %d round %d upload %d: %v", seed, round, i, err)
				}
				outs[i] = out
			}()
		}
		wg.Wait()
		close(stop)
		obsDone.Wait()
		if !slices.IsSorted(observed) {
			t.Fatalf("seed %d round %d: pointer regressed: %v", seed, round, observed)
		}
		if r := PointerRank(t, h, key); r != top {
			t.Fatalf("seed %d round %d: final rank %d, want %d", seed, round, r, top)
		}
		if outs[len(arts)-1] != artifact.Published {
			t.Fatalf("seed %d round %d: newest got %v", seed, round, outs[len(arts)-1])
		}
		for _, o := range outs {
			if o == artifact.SupersededByNewer {
				superseded++
			}
		}
	}
	t.Logf("superseded outcomes: %d", superseded)
	if superseded == 0 {
		t.Fatalf("seed %d: no upload was ever superseded; the race did not race", seed)
	}
}

func contractCrash(t *testing.T, h Harness) {
	st := OpenStore(t)
	a := ExportAt(t, st, 50, nil)
	b := ExportAt(t, st, 50, nil)
	if _, err := artifact.Upload(t.Context(), h, "f", a.Dir); err != nil {
		t.Fatal(err)
	}
	mb, err := h.UploadPayload(t.Context(), "f", b.Dir) // crash before the swap
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	CheckImported(t, dest, a.Cursor, a.Data)
	// The orphan payload is above the pointer: never pruned.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune: %v %v", del, err)
	}
	// The retried round publishes it (re-uploading the payload is fine).
	if _, err := h.UploadPayload(t.Context(), "f", b.Dir); err != nil {
		t.Fatalf("re-upload payload: %v", err)
	}
	if out, err := h.SwapPointer(t.Context(), "f", mb); err != nil || out != artifact.Published {
		t.Fatalf("swap: %v %v", out, err)
	}
	dest2 := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(t.Context(), h, "f", dest2, artifact.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	CheckImported(t, dest2, b.Cursor, b.Data)
}

func contractSwapNeedsPayload(t *testing.T, h Harness) {
	st := OpenStore(t)
	a := ExportAt(t, st, 5, nil)
	if _, err := h.SwapPointer(t.Context(), "f", ReadManifest(t, a.Dir)); err == nil {
		t.Fatal("swap to a missing payload succeeded")
	}
	if _, err := h.Pointer(t.Context(), "f"); !errors.Is(err, artifact.ErrNoPointer) {
		t.Fatalf("pointer: %v", err)
	}
}

func contractCorruptPointer(t *testing.T, h Harness) {
	st := OpenStore(t)
	low := ExportAt(t, st, 5, nil)
	high := ExportAt(t, st, 5, nil)
	if _, err := artifact.Upload(t.Context(), h, "f", high.Dir); err != nil {
		t.Fatal(err)
	}
	h.PutPointer(t, "f", []byte(`{"schema":1,"cursor":"garbage`))
	if _, err := artifact.Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), artifact.DownloadOptions{}); !errors.Is(err, artifact.ErrArtifactInvalid) {
		t.Fatalf("download of corrupt pointer: %v", err)
	}
	// Corrupt prunes nothing.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune under corrupt pointer: %v %v", del, err)
	}
	// Any rank replaces a corrupt pointer, even a lower one.
	if out, err := artifact.Upload(t.Context(), h, "f", low.Dir); err != nil || out != artifact.Published {
		t.Fatalf("upload over corrupt: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	CheckImported(t, dest, low.Cursor, low.Data)
}

func contractBadKey(t *testing.T, h Harness) {
	for _, k := range []string{"", "a/b", "..", ".hidden", `a\b`} {
		if _, err := h.Pointer(t.Context(), k); err == nil || errors.Is(err, artifact.ErrNoPointer) {
			t.Errorf("key %q accepted: %v", k, err)
		}
	}
}

// contractCancelledDownload: a download cancelled mid-stream fails with the
// context's error and leaves the destination absent.
func contractCancelledDownload(t *testing.T, h Harness) {
	st := OpenStore(t)
	a := ExportAt(t, st, 300, nil)
	if _, err := artifact.Upload(t.Context(), h, "f", a.Dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dest := filepath.Join(t.TempDir(), "fold")
	var calls int
	_, err := artifact.Download(ctx, h, "f", dest, artifact.DownloadOptions{Progress: func(read, total int64) {
		calls++
		if total <= 0 || read > total {
			t.Errorf("progress %d of %d", read, total)
		}
		cancel()
	}})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled download: %v, want context.Canceled", err)
	}
	if calls == 0 {
		t.Fatal("no progress reported")
	}
	if _, err := os.Stat(dest); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("dest after a cancelled download: %v", err)
	}
	var last, size int64
	if _, err := artifact.Download(t.Context(), h, "f", dest, artifact.DownloadOptions{Progress: func(r, s int64) { last, size = r, s }}); err != nil {
		t.Fatal(err)
	}
	if last != size || size != int64(len(TarOf(t, a.Dir))) {
		t.Fatalf("progress ended at %d of %d, payload is %d bytes", last, size, len(TarOf(t, a.Dir)))
	}
}
