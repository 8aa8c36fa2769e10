package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/plugins/example-router/embedded"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

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
