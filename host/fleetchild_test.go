package host

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/testhook"
)

// FleetChildEnv makes the test binary a node of a fleet (TestMain): it
// runs a host of fleet "kill", node FleetChildNode, on the server at
// FleetChildURL, with one fold "routes" (plugin FleetChildPlugin, effects
// to stream EV) in FleetChildDir, serves its HTTP API on a loopback port,
// prints "http ADDR" then "started", and runs until killed. With
// FleetChildStopAt = "before-publish-N" it stops itself (SIGSTOP) right
// before it publishes its Nth batch of effects, printing "stopping";
// FleetChildBatch = "big" folds in batches of up to 100 updates closed
// after 300ms (else one update per batch).
const (
	FleetChildEnv    = "FOLDHOST_TEST_FLEET_CHILD"
	FleetChildURL    = "FOLDHOST_TEST_FLEET_URL"
	FleetChildNode   = "FOLDHOST_TEST_FLEET_NODE"
	FleetChildDir    = "FOLDHOST_TEST_FLEET_DIR"
	FleetChildPlugin = "FOLDHOST_TEST_FLEET_PLUGIN"
	FleetChildStopAt = "FOLDHOST_TEST_FLEET_STOP_AT"
	FleetChildBatch  = "FOLDHOST_TEST_FLEET_BATCH"
	// FleetChildArtifacts: a directory artifact store the node exports
	// to (and FleetChildStopAt may be "before-upload-N": its Nth export
	// round, staged, stops before its upload).
	FleetChildArtifacts = "FOLDHOST_TEST_FLEET_ARTIFACTS"
)

func fleetChild() {
	fail := func(err error) {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	if at := os.Getenv(FleetChildStopAt); at != "" {
		i := strings.LastIndexByte(at, '-')
		step, want := at[:i], 0
		want, _ = strconv.Atoi(at[i+1:])
		var n atomic.Int64
		stop := func(_ context.Context, s string) {
			if s == step && n.Add(1) == int64(want) {
				fmt.Println("stopping")
				_ = syscall.Kill(os.Getpid(), syscall.SIGSTOP)
			}
		}
		testhook.EffectsStep, testhook.ExportStep = stop, stop
	}
	var arts ArtifactOptions
	if dir := os.Getenv(FleetChildArtifacts); dir != "" {
		st, err := dirstore.New(dir)
		if err != nil {
			fail(err)
		}
		arts = ArtifactOptions{Store: st, Where: "shared", LeaseTTL: time.Minute}
	}
	fo := FoldOptions{Name: "routes", Plugin: os.Getenv(FleetChildPlugin), DataDir: os.Getenv(FleetChildDir), EffectsStream: "EV", BatchSize: 1}
	if os.Getenv(FleetChildBatch) == "big" {
		fo.BatchSize, fo.BatchWindow = 100, 300*time.Millisecond
	}
	node := os.Getenv(FleetChildNode)
	arts.Holder = node
	h, err := New(Options{
		NATS:      NATSOptions{Conn: natskv.ConnOptions{URL: os.Getenv(FleetChildURL), Name: node}},
		Admin:     AdminOptions{Node: node},
		Artifacts: arts,
		Fleet:     FleetOptions{Name: "kill", Heartbeat: 100 * time.Millisecond, NodeTTL: time.Second},
		Folds:     []FoldOptions{fo},
		// Warnings and errors to stderr: a test that fails prints them.
		Logger:         slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		PluginCacheDir: os.Getenv("FOLDHOST_TEST_WASM_CACHE"),
	})
	if err != nil {
		fail(err)
	}
	if err := h.Start(context.Background()); err != nil {
		fail(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fail(err)
	}
	srv := &http.Server{Handler: h.Handler(), Addr: ln.Addr().String()}
	go func() { _ = srv.Serve(ln) }()
	fmt.Println("http", ln.Addr().String())
	fmt.Println("started")
	_ = h.Run(context.Background())
	os.Exit(3) // killed before: never reached
}
