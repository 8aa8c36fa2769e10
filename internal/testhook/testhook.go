// Package testhook holds the points where tests reach into the host's
// production code: fault injection and synchronization. Every hook is nil
// (or zero) in production and read where the code reaches its point; only
// tests set them, with Set, never while a host they affect runs (a hook is
// a plain variable, read without a lock). One place for all of them, so a
// reader sees every seam the tests use, and the packages they live in
// need no test-only API of their own.
//
// It imports nothing of the host but package fold's plain types.
package testhook

import (
	"context"
	"errors"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/fold"
)

var (
	// StoreOptions adjusts the options each fold's store is opened with
	// (a fault-injecting filesystem, a small disk reserve).
	StoreOptions func(fold string, o *fold.Options)
	// DiskPoll, when non-zero, is how often a fold failed on a full disk
	// checks whether its space is free again (10 s otherwise).
	DiskPoll time.Duration

	// AfterReplay is called by every view rebuild between its replay and
	// its switch (live: whether it runs beside the live fold), with the
	// rebuild's context: a test holds the rebuild there while it writes or
	// reloads, and returns when ctx ends.
	AfterReplay func(ctx context.Context, live bool)
	// RebuildProgress is called after every batch of every rebuild (a
	// kill mid-replay).
	RebuildProgress func(fold.RebuildProgress)

	// ObjectPoll, when non-zero, is how often an object-store plugin
	// source looks at its object besides the watch (30 s otherwise).
	ObjectPoll time.Duration

	// EffectsStep runs at steps of the effects publisher and of the
	// fold's joins: "before-publish" (a batch read from the outbox, not
	// sent), "after-ack" (acknowledged, not yet deleted), "caught-up" (a
	// joining fold caught up) and "restore-done" (a restore's last
	// commit). A publisher whose ctx ended there stops as a killed process
	// would.
	EffectsStep func(ctx context.Context, step string)
	// ExportStep runs at steps of an export round: "before-upload" (the
	// artifact staged, its payload and pointer not yet written).
	ExportStep func(ctx context.Context, step string)
	// FailHoldRecords makes every record of an effects hold fail with
	// ErrHoldRecordFault.
	FailHoldRecords atomic.Bool

	// ResetStep is called before each step of a repair --reset's swap
	// (write-marker, move-old-aside, move-fresh-in, remove-marker); an
	// error stops the swap there, nothing undone, as a kill would.
	ResetStep func(step string) error
)

// ErrHoldRecordFault is the error of an effects hold record failed by
// FailHoldRecords.
var ErrHoldRecordFault = errors.New("injected fault: the effects hold's record failed")

// Set sets *hook to v until the test ends (t.Cleanup puts back what was
// there).
func Set[T any](t interface{ Cleanup(func()) }, hook *T, v T) {
	old := *hook
	*hook = v
	t.Cleanup(func() { *hook = old })
}

// Step calls EffectsStep with step when it is set.
func Step(ctx context.Context, step string) {
	if h := EffectsStep; h != nil {
		h(ctx, step)
	}
}

// Export runs ExportStep, if set, at step.
func Export(ctx context.Context, step string) {
	if h := ExportStep; h != nil {
		h(ctx, step)
	}
}

// Or is d, or def when d is zero: a poll interval a test may shorten.
func Or(d, def time.Duration) time.Duration {
	if d != 0 {
		return d
	}
	return def
}
