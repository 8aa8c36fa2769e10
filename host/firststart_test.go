package host_test

import (
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// TestFirstStartOnAnEvictingBucketSaysWhatItDoes: an empty store's first
// start on a bucket that already evicted (its listing is not the truth)
// looks for an artifact to restore from, finds none, and state-syncs with
// a warning. It logged "the store holds data but no cursor", which sent
// operators looking for a torn commit in a store that was empty.
func TestFirstStartOnAnEvictingBucketSaysWhatItDoes(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.Discard, c.MaxMsgs = jetstream.DiscardOld, 3 })
	var last uint64
	for i := range 5 {
		last = hosttest.Put(t, b, fmt.Sprintf("k%d", i), "v")
	}
	logs := &syncbuf.Buffer{}
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}}, Logger: slog.New(slog.NewTextHandler(logs, nil)),
		Folds: []host.FoldOptions{{Name: "ev", Bucket: "rt", DataDir: filepath.Join(t.TempDir(), "fold"), Repair: protocol.RepairAuto}}}
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("ev")
	hosttest.WaitCursor(t, f, last)
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	s := logs.String()
	if strings.Contains(s, "holds data but no cursor") {
		t.Errorf("an empty store's first start says it holds data:\n%s", s)
	}
	for _, want := range []string{"a first start on a bucket whose listing is not the truth", "eviction=\"a discard-old limit\"",
		"starting without a cursor on a bucket whose listing is incomplete"} {
		if !strings.Contains(s, want) {
			t.Errorf("the log lacks %q:\n%s", want, s)
		}
	}
}
