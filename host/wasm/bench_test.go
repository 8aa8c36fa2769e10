package wasm

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"path/filepath"
	"sort"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/plugins/example-router/go/router"
	"github.com/foldhost/foldhost/protocol"
)

// BenchmarkApply measures one guest call per batch through the example
// router's builds, under each containment design, and the router's Go code
// run natively (native-go: the same work, no module) as the baseline.
func BenchmarkApply(b *testing.B) {
	for _, size := range []int{100, 1000} {
		batch := make([]fold.Update, size)
		for i := range batch {
			batch[i] = fold.Update{Key: fmt.Sprintf("route.h%d", i%50), Rev: protocol.Revision(i + 1), Op: fold.OpPut,
				Value: []byte(fmt.Sprintf(`{"upstreams":[{"addr":"10.0.%d.1:80","weight":%d},{"addr":"10.0.0.2:80"}]}`, i%7, 1+i%9))}
		}
		for _, c := range []struct {
			contain containment
			gcEvery int
		}{{containMetered, 1}, {containMetered, 64}, {containNone, 64}, {containCloseOnDone, 64}} {
			contain, gcEvery := c.contain, c.gcEvery
			b.Run(fmt.Sprintf("wasm-go/batch=%d/%s/gc-every=%d", size, contain, gcEvery), func(b *testing.B) {
				r := newRuntime(b, Options{containment: contain, GCEvery: gcEvery})
				m, err := r.LoadFile(context.Background(), goRouterWasm(b))
				if err != nil {
					b.Fatal(err)
				}
				p := r.NewPlugin(m)
				defer p.Close(context.Background())
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					if _, err := p.Apply(context.Background(), batch, emptyReader{}); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "updates/s")
			})
		}
		for _, lang := range []string{"c", "as", "rust"} {
			for _, contain := range []containment{containMetered, containNone, containCloseOnDone} {
				b.Run(fmt.Sprintf("wasm-%s/batch=%d/%s", lang, size, contain), func(b *testing.B) {
					path := filepath.Join(repoRoot(b), "plugins", "example-router", "build", "router-"+lang+".wasm")
					r := newRuntime(b, Options{containment: contain})
					m, err := r.LoadFile(context.Background(), path)
					if err != nil {
						b.Fatalf("%v (run scripts/build-plugins)", err)
					}
					p := r.NewPlugin(m)
					defer p.Close(context.Background())
					b.ReportAllocs()
					b.ResetTimer()
					for range b.N {
						if _, err := p.Apply(context.Background(), batch, emptyReader{}); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "updates/s")
				})
			}
		}
		b.Run(fmt.Sprintf("native-go/batch=%d", size), func(b *testing.B) {
			p := NewNativeRouter()
			b.ReportAllocs()
			for range b.N {
				if _, err := p.Apply(context.Background(), batch, emptyReader{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}

func (c containment) String() string {
	return [...]string{"metered", "uncontained", "close-on-done"}[c]
}

// BenchmarkContainmentCost compares guest containment designs on the
// example router in every language, in one process with rounds alternating
// (so the machine's noise hits every variant alike): it reports each
// variant's throughput as a ratio of the uncontained build's, the median
// over the rounds. The meter is the production design (RATIONALE.md,
// "Guest containment").
func BenchmarkContainmentCost(b *testing.B) {
	batch := make([]fold.Update, 1000)
	for i := range batch {
		batch[i] = fold.Update{Key: fmt.Sprintf("route.h%d", i%50), Rev: protocol.Revision(i + 1), Op: fold.OpPut,
			Value: []byte(fmt.Sprintf(`{"upstreams":[{"addr":"10.0.%d.1:80","weight":%d},{"addr":"10.0.0.2:80"}]}`, i%7, 1+i%9))}
	}
	variants := []containment{containNone, containMetered, containCloseOnDone}
	for _, lang := range []string{"c", "as", "go", "rust"} {
		b.Run(lang, func(b *testing.B) {
			path := filepath.Join(repoRoot(b), "plugins", "example-router", "build", "router-"+lang+".wasm")
			plugins := make([]*Plugin, len(variants))
			for i, v := range variants {
				r := newRuntime(b, Options{containment: v, GCEvery: 64})
				m, err := r.LoadFile(context.Background(), path)
				if err != nil {
					b.Fatalf("%v (run scripts/build-plugins)", err)
				}
				plugins[i] = r.NewPlugin(m)
				defer plugins[i].Close(context.Background())
			}
			ratios := make([][]float64, len(variants))
			b.ResetTimer()
			for range b.N {
				var took [3]time.Duration
				for i, p := range plugins {
					n := 20
					if variants[i] == containCloseOnDone {
						n = 2 // about ten times slower
					}
					start := time.Now()
					for range n {
						if _, err := p.Apply(context.Background(), batch, emptyReader{}); err != nil {
							b.Fatal(err)
						}
					}
					took[i] = time.Since(start) / time.Duration(n)
				}
				for i := range variants {
					ratios[i] = append(ratios[i], float64(took[0])/float64(took[i]))
				}
			}
			for i, v := range variants[1:] {
				b.ReportMetric(median(ratios[i+1]), v.String()+"/uncontained")
			}
		})
	}
}

func median(xs []float64) float64 {
	s := append([]float64{}, xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}

// BenchmarkWASMvsNative reports each WASM build of the example router as a
// ratio of the router's Go code run natively (the same work, no module
// boundary, no metering), rounds alternating in one process; the median
// over the rounds.
func BenchmarkWASMvsNative(b *testing.B) {
	batch := make([]fold.Update, 1000)
	for i := range batch {
		batch[i] = fold.Update{Key: fmt.Sprintf("route.h%d", i%50), Rev: protocol.Revision(i + 1), Op: fold.OpPut,
			Value: []byte(fmt.Sprintf(`{"upstreams":[{"addr":"10.0.%d.1:80","weight":%d},{"addr":"10.0.0.2:80"}]}`, i%7, 1+i%9))}
	}
	langs := []string{"c", "as", "go", "rust"}
	plugins := []fold.Plugin{NewNativeRouter()}
	for _, lang := range langs {
		r := newRuntime(b, Options{GCEvery: 64})
		m, err := r.LoadFile(context.Background(), builtPlugin(b, "example-router", "router-"+lang))
		if err != nil {
			b.Fatal(err)
		}
		p := r.NewPlugin(m)
		defer p.Close(context.Background())
		plugins = append(plugins, p)
	}
	ratios := make([][]float64, len(plugins))
	b.ResetTimer()
	for range b.N {
		took := make([]time.Duration, len(plugins))
		for i, p := range plugins {
			start := time.Now()
			for range 10 {
				if _, err := p.Apply(context.Background(), batch, emptyReader{}); err != nil {
					b.Fatal(err)
				}
			}
			took[i] = time.Since(start)
		}
		for i := range plugins {
			ratios[i] = append(ratios[i], float64(took[0])/float64(took[i]))
		}
	}
	for i, lang := range langs {
		b.ReportMetric(median(ratios[i+1]), "wasm-"+lang+"/native-go")
	}
}

// NewNativeRouter is the example router's Go code as a NativePlugin.
func NewNativeRouter() *NativePlugin[router.Record] {
	return NewNative[router.Record](&router.Router{})
}

// getPerKey hides the store's batched view read: the plugin's batched read
// request is answered with a Get per key.
type getPerKey struct{ fold.Reader }

// BenchmarkRouterFoldReads folds the example router's workload (C build)
// into a real store, batches of 1000 over 300k hosts, and reports the
// batched view read (one iterator per request, keys in order) against a
// Get per key, rounds alternating: reads-batched/get-per-key > 1 is the
// gain. Each round folds a fresh store to the same size.
func BenchmarkRouterFoldReads(b *testing.B) {
	const hosts, batchSize, batches = 300_000, 1000, 400
	rng := rand.New(rand.NewPCG(1, 2))
	all := make([][]fold.Update, batches)
	rev := protocol.Revision(0)
	for i := range all {
		all[i] = make([]fold.Update, batchSize)
		for j := range all[i] {
			rev++
			h := rng.IntN(hosts)
			all[i][j] = fold.Update{Key: fmt.Sprintf("route.h%06d", h), Rev: rev, Op: fold.OpPut,
				Value: []byte(fmt.Sprintf(`{"upstreams":[{"addr":"10.%d.%d.1:8080","weight":%d},{"addr":"10.0.0.%d:8080"}]}`, h%250, rng.IntN(250), 1+rng.IntN(9), 1+h%20))}
		}
	}
	r := newRuntime(b, Options{})
	m, err := r.LoadFile(context.Background(), builtPlugin(b, "example-router", "router-c"))
	if err != nil {
		b.Fatal(err)
	}
	p := r.NewPlugin(m)
	defer p.Close(context.Background())
	fold1 := func(batched bool) time.Duration {
		st, _, err := fold.Open(b.TempDir(), fold.Options{Logger: slog.New(slog.DiscardHandler)})
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		var rd fold.Reader = st
		if !batched {
			rd = getPerKey{st}
		}
		start := time.Now()
		for _, batch := range all {
			out, err := p.Apply(context.Background(), batch, rd)
			if err != nil {
				b.Fatal(err)
			}
			if err := st.Commit(fold.Commit{Raw: batch, Views: out.Views, Cursor: protocol.Cursor{Rev: batch[len(batch)-1].Rev}}); err != nil {
				b.Fatal(err)
			}
		}
		return time.Since(start)
	}
	var ratios []float64
	b.ResetTimer()
	for range b.N {
		perKey := fold1(false)
		batched := fold1(true)
		ratios = append(ratios, float64(perKey)/float64(batched))
		b.ReportMetric(float64(batches*batchSize)/batched.Seconds(), "batched-updates/s")
	}
	b.ReportMetric(median(ratios), "batched/get-per-key")
}
