package command

import (
	"context"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/syncbuf"
)

// TestWatchSignals: the first signal cancels, the second exits; with no
// signal, done ends the watcher.
func TestWatchSignals(t *testing.T) {
	var stderr syncbuf.Buffer
	grace := func() time.Duration { return time.Hour }
	sigs := make(chan os.Signal, 2)
	done := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	exited := make(chan int, 1)
	finished := make(chan struct{})
	go func() {
		defer close(finished)
		WatchSignals(&stderr, grace, sigs, done, cancel, func(code int) { exited <- code })
	}()
	sigs <- syscall.SIGTERM
	<-ctx.Done()
	select {
	case code := <-exited:
		t.Fatalf("exited (%d) on the first signal", code)
	default:
	}
	sigs <- syscall.SIGTERM
	if code := <-exited; code != ExitFailure {
		t.Fatalf("exit %d on the second signal", code)
	}
	<-finished

	finished = make(chan struct{})
	go func() {
		defer close(finished)
		WatchSignals(&stderr, grace, sigs, done, cancel, func(code int) { exited <- code })
	}()
	close(done)
	<-finished
}
