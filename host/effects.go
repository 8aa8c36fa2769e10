package host

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// Plugin effects (README, "Plugin effects"; RATIONALE.md, "Plugin
// effects"): the loop commits a batch's effects to the fold's outbox in
// the batch's own commit (fold.Commit.Effects), and the fold's publisher
// drains the outbox in order into the effects stream, in atomic batches
// fenced against repeats (fencePublish), deleting an entry only once the
// server acknowledged it or the fence says it landed. An effect's id,
// "<fold>/<revision>/<index>", travels in its Foldhost-Effect-Id header.

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

// effectsTarget is where a fold's effects go: its stream, and the subject
// filters an effect must match (EffectsSubjects, or the stream's subjects).
type effectsTarget struct {
	nc      *nats.Conn
	handle  jetstream.Stream
	stream  string
	fence   string // the fold's fence subject (FoldOptions.EffectsFence)
	filters []string
	timeout time.Duration // each publish
}

// effectsState is a fold's effects counters.
type effectsState struct {
	target    *effectsTarget // nil: effects are dropped
	published atomic.Uint64
	dropped   atomic.Uint64 // with no target (or a reset's refold)
	// confirmed counts entries deleted because the fence said they had
	// landed; fenceMoves the batches refused because the fence moved.
	confirmed, fenceMoves atomic.Uint64
	deadLettered          atomic.Uint64 // poison effects moved to the dead letters
	// headSince is when the publisher first saw the outbox's first entry
	// (unix ns; 0: the outbox was empty).
	headSince atomic.Int64
	head      fold.OutboxEntry // the publisher's own
	warned    atomic.Bool      // the one WARN of a drop was logged
	lastErr   atomic.Pointer[string]
	// hold is the store's effects hold (nil: none; see joinEffects), read
	// here by the loop and the publisher; holdMu orders its changes (the
	// store's record first), held wakes a publisher held by it, and
	// joinDropped counts the effects a joining sync dropped.
	hold        atomic.Pointer[fold.EffectsHold]
	holdMu      sync.Mutex
	held        chan struct{}
	joinDropped atomic.Uint64
	// restoring: a restore that holds (joinRepair) is folding in its
	// artifact; its net change is dropped, whatever happens to the hold
	// meanwhile (the fence passing its point, an operator's release).
	restoring atomic.Bool
	// pointOwed: a syncing hold caught up, but its point could not be
	// recorded; the next commit tries again (effectsCaughtUp).
	pointOwed atomic.Bool
}

// openEffectsTarget checks, at the start, that the fold's effects stream
// exists and captures every subject filter effects may use, and returns
// the target. A refusal names the stream, the filter and what the stream
// captures.
func openEffectsTarget(ctx context.Context, nc *nats.Conn, o FoldOptions, timeout time.Duration) (*effectsTarget, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := js.Stream(rctx, o.EffectsStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return nil, fmt.Errorf("effects_stream %q: no such stream: create it, capturing the subjects the plugin's effects go to (or unset effects_stream: the effects are then dropped)", o.EffectsStream)
	}
	if err != nil {
		return nil, fmt.Errorf("effects_stream %q: %w", o.EffectsStream, err)
	}
	captured := s.CachedInfo().Config.Subjects
	filters := o.EffectsSubjects
	if len(filters) == 0 {
		filters = captured
	}
	if len(filters) == 0 {
		return nil, fmt.Errorf("effects_stream %q captures no subject (a mirror or a source-only stream?): effects cannot be published to it", o.EffectsStream)
	}
	for _, f := range filters {
		if err := validFilter(f); err != nil {
			return nil, fmt.Errorf("effects_subjects: %w", err)
		}
		if !slices.ContainsFunc(captured, func(c string) bool { return subjectSubset(f, c) }) {
			return nil, fmt.Errorf("effects_subjects %q: stream %q does not capture it (it captures %q): effects there would have nowhere to go", f, o.EffectsStream, captured)
		}
	}
	cfg := s.CachedInfo().Config
	switch {
	case !cfg.AllowAtomicPublish:
		return nil, fmt.Errorf("effects_stream %q does not allow atomic batch publishing: effects are published in batches fenced against repeats, so set allow_atomic on the stream (AllowAtomicPublish, NATS server 2.12+)", o.EffectsStream)
	case cfg.Retention != jetstream.LimitsPolicy:
		return nil, fmt.Errorf("effects_stream %q has %s retention: it would remove the fence (the record of what was published) once consumed, so effects could be published twice; use limits retention", o.EffectsStream, cfg.Retention)
	case !slices.ContainsFunc(captured, func(c string) bool { return subjectSubset(o.EffectsFence, c) }):
		return nil, fmt.Errorf("effects_stream %q does not capture the fold's fence subject %q (it captures %q): add it to the stream's subjects, or set effects_fence to one it captures", o.EffectsStream, o.EffectsFence, captured)
	}
	return &effectsTarget{nc: nc, handle: s, stream: o.EffectsStream, fence: o.EffectsFence, filters: filters, timeout: timeout}, nil
}

// validFilter checks a subject filter effects may match: tokens, '*' and a
// last '>' as NATS has them, nothing under '$' (the server's and the
// KV buckets' own subjects: an effect must not write a bucket).
func validFilter(f string) error {
	if strings.HasPrefix(f, "$") {
		return fmt.Errorf("%q: the $ subjects are the server's (and the KV buckets')", f)
	}
	toks := strings.Split(f, ".")
	for i, t := range toks {
		switch {
		case t == "":
			return fmt.Errorf("%q has an empty token", f)
		case t == ">" && i != len(toks)-1:
			return fmt.Errorf("%q: '>' is only the last token", f)
		case strings.ContainsAny(t, " \t\r\n") || (len(t) > 1 && strings.ContainsAny(t, "*>")):
			return fmt.Errorf("%q is not a subject filter", f)
		}
	}
	return nil
}

// subjectSubset reports whether every subject that filter matches also
// matches pattern (a literal subject is a filter of one subject).
func subjectSubset(filter, pattern string) bool {
	f, p := strings.Split(filter, "."), strings.Split(pattern, ".")
	for i, pt := range p {
		if pt == ">" {
			return len(f) > i // '>' matches one token or more
		}
		if i >= len(f) {
			return false
		}
		switch ft := f[i]; {
		case ft == ">":
			return false // the filter reaches deeper than pattern's fixed length
		case pt == "*":
		case ft == "*" || ft != pt:
			return false
		}
	}
	return len(f) == len(p)
}

// fenceNamespace holds every fold's default fence subject
// (fenceNamespace + the fold's name). No plugin may emit under it: an
// effect there would move another fold's fence (on a stream both share)
// and make that fold's publisher take its next batch as already landed.
const fenceNamespace = "foldhost.fence."

// captures reports whether subject is one effects may go to.
func (t *effectsTarget) captures(subject string) bool {
	return slices.ContainsFunc(t.filters, func(f string) bool { return subjectSubset(subject, f) })
}

// EffectSubjectError is an effect to a subject outside the fold's effects
// subjects: a plugin failure (the batch is not committed), since the
// outbox would hold an effect no stream takes.
type EffectSubjectError struct {
	Subject string
	Filters []string
	Fence   bool // the subject is the fold's fence
}

func (e *EffectSubjectError) Error() string {
	if e.Fence {
		return fmt.Sprintf("an effect to subject %q, a fold's effects fence (the host's record of what was published: the fold's own, or under %s, where every fold's default fence is)", e.Subject, fenceNamespace)
	}
	return fmt.Sprintf("an effect to subject %q, outside the fold's effects subjects %q (effects_subjects, or effects_stream's subjects)", e.Subject, e.Filters)
}

// screenEffects is applied to every live output (the fold's applier): with
// no target it drops the effects (one WARN per fold run, and a count);
// with one it refuses an effect its stream does not capture.
func (f *Fold) screenEffects(out *fold.Output) error {
	if len(out.Effects) == 0 {
		return nil
	}
	t := f.effects.target
	if h := f.effects.hold.Load(); t != nil && (h != nil && h.Syncing || f.effects.restoring.Load()) {
		f.effects.joinDropped.Add(uint64(len(out.Effects)))
		out.Effects = nil
		return nil
	}
	if t == nil {
		f.effects.dropped.Add(uint64(len(out.Effects)))
		if !f.effects.warned.Swap(true) {
			if f.o.refold {
				f.log.Info("the reset's refold drops the plugin's effects (they would announce history again)")
			} else {
				f.log.Warn("the plugin emits effects but the fold has no effects_stream: they are dropped (this is logged once; the status counts them)",
					"effects", len(out.Effects))
			}
		}
		out.Effects = nil
		return nil
	}
	for _, e := range out.Effects {
		if e.Subject == t.fence || strings.HasPrefix(e.Subject, fenceNamespace) {
			return &EffectSubjectError{Subject: e.Subject, Fence: true}
		}
		if !t.captures(e.Subject) {
			return &EffectSubjectError{Subject: e.Subject, Filters: t.filters}
		}
	}
	return nil
}

// publishEffects drains the fold's outbox into its effects stream until
// ctx ends, in order, a chunk at a time as one atomic batch whose last
// message is the fold's fence (fencePublish). Entries are deleted once the
// batch is acknowledged, or once the fence says they landed (a crash
// between the ack and the delete, a lost ack). A failure is retried, from
// the first entry not known to have landed, after a backoff. Nothing is
// lost when ctx ends in between: the next run starts where this one
// stopped and reads the fence first.
func (f *Fold) publishEffects(ctx context.Context) {
	t := f.effects.target
	epoch := f.effectsEpoch()
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
		if f.state.Load() == httpapi.StateHydrating {
			// The fold catches up with the backlog it found at its start
			// first: publishing beside it, the server's work and this
			// goroutine's cost the fold a quarter to two thirds more time
			// to the head on two cores (RATIONALE.md, "Plugin effects").
			// Its wait is not the outbox's: counted from the catch-up's end.
			f.effects.headSince.Store(0)
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
		err := f.store.Outbox(chunkMax, func(e fold.OutboxEntry) error { chunk = append(chunk, e); return nil })
		f.effects.noteHead(chunk, err)
		if err == nil && !known && (len(chunk) > 0 || f.effects.hold.Load() != nil) {
			fence, err = t.readFence(ctx, f.o.Name, epoch)
			known = err == nil
		}
		landed := 0
		for err == nil && landed < len(chunk) && fence.covers(chunk[landed]) {
			landed++
		}
		held := err == nil && known && f.holding(fence)
		switch {
		case err != nil:
		case landed > 0:
			// The fence says these are in the stream already: published
			// before a crash, or acknowledged on a reply that was lost.
			if err = f.store.DeleteOutbox(chunk[:landed]...); err == nil {
				f.effects.published.Add(uint64(landed))
				f.effects.confirmed.Add(uint64(landed))
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
			case <-f.store.OutboxSignal():
			case <-f.effects.held:
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
			case <-f.effects.held:
			case <-time.After(effectsHoldPoll):
			}
			continue
		default:
			if testhook.Step(ctx, "before-publish"); ctx.Err() != nil {
				return
			}
			// What goes out must be durable first (Store.SyncOutbox).
			if err = f.store.SyncOutbox(); err != nil {
				break
			}
			var seq uint64
			seq, err = t.fencePublish(ctx, f.o.Name, epoch, fence.seq, chunk, probe)
			var poison *poisonEffectError
			if errors.As(err, &poison) && ctx.Err() == nil {
				// Nothing of the batch was stored (the server refused one
				// of its messages, so it never committed): move the
				// poison effect out, and publish the rest.
				if err = f.deadLetterEffect(chunk[poison.index], poison.reason); err == nil {
					continue
				}
			}
			if errors.Is(err, errBatchTooLarge) && len(chunk) > 1 && ctx.Err() == nil {
				// The server takes smaller batches (its max_batch_size):
				// halve them, for the rest of this publisher's life.
				chunkMax = max(1, len(chunk)/2)
				f.log.Info("the effects stream's server refuses batches this large; publishing smaller ones", "effects", len(chunk), "batch_max", chunkMax)
				continue
			}
			if errors.Is(err, errBatchIncomplete) && !probe && ctx.Err() == nil {
				// A message of the batch was refused, and an atomic
				// batch's messages go without a reply: publish it again
				// effect by effect to learn which one, and why.
				probe = true
				continue
			}
			if errors.Is(err, errFenceMoved) && ctx.Err() == nil {
				// Someone wrote the fence since it was read (this
				// publisher's own batch whose ack was lost, or another
				// one's): read it again and go on from what it says.
				f.effects.fenceMoves.Add(1)
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
				if err = f.store.DeleteOutbox(chunk...); err == nil {
					f.effects.published.Add(uint64(len(chunk)))
				}
			}
		}
		if err == nil {
			if failures > 0 {
				f.log.Info("publishing effects again", "after_failures", failures)
				f.effects.lastErr.Store(nil)
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
		f.effects.lastErr.Store(&msg)
		if failures == 1 || failures%20 == 0 {
			f.log.Warn("publishing effects failed; retrying", "stream", t.stream, "failures", failures, "err", err)
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
func (e *effectsState) noteHead(chunk []fold.OutboxEntry, err error) {
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

// The fence's headers: the last effect the batch holds ("<rev>/<index>"),
// and the history it belongs to (the folded stream's creation time: a
// recreated bucket numbers its revisions again, and its effects must not
// be taken for the old one's).
const (
	hdrFenceThrough = "Foldhost-Effects-Through"
	hdrFenceEpoch   = "Foldhost-Effects-Epoch"
	// hdrFenceFold names the fold whose effects the fence covers: a fence
	// subject shared by mistake with a fold of another name (whose ids are
	// its own) must not be read as this fold's cover, which would delete
	// effects never published. A fence without it (an older host's) is
	// taken as this fold's.
	hdrFenceFold = "Foldhost-Effects-Fold"
	// hdrEffectID carries an effect's id on its message.
	hdrEffectID = "Foldhost-Effect-Id"
)

// errFenceMoved: the fence subject's last sequence is not the one the
// batch expected, so the server refused the whole batch.
var errFenceMoved = errors.New("the effects fence moved")

// fenceState is what the fence subject's last message says: its sequence
// (0: none yet), and, when it is this history's, the last effect landed.
type fenceState struct {
	seq   uint64
	has   bool
	rev   protocol.Revision
	index uint32
}

// covers reports whether the fence says e is in the stream already.
func (s fenceState) covers(e fold.OutboxEntry) bool {
	return s.has && (e.Rev < s.rev || e.Rev == s.rev && e.Index <= s.index)
}

// effectsEpoch is the fence's history mark: the folded stream's creation
// time, as the store records it ("" when it records none).
func (f *Fold) effectsEpoch() string {
	if o, ok, err := f.store.Origin(); err == nil && ok {
		return stamp(o.StreamCreated)
	}
	return ""
}

// joinEffects runs at the start of a state-sync (an empty store) of a
// bucket with history, with an effects stream. When the fence shows this
// fold's effects published already (by a replica, or by this node before
// it lost its store), the fold joins their history midway: another
// publisher may still hold effects below the point this fold catches up
// at, and its state-sync's effects are the collapsed change under ids of
// their own, which, published first, would move the fence past the
// other's and have them deleted unpublished (the fence's cover is an
// order). So the store records a hold (fold.EffectsHold): the sync's
// effects are dropped (screenEffects), the point is set when the fold has
// caught up (effectsCaughtUp), and the publisher waits until the fence
// covers it (holding), or an operator releases it (ReleaseEffects). A
// fence that cannot be read is taken as one that may show effects (the
// hold is tentative: a fence read later that shows none ends it). A hold
// that cannot be recorded fails the start: the fold does not sync
// without it.
func (f *Fold) joinEffects(ctx context.Context) error {
	fence, err := f.effects.target.readFence(ctx, f.o.Name, f.effectsEpoch())
	switch {
	case err != nil:
		return f.setHold(nil, &fold.EffectsHold{Syncing: true, Tentative: true}, "this fold hydrates from an empty store and could not read its effects fence: "+
			"it drops its hydration's effects, and publishes once the fence shows no effects of this fold or passes the point it catches up at "+
			"(another replica's effects up to there are that replica's to publish); with no other replica, release it: foldhost admin release-effects",
			"fence", f.effects.target.fence, "err", err)
	case fence.has:
		return f.setHold(nil, &fold.EffectsHold{Syncing: true}, "this fold hydrates from an empty store while its effects fence shows effects published: "+
			"it drops its hydration's effects, and publishes once the fence passes the point it catches up at "+
			"(another replica's effects up to there are that replica's to publish); with no other replica, release it: foldhost admin release-effects",
			"fence", f.effects.target.fence, "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index))
	}
	return nil
}

// joinRepair is the repairs' Hooks.Join, with an effects stream: it runs
// before a repair folds its difference, which the fold's effects announce
// as a net change under the revision the repair moves the cursor to.
// Beside another publisher whose unpublished effects lie below that
// revision, publishing the net change first would move the fence past
// them (the joining state-sync's case), so the repair joins that
// publisher's history instead: its net change is dropped, and the
// publisher holds when
//   - a restore folds in an artifact whose node filed effects this store
//     never did (past this store's outbox mark), or itself waited for
//     another publisher's (fold.Store.JoinedHold): they are not this
//     fold's to publish. The hold's point is the artifact's, recorded
//     now: nothing is left to record after the restore's last commit, so
//     no crash there loses it. Only the restore's own net change is
//     dropped (restoring): the fold's effects from the artifact's cursor
//     on are the ones every replica files, and are kept. (An artifact
//     whose node was still catching up gives a syncing hold.)
//   - or this store waits for another publisher already, or the fence is
//     past the last effect this store ever filed: another publisher went
//     on while this fold could not see the bucket. A listing's hold is
//     syncing (its point is set once the fold caught up: effectsCaughtUp);
//     a restore's point is the artifact's cursor, recorded now as above.
//
// Otherwise (a fence no further than this store's own effects, or one
// that cannot be read; a read cut short by the attempt's end fails it)
// the fold is taken to publish alone, and the net
// change is announced. A hold that cannot be recorded fails the attempt.
func (f *Fold) joinRepair(ctx context.Context, plan protocol.RepairPlan, art *fold.Store) error {
	e := &f.effects
	e.restoring.Store(false)
	if e.target == nil {
		return nil
	}
	own, ownIndex, ownMarked, err := f.store.OutboxMark()
	if err != nil {
		return fmt.Errorf("reading the outbox mark: %w", err)
	}
	beyond := func(rev protocol.Revision, index uint32) bool {
		return !ownMarked || fold.EffectsHold{Rev: own, Index: ownIndex}.After(rev, index)
	}
	// A listing's hold is syncing: its point is where it catches up. A
	// restore's is the artifact's cursor (from there on the fold files the
	// same effects as every replica, its own), or the artifact's own.
	join := fold.EffectsHold{Syncing: true}
	var why string
	args := []any{"plan", plan.String(), "fence", e.target.fence, "last_filed", fmt.Sprintf("%d/%d", own, ownIndex)}
	if art != nil {
		join = fold.EffectsHold{Rev: art.Cursor().Rev, Index: math.MaxUint32}
		theirs, ok, err := art.JoinedHold()
		if err != nil {
			return fmt.Errorf("reading the artifact's effects: %w", err)
		}
		if ok && (theirs.Syncing || beyond(theirs.Rev, theirs.Index)) {
			join = theirs
			why = "this fold restores from another node's artifact, whose node filed effects this fold never did or waited for another publisher's: they are not this fold's to publish, " +
				"so the restore's net change is dropped, and this fold publishes once the fence passes the last of them; " +
				"with no other replica, release it: foldhost admin release-effects"
			args = append(args, "artifact_waits_for", theirs.String())
		}
	}
	if why == "" {
		if h := e.hold.Load(); h != nil {
			join.Tentative = h.Tentative // no surer than the hold it has
			why = "this fold waits for another publisher's effects already: the repair's net change is dropped, and this fold publishes once the fence passes the repair's revision"
			args = append(args, "held", h.String())
		} else {
			fence, err := e.target.readFence(ctx, f.o.Name, f.effectsEpoch())
			if ctx.Err() != nil {
				return ctx.Err() // a read cut short says nothing: not "publish alone"
			}
			if err != nil || !fence.has || !beyond(fence.rev, fence.index) {
				return nil // no further than this store's own
			}
			why = "this fold's cursor expired while its effects fence moved past the last effect it filed: " +
				"another replica publishes this fold's effects, so the repair's net change is dropped, and this fold publishes once the fence passes the repair's revision; " +
				"with no other replica, release it: foldhost admin release-effects"
			args = append(args, "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index))
		}
	}
	for {
		h, next := e.hold.Load(), join
		if h != nil {
			next = h.With(join)
		}
		if h != nil && *h == next {
			e.restoring.Store(art != nil) // recorded already: no write to fail
			return nil
		}
		if err := f.setHold(h, &next, why, args...); !errors.Is(err, errHoldChanged) {
			e.restoring.Store(err == nil && art != nil)
			return err
		}
	}
}

// setHold replaces the hold from (the one the caller read; nil: none) by
// h (nil: none): in the store, then here, and wakes a held publisher;
// logged with msg and args. A hold changed since the caller read it (an
// operator's release beside the fold catching up) is left as it is, and
// errHoldChanged returned; a failed record changes nothing.
func (f *Fold) setHold(from, h *fold.EffectsHold, msg string, args ...any) error {
	e := &f.effects
	e.holdMu.Lock()
	defer e.holdMu.Unlock()
	if e.hold.Load() != from {
		return errHoldChanged
	}
	err := testhook.ErrHoldRecordFault
	if !testhook.FailHoldRecords.Load() {
		err = f.store.SetEffectsHold(h)
	}
	if err != nil {
		f.log.Warn("could not record the effects hold", "err", err)
		return err
	}
	e.hold.Store(h)
	select {
	case e.held <- struct{}{}:
	default:
	}
	f.log.Info(msg, args...)
	return nil
}

var errHoldChanged = errors.New("the effects hold changed meanwhile")

// loadHold reads the store's effects hold, at the start.
func (f *Fold) loadHold() error {
	f.effects.held = make(chan struct{}, 1)
	h, ok, err := f.store.EffectsHold()
	if ok {
		f.effects.hold.Store(&h)
		f.log.Info("this fold's effects are held: it publishes once the effects fence covers the point it joined at (foldhost admin release-effects: publish now)",
			"hold", h.String())
	}
	return err
}

// effectsCaughtUp is the fold's OnSynced part: a syncing hold gets its
// point, the cursor the fold caught up at (every effect another publisher
// holds below it comes before this fold's own). A point that cannot be
// recorded (the store failed a small sync write) is owed: the hold stays
// syncing (its effects dropped: nothing is lost that another publisher
// does not hold), the status shows the error, and the next commit tries
// again at its cursor (onApplied), the batches between dropped too.
func (f *Fold) effectsCaughtUp(c protocol.Cursor) {
	h := f.effects.hold.Load()
	if h == nil || !h.Syncing {
		f.effects.pointOwed.Store(false)
		return
	}
	testhook.Step(context.Background(), "caught-up")
	err := f.setHold(h, &fold.EffectsHold{Rev: c.Rev, Index: math.MaxUint32, Tentative: h.Tentative},
		"this fold caught up with the bucket it joined: it publishes its effects once the fence passes this revision", "revision", uint64(c.Rev))
	owed := err != nil && !errors.Is(err, errHoldChanged)
	f.effects.pointOwed.Store(owed)
	if owed {
		f.setErr(fmt.Errorf("recording the effects hold's point (retried at the next commit; until then this fold's effects are dropped): %w", err))
	}
}

// holding reports whether the publisher must wait: the store holds its
// effects (joined midway) and the fence, as last read, does not cover the
// hold's point. A covered point ends the hold.
func (f *Fold) holding(fence fenceState) bool {
	h := f.effects.hold.Load()
	if h == nil {
		return false
	}
	if h.Tentative && !fence.has {
		return f.setHold(h, nil, "the effects fence shows no effects of this fold published: this fold joined no other publisher; publishing") != nil
	}
	if h.Syncing || !fence.covers(fold.OutboxEntry{Rev: h.Rev, Index: h.Index}) {
		return true
	}
	return f.setHold(h, nil, "the effects fence passed the point this fold joined at: publishing", "fence_through", fmt.Sprintf("%d/%d", fence.rev, fence.index)) != nil
}

// ReleaseEffects ends the fold's effects hold (joinEffects): its
// publisher publishes from its outbox's first entry, without waiting for
// another publisher's effects. For a fold that has no other publisher (a
// node that lost its store, or bootstrapped from its own artifact and
// lost what it had not published). Effects a state-sync still emits are
// then published (the collapsed change).
func (f *Fold) ReleaseEffects() error {
	if f.effects.target == nil {
		return fmt.Errorf("fold %s: %w: it has no effects stream", f.o.Name, httpapi.ErrNothingHeld)
	}
	for {
		h := f.effects.hold.Load()
		if h == nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, httpapi.ErrNothingHeld)
		}
		if err := f.setHold(h, nil, "the effects hold was released: publishing"); !errors.Is(err, errHoldChanged) {
			return err
		}
	}
}

// readFence reads the fence subject's last message.
func (t *effectsTarget) readFence(ctx context.Context, foldName, epoch string) (fenceState, error) {
	rctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	m, err := t.handle.GetLastMsgForSubject(rctx, t.fence)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return fenceState{}, nil
	}
	if err != nil {
		return fenceState{}, fmt.Errorf("reading the effects fence %q: %w", t.fence, err)
	}
	st := fenceState{seq: m.Sequence}
	if m.Header.Get(hdrFenceEpoch) != epoch {
		return st, nil // another history's fence: none of these effects landed
	}
	if name := m.Header.Get(hdrFenceFold); name != "" && name != foldName {
		return st, nil // another fold's: it says nothing of this one's effects
	}
	r, i, ok := strings.Cut(m.Header.Get(hdrFenceThrough), "/")
	rev, err1 := strconv.ParseUint(r, 10, 64)
	idx, err2 := strconv.ParseUint(i, 10, 32)
	if !ok || err1 != nil || err2 != nil {
		return st, fmt.Errorf("the effects fence %q, message %d: %s %q is not <revision>/<index>", t.fence, m.Sequence, hdrFenceThrough, m.Header.Get(hdrFenceThrough))
	}
	st.has, st.rev, st.index = true, protocol.Revision(rev), uint32(idx)
	return st, nil
}

// fencePublish publishes chunk as one JetStream atomic batch, the fence
// last: the server stores all of it or none, and only if the fence
// subject's last sequence is still fenceSeq. So a batch lands once,
// whatever the stream's duplicate window, however long the outage: a
// repeat after a lost ack finds the fence moved. It returns the fence's
// new sequence.
//
// An effect refused for good (larger than the connection's max_payload,
// or than the stream's max_msg_size) is a *poisonEffectError naming it.
// The server answers each message of a batch only when it has a reply
// subject; without one (!probe, the fast path), a refused message shows
// only as the commit's errBatchIncomplete, and the caller probes: each
// message then goes as a request, and the first refusal names its effect.
func (t *effectsTarget) fencePublish(ctx context.Context, foldName, epoch string, fenceSeq uint64, chunk []fold.OutboxEntry, probe bool) (uint64, error) {
	var rnd [12]byte
	_, _ = rand.Read(rnd[:])
	batch := hex.EncodeToString(rnd[:])
	for i, e := range chunk {
		m := nats.NewMsg(e.Subject)
		m.Data = e.Payload
		for _, h := range e.Headers {
			m.Header.Add(h.Name, h.Value)
		}
		m.Header.Set(hdrEffectID, e.ID(foldName))
		m.Header.Set(jsBatchID, batch)
		m.Header.Set(jsBatchSeq, strconv.Itoa(i+1))
		var err error
		if probe {
			err = t.probeOne(ctx, m)
		} else {
			err = t.nc.PublishMsg(m)
		}
		if err != nil && i > 0 {
			t.abandon(batch, i)
		}
		if errors.Is(err, nats.ErrMaxPayload) {
			return 0, &poisonEffectError{index: i, reason: fmt.Sprintf("larger than the NATS server's max_payload (%d bytes, headers included)", t.nc.MaxPayload())}
		}
		var refused *refusedError
		if errors.As(err, &refused) && refused.code == jsErrBatchTooLarge {
			return 0, fmt.Errorf("%w: %s", errBatchTooLarge, refused.desc)
		}
		if errors.As(err, &refused) && refused.code == jsErrMessageTooLarge {
			return 0, &poisonEffectError{index: i, reason: fmt.Sprintf("stream %q refused it: %s (error %d; the stream's max_msg_size counts headers too)", t.stream, refused.desc, refused.code)}
		}
		if err != nil {
			return 0, fmt.Errorf("effect %s to %q: %w", e.ID(foldName), e.Subject, err)
		}
	}
	last := chunk[len(chunk)-1]
	fm := nats.NewMsg(t.fence)
	fm.Header.Set(hdrFenceThrough, fmt.Sprintf("%d/%d", last.Rev, last.Index))
	fm.Header.Set(hdrFenceEpoch, epoch)
	fm.Header.Set(hdrFenceFold, foldName)
	fm.Header.Set(jetstream.ExpectedLastSubjSeqHeader, strconv.FormatUint(fenceSeq, 10))
	fm.Header.Set(jsBatchID, batch)
	fm.Header.Set(jsBatchSeq, strconv.Itoa(len(chunk)+1))
	fm.Header.Set(jsBatchCommit, "1")
	pctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	reply, err := t.nc.RequestMsgWithContext(pctx, fm)
	if err != nil {
		return 0, fmt.Errorf("effects %s to %s: %w", chunk[0].ID(foldName), last.ID(foldName), err)
	}
	var ack struct {
		Seq   uint64 `json:"seq"`
		Count int    `json:"count"`
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return 0, fmt.Errorf("effects: the server's answer %q: %w", reply.Data, err)
	}
	switch {
	case ack.Error != nil && (ack.Error.ErrCode == int(jetstream.JSErrCodeStreamWrongLastSequence) || ack.Error.ErrCode == int(jetstream.JSErrCodeStreamWrongLastSequenceConstant)):
		return 0, fmt.Errorf("%w: %s", errFenceMoved, ack.Error.Description)
	case ack.Error != nil && ack.Error.ErrCode == jsErrBatchTooLarge:
		return 0, fmt.Errorf("effects %s to %s: %w: %s", chunk[0].ID(foldName), last.ID(foldName), errBatchTooLarge, ack.Error.Description)
	case ack.Error != nil && ack.Error.ErrCode == jsErrBatchIncomplete:
		return 0, fmt.Errorf("effects %s to %s: %w: stream %q refused a message of the batch (does it still capture every effects subject and the fence %q?): %s", chunk[0].ID(foldName), last.ID(foldName), errBatchIncomplete, t.stream, t.fence, ack.Error.Description)
	case ack.Error != nil:
		return 0, fmt.Errorf("effects %s to %s: stream %q refused the batch: %s (error %d)", chunk[0].ID(foldName), last.ID(foldName), t.stream, ack.Error.Description, ack.Error.ErrCode)
	case ack.Count != len(chunk)+1:
		return 0, fmt.Errorf("effects: stream %q stored a batch of %d messages, %d sent", t.stream, ack.Count, len(chunk)+1)
	}
	return ack.Seq, nil
}

// The JetStream errors the publisher tells apart (nats-server's
// JSAtomicPublishIncompleteBatchErr and JSStreamMessageExceedsMaximumErr).
const (
	jsErrBatchIncomplete = 10176
	jsErrBatchTooLarge   = 10199 // JSAtomicPublishTooLargeBatchErrF
	jsErrMessageTooLarge = 10054
)

// errBatchTooLarge: the server takes batches of fewer messages (its
// max_batch_size).
var errBatchTooLarge = errors.New("the batch is larger than the server's max_batch_size")

// errBatchIncomplete: the server refused a message of the batch, so its
// commit found the batch incomplete and stored none of it.
var errBatchIncomplete = errors.New("incomplete batch")

// poisonEffectError: the server refuses chunk[index] for good, whatever
// the retries (its size). A stream that does not capture an effect's
// subject is not one: the operator may fix the stream.
type poisonEffectError struct {
	index  int
	reason string
}

func (e *poisonEffectError) Error() string { return "a poison effect: " + e.reason }

// refusedError is a JetStream error answering one message.
type refusedError struct {
	code int
	desc string
}

func (e *refusedError) Error() string { return fmt.Sprintf("%s (error %d)", e.desc, e.code) }

// probeOne publishes one non-commit message of a batch as a request: the
// server answers an empty message once it staged it, or a JetStream error
// (a *refusedError). No stream capturing the subject shows as
// nats.ErrNoResponders.
func (t *effectsTarget) probeOne(ctx context.Context, m *nats.Msg) error {
	pctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	reply, err := t.nc.RequestMsgWithContext(pctx, m)
	if errors.Is(err, nats.ErrNoResponders) {
		return fmt.Errorf("no stream captures the subject (did stream %q stop capturing it?): %w", t.stream, err)
	}
	if err != nil || len(reply.Data) == 0 {
		return err
	}
	var ack struct {
		Error *struct {
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(reply.Data, &ack); err != nil {
		return fmt.Errorf("the server's answer %q: %w", reply.Data, err)
	}
	if ack.Error != nil {
		return &refusedError{code: ack.Error.ErrCode, desc: ack.Error.Description}
	}
	return nil
}

// abandon makes the server drop a batch whose first staged messages it
// holds, at once rather than at the batch's timeout (an open batch counts
// against the stream's 50 in flight): a message out of sequence ends it,
// and is not stored. Best effort: the timeout ends it anyway.
func (t *effectsTarget) abandon(batch string, staged int) {
	m := nats.NewMsg(t.fence)
	m.Header.Set(jsBatchID, batch)
	m.Header.Set(jsBatchSeq, strconv.Itoa(staged+2))
	_ = t.nc.PublishMsg(m)
}

// deadLetterEffect moves a poison effect from the outbox to the fold's
// dead letters (one store batch), counts it and logs it once.
func (f *Fold) deadLetterEffect(e fold.OutboxEntry, reason string) error {
	id := e.ID(f.o.Name)
	d := fold.DeadLetter{Rev: uint64(e.Rev), Op: fold.OpEffect, Error: deadLetterError(errors.New(reason)), At: time.Now().UTC(),
		Effect: &fold.DeadEffect{ID: id, Index: e.Index, Subject: e.Subject, Size: e.Size()}}
	if err := f.store.DeadLetterEffect(e, d); err != nil {
		return err
	}
	f.effects.deadLettered.Add(1)
	f.log.Warn("an effect the effects stream refuses for good was moved to the dead letters; the effects after it are published",
		"effect", id, "subject", e.Subject, "size", e.Size(), "stream", f.effects.target.stream, "reason", reason)
	f.dead.stored.Store(-1) // recounted by the prune
	f.dead.pending.Store(true)
	f.pruneDeadLetters()
	return nil
}

// JetStream's atomic batch headers (server 2.12+).
const (
	jsBatchID     = "Nats-Batch-Id"
	jsBatchSeq    = "Nats-Batch-Sequence"
	jsBatchCommit = "Nats-Batch-Commit"
)

// validEffectsOptions checks a fold's effects options (Options.withDefaults).
func validEffectsOptions(f *FoldOptions) error {
	if f.EffectsStream == "" {
		if len(f.EffectsSubjects) > 0 {
			return fmt.Errorf("EffectsSubjects without an EffectsStream")
		}
		return nil
	}
	if strings.ContainsAny(f.EffectsStream, " \t\r\n.*>/\\") {
		return fmt.Errorf("EffectsStream %q is not a stream name", f.EffectsStream)
	}
	if f.EffectsFence == "" {
		f.EffectsFence = fenceNamespace + f.Name
	}
	if err := validFilter(f.EffectsFence); err != nil || strings.ContainsAny(f.EffectsFence, "*>") {
		return fmt.Errorf("EffectsFence %q is not a subject (name the fold's fence subject: the default, foldhost.fence.<fold>, needs a fold name that is one subject token)", f.EffectsFence)
	}
	for _, s := range f.EffectsSubjects {
		if err := validFilter(s); err != nil {
			return fmt.Errorf("EffectsSubjects: %w", err)
		}
	}
	return nil
}

// effectsStatus is the status's part; nil before the first effect of a
// fold without an effects stream.
func (f *Fold) effectsStatus() *httpapi.EffectsStatus {
	e := &f.effects
	st := &httpapi.EffectsStatus{Published: e.published.Load(), Dropped: e.dropped.Load()}
	if e.target != nil {
		st.Stream, st.Fence = e.target.stream, e.target.fence
		st.Confirmed, st.FenceMoves = e.confirmed.Load(), e.fenceMoves.Load()
		st.DeadLettered = e.deadLettered.Load()
		if f.o.EffectsMaxWait > 0 {
			st.MaxWaitSeconds = f.o.EffectsMaxWait.Seconds()
		}
		st.Outbox = f.store.OutboxLen()
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
	switch h := e.hold.Load(); {
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
