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
	"regexp"
	"slices"
	"strconv"
	"strings"
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

// contractDescribe: the store reads the manifest inside each payload
// ([artifact.ManifestReader]), so List describes every payload (cursor,
// bucket, scope, plugin identity), not only the published one, and names a
// payload without a manifest of its name; WriteListing prints them as
// `foldhost artifacts list` does; Show finds the pointer's artifact, any
// other by a unique ID prefix, refuses an ambiguous or unknown ID, and
// WriteShown prints the whole manifest.
func contractDescribe(t *testing.T, h Harness) {
	ctx := t.Context()
	if _, ok := h.Store.(artifact.ManifestReader); !ok {
		t.Fatalf("%T does not read payload manifests", h.Store)
	}
	st := OpenStore(t)
	a := ExportAt(t, st, 10, nil)
	b := ExportAt(t, st, 5, []string{"route."})
	for _, u := range []struct {
		key string
		a   Artifact
	}{{"f", a}, {"f", b}, {"g", a}} {
		if _, err := artifact.Upload(ctx, h.Store, u.key, u.a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	const junk = "0123456789abcdef"
	h.PutPayload(t, "f", junk+".tar", []byte("not a tar"))
	ls, err := artifact.List(ctx, h.Store)
	if err != nil || len(ls) != 2 || len(ls[0].Payloads) != 3 {
		t.Fatalf("listing: %+v, %v", ls, err)
	}
	byID := map[string]artifact.ListedPayload{}
	for _, p := range ls[0].Payloads {
		byID[artifact.ID(p.Name)] = p
	}
	for _, w := range []struct {
		a         Artifact
		scope     []string
		published bool
	}{{a, []string{}, false}, {b, []string{"route."}, true}} {
		p := byID[w.a.Addr]
		m := p.Manifest
		if m == nil || p.Published != w.published || m.Cursor != uint64(w.a.Cursor.Rev) || m.Bucket != Origin.Bucket ||
			!slices.Equal(m.Scope, w.scope) || m.Plugin == nil || m.Plugin.SHA256 != "abc" || m.Plugin.ViewSchema != uint32(w.a.Cursor.Rev) ||
			m.Files == 0 || m.DataBytes == 0 || !m.StreamCreated.Equal(Origin.StreamCreated) {
			t.Errorf("payload %s: %+v (manifest %+v); want cursor %d, scope %q, published %t", w.a.Addr, p, m, w.a.Cursor.Rev, w.scope, w.published)
		}
	}
	if p := byID[junk]; p.Manifest != nil || p.ManifestError == "" {
		t.Errorf("a payload with no manifest: %+v", p)
	}

	var out strings.Builder
	if err := artifact.WriteListing(&out, "the store", ls, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, re := range []string{
		`(?m)^KEY +ID +CURSOR +BUCKET +SCOPE +PLUGIN +SIZE +AGE +STATE$`,
		`(?m)^f +` + a.Addr + ` +10 +routes +\* +-@-/abc +[0-9.]+ KiB +\d+s +-$`,
		`(?m)^f +` + b.Addr + ` +15 +routes +route\. +-@-/abc +[0-9.]+ KiB +\d+s +published$`,
		`(?m)^f +` + junk + ` +\? .* unreadable: `,
		`(?m)^g +` + a.Addr + ` +10 +routes +\* .* published$`,
	} {
		if !regexp.MustCompile(re).MatchString(out.String()) {
			t.Errorf("listing lacks %s:\n%s", re, out.String())
		}
	}

	if _, err := artifact.Show(ctx, h.Store, nil, ""); err == nil || !strings.Contains(err.Error(), "2 keys") {
		t.Errorf("Show of no ID in a store of two keys: %v", err)
	}
	sh, err := artifact.Show(ctx, h.Store, []string{"f"}, "")
	if err != nil || sh.ID != b.Addr || !sh.Published || sh.Cursor.Rev != uint64(b.Cursor.Rev) || !sh.Cursor.EvictionSeen || sh.Size == 0 {
		t.Errorf("Show of f's pointer: %+v, %v", sh, err)
	}
	if _, err := artifact.Show(ctx, h.Store, nil, a.Addr[:6]); err == nil || !strings.Contains(err.Error(), "ambiguous") {
		t.Errorf("Show of an ID under two keys: %v", err)
	}
	sh, err = artifact.Show(ctx, h.Store, []string{"f"}, a.Addr[:6])
	if err != nil || sh.ID != a.Addr || sh.Published || sh.Manifest.Bucket != Origin.Bucket || len(sh.Manifest.Files) == 0 {
		t.Fatalf("Show of f's older artifact: %+v, %v", sh, err)
	}
	if _, err := artifact.Show(ctx, h.Store, nil, "zz"); !errors.Is(err, artifact.ErrNoArtifact) {
		t.Errorf("Show of an unknown ID: %v", err)
	}
	out.Reset()
	if err := artifact.WriteShown(&out, "test", sh, time.Now()); err != nil {
		t.Fatal(err)
	}
	for _, want := range append([]string{"not published", "cursor: ", "plugin: ", "view schema 10", a.Addr + ".tar"}, sh.Manifest.Files[0].Path, sh.Manifest.Files[0].BLAKE3) {
		if !strings.Contains(out.String(), want) {
			t.Errorf("shown artifact lacks %q:\n%s", want, out.String())
		}
	}
}

// contractList: Keys lists the keys with a pointer, corrupt ones included;
// Payloads lists a key's payloads as they are stored, with their sizes, and
// not what an upload left; List says which payload is published and what
// its manifest holds, and that a corrupt pointer is corrupt.
func contractList(t *testing.T, h Harness) {
	ctx := t.Context()
	if keys, err := h.Keys(ctx); err != nil || len(keys) != 0 {
		t.Fatalf("an empty store's keys: %q, %v", keys, err)
	}
	if ls, err := artifact.List(ctx, h); err != nil || len(ls) != 0 {
		t.Fatalf("an empty store's listing: %+v, %v", ls, err)
	}
	st := OpenStore(t)
	a := ExportAt(t, st, 10, []string{"route."})
	b := ExportAt(t, st, 10, []string{"route."})
	for _, u := range []struct {
		key string
		a   Artifact
	}{{"f", a}, {"f", b}, {"g", a}} {
		if _, err := artifact.Upload(ctx, h, u.key, u.a.Dir); err != nil {
			t.Fatal(err)
		}
	}
	h.AbandonUpload(t, "f")
	h.PutPointer(t, "h", []byte("{not a manifest"))
	keys, err := h.Keys(ctx)
	if err != nil || !slices.Equal(keys, []string{"f", "g", "h"}) {
		t.Fatalf("keys %q, %v; want f g h", keys, err)
	}
	pays, err := h.Payloads(ctx, "f")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range pays {
		names = append(names, p.Name)
		if p.Size <= 0 || p.Modified.IsZero() || time.Since(p.Modified) > time.Hour {
			t.Errorf("payload %+v: want its size and a recent last write", p)
		}
	}
	var want []string // the stored names, without the abandoned upload's
	for _, n := range h.PayloadNames(t, "f") {
		if n == a.Addr+".tar" || n == b.Addr+".tar" {
			want = append(want, n)
		}
	}
	if !slices.Equal(names, want) || len(names) != 2 {
		t.Fatalf("payloads of f %q, stored %q (want the two uploads, not the abandoned one)", names, want)
	}
	ls, err := artifact.List(ctx, h)
	if err != nil || len(ls) != 3 {
		t.Fatalf("listing: %+v, %v", ls, err)
	}
	f, g, hh := ls[0], ls[1], ls[2]
	if p := f.Published; p == nil || p.Cursor != uint64(b.Cursor.Rev) || p.Payload != b.Addr+".tar" || p.Size == 0 || p.Missing ||
		!slices.Equal(p.Scope, []string{"route."}) || p.Files == 0 || p.DataBytes == 0 {
		t.Errorf("f's published artifact: %+v, want cursor %d in %s.tar", p, b.Cursor.Rev, b.Addr)
	}
	published := 0
	for _, p := range f.Payloads {
		if p.Published {
			published++
			if p.Name != b.Addr+".tar" {
				t.Errorf("payload %s marked published", p.Name)
			}
		}
	}
	if published != 1 || len(f.Payloads) != 2 {
		t.Errorf("f's payloads: %+v", f.Payloads)
	}
	if g.Key != "g" || g.Published == nil || g.Published.Cursor != uint64(a.Cursor.Rev) || len(g.Payloads) != 1 {
		t.Errorf("g: %+v", g)
	}
	if hh.Key != "h" || hh.Published != nil || hh.PointerError == "" || len(hh.Payloads) != 0 {
		t.Errorf("a corrupt pointer's listing: %+v", hh)
	}
	if ls, err := artifact.List(ctx, h, "nope"); err != nil || len(ls) != 1 || ls[0].Published != nil || len(ls[0].Payloads) != 0 {
		t.Errorf("an unknown key's listing: %+v, %v", ls, err)
	}
	if _, err := h.Payloads(ctx, "../f"); err == nil {
		t.Error("Payloads of a bad key")
	}
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
