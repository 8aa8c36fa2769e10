package fold

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// The crash test's workload: batch i (1-based) is a pure function of i, so a
// child restarted after a lost tail re-commits identical batches, and the
// parent can check a recovered store against the batch index its cursor
// names, without keeping a model in memory.
//
// Batch i, at revisions i*revsPerBatch+0 .. +n-1, cursor at the last:
//   - puts "b.<i>.<j>" (j < n) with value crashValue(i, j);
//   - puts "hot.<i%8>" = "h<i>" (overwrites a hot key);
//   - deletes "b.<i-4>.0";
//   - view puts "view.<i>" = "w<i>", view deletes "view.<i-2>";
//   - plugin identity "plugin-<i>"; the eviction memo from batch 50 on.
const (
	crashEnvDir   = "FOLD_CRASH_CHILD_DIR"
	revsPerBatch  = 1000
	crashHotKeys  = 8
	crashDelLag   = 4
	crashViewKeep = 2
)

func crashBatchLen(i uint64) int { return 1 + int(i*7919%97) }

func crashValue(i uint64, j int) []byte {
	n := 16 + int((i+uint64(j))%700)
	v := bytes.Repeat([]byte{byte('a' + (i+uint64(j))%26)}, n)
	copy(v, fmt.Sprintf("%d.%d:", i, j))
	return v
}

func crashCursor(i uint64) protocol.Cursor {
	if i == 0 {
		return protocol.Cursor{}
	}
	return protocol.Cursor{
		Rev:          protocol.Revision(i*revsPerBatch + uint64(crashBatchLen(i)) - 1),
		EvictionSeen: i >= 50,
		MsgUnixNano:  int64(i),
	}
}

func crashBatch(i uint64) Commit {
	n := crashBatchLen(i)
	c := Commit{Cursor: crashCursor(i), PluginIdentity: fmt.Appendf(nil, "plugin-%d", i)}
	for j := 0; j < n; j++ {
		c.Raw = append(c.Raw, Update{Key: fmt.Sprintf("b.%d.%d", i, j), Op: OpPut,
			Rev: protocol.Revision(i*revsPerBatch + uint64(j)), Value: crashValue(i, j)})
	}
	c.Raw = append(c.Raw, put(fmt.Sprintf("hot.%d", i%crashHotKeys), protocol.Revision(i*revsPerBatch), fmt.Sprintf("h%d", i)))
	if i > crashDelLag {
		c.Raw = append(c.Raw, del(fmt.Sprintf("b.%d.0", i-crashDelLag)))
	}
	c.Views = append(c.Views, vput(fmt.Sprintf("view.%d", i), fmt.Sprintf("w%d", i)))
	if i > crashViewKeep {
		c.Views = append(c.Views, vdel(fmt.Sprintf("view.%d", i-crashViewKeep)))
	}
	return c
}

// crashChild commits batches after the recovered cursor until it is killed,
// reporting each committed batch index on stdout.
func crashChild(dir string) {
	// A small memtable so that flushes and WAL rotations happen while the
	// parent's kill can land in them.
	s, cur, err := Open(dir, Options{MemTableSize: 1 << 20})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child open:", err)
		os.Exit(2)
	}
	w := bufio.NewWriter(os.Stdout)
	fmt.Fprintf(w, "ready %d\n", uint64(cur.Rev)/revsPerBatch)
	w.Flush()
	for i := uint64(cur.Rev)/revsPerBatch + 1; ; i++ {
		if err := s.Commit(crashBatch(i)); err != nil {
			fmt.Fprintln(os.Stderr, "child commit:", err)
			os.Exit(3)
		}
		fmt.Fprintf(w, "committed %d\n", i)
		w.Flush()
	}
}

// TestCrashConsistency SIGKILLs a child committing NoSync batches at random
// moments and checks that the reopened store is exactly the prefix of batches
// its cursor names: nothing missing below it, nothing from after it.
// FOLD_CRASH_SEED replays a run.
func TestCrashConsistency(t *testing.T) {
	if dir := os.Getenv(crashEnvDir); dir != "" {
		crashChild(dir)
		return
	}
	seed := uint64(time.Now().UnixNano())
	if v := os.Getenv("FOLD_CRASH_SEED"); v != "" {
		var err error
		if seed, err = strconv.ParseUint(v, 10, 64); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("seed %d (FOLD_CRASH_SEED=%d to replay)", seed, seed)
	rng := rand.New(rand.NewPCG(seed, 0))

	const rounds, killsPerDir = 12, 3
	var dir string
	for round := 0; round < rounds; round++ {
		if round%killsPerDir == 0 { // a few kills on the same store: recover, continue, crash again
			dir = filepath.Join(t.TempDir(), "fold")
		}
		delay := time.Duration(rng.IntN(300)) * time.Millisecond
		started, reported := runAndKill(t, dir, delay)
		recovered := verifyCrashStore(t, dir)
		t.Logf("round %d: killed after %v: child resumed at batch %d, reported %d committed, recovered %d",
			round, delay, started, reported, recovered)
		if recovered < started {
			t.Fatalf("round %d: recovered batch %d is below the %d the child started from", round, recovered, started)
		}
	}
}

// runAndKill starts the child on dir, kills it delay after it is ready, and
// returns the batch it started after and the last batch it reported.
func runAndKill(t *testing.T, dir string, delay time.Duration) (started, reported uint64) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashConsistency$")
	cmd.Env = append(os.Environ(), crashEnvDir+"="+dir)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := bufio.NewScanner(out)
	if !lines.Scan() || !strings.HasPrefix(lines.Text(), "ready ") {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		t.Fatalf("child did not start: %q, stderr: %s", lines.Text(), stderr.String())
	}
	started, _ = strconv.ParseUint(strings.TrimPrefix(lines.Text(), "ready "), 10, 64)
	done := make(chan uint64)
	go func() {
		var last uint64
		for lines.Scan() {
			if v, ok := strings.CutPrefix(lines.Text(), "committed "); ok {
				last, _ = strconv.ParseUint(v, 10, 64)
			}
		}
		_, _ = io.Copy(io.Discard, out)
		done <- last
	}()
	time.Sleep(delay)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	reported = <-done
	err = cmd.Wait()
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child did not die by SIGKILL: %v, stderr: %s", err, stderr.String())
	}
	return started, reported
}

// verifyCrashStore opens dir and checks it holds exactly batches 1..I, where
// I is the batch its cursor names. It returns I.
func verifyCrashStore(t testing.TB, dir string) uint64 {
	t.Helper()
	s, cur, err := Open(dir, Options{})
	if err != nil {
		t.Fatalf("reopen after kill: %v", err)
	}
	defer s.Close()
	last := uint64(cur.Rev) / revsPerBatch
	if cur != crashCursor(last) {
		t.Fatalf("recovered cursor %+v is no batch's cursor (batch %d has %+v)", cur, last, crashCursor(last))
	}

	// Raw: stream the whole fold, check each entry, count the b.* entries.
	var count, want int
	err = s.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		key := string(k)
		if h, ok := strings.CutPrefix(key, "hot."); ok {
			slot, _ := strconv.ParseUint(h, 10, 64)
			// The newest batch <= last that wrote this slot.
			i := last - (last+crashHotKeys-slot)%crashHotKeys
			if i == 0 || i > last || string(v) != fmt.Sprintf("h%d", i) || rev != protocol.Revision(i*revsPerBatch) {
				return fmt.Errorf("hot key %s = %q@%d at batch %d", key, v, rev, last)
			}
			return nil
		}
		var i uint64
		var j int
		if _, err := fmt.Sscanf(key, "b.%d.%d", &i, &j); err != nil {
			return fmt.Errorf("unexpected key %q", key)
		}
		switch {
		case i > last:
			return fmt.Errorf("key %q from batch %d present at cursor batch %d", key, i, last)
		case j == 0 && i+crashDelLag <= last:
			return fmt.Errorf("key %q deleted by batch %d still present at batch %d", key, i+crashDelLag, last)
		case j >= crashBatchLen(i):
			return fmt.Errorf("key %q beyond batch %d's length", key, i)
		case !bytes.Equal(v, crashValue(i, j)) || rev != protocol.Revision(i*revsPerBatch+uint64(j)):
			return fmt.Errorf("key %q = %q@%d, want %q@%d", key, v, rev, crashValue(i, j), i*revsPerBatch+uint64(j))
		}
		count++
		return nil
	})
	if err != nil {
		t.Fatalf("recovered store (cursor %v): %v", cur, err)
	}
	for i := uint64(1); i <= last; i++ {
		want += crashBatchLen(i)
		if i+crashDelLag <= last {
			want--
		}
	}
	if count != want {
		t.Fatalf("recovered store at batch %d holds %d batch keys, want %d (some committed key is missing)", last, count, want)
	}
	hot := 0
	_ = s.RawKeys("hot.", func([]byte) error { hot++; return nil })
	if hot != int(min(last, crashHotKeys)) {
		t.Fatalf("%d hot keys at batch %d", hot, last)
	}

	// Views and metadata come from the same batch.
	views := collectViews(t, s, "")
	wantViews := map[string]string{}
	for i := last; i > 0 && i+crashViewKeep > last; i-- {
		wantViews[fmt.Sprintf("view.%d", i)] = fmt.Sprintf("w%d", i)
	}
	if fmt.Sprint(views) != fmt.Sprint(wantViews) {
		t.Fatalf("views at batch %d = %v, want %v", last, views, wantViews)
	}
	id, ok, err := s.PluginIdentity()
	if err != nil || ok != (last > 0) || (ok && string(id) != fmt.Sprintf("plugin-%d", last)) {
		t.Fatalf("plugin identity at batch %d = %q %v %v", last, id, ok, err)
	}
	return last
}

func TestCrashWorkloadSelfCheck(t *testing.T) {
	// The verifier must reject a store that is not a batch prefix: commit
	// batches 1..10 but leave out batch 7's data while keeping the cursor.
	s, dir := openTemp(t, Options{})
	for i := uint64(1); i <= 10; i++ {
		c := crashBatch(i)
		if i == 7 {
			c.Raw = c.Raw[1:]
		}
		mustCommit(t, s, c)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	ft := &fakeT{TB: t}
	func() {
		defer func() { recover() }()
		verifyCrashStore(ft, dir)
	}()
	if !ft.failed {
		t.Fatal("verifier accepted a store missing a committed key")
	}
}

// fakeT records Fatalf instead of failing the real test.
type fakeT struct {
	testing.TB
	failed bool
}

func (f *fakeT) Fatalf(format string, args ...any) {
	f.failed = true
	f.TB.Logf("verifier (expected failure): "+format, args...)
	panic("fatal")
}
func (f *fakeT) Helper() {}
