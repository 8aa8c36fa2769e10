package host

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
)

// Plugin effects (README, "Plugin effects"; RATIONALE.md, "Plugin
// effects"): the loop commits a batch's effects to the fold's outbox in
// the batch's own commit (fold.Commit.Effects), and the fold's publisher
// drains the outbox in order into the effects stream, deleting an entry
// only once the server acknowledged it. An effect's Nats-Msg-Id is its id,
// "<fold>/<revision>/<index>", so a publish repeated after a crash (acked,
// not yet deleted) is dropped by the stream within its duplicate window.

// Publisher pacing: entries read per round, and the backoff after a failed
// publish (doubling from the first to the last).
const (
	effectsChunk      = 256
	effectsBackoffMin = 100 * time.Millisecond
	effectsBackoffMax = 5 * time.Second
)

// effectsTarget is where a fold's effects go: its stream, and the subject
// filters an effect must match (EffectsSubjects, or the stream's subjects).
type effectsTarget struct {
	js      jetstream.JetStream
	stream  string
	filters []string
	timeout time.Duration // each publish
}

// effectsState is a fold's effects counters.
type effectsState struct {
	target    *effectsTarget // nil: effects are dropped
	published atomic.Uint64
	dropped   atomic.Uint64 // with no target (or a reset's refold)
	warned    atomic.Bool   // the one WARN of a drop was logged
	lastErr   atomic.Pointer[string]
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
	return &effectsTarget{js: js, stream: o.EffectsStream, filters: filters, timeout: timeout}, nil
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
}

func (e *EffectSubjectError) Error() string {
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
		if !t.captures(e.Subject) {
			return &EffectSubjectError{Subject: e.Subject, Filters: t.filters}
		}
	}
	return nil
}

// publishEffects drains the fold's outbox into its effects stream until
// ctx ends: in order, one publish at a time (the stream's order is the
// fold's), each with its id as Nats-Msg-Id and the stream as the expected
// one; entries are deleted once acknowledged. A failure is retried, from
// the first unacknowledged entry, after a backoff. Nothing is lost when ctx
// ends in between: the next run starts where this one stopped.
func (f *Fold) publishEffects(ctx context.Context) {
	t := f.effects.target
	var chunk, acked []fold.OutboxEntry
	failures := 0
	for ctx.Err() == nil {
		chunk = chunk[:0]
		err := f.store.Outbox(effectsChunk, func(e fold.OutboxEntry) error { chunk = append(chunk, e); return nil })
		if err == nil && len(chunk) == 0 {
			select {
			case <-ctx.Done():
				return
			case <-f.store.OutboxSignal():
			}
			continue
		}
		acked = acked[:0]
		for _, e := range chunk {
			if err != nil {
				break
			}
			if err = t.publish(ctx, f.o.Name, e); err == nil {
				acked = append(acked, e)
			}
		}
		if derr := f.store.DeleteOutbox(acked...); derr != nil && err == nil {
			err = derr
		} else if derr == nil {
			f.effects.published.Add(uint64(len(acked)))
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
		failures++
		msg := err.Error()
		f.effects.lastErr.Store(&msg)
		if failures == 1 || failures%20 == 0 {
			f.log.Warn("publishing an effect failed; retrying", "stream", t.stream, "failures", failures, "err", err)
		}
		backoff := min(effectsBackoffMin<<min(failures-1, 10), effectsBackoffMax)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
	}
}

// publish sends one effect and waits for the stream's acknowledgement.
func (t *effectsTarget) publish(ctx context.Context, foldName string, e fold.OutboxEntry) error {
	m := nats.NewMsg(e.Subject)
	m.Data = e.Payload
	for _, h := range e.Headers {
		m.Header.Add(h.Name, h.Value)
	}
	pctx, cancel := context.WithTimeout(ctx, t.timeout)
	defer cancel()
	id := e.ID(foldName)
	if _, err := t.js.PublishMsg(pctx, m, jetstream.WithMsgID(id), jetstream.WithExpectStream(t.stream)); err != nil {
		return fmt.Errorf("effect %s to %q: %w", id, e.Subject, err)
	}
	return nil
}

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
		st.Stream = e.target.stream
	} else if st.Dropped == 0 {
		return nil
	}
	if p := e.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	return st
}
