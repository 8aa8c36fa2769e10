package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
)

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
		return err == nil && st != nil && st.PublishedByThisNode+st.FoundInStream == n, nil
	})
	switch {
	case werr != nil && ctx.Err() != nil:
		return 0, ctx.Err()
	case st == nil:
		b.checks = append(b.checks, "effects: the fold's status counts no effects")
	default:
		left := st.PublishedByThisNode + st.FoundInStream // every effect that left the outbox
		e.res.Published, e.res.StreamMessages = left, inStream
		if left != inStream || left == 0 || st.Dropped > 0 {
			b.checks = append(b.checks, fmt.Sprintf("effects: the fold published %d effects (%d found in the stream, %d dropped), its stream holds %d", st.PublishedByThisNode, st.FoundInStream, st.Dropped, inStream))
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
	leftOutbox := func() uint64 { e := f.Status().Effects; return e.PublishedByThisNode + e.FoundInStream }
	published0 := leftOutbox()
	load := b.steadyLoad(ctx, func(head uint64) bool {
		published := leftOutbox() - published0
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
