package wasm

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// BenchmarkApplyBesideQueries: the C router's apply and commit throughput
// (batches of 100 route puts over 1000 hosts and 50 upstreams) alone, and
// with one goroutine querying beside it (hosts_of_upstream and
// top_upstreams alternately, each on a fresh snapshot), paced at 200
// queries a second or without pause. Queries run on their own instances,
// so the difference is what they take of the machine (CPU, store reads),
// not waiting: on 2 cores an unpaced querier takes one of them.
//
//	go test -run '^$' -bench ApplyBesideQueries ./host/wasm/
func BenchmarkApplyBesideQueries(b *testing.B) {
	for _, c := range []struct {
		name     string
		queriers int
		every    time.Duration
	}{{"alone", 0, 0}, {"paced200", 1, 5 * time.Millisecond}, {"unpaced", 1, 0}} {
		queriers := c.queriers
		b.Run(c.name, func(b *testing.B) {
			r := newRuntime(b, Options{})
			p, st := pluginAndStore(b, r, builtPlugin(b, "example-router", "router-c"))
			rev := protocol.Revision(0)
			batch := func() []fold.Update {
				out := make([]fold.Update, 100)
				for i := range out {
					rev++
					h, u := int(rev)%1000, int(rev)%50
					out[i] = putU(rev, fmt.Sprintf("route.h%04d", h), fmt.Sprintf(`{"upstreams":[{"addr":"10.0.0.%d:80"},{"addr":"10.0.1.%d:80"}]}`, u, (u+1)%50))
				}
				return out
			}
			for range 10 { // every host present before timing
				commitBatch(b, p, st, batch()...)
			}
			stop := make(chan struct{})
			var wg sync.WaitGroup
			var queries int
			for range queriers {
				wg.Go(func() {
					var tick <-chan time.Time
					if c.every > 0 {
						t := time.NewTicker(c.every)
						defer t.Stop()
						tick = t.C
					}
					for i := 0; ; i++ {
						select {
						case <-stop:
							return
						case <-tick:
						default:
							if tick != nil {
								select {
								case <-stop:
									return
								case <-tick:
								}
							}
						}
						sn, err := st.Snapshot()
						if err != nil {
							b.Error(err)
							return
						}
						name, in := "hosts_of_upstream", fmt.Sprintf("10.0.0.%d:80", i%50)
						if i%2 == 1 {
							name, in = "top_upstreams", "10"
						}
						_, err = p.Query(context.Background(), name, []byte(in), sn)
						sn.Close()
						if err != nil {
							b.Error(err)
							return
						}
						queries++
					}
				})
			}
			b.ResetTimer()
			for range b.N {
				commitBatch(b, p, st, batch()...)
			}
			b.StopTimer()
			close(stop)
			wg.Wait()
			b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "updates/s")
			b.ReportMetric(float64(queries)/b.Elapsed().Seconds(), "queries/s")
		})
	}
}

// BenchmarkRouterQueries: each build of the example router answering
// top_upstreams("10") (a range over the whole reverse index: 10,000 keys,
// 10 pages) and hosts_of_upstream (one addr's 200 hosts, one page) over
// the same fold of 5,000 hosts and 50 upstreams, in one process: the
// C build is the baseline the others compare with.
//
//	go test -run '^$' -bench RouterQueries ./host/wasm/
func BenchmarkRouterQueries(b *testing.B) {
	r := newRuntime(b, Options{})
	var batch []fold.Update
	for i := range 5000 {
		u := i % 50
		batch = append(batch, putU(protocol.Revision(i+1), fmt.Sprintf("route.h%04d", i),
			fmt.Sprintf(`{"upstreams":[{"addr":"10.0.0.%d:80"},{"addr":"10.0.1.%d:80"}]}`, u, (u+1)%50)))
	}
	for _, lang := range []string{"c", "rust", "as", "go"} {
		p, st := pluginAndStore(b, r, builtPlugin(b, "example-router", "router-"+lang))
		commitBatch(b, p, st, batch...)
		sn := snapshotOf(b, st)
		for _, q := range []struct{ name, in string }{{"top_upstreams", "10"}, {"hosts_of_upstream", "10.0.0.7:80"}} {
			b.Run(lang+"/"+q.name, func(b *testing.B) {
				for b.Loop() {
					if _, err := p.Query(context.Background(), q.name, []byte(q.in), sn); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
