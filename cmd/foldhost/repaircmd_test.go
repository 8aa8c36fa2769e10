package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/natstest"
)

// TestRepairCommand: `foldhost repair` on a stopped fold whose bucket lost
// a key (its delete marker purged) runs the key-listing repair, prints its
// record and leaves the fold equal to the bucket; a bad --mode is a usage
// error, and a restore with no artifact ahead is refused (exit 1) with the
// fold untouched.
func TestRepairCommand(t *testing.T) {
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "rt"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	kv := b.KV()
	var last uint64
	for i := range 5 {
		if last, err = kv.Put(context.Background(), fmt.Sprintf("k%d", i), []byte("v")); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "fold")
	cfg := writeConfig(t, dir, fmt.Sprintf("[nats]\nurl = %q\n[[fold]]\nname = \"rt\"\ndata_dir = %q\n", srv.ClientURL(), data))

	foldOnce(t, srv.ClientURL(), data, last)

	if err := kv.Delete(context.Background(), "k1"); err != nil {
		t.Fatal(err)
	}
	if err := kv.PurgeDeletes(context.Background(), jetstream.DeleteMarkersOlderThan(-1)); err != nil {
		t.Fatal(err)
	}

	if code, _, errOut := runCLI(t, nil, "repair", "--config", cfg, "--mode", "sometimes"); code != command.ExitUsage || !strings.Contains(errOut, "--mode") {
		t.Errorf("bad --mode: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCLI(t, nil, "repair", "--config", cfg, "--mode", "restore")
	if code != command.ExitFailure || !strings.Contains(errOut, "repair refused") {
		t.Errorf("restore with no artifact: exit %d: %s %s", code, out, errOut)
	}
	if n := len(rawKeys(t, data)); n != 5 {
		t.Fatalf("a refused repair changed the fold: %d keys", n)
	}
	code, out, errOut = runCLI(t, nil, "repair", "--config", cfg, "--json")
	var rec httpapi.RepairRun
	if code != 0 || json.Unmarshal([]byte(out), &rec) != nil || rec.Plan != "key-listing-diff" || rec.Outcome != "done" || rec.Deleted != 1 {
		t.Fatalf("repair: exit %d: %s %s", code, out, errOut)
	}
	if keys := rawKeys(t, data); len(keys) != 4 || strings.Contains(strings.Join(keys, ","), "k1") {
		t.Fatalf("after the repair the fold holds %v, want k0, k2..k4", keys)
	}
}

// foldOnce folds bucket rt into a fold rt at data with the library, until
// its cursor reaches last, then stops.
func foldOnce(t *testing.T, url, data string, last uint64) {
	t.Helper()
	h, err := host.New(host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "rt", DataDir: data}}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	waitFor(t, time.Minute, "the fold to reach the head", func() (bool, string) {
		st := h.Fold("rt").Status()
		return st.Cursor >= last, fmt.Sprint(st.Cursor)
	})
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	h.Close()
}

// TestRepairResetCommand: `foldhost repair --reset` on a fold whose bucket
// was deleted and made again while it was down (a start refuses it, naming
// both streams: host's TestResetAfterARecreatedBucket) refolds it from the
// new bucket into a fresh store, keeps the old store aside, and the fold
// then starts; --reset with --mode is a usage error.
func TestRepairResetCommand(t *testing.T) {
	srv, nc := natstest.Start(t)
	put := func(keys ...string) uint64 {
		t.Helper()
		// The server removes a deleted stream's files after it answered: a
		// create right after it can fail ("error creating store for stream").
		var b *natskv.Bucket
		waitFor(t, time.Minute, "the bucket made", func() (bool, string) {
			var err error
			b, err = natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "rt"}, natskv.Options{})
			return err == nil, fmt.Sprint(err)
		})
		var last uint64
		for _, k := range keys {
			var err error
			if last, err = b.KV().Put(context.Background(), k, []byte("v")); err != nil {
				t.Fatal(err)
			}
		}
		return last
	}
	dir := t.TempDir()
	data := filepath.Join(dir, "fold")
	cfg := writeConfig(t, dir, fmt.Sprintf("[nats]\nurl = %q\n[[fold]]\nname = \"rt\"\ndata_dir = %q\n", srv.ClientURL(), data))
	foldOnce(t, srv.ClientURL(), data, put("a", "b", "c", "d", "e"))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), "rt"); err != nil {
		t.Fatal(err)
	}
	put("x", "y", "z", "w", "v", "u", "t") // written past the old cursor

	if code, _, errOut := runCLI(t, nil, "repair", "--config", cfg, "--reset", "--mode", "relist"); code != command.ExitUsage {
		t.Errorf("--reset with --mode: exit %d: %s", code, errOut)
	}
	code, out, errOut := runCLI(t, nil, "repair", "--config", cfg, "--reset", "--json")
	var res host.ResetResult
	if code != 0 || json.Unmarshal([]byte(out), &res) != nil || res.Cursor != 7 || res.Kept == "" {
		t.Fatalf("repair --reset: exit %d: %s %s", code, out, errOut)
	}
	if keys := rawKeys(t, data); strings.Join(keys, ",") != "t,u,v,w,x,y,z" {
		t.Fatalf("after the reset the fold holds %v", keys)
	}
	if keys := rawKeys(t, res.Kept); strings.Join(keys, ",") != "a,b,c,d,e" {
		t.Fatalf("the kept store holds %v", keys)
	}
	foldOnce(t, srv.ClientURL(), data, 7) // and it starts
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func rawKeys(t *testing.T, dir string) []string {
	t.Helper()
	st, _, err := fold.Open(dir, fold.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keys []string
	if err := st.RawKeys("", func(k []byte) error { keys = append(keys, string(k)); return nil }); err != nil {
		t.Fatal(err)
	}
	return keys
}
