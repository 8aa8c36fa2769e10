package command

import (
	"context"
	"errors"
	"flag"
	"os"
	"strings"
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

// TestParseBadFlagPrintsNoUsage: a bad flag is a usage error and prints
// nothing (the caller prints it with where the help is); --help prints
// the usage. The flag package prints the usage on every error.
func TestParseBadFlagPrintsNoUsage(t *testing.T) {
	var out syncbuf.Buffer
	fs := FlagSet(&out, "x", "x [--a N]", "About x.")
	fs.Int("a", 0, "a number")
	_, err := Parse(fs, []string{"--b"})
	if ue := (*UsageError)(nil); !errors.As(err, &ue) || out.String() != "" {
		t.Errorf("a bad flag: %v, printed %q", err, out.String())
	}
	if _, err := Parse(fs, []string{"--a", "x"}); err == nil || out.String() != "" {
		t.Errorf("a bad value: %v, printed %q", err, out.String())
	}
	if _, err := Parse(fs, []string{"--help"}); !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "Usage:\n  foldhost x [--a N]\n\nAbout x.") {
		t.Errorf("--help: %v, printed %q", err, out.String())
	}
}
