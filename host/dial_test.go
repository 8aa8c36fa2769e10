package host_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// TestStartWaitsForNATS: a host started while its NATS server is down
// waits for it, saying so at WARN, and starts once the server is up: a
// fleet restarting with its NATS cluster needs no supervisor. Its fold
// then folds. A wait ended by the start's context says how long it
// waited. Mutation caught: the dial not retried (the start fails at
// once: "no servers available").
func TestStartWaitsForNATS(t *testing.T) {
	port := hosttest.FreePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	opts := func(logs *syncbuf.Buffer) host.Options {
		return host.Options{
			Logger:         slog.New(slog.NewTextHandler(logs, nil)),
			PluginCacheDir: os.Getenv("FOLDHOST_TEST_WASM_CACHE"),
			NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
			Folds:          []host.FoldOptions{{Name: "routes", Plugin: hosttest.BuiltPlugin(t, "example-router", "router-c"), DataDir: filepath.Join(t.TempDir(), "routes")}},
		}
	}

	// A wait cut short by the start's context.
	var logs syncbuf.Buffer
	h, err := host.New(opts(&logs))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- h.Start(ctx) }()
	waitLog(t, &logs, errc, "NATS cannot be reached; retrying")
	cancel()
	if err := <-errc; !errors.Is(err, context.Canceled) || !strings.Contains(err.Error(), "could not be reached in") {
		t.Fatalf("start cut short while waiting for NATS: %v", err)
	}
	h.Close()

	// A wait that ends when the server comes up.
	var logs2 syncbuf.Buffer
	h, err = host.New(opts(&logs2))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	go func() { errc <- h.Start(context.Background()) }()
	waitLog(t, &logs2, errc, "NATS cannot be reached; retrying")
	srv, err := embeddednats.Start(embeddednats.Options{Dir: t.TempDir(), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Shutdown()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("start after NATS came up: %v", err)
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("the start did not end 2m after NATS came up; logs:\n%s", logs2.String())
	}
	if !strings.Contains(logs2.String(), "NATS reached") {
		t.Fatalf("the end of the wait is not logged:\n%s", logs2.String())
	}
	rctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	defer func() { stop(); <-done }()
	kv, err := hosttest.JS(t, url).KeyValue(context.Background(), "routes")
	if err != nil {
		t.Fatal(err)
	}
	rev, err := kv.Put(context.Background(), "route.a", []byte(hosttest.Route("10.0.0.1:80")))
	if err != nil {
		t.Fatal(err)
	}
	hosttest.WaitCursor(t, h.Fold("routes"), rev)
}

// waitLog waits until logs hold line, failing at once if the start ends
// first (errc).
func waitLog(t *testing.T, logs *syncbuf.Buffer, errc chan error, line string) {
	t.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(logs.String(), line) {
		select {
		case err := <-errc:
			t.Fatalf("the start ended (%v) before logging %q:\n%s", err, line, logs.String())
		case <-time.After(5 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %q logged within 2m:\n%s", line, logs.String())
		}
	}
}
