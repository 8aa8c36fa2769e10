// Package bench is foldhost's end-to-end measurement (`foldhost bench`),
// reusable by Go benchmarks: the example router's workload written to a
// bucket, the baselines (a plain WatchAll read, a hand-rolled consumer),
// the folds measured against them in alternating rounds, the restart,
// bootstrap, hot swap and effects runs, and the Result they produce (and
// its table). The CLI parses the flags and prints the Result.
package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/progress"
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
	// Fleet, when set, measures a fleet instead of every section above
	// (the Fleet section: its baselines run beside it).
	Fleet    *FleetConfig
	Progress *progress.Progress // where the phases are shown
	Warn     io.Writer          // the bench's warnings (a bucket it could not delete)
}

// Run measures, and returns what it measured even when a later phase
// failed (with that phase's error): the figures stand on their own.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	b := &bench{warn: cfg.Warn, dir: cfg.Dir, keys: cfg.Keys, delta: cfg.Delta, probes: cfg.Probes,
		rng: rand.New(rand.NewPCG(cfg.Seed, cfg.Seed)), prog: cfg.Progress, only: cfg.Only, cpuProfile: cfg.CPUProfile, shapes: cfg.Shapes,
		fleet: cfg.Fleet}
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
	fleet      *FleetConfig // nil: not measured
	probes     int          // the effects steady state's probes
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
	Fleet    *Fleet    `json:"fleet,omitempty"`
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
	if b.fleet != nil {
		err := b.runFleet(ctx, res, pluginDir, rounds)
		res.Checks = append(res.Checks, b.checks...)
		return res, err
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
