package host

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"syscall"

	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// OutboxLen counts the entries of f's outbox (tests: what is committed
// and not yet published).
func OutboxLen(f *Fold) int {
	n := 0
	if err := f.store.Outbox(0, func(_ fold.OutboxEntry) error { n++; return nil }); err != nil {
		return -1
	}
	return n
}

// EffectsDroppedByStore is the store's count of re-delivered effects.
func EffectsDroppedByStore(f *Fold) uint64 { return f.store.EffectsDropped() }

// SetEffectsStep sets the publishers' fault-injection hook (effectsStep)
// until the test ends.
func SetEffectsStep(t interface{ Cleanup(func()) }, fn func(ctx context.Context, step string)) {
	testhook.Set(t, &testhook.EffectsStep, fn)
}

// FailHoldRecords makes every record of an effects hold fail (fault
// injection) until heal is called or the test ends.
func FailHoldRecords(t interface{ Cleanup(func()) }) (heal func()) {
	testhook.FailHoldRecords.Store(true)
	heal = func() { testhook.FailHoldRecords.Store(false) }
	t.Cleanup(heal)
	return heal
}

// KillEffectsEnv makes the test binary a child of TestEffectsAudit
// (TestMain): it runs a host on the router fold of KillEffectsDir
// (plugin KillEffectsPlugin, batches of one update) publishing effects to
// stream EV on KillEffectsURL until it is killed. With KillEffectsEnv =
// "after-ack-N" it kills itself (SIGKILL) right after the stream
// acknowledged its Nth batch, before the outbox let go of it, printing
// "killing"; with "before-publish-N", right before it sends its Nth batch.
const (
	KillEffectsEnv    = "FOLDHOST_TEST_KILL_EFFECTS"
	KillEffectsURL    = "FOLDHOST_TEST_KILL_EFFECTS_URL"
	KillEffectsDir    = "FOLDHOST_TEST_KILL_EFFECTS_DIR"
	KillEffectsPlugin = "FOLDHOST_TEST_KILL_EFFECTS_PLUGIN"
	// KillEffectsNoSync, when set, runs the child's fold with the
	// defaults instead: NoSync commits, batches of up to 100 updates.
	KillEffectsNoSync = "FOLDHOST_TEST_KILL_EFFECTS_NOSYNC"
	// KillEffectsArtifacts, when set, is a directory artifact store the
	// child's fold restores from (repair = "restore"); "restore-done-1"
	// kills it right after a restore's last commit.
	KillEffectsArtifacts = "FOLDHOST_TEST_KILL_EFFECTS_ARTIFACTS"
)

func killEffectsChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	mode := os.Getenv(KillEffectsEnv)
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
	fo := FoldOptions{Name: "routes", Plugin: os.Getenv(KillEffectsPlugin), DataDir: os.Getenv(KillEffectsDir), BatchSize: 1, Sync: true,
		EffectsStream: "EV"}
	if os.Getenv(KillEffectsNoSync) != "" {
		fo.BatchSize, fo.Sync = 0, false
	}
	var arts ArtifactOptions
	if dir := os.Getenv(KillEffectsArtifacts); dir != "" {
		st, err := dirstore.New(dir)
		if err != nil {
			fail(err)
		}
		fo.Repair, arts = protocol.RepairRestore, ArtifactOptions{Store: st, Where: "test", Holder: "t"}
	}
	h, err := New(Options{
		NATS:      NATSOptions{Conn: natskv.ConnOptions{URL: os.Getenv(KillEffectsURL)}},
		Logger:    slog.New(slog.DiscardHandler),
		Folds:     []FoldOptions{fo},
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
