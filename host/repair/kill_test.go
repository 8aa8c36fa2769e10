package repair_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// The kill test: a child process (this test binary) runs one repair of a
// real store against a real NATS server, and the parent SIGKILLs it at
// random moments, at least ten times per repair kind; after every kill the
// store must open with either its old cursor (the repair's data possibly
// half there, marked pending) or the final one (everything there), and the
// repair that finally runs to the end must leave the fold equal to the
// truth, views included.
const (
	killEnvMode    = "REPAIR_KILL_MODE" // "relist" or "restore"
	killEnvURL     = "REPAIR_KILL_URL"
	killEnvDir     = "REPAIR_KILL_DIR"
	killEnvScratch = "REPAIR_KILL_SCRATCH"
	killEnvArts    = "REPAIR_KILL_ARTS"
	// killEnvStep set: after each tick the child waits for a line on
	// stdin, so it cannot run ahead of a parent the machine starves.
	killEnvStep = "REPAIR_KILL_STEP"
	killBucket  = "killed"
	killKeys    = 3000
	killRuns    = 10
	// killRunsRaced: under the race detector, whose run watches the
	// parent's and the children's goroutines (the same code on every
	// kill) at a tenth of the speed, one kill per mode: the plain run
	// makes killRuns.
	killRunsRaced = 1
)

// ticking is the child's plugin: the mirror's view, and a line on stdout
// per call (one per repair batch), which the parent times its kill by;
// with killEnvStep set, each call then waits for the parent's go-ahead.
type ticking struct{ step *bufio.Reader }

func (t ticking) Apply(ctx context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	out, err := (&mirror{}).Apply(ctx, batch, r)
	fmt.Fprintln(os.Stdout, "applied", len(batch))
	if t.step != nil {
		if _, rerr := t.step.ReadString('\n'); rerr != nil {
			os.Exit(3) // the parent is gone
		}
	}
	return out, err
}

// killChild is the child's main: one repair, then exit 0.
func killChild() {
	fail := func(what string, err error) {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(2)
	}
	ctx := context.Background()
	st, _, err := fold.Open(os.Getenv(killEnvDir), fold.Options{Logger: quiet})
	if err != nil {
		fail("open", err)
	}
	nc, err := natskv.Connect(natskv.ConnOptions{URL: os.Getenv(killEnvURL)})
	if err != nil {
		fail("connect", err)
	}
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: killBucket, History: 1}, natskv.Options{})
	if err != nil {
		fail("bucket", err)
	}
	scratch := os.Getenv(killEnvScratch)
	var tick ticking
	if os.Getenv(killEnvStep) != "" {
		tick.step = bufio.NewReader(os.Stdin)
	}
	switch os.Getenv(killEnvMode) {
	case "relist":
		src, err := b.Feed(natskv.Scope{}, natskv.WatchOptions{}).Watch(ctx, protocol.Cursor{})
		if err != nil {
			fail("watch", err)
		}
		if _, err := repair.Relist(ctx, src, st, tick, repair.Config{Deletes: true, ScratchDir: scratch, MaxBatch: 7, Logger: quiet}); err != nil {
			fail("relist", err)
		}
		src.Stop()
	case "restore":
		arts, err := dirstore.New(os.Getenv(killEnvArts))
		if err != nil {
			fail("artifacts", err)
		}
		_ = os.RemoveAll(scratch)
		if _, err := artifact.Download(ctx, arts, killBucket, scratch, artifact.DownloadOptions{}); err != nil {
			fail("download", err)
		}
		art, _, err := fold.Open(scratch, fold.Options{Logger: quiet})
		if err != nil {
			fail("open artifact", err)
		}
		if _, err := repair.Restore(ctx, st, art, tick, repair.RestoreConfig{MaxBatch: 7, Listed: b.Listed, Logger: quiet}); err != nil {
			fail("restore", err)
		}
		art.Close()
	}
	if err := st.Close(); err != nil {
		fail("close", err)
	}
	nc.Close()
	os.Exit(0)
}

// TestKilledRepairsConverge: see the const block above. Mutation caught:
// the cursor moved with the first repair batch (a kill then leaves a
// cursor that no longer expires with keys still to delete, and the
// finishing run is never needed: the fold differs from the truth).
func TestKilledRepairsConverge(t *testing.T) {
	for _, mode := range []string{"relist", "restore"} {
		t.Run(mode, func(t *testing.T) { killedRepairConverges(t, mode) })
	}
}

func killedRepairConverges(t *testing.T, mode string) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed))
	b, nc := bucketConn(t, killBucket)
	url := nc.ConnectedUrl()
	dir := t.TempDir()
	data := filepath.Join(dir, "fold")
	st, _, err := fold.Open(data, fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	burst := func(value string, keys int) protocol.Revision {
		for i := range keys {
			if _, err := js.PublishAsync(fmt.Sprintf("$KV.%s.k%04d", killBucket, i), []byte(value)); err != nil {
				t.Fatal(err)
			}
			if i%500 == 499 {
				<-js.PublishAsyncComplete()
			}
		}
		<-js.PublishAsyncComplete()
		ret, _, err := b.Retention(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		return ret.Last
	}
	head := burst("first", killKeys)
	stop := follow(t, b, st, &mirror{}, relistHook(nil, st, &mirror{}, filepath.Join(dir, "s"), nil))
	waitCursor(t, st, head)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	// The change the repair must bring: every key rewritten but a tenth,
	// which is deleted (markers purged): the cursor expired.
	burst("second", killKeys)
	for i := 0; i < killKeys; i += 10 {
		del(t, b, fmt.Sprintf("k%04d", i))
	}
	purgeMarkers(t, b)
	want := truth(t, b)
	arts := filepath.Join(dir, "artifacts")
	if mode == "restore" {
		// Another node that folded on publishes the artifact.
		ref, _, err := fold.Open(filepath.Join(dir, "ref"), fold.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		feed := b.Feed(natskv.Scope{}, natskv.WatchOptions{})
		src, err := feed.Watch(t.Context(), protocol.Cursor{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := repair.Relist(t.Context(), src, ref, &mirror{}, repair.Config{Deletes: true, ScratchDir: filepath.Join(dir, "s"), Logger: quiet}); err != nil {
			t.Fatal(err)
		}
		src.Stop()
		if err := ref.SetOrigin(fold.NewOrigin(killBucket, nil, time.Unix(1, 0))); err != nil {
			t.Fatal(err)
		}
		stage, _, err := artifact.Export(ref, dir)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := dirstore.New(arts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := artifact.Upload(t.Context(), ds, killBucket, stage); err != nil {
			t.Fatal(err)
		}
		ref.Close()
	}
	before := st.Cursor()
	if err := st.Checkpoint(filepath.Join(dir, "expired")); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	child := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killEnvMode+"="+mode, killEnvURL+"="+url, killEnvDir+"="+data,
			killEnvScratch+"="+filepath.Join(dir, "scratch"), killEnvArts+"="+arts)
		cmd.Stderr = os.Stderr
		return cmd
	}
	// One full run counts the plugin calls (one per repair batch) a
	// repair makes here.
	full := child()
	calls, err := runTicking(full)
	if err != nil {
		t.Fatalf("a full repair: %v", err)
	}
	// Every run below starts from the expired store (restoreExpired).
	var final protocol.Cursor
	{
		s, cur, err := fold.Open(data, fold.Options{Logger: quiet})
		if err != nil {
			t.Fatal(err)
		}
		final = cur
		checkFold(t, s, want)
		s.Close()
	}
	if calls < 3 {
		t.Fatalf("a full %s run made %d plugin calls; the test needs batches to kill between", mode, calls)
	}
	t.Logf("a full %s run makes %d plugin calls; cursor %v -> %v", mode, calls, before, final)
	kills, early, finished := 0, 0, 0
	runs := killRuns
	if raceEnabled {
		runs = killRunsRaced
	}
	// A kill can land before the repair's first commit or after its
	// end; the tries allowed leave room for that even for one kill (raced:
	// three tries in a row missed on a busy machine).
	for try := 0; kills < runs; try++ {
		if try == 3*runs+10 {
			t.Fatalf("only %d of %d kills landed mid-repair in %d tries (%d before the first commit, %d after the end)", kills, runs, try, early, finished)
		}
		if err := restoreExpired(dir, data); err != nil {
			t.Fatal(err)
		}
		// The kill is timed by the child's progress, not the clock (a
		// loaded machine stretches a 100 ms repair anywhere): once the
		// child reports its n-th plugin call (n >= 2, so batch 1 was
		// committed), it is killed after a random pause of up to 2 ms,
		// which lands before, during or after the commit of batch n.
		n := 2 + rng.IntN(calls-1)
		err := killAfterTicks(child(), n, time.Duration(rng.Int64N(int64(2*time.Millisecond))))
		s, cur, oerr := fold.Open(data, fold.Options{Logger: quiet})
		if oerr != nil {
			t.Fatalf("the store after a kill: does not open: %v", oerr)
		}
		pending, _ := s.RepairPending()
		switch {
		case err == nil || cur == final: // finished before the kill
			finished++
			if pending {
				t.Errorf("a finished repair left the mark")
			}
			checkFold(t, s, want)
		case cur != before:
			t.Fatalf("after a kill: cursor %v, want %v (untouched) or %v (done)", cur, before, final)
		case pending:
			kills++ // killed with part of the repair committed
		default:
			early++ // killed before its first commit
		}
		s.Close()
		if cur == before {
			// The restart: a full run finishes what the kill left.
			if err := child().Run(); err != nil {
				t.Fatalf("the repair after a kill: %v", err)
			}
			s, _, err := fold.Open(data, fold.Options{Logger: quiet})
			if err != nil {
				t.Fatal(err)
			}
			if p, _ := s.RepairPending(); p {
				t.Error("the finishing repair left the mark")
			}
			checkFold(t, s, want)
			s.Close()
		}
	}
	t.Logf("%d kills mid-repair (part of it committed), %d before its first commit, %d runs finished first; every restart converged", kills, early, finished)
}

// runTicking runs cmd to its end and counts its ticks (lines on stdout).
func runTicking(cmd *exec.Cmd) (int, error) {
	out, err := cmd.StdoutPipe()
	if err != nil {
		return 0, err
	}
	if err := cmd.Start(); err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(out)
	for sc.Scan() {
		n++
	}
	return n, cmd.Wait()
}

// killAfterTicks starts cmd, SIGKILLs it pause after its n-th tick (or lets
// it end if it ticks fewer times) and returns what Wait returned.
func killAfterTicks(cmd *exec.Cmd, n int, pause time.Duration) error {
	// The child waits for a go-ahead after each tick: a starved parent
	// would otherwise read tick n long after the child had finished.
	cmd.Env = append(cmd.Env, killEnvStep+"=1")
	in, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	if err := cmd.Start(); err != nil {
		return err
	}
	sc := bufio.NewScanner(out)
	for seen := 0; sc.Scan(); {
		// After the kill the child's pipe may be closed: a failed
		// go-ahead is expected then.
		_, _ = io.WriteString(in, "go\n")
		if seen++; seen == n {
			time.Sleep(pause)
			_ = cmd.Process.Signal(syscall.SIGKILL)
		}
	}
	return cmd.Wait()
}

// restoreExpired puts the expired store (copied before the first run) back
// in data, so each kill starts from the same expired fold.
func restoreExpired(dir, data string) error {
	if err := os.RemoveAll(data); err != nil {
		return err
	}
	s, _, err := fold.Open(filepath.Join(dir, "expired"), fold.Options{Logger: quiet})
	if err != nil {
		return err
	}
	defer s.Close()
	return s.Checkpoint(data)
}
