package effects

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// Publisher pacing: entries read per round (one atomic batch, the fence
// after them: the server's default max_batch_size is 1000; a server that
// allows fewer halves it, see errBatchTooLarge), and the backoff after a
// failed publish (doubling from the first to the last). The server's cost
// is per batch (it stages each batch in a store of its own), so the
// largest batches publish fastest: 999 instead of 256 took a backlog of
// 95k effects from 3.8x to 2.2x the fold's own time.
const (
	effectsChunk      = 999
	effectsBackoffMin = 100 * time.Millisecond
	effectsBackoffMax = 5 * time.Second
	// effectsHoldPoll: how often a held publisher reads the fence again;
	// effectsCatchUpPoll: how often a publisher waiting for its fold to
	// catch up looks again.
	effectsHoldPoll    = time.Second
	effectsCatchUpPoll = 50 * time.Millisecond
)

// Config is what a Publisher knows of its fold.
type Config struct {
	// Fold is the fold's name (in effect ids, the fence, logs).
	Fold string
	// Store is the fold's store: its outbox, its hold, its dead letters.
	Store *fold.Store
	// Options are the fold's effects settings (Validate'd).
	Options Options
	// Refold marks the fresh fold of a reset: it folds history again, so
	// its effects are dropped (logged at INFO, not WARN).
	Refold bool
	// Hydrating reports whether the fold is catching up with the backlog
	// it found at its start: the publisher waits for its end.
	Hydrating func() bool
	// DeadLettered is called once a poison effect moved to the fold's dead
	// letters (the fold recounts and prunes them).
	DeadLettered func()
	// SetErr puts an error in the fold's status (its last error).
	SetErr func(error)
	// Epoch, when set, is the fold's owner epoch in a fleet (0: not the
	// owner, or no fleet): a non-zero epoch makes the publisher mark its
	// claim in the stream first, and condition every batch on that mark.
	Epoch func() protocol.Revision
	// Node names this node in its claim marks.
	Node string
	// Standby, when set and true, keeps the publisher from publishing:
	// the fold is a fleet's standby copy of its unit, and its effects are
	// the owner's to publish; it drops the entries the fence shows
	// published. Wake it when that changes.
	Standby func() bool
	Logger  *slog.Logger
}

// Publisher is a fold's effects: it screens each batch's effects before
// the commit (Screen), publishes the outbox after it (Run), holds while
// the fold joins another publisher's history, and counts it all for the
// status. Without a target (no effects stream, or a reset's refold) the
// effects are dropped, counted. Safe for concurrent use: Screen runs on
// the loop, Run on a goroutine of its own, the rest from the fold's
// supervision and its status.
type Publisher struct {
	cfg  Config
	fold string

	// The claim mark this owner wrote or found for markEpoch (Run's own).
	markEpoch protocol.Revision
	markSeq   uint64
	// refusedStale counts the batches the server refused because a newer
	// owner marked its claim (this one was paused, or cut off, past its
	// lease); fencedOut is set while this publisher is fenced out.
	refusedStale atomic.Uint64
	fencedOut    atomic.Bool
	store        *fold.Store
	log          *slog.Logger
	refold       bool
	maxWait      time.Duration

	target    *Target       // nil: effects are dropped (set by Open, before Run)
	published atomic.Uint64 // acknowledged batches' effects
	dropped   atomic.Uint64 // with no target (or a reset's refold)
	// foundInStream counts entries deleted because the fence said they
	// had landed (not published here); fenceMoves the batches refused
	// because the fence moved.
	foundInStream, fenceMoves atomic.Uint64
	deadLettered              atomic.Uint64 // poison effects moved to the dead letters
	// headSince is when the publisher first saw the outbox's first entry
	// (unix ns; 0: the outbox was empty).
	headSince atomic.Int64
	head      fold.OutboxEntry // the publisher's own
	warned    atomic.Bool      // the one WARN of a drop was logged
	lastErr   atomic.Pointer[string]
	// hold is the store's effects hold (nil: none; see JoinSync), read
	// here by the loop and the publisher; holdMu orders its changes (the
	// store's record first), held wakes a publisher held by it, and
	// joinDropped counts the effects a joining sync dropped.
	hold        atomic.Pointer[fold.EffectsHold]
	holdMu      sync.Mutex
	held        chan struct{}
	joinDropped atomic.Uint64
	// restoring: a restore that holds (JoinRepair) is folding in its
	// artifact; its net change is dropped, whatever happens to the hold
	// meanwhile (the fence passing its point, an operator's release).
	restoring atomic.Bool
	// pointOwed: a syncing hold caught up, but its point could not be
	// recorded; the next commit tries again (CaughtUp).
	pointOwed atomic.Bool
}

// New is the fold's publisher, without a target: effects are dropped
// until Open found the stream.
func New(c Config) *Publisher {
	p := &Publisher{cfg: c, fold: c.Fold, store: c.Store, log: c.Logger, refold: c.Refold, maxWait: c.Options.MaxWait}
	p.held = make(chan struct{}, 1)
	return p
}

// Open checks the fold's effects stream (OpenTarget) and reads the
// store's hold: from then on effects are published. Called once, at the
// fold's start, before Run.
func (p *Publisher) Open(ctx context.Context, nc *nats.Conn, timeout time.Duration) error {
	t, err := OpenTarget(ctx, nc, p.cfg.Options, timeout)
	if err != nil {
		return err
	}
	p.target = t
	return p.loadHold()
}

// Publishing reports whether effects go to a stream (Open found one).
func (p *Publisher) Publishing() bool { return p.target != nil }

// Held reports whether the store holds the fold's effects.
func (p *Publisher) Held() bool { return p.hold.Load() != nil }

// ownerEpoch is the fold's owner epoch in a fleet, 0 otherwise.
func (p *Publisher) ownerEpoch() protocol.Revision {
	if p.cfg.Epoch == nil {
		return 0
	}
	return p.cfg.Epoch()
}

// fenced waits, fenced out by a newer owner's mark, for the fleet to
// change this fold's role (Wake) or a poll; it says so once.
func (p *Publisher) fenced(ctx context.Context, why error) {
	if !p.fencedOut.Swap(true) {
		p.log.Warn("this owner is fenced out of its fold's unit: it publishes nothing until the fleet makes it a standby", "err", why)
	}
	select {
	case <-ctx.Done():
	case <-p.held:
	case <-time.After(effectsHoldPoll):
	}
}

// standby reports whether the publisher must not publish (Config.Standby).
func (p *Publisher) standby() bool { return p.cfg.Standby != nil && p.cfg.Standby() }

// Wake makes a waiting publisher look again at once: its fold became the
// owner of its unit (Config.Standby turned false), or stopped being one.
func (p *Publisher) Wake() {
	select {
	case p.held <- struct{}{}:
	default:
	}
}

// PointOwed reports whether a caught-up hold's point could not be
// recorded: the fold's next commit calls CaughtUp again.
func (p *Publisher) PointOwed() bool { return p.pointOwed.Load() }

// RestoreEnded ends a restore's drop of its net change (JoinRepair): its
// difference is folded, or the restore ended.
func (p *Publisher) RestoreEnded() { p.restoring.Store(false) }

// Screen is applied to every live output (the fold's applier): with
// no target it drops the effects (one WARN per fold run, and a count);
// with one it refuses an effect its stream does not capture.
func (p *Publisher) Screen(out *fold.Output) error {
	if len(out.Effects) == 0 {
		return nil
	}
	t := p.target
	if h := p.hold.Load(); t != nil && (h != nil && h.Syncing || p.restoring.Load()) {
		p.joinDropped.Add(uint64(len(out.Effects)))
		out.Effects = nil
		return nil
	}
	if t == nil {
		p.dropped.Add(uint64(len(out.Effects)))
		if !p.warned.Swap(true) {
			if p.refold {
				p.log.Info("the reset's refold drops the plugin's effects (they would announce history again)")
			} else {
				p.log.Warn("the plugin emits effects but the fold has no effects_stream: they are dropped (this is logged once; the status counts them)",
					"effects", len(out.Effects))
			}
		}
		out.Effects = nil
		return nil
	}
	for _, e := range out.Effects {
		if e.Subject == t.fence || strings.HasPrefix(e.Subject, FenceNamespace) {
			return &SubjectError{Subject: e.Subject, Fence: true}
		}
		if !t.captures(e.Subject) {
			return &SubjectError{Subject: e.Subject, Filters: t.filters}
		}
	}
	return nil
}

// Run drains the fold's outbox into its effects stream until
// ctx ends, in order, a chunk at a time as one atomic batch whose last
// message is the fold's fence (fencePublish). Entries are deleted once the
// batch is acknowledged, or once the fence says they landed (a crash
// between the ack and the delete, a lost ack). A failure is retried, from
// the first entry not known to have landed, after a backoff. Nothing is
// lost when ctx ends in between: the next run starts where this one
// stopped and reads the fence first.
func (p *Publisher) Run(ctx context.Context) {
	t := p.target
	epoch := p.epoch()
	var fence fenceState
	known := false
	var chunk []fold.OutboxEntry
	failures := 0
	// probe: publish each effect of the batch as a request, so the server
	// says which one it refuses (set after a refused batch, until one
	// lands).
	probe := false
	chunkMax := effectsChunk
	for ctx.Err() == nil {
		if p.cfg.Hydrating() {
			// The fold catches up with the backlog it found at its start
			// first: publishing beside it, the server's work and this
			// goroutine's cost the fold a quarter to two thirds more time
			// to the head on two cores (RATIONALE.md, "Plugin effects").
			// Its wait is not the outbox's: counted from the catch-up's end.
			p.headSince.Store(0)
			select {
			case <-ctx.Done():
				return
			case <-time.After(effectsCatchUpPoll):
			}
			continue
		}
		// The outbox first: its head's wait counts (readiness) even while
		// the fence cannot be read. The fence, read after, covers at least
		// what it covered when the chunk was read.
		chunk = chunk[:0]
		err := p.store.Outbox(chunkMax, func(e fold.OutboxEntry) error { chunk = append(chunk, e); return nil })
		p.noteHead(chunk, err)
		if err == nil && !known && (len(chunk) > 0 || p.hold.Load() != nil) {
			fence, err = t.readFence(ctx, p.fold, epoch)
			known = err == nil
		}
		landed := 0
		for err == nil && landed < len(chunk) && fence.covers(chunk[landed]) {
			landed++
		}
		held := err == nil && known && p.holding(fence)
		// The role, read once for the whole pass: a fold made a standby
		// after this read publishes this pass's batch under the epoch it
		// was read with, which the server refuses once a newer owner
		// marked its claim (never a batch without the mark's condition).
		standby, ownerEpoch := p.standby(), p.ownerEpoch()
		if standby {
			// Not the owner: it publishes nothing, and drops what the
			// owner's batches cover (the fence read above).
			held = err == nil
		}
		switch {
		case err != nil:
		case landed > 0:
			// The fence says these are in the stream already: published
			// before a crash, or acknowledged on a reply that was lost.
			if err = p.store.DeleteOutbox(chunk[:landed]...); err == nil {
				p.foundInStream.Add(uint64(landed))
			}
		case len(chunk) == 0:
			var poll <-chan time.Time
			if held {
				// Nothing to publish, but the hold's end is watched for
				// (the status says held until it is seen).
				poll, known = time.After(effectsHoldPoll), false
			}
			select {
			case <-ctx.Done():
				return
			case <-p.store.OutboxSignal():
			case <-p.held:
			case <-poll:
			}
			continue
		case held:
			// Joined midway: what another publisher may still hold comes
			// first. Covered entries go above; the fence is read again.
			known = false
			select {
			case <-ctx.Done():
				return
			case <-p.held:
			case <-time.After(effectsHoldPoll):
			}
			continue
		default:
			if testhook.Step(ctx, "before-publish"); ctx.Err() != nil {
				return
			}
			// What goes out must be durable first (Store.SyncOutbox).
			if err = p.store.SyncOutbox(); err != nil {
				break
			}
			// In a fleet, the owner's claim mark first (mark.go).
			var markSeq uint64
			if ownerEpoch != 0 {
				if markSeq, err = p.ensureMark(ctx, ownerEpoch); errors.Is(err, errFencedOut) {
					p.fenced(ctx, err)
					continue
				} else if err != nil {
					break
				}
			}
			p.fencedOut.Store(false)
			var seq uint64
			seq, err = t.fencePublish(ctx, p.fold, epoch, fence.seq, markSeq, chunk, probe)
			var poison *poisonEffectError
			if errors.As(err, &poison) && ctx.Err() == nil {
				// Nothing of the batch was stored (the server refused one
				// of its messages, so it never committed): move the
				// poison effect out, and publish the rest.
				if err = p.deadLetter(chunk[poison.index], poison.reason); err == nil {
					continue
				}
			}
			if errors.Is(err, errBatchTooLarge) && len(chunk) > 1 && ctx.Err() == nil {
				// The server takes smaller batches (its max_batch_size):
				// halve them, for the rest of this publisher's life.
				chunkMax = max(1, len(chunk)/2)
				p.log.Info("the effects stream's server refuses batches this large; publishing smaller ones", "effects", len(chunk), "batch_max", chunkMax)
				continue
			}
			if errors.Is(err, errBatchIncomplete) && !probe && ctx.Err() == nil {
				// A message of the batch was refused, and an atomic
				// batch's messages go without a reply: publish it again
				// effect by effect to learn which one, and why.
				probe = true
				continue
			}
			var moved *movedError
			if errors.As(err, &moved) && ctx.Err() == nil && markSeq != 0 {
				// The claim subject's check may be the one that failed: a
				// newer owner marked (the server names the claim
				// subject's last sequence, not the fence's).
				if cur, rerr := t.readMark(ctx); rerr == nil && cur.seq != markSeq && moved.last == cur.seq {
					p.refusedStale.Add(1)
					p.markEpoch, p.markSeq = 0, 0
					p.log.Warn("the effects stream refused this owner's batch: a newer owner marked its claim on the fold's unit; this node publishes nothing more under its epoch",
						"claim", t.claim, "mark_epoch", uint64(cur.epoch), "this_epoch", uint64(ownerEpoch))
					continue
				}
			}
			if errors.Is(err, errReconnected) && ctx.Err() == nil {
				// NATS came back while the batch waited for its answer,
				// which will never come: the fence says whether it landed,
				// now rather than at the request's timeout.
				p.log.Info("NATS reconnected while an effects batch waited for its answer; reading the fence and publishing again", "effects", len(chunk))
				known = false
				continue
			}
			if errors.Is(err, errFenceMoved) && ctx.Err() == nil {
				// Someone wrote the fence since it was read (this
				// publisher's own batch whose ack was lost, or another
				// one's): read it again and go on from what it says.
				p.fenceMoves.Add(1)
				known = false
				continue
			}
			if err == nil {
				if testhook.Step(ctx, "after-ack"); ctx.Err() != nil {
					return
				}
			}
			if err == nil {
				probe = false
				last := chunk[len(chunk)-1]
				fence = fenceState{seq: seq, has: true, rev: last.Rev, index: last.Index}
				if err = p.store.DeleteOutbox(chunk...); err == nil {
					p.published.Add(uint64(len(chunk)))
				}
			}
		}
		if err == nil {
			if failures > 0 {
				p.log.Info("publishing effects again", "after_failures", failures)
				p.lastErr.Store(nil)
			}
			failures = 0
			continue
		}
		if ctx.Err() != nil {
			return
		}
		known = false // a failed batch may have landed: the fence says
		failures++
		msg := err.Error()
		p.lastErr.Store(&msg)
		if failures == 1 || failures%20 == 0 {
			p.log.Warn("publishing effects failed; retrying", "stream", t.stream, "failures", failures, "err", err)
		}
		backoff := min(effectsBackoffMin<<min(failures-1, 10), effectsBackoffMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// noteHead records when the publisher first saw the outbox's first entry.
func (e *Publisher) noteHead(chunk []fold.OutboxEntry, err error) {
	switch {
	case err != nil:
	case len(chunk) == 0:
		e.headSince.Store(0)
		e.head = fold.OutboxEntry{}
	case chunk[0].Rev != e.head.Rev || chunk[0].Index != e.head.Index || e.headSince.Load() == 0:
		e.head = chunk[0]
		e.headSince.Store(time.Now().UnixNano())
	}
}

// deadLetter moves a poison effect from the outbox to the fold's
// dead letters (one store batch), counts it and logs it once.
func (p *Publisher) deadLetter(e fold.OutboxEntry, reason string) error {
	id := e.ID(p.fold)
	d := fold.DeadLetter{Rev: uint64(e.Rev), Op: fold.OpEffect, Error: fold.DeadLetterText(errors.New(reason)), At: time.Now().UTC(),
		Effect: &fold.DeadEffect{ID: id, Index: e.Index, Subject: e.Subject, Size: e.Size()}}
	if err := p.store.DeadLetterEffect(e, d); err != nil {
		return err
	}
	p.deadLettered.Add(1)
	p.log.Warn("an effect the effects stream refuses for good was moved to the dead letters; the effects after it are published",
		"effect", id, "subject", e.Subject, "size", e.Size(), "stream", p.target.stream, "reason", reason)
	if p.cfg.DeadLettered != nil {
		p.cfg.DeadLettered()
	}
	return nil
}

// epoch is the fence's history mark: the folded stream's creation
// time, as the store records it ("" when it records none).
func (p *Publisher) epoch() string {
	if o, ok, err := p.store.Origin(); err == nil && ok {
		return o.StreamCreated.UTC().Format(time.RFC3339Nano)
	}
	return ""
}

// Status is the fold status's part; nil before the first effect of a
// fold without an effects stream.
func (p *Publisher) Status() *httpapi.EffectsStatus {
	e := p
	st := &httpapi.EffectsStatus{PublishedByThisNode: e.published.Load(), Dropped: e.dropped.Load()}
	if e.target != nil {
		st.Stream, st.Fence = e.target.stream, e.target.fence
		st.FoundInStream, st.FenceMoves = e.foundInStream.Load(), e.fenceMoves.Load()
		st.DeadLettered = e.deadLettered.Load()
		if p.maxWait > 0 {
			st.MaxWaitSeconds = p.maxWait.Seconds()
		}
		st.Outbox = p.store.OutboxLen()
		if since := e.headSince.Load(); since != 0 && st.Outbox > 0 {
			st.OutboxWaitSeconds = time.Since(time.Unix(0, since)).Seconds()
		}
	} else if st.Dropped == 0 {
		return nil
	}
	if p := e.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	st.DroppedJoining = e.joinDropped.Load()
	st.RefusedStale = p.refusedStale.Load()
	switch h := e.hold.Load(); {
	case p.fencedOut.Load():
		st.Held = "fenced out: a newer owner of the fold's unit marked its claim; this node publishes nothing under its old epoch"
	case p.standby():
		st.Held = "standby: this node does not own the fold's unit; its effects are the owner's to publish (those the fence shows published are dropped here)"
	case h == nil:
	case h.Syncing:
		st.Held = "joined midway: catching up with the bucket (its effects are dropped), then until the fence passes that point"
	case h.Index == math.MaxUint32:
		st.Held = fmt.Sprintf("joined midway: until the fence passes revision %d", h.Rev)
	default:
		st.Held = fmt.Sprintf("joined midway: until the fence covers %d/%d", h.Rev, h.Index)
	}
	return st
}
