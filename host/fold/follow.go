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
}

// Follow folds feed into store through plugin until ctx is done or the fold
// must stop. Each attempt resumes from the store's cursor (never from a
// cursor reported elsewhere: the store's is the one that matches its data),
// or starts with a state-sync when the store has none. A watch that ends for
// a transient reason (connection lost, a guard that could not read
// retention) is re-armed after a backoff; a cursor refused at resume or by
// the floor guard (ErrCursorExpired, ErrCursorBeyondHead), a plugin error or
// persistent commit failures stop the fold and are returned. On shutdown it
// returns the applied cursor and nil.
func Follow(ctx context.Context, feed Feed, store Target, plugin Plugin, cfg FollowConfig) (protocol.Cursor, error) {
	clock := cfg.Loop.Clock
	if clock == nil {
		clock = RealClock
	}
	backoff := 100 * time.Millisecond
	for {
		cur := store.Cursor()
		w, err := feed.Watch(ctx, cur)
		if err == nil {
			loop := NewLoop(store, plugin, cfg.Loop)
			if cfg.OnLoop != nil {
				cfg.OnLoop(loop)
			}
			cur, err = loop.Run(ctx, w)
			if err == nil || ctx.Err() != nil {
				return cur, nil
			}
		}
		if ctx.Err() != nil {
			return store.Cursor(), nil
		}
		if !transient(err) {
			return store.Cursor(), err
		}
		logger(cfg.Loop).Warn("fold: watch ended; re-arming", "cursor", store.Cursor(), "in", backoff, "err", err)
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
		ErrCursorExpired, ErrCursorBeyondHead, ErrStreamReplaced, // need a repair, not a retry
		ErrPlugin, ErrCommitFailures, ErrCursorRegression, ErrClosed, ErrInvalidCommit,
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
