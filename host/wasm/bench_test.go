package wasm

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// BenchmarkApply measures one guest call per batch through the Go router,
// with and without a per-call deadline (wazero's WithCloseOnContextDone makes
// the guest check for cancellation in loops and arms a timer per call), and
// against a native Go plugin doing the same work as the baseline.
func BenchmarkApply(b *testing.B) {
	for _, size := range []int{100, 1000} {
		batch := make([]natskv.Update, size)
		for i := range batch {
			batch[i] = natskv.Update{Key: fmt.Sprintf("route.h%d", i%50), Rev: protocol.Revision(i + 1), Op: natskv.OpPut,
				Value: []byte(fmt.Sprintf(`{"upstreams":[{"addr":"10.0.%d.1:80","weight":%d},{"addr":"10.0.0.2:80"}]}`, i%7, 1+i%9))}
		}
		for _, c := range []struct {
			timeout time.Duration
			gcEvery int
		}{{0, 1}, {0, 64}, {time.Second, 64}} {
			timeout, gcEvery := c.timeout, c.gcEvery
			b.Run(fmt.Sprintf("wasm-go/batch=%d/timeout=%v/gc-every=%d", size, timeout, gcEvery), func(b *testing.B) {
				r := newRuntime(b, Options{CallTimeout: timeout, GCEvery: gcEvery})
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
		for _, lang := range []string{"c", "as"} {
			b.Run(fmt.Sprintf("wasm-%s/batch=%d", lang, size), func(b *testing.B) {
				path := filepath.Join(repoRoot(b), "plugins", "example-router", "build", "router-"+lang+".wasm")
				r := newRuntime(b, Options{})
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
		b.Run(fmt.Sprintf("native-nop/batch=%d", size), func(b *testing.B) {
			for range b.N {
				if _, err := fold.NopPlugin.Apply(context.Background(), batch, emptyReader{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "updates/s")
		})
	}
}
