// Package bench is foldhost's end-to-end measurement (`foldhost bench`),
// reusable by Go benchmarks: the example router's workload written to a
// bucket, the baselines (a plain WatchAll read, a hand-rolled consumer),
// the folds measured against them in alternating rounds, the restart,
// bootstrap, hot swap and effects runs, and the Result they produce (and
// its table). The CLI parses the flags and prints the Result.
package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/internal/textfmt"
	"github.com/foldhost/foldhost/plugins/example-router/embedded"
	"github.com/foldhost/foldhost/plugins/example-router/go/router"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// Shapes are the --shape values: the workload shapes each measures (the
// last one's bucket also serves the restart, hot swap, steady-state and
// effects runs).
var Shapes = map[string][]workload.Shape{
	"ordered": {workload.Ordered},
	"random":  {workload.Random},
	"both":    {workload.Random, workload.Ordered},
}

// Config is one bench's setup. The CLI checks the ranges of its figures.
type Config struct {
	Dir    string // a scratch directory the bench fills (the caller removes it)
	Keys   int    // route keys in the bucket
	Rounds int    // rounds of every variant, alternating
	Delta  int    // updates written before the restart's resume
	Probes int    // probes of each steady-state latency (the fold's, read-your-writes, the effects')
	// Shapes are the workload shapes measured (default both): each gets
	// its own bucket and rounds of the fold variants; the restart, hot
	// swap, steady-state and effects runs use the Ordered one's bucket
	// (or the only one).
	Shapes []workload.Shape
	Seed   uint64 // the workload's seed
	// NATSURL is the server; empty: an embedded one in Dir.
	NATSURL string
	// PluginDir holds the example router's builds (router-<lang>.wasm);
	// when it is DefaultPlugins and holds none, the embedded builds run.
	PluginDir string
	// Only, when set, keeps the variants whose name it matches (and the
	// WatchAll read and the raw-only fold: the ratios need them).
	Only *regexp.Regexp
	// CPUProfile, when set, is the file a CPU profile of the rounds goes to.
	CPUProfile string
	Progress   *progress.Progress // where the phases are shown
	Warn       io.Writer          // the bench's warnings (a bucket it could not delete)
}

// Run measures, and returns what it measured even when a later phase
// failed (with that phase's error): the figures stand on their own.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	b := &bench{warn: cfg.Warn, dir: cfg.Dir, keys: cfg.Keys, delta: cfg.Delta, probes: cfg.Probes,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed)), prog: cfg.Progress, only: cfg.Only, cpuProfile: cfg.CPUProfile, shapes: cfg.Shapes}
	if len(b.shapes) == 0 {
		b.shapes = []workload.Shape{workload.Random, workload.Ordered}
	}
	return b.run(ctx, cfg.NATSURL, cfg.PluginDir, cfg.Rounds)
}

type bench struct {
	shapes     []workload.Shape
	warn       io.Writer // the bench's warnings (stderr)
	dir        string
	keys       int
	delta      int
	rng        *rand.Rand
	only       *regexp.Regexp
	cpuProfile string
	probes     int // the effects steady state's probes
	prog       *progress.Progress
	url        string
	nc         *nats.Conn
	js         jetstream.JetStream
	bucket     string
	head       uint64 // the stream's last revision
	runs       int
	cacheDir   string
	quietLog   *slog.Logger
	effects    *effectsRun // the effects variant's stream and figures; nil: not run
	queries    *queriesRun // the queries variant's figures; nil: not run
	checks     []string    // failed checks of the rounds
	// round is the round a fold being timed belongs to (what: "" outside
	// the rounds), for its progress (foldProgress).
	round struct {
		done, total int64
		what        string
	}
}

// Result is the bench's output (--json).
type Result struct {
	Keys     int       `json:"keys"`
	Rounds   int       `json:"rounds"`
	Server   string    `json:"server"` // "embedded" or "external"
	Variants []Variant `json:"variants"`
	Restart  *Restart  `json:"restart,omitempty"`
	Swap     *Swap     `json:"hot_swap,omitempty"`
	Steady   []Steady  `json:"steady,omitempty"`
	Effects  *Effects  `json:"effects,omitempty"`
	Queries  *Queries  `json:"queries,omitempty"`
	Reads    *Reads    `json:"reads,omitempty"`
	// Checks are the bench's own checks that did not hold (the command
	// exits 1 after printing the figures).
	Checks []string `json:"failed_checks,omitempty"`
}

// Swap is the hot swap's cost under load: the latency from a write to
// its fold (the cursor past it) of probes sent right after a plugin swap
// was asked for, against probes with no swap in flight.
type Swap struct {
	Swaps              int     `json:"swaps"`
	Accepted           int     `json:"accepted"` // reloads the fold accepted: Swaps, or a check failed
	Modules            string  `json:"modules"`
	LoadRate           float64 `json:"load_rate"` // writes/s the load reached (held back while the fold lags)
	BaselineP50Seconds float64 `json:"baseline_p50_seconds"`
	BaselineP99Seconds float64 `json:"baseline_p99_seconds"`
	SwapP50Seconds     float64 `json:"swap_p50_seconds"`
	SwapP99Seconds     float64 `json:"swap_p99_seconds"`
}

// Steady is a fold's live path near the head, under a steady load of
// writes: the latency from a write to its fold (the cursor past it), and
// from a write to the answer of a read of it with ?min_revision (read
// your writes, over the HTTP API), each over Probes probes.
type Steady struct {
	Variant        string  `json:"variant"`
	LoadRate       float64 `json:"load_rate"` // writes/s the load reached (held back while the fold lags)
	Probes         int     `json:"probes"`
	FoldP50Seconds float64 `json:"fold_p50_seconds"`
	FoldP99Seconds float64 `json:"fold_p99_seconds"`
	ReadP50Seconds float64 `json:"read_p50_seconds"`
	ReadP99Seconds float64 `json:"read_p99_seconds"`
	ReadTimeouts   int     `json:"read_timeouts"` // reads answered 504 (counted at their wait)
}

// Effects is what the router's effects cost: the effects variant's
// fold (to the head and the outbox drained) against the same fold without
// effects in the same rounds, and the drain lag under a steady load.
type Effects struct {
	Module string `json:"module"`
	Stream string `json:"stream"`
	// Published is what the last round's fold published (its status),
	// StreamMessages the effects its stream then held (the check: equal);
	// EffectsPerUpdate is Published over the bucket's updates.
	Published        uint64  `json:"published"`
	StreamMessages   uint64  `json:"stream_messages"`
	EffectsPerUpdate float64 `json:"effects_per_update"`
	// Seconds of each round to the head and the outbox drained (the
	// variant's time), HeadSeconds to the head alone. The ratios pair
	// each round with the same round's fold without effects (run just
	// before it, in the same process) and take the median of the rounds'
	// ratios: HeadRatio is the fold's time to the head (the publisher
	// running beside it, as it does in production: its CPU and the
	// server's counted), TimeRatio the time to the head and the outbox
	// drained (the publication of the state-sync's backlog included).
	Seconds     []float64 `json:"seconds"`
	HeadSeconds []float64 `json:"head_seconds"`
	HeadRatio   float64   `json:"head_ratio"`
	TimeRatio   float64   `json:"time_ratio"`
	// The steady state: LoadRate writes/s reached (each changes a host:
	// one effect), and the latency from a probe's KV put to its effect in
	// the stream.
	LoadRate        float64 `json:"load_rate"`
	Probes          int     `json:"probes"`
	DrainP50Seconds float64 `json:"drain_p50_seconds"`
	DrainP99Seconds float64 `json:"drain_p99_seconds"`
}

// Variant is one variant's figures: its rounds and its ratios.
type Variant struct {
	Name string `json:"name"`
	// Shape is the workload's ("ordered" or "random", workload.Shape).
	Shape string `json:"shape"`
	// Seconds of each round; Rate is keys over the median.
	Seconds    []float64 `json:"seconds"`
	Rate       float64   `json:"rate"`
	VsWatchAll float64   `json:"vs_watchall"`
	VsRawFold  float64   `json:"vs_raw_fold,omitempty"`
	// VsNoEffects: the effects variant's rate over the same fold's
	// without effects.
	VsNoEffects float64 `json:"vs_no_effects,omitempty"`
	Description string  `json:"description"`
}

// Restart is the restart's figures: the resume after a delta, and a new
// node bootstrapped from an artifact, each against the full replay.
type Restart struct {
	Delta         int     `json:"delta"`
	ResumeSeconds float64 `json:"resume_seconds"`
	ReplaySeconds float64 `json:"replay_seconds"`
	Ratio         float64 `json:"ratio"`
	// A new node bootstrapped from an artifact of that fold (local
	// directory store), then resumed to the head, against the replay.
	BootstrapSeconds float64 `json:"bootstrap_seconds"`
	ArtifactBytes    int64   `json:"artifact_bytes"`
	BootstrapRatio   float64 `json:"bootstrap_ratio"`
}

// DefaultPlugins is where scripts/build-plugins puts the example router's
// builds; when it holds none, the bench runs the builds the binary carries.
var DefaultPlugins = filepath.Join("plugins", "example-router", "build")

// The variants' names that the ratios and the tests refer to.
const (
	WatchAll = "nats WatchAll"
	Hand     = "hand-rolled (WatchAll + pebble Set)"
	RawFold  = "fold, raw-only"
	Native   = "fold, router native Go"
	// EffectsOf is the fold the effects variant adds its effects to.
	EffectsOf = "fold, router c"
	EffectsV  = "fold, router c, effects"
	QueriesV  = "fold, router c, queries"
)

func (b *bench) run(ctx context.Context, natsURL, pluginDir string, rounds int) (*Result, error) {
	b.quietLog = slog.New(slog.NewTextHandler(io.Discard, nil))
	b.cacheDir = filepath.Join(b.dir, "wasm-cache")
	res := &Result{Keys: b.keys, Rounds: rounds, Server: "external"}
	b.url = natsURL
	if natsURL == "" {
		res.Server = "embedded"
		srv, err := embeddednats.Start(embeddednats.Options{Dir: filepath.Join(b.dir, "nats")})
		if err != nil {
			return nil, err
		}
		defer srv.Shutdown()
		b.url = srv.ClientURL()
	}
	var err error
	if b.nc, err = natskv.Connect(natskv.ConnOptions{URL: b.url, Name: "foldhost-bench"}); err != nil {
		return nil, err
	}
	defer b.nc.Close()
	// The bench saturates the server on purpose: an API answer slower
	// than nats.go's 5 s default (a put's ack, a stream's info) is the load
	// it made, not a failure (race-built on a busy machine, a put's ack took
	// longer). A stall is still caught: every probe has 2 minutes.
	if b.js, err = jetstream.New(b.nc, jetstream.WithDefaultTimeout(time.Minute)); err != nil {
		return nil, err
	}
	var builds []string
	var effectsBuild string
	var w *workload.Writer
	for si, shape := range b.shapes {
		last := si == len(b.shapes)-1
		wr, done, err := b.makeBucket(ctx, shape)
		if err != nil {
			return res, err
		}
		variants, bs, eb := b.variants(pluginDir, shape, last)
		builds, effectsBuild = bs, eb
		vs, err := b.measure(ctx, variants, shape, rounds, eb)
		res.Variants = append(res.Variants, vs...)
		if err == nil && b.effects != nil && last {
			res.Effects = &b.effects.res
		}
		if err == nil && b.queries != nil && last {
			res.Queries = &b.queries.res
		}
		if !last || err != nil {
			done()
			if b.effects != nil {
				b.effects.delete(b)
				b.effects = nil
			}
			if err != nil {
				return res, err
			}
			continue
		}
		defer done()
		if b.effects != nil {
			defer b.effects.delete(b)
		}
		w = wr
	}
	res.Checks = append(res.Checks, b.checks...)
	b.prog.Status("restart: full replay, then a resume after a delta")
	if res.Restart, err = b.restart(ctx, w); err != nil {
		return res, fmt.Errorf("bench: restart: %w", err)
	}
	if len(builds) >= 2 {
		b.prog.Status("hot swap: probes under load, with and without a swap in flight")
		if res.Swap, err = b.hotSwap(ctx, builds[0], builds[1]); err != nil {
			return res, fmt.Errorf("bench: hot swap: %w", err)
		}
		if n := res.Swap.Accepted; n != res.Swap.Swaps {
			res.Checks = append(res.Checks, fmt.Sprintf("hot swap: %d swaps asked for, %d accepted", res.Swap.Swaps, n))
		}
	}
	for _, sv := range b.steadyVariants(builds) {
		b.prog.Status("steady state: " + sv.name + ": write-to-fold and read-your-writes latency under load")
		st, rd, err := b.steady(ctx, sv.name, sv.plugin)
		if err != nil {
			return res, fmt.Errorf("bench: steady state, %s: %w", sv.name, err)
		}
		res.Steady = append(res.Steady, *st)
		if rd != nil {
			res.Reads = rd
		}
	}
	if res.Effects != nil {
		b.prog.Status("effects: probes' write-to-effect latency under load")
		if err := b.effectsSteady(ctx, effectsBuild, res.Effects); err != nil {
			return res, fmt.Errorf("bench: effects, steady state: %w", err)
		}
	}
	return res, nil
}

// variant is one way to read the bucket to its head, timed.
type variant struct {
	name, desc string
	run        func(context.Context) (time.Duration, error)
}

// makeBucket makes a bucket of the workload's shape (b.bucket), fills it
// and reads its head; done deletes it.
func (b *bench) makeBucket(ctx context.Context, shape workload.Shape) (*workload.Writer, func(), error) {
	b.bucket = fmt.Sprintf("foldhost_bench_%08x", rand.Uint32())
	if _, err := b.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: b.bucket, History: 1}); err != nil {
		return nil, nil, fmt.Errorf("bench bucket %s: %w", b.bucket, err)
	}
	bucket := b.bucket
	done := func() {
		dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := b.js.DeleteKeyValue(dctx, bucket); err != nil {
			fmt.Fprintf(b.warn, "foldhost: bench: could not delete its bucket %s: %v\n", bucket, err)
		}
	}
	start := time.Now()
	what := fmt.Sprintf("writing %d keys (%s shape) to bucket %s", b.keys, shape, b.bucket)
	w := &workload.Writer{JS: b.js, Bucket: b.bucket, Hosts: b.keys, Rand: b.rng, Shape: shape,
		Progress: func(n int) { b.prog.Update(int64(n), int64(b.keys), what+eta(start, n, b.keys)) }}
	b.prog.Status(what)
	if err := w.Initial(ctx); err != nil {
		done()
		return nil, nil, err
	}
	b.prog.End()
	if err := b.readHead(ctx); err != nil {
		done()
		return nil, nil, err
	}
	return w, done, nil
}

// foldProgress shows how far f, started at start, has folded the bucket:
// within its round's share of the rounds' bar, or as a status line.
func (b *bench) foldProgress(start time.Time, f *host.Fold) {
	cur := min(uint64(f.Store().Cursor().Rev), b.head)
	line := fmt.Sprintf("%d of %d updates folded%s", cur, b.head, eta(start, int(cur), int(b.head)))
	if b.round.what == "" || b.head == 0 {
		b.prog.Status("catching up: " + line)
		return
	}
	// Per mille of a round, so the bar's figures stay in int64.
	b.prog.Update(b.round.done*1000+int64(cur*1000/b.head), b.round.total*1000, b.round.what+": "+line)
}

// eta is ", ETA <d>" for n of total done since start ("" until known).
func eta(start time.Time, n, total int) string {
	el := time.Since(start)
	if n == 0 || n >= total || el < time.Second {
		return ""
	}
	return ", ETA " + (time.Duration(float64(el) / float64(n) * float64(total-n))).Round(time.Second).String()
}

// variants are the variants measured on a bucket of shape: all of them on
// the last shape's (the effects variant included); on another, the
// baselines and the folds (not the hand-rolled consumer, nor effects).
// builds are the router builds found, effectsBuild the C one.
func (b *bench) variants(pluginDir string, shape workload.Shape, last bool) (variants []variant, builds []string, effectsBuild string) {
	variants = []variant{
		{WatchAll, "a plain nats.go KV WatchAll read of the bucket", b.watchAll},
		{Hand, "WatchAll and a pebble Set per update, default options", b.handRolled},
		{RawFold, "foldhost, no plugin, from Start", func(ctx context.Context) (time.Duration, error) { return b.hostFold(ctx, "") }},
	}
	if !last {
		variants = slices.Delete(variants, 1, 2)
	}
	builds, _ = filepath.Glob(filepath.Join(pluginDir, "router-*.wasm"))
	slices.Sort(builds)
	if len(builds) == 0 && pluginDir == DefaultPlugins {
		// Outside the repository: the builds the binary carries.
		for _, lang := range embedded.Langs {
			p, err := embedded.WriteFile(b.dir, lang)
			if err == nil {
				builds = append(builds, p)
			}
		}
	}
	for _, p := range builds {
		lang := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(p), "router-"), ".wasm")
		variants = append(variants, variant{"fold, router " + lang, "foldhost through the example router's " + lang + " build (" + filepath.Base(p) + ")",
			func(ctx context.Context) (time.Duration, error) { return b.hostFold(ctx, p) }})
		if lang == "c" {
			effectsBuild = p
			if last {
				variants = append(variants, variant{EffectsV, "the same, its effects published to a stream: from Start to the head and the outbox drained",
					func(ctx context.Context) (time.Duration, error) { return b.effectsFold(ctx, p) }},
					variant{QueriesV, fmt.Sprintf("the same, %d clients asking queries back to back from Start to the head", QueryClients),
						func(ctx context.Context) (time.Duration, error) { return b.queriesFold(ctx, p) }})
			}
		}
	}
	variants = append(variants, variant{Native, "fold.Follow through the router's Go code run natively (no module)", b.nativeFold})
	if len(builds) == 0 && last {
		fmt.Fprintf(b.warn, "foldhost: bench: no router-*.wasm in %s: plugin folds not measured\n", pluginDir)
	}
	if b.only != nil {
		// The effects and queries variants' ratios need the same fold
		// without them.
		keepEffectsOf := b.only.MatchString(EffectsV) || b.only.MatchString(QueriesV)
		variants = slices.DeleteFunc(variants, func(v variant) bool {
			return v.name != WatchAll && v.name != RawFold && !b.only.MatchString(v.name) &&
				!(v.name == EffectsOf && keepEffectsOf)
		})
	}
	return variants, builds, effectsBuild
}

// measure runs the variants' rounds, alternating, on the current bucket
// (of shape), and returns their figures.
func (b *bench) measure(ctx context.Context, variants []variant, shape workload.Shape, rounds int, effectsBuild string) ([]Variant, error) {
	if slices.ContainsFunc(variants, func(v variant) bool { return v.name == EffectsV }) {
		var err error
		if b.effects, err = b.makeEffectsStream(ctx, effectsBuild); err != nil {
			return nil, err
		}
	}
	if i := slices.IndexFunc(variants, func(v variant) bool { return v.name == QueriesV }); i >= 0 {
		b.queries = &queriesRun{res: Queries{Module: filepath.Base(effectsBuild), Clients: QueryClients}}
	}
	if b.cpuProfile != "" {
		f, err := os.Create(fmt.Sprintf("%s.%s", b.cpuProfile, shape))
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	secs := make([][]float64, len(variants))
	total := rounds * len(variants)
	for r := range rounds {
		for i, v := range variants {
			b.round.done, b.round.total = int64(r*len(variants)+i), int64(total)
			b.round.what = fmt.Sprintf("%s shape, round %d/%d: %s", shape, r+1, rounds, v.name)
			b.prog.Update(b.round.done, b.round.total, b.round.what)
			var took time.Duration
			var err error
			// Labelled, so that a profile can be cut to one variant
			// (go tool pprof -tagfocus variant=...): goroutines the
			// variant starts inherit the label.
			pprof.Do(ctx, pprof.Labels("variant", v.name), func(ctx context.Context) { took, err = v.run(ctx) })
			if err != nil {
				return nil, fmt.Errorf("bench: %s (%s shape): %w", v.name, shape, err)
			}
			secs[i] = append(secs[i], took.Seconds())
		}
	}
	b.round.what = ""
	b.prog.Update(int64(total), int64(total), "rounds done")
	b.prog.End()
	var watchAll, rawFold, effectsOf float64
	var effectsOfRounds []float64
	for i, v := range variants {
		if v.name == EffectsOf {
			effectsOf, effectsOfRounds = Median(secs[i]), secs[i]
		}
	}
	var out []Variant
	for i, v := range variants {
		med := Median(secs[i])
		bv := Variant{Name: v.name, Shape: shape.String(), Seconds: secs[i], Rate: float64(b.head) / med, Description: v.desc}
		switch v.name {
		case WatchAll:
			watchAll = bv.Rate
		case RawFold:
			rawFold = bv.Rate
		}
		bv.VsWatchAll = bv.Rate / watchAll
		if strings.HasPrefix(v.name, "fold, router") {
			bv.VsRawFold = bv.Rate / rawFold
		}
		if v.name == EffectsV {
			bv.VsNoEffects = effectsOf / med
			e := &b.effects.res
			e.Seconds = secs[i]
			e.HeadRatio, e.TimeRatio = pairedRatio(e.HeadSeconds, effectsOfRounds), pairedRatio(secs[i], effectsOfRounds)
			e.EffectsPerUpdate = float64(e.Published) / float64(b.head)
		}
		if v.name == QueriesV {
			b.queries.finish(effectsOfRounds)
		}
		out = append(out, bv)
	}
	return out, nil
}

func (b *bench) readHead(ctx context.Context) error {
	s, err := b.js.Stream(ctx, "KV_"+b.bucket)
	if err != nil {
		return err
	}
	b.head = s.CachedInfo().State.LastSeq
	return nil
}

// watchAll reads every current entry of the bucket.
func (b *bench) watchAll(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := b.consume(ctx, func(jetstream.KeyValueEntry) error { return nil })
	return time.Since(t0), err
}

// consume calls fn for every entry of the bucket's initial state.
func (b *bench) consume(ctx context.Context, fn func(jetstream.KeyValueEntry) error) error {
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil {
			return nil
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return errors.New("the watch ended early")
}

// handRolled is the consumer a user could write in an afternoon.
func (b *bench) handRolled(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	dir := b.nextDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: fold.PebbleLogger(b.quietLog)})
	if err != nil {
		return 0, err
	}
	err = b.consume(ctx, func(e jetstream.KeyValueEntry) error {
		return db.Set([]byte(e.Key()), e.Value(), pebble.NoSync)
	})
	took := time.Since(t0)
	return took, errors.Join(err, db.Close(), os.RemoveAll(dir))
}

func (b *bench) nextDir() string {
	b.runs++
	return filepath.Join(b.dir, fmt.Sprintf("run%03d", b.runs))
}

func (b *bench) hostOptions(dir, plugin string) host.Options {
	return host.Options{
		NATS:           host.NATSOptions{Conn: natskv.ConnOptions{URL: b.url, Name: "foldhost-bench"}},
		PluginCacheDir: b.cacheDir,
		Logger:         b.quietLog,
		Folds: []host.FoldOptions{{Name: "bench", Bucket: b.bucket, Plugin: plugin, DataDir: dir,
			PluginCallTimeout: wasm.NoCallTimeout}},
	}
}

// hostFold folds the bucket into a fresh store, from Start to the head.
func (b *bench) hostFold(ctx context.Context, plugin string) (time.Duration, error) {
	dir := b.nextDir()
	took, err := b.runHost(ctx, b.hostOptions(dir, plugin))
	if err != nil {
		return 0, err
	}
	return took, os.RemoveAll(dir)
}

// runHost starts a host on o, waits until its fold reached the head, stops
// it and returns the time from the start to the head.
func (b *bench) runHost(ctx context.Context, o host.Options) (time.Duration, error) {
	took, _, err := b.runHostThen(ctx, o, nil)
	return took, err
}

// runHostThen is runHost that, once at the head, goes on until then holds
// (nil: at once), and returns the time to the head and the time to then.
func (b *bench) runHostThen(ctx context.Context, o host.Options, then func(*host.Fold) (bool, error)) (time.Duration, time.Duration, error) {
	return b.runHostBeside(ctx, o, nil, then)
}

// runHostBeside is runHostThen with beside (when not nil) run on the fold
// from its start to the head: it must return once its context ends.
func (b *bench) runHostBeside(ctx context.Context, o host.Options, beside func(context.Context, *host.Fold), then func(*host.Fold) (bool, error)) (time.Duration, time.Duration, error) {
	t0 := time.Now()
	h, err := host.New(o)
	if err != nil {
		return 0, 0, err
	}
	if err := h.Start(ctx); err != nil {
		return 0, 0, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	f := h.Folds()[0]
	bctx, stopBeside := context.WithCancel(ctx)
	besideDone := make(chan struct{})
	go func() {
		defer close(besideDone)
		if beside != nil {
			beside(bctx, f)
		}
	}()
	// The fold's status is read every 100 polls (about 0.1 s): it is not
	// free (a store read), and reading it every millisecond took CPU from
	// the fold it times (the effects variant's wait for the outbox to
	// drain, most of all).
	polls := 0
	failed := func() error {
		if polls++; polls%100 != 0 {
			return nil
		}
		b.foldProgress(t0, f)
		if st := f.Status(); st.State == "failed" {
			return fmt.Errorf("the fold failed: %s", st.LastError)
		}
		return nil
	}
	err = waitUntil(ctx, func() (bool, error) { return uint64(f.Store().Cursor().Rev) >= b.head, failed() })
	took := time.Since(t0)
	stopBeside()
	<-besideDone
	thenTook := took
	if err == nil && then != nil {
		err = waitUntil(ctx, func() (bool, error) {
			if err := failed(); err != nil {
				return false, err
			}
			return then(f)
		})
		thenTook = time.Since(t0)
	}
	cancel()
	err = errors.Join(err, <-done)
	h.Close()
	return took, thenTook, err
}

// nativeFold folds the bucket with fold.Follow through the router's Go
// code run in-process: foldhost's loop and store, no module.
func (b *bench) nativeFold(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	dir := b.nextDir()
	st, _, err := fold.Open(dir, fold.Options{Logger: b.quietLog})
	if err != nil {
		return 0, err
	}
	bk, err := natskv.OpenBucket(ctx, b.nc, natskv.BucketConfig{Name: b.bucket, History: 1}, natskv.Options{})
	if err != nil {
		return 0, errors.Join(err, st.Close())
	}
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		_, err := fold.Follow(fctx, bk.Feed(natskv.Scope{}, natskv.WatchOptions{}), st,
			wasm.NewNative[router.Record](&router.Router{}), fold.FollowConfig{Loop: fold.LoopConfig{Logger: b.quietLog}})
		done <- err
	}()
	err = waitUntil(ctx, func() (bool, error) { return uint64(st.Cursor().Rev) >= b.head, nil })
	took := time.Since(t0)
	cancel()
	return took, errors.Join(err, <-done, st.Close(), os.RemoveAll(dir))
}

// restart folds the bucket raw-only (the full replay), writes the delta,
// and resumes the same store (the resume).
func (b *bench) restart(ctx context.Context, w *workload.Writer) (*Restart, error) {
	dir := b.nextDir()
	o := b.hostOptions(dir, "")
	replay, err := b.runHost(ctx, o)
	if err != nil {
		return nil, err
	}
	if err := w.Delta(ctx, b.delta); err != nil {
		return nil, err
	}
	if err := b.readHead(ctx); err != nil {
		return nil, err
	}
	resume, err := b.runHost(ctx, o)
	if err != nil {
		return nil, err
	}
	res := &Restart{Delta: b.delta, ResumeSeconds: resume.Seconds(), ReplaySeconds: replay.Seconds(),
		Ratio: resume.Seconds() / replay.Seconds()}

	// The same fold as an artifact; a new node bootstrapped from it.
	b.prog.Status("bootstrap: exporting the fold, then a new node from the artifact")
	arts, err := dirstore.New(filepath.Join(b.dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	o.Artifacts = host.ArtifactOptions{Store: arts, Where: "bench", Holder: "bench"}
	if _, err := host.ExportStopped(ctx, o, "bench", true); err != nil { // force: no lease bucket on the server
		return nil, fmt.Errorf("export: %w", err)
	}
	o2 := o
	o2.Folds = slices.Clone(o.Folds)
	o2.Folds[0].DataDir = b.nextDir()
	t0 := time.Now()
	br, err := host.Bootstrap(ctx, o2, "bench", host.BootstrapOptions{})
	if err != nil {
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	boot := time.Since(t0)
	caughtUp, err := b.runHost(ctx, o2) // to the head, as the replay is timed
	if err != nil {
		return nil, err
	}
	res.BootstrapSeconds = (boot + caughtUp).Seconds()
	res.ArtifactBytes = br.Bytes
	res.BootstrapRatio = res.BootstrapSeconds / res.ReplaySeconds
	return res, errors.Join(os.RemoveAll(dir), os.RemoveAll(o2.Folds[0].DataDir))
}

// hotSwap folds the bucket through module a, then, under a steady load of
// writes, sends probes and measures each one's latency to the fold:
// baseline probes, and probes sent right after asking the host to swap to
// the other module (a reload: validated off the hot path, swapped at the
// next batch).
// swapMaxLag is how far (in revisions, about a second of the hot
// swap's load) the fold may fall behind before the load holds back.
const swapMaxLag = 5000

func (b *bench) hotSwap(ctx context.Context, a, c string) (*Swap, error) {
	const probes, swaps = 200, 40
	mods := [2][]byte{}
	for i, p := range []string{a, c} {
		var err error
		if mods[i], err = os.ReadFile(p); err != nil {
			return nil, err
		}
	}
	dir := b.nextDir()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	plugin := filepath.Join(dir, "plugin.wasm")
	place := func(m []byte) error {
		if err := os.WriteFile(plugin+".tmp", m, 0o644); err != nil {
			return err
		}
		return os.Rename(plugin+".tmp", plugin)
	}
	if err := place(mods[0]); err != nil {
		return nil, err
	}
	h, err := host.New(b.hostOptions(filepath.Join(dir, "fold"), plugin))
	if err != nil {
		return nil, err
	}
	f, stop, err := b.caughtUp(ctx, h)
	if err != nil {
		return nil, err
	}
	defer stop()
	// The load holds back while the fold is more than a second of it behind.
	load := b.steadyLoad(ctx, func(head uint64) bool { return head > uint64(f.Store().Cursor().Rev)+swapMaxLag },
		func(int) []byte { return []byte(`{"upstreams":[{"addr":"10.9.9.9:80"}]}`) })
	defer load.stop(b.js)
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return nil, err
	}
	probe := func(i int) (float64, error) {
		t0 := time.Now()
		rev, err := kv.Put(ctx, workload.Key(i%b.keys), []byte(`{"upstreams":[{"addr":"10.8.8.8:80"}]}`))
		if err != nil {
			return 0, err
		}
		err = waitFolded(ctx, f, rev)
		if err != nil && ctx.Err() == nil {
			err = fmt.Errorf("bench: hot swap: %w", err)
		}
		return time.Since(t0).Seconds(), err
	}
	var base, swapped []float64
	for i := range probes {
		d, err := probe(i)
		if err != nil {
			return nil, err
		}
		base = append(base, d)
		if i%(probes/swaps) != 0 {
			continue
		}
		if err := place(mods[(len(swapped)+1)%2]); err != nil {
			return nil, err
		}
		if err := h.ReloadPlugins(ctx); err != nil {
			return nil, err
		}
		if d, err = probe(i + 1); err != nil {
			return nil, err
		}
		swapped = append(swapped, d)
	}
	return &Swap{Swaps: len(swapped), Accepted: int(f.Status().Plugin.Reloads.Accepted), Modules: filepath.Base(a) + " <-> " + filepath.Base(c),
		LoadRate:           load.stop(b.js),
		BaselineP50Seconds: quantile(base, 0.5), BaselineP99Seconds: quantile(base, 0.99),
		SwapP50Seconds: quantile(swapped, 0.5), SwapP99Seconds: quantile(swapped, 0.99)}, nil
}

type steadyVariant struct{ name, plugin string }

// steadyVariants are the folds whose live path the steady run measures:
// the raw-only fold, and the router's C build when found (and --only
// keeps it).
func (b *bench) steadyVariants(builds []string) []steadyVariant {
	out := []steadyVariant{{RawFold, ""}}
	for _, p := range builds {
		if filepath.Base(p) == "router-c.wasm" && (b.only == nil || b.only.MatchString(EffectsOf)) {
			out = append(out, steadyVariant{EffectsOf, p})
		}
	}
	return out
}

// steady measures a fold's live path: caught up, under steadyLoad's
// writes, half of the probes time a write to its fold (the cursor past
// it), the other half a write to the answer of a read of its key with
// ?min_revision=<its revision> over the HTTP API (read your writes).
//
// With a plugin, the fold's reads are measured first, with no writes
// coming (Reads).
func (b *bench) steady(ctx context.Context, name, plugin string) (st *Steady, rd *Reads, err error) {
	h, err := host.New(b.hostOptions(filepath.Join(b.nextDir(), "fold"), plugin))
	if err != nil {
		return nil, nil, err
	}
	f, stop, err := b.caughtUp(ctx, h)
	if err != nil {
		return nil, nil, err
	}
	defer stop()
	web := httptest.NewServer(h.Handler())
	defer web.Close()
	if plugin != "" {
		b.prog.Status("reads: " + name + ": point reads, pages of the view and a query, at rest")
		if rd, err = b.reads(ctx, f, web.URL, filepath.Base(plugin)); err != nil {
			return nil, nil, fmt.Errorf("reads: %w", err)
		}
		b.prog.Status("steady state: " + name + ": write-to-fold and read-your-writes latency under load")
	}
	load := b.steadyLoad(ctx, func(head uint64) bool { return head > uint64(f.Store().Cursor().Rev)+swapMaxLag },
		func(int) []byte { return []byte(`{"upstreams":[{"addr":"10.9.9.9:80"}]}`) })
	defer load.stop(b.js)
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return nil, nil, err
	}
	st = &Steady{Variant: name, Probes: b.probes}
	var folds, reads []float64
	for i := range b.probes {
		key := workload.Key((i * 7919) % b.keys)
		t0 := time.Now()
		rev, err := kv.Put(ctx, key, []byte(`{"upstreams":[{"addr":"10.8.8.8:80"}]}`))
		if err != nil {
			return nil, nil, err
		}
		if i%2 == 0 {
			if err := waitFolded(ctx, f, rev); err != nil {
				return nil, nil, err
			}
			folds = append(folds, time.Since(t0).Seconds())
			continue
		}
		resp, err := http.Get(fmt.Sprintf("%s/v1/folds/%s/raw?key=%s&min_revision=%d&wait=10s", web.URL, f.Name(), key, rev))
		if err != nil {
			return nil, nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case http.StatusOK:
		case http.StatusGatewayTimeout:
			st.ReadTimeouts++
		default:
			return nil, nil, fmt.Errorf("read of probe %s at min_revision %d: %s", key, rev, resp.Status)
		}
		reads = append(reads, time.Since(t0).Seconds())
	}
	st.LoadRate = load.stop(b.js)
	st.FoldP50Seconds, st.FoldP99Seconds = quantile(folds, 0.5), quantile(folds, 0.99)
	st.ReadP50Seconds, st.ReadP99Seconds = quantile(reads, 0.5), quantile(reads, 0.99)
	return st, rd, nil
}

// caughtUp starts h, runs it, and waits until its fold reached the
// bucket's head; stop ends the run and closes h (on an error h is closed).
func (b *bench) caughtUp(ctx context.Context, h *host.Host) (*host.Fold, func(), error) {
	if err := h.Start(ctx); err != nil {
		h.Close()
		return nil, nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	stop := func() { cancel(); <-done; h.Close() }
	f := h.Folds()[0]
	t0, polls := time.Now(), 0
	if err := waitUntil(ctx, func() (bool, error) {
		if polls++; polls%100 == 0 {
			b.foldProgress(t0, f)
		}
		return uint64(f.Store().Cursor().Rev) >= b.head, nil
	}); err != nil {
		stop()
		return nil, nil, err
	}
	return f, stop, nil
}

// writeLoad is a steady load of writes (steadyLoad).
type writeLoad struct {
	cancel context.CancelFunc
	done   chan struct{}
	writes atomic.Int64
	start  time.Time
	once   sync.Once
	rate   float64
}

// steadyLoad writes 50 route updates every 10 ms, about 5000/s, the i-th
// one value(i) to host i mod --keys, until stopped. It holds back while
// behind(head) (head: the bucket's last acknowledged revision): a machine
// whose fold cannot keep up (the race detector, both cores busy) would
// otherwise see the lag grow without end and no probe ever arrive. The
// rate the load reached (stop's) is reported beside the latencies.
func (b *bench) steadyLoad(ctx context.Context, behind func(head uint64) bool, value func(i int) []byte) *writeLoad {
	lctx, cancel := context.WithCancel(ctx)
	l := &writeLoad{cancel: cancel, done: make(chan struct{}), start: time.Now()}
	go func() {
		defer close(l.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		var last jetstream.PubAckFuture
		var head uint64
		for i := 0; ; {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			if last != nil {
				select {
				case ack := <-last.Ok():
					head = ack.Sequence
				case <-last.Err():
				default:
				}
			}
			if behind(head) {
				continue
			}
			for range 50 {
				k := workload.Key(i % b.keys)
				v := value(i)
				i++
				if fut, err := b.js.PublishAsync(fmt.Sprintf("$KV.%s.%s", b.bucket, k), v); err == nil {
					last = fut
					l.writes.Add(1)
				}
			}
		}
	}()
	return l
}

// stop stops the load (once), waits (up to a minute) until its writes are
// acknowledged, and returns the rate it reached, writes/s.
func (l *writeLoad) stop(js jetstream.JetStream) float64 {
	l.once.Do(func() {
		l.rate = float64(l.writes.Load()) / time.Since(l.start).Seconds()
		l.cancel()
		<-l.done
		select {
		case <-js.PublishAsyncComplete():
		case <-time.After(time.Minute):
		}
	})
	return l.rate
}

// effectsRun is the effects variant's stream, and its figures.
type effectsRun struct {
	stream jetstream.Stream
	fence  string
	res    Effects
}

// effectsSubject is the subject of the router's effects (its SPEC.md).
const effectsSubject = "route.changed"

// makeEffectsStream makes the bench's own effects stream: it captures the
// router's subject and the fold's fence, named after the bench's bucket
// so that it claims no other fold's fence, and allows the atomic batches
// the publisher sends.
func (b *bench) makeEffectsStream(ctx context.Context, build string) (*effectsRun, error) {
	name, fence := b.bucket+"_effects", "foldhost.fence."+b.bucket
	s, err := b.js.CreateStream(ctx, jetstream.StreamConfig{Name: name, Subjects: []string{effectsSubject, fence}, AllowAtomicPublish: true})
	if err != nil {
		return nil, fmt.Errorf("bench: effects stream %s, capturing %s and %s: %w", name, effectsSubject, fence, err)
	}
	return &effectsRun{stream: s, fence: fence, res: Effects{Module: filepath.Base(build), Stream: name}}, nil
}

func (e *effectsRun) delete(b *bench) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := b.js.DeleteStream(ctx, e.res.Stream); err != nil {
		fmt.Fprintf(b.warn, "foldhost: bench: could not delete its stream %s: %v\n", e.res.Stream, err)
	}
}

// count is how many effects the stream holds (the fence left out).
func (e *effectsRun) count(ctx context.Context) (uint64, error) {
	info, err := e.stream.Info(ctx, jetstream.WithSubjectFilter(effectsSubject))
	if err != nil {
		return 0, err
	}
	return info.State.Subjects[effectsSubject], nil
}

func (b *bench) effectsOptions(dir, plugin string) host.Options {
	o := b.hostOptions(dir, plugin)
	o.Folds[0].EffectsStream, o.Folds[0].EffectsFence = b.effects.res.Stream, b.effects.fence
	return o
}

// effectsFold folds the bucket through plugin into a fresh store with its
// effects published to the bench's stream, emptied first (each round's
// fold starts from an empty store, a state-sync: it emits an effect for
// every host the bucket's values give an entry). It returns the time from
// Start to the head and the outbox drained, records the time to the head
// alone, and checks that the stream holds as many effects as the fold
// says it published.
func (b *bench) effectsFold(ctx context.Context, plugin string) (time.Duration, error) {
	e := b.effects
	if err := e.stream.Purge(ctx); err != nil {
		return 0, err
	}
	dir := b.nextDir()
	var fst *host.Fold
	toHead, took, err := b.runHostThen(ctx, b.effectsOptions(dir, plugin), func(f *host.Fold) (bool, error) {
		fst = f
		return f.Store().OutboxLen() == 0, nil
	})
	if err != nil {
		return 0, err
	}
	e.res.HeadSeconds = append(e.res.HeadSeconds, toHead.Seconds())
	// The published count follows the outbox's delete: wait for it to
	// match the stream (the check fails after 10 s).
	var st *httpapi.EffectsStatus
	var inStream uint64
	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	werr := waitUntil(wctx, func() (bool, error) {
		st = fst.Status().Effects
		n, err := e.count(wctx)
		inStream = n
		return err == nil && st != nil && st.Published == n, nil
	})
	switch {
	case werr != nil && ctx.Err() != nil:
		return 0, ctx.Err()
	case st == nil:
		b.checks = append(b.checks, "effects: the fold's status counts no effects")
	default:
		e.res.Published, e.res.StreamMessages = st.Published, inStream
		if st.Published != inStream || st.Published == 0 || st.Dropped > 0 {
			b.checks = append(b.checks, fmt.Sprintf("effects: the fold published %d effects (%d dropped), its stream holds %d", st.Published, st.Dropped, inStream))
		}
	}
	return took, os.RemoveAll(dir)
}

// effectsSteady folds the bucket through plugin with its effects, then,
// under a steady load whose every write changes a host (one effect each),
// sends probes and measures each one's latency from its KV put to its
// effect in the stream, as an ordered consumer of the stream receives it.
// The load also holds back while the outbox holds more than a second of
// it: the rate reached is what the fold and the publisher keep up with.
func (b *bench) effectsSteady(ctx context.Context, plugin string, res *Effects) (err error) {
	probes := b.probes
	e := b.effects
	if err := e.stream.Purge(ctx); err != nil {
		return err
	}
	// The head as it is now (the hot swap's load wrote the bucket): the
	// load and the probes start once the fold is there, since a write
	// during the state-sync can be passed over by it (a key's newer value
	// listed instead).
	if err := b.readHead(ctx); err != nil {
		return err
	}
	dir := b.nextDir()
	defer func() { err = errors.Join(err, os.RemoveAll(dir)) }()
	h, err := host.New(b.effectsOptions(dir, plugin))
	if err != nil {
		return err
	}
	if err := h.Start(ctx); err != nil {
		return err
	}
	defer h.Close()
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- h.Run(rctx) }()
	defer func() { cancel(); err = errors.Join(err, <-done) }()
	f := h.Folds()[0]
	// The state-sync's effects drained first.
	if err := waitUntil(ctx, func() (bool, error) {
		return uint64(f.Store().Cursor().Rev) >= b.head && f.Store().OutboxLen() == 0, nil
	}); err != nil {
		return err
	}
	// A probe's effect is its payload, "<host>\n<entry>": unique to it.
	var mu sync.Mutex
	waiting := map[string]chan time.Time{}
	// From the stream's next message, named: an ordered consumer that
	// resets before its first delivery starts again at its start policy,
	// and "new" would then skip what came in between.
	info, err := e.stream.Info(ctx)
	if err != nil {
		return err
	}
	cons, err := e.stream.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{FilterSubjects: []string{effectsSubject},
		DeliverPolicy: jetstream.DeliverByStartSequencePolicy, OptStartSeq: info.State.LastSeq + 1})
	if err != nil {
		return err
	}
	var consumed atomic.Uint64
	cc, err := cons.Consume(func(m jetstream.Msg) {
		at := time.Now()
		consumed.Add(1)
		mu.Lock()
		ch := waiting[string(m.Data())]
		delete(waiting, string(m.Data()))
		mu.Unlock()
		if ch != nil {
			ch <- at
		}
	})
	if err != nil {
		return err
	}
	defer func() { cc.Stop(); <-cc.Closed() }()
	// The load also holds back while this bench's own consumer of the
	// stream lags (a race-built one on a busy machine read slower than
	// 5000/s, and a probe's effect, published, was not read in 2 minutes).
	published0 := f.Status().Effects.Published
	load := b.steadyLoad(ctx, func(head uint64) bool {
		published := f.Status().Effects.Published - published0
		return head > uint64(f.Store().Cursor().Rev)+swapMaxLag || f.Store().OutboxLen() > swapMaxLag ||
			published > consumed.Load()+swapMaxLag
	}, func(i int) []byte {
		pass := i / b.keys // each pass writes every host an address it did not have
		return fmt.Appendf(nil, `{"upstreams":[{"addr":"10.9.%d.%d:80"}]}`, pass/250%250, pass%250)
	})
	defer load.stop(b.js)
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return err
	}
	var lat []float64
	for i := range probes {
		// A host of its own, new (the load writes the workload's hosts).
		key, addr := fmt.Sprintf("route.probe%05d", i), "10.8.8.8:80"
		ch := make(chan time.Time, 1)
		mu.Lock()
		waiting[strings.TrimPrefix(key, "route.")+"\n"+addr+"=1"] = ch
		mu.Unlock()
		t0 := time.Now()
		if _, err := kv.Put(ctx, key, fmt.Appendf(nil, `{"upstreams":[{"addr":%q}]}`, addr)); err != nil {
			return err
		}
		// A probe whose effect has not arrived in two minutes is a stall,
		// said so, not a bench that never ends.
		pctx, pcancel := context.WithTimeout(ctx, 2*time.Minute)
		select {
		case at := <-ch:
			lat = append(lat, at.Sub(t0).Seconds())
		case <-pctx.Done():
		}
		pcancel()
		if len(lat) <= i {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			st := f.Status()
			return fmt.Errorf("the effect of probe %d (%s) was not in the stream 2 minutes after its write (fold %s at %d, effects %+v)",
				i, key, st.State, f.Store().Cursor().Rev, st.Effects)
		}
	}
	res.LoadRate, res.Probes = load.stop(b.js), len(lat)
	res.DrainP50Seconds, res.DrainP99Seconds = quantile(lat, 0.5), quantile(lat, 0.99)
	return nil
}

// pairedRatio is the median over the rounds of xs[r] / base[r]: each
// round against the same round's baseline, so that a load that comes and
// goes on the machine weighs on both sides of a ratio.
func pairedRatio(xs, base []float64) float64 {
	var rs []float64
	for r := range min(len(xs), len(base)) {
		rs = append(rs, xs[r]/base[r])
	}
	if len(rs) == 0 {
		return 0
	}
	return Median(rs)
}

// waitFolded waits until f's cursor reaches rev. A fold whose cursor has
// not moved for two minutes is a stall, said so, not a bench that never
// ends; one that moves is waited for however slow (a race-built fold on a
// starved machine took over two minutes for the 5000 revisions the load
// may run ahead).
func waitFolded(ctx context.Context, f *host.Fold, rev uint64) error {
	last, moved := uint64(f.Store().Cursor().Rev), time.Now()
	return waitUntil(ctx, func() (bool, error) {
		cur := uint64(f.Store().Cursor().Rev)
		switch {
		case cur >= rev:
			return true, nil
		case cur != last:
			last, moved = cur, time.Now()
		case time.Since(moved) > 2*time.Minute:
			return false, fmt.Errorf("the fold stalled short of probe revision %d: its cursor stayed at %d for 2 minutes", rev, cur)
		}
		return false, nil
	})
}

// quantile is the q-quantile of xs (nearest rank).
func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	i := int(q*float64(len(s)) + 0.5)
	return s[min(max(i-1, 0), len(s)-1)]
}

// waitUntil polls cond every millisecond until it holds, fails, or ctx ends.
func waitUntil(ctx context.Context, cond func() (bool, error)) error {
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for {
		ok, err := cond()
		if ok || err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}

// Median is the median of xs.
func Median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if n := len(s); n%2 == 0 {
		return (s[n/2-1] + s[n/2]) / 2
	}
	return s[len(s)/2]
}

// WriteTable writes r as the table `foldhost bench` prints: the variants'
// rates and ratios, then a line for the restart, the hot swap and the
// effects, and the checks that failed.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "foldhost bench: %d keys, %d rounds, %s NATS server (median of the rounds; rates vary with the machine's load, ratios hold)\n\n", r.Keys, r.Rounds, r.Server)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SHAPE\tVARIANT\tUPDATES/S\tVS WATCHALL\tVS RAW FOLD")
	for _, v := range r.Variants {
		vsRaw := ""
		if v.VsRawFold > 0 {
			vsRaw = fmt.Sprintf("%.2f×", v.VsRawFold)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f×\t%s\n", v.Shape, v.Name, humanRate(v.Rate), v.VsWatchAll, vsRaw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rs := r.Restart; rs != nil {
		fmt.Fprintf(w, "\nrestart, raw-only fold: resume after a delta of %d updates %s; full replay of the bucket %s; resume / replay = %.1f%%\n",
			rs.Delta, fmtSeconds(rs.ResumeSeconds), fmtSeconds(rs.ReplaySeconds), 100*rs.Ratio)
		fmt.Fprintf(w, "new node, raw-only fold: bootstrap from an artifact (%s, local directory) and resume %s; bootstrap / replay = %.1f%%\n",
			textfmt.HumanBytes(rs.ArtifactBytes), fmtSeconds(rs.BootstrapSeconds), 100*rs.BootstrapRatio)
	}
	if sw := r.Swap; sw != nil {
		fmt.Fprintf(w, "hot swap under %.0f writes/s (%s, %d swaps): write-to-fold latency p50 %s p99 %s with a swap in flight, p50 %s p99 %s without\n",
			sw.LoadRate, sw.Modules, sw.Swaps, fmtSeconds(sw.SwapP50Seconds), fmtSeconds(sw.SwapP99Seconds), fmtSeconds(sw.BaselineP50Seconds), fmtSeconds(sw.BaselineP99Seconds))
	}
	for _, st := range r.Steady {
		fmt.Fprintf(w, "steady state, %s, under %.0f writes/s: write-to-fold latency p50 %s p99 %s; read your writes (HTTP, ?min_revision) p50 %s p99 %s (%d probes",
			st.Variant, st.LoadRate, fmtSeconds(st.FoldP50Seconds), fmtSeconds(st.FoldP99Seconds), fmtSeconds(st.ReadP50Seconds), fmtSeconds(st.ReadP99Seconds), st.Probes)
		if st.ReadTimeouts > 0 {
			fmt.Fprintf(w, ", %d reads timed out", st.ReadTimeouts)
		}
		fmt.Fprintln(w, ")")
	}
	if ef := r.Effects; ef != nil {
		fmt.Fprintf(w, "effects (%s, %.2f effects per update): fold to the head %s, %.2f× the fold without effects (%+.0f%%; the publisher waiting for the catch-up); to the head and the outbox drained %s, %.2f× (paired rounds' median)\n",
			ef.Module, ef.EffectsPerUpdate, fmtSeconds(Median(ef.HeadSeconds)), ef.HeadRatio, 100*(ef.HeadRatio-1), fmtSeconds(Median(ef.Seconds)), ef.TimeRatio)
		if ef.EffectsPerUpdate < 0.5 {
			fmt.Fprintf(w, "note: far fewer effects than updates (%.2f per update): the ratio is not that of one effect per update\n", ef.EffectsPerUpdate)
		}
		if ef.Probes > 0 {
			fmt.Fprintf(w, "effects under %.0f writes/s (one effect each): write-to-effect-in-stream latency p50 %s p99 %s (%d probes)\n",
				ef.LoadRate, fmtSeconds(ef.DrainP50Seconds), fmtSeconds(ef.DrainP99Seconds), ef.Probes)
		}
	}
	if q := r.Queries; q != nil {
		fmt.Fprintf(w, "queries (%s, %d clients back to back, hosts_of_upstream): fold to the head %s, throughput %.2f× the fold without queries (paired rounds' median); %d answered, %.0f/s, p50 %s p99 %s\n",
			q.Module, q.Clients, fmtSeconds(Median(q.Seconds)), q.ThroughputRatio, q.Answered, q.PerSecond, fmtSeconds(q.P50Seconds), fmtSeconds(q.P99Seconds))
	}
	if rd := r.Reads; rd != nil {
		fmt.Fprintf(w, "reads (%s, caught up, no writes; HTTP on loopback): a point read p50 %s p99 %s (%d, %d found); a page of %d view entries p50 %s p99 %s (%d); a query answering %d hosts p50 %s p99 %s (%d)\n",
			rd.Module, fmtLatency(rd.PointP50Seconds), fmtLatency(rd.PointP99Seconds), rd.Points, rd.PointsFound,
			rd.RangeKeys, fmtLatency(rd.RangeP50Seconds), fmtLatency(rd.RangeP99Seconds), rd.Ranges,
			rd.QueryKeys, fmtLatency(rd.QueryP50Seconds), fmtLatency(rd.QueryP99Seconds), rd.Queries)
	}
	for _, c := range r.Checks {
		fmt.Fprintf(w, "\nCHECK FAILED: %s\n", c)
	}
	return nil
}

// humanRate is r with a k or M suffix.
func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// fmtSeconds is s seconds as a duration, to the millisecond; fmtLatency
// to the microsecond.
func fmtSeconds(s float64) string { return fmtDuration(s, time.Millisecond) }
func fmtLatency(s float64) string { return fmtDuration(s, time.Microsecond) }

func fmtDuration(s float64, to time.Duration) string {
	return time.Duration(s * float64(time.Second)).Round(to).String()
}
