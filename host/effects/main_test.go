package effects_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/leakcheck"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

func TestMain(m *testing.M) {
	if os.Getenv(killEffectsEnv) != "" {
		killEffectsChild() // a child of TestEffectsAudit and the other kill tests
	}
	os.Exit(leakcheck.Run(m))
}

// failHoldRecords makes every record of an effects hold fail (fault
// injection) until heal is called or the test ends.
func failHoldRecords(t interface{ Cleanup(func()) }) (heal func()) {
	testhook.FailHoldRecords.Store(true)
	heal = func() { testhook.FailHoldRecords.Store(false) }
	t.Cleanup(heal)
	return heal
}

// killEffectsEnv makes the test binary a child of TestEffectsAudit
// (TestMain): it runs a host on the router fold of killEffectsDir
// (plugin killEffectsPlugin, batches of one update) publishing effects to
// stream EV on killEffectsURL until it is killed. With killEffectsEnv =
// "after-ack-N" it kills itself (SIGKILL) right after the stream
// acknowledged its Nth batch, before the outbox let go of it, printing
// "killing"; with "before-publish-N", right before it sends its Nth batch.
const (
	killEffectsEnv    = "FOLDHOST_TEST_KILL_EFFECTS"
	killEffectsURL    = "FOLDHOST_TEST_KILL_EFFECTS_URL"
	killEffectsDir    = "FOLDHOST_TEST_KILL_EFFECTS_DIR"
	killEffectsPlugin = "FOLDHOST_TEST_KILL_EFFECTS_PLUGIN"
	// killEffectsNoSync, when set, runs the child's fold with the
	// defaults instead: NoSync commits, batches of up to 100 updates.
	killEffectsNoSync = "FOLDHOST_TEST_KILL_EFFECTS_NOSYNC"
	// killEffectsArtifacts, when set, is a directory artifact store the
	// child's fold restores from (repair = "restore"); "restore-done-1"
	// kills it right after a restore's last commit.
	killEffectsArtifacts = "FOLDHOST_TEST_KILL_EFFECTS_ARTIFACTS"
)

func killEffectsChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mode := os.Getenv(killEffectsEnv)
	if i := strings.LastIndexByte(mode, '-'); i > 0 {
		at, n := mode[:i], 0
		_, _ = fmt.Sscanf(mode[i+1:], "%d", &n)
		var steps atomic.Int64
		testhook.EffectsStep = func(_ context.Context, step string) {
			if step == at && steps.Add(1) == int64(n) {
				fmt.Println("killing")
				_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
				select {} // the signal is on its way
			}
		}
	}
	fo := host.FoldOptions{Name: "routes", Plugin: os.Getenv(killEffectsPlugin), DataDir: os.Getenv(killEffectsDir), BatchSize: 1, Sync: true,
		EffectsStream: "EV"}
	if os.Getenv(killEffectsNoSync) != "" {
		fo.BatchSize, fo.Sync = 0, false
	}
	var arts host.ArtifactOptions
	if dir := os.Getenv(killEffectsArtifacts); dir != "" {
		st, err := dirstore.New(dir)
		if err != nil {
			fail(err)
		}
		fo.Repair, arts = protocol.RepairRestore, host.ArtifactOptions{Store: st, Where: "test", Holder: "t"}
	}
	h, err := host.New(host.Options{
		NATS:      host.NATSOptions{Conn: natskv.ConnOptions{URL: os.Getenv(killEffectsURL)}},
		Logger:    slog.New(slog.DiscardHandler),
		Folds:     []host.FoldOptions{fo},
		Artifacts: arts,
		// The test command's compile cache: each of the audit's children
		// would compile the plugin again (seconds under the race detector).
		PluginCacheDir: os.Getenv("FOLDHOST_TEST_WASM_CACHE"),
	})
	if err != nil {
		fail(err)
	}
	if err := h.Start(context.Background()); err != nil {
		fail(err)
	}
	fmt.Println("started")
	_ = h.Run(context.Background())
	os.Exit(3) // killed before: never reached
}
