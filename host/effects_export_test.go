package host

import (
	"context"

	"github.com/foldhost/foldhost/host/fold"
)

// OutboxLen counts the entries of f's outbox (tests: what is committed
// and not yet published).
func OutboxLen(f *Fold) int {
	n := 0
	if err := f.store.Outbox(0, func(_ fold.OutboxEntry) error { n++; return nil }); err != nil {
		return -1
	}
	return n
}

// EffectsDroppedByStore is the store's count of re-delivered effects.
func EffectsDroppedByStore(f *Fold) uint64 { return f.store.EffectsDropped() }

// SetEffectsAfterAck sets the publishers' fault-injection hook (run after
// a batch's ack, before its delete) until the test ends.
func SetEffectsAfterAck(t interface{ Cleanup(func()) }, fn func(ctx context.Context)) {
	effectsAfterAck = fn
	t.Cleanup(func() { effectsAfterAck = nil })
}
