package host_test

import (
	"context"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
)

// Example embeds a host in a Go program: an in-process NATS server, one
// raw-only fold, its HTTP API served by the program, and a shutdown.
func Example() {
	dir, err := os.MkdirTemp("", "foldhost-example")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)
	h, err := host.New(host.Options{
		NATS:   host.NATSOptions{Embedded: &host.EmbeddedNATS{Host: "127.0.0.1", Dir: filepath.Join(dir, "nats")}},
		Folds:  []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(dir, "routes")}},
		Logger: hosttest.Quiet,
	})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	if err := h.Start(ctx); err != nil {
		panic(err)
	}
	defer h.Close()
	api := httptest.NewServer(h.Handler()) // or http.ListenAndServe(addr, h.Handler())
	defer api.Close()
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()

	// Write through NATS; the fold follows.
	nc, err := natskv.Connect(natskv.ConnOptions{URL: h.EmbeddedURL()})
	if err != nil {
		panic(err)
	}
	defer nc.Close()
	b, err := natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		panic(err)
	}
	rev, err := b.KV().Put(ctx, "route.api", []byte(`{"upstreams":[{"addr":"10.0.0.1:80"}]}`))
	if err != nil {
		panic(err)
	}
	f := h.Fold("routes")
	for f.Status().Cursor < rev {
		time.Sleep(10 * time.Millisecond)
	}
	st := f.Status()
	fmt.Println(st.Name, st.State, "cursor", st.Cursor)

	cancel() // shutdown: the fold flushes
	fmt.Println("run:", <-done)
	// Output:
	// routes following cursor 1
	// run: <nil>
}
