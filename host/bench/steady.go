package bench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

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
