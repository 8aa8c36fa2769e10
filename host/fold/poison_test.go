package fold

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// closedSource delivers updates, then ends (the loop flushes and returns).
type closedSource struct{ ch chan Event }

func newClosedSource(us []Update) *closedSource {
	s := &closedSource{ch: make(chan Event, len(us))}
	for _, u := range us {
		s.ch <- Event{Update: u}
	}
	close(s.ch)
	return s
}

func (s *closedSource) Events() <-chan Event { return s.ch }
func (s *closedSource) Stop()                {}
func (s *closedSource) Err() error           { return nil }

// countingPlugin fails a batch holding a value "poison"; otherwise it sets
// view "n/<key>" to one more than it reads there (so a part of a split batch
// must see the parts committed before it) and "v/<key>" to the value.
var countingPlugin = PluginFunc(func(_ context.Context, batch []Update, r Reader) (Output, error) {
	var out Output
	seen := map[string]int{}
	for _, u := range batch {
		if string(u.Value) == "poison" {
			return Output{}, fmt.Errorf("cannot fold %s", u.Key)
		}
		n, ok := seen[u.Key]
		if !ok {
			v, _, err := r.ViewGet([]byte("n/" + u.Key))
			if err != nil {
				return Output{}, err
			}
			n, _ = strconv.Atoi(string(v))
		}
		seen[u.Key] = n + 1
		out.Views = append(out.Views, ViewMutation{Key: []byte("n/" + u.Key), Op: ViewPut, Value: []byte(strconv.Itoa(n + 1))},
			ViewMutation{Key: []byte("v/" + u.Key), Op: ViewPut, Value: u.Value})
	}
	return out, nil
})

// TestPoisonIsSkipped: with LoopConfig.Poison, a batch the plugin fails is
// folded part by part; each update it fails alone is committed raw only
// with a dead letter, the rest of the batch is folded exactly once (the
// per-key counters read back what earlier parts committed), and the cursor
// covers everything. Without Poison the same batch stops the loop with
// nothing committed. Mutation caught: the poison update left out of the
// raw fold (its key keeps an older value, the cursor stops short).
func TestPoisonIsSkipped(t *testing.T) {
	var us []Update
	for i := 1; i <= 40; i++ {
		v := fmt.Sprintf("v%d", i)
		if i == 7 || i == 31 {
			v = "poison"
		}
		us = append(us, Update{Key: fmt.Sprintf("k%d", i%13), Rev: protocol.Revision(i), Op: OpPut, Value: []byte(v)})
	}
	run := func(poison bool) (*Store, []Applied, error) {
		st, _ := openTemp(t, Options{})
		var applied []Applied
		cfg := LoopConfig{MaxBatch: 100, Window: time.Hour, OnApplied: func(a Applied) { applied = append(applied, a) }}
		if poison {
			cfg.Poison = func(u Update, err error) DeadLetter {
				return DeadLetter{Key: u.Key, Rev: uint64(u.Rev), Op: u.Op.String(), Error: err.Error(), At: time.Unix(1, 0)}
			}
		}
		_, err := NewLoop(st, countingPlugin, cfg).Run(context.Background(), newClosedSource(us))
		return st, applied, err
	}

	st, _, err := run(false)
	if !errors.Is(err, ErrPlugin) || st.Cursor().Rev != 0 {
		t.Fatalf("stop policy: %v, cursor %v", err, st.Cursor())
	}

	st, applied, err := run(true)
	if err != nil {
		t.Fatal(err)
	}
	if st.Cursor().Rev != 40 {
		t.Fatalf("cursor %v, want 40", st.Cursor())
	}
	// What folding the updates one by one, skipping the poison, gives.
	want := map[string]string{}
	for _, u := range us {
		if string(u.Value) == "poison" {
			continue
		}
		n, _ := strconv.Atoi(want["n/"+u.Key])
		want["n/"+u.Key] = strconv.Itoa(n + 1)
		want["v/"+u.Key] = string(u.Value)
	}
	if got := collectViews(t, st, ""); !maps.Equal(got, want) {
		t.Errorf("views %v\nwant %v", got, want)
	}
	wantGet(t, st, "k5", 31, "poison") // raw = the bucket's truth (k5 was last written at 31, the poison)
	var dead []DeadLetter
	if err := st.DeadLetters(func(d DeadLetter) error { dead = append(dead, d); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(dead) != 2 || dead[0].Rev != 7 || dead[1].Rev != 31 || dead[0].Key != "k7" || dead[1].Error != "cannot fold k5" {
		t.Errorf("dead letters %+v", dead)
	}
	nDead := 0
	for _, a := range applied {
		nDead += a.DeadLettered
	}
	if nDead != 2 {
		t.Errorf("Applied.DeadLettered sums to %d, want 2", nDead)
	}
	if left, err := st.PruneDeadLetters(1, 0); err != nil || left != 1 {
		t.Errorf("prune to 1: %d %v", left, err)
	}
	if left, err := st.PruneDeadLetters(0, time.Hour); err != nil || left != 0 {
		t.Errorf("prune by age: %d %v", left, err)
	}
}

// slowFailingPlugin fails every call after d (a plugin past its deadline),
// or at once when ctx ends (the metered guest stops at its next check).
func slowFailingPlugin(calls *atomic.Int64, d time.Duration) Plugin {
	return PluginFunc(func(ctx context.Context, _ []Update, _ Reader) (Output, error) {
		calls.Add(1)
		select {
		case <-ctx.Done():
			return Output{}, ctx.Err()
		case <-time.After(d):
			return Output{}, errors.New("plugin call ran past its deadline")
		}
	})
}

// TestShutdownDoesNotIsolate: a shutdown with a batch pending that the
// plugin fails makes one call, commits nothing and records no dead letter
// (the resume re-delivers the batch), and is not a failure. Mutation caught
// (seen in review): the last flush bisected with an uncancellable context,
// ~2N-1 failing calls (each a deadline times retries in production), and
// dead-lettered everything because the process was stopping.
func TestShutdownDoesNotIsolate(t *testing.T) {
	st, _ := openTemp(t, Options{})
	var calls atomic.Int64
	l := NewLoop(st, slowFailingPlugin(&calls, 20*time.Millisecond), LoopConfig{Window: time.Hour, MaxBatch: 1000,
		Poison: func(u Update, err error) DeadLetter {
			return DeadLetter{Key: u.Key, Rev: uint64(u.Rev), Error: err.Error()}
		}})
	src := newChanSource()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { _, err := l.Run(ctx, src); done <- err }()
	src.send(t, 64)
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run at shutdown: %v", err)
	}
	dead := 0
	_ = st.DeadLetters(func(DeadLetter) error { dead++; return nil })
	if n := calls.Load(); n > 2 || dead != 0 || st.Cursor().Rev != 0 {
		t.Errorf("shutdown: %d plugin calls, %d dead letters, cursor %v; want at most 2 calls, none, 0", n, dead, st.Cursor())
	}
}

// TestPruneDeadLettersHoldsNone: pruning reads the dead letters one at a
// time (their time only), however many there are: over 2000 dead letters
// with 4 KiB errors (8 MiB), it allocates far less than they hold (it used
// to load them all, errors included).
func TestPruneDeadLettersHoldsNone(t *testing.T) {
	st, _, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const n, errBytes = 2000, 4 << 10
	msg := strings.Repeat("e", errBytes)
	for i := range n / 100 {
		var dls []DeadLetter
		for j := range 100 {
			rev := uint64(i*100 + j + 1)
			dls = append(dls, DeadLetter{Key: fmt.Sprint("k", rev), Rev: rev, Op: "put", Error: msg, At: time.Now().Add(-time.Duration(n-int(rev)) * time.Minute)})
		}
		if err := st.Commit(Commit{Cursor: protocol.Cursor{Rev: protocol.Revision((i + 1) * 100)}, DeadLetters: dls}); err != nil {
			t.Fatal(err)
		}
	}
	// The allocation is measured on a prune that reads every dead letter's
	// time and drops none, the least of three: TotalAlloc counts the whole
	// process, and pebble's background work on a loaded machine once added
	// 10 MB to a single measurement.
	least := uint64(math.MaxUint64)
	for range 3 {
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		left, err := st.PruneDeadLetters(0, 1<<20*time.Hour)
		runtime.ReadMemStats(&after)
		if err != nil || left != n {
			t.Fatalf("prune nothing: %d left, %v; want %d", left, err, n)
		}
		least = min(least, after.TotalAlloc-before.TotalAlloc)
	}
	if least > n*errBytes/4 {
		t.Fatalf("pruning %d dead letters of %d bytes allocated %d bytes", n, errBytes, least)
	}
	t.Logf("pruning %d dead letters of %d bytes allocated %d bytes", n, errBytes, least)
	// The age drops the oldest 999 (a minute apart, so a loaded machine's
	// seconds between the commits and the prune cannot move the boundary),
	// the count none more.
	left, err := st.PruneDeadLetters(1500, 1000*time.Minute+30*time.Second)
	if err != nil || left != 1001 {
		t.Fatalf("prune: %d left, %v; want 1001", left, err)
	}
	if left, err := st.PruneDeadLetters(10, 0); err != nil || left != 10 {
		t.Fatalf("prune to 10: %d left, %v", left, err)
	}
	var first uint64
	if err := st.DeadLetters(func(d DeadLetter) error {
		if first == 0 {
			first = d.Rev
		}
		return nil
	}); err != nil || first != n-9 {
		t.Fatalf("oldest kept: %d (%v), want %d", first, err, n-9)
	}
}

// TestDeadLetterKeysKeepTheirBytes: a dead letter's key survives the store
// and its JSON whatever its bytes (key_b64 beside key, key left out when
// not UTF-8), and one stored before key_b64 existed still reads. (The key
// "k\xff" came back as "k\uFFFD": a replay by it read another key.)
func TestDeadLetterKeysKeepTheirBytes(t *testing.T) {
	st, _, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	keys := []string{"k\xff", "route.a", "\xfe\xff", "é"}
	var dls []DeadLetter
	for i, k := range keys {
		dls = append(dls, DeadLetter{Key: k, Rev: uint64(i + 1), Op: "put", Error: "e", At: time.Unix(1, 0).UTC()})
	}
	if err := st.Commit(Commit{Cursor: protocol.Cursor{Rev: protocol.Revision(len(keys))}, DeadLetters: dls}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := st.DeadLetters(func(d DeadLetter) error { got = append(got, d.Key); return nil }); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%q", got) != fmt.Sprintf("%q", keys) {
		t.Fatalf("stored keys %q, read back %q", keys, got)
	}
	b, err := json.Marshal(dls[0])
	if err != nil || !strings.Contains(string(b), `"key_b64":"a/8="`) || strings.Contains(string(b), `"key":`) {
		t.Fatalf("a non-UTF-8 key's JSON: %s (%v)", b, err)
	}
	if b, _ := json.Marshal(dls[1]); !strings.Contains(string(b), `"key":"route.a","key_b64":"cm91dGUuYQ=="`) {
		t.Fatalf("a text key's JSON: %s", b)
	}
	var old DeadLetter
	if err := json.Unmarshal([]byte(`{"key":"route.b","revision":9,"op":"put","error":"x","plugin":"p","at":"2026-01-01T00:00:00Z"}`), &old); err != nil || old.Key != "route.b" || old.Rev != 9 {
		t.Fatalf("a dead letter stored before key_b64: %+v, %v", old, err)
	}
}
