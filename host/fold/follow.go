package fold

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// FollowConfig configures Follow.
type FollowConfig struct {
	Loop LoopConfig
	// OnLoop, if set, receives each Loop as Follow creates it (one per watch
	// attempt), so callers can send it requests (Loop.Do).
	OnLoop func(*Loop)
	// Repair, if set, repairs instead of stopping. Follow calls it, on
	// its own goroutine and with the store holding every delivered update,
	// when the feed refuses the cursor as expired (at a resume, or when the
	// floor guard ends a live watch: cause matches ErrCursorExpired), and
	// before a start without a cursor (cause nil). It returns the source
	// to go on folding from (a state-sync it consumed up to its Synced
	// marker), (nil, nil) when a cursorless start needs no repair, or an
	// error: one matching ErrRepairRefused (or another fatal error) stops
	// the fold, any other is retried like a watch error.
	Repair func(ctx context.Context, cause error) (Source, error)
}

// Follow folds feed into store through plugin until ctx is done or the fold
// must stop. Each attempt resumes from the store's cursor (never from a
// cursor reported elsewhere: the store's is the one that matches its data),
// or starts with a state-sync when the store has none. A watch that ends for
// a transient reason (connection lost, a guard that could not read
// retention) is re-armed after a backoff. An expired cursor goes to
// FollowConfig.Repair, and the fold goes on from the source it returns;
// without one, or when the repair is refused, the fold stops. A cursor past
// the stream head, a replaced stream, a plugin error or persistent commit
// failures stop it too, and are returned. On shutdown it returns the
// applied cursor and nil.
func Follow(ctx context.Context, feed Feed, store Target, plugin Plugin, cfg FollowConfig) (protocol.Cursor, error) {
	clock := cfg.Loop.Clock
	if clock == nil {
		clock = RealClock
	}
	backoff := 100 * time.Millisecond
	var cause error // an expiry the next attempt repairs
	for {
		var src Source
		var err error
		if cfg.Repair != nil && (cause != nil || store.Cursor().Rev == protocol.NoRevision) {
			src, err = cfg.Repair(ctx, cause)
			cause = nil
		}
		if src == nil && err == nil {
			src, err = feed.Watch(ctx, store.Cursor())
		}
		if err == nil {
			loop := NewLoop(store, plugin, cfg.Loop)
			if cfg.OnLoop != nil {
				cfg.OnLoop(loop)
			}
			var cur protocol.Cursor
			cur, err = loop.Run(ctx, src)
			if err == nil || ctx.Err() != nil {
				return cur, nil
			}
		}
		if ctx.Err() != nil {
			return store.Cursor(), nil
		}
		if cfg.Repair != nil && errors.Is(err, ErrCursorExpired) && !errors.Is(err, ErrRepairRefused) {
			logger(cfg.Loop).Warn("fold: cursor expired; repairing", "cursor", uint64(store.Cursor().Rev), "err", err)
			cause = err
			continue
		}
		if !transient(err) {
			return store.Cursor(), err
		}
		logger(cfg.Loop).Warn("fold: watch ended; re-arming", "cursor", uint64(store.Cursor().Rev), "in", backoff.String(), "err", err)
		t := clock.NewTimer()
		t.Reset(backoff)
		select {
		case <-t.C():
		case <-ctx.Done():
			t.Stop()
			return store.Cursor(), nil
		}
		backoff = min(2*backoff, 10*time.Second)
	}
}

// transient reports whether a watch error may go away by watching again.
func transient(err error) bool {
	for _, fatal := range []error{
		ErrCursorExpired, ErrCursorBeyondHead, ErrStreamReplaced, ErrRepairRefused, // need a repair, not a retry
		ErrPlugin, ErrCommitFailures, ErrCursorRegression, ErrClosed, ErrInvalidCommit,
		ErrDiskFull, ErrStoreBroken, // the fold fails; its supervisor waits for space
	} {
		if errors.Is(err, fatal) {
			return false
		}
	}
	return true
}

func logger(c LoopConfig) *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}
