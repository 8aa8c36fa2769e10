package bench

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
)

// QueryClients is how many clients the queries variant runs beside the
// fold: each asks its next query as soon as the last one answered.
const QueryClients = 200

// Queries is the queries variant's figures: the C router's fold from
// Start to the head with QueryClients clients asking queries back to back
// (hosts_of_upstream of a random first upstream: one index range, a few
// hosts each), against the same fold with none, round by round. A query
// runs on the plugin's query instances and reads a store snapshot; it must
// not hold back the fold's apply.
type Queries struct {
	Module  string    `json:"module"`
	Clients int       `json:"clients"`
	Seconds []float64 `json:"seconds"`
	// ThroughputRatio is the paired rounds' median of the fold's time
	// without queries over its time with them: its apply throughput
	// under the queries, relative to none (1: unaffected).
	ThroughputRatio float64 `json:"throughput_ratio"`
	// Answered counts the queries answered over all rounds (NotReady
	// those asked before the fold's module was loaded); PerSecond is
	// Answered over the rounds' time.
	Answered  int64   `json:"answered"`
	NotReady  int64   `json:"not_ready"`
	PerSecond float64 `json:"per_second"`
	// P50Seconds and P99Seconds: a query's latency (a sample of them).
	P50Seconds float64 `json:"p50_seconds"`
	P99Seconds float64 `json:"p99_seconds"`
}

// queriesRun is the variant's state across its rounds.
type queriesRun struct {
	res     Queries
	mu      sync.Mutex
	samples []float64 // every 16th query's latency, seconds
}

// queriesFold folds the bucket through plugin into a fresh store with
// QueryClients clients querying it from the start to the head.
func (b *bench) queriesFold(ctx context.Context, plugin string) (time.Duration, error) {
	q := b.queries
	dir := b.nextDir()
	var failed atomic.Value // the first query error that is not "not ready"
	took, _, err := b.runHostBeside(ctx, b.hostOptions(dir, plugin), func(ctx context.Context, f *host.Fold) {
		q.clients(ctx, f, &failed)
	}, nil)
	if err != nil {
		return 0, err
	}
	q.res.Seconds = append(q.res.Seconds, took.Seconds())
	if e, ok := failed.Load().(error); ok {
		b.checks = append(b.checks, fmt.Sprintf("queries: a query failed: %v", e))
	}
	return took, os.RemoveAll(dir)
}

// clients runs QueryClients clients on f until ctx ends, and joins them.
func (q *queriesRun) clients(ctx context.Context, f *host.Fold, failed *atomic.Value) {
	var wg sync.WaitGroup
	for c := range QueryClients {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(c), 0x9e3779b9))
			var local []float64
			defer func() {
				q.mu.Lock()
				q.samples = append(q.samples, local...)
				q.mu.Unlock()
			}()
			for n := 0; ctx.Err() == nil; n++ {
				// The ordered shape's first upstreams: 10.<0-249>.<0-249>.1:8080.
				addr := fmt.Appendf(nil, "10.%d.%d.1:8080", rng.IntN(250), rng.IntN(250))
				t0 := time.Now()
				err := query(ctx, f, "hosts_of_upstream", addr)
				switch {
				case err == nil:
					atomic.AddInt64(&q.res.Answered, 1)
					if n%16 == 0 {
						local = append(local, time.Since(t0).Seconds())
					}
				case errors.Is(err, httpapi.ErrNoQueries):
					atomic.AddInt64(&q.res.NotReady, 1)
					select { // the module is loading: ask again shortly
					case <-ctx.Done():
					case <-time.After(time.Millisecond):
					}
				case ctx.Err() != nil:
				default:
					failed.CompareAndSwap(nil, err)
				}
			}
		})
	}
	wg.Wait()
}

// query asks f one query at a snapshot of its store, as the HTTP API does.
func query(ctx context.Context, f *host.Fold, name string, input []byte) error {
	sn, err := f.Store().Snapshot()
	if err != nil {
		return err
	}
	defer sn.Close()
	_, err = f.Query(ctx, sn, name, input)
	return err
}

// finish computes the variant's ratios and latencies from its rounds and
// the fold's without queries.
func (q *queriesRun) finish(base []float64) *Queries {
	r := &q.res
	r.ThroughputRatio = pairedRatio(base, r.Seconds)
	var total float64
	for _, s := range r.Seconds {
		total += s
	}
	if total > 0 {
		r.PerSecond = float64(r.Answered) / total
	}
	if len(q.samples) > 0 {
		r.P50Seconds, r.P99Seconds = quantile(q.samples, 0.5), quantile(q.samples, 0.99)
	}
	return r
}
