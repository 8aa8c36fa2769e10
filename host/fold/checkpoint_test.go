package fold

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/foldhost/foldhost/protocol"
)

// A checkpoint reopens as a store with the same cursor and data, including
// NoSync commits still only in the WAL and data flushed to sstables.
func TestCheckpointReopens(t *testing.T) {
	s, _ := openTemp(t, Options{MemTableSize: 1 << 20})
	var rev protocol.Revision
	for b := 0; b < 20; b++ { // ~2 MiB: some of it flushed to sstables
		c := Commit{Views: []ViewMutation{vput(fmt.Sprintf("view.%02d", b), "w")}}
		for i := 0; i < 100; i++ {
			rev++
			c.Raw = append(c.Raw, Update{Key: fmt.Sprintf("k.%03d", i), Op: OpPut, Rev: rev, Value: make([]byte, 1000)})
		}
		c.Raw = append(c.Raw, del(fmt.Sprintf("k.%03d", b)))
		c.Cursor = protocol.Cursor{Rev: rev, EvictionSeen: b > 10, MsgUnixNano: int64(b + 1)}
		c.PluginIdentity = []byte(fmt.Sprintf("plugin-%d", b))
		mustCommit(t, s, c)
	}
	ck := filepath.Join(t.TempDir(), "checkpoint")
	if err := s.Checkpoint(ck); err != nil {
		t.Fatal(err)
	}
	if err := s.Checkpoint(ck); err == nil {
		t.Fatal("Checkpoint into an existing directory succeeded")
	}
	wantRaw := collectRaw(t, s, "")
	wantViews := collectViews(t, s, "")
	wantCur := s.Cursor()

	// Later commits do not reach the checkpoint.
	mustCommit(t, s, Commit{Raw: []Update{put("after", rev+1, "x")}, Cursor: protocol.Cursor{Rev: rev + 1, EvictionSeen: true}})

	c, cur, err := Open(ck, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if cur != wantCur || cur.Rev != rev {
		t.Fatalf("checkpoint cursor %+v, want %+v", cur, wantCur)
	}
	if got := collectRaw(t, c, ""); !slices.Equal(got, wantRaw) || len(got) != 99 {
		t.Fatalf("checkpoint raw: %d entries, want %d", len(got), len(wantRaw))
	}
	if got := collectViews(t, c, ""); len(got) != len(wantViews) || len(got) != 20 {
		t.Fatalf("checkpoint views: %v", got)
	}
	wantMissing(t, c, "after")
	if id, _, _ := c.PluginIdentity(); string(id) != "plugin-19" {
		t.Fatalf("checkpoint plugin identity %q", id)
	}
	// The checkpoint is a store of its own: it accepts commits.
	mustCommit(t, c, Commit{Cursor: protocol.Cursor{Rev: rev + 5, EvictionSeen: true}})
}

func TestCheckpointTargetMustNotExist(t *testing.T) {
	s, _ := openTemp(t, Options{})
	dir := t.TempDir() // exists
	if err := s.Checkpoint(dir); err == nil || !errors.Is(err, os.ErrExist) {
		t.Fatalf("Checkpoint into existing dir: %v, want os.ErrExist", err)
	}
}

func TestStats(t *testing.T) {
	s, _ := openTemp(t, Options{MemTableSize: 1 << 20})
	const n = 20000
	for base := 0; base < n; base += 1000 {
		c := Commit{Cursor: cursorAt(protocol.Revision(base + 1000))}
		for i := base; i < base+1000; i++ {
			c.Raw = append(c.Raw, Update{Key: fmt.Sprintf("k.%06d", i), Op: OpPut, Rev: protocol.Revision(i + 1), Value: make([]byte, 200)})
			if i%10 == 0 {
				c.Views = append(c.Views, vput(fmt.Sprintf("v.%06d", i), "view"))
			}
		}
		mustCommit(t, s, c)
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	st, err := s.Stats()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", st)
	if st.Cursor != cursorAt(n) || st.DiskBytes == 0 || st.RawBytes == 0 || st.ViewBytes == 0 {
		t.Fatalf("stats %+v", st)
	}
	if st.RawBytes < st.ViewBytes || st.DiskBytes < st.RawBytes {
		t.Fatalf("stats sizes inconsistent: %+v", st)
	}
	// Table statistics are collected asynchronously; when present they
	// must be in the right ballpark.
	if st.ApproxRawEntries != 0 && (st.ApproxRawEntries < n/2 || st.ApproxRawEntries > 3*n) {
		t.Fatalf("ApproxRawEntries %d for %d keys", st.ApproxRawEntries, n)
	}
	if st.ApproxViewEntries > n/10*3 {
		t.Fatalf("ApproxViewEntries %d for %d view keys", st.ApproxViewEntries, n/10)
	}
}
