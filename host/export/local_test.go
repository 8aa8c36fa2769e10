package export

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

type artifact struct {
	dir    string
	cursor protocol.Cursor
	data   dump
	addr   string
}

// exportAt commits n more updates to st and exports it.
func exportAt(t *testing.T, st *fold.Store, n int, scope []string) artifact {
	t.Helper()
	var cur protocol.Cursor
	if n > 0 {
		cur = commitN(t, st, n)
	} else {
		cur = st.Cursor()
	}
	dir, _, err := Export(st, t.TempDir(), scope)
	if err != nil {
		t.Fatal(err)
	}
	return artifact{dir: dir, cursor: cur, data: dumpStore(t, st), addr: Address(readManifest(t, dir))}
}

func newLocal(t *testing.T) *LocalDir {
	t.Helper()
	l, err := NewLocalDir(filepath.Join(t.TempDir(), "remote"))
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func pointerRank(t *testing.T, l *LocalDir, key string) protocol.Revision {
	t.Helper()
	b, err := l.Pointer(key)
	if err != nil {
		t.Fatal(err)
	}
	r, ok := pointerState(b).Rank()
	if !ok {
		t.Fatalf("pointer not parseable: %q", b)
	}
	return r
}

func TestLocalRoundTrip(t *testing.T) {
	st := openStore(t)
	a := exportAt(t, st, 1000, []string{"route.>"})
	l := newLocal(t)
	if _, err := l.Pointer("f"); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("empty pointer: %v", err)
	}
	if _, err := l.Download("f", filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("download without pointer: %v", err)
	}
	out, err := l.Upload("f", a.dir)
	if err != nil || out != Published {
		t.Fatalf("upload: %v %v", out, err)
	}
	if _, err := os.Stat(filepath.Join(l.root, "f.payloads", a.addr+".tar")); err != nil {
		t.Fatalf("payload layout: %v", err)
	}
	// Re-uploading the same artifact is idempotent.
	if out, err := l.Upload("f", a.dir); err != nil || out != Published {
		t.Fatalf("re-upload: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	m, err := l.Download("f", dest)
	if err != nil {
		t.Fatal(err)
	}
	if c, _ := m.DecodeCursor(); c != a.cursor {
		t.Fatalf("downloaded manifest cursor %v", c)
	}
	checkImported(t, dest, a.cursor, a.data)
	if _, err := l.Download("f", dest); !errors.Is(err, ErrDestNotEmpty) {
		t.Fatalf("download over a fold: %v", err)
	}
}

func TestLocalSupersededByNewer(t *testing.T) {
	st := openStore(t)
	older := exportAt(t, st, 10, nil)
	newer := exportAt(t, st, 10, nil)
	l := newLocal(t)
	if out, err := l.Upload("f", newer.dir); err != nil || out != Published {
		t.Fatalf("newer: %v %v", out, err)
	}
	if out, err := l.Upload("f", older.dir); err != nil || out != SupersededByNewer {
		t.Fatalf("older after newer: %v %v, want superseded", out, err)
	}
	if r := pointerRank(t, l, "f"); r != newer.cursor.Rev {
		t.Fatalf("pointer rank %d, want %d", r, newer.cursor.Rev)
	}
	// Same rank, different artifact (another scope): allowed.
	same := exportAt(t, st, 0, []string{"other"})
	if same.addr == newer.addr {
		t.Fatal("expected a different address")
	}
	if out, err := l.Upload("f", same.dir); err != nil || out != Published {
		t.Fatalf("same rank: %v %v", out, err)
	}
}

func TestLocalRace(t *testing.T) {
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
	for round := 0; round < 25; round++ {
		l := newLocal(t)
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
				if b, err := l.Pointer("f"); err == nil {
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
				out, err := l.Upload("f", a.dir)
				if err != nil {
					t.Errorf("round %d upload %d: %v", round, i, err)
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
		if r := pointerRank(t, l, "f"); r != top {
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

func TestLocalCrashBetweenPayloadAndSwap(t *testing.T) {
	st := openStore(t)
	a := exportAt(t, st, 50, nil)
	b := exportAt(t, st, 50, nil)
	l := newLocal(t)
	if _, err := l.Upload("f", a.dir); err != nil {
		t.Fatal(err)
	}
	mb, err := l.UploadPayload("f", b.dir) // crash before the swap
	if err != nil {
		t.Fatal(err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := l.Download("f", dest); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, a.cursor, a.data)
	// The orphan payload is above the pointer: never pruned.
	if del, err := l.Prune("f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune: %v %v", del, err)
	}
	// The retried round publishes it.
	if out, err := l.SwapPointer("f", mb); err != nil || out != Published {
		t.Fatalf("swap: %v %v", out, err)
	}
	dest2 := filepath.Join(t.TempDir(), "fold")
	if _, err := l.Download("f", dest2); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest2, b.cursor, b.data)
}

func TestLocalSwapNeedsPayload(t *testing.T) {
	st := openStore(t)
	a := exportAt(t, st, 5, nil)
	l := newLocal(t)
	if _, err := l.SwapPointer("f", readManifest(t, a.dir)); err == nil {
		t.Fatal("swap to a missing payload succeeded")
	}
	if _, err := l.Pointer("f"); !errors.Is(err, ErrNoPointer) {
		t.Fatalf("pointer: %v", err)
	}
}

func TestLocalCorruptPointerReplaced(t *testing.T) {
	st := openStore(t)
	low := exportAt(t, st, 5, nil)
	high := exportAt(t, st, 5, nil)
	l := newLocal(t)
	if _, err := l.Upload("f", high.dir); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.pointerPath("f"), []byte(`{"schema":1,"cursor":"garbage`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := l.Download("f", filepath.Join(t.TempDir(), "x")); !errors.Is(err, ErrArtifactInvalid) {
		t.Fatalf("download of corrupt pointer: %v", err)
	}
	// Corrupt prunes nothing.
	if del, err := l.Prune("f", 0, time.Now().Add(time.Hour)); err != nil || len(del) != 0 {
		t.Fatalf("prune under corrupt pointer: %v %v", del, err)
	}
	// Any rank replaces a corrupt pointer, even a lower one.
	if out, err := l.Upload("f", low.dir); err != nil || out != Published {
		t.Fatalf("upload over corrupt: %v %v", out, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := l.Download("f", dest); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, low.cursor, low.data)
}

func TestLocalPrune(t *testing.T) {
	st := openStore(t)
	old1 := exportAt(t, st, 5, nil)
	old2 := exportAt(t, st, 5, nil)
	young := exportAt(t, st, 5, nil)
	target := exportAt(t, st, 5, nil)
	sameRank := exportAt(t, st, 0, []string{"other"}) // at the pointer's rank, not its target
	above := exportAt(t, st, 5, nil)                  // uploaded, never swapped
	l := newLocal(t)
	for _, a := range []artifact{old1, old2, young, sameRank, above} {
		if _, err := l.UploadPayload("f", a.dir); err != nil {
			t.Fatal(err)
		}
	}
	// Before any pointer: nothing is prunable.
	now := time.Now().Add(24 * time.Hour)
	if del, err := l.Prune("f", time.Hour, now); err != nil || len(del) != 0 {
		t.Fatalf("prune without pointer: %v %v", del, err)
	}
	if out, err := l.Upload("f", target.dir); err != nil || out != Published {
		t.Fatalf("publish target: %v %v", out, err)
	}
	junk := filepath.Join(l.payloadDir("f"), "0123456789abcdef.tar")
	if err := os.WriteFile(junk, []byte("not a tar"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Everything is old except young.
	for _, name := range listDir(t, l.payloadDir("f")) {
		mt := now.Add(-2 * time.Hour)
		if name == young.addr+".tar" {
			mt = now.Add(-time.Minute)
		}
		if err := os.Chtimes(filepath.Join(l.payloadDir("f"), name), mt, mt); err != nil {
			t.Fatal(err)
		}
	}
	del, err := l.Prune("f", time.Hour, now)
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(del)
	want := []string{old1.addr + ".tar", old2.addr + ".tar"}
	slices.Sort(want)
	if !slices.Equal(del, want) {
		t.Fatalf("pruned %v, want %v", del, want)
	}
	left := listDir(t, l.payloadDir("f"))
	for _, keep := range []string{young.addr, target.addr, sameRank.addr, above.addr, "0123456789abcdef"} {
		if !slices.Contains(left, keep+".tar") {
			t.Fatalf("pruned %s; left %v", keep, left)
		}
	}
	// Once aged out, young goes too; the target never does, even with
	// zero grace.
	del, err = l.Prune("f", 0, now.Add(time.Hour))
	if err != nil || !slices.Equal(del, []string{young.addr + ".tar"}) {
		t.Fatalf("second prune: %v %v", del, err)
	}
	dest := filepath.Join(t.TempDir(), "fold")
	if _, err := l.Download("f", dest); err != nil {
		t.Fatal(err)
	}
	checkImported(t, dest, target.cursor, target.data)
}

func TestLocalRejectsBadKey(t *testing.T) {
	l := newLocal(t)
	for _, k := range []string{"", "a/b", "..", ".hidden", `a\b`} {
		if _, err := l.Pointer(k); err == nil || errors.Is(err, ErrNoPointer) {
			t.Errorf("key %q accepted: %v", k, err)
		}
	}
}
