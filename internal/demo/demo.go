// Package demo is the tour `foldhost demo` gives on embedded defaults: an
// embedded NATS server, a synthetic route workload folded through the
// example-router plugin, a restart that receives only the delta, an
// artifact exported and a new node bootstrapped from it, ending identical
// to the first. The CLI parses the flags and prepares the directory.
package demo

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/plugins/example-router/embedded"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
	"github.com/foldhost/foldhost/protocol"
)

// Entries are what a demo leaves in its directory.
var Entries = []string{"nats", "fold", "fold-b", "artifacts", "wasm-cache"}

// Config is one tour's setup. The CLI checks the figures.
type Config struct {
	Out    io.Writer // where the tour is told
	Dir    string    // the working directory, made by the caller
	Keep   bool      // Dir is the user's (--dir): the fold stays after the demo
	Keys   int       // route keys to write
	Delta  int       // updates written while the fold is stopped
	Plugin string    // the example-router module; empty: the first build found, else the embedded C build
}

// Run gives the tour.
func Run(ctx context.Context, cfg Config) error {
	d := &demo{out: cfg.Out, dir: cfg.Dir, keep: cfg.Keep, keys: cfg.Keys, delta: cfg.Delta, rng: rand.New(rand.NewPCG(1, 2))}
	return d.run(ctx, cfg.Plugin)
}

type demo struct {
	out         io.Writer
	dir         string
	keep        bool // --dir given: the fold stays after the demo
	keys, delta int
	rng         *rand.Rand

	base   host.Options // every fold's host: NATS, the artifact store, the plugin cache
	plugin string
	bucket *natskv.Bucket // the demo's own handle, for the stream head
	w      *workload.Writer
	shown  bool // the plugin was described
}

func (d *demo) say(format string, args ...any) { fmt.Fprintf(d.out, format+"\n", args...) }

func (d *demo) run(ctx context.Context, pluginPath string) error {
	start := time.Now()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	d.say("foldhost demo: working in %s", d.dir)

	plugin, err := d.findPlugin(pluginPath)
	if err != nil {
		return err
	}
	srv, err := embeddednats.Start(embeddednats.Options{Dir: filepath.Join(d.dir, "nats")})
	if err != nil {
		return err
	}
	defer srv.Shutdown()
	nc, err := natskv.Connect(natskv.ConnOptions{URL: srv.ClientURL(), Name: "foldhost-demo"})
	if err != nil {
		return err
	}
	defer nc.Close()
	if d.bucket, err = natskv.OpenBucket(ctx, nc, natskv.BucketConfig{Name: "routes"}, natskv.Options{}); err != nil {
		return err
	}
	d.say("1. embedded NATS at %s (try: nats --server %s kv ls)", srv.ClientURL(), srv.ClientURL())
	store, err := dirstore.New(filepath.Join(d.dir, "artifacts"))
	if err != nil {
		return err
	}
	d.plugin = plugin
	d.base = host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: srv.ClientURL(), Name: "foldhost-demo"}},
		Artifacts:      host.ArtifactOptions{Store: store, Where: filepath.Join(d.dir, "artifacts"), Holder: "demo"},
		PluginCacheDir: filepath.Join(d.dir, "wasm-cache"),
		Logger:         quiet,
	}

	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	d.w = &workload.Writer{JS: js, Bucket: "routes", Hosts: d.keys, Rand: d.rng}
	t0 := time.Now()
	if err := d.w.Initial(ctx); err != nil {
		return err
	}
	d.say("2. wrote %d route keys in %v", d.keys, time.Since(t0).Round(time.Millisecond))

	storeDir := filepath.Join(d.dir, "fold")
	first, err := d.fold(ctx, storeDir, "3. folding")
	if err != nil {
		return err
	}
	d.say("   folded %d updates in %v; %s", first.delivered, first.took.Round(time.Millisecond), first.summary)

	t0 = time.Now()
	if err := d.w.Delta(ctx, d.delta); err != nil {
		return err
	}
	d.say("4. fold stopped; wrote a delta of %d updates (changes and deletes) in %v", d.delta, time.Since(t0).Round(time.Millisecond))

	second, err := d.fold(ctx, storeDir, "5. restart: resuming")
	if err != nil {
		return err
	}
	d.say("   the restart resumed from cursor %d and received %d updates: the delta, not the bucket (%d)",
		first.cursor, second.delivered, d.keys+d.delta)
	if second.delivered != int64(d.delta) {
		return fmt.Errorf("demo: the restart received %d updates, want the delta %d", second.delivered, d.delta)
	}
	d.say("   %s", second.summary)

	if err := d.artifactTour(ctx, storeDir); err != nil {
		return err
	}
	d.say("")
	d.say("Done in %v. Where to look next:", time.Since(start).Round(time.Millisecond))
	if d.keep {
		d.say("  foldhost inspect --data %s view get host/h00042     # the fold, offline", storeDir)
	} else {
		d.say("  foldhost demo --dir DIR, then foldhost inspect --data DIR/fold view get host/h00042   # keep the fold and read it offline")
	}
	d.say("  foldhost run --config config.toml.example           # the daemon: HTTP API, /metrics, /readyz")
	d.say("  foldhost export / foldhost bootstrap --help         # artifacts for a fleet (README: Artifacts)")
	d.say("  plugins/example-router/SPEC.md, abi/ABI.md          # write your own plugin")
	return nil
}

// options are the host options of the demo's fold in dataDir.
func (d *demo) options(dataDir string) host.Options {
	o := d.base
	o.Folds = []host.FoldOptions{{Name: "routes", Plugin: d.plugin, DataDir: dataDir, BatchSize: 1024, Buffer: 4096}}
	return o
}

type foldResult struct {
	delivered int64
	cursor    protocol.Revision
	took      time.Duration
	summary   string
}

// fold runs a host over the fold in dataDir until its store holds the
// stream head, showing progress, then shuts it down (flushing).
func (d *demo) fold(ctx context.Context, dataDir, what string) (foldResult, error) {
	ret, _, err := d.bucket.Retention(ctx)
	if err != nil {
		return foldResult{}, err
	}
	head := ret.Last
	h, err := host.New(d.options(dataDir))
	if err != nil {
		return foldResult{}, err
	}
	defer h.Close()
	if err := h.Start(ctx); err != nil {
		return foldResult{}, err
	}
	f := h.Fold("routes")
	mode := "state-sync (no cursor)"
	if cur := f.Store().Cursor(); cur.Rev != 0 {
		mode = fmt.Sprintf("resume from cursor %d", cur.Rev)
	}
	d.say("%s the bucket through the plugin: %s, stream head %d", what, mode, head)
	if !d.shown {
		d.shown = true
		pi := f.Status().Plugin
		d.say("   plugin %s %s (%s, sha256 %s...), validated and loaded", pi.Name, pi.Version, filepath.Base(d.plugin), pi.SHA256[:12])
	}
	p := progress.New(d.out, "   progress: ", time.Second)
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan error, 1)
	t0 := time.Now()
	go func() { done <- h.Run(rctx) }()
	wctx, stop := context.WithTimeout(ctx, 5*time.Minute)
	defer stop()
	err = f.WaitCursor(wctx, uint64(head), 100*time.Millisecond, func(st httpapi.Status) {
		p.Update(int64(st.Cursor), int64(head), fmt.Sprintf("cursor %d / %d, %d delivered", st.Cursor, head, st.Counters.DeliveredSinceStart))
	})
	took := time.Since(t0)
	p.End()
	cancel()
	if rerr := <-done; err == nil {
		err = rerr
	}
	if err != nil {
		return foldResult{}, fmt.Errorf("demo: %w", err)
	}
	st := f.Status()
	var hosts, reverse int
	_ = f.Store().ViewRange([]byte("host/"), func(_, _ []byte) error { hosts++; return nil })
	_ = f.Store().ViewRange([]byte("upstream/"), func(_, _ []byte) error { reverse++; return nil })
	sample, _, _ := f.Store().ViewGet([]byte("host/h00042"))
	summary := fmt.Sprintf("view: %d hosts, %d reverse-index entries, %d updates rejected as malformed; host/h00042 = %q",
		hosts, reverse, st.Counters.Rejected, sample)
	return foldResult{delivered: int64(st.Counters.DeliveredSinceStart), cursor: protocol.Revision(st.Cursor), took: took, summary: summary}, nil
}

// findPlugin returns path, or the first example-router build found, or the
// embedded C build.
func (d *demo) findPlugin(path string) (string, error) {
	if path != "" {
		return path, nil
	}
	for _, lang := range []string{"c", "as", "rust", "go"} {
		p := filepath.Join("plugins", "example-router", "build", "router-"+lang+".wasm")
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	// Anywhere else: the C build the binary carries.
	return embedded.WriteFile(d.dir, "c")
}

// artifactTour exports the stopped fold at storeDir to the local artifact
// store, writes a delta, bootstraps a second fold from the artifact and
// folds it: it must receive only the delta and end identical to the first.
func (d *demo) artifactTour(ctx context.Context, storeDir string) error {
	t0 := time.Now()
	// A single node: no fleet lease (it lives in NATS, for a fleet).
	res, err := host.ExportStopped(ctx, d.options(storeDir), "routes", true)
	if err != nil {
		return err
	}
	d.say("6. exported the fold as an artifact at cursor %d to the local artifact store %s in %v (checkpoint, verified by reopening, BLAKE3 per file, %s)",
		res.Cursor, d.base.Artifacts.Where, time.Since(t0).Round(time.Millisecond), res.Outcome)

	t0 = time.Now()
	if err := d.w.Delta(ctx, d.delta); err != nil {
		return err
	}
	d.say("7. wrote another delta of %d updates in %v", d.delta, time.Since(t0).Round(time.Millisecond))

	second := filepath.Join(d.dir, "fold-b")
	t0 = time.Now()
	var files int
	var size int64
	if _, err := host.Bootstrap(ctx, d.options(second), "routes", host.BootstrapOptions{OnManifest: func(m artifact.Manifest) {
		files = len(m.Files)
		for _, f := range m.Files {
			size += f.Size
		}
	}}); err != nil {
		return err
	}
	d.say("8. a new node bootstraps its fold from the artifact: %d files, %.1f MiB, verified and installed in %v",
		files, float64(size)/(1<<20), time.Since(t0).Round(time.Millisecond))
	b, err := d.fold(ctx, second, "9. the new node folds")
	if err != nil {
		return err
	}
	d.say("   it received %d updates: the delta since the artifact, not the bucket", b.delivered)
	if b.delivered != int64(d.delta) {
		return fmt.Errorf("demo: the bootstrapped fold received %d updates, want the delta %d", b.delivered, d.delta)
	}
	if _, err := d.fold(ctx, storeDir, "10. the first node catches up: folding"); err != nil {
		return err
	}
	same, err := sameFolds(storeDir, second)
	if err != nil {
		return err
	}
	if !same {
		return errors.New("demo: the bootstrapped fold differs from the first one")
	}
	d.say("   both folds hold identical raw entries and views")
	return nil
}

// sameFolds compares the raw entries and views of two stopped folds.
func sameFolds(a, b string) (bool, error) {
	da, err := fold.DigestDir(a)
	if err != nil {
		return false, err
	}
	db, err := fold.DigestDir(b)
	return da == db, err
}
