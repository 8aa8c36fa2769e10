package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/testhook"
)

// SetStoreOptions makes every fold's store open with the options fn
// adjusts (a fault-injecting filesystem, a small disk reserve); diskPollEvery
// replaces how often a fold failed on a full disk checks for space. The
// returned func unsets both. Not safe while a host runs.
func SetStoreOptions(fn func(fold string, o *fold.Options), diskPollEvery time.Duration) (unset func()) {
	testhook.StoreOptions, testhook.DiskPoll = fn, diskPollEvery
	return func() { testhook.StoreOptions, testhook.DiskPoll = nil, 0 }
}

// SetResetStep makes every repair --reset swap call fn before each of its
// steps (write-marker, move-old-aside, move-fresh-in, remove-marker); an
// error stops the swap there, nothing undone, as a kill would. The returned
// func unsets it. Not safe while a reset runs.
func SetResetStep(fn func(step string) error) (unset func()) {
	testhook.ResetStep = fn
	return func() { testhook.ResetStep = nil }
}

// SetAfterReplay makes every view rebuild call fn between its replay and
// its switch (a test holds the rebuild there while it writes or reloads);
// fn should return when ctx ends. The returned func unsets it. Not safe
// while a host runs.
func SetAfterReplay(fn func(ctx context.Context, live bool)) (unset func()) {
	testhook.AfterReplay = fn
	return func() { testhook.AfterReplay = nil }
}

// KillRebuildEnv makes the test binary a child of TestKilledRebuild
// (TestMain): it runs a host on the fold of KillRebuildDir with the plugin
// file KillRebuildPlugin against KillRebuildURL, and prints "progress" once
// a rebuild folded some entries, "replayed" when one finished its replay
// (where it then waits: "before-switch"), until it is killed.
const (
	KillRebuildEnv    = "FOLDHOST_TEST_KILL_REBUILD" // "mid-replay" or "before-switch"
	KillRebuildURL    = "FOLDHOST_TEST_KILL_REBUILD_URL"
	KillRebuildDir    = "FOLDHOST_TEST_KILL_REBUILD_DIR"
	KillRebuildPlugin = "FOLDHOST_TEST_KILL_REBUILD_PLUGIN"
)

func killRebuildChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	var once sync.Once
	testhook.RebuildProgress = func(p fold.RebuildProgress) {
		if p.Replayed > 0 {
			once.Do(func() { fmt.Println("progress") })
		}
	}
	if os.Getenv(KillRebuildEnv) == "before-switch" {
		SetAfterReplay(func(ctx context.Context, _ bool) {
			fmt.Println("replayed")
			<-ctx.Done()
		})
	}
	h, err := New(Options{
		NATS:   NATSOptions{Conn: natskv.ConnOptions{URL: os.Getenv(KillRebuildURL)}},
		Logger: slog.New(slog.DiscardHandler),
		Folds:  []FoldOptions{{Name: "routes", Plugin: os.Getenv(KillRebuildPlugin), DataDir: os.Getenv(KillRebuildDir), BatchSize: 3}},
	})
	if err != nil {
		fail(err)
	}
	if err := h.Start(context.Background()); err != nil {
		fail(err)
	}
	_ = h.Run(context.Background())
	os.Exit(3) // killed before: never reached
}

// SetObjectPoll sets how often object-store plugin sources look at their
// object besides the watch; the returned func restores it. Not safe while a
// host runs.
func SetObjectPoll(d time.Duration) (restore func()) {
	testhook.ObjectPoll = d
	return func() { testhook.ObjectPoll = 0 }
}

// StallLoop holds the fold's live loop on a request, as a stopped process
// would hold it: its watch's channel fills, then the client's, then the
// server's flow control stalls the consumer. It returns once the loop is
// held; release lets it go (and waits until it went). It fails when no
// loop runs.
func (f *Fold) StallLoop(ctx context.Context) (release func(), err error) {
	l := f.loop.Load()
	if l == nil {
		return nil, fmt.Errorf("fold %s: no live loop", f.Name())
	}
	held, rel, done := make(chan struct{}), make(chan struct{}), make(chan error, 1)
	go func() {
		done <- l.Do(ctx, func(context.Context, fold.Target) error {
			close(held)
			<-rel
			return nil
		})
	}()
	select {
	case <-held:
	case err := <-done:
		return nil, fmt.Errorf("fold %s: the loop took no request: %v", f.Name(), err)
	}
	return func() { close(rel); <-done }, nil
}
