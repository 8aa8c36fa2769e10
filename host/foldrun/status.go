package foldrun

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// Status implements httpapi.Fold.
func (f *Fold) Status() httpapi.Status {
	cur := f.store.Cursor() // memory; valid after Close too
	last := f.lastSeq.Load()
	state, since := f.state.get()
	st := httpapi.Status{
		Name:          f.o.Name,
		Bucket:        f.o.Bucket,
		Scope:         append([]string{}, f.o.Scope...),
		State:         state,
		StateSince:    since.UTC(),
		Ready:         f.ready.Load(),
		Cursor:        uint64(cur.Rev),
		Settled:       uint64(cur.SettledRev()),
		EvictionSeen:  cur.EvictionSeen,
		StreamLastSeq: last,
		HeadAtStart:   f.headAtStart.Load(),
		Repair:        f.o.Repair.String(),
		Repairs:       f.repairStatus(),
		Rebuild:       f.rebuildStatus(),
		DeadLetters:   f.deadLetterStatus(),
		DataDir:       f.o.DataDir,
	}
	if last > st.Cursor {
		st.Lag = last - st.Cursor
		if at := f.atHead.Load(); at != 0 {
			secs := max(0, time.Since(time.Unix(0, at)).Seconds())
			st.LagSeconds = &secs
		}
	} else {
		st.LagSeconds = new(float64)
	}
	if p := f.plug(); p != nil {
		st.Plugin = p.status()
	} else {
		st.Plugin.Source = f.o.Plugin // a fold waiting for its module says which
	}
	d, rej := f.delivered.Load(), f.rejected.Load()
	st.Counters = httpapi.Counters{
		DeliveredSinceStart: d,
		Applied:             d - min(rej, d),
		Rejected:            rej,
		Batches:             f.batches.Load(),
		PluginErrors:        f.pluginErrs.Load(),
		CommitFailures:      f.commitErr.Load(),
	}
	if ns := f.lastCommit.Load(); ns != 0 {
		at := time.Unix(0, ns).UTC()
		st.LastCommitAt = &at
	}
	if p := f.lastErr.Load(); p != nil {
		st.LastError = *p
	}
	st.Export = f.exportStatus()
	st.Effects = f.fx.Status()
	if f.env.Fleet {
		role, epoch := f.Role()
		if state == httpapi.StateElsewhere {
			role = protocol.RoleNone
		}
		st.Fleet = &httpapi.FleetRole{Role: role.String(), Epoch: uint64(epoch)}
	}
	st.NATS = f.env.Health.Status()
	if down := st.NATS.DownFor(time.Now()); st.Ready && down > f.env.DisconnectGrace {
		st.Ready = false
		st.Reason = fmt.Sprintf("NATS unreachable for %v (reconnecting since %s): the fold cannot follow, its reads grow stale",
			down.Round(time.Second), st.NATS.Since.UTC().Format(time.RFC3339))
	}
	if e := st.Effects; st.Ready && e != nil && e.MaxWaitSeconds > 0 && e.OutboxWaitSeconds > e.MaxWaitSeconds {
		st.Ready = false
		st.Reason = fmt.Sprintf("effects: the outbox's first effect has waited %v to be published, more than effects_max_wait (%v); %d wait",
			time.Duration(e.OutboxWaitSeconds*float64(time.Second)).Round(time.Millisecond), f.o.EffectsMaxWait, e.Outbox)
		if e.LastError != "" {
			st.Reason += "; last error: " + e.LastError
		}
		if e.Held != "" {
			st.Reason += "; held, " + e.Held + " (foldhost admin release-effects when no other replica publishes)"
		}
	}
	if !st.Ready && st.Reason == "" {
		switch st.State {
		case httpapi.StateHydrating:
			st.Reason = fmt.Sprintf("hydrating: cursor %d, stream head at start %d", st.Cursor, st.HeadAtStart)
		case httpapi.StateFailed:
			st.Reason = "failed: " + st.LastError
		case httpapi.StateWaiting:
			st.Reason = "waiting"
			if p := f.waitReason.Load(); p != nil {
				st.Reason = *p
			}
		case httpapi.StateRepairing:
			st.Reason = "repairing an expired cursor: reads answer from the fold as it was before the repair"
		case httpapi.StateRebuilding:
			st.Reason = "rebuilding the views through a new plugin before following: reads answer from the old views"
		case httpapi.StateElsewhere:
			st.Reason = "placed on other nodes of the fleet: this node does not fold it (its store, if any, is frozen at its cursor)"
		case httpapi.StatePaused:
			st.Reason = fmt.Sprintf("paused by an operator at cursor %d; resume it to follow again", st.Cursor)
		default:
			st.Reason = string(st.State)
		}
	}
	return st
}

func (f *Fold) setErr(err error) {
	s := err.Error()
	f.lastErr.Store(&s)
}

// clearErr: the fold recovered (it committed a batch, or caught up), so
// the error it had is history (the log keeps it).
func (f *Fold) clearErr() {
	if f.lastErr.Load() != nil {
		f.lastErr.Store(nil)
	}
}

// hint tells an operator what a fold-stopping error means.
func hint(err error) string {
	switch {
	case errors.Is(err, fold.ErrCursorExpired):
		return "NATS no longer retains revisions after the fold's cursor, and the repair could not run (see the error)"
	case errors.Is(err, fold.ErrCursorBeyondHead):
		return "the fold's cursor is past the stream's last revision: the bucket was probably deleted and recreated; move the data_dir aside to re-fold from scratch"
	case errors.Is(err, fold.ErrPlugin):
		return "the plugin failed on a batch; nothing of it was committed; drop a fixed module in place (the fold retries with it), or fix the data and resume (SIGHUP)"
	case errors.Is(err, fold.ErrStoreBroken) && errors.Is(err, fold.ErrDiskFull):
		return "a write of the store failed for lack of space (see the error); its data on disk is whole up to a commit; free space and the fold reopens the store from its files and resumes by itself (checked every 10s), or resume it (SIGHUP)"
	case errors.Is(err, fold.ErrStoreBroken):
		return "a write of the store failed (see the error); its data on disk is whole up to a commit; fix the disk and resume the fold (SIGHUP), which reopens the store from its files"
	case errors.Is(err, fold.ErrDiskFull):
		return "the store's filesystem is short of space (see the error: the path, the bytes needed and free); nothing of the batch was written; free space and the fold resumes by itself (checked every 10s), or resume it (SIGHUP)"
	case errors.Is(err, fold.ErrCommitFailures):
		return "the store kept refusing commits (disk full? permissions?); fix the disk and resume (SIGHUP)"
	case errors.Is(err, fold.ErrCorrupt):
		return "the store is corrupt; restore it (move the data_dir aside to re-fold from scratch)"
	}
	return ""
}

// WaitCursor waits until the fold's cursor reaches rev, calling progress
// (when set) with its status at every check, which come every interval. It
// fails when the fold stops first (on an error, or at shutdown) or ctx
// ends.
func (f *Fold) WaitCursor(ctx context.Context, rev uint64, every time.Duration, progress func(httpapi.Status)) error {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		st := f.Status()
		if progress != nil {
			progress(st)
		}
		switch {
		case st.Cursor >= rev:
			return nil
		case st.State == httpapi.StateFailed:
			return fmt.Errorf("fold %s stopped at cursor %d: %s", f.o.Name, st.Cursor, st.LastError)
		case st.State == httpapi.StateStopped:
			return fmt.Errorf("fold %s stopped at cursor %d, before %d", f.o.Name, st.Cursor, rev)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("fold %s at cursor %d, waiting for %d: %w", f.o.Name, st.Cursor, rev, ctx.Err())
		case <-t.C:
		}
	}
}

// CursorAdvanced is closed by the fold's next commit (httpapi.CursorWaiter:
// reads with ?min_revision wait on it).
func (f *Fold) CursorAdvanced() <-chan struct{} { return f.store.CursorAdvanced() }
