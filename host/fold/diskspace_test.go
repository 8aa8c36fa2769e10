package fold

import (
	"errors"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// shortDiskFSFake is the OS's filesystem reporting a settable free space
// (a fake, for tests): what the store's space check reads.
type shortDiskFSFake struct {
	vfs.FS
	avail atomic.Uint64
}

func (f *shortDiskFSFake) GetDiskUsage(string) (vfs.DiskUsage, error) {
	a := f.avail.Load()
	return vfs.DiskUsage{AvailBytes: a, TotalBytes: 1 << 41, UsedBytes: 1<<41 - a}, nil
}

func (f *shortDiskFSFake) Unwrap() vfs.FS { return f.FS }

// TestEveryWriteChecksSpace: with less free space than a write plus the
// reserve, every write of the store is refused with a *DiskFullError
// (naming the store, the bytes needed and free) and changes nothing: the
// commit (raw, views, dead letters), a shadow's begin and write, the
// dead-letter prune, the origin record and a checkpoint. With the space
// back, the same writes succeed. Mutation caught: any of these writing
// through pebble without the check (each case is its own subtest).
func TestEveryWriteChecksSpace(t *testing.T) {
	fake := &shortDiskFSFake{FS: vfs.Default}
	fake.avail.Store(1 << 40)
	s, dir := openTemp(t, Options{FS: fake, DiskReserve: 1 << 20})
	dead := DeadLetter{Key: "d", Rev: 1, Op: "put", Error: "boom", At: time.Now().Add(-time.Hour)}
	mustCommit(t, s, Commit{Raw: []Update{put("a", 1, "1")}, Views: []ViewMutation{vput("v", "1")}, Cursor: cursorAt(1), DeadLetters: []DeadLetter{dead}})
	state := func() string {
		var o []string
		for _, r := range collectRaw(t, s, "") {
			o = append(o, fmt.Sprint(r))
		}
		o = append(o, fmt.Sprint(collectViews(t, s, "")), fmt.Sprint(s.Cursor()))
		if err := s.DeadLetters(func(d DeadLetter) error { o = append(o, d.Key); return nil }); err != nil {
			t.Fatal(err)
		}
		org, ok, err := s.Origin()
		if err != nil {
			t.Fatal(err)
		}
		return strings.Join(append(o, fmt.Sprint(org, ok)), "|")
	}
	writes := []struct {
		name  string
		write func() error
	}{
		{"commit", func() error {
			return s.Commit(Commit{Raw: []Update{put("b", 2, "2")}, Views: []ViewMutation{vput("w", "2")}, Cursor: cursorAt(2)})
		}},
		{"dead-letter-commit", func() error {
			return s.Commit(Commit{Cursor: s.Cursor(), DeadLetters: []DeadLetter{{Key: "e", Rev: 2, Op: "put"}}})
		}},
		{"shadow", func() error {
			sh, err := s.BeginShadow()
			if err != nil {
				return err
			}
			return sh.Write([]ViewMutation{vput("x", "1")})
		}},
		{"prune-dead-letters", func() error { _, err := s.PruneDeadLetters(0, time.Minute); return err }},
		{"origin", func() error { return s.SetOrigin(NewOrigin("b", nil, time.Unix(1, 0))) }},
		{"checkpoint", func() error { return s.Checkpoint(filepath.Join(t.TempDir(), "cp")) }},
	}
	for _, w := range writes {
		t.Run(w.name, func(t *testing.T) {
			before := state()
			fake.avail.Store(64 << 10)
			err := w.write()
			var full *DiskFullError
			if !errors.As(err, &full) || !errors.Is(err, ErrDiskFull) {
				t.Fatalf("a write on a full disk: %v, want a *DiskFullError", err)
			}
			if full.Dir != dir || full.Free != 64<<10 || full.Need < 1<<20 || !strings.Contains(err.Error(), dir) {
				t.Errorf("the refusal %+v (%q) does not name the store, its free space and the need", full, err)
			}
			if after := state(); !reflect.DeepEqual(after, before) {
				t.Errorf("a refused write changed the store:\n%s\nwant\n%s", after, before)
			}
			fake.avail.Store(1 << 40)
			if err := w.write(); err != nil {
				t.Errorf("the write with space back: %v", err)
			}
		})
	}
	if err := s.Broken(); err != nil {
		t.Errorf("a store that only refused writes is broken: %v", err)
	}
}
