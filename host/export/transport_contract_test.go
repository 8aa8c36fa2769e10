package export

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

	"github.com/foldhost/foldhost/protocol"
)

// harness is one transport under the contract suite plus the backdoors the
// suite needs to play a broken or hostile store.
type harness struct {
	Transport
	// putPointer writes b as key's pointer, bypassing the guard.
	putPointer func(t *testing.T, key string, b []byte)
	// putPayload writes b as key's payload named name, bypassing checks.
	putPayload func(t *testing.T, key, name string, b []byte)
	// payloads lists key's payload names.
	payloads func(t *testing.T, key string) []string
	// abandonUpload leaves what an upload killed mid-way leaves behind
	// (a temp file, an open multipart upload); leftovers counts it.
	abandonUpload func(t *testing.T, key string)
	leftovers     func(t *testing.T, key string) int
	// raceRounds is how many rounds the race test runs.
	raceRounds int
}

// runTransportContract runs the transport contract against fresh, empty
// transports made by newT.
func runTransportContract(t *testing.T, newT func(t *testing.T) harness) {
	t.Run("RoundTrip", func(t *testing.T) { contractRoundTrip(t, newT(t)) })
	t.Run("SupersededByNewer", func(t *testing.T) { contractSuperseded(t, newT(t)) })
	t.Run("RaceNeverRegresses", func(t *testing.T) { contractRace(t, newT(t)) })
	t.Run("CrashBetweenPayloadAndSwap", func(t *testing.T) { contractCrash(t, newT(t)) })
	t.Run("SwapNeedsPayload", func(t *testing.T) { contractSwapNeedsPayload(t, newT(t)) })
	t.Run("CorruptPointerReplaced", func(t *testing.T) { contractCorruptPointer(t, newT(t)) })
	t.Run("Prune", func(t *testing.T) { contractPrune(t, newT(t)) })
	t.Run("BadKey", func(t *testing.T) { contractBadKey(t, newT(t)) })
	t.Run("CancelledDownloadLeavesDest", func(t *testing.T) { contractCancelledDownload(t, newT(t)) })
	t.Run("PruneCollectsAbandonedUploads", func(t *testing.T) { contractAbandonedUploads(t, newT(t)) })
}

func TestTransportContractLocal(t *testing.T) {
	runTransportContract(t, func(t *testing.T) harness {
		l := newLocal(t)
		return harness{
			Transport: l,
			putPointer: func(t *testing.T, key string, b []byte) {
				if err := os.WriteFile(l.pointerPath(key), b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			putPayload: func(t *testing.T, key, name string, b []byte) {
				if err := os.MkdirAll(l.payloadDir(key), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(l.payloadDir(key), name), b, 0o644); err != nil {
					t.Fatal(err)
				}
			},
			payloads: func(t *testing.T, key string) []string { return listDir(t, l.payloadDir(key)) },
			abandonUpload: func(t *testing.T, key string) {
				if err := os.MkdirAll(l.payloadDir(key), 0o755); err != nil {
					t.Fatal(err)
				}
				for _, p := range []string{filepath.Join(l.payloadDir(key), ".upload-123"), filepath.Join(l.root, "."+key+".pointer-456")} {
					if err := os.WriteFile(p, []byte("partial"), 0o644); err != nil {
						t.Fatal(err)
					}
				}
			},
			leftovers: func(t *testing.T, key string) int {
				a, _ := filepath.Glob(filepath.Join(l.payloadDir(key), ".upload-*"))
				b, _ := filepath.Glob(filepath.Join(l.root, "."+key+".pointer-*"))
				return len(a) + len(b)
			},
			raceRounds: 25,
		}
	})
}

func contractPointerRank(t *testing.T, tr Transport, key string) protocol.Revision {
	t.Helper()
	b, err := tr.Pointer(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := pointerState(b).Rank()
	if !ok {
		t.Fatalf("pointer not parseable: %q", b)
	}
	return r
}

func contractRoundTrip(t *testing.T, h harness) {
	st := openStore(t)
	a := exportAt(t, st, 1000, []string{"route.>"})
	if _, err := h.Pointer(t.Context(), "f"); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("empty pointer: %v", err)
	}
	if _, err := Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), DownloadOptions{}); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("download without pointer: %v", err)
	}
	out, err := h.Upload(t.Context(), "f", a.dir)
	if err != nil || out != Published {
		t.Fatalf("upload: %v %v", out, err)
	}
	if got := h.payloads(t, "f"); !slices.Equal(got, []string{a.addr + ".tar"}) {
		t.Fatalf("payload layout: %v, want %s.tar", got, a.addr)
	}
	if b, err := h.Pointer(t.Context(), "f"); err != nil || string(b) != string(readManifest(t, a.dir)) {
		t.Fatalf("pointer bytes: %v %q", err, b)
	}
	// Re-uploading the same artifact is idempotent.
	if out, err := h.Upload(t.Context(), "f", a.dir); err != nil || out != Published {
		t.Fatalf("re-upload: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	m, err := Download(t.Context(), h, "f", dest, DownloadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := m.DecodeCursor(); c != a.cursor {
		t.Fatalf("downloaded manifest cursor %v", c)
	}
	checkImported(t, dest, a.cursor, a.data)
	if _, err := Download(t.Context(), h, "f", dest, DownloadOptions{}); !errors.Is(err, ErrDestNotEmpty) {
		t.Fatalf("download over a fold: %v", err)
	}
}

func contractSuperseded(t *testing.T, h harness) {
	st := openStore(t)
	older := exportAt(t, st, 10, nil)
	newer := exportAt(t, st, 10, nil)
	if out, err := h.Upload(t.Context(), "f", newer.dir); err != nil || out != Published {
		t.Fatalf("newer: %v %v", out, err)
	}
	if out, err := h.Upload(t.Context(), "f", older.dir); err != nil || out != SupersededByNewer {
		t.Fatalf("older after newer: %v %v, want superseded", out, err)
	}
	if r := contractPointerRank(t, h, "f"); r != newer.cursor.Rev {
		t.Fatalf("pointer rank %d, want %d", r, newer.cursor.Rev)
	}
	// Same rank, different artifact (another scope): allowed.
	same := exportAt(t, st, 0, []string{"other"})
	if same.addr == newer.addr {
		t.Fatal("expected a different address")
	}
	if out, err := h.Upload(t.Context(), "f", same.dir); err != nil || out != Published {
		t.Fatalf("same rank: %v %v", out, err)
	}
	if b, _ := h.Pointer(t.Context(), "f"); Address(b) != same.addr {
		t.Fatalf("pointer names %s, want %s", Address(b), same.addr)
	}
}

func contractRace(t *testing.T, h harness) {
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
	st := openStore(t)
	var arts []artifact
	for i := 0; i < 4; i++ {
		arts = append(arts, exportAt(t, st, 20, nil))
	}
	top := arts[len(arts)-1].cursor.Rev
	superseded := 0
	for round := 0; round < h.raceRounds; round++ {
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
					r, ok := pointerState(b).Rank()
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
		outs := make([]Outcome, len(arts))
		var wg sync.WaitGroup
		for i, a := range arts {
			wg.Add(1)
			go func() {
				defer wg.Done()
				time.Sleep(delays[i])
				out, err := h.Upload(t.Context(), key, a.dir)
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
		if r := contractPointerRank(t, h, key); r != top {
			t.Fatalf("seed %d round %d: final rank %d, want %d", seed, round, r, top)
		}
		if outs[len(arts)-1] != Published {
			t.Fatalf("seed %d round %d: newest got %v", seed, round, outs[len(arts)-1])
		}
		for _, o := range outs {
			if o == SupersededByNewer {
				superseded++
			}
		}
	}
	t.Logf("superseded outcomes: %d", superseded)
	if superseded == 0 {
		t.Fatalf("seed %d: no upload was ever superseded; the race did not race", seed)
	}
}

func contractCrash(t *testing.T, h harness) {
	st := openStore(t)
	a := exportAt(t, st, 50, nil)
	b := exportAt(t, st, 50, nil)
	if _, err := h.Upload(t.Context(), "f", a.dir); err != nil {
		t.Fatal(err)
	}
	mb, err := h.UploadPayload(t.Context(), "f", b.dir) // crash before the swap
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := Download(t.Context(), h, "f", dest, DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, a.cursor, a.data)
	// The orphan payload is above the pointer: never pruned.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune: %v %v", del, err)
	}
	// The retried round publishes it (re-uploading the payload is fine).
	if _, err := h.UploadPayload(t.Context(), "f", b.dir); err != nil {
		t.Fatalf("re-upload payload: %v", err)
	}
	if out, err := h.SwapPointer(t.Context(), "f", mb); err != nil || out != Published {
		t.Fatalf("swap: %v %v", out, err)
	}
	dest2 := filepath.Join(t.TempDir(), "fold")
	if _, err := Download(t.Context(), h, "f", dest2, DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest2, b.cursor, b.data)
}

func contractSwapNeedsPayload(t *testing.T, h harness) {
	st := openStore(t)
	a := exportAt(t, st, 5, nil)
	if _, err := h.SwapPointer(t.Context(), "f", readManifest(t, a.dir)); err == nil {
		t.Fatal("swap to a missing payload succeeded")
	}
	if _, err := h.Pointer(t.Context(), "f"); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("pointer: %v", err)
	}
}

func contractCorruptPointer(t *testing.T, h harness) {
	st := openStore(t)
	low := exportAt(t, st, 5, nil)
	high := exportAt(t, st, 5, nil)
	if _, err := h.Upload(t.Context(), "f", high.dir); err != nil {
		t.Fatal(err)
	}
	h.putPointer(t, "f", []byte(`{"schema":1,"cursor":"garbage`))
	if _, err := Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), DownloadOptions{}); !errors.Is(err, ErrArtifactInvalid) {
		t.Fatalf("download of corrupt pointer: %v", err)
	}
	// Corrupt prunes nothing.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune under corrupt pointer: %v %v", del, err)
	}
	// Any rank replaces a corrupt pointer, even a lower one.
	if out, err := h.Upload(t.Context(), "f", low.dir); err != nil || out != Published {
		t.Fatalf("upload over corrupt: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := Download(t.Context(), h, "f", dest, DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, low.cursor, low.data)
}

func contractPrune(t *testing.T, h harness) {
	st := openStore(t)
	old1 := exportAt(t, st, 5, nil)
	old2 := exportAt(t, st, 5, nil)
	young := exportAt(t, st, 5, nil)
	target := exportAt(t, st, 5, nil)
	sameRank := exportAt(t, st, 0, []string{"other"}) // at the pointer's rank, not its target
	above := exportAt(t, st, 5, nil)                  // uploaded, never swapped
	for _, a := range []artifact{old1, old2, sameRank, above} {
		if _, err := h.UploadPayload(t.Context(), "f", a.dir); err != nil {
			t.Fatal(err)
		}
	}
	// Before any pointer: nothing is prunable.
	if del, err := h.Prune(t.Context(), "f", 0, time.Now().Add(24*time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune without pointer: %v %v", del, err)
	}
	if out, err := h.Upload(t.Context(), "f", target.dir); err != nil || out != Published {
		t.Fatalf("publish target: %v %v", out, err)
	}
	const junk = "0123456789abcdef.tar"
	h.putPayload(t, "f", junk, []byte("not a tar"))
	// Stores keep times at whole seconds: everything above was written
	// before mid, young is written at or after it.
	mid := time.Now().Add(time.Second).Truncate(time.Second)
	time.Sleep(time.Until(mid) + 10*time.Millisecond)
	if _, err := h.UploadPayload(t.Context(), "f", young.dir); err != nil {
		t.Fatal(err)
	}
	now := mid.Add(time.Hour)
	del, err := h.Prune(t.Context(), "f", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(del)
	want := []string{old1.addr + ".tar", old2.addr + ".tar"}
	slices.Sort(want)
	if !slices.Equal(del, want) {
		t.Fatalf("pruned %v, want %v", del, want)
	}
	left := h.payloads(t, "f")
	for _, keep := range []string{young.addr + ".tar", target.addr + ".tar", sameRank.addr + ".tar", above.addr + ".tar", junk} {
		if !slices.Contains(left, keep) {
			t.Fatalf("pruned %s; left %v", keep, left)
		}
	}
	// Once aged out, young goes too; the target, the payload at the
	// pointer's rank and the one above never do, even with zero grace.
	del, err = h.Prune(t.Context(), "f", 0, now.Add(time.Hour))
	if err != nil || !slices.Equal(del, []string{young.addr + ".tar"}) {
		t.Fatalf("second prune: %v %v", del, err)
	}
	if del, err := h.Prune(t.Context(), "f", 0, now.Add(100*time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("third prune: %v %v", del, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := Download(t.Context(), h, "f", dest, DownloadOptions{}); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, target.cursor, target.data)
}

func contractBadKey(t *testing.T, h harness) {
	for _, k := range []string{"", "a/b", "..", ".hidden", `a\b`} {
		if _, err := h.Pointer(t.Context(), k); err == nil || errors.Is(err, ErrNoPointer) {
			t.Errorf("key %q accepted: %v", k, err)
		}
	}
}

// contractCancelledDownload: a download cancelled mid-stream fails with the
// context's error and leaves the destination absent.
func contractCancelledDownload(t *testing.T, h harness) {
	st := openStore(t)
	a := exportAt(t, st, 300, nil)
	if _, err := h.Upload(t.Context(), "f", a.dir); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	dest := filepath.Join(t.TempDir(), "fold")
	var calls int
	_, err := Download(ctx, h, "f", dest, DownloadOptions{Progress: func(read, total int64) {
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
	if _, err := Download(t.Context(), h, "f", dest, DownloadOptions{Progress: func(r, s int64) { last, size = r, s }}); err != nil {
		t.Fatal(err)
	}
	if last != size || size != int64(len(tarOf(t, a.dir))) {
		t.Fatalf("progress ended at %d of %d, payload is %d bytes", last, size, len(tarOf(t, a.dir)))
	}
}

// contractAbandonedUploads: what an upload killed mid-way leaves behind is
// collected by Prune once idle for max(grace, MinAbandonedAge), never
// before, with or without a published pointer.
func contractAbandonedUploads(t *testing.T, h harness) {
	now := time.Now()
	h.abandonUpload(t, "f")
	n := h.leftovers(t, "f")
	if n == 0 {
		t.Fatal("abandonUpload left nothing behind")
	}
	// No pointer yet: a young leftover stays, an idle one goes.
	if _, err := h.Prune(t.Context(), "f", time.Second, now.Add(MinAbandonedAge/2)); err != nil {
		t.Fatal(err)
	}
	if got := h.leftovers(t, "f"); got != n {
		t.Fatalf("prune took %d of %d leftovers idle for less than MinAbandonedAge (they may be live)", n-got, n)
	}
	if _, err := h.Prune(t.Context(), "f", time.Second, now.Add(2*MinAbandonedAge)); err != nil {
		t.Fatal(err)
	}
	if got := h.leftovers(t, "f"); got != 0 {
		t.Fatalf("%d leftovers after a prune without a pointer", got)
	}

	st := openStore(t)
	a := exportAt(t, st, 10, nil)
	if _, err := h.Upload(t.Context(), "f", a.dir); err != nil {
		t.Fatal(err)
	}
	h.abandonUpload(t, "f")
	if _, err := h.Prune(t.Context(), "f", 3*MinAbandonedAge, now.Add(2*MinAbandonedAge)); err != nil {
		t.Fatal(err)
	}
	if got := h.leftovers(t, "f"); got != n {
		t.Fatalf("prune took %d of %d leftovers younger than the grace", n-got, n)
	}
	if _, err := h.Prune(t.Context(), "f", time.Hour, now.Add(2*MinAbandonedAge)); err != nil {
		t.Fatal(err)
	}
	if got := h.leftovers(t, "f"); got != 0 {
		t.Fatalf("%d leftovers after a prune past the grace", got)
	}
	if _, err := Download(t.Context(), h, "f", filepath.Join(t.TempDir(), "x"), DownloadOptions{}); err != nil {
		t.Fatalf("the published artifact after the cleanup: %v", err)
	}
}
