package foldrun

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// settleNow settles the store's cursor, when a prefix watch left it
// unsettled, before an export round checkpoints it. On the loop with
// nothing pending, every update delivered up to the cursor's position is
// committed, so a retention reading that shows nothing evicted above the
// settled point settles all of it (protocol.SettleDelivered): the artifact
// then carries a settled cursor, which a node restoring from it can resume
// from even after retention passed the old settled point. A reading that
// fails or cannot settle it exports the cursor as it is (the artifact says
// it is unsettled; the watch's own probe judges the fold).
func (f *Fold) settleNow(ctx context.Context, t fold.Target) error {
	c := t.Cursor()
	if !c.Unsettled {
		return nil
	}
	ret, now, err := f.bucket.Retention(ctx)
	if err != nil {
		f.log.Warn("export: could not read retention to settle the cursor; exporting it unsettled", "cursor", uint64(c.Rev), "err", err)
		return nil
	}
	s, ok := protocol.SettleDelivered(c.Settled, c.Rev, ret, 0, now.UnixNano())
	if !ok {
		return nil
	}
	return t.Commit(fold.Commit{Cursor: protocol.Settle(c, s, 0, false)})
}

// exportState is what a fold's rounds report.
type exportState struct {
	mu             sync.Mutex // serializes rounds
	metaMu         sync.Mutex // guards the fields below
	last           *round.Report
	lastAt         time.Time
	lastPublished  time.Time
	exportedCursor uint64    // the highest cursor a round published or found superseded
	exported       bool      // a round published or found superseded (exportedCursor is one's)
	upToDate       time.Time // when an artifact was last known to hold the fold's cursor
	rounds         httpapi.ExportRounds
}

// Export implements httpapi.Exporter: a round now, on the live loop. It
// runs under the fold's context, not the request's: a client that goes away
// does not cut a round short (its work would be lost and its lease held);
// a shutdown does.
func (f *Fold) Export(_ context.Context, force bool) (any, error) {
	if f.env.Exporter == nil {
		return nil, httpapi.ErrExportNotConfigured
	}
	ctx := f.runCtx.Load()
	if ctx == nil {
		return nil, errors.New("the fold is not running")
	}
	if !f.owner() {
		if f.state.Load() == httpapi.StateElsewhere {
			return nil, fmt.Errorf("this node does not fold %s now: its owner exports it (foldhost fleet status names the owner)", f.o.Name)
		}
		return nil, fmt.Errorf("this node is a standby of fold %s: its owner exports it (foldhost fleet status names the owner)", f.o.Name)
	}
	res, err := f.exportRound(*ctx, force)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// exportRound runs one round on the fold's live loop; rounds of one fold
// never overlap.
func (f *Fold) exportRound(ctx context.Context, force bool) (round.Report, error) {
	f.export.mu.Lock()
	defer f.export.mu.Unlock()
	loop := f.loop.Load()
	if loop == nil {
		return round.Report{Fold: f.o.Name}, errors.New("the fold is not running yet")
	}
	if st := f.state.Load(); st == httpapi.StateFailed || st == httpapi.StateStopped || st == httpapi.StateDraining {
		return round.Report{Fold: f.o.Name}, fmt.Errorf("the fold is %s: export it with 'foldhost export' once foldhost is stopped", st)
	} else if st == httpapi.StatePaused {
		return round.Report{Fold: f.o.Name}, errors.New("the fold is paused: resume it to export (a round runs on the fold's live watch)")
	} else if st == httpapi.StateRepairing {
		// The repair runs with no loop, so the round could not run on
		// one anyway (a stopped loop refuses): say why.
		return round.Report{Fold: f.o.Name}, errors.New("the fold is repairing an expired cursor: no artifact of a half-repaired store; the next round after the repair exports")
	}
	ex := f.o.Exportee()
	if f.env.Fleet {
		// In a fleet a round runs under the owner's epoch, read once
		// here: the pointer carries it, and a newer owner's refuses it.
		role, epoch := f.Role()
		if role != protocol.RoleOwner || epoch == 0 {
			return round.Report{Fold: f.o.Name}, fmt.Errorf("this node does not own fold %s (any more): its owner exports it", f.o.Name)
		}
		ex.Epoch = epoch
	}
	res, err := f.env.Exporter.Round(ctx, ex, f.store, loop, force, f.settleNow)
	if err != nil {
		res.Outcome, res.Error = round.Failed, err.Error()
	}
	now := time.Now().UTC()
	x := &f.export
	x.metaMu.Lock()
	defer x.metaMu.Unlock()
	x.last, x.lastAt = &res, now
	switch res.Outcome {
	case round.Failed:
		x.rounds.Failed++
	case round.Published:
		x.rounds.Published++
		x.lastPublished, x.upToDate = now, now
		x.exportedCursor, x.exported = max(x.exportedCursor, res.Cursor), true
	case round.Superseded:
		x.rounds.Superseded++
		x.upToDate = now // the store holds a newer artifact than the fold's cursor
		x.exportedCursor, x.exported = max(x.exportedCursor, res.Cursor), true
	case round.Skipped:
		x.rounds.Skipped++
	case round.Fenced:
		x.rounds.Fenced++
	}
	return res, err
}

// nothingToExport reports whether the fold's cursor cur is at or below the
// cursor this process last exported (an empty fold's 0 included), and if
// so notes the artifact up to date now: an idle fold's artifact is as
// fresh as it can be, and the alert on artifact staleness reads this time
// (RATIONALE.md, "Dashboard and alerts: a stall is judged on the cursor").
func (f *Fold) nothingToExport(cur uint64, now time.Time) bool {
	x := &f.export
	x.metaMu.Lock()
	defer x.metaMu.Unlock()
	if cur > x.exportedCursor {
		return false
	}
	x.upToDate = now.UTC()
	return true
}

// exportStatus is the fold's export status; nil when exporting is not
// configured.
func (f *Fold) exportStatus() *httpapi.ExportStatus {
	if f.env.Exporter == nil {
		return nil
	}
	st := &httpapi.ExportStatus{Key: f.o.ArtifactKey, Store: f.env.ArtifactsWhere, Interval: f.o.ExportInterval.String()}
	x := &f.export
	x.metaMu.Lock()
	defer x.metaMu.Unlock()
	st.Rounds = x.rounds
	if !x.lastPublished.IsZero() {
		at := x.lastPublished
		st.LastPublishedAt = &at
	}
	if x.exported {
		c := x.exportedCursor
		st.ExportedCursor = &c
	}
	if !x.upToDate.IsZero() {
		at := x.upToDate
		st.UpToDateAt = &at
	}
	if le := x.last; le != nil {
		at := x.lastAt
		st.LastAt, st.LastOutcome, st.LastCursor, st.LastError = &at, le.Outcome.String(), le.Cursor, le.Error
	}
	return st
}

// exportEvery runs a round every ExportInterval once the fold caught up
// (an artifact of a hydrating fold is behind the fleet's). Failures are
// logged; the next tick retries.
func (f *Fold) exportEvery(ctx context.Context) {
	if f.env.Exporter == nil || f.o.ExportInterval <= 0 {
		return
	}
	t := time.NewTicker(f.o.ExportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		// Nothing new to export: an empty fold, or the cursor a round of
		// this process already published (a new artifact of the same
		// cursor would only add a payload for prune to collect). Checked
		// in every state: a paused or failed fold whose cursor an
		// artifact holds is up to date too.
		if !f.owner() {
			continue // a fleet's standby: its owner exports
		}
		if f.nothingToExport(uint64(f.store.Cursor().Rev), time.Now()) {
			continue
		}
		if !f.ready.Load() || f.state.Load() != httpapi.StateFollowing {
			continue
		}
		res, err := f.exportRound(ctx, false)
		switch {
		case err != nil && ctx.Err() == nil:
			f.log.Error("export round failed; the next one retries", "key", f.o.ArtifactKey, "err", err)
		case err == nil && res.Outcome == round.Skipped:
			f.log.Debug("export round skipped: another node holds the lease", "key", f.o.ArtifactKey, "holder", res.LeaseHolder)
		case err == nil:
			f.log.Info("export round done", "key", f.o.ArtifactKey, "outcome", res.Outcome, "cursor", res.Cursor,
				"took", (time.Duration(res.TookMS) * time.Millisecond).String())
		}
	}
}
