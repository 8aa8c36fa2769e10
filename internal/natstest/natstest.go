// Package natstest starts an embedded NATS server for one test: the setup
// the packages' tests share (JetStream in the test's temporary directory,
// a client of it, both closed when the test ends).
package natstest

import (
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/natskv"
)

// Start starts the server and connects a client named after the test.
func Start(t testing.TB) (*embeddednats.Server, *nats.Conn) {
	t.Helper()
	srv, err := embeddednats.Start(embeddednats.Options{Dir: t.TempDir()})
	if err != nil {
		t.Fatalf("start nats: %v", err)
	}
	t.Cleanup(srv.Shutdown)
	nc, err := natskv.Connect(natskv.ConnOptions{URL: srv.ClientURL(), Name: t.Name()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return srv, nc
}
