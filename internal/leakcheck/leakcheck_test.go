package leakcheck

import (
	"runtime/debug"
	"testing"
)

// The nats.go object-store leak is ignored only in its stuck state: the
// same goroutine waiting on a live channel belongs to a JetStream context a
// test left open, and is reported.
func TestObjectPutLeakIgnoredOnlyOnANilChannel(t *testing.T) {
	const frames = `
github.com/nats-io/nats.go/jetstream.(*jetStream).resetPendingAcksOnReconnect(0xc0111f9710)
	/mod/github.com/nats-io/nats.go@v1.55.0/jetstream/publish.go:570 +0xdd
created by github.com/nats-io/nats.go/jetstream.(*jetStream).newAsyncReply in goroutine 3957
	/mod/github.com/nats-io/nats.go@v1.55.0/jetstream/publish.go:451 +0x3b3`
	for _, c := range []struct {
		head   string
		ignore bool
	}{
		{"goroutine 4212 [chan receive (nil chan)]:", true},
		{"goroutine 4212 [chan receive (nil chan), 3 minutes]:", true},
		{"goroutine 4212 [chan receive]:", false},
		{"goroutine 4212 [select]:", false},
	} {
		if got := isIgnored(c.head + frames); got != c.ignore {
			t.Errorf("%s: ignored = %v, want %v", c.head, got, c.ignore)
		}
	}
	if isIgnored("goroutine 9 [chan receive (nil chan)]:\nmain.stuck()\n\t/x.go:1") {
		t.Error("any goroutine on a nil channel is ignored, not only the nats.go one")
	}
}

// A process whose collector was turned off is refused; GOGC=off in the
// environment is the one exemption.
func TestGCOffIsRefused(t *testing.T) {
	t.Setenv("GOGC", "")
	if msg := gcOff(); msg != "" {
		t.Fatalf("refused with the collector on: %s", msg)
	}
	old := debug.SetGCPercent(-1)
	defer debug.SetGCPercent(old)
	if GCPercent() != -1 {
		t.Fatalf("GCPercent = %d with the collector off", GCPercent())
	}
	if gcOff() == "" {
		t.Fatal("a process with its collector off is not refused")
	}
	t.Setenv("GOGC", "off")
	if msg := gcOff(); msg != "" {
		t.Fatalf("refused though the environment asked for GOGC=off: %s", msg)
	}
}
