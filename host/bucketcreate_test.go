package host_test

import (
	"context"
	"errors"
	"log/slog"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// TestMissingBucketCreatedLoudly: a fold whose bucket does not exist (a
// misspelled name) creates it, and says so at WARN with the settings it
// used; a fold whose bucket exists logs nothing of the kind. Mutation
// caught: the creation not logged (it was silent).
func TestMissingBucketCreatedLoudly(t *testing.T) {
	url, _ := hosttest.NATSServer(t) // holds "routes"
	var logs syncbuf.Buffer
	dir := t.TempDir()
	hosttest.StartHost(t, host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Logger: slog.New(slog.NewTextHandler(&logs, nil)),
		Folds: []host.FoldOptions{
			{Name: "routes", DataDir: filepath.Join(dir, "a")},
			{Name: "typo", Bucket: "rotues", DataDir: filepath.Join(dir, "b"),
				CreateBucket: natskv.BucketConfig{History: 5, MaxAge: time.Hour}},
		},
	})
	l := logs.String()
	if !strings.Contains(l, `level=WARN msg="the bucket did not exist: created it, empty (a misspelled bucket name? create_bucket = false refuses a missing bucket)" fold=typo bucket=rotues history=5 max_age=1h0m0s max_bytes=0 replicas=1 storage=file limit_marker_ttl=0s`) {
		t.Errorf("no WARN line for the created bucket:\n%s", hosttest.GrepLines(l, "bucket"))
	}
	if strings.Contains(l, "fold=routes bucket=routes history") {
		t.Errorf("an existing bucket was reported created:\n%s", hosttest.GrepLines(l, "bucket"))
	}
}

// TestMissingBucketRefused: with NoCreateBucket (create_bucket = false) a
// missing bucket fails the start, naming it, and is not created. Mutation
// caught: NoCreate ignored (the start succeeds on a new, empty bucket).
func TestMissingBucketRefused(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	err := hosttest.StartErr(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "typo", Bucket: "rotues", NoCreateBucket: true, DataDir: filepath.Join(t.TempDir(), "a")}},
	})
	if !errors.Is(err, natskv.ErrNoBucket) || !strings.Contains(err.Error(), `"rotues"`) || !strings.Contains(err.Error(), "create_bucket = false") {
		t.Fatalf("the start with a missing bucket and NoCreateBucket: %v", err)
	}
	if _, err := hosttest.JS(t, url).KeyValue(context.Background(), "rotues"); !errors.Is(err, jetstream.ErrBucketNotFound) {
		t.Errorf("the refused bucket exists: %v", err)
	}
	// An existing bucket opens as ever.
	hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", NoCreateBucket: true, DataDir: filepath.Join(t.TempDir(), "a")}},
	})
}
