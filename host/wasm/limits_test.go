package wasm

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// bigValue is the raw entry "big" that hostile.wasm's read command asks
// for: 1000 bytes, so a read of N keys answers N*1013 bytes.
const bigValue = 1000

// storeWithBig is a real store holding the raw entry "big".
func storeWithBig(t *testing.T) *fold.Store {
	t.Helper()
	st, _, err := fold.Open(t.TempDir(), fold.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	if err := st.Commit(fold.Commit{Raw: []fold.Update{{Key: "big", Op: fold.OpPut, Rev: 1, Value: make([]byte, bigValue)}},
		Cursor: protocol.Cursor{Rev: 1}}); err != nil {
		t.Fatal(err)
	}
	return st
}

// TestLimitsArePluginErrors: each bound on what a plugin can make the host
// hold, crossed by hostile.wasm, fails the batch with a KindLimit
// PluginError whose *LimitError names the limit and its configuration
// key, after the retries on fresh instances; the same command at the
// limit passes.
func TestLimitsArePluginErrors(t *testing.T) {
	const answer = bigValue + 13 // one raw hit in a read's answer
	for _, c := range []struct {
		name        string
		limits      Limits
		pages       uint32 // memory limit; 0: the default
		over, at    string // commands over and at the limit
		key         string
		size, limit int64
	}{
		{"view mutations", Limits{MaxViewMutations: 10}, 0, "keys 11", "keys 10", KeyMaxViewMutations, 11, 10},
		{"output bytes", Limits{MaxOutputBytes: 12 + 17*100}, 0, "keys 101", "keys 100", KeyMaxOutput, 12 + 17*101, 12 + 17*100},
		{"view key", Limits{MaxViewKeyBytes: 256}, 0, "key 257", "key 256", KeyMaxViewKey, 257, 256},
		{"view value", Limits{MaxViewValueBytes: 1000}, 0, "value 1001", "value 1000", KeyMaxViewValue, 1001, 1000},
		{"effects", Limits{MaxEffects: 5}, 0, "effects 6", "effects 5", KeyMaxEffects, 6, 5},
		{"one effect", Limits{MaxEffectBytes: 1000}, 0, "effect 1001", "effect 1000", KeyMaxEffect, 1001, 1000},
		{"one read", Limits{MaxReadBytes: 10 * answer}, 0, "read 11 1", "read 10 1", KeyMaxRead, 11 * answer, 10 * answer},
		{"reads of a call", Limits{MaxCallReadBytes: 40 * answer}, 0, "read 10 5", "read 10 4", KeyMaxCallRead, 50 * answer, 40 * answer},
		// 4 pages: 256 KiB, less than the default one-read bound (an
		// answer at it would not fit beside the plugin's own memory).
		{"plugin memory", Limits{}, 4, "read 259 1", "read 100 1", "plugin_memory_mb", 259 * answer, 4 << 16},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := newRuntime(t, Options{Limits: c.limits, MemoryLimitPages: c.pages, Retries: 1})
			m, err := r.LoadFile(context.Background(), testPlugin(t, "hostile"))
			if err != nil {
				t.Fatal(err)
			}
			p := r.NewPlugin(m)
			defer p.Close(context.Background())
			st := storeWithBig(t)
			apply := func(cmd string) error {
				_, err := p.Apply(context.Background(), []fold.Update{{Key: "k", Op: fold.OpPut, Rev: 2, Value: []byte(cmd)}}, st)
				return err
			}
			if err := apply(c.at); err != nil {
				t.Fatalf("%q, at the limit: %v", c.at, err)
			}
			err = apply(c.over)
			var pe *PluginError
			var le *LimitError
			if !errors.As(err, &pe) || pe.Kind != KindLimit || !errors.As(err, &le) {
				t.Fatalf("%q: %v, want a KindLimit PluginError", c.over, err)
			}
			if le.Key != c.key || le.Limit != c.limit || (le.Size != c.size && !strings.HasPrefix(c.over, "read")) {
				t.Errorf("%q: %+v, want key %s, size %d, limit %d", c.over, le, c.key, c.size, c.limit)
			}
			if !strings.Contains(err.Error(), c.key) || !strings.Contains(err.Error(), fmt.Sprint(c.limit)) {
				t.Errorf("the error does not name the limit and its key: %v", err)
			}
			if f := p.Status().Failures; f != 2 {
				t.Errorf("%d failed attempts, want 2 (the retry on a fresh instance)", f)
			}
		})
	}
}

// TestGuestErrorMessageIsCut: a plugin failing with a 1 MiB message fails
// with its own error (not retried), of which the host copied no more than
// MaxErrorBytes.
func TestGuestErrorMessageIsCut(t *testing.T) {
	r := newRuntime(t, Options{Limits: Limits{MaxErrorBytes: 100}})
	m, err := r.LoadFile(context.Background(), testPlugin(t, "hostile"))
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	_, err = p.Apply(context.Background(), []fold.Update{{Key: "k", Op: fold.OpPut, Rev: 1, Value: []byte("error 1048576")}}, emptyReader{})
	var pe *PluginError
	var ge *abi.GuestError
	if !errors.As(err, &pe) || pe.Kind != KindGuest || !errors.As(err, &ge) {
		t.Fatalf("%v, want the plugin's own error", err)
	}
	if len(ge.Message) != 100 || ge.Size != 1<<20 || len(err.Error()) > 400 || !strings.Contains(err.Error(), "a message of 1048576 bytes, cut") {
		t.Fatalf("message of %d bytes (size %d), error of %d bytes: %.300s", len(ge.Message), ge.Size, len(err.Error()), err)
	}
	if f := p.Status().Failures; f != 1 {
		t.Errorf("%d failed attempts, want 1 (a plugin's verdict is not retried)", f)
	}
}

// TestStderrTailIsBounded: the tail of a guest's stdout/stderr keeps its
// last 2 KiB, and a large write is never copied whole (the tail's buffer
// stays small).
func TestStderrTailIsBounded(t *testing.T) {
	var tl tail
	big := []byte(strings.Repeat("a", 1<<20) + "end")
	if n, err := tl.Write(big); n != len(big) || err != nil {
		t.Fatalf("Write: %d, %v", n, err)
	}
	tl.Write([]byte("and more"))
	if s := tl.String(); len(s) != tailMax || !strings.HasSuffix(s, "endand more") {
		t.Fatalf("tail of %d bytes ending %q", len(s), s[max(0, len(s)-20):])
	}
	if c := cap(tl.buf); c > 4*tailMax {
		t.Fatalf("the tail holds a buffer of %d bytes", c)
	}
	// Through a plugin: 1 MiB to stderr at once, then a trap.
	r := newRuntime(t, Options{Retries: NoRetries})
	m, err := r.LoadFile(context.Background(), testPlugin(t, "hostile"))
	if err != nil {
		t.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	_, err = p.Apply(context.Background(), []fold.Update{
		{Key: "a", Op: fold.OpPut, Rev: 1, Value: []byte("stderr 1048576")},
		{Key: "b", Op: fold.OpPut, Rev: 2, Value: []byte("trap")},
	}, emptyReader{})
	var pe *PluginError
	if !errors.As(err, &pe) || pe.Kind != KindTrap || len(pe.Stderr) != tailMax {
		t.Fatalf("%v, want a trap with a 2 KiB stderr tail", err)
	}
}
