package fold_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// The fold crash test: a child process runs Follow (a real NATS watch, the
// applied loop, a pebble store under NoSync) while the parent writes to the
// bucket continuously, and the parent SIGKILLs the child at random moments.
// The child's plugin appends the highest revision of every batch it applied
// to a log before returning, so the parent can check the one property a
// crash can break: the persisted cursor never exceeds what the plugin applied.
// After each kill the parent catches the fold up (a restart: Follow from the
// store's cursor, in process) and checks it equals every write minus every
// real delete, raw fold and plugin view alike.
const (
	foldCrashEnvURL   = "FOLD_CRASH_FOLD_URL"
	foldCrashEnvDir   = "FOLD_CRASH_FOLD_DIR"
	foldCrashEnvLog   = "FOLD_CRASH_FOLD_APPLIED"
	foldCrashEnvSync  = "FOLD_CRASH_FOLD_SYNC"
	foldCrashBucket   = "crashfold"
	foldCrashKeySpace = 2048
	// Enough history that no message is superseded away while a killed
	// child lags: a gap of only superseded messages reads as an expired
	// cursor (the resume check cannot tell it from eviction), which is the
	// repair's business, not this test's.
	foldCrashHistory = 64
)

// mirrorPlugin keeps a view "m.<key>" equal to each key's value, and, when
// applied is set, logs each batch's highest revision there before returning.
func mirrorPlugin(applied *os.File) fold.Plugin {
	return fold.PluginFunc(func(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
		var out fold.Output
		var high protocol.Revision
		for _, u := range batch {
			high = max(high, u.Rev)
			m := fold.ViewMutation{Key: []byte("m." + u.Key), Op: fold.ViewDelete}
			if u.Op == fold.OpPut {
				m.Op, m.Value = fold.ViewPut, u.Value
			}
			out.Views = append(out.Views, m)
		}
		if applied != nil {
			if _, err := fmt.Fprintf(applied, "%d\n", high); err != nil {
				return fold.Output{}, err
			}
		}
		return out, nil
	})
}

func foldCrashChild() {
	dir, url, logPath := os.Getenv(foldCrashEnvDir), os.Getenv(foldCrashEnvURL), os.Getenv(foldCrashEnvLog)
	fail := func(what string, err error) {
		fmt.Fprintln(os.Stderr, what+":", err)
		os.Exit(2)
	}
	applied, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		fail("applied log", err)
	}
	// NoSync loses the last commits on a kill (pebble writes its WAL
	// asynchronously), so half the rounds run Sync to keep more of them.
	st, _, err := fold.Open(dir, fold.Options{MemTableSize: 1 << 20, Sync: os.Getenv(foldCrashEnvSync) != ""})
	if err != nil {
		fail("open", err)
	}
	nc, err := natskv.Connect(natskv.ConnOptions{URL: url})
	if err != nil {
		fail("connect", err)
	}
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: foldCrashBucket, History: foldCrashHistory}, natskv.Options{})
	if err != nil {
		fail("bucket", err)
	}
	fmt.Println("ready")
	// Small batches: many commits for the kill to land between.
	_, err = fold.Follow(context.Background(), b.Feed(natskv.Scope{}, natskv.WatchOptions{}), st, mirrorPlugin(applied), fold.FollowConfig{Loop: fold.LoopConfig{MaxBatch: 16, Window: time.Millisecond}})
	fail("follow ended", err)
}

// maxApplied reads the applied log; a torn last line (the kill landed in the
// write) is ignored: that batch's Apply had not returned.
func maxApplied(t *testing.T, path string) protocol.Revision {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var high protocol.Revision
	for _, line := range strings.SplitAfter(string(data), "\n") {
		if !strings.HasSuffix(line, "\n") {
			break
		}
		v, err := strconv.ParseUint(strings.TrimSpace(line), 10, 64)
		if err != nil {
			t.Fatalf("applied log line %q: %v", line, err)
		}
		high = max(high, protocol.Revision(v))
	}
	return high
}

// crashWriter writes to the bucket until paused, keeping the truth.
type crashWriter struct {
	b    *natskv.Bucket
	tr   *truth
	rng  *rand.Rand
	mu   sync.Mutex // held while paused
	n    int
	stop chan struct{}
	done chan struct{}
}

func (w *crashWriter) run(t *testing.T) {
	defer close(w.done)
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		w.mu.Lock()
		key := fmt.Sprintf("k%02d", w.rng.IntN(foldCrashKeySpace))
		switch r := w.rng.IntN(10); {
		case r == 0:
			w.tr.del(t, w.b, key, false)
		case r == 1:
			w.tr.del(t, w.b, key, true)
		default:
			w.tr.put(t, w.b, key, fmt.Sprintf("v%d", w.n))
		}
		w.n++
		w.mu.Unlock()
	}
}

func TestFoldCrashSafety(t *testing.T) {
	if os.Getenv(foldCrashEnvDir) != "" {
		foldCrashChild()
		return
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FOLD_CRASH_SEED"); v != "" {
		seed, _ = strconv.ParseUint(v, 10, 64)
	}
	t.Logf("seed %d (FOLD_CRASH_SEED=%d to replay)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 1))

	env := startNATSWith(t, natskv.BucketConfig{Name: foldCrashBucket, History: foldCrashHistory})
	tr := newTruth()
	dir := filepath.Join(t.TempDir(), "fold")
	logPath := filepath.Join(t.TempDir(), "applied")
	w := &crashWriter{b: env.bucket, tr: tr, rng: rand.New(rand.NewPCG(seed, 2)), stop: make(chan struct{}), done: make(chan struct{})}
	go w.run(t)
	defer func() { close(w.stop); <-w.done }()

	const kills = 20
	var advanced int
	var from protocol.Revision
	for round := 1; round <= kills; round++ {
		delay := time.Duration(20+rng.IntN(250)) * time.Millisecond
		killChildAfter(t, env.srv.ClientURL(), dir, logPath, delay, round%2 == 0)

		// The property a kill can break: cursor <= what the plugin applied.
		st, cur, err := fold.Open(dir, fold.Options{})
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		if applied := maxApplied(t, logPath); cur.Rev > applied {
			t.Fatalf("round %d: persisted cursor %v exceeds the highest revision the plugin applied (%d)", round, cur, applied)
		}
		// Restart and catch up with the writer paused, then compare.
		if cur.Rev > from {
			advanced++
		}
		t.Logf("round %d: child resumed at %d, killed after %v, recovered at %d (sync %v)", round, from, delay, cur.Rev, round%2 == 0)
		catchUpAndCompare(t, round, env.bucket, st, w, tr, logPath)
		from = st.Cursor().Rev
		st.Close()
	}
	w.mu.Lock()
	writes := w.n
	w.mu.Unlock()
	t.Logf("%d writes, %d kills, %d of them after the child committed something", writes, kills, advanced)
	if advanced < kills/4 {
		t.Fatalf("the child committed in only %d of %d rounds: the kills did not land mid-fold", advanced, kills)
	}
}

func catchUpAndCompare(t *testing.T, round int, b *natskv.Bucket, st *fold.Store, w *crashWriter, tr *truth, logPath string) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	// The catch-up applies too: it logs what it applied like the child, so
	// the next round's bound covers the cursor it leaves.
	applied, err := os.OpenFile(logPath, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer applied.Close()
	// Wait for the stream head, not the writer's last put: deletes and
	// purges after it have revisions too.
	ret, _, err := b.Retention(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	f := follow(t, b, st, natskv.Scope{}, mirrorPlugin(applied))
	waitCursor(t, st, f, ret.Last)
	if _, err := f.stop(); err != nil {
		t.Fatalf("round %d: catch-up: %v", round, err)
	}
	want := tr.inScope(natskv.Scope{})
	if d := diffMaps(rawFold(t, st), want); d != "[]" {
		t.Fatalf("round %d: raw fold != truth after restart and catch-up: %s", round, d)
	}
	views := map[string]string{}
	if err := st.ViewRange([]byte("m."), func(k, v []byte) error {
		views[strings.TrimPrefix(string(k), "m.")] = string(v)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if d := diffMaps(views, want); d != "[]" {
		t.Fatalf("round %d: view != truth after restart and catch-up: %s", round, d)
	}
}

// killChildAfter runs the fold child on dir and SIGKILLs it delay after it
// is ready.
func killChildAfter(t *testing.T, url, dir, logPath string, delay time.Duration, sync bool) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestFoldCrashSafety$")
	cmd.Env = append(os.Environ(), foldCrashEnvDir+"="+dir, foldCrashEnvURL+"="+url, foldCrashEnvLog+"="+logPath)
	if sync {
		cmd.Env = append(cmd.Env, foldCrashEnvSync+"=1")
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ok := false
		for sc.Scan() {
			if sc.Text() == "ready" && !ok {
				ok = true
				ready <- true
			}
		}
		if !ok {
			ready <- false
		}
	}()
	select {
	case ok := <-ready:
		if !ok {
			_ = cmd.Wait()
			t.Fatalf("child did not start; stderr: %s", stderr.String())
		}
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child not ready within 30s; stderr: %s", stderr.String())
	}
	time.Sleep(delay) // the random moment of the kill
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() {
		t.Fatalf("child exited on its own before the kill: %v; stderr: %s", cmd.ProcessState, stderr.String())
	}
}
