package foldrun_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"testing"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/leakcheck"
	"github.com/foldhost/foldhost/internal/testhook"
)

func TestMain(m *testing.M) {
	if os.Getenv(killRebuildEnv) != "" {
		killRebuildChild() // a child of TestKilledRebuild
	}
	os.Exit(leakcheck.Run(m))
}

// killRebuildEnv makes the test binary a child of TestKilledRebuild
// (TestMain): it runs a host on the fold of killRebuildDir with the plugin
// file killRebuildPlugin against killRebuildURL, and prints "progress" once
// a rebuild folded some entries, "replayed" when one finished its replay
// (where it then waits: "before-switch"), until it is killed.
const (
	killRebuildEnv    = "FOLDHOST_TEST_KILL_REBUILD" // "mid-replay" or "before-switch"
	killRebuildURL    = "FOLDHOST_TEST_KILL_REBUILD_URL"
	killRebuildDir    = "FOLDHOST_TEST_KILL_REBUILD_DIR"
	killRebuildPlugin = "FOLDHOST_TEST_KILL_REBUILD_PLUGIN"
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
	if os.Getenv(killRebuildEnv) == "before-switch" {
		testhook.AfterReplay = func(ctx context.Context, _ bool) {
			fmt.Println("replayed")
			<-ctx.Done()
		}
	}
	h, err := host.New(host.Options{
		NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: os.Getenv(killRebuildURL)}},
		Logger: slog.New(slog.DiscardHandler),
		Folds:  []host.FoldOptions{{Name: "routes", Plugin: os.Getenv(killRebuildPlugin), DataDir: os.Getenv(killRebuildDir), BatchSize: 3}},
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
