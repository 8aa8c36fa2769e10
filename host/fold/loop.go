package fold

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// Target is the store surface the loop writes to. *Store implements it;
// tests wrap it to inject faults.
type Target interface {
	Reader
	Commit(Commit) error
}

var _ Target = (*Store)(nil)

// Defaults for LoopConfig.
const (
	DefaultWindow            = 10 * time.Millisecond
	DefaultMaxBatch          = 100
	DefaultMaxCommitFailures = 16
)

// LoopConfig tunes a Loop. The zero value takes the defaults.
type LoopConfig struct {
	// Window is how long a batch stays open after its first update;
	// default DefaultWindow.
	Window time.Duration
	// MaxBatch closes a batch early at this many updates; default
	// DefaultMaxBatch.
	MaxBatch int
	// MaxCommitFailures consecutive transient commit failures stop the
	// loop; default DefaultMaxCommitFailures.
	MaxCommitFailures int
	// OnApplied, if set, is called on the loop's goroutine after every
	// successful commit. It must not block for long: the loop waits.
	OnApplied func(Applied)
	// OnSynced, if set, is called once, when everything the source delivered
	// before its Synced marker (a state-sync's initial values, or a resume's
	// backlog) is committed.
	OnSynced func(protocol.Cursor)
	// OnPluginError, if set, is called on the loop's goroutine with each
	// error the plugin returned (the batch is not committed; the loop
	// stops). OnCommitError likewise with each failed commit (the batch is
	// kept and retried, unless the error stops the loop).
	OnPluginError, OnCommitError func(error)
	// Poison, if set, makes the loop skip what the plugin cannot fold
	// instead of stopping: a batch the plugin fails is split in halves,
	// each part applied and committed on its own (in revision order, so
	// the cursor moves forward part by part), down to single updates; an
	// update the plugin fails alone is committed to the raw fold only (the
	// views skip it), with the DeadLetter Poison makes of it, and the
	// cursor covers it. A cancelled context still stops the loop.
	Poison func(Update, error) DeadLetter
	// DiscardEffects drops the plugin's effects instead of committing them
	// to the outbox: a fold that re-folds history (the fresh store of a
	// reset) must not announce it again.
	DiscardEffects bool
	// Clock is the loop's time (the batch window, the retry backoff, the
	// Applied durations); default the real clock. A simulation passes its
	// own to drive the loop step by step.
	Clock Clock
	// Logger; default slog.Default().
	Logger *slog.Logger
}

// Applied describes one committed batch.
type Applied struct {
	Cursor   protocol.Cursor
	Updates  int // updates in the batch (re-queued ones included)
	Rejected int
	Views    int // view mutations committed
	Effects  int // effects committed to the outbox
	// DeadLettered: updates of the batch the plugin failed on alone,
	// committed raw only (LoopConfig.Poison).
	DeadLettered int
	Took         time.Duration // apply + commit
}

// Errors that stop the loop.
var (
	// ErrPlugin wraps a plugin's error: the batch was not committed and the
	// cursor did not move.
	ErrPlugin = errors.New("fold: plugin failed")
	// ErrCommitFailures: MaxCommitFailures commits in a row failed.
	ErrCommitFailures = errors.New("fold: too many consecutive commit failures")
	// ErrLoopStopped: Do was called on a loop whose Run has returned.
	ErrLoopStopped = errors.New("fold: loop stopped")
)

// Loop is the applied loop: it batches a source's updates, hands each batch
// to the plugin, and only after the plugin returned commits the raw updates,
// the plugin's view mutations and the cursor (protocol.CursorAfterBatch) in
// one store batch. A persisted cursor therefore never names an update the
// plugin has not applied.
//
// A failed commit keeps the batch and retries it, in front of whatever
// arrived since, after a backoff; it is never dropped (dropping it and
// committing the next batch would leave a cursor gap that survives every
// restart: protocol model 1, mutation dropFailedBatch).
type Loop struct {
	store  Target
	plugin Plugin
	cfg    LoopConfig
	reqs   chan request
	done   chan struct{} // closed when Run returns

	pending []Update // the open batch, re-queued updates first
	revs    []protocol.Revision
	// settled is the revision up to which the source vouches that every
	// update of the scope was delivered (protocol.Cursor.Unsettled); the
	// next commit's cursor carries it. settledTime is the server time of a
	// message at or below it.
	settled     protocol.Revision
	settledTime int64
	failures    int
	synced      bool // the source's Synced marker was seen
	reported    bool // OnSynced was called
	stopping    bool // the context ended: the last flush runs
}

type request struct {
	fn    func(ctx context.Context, t Target) error
	reply chan error
}

// NewLoop returns a loop that folds into store through plugin.
func NewLoop(store Target, plugin Plugin, cfg LoopConfig) *Loop {
	if cfg.Window <= 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.MaxBatch <= 0 {
		cfg.MaxBatch = DefaultMaxBatch
	}
	if cfg.MaxCommitFailures <= 0 {
		cfg.MaxCommitFailures = DefaultMaxCommitFailures
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock
	}
	return &Loop{store: store, plugin: plugin, cfg: cfg, reqs: make(chan request), done: make(chan struct{})}
}

// Do runs fn on the loop's goroutine between flushes, after the pending batch
// was flushed: export and repair work, which must never run concurrently with
// an apply. It fails without calling fn if the pending batch cannot be
// committed. Until the loop takes the request, Do gives up when ctx is
// done or the loop stopped ([ErrLoopStopped]); once taken, it waits for fn
// to return whatever ctx does, so fn's effects never outlive Do (an export
// cancelled halfway must still be able to remove what it staged). Run Do's
// fn only with bounded work.
func (l *Loop) Do(ctx context.Context, fn func(ctx context.Context, t Target) error) error {
	r := request{fn: fn, reply: make(chan error, 1)}
	select {
	case l.reqs <- r:
	case <-ctx.Done():
		return ctx.Err()
	case <-l.done:
		return ErrLoopStopped
	}
	return <-r.reply
}

// Run folds src until ctx is done (shutdown), src ends, or an error stops the
// fold. On every exit it first flushes the pending batch, then stops src, and
// returns the store's cursor: the applied position to resume from. The error
// is nil for a shutdown or a cleanly ended source, src.Err() for a source
// that failed (such as natskv.ErrCursorExpired), or the error that stopped
// the fold.
func (l *Loop) Run(ctx context.Context, src Source) (protocol.Cursor, error) {
	defer close(l.done)
	defer src.Stop()
	timer := l.cfg.Clock.NewTimer()
	defer timer.Stop()
	armed := false
	arm := func(d time.Duration) {
		if !armed {
			timer.Reset(d)
			armed = true
		}
	}
	events := src.Events()
	l.settled = l.store.Cursor().SettledRev()
	for {
		select {
		case <-ctx.Done():
			l.stopping = true
			return l.finish(context.WithoutCancel(ctx), nil)
		case ev, ok := <-events:
			// Take what the source already buffered with single-channel
			// receives rather than this four-channel select, which cost
			// about as much CPU as the commits while hydrating
			// (BenchmarkFoldEndToEnd): until the buffer is empty, a flush
			// emptied the batch, or a commit failed. The select, and with
			// it shutdown, requests and the window, still runs at least
			// once per batch.
		drain:
			for {
				if !ok {
					return l.finish(ctx, src.Err())
				}
				if err := l.accept(ctx, ev, arm); err != nil {
					return l.store.Cursor(), err
				}
				if len(l.pending) == 0 || l.failures > 0 {
					break
				}
				select {
				case ev, ok = <-events:
				default:
					break drain
				}
			}
		case <-timer.C():
			armed = false
			if err := l.flush(ctx); err != nil {
				return l.store.Cursor(), err
			}
		case r := <-l.reqs:
			err := l.flush(ctx)
			if err == nil && len(l.pending) > 0 {
				err = fmt.Errorf("fold: request refused: %d updates still uncommitted after a commit failure", len(l.pending))
			}
			if err == nil {
				err = r.fn(ctx, l.store)
			}
			r.reply <- err
		}
		if len(l.pending) > 0 && l.failures > 0 {
			arm(l.backoff())
		}
	}
}

// accept takes one event from the source: the Synced marker flushes the
// pending batch; an update joins it, and flushes it once it is full (unless
// a failed commit is waiting for its backoff).
func (l *Loop) accept(ctx context.Context, ev Event, arm func(time.Duration)) error {
	if ev.Settle > l.settled {
		l.settled, l.settledTime = ev.Settle, ev.SettleTime
	}
	if ev.Synced {
		l.synced = true
		return l.flush(ctx)
	}
	if ev.SettleOnly() {
		if len(l.pending) == 0 && l.failures == 0 {
			return l.commitSettled()
		}
		return nil // the pending batch's commit carries it
	}
	if !ev.Unsettled && ev.Rev > l.settled {
		l.settled, l.settledTime = ev.Rev, ev.Time
	}
	l.pending = append(l.pending, ev.Update)
	if len(l.pending) >= l.cfg.MaxBatch && l.failures == 0 {
		return l.flush(ctx)
	}
	arm(l.cfg.Window)
	return nil
}

// backoff is the delay before retrying a failed commit: the window doubled
// per consecutive failure, at most one second.
func (l *Loop) backoff() time.Duration {
	d := l.cfg.Window << min(l.failures, 10)
	return min(d, time.Second)
}

// finish flushes what is pending and returns the applied cursor. A batch
// whose commit keeps failing is left to the resume: nothing was committed
// for it, so the restart re-delivers it.
func (l *Loop) finish(ctx context.Context, cause error) (protocol.Cursor, error) {
	err := l.flush(ctx)
	if cause != nil {
		err = cause
	}
	return l.store.Cursor(), err
}

// flush applies and commits the pending batch. It returns an error only when
// the fold must stop; a transient commit failure keeps the batch pending.
func (l *Loop) flush(ctx context.Context) error {
	if len(l.pending) == 0 {
		if err := l.commitSettled(); err != nil {
			return err
		}
		l.reportSynced()
		return nil
	}
	start := l.cfg.Clock.Now()
	out, err := l.plugin.Apply(ctx, l.pending, l.store)
	if err != nil {
		if l.cfg.OnPluginError != nil {
			l.cfg.OnPluginError(err)
		}
		if l.cfg.Poison != nil && l.stopping {
			// Shutdown's last flush: no bisection (each failing call can
			// cost the plugin's deadline and retries). Nothing of the batch
			// is committed; the resume re-delivers and isolates it.
			l.cfg.Logger.Warn("fold: at shutdown the plugin failed the pending batch; it is left to the resume",
				"updates", len(l.pending), "err", err)
			clear(l.pending)
			l.pending = l.pending[:0]
			return nil
		}
		if l.cfg.Poison != nil && ctx.Err() == nil {
			return l.isolate(ctx, err)
		}
		first, last := l.pending[0].Rev, l.pending[len(l.pending)-1].Rev
		return fmt.Errorf("%w on the batch of revisions %d..%d (nothing committed, cursor stays at %v): %w",
			ErrPlugin, first, last, l.store.Cursor(), err)
	}
	if done, err := l.commitPart(l.pending, out, nil, start, true); !done {
		return err
	}
	clear(l.pending) // drop value references
	l.pending = l.pending[:0]
	l.reportSynced()
	return nil
}

// commitSettled commits the cursor alone when a settle mark moved it (no
// update is pending): a prefix watch's quiet stretches, or its deliveries
// confirmed after they were committed. A commit that fails is not retried
// here: the next commit carries the mark.
func (l *Loop) commitSettled() error {
	prev := l.store.Cursor()
	cursor := protocol.Settle(prev, max(l.settled, prev.SettledRev()), l.settledTime, true)
	if cursor == prev {
		return nil
	}
	err := l.store.Commit(Commit{Cursor: cursor})
	if err != nil {
		if l.cfg.OnCommitError != nil {
			l.cfg.OnCommitError(err)
		}
		if errors.Is(err, ErrCursorRegression) || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidCommit) {
			return err
		}
		l.cfg.Logger.Warn("fold: committing a settled cursor failed; the next commit carries it", "cursor", uint64(cursor.Rev), "err", err)
	}
	return nil
}

// commitPart commits part (a prefix of the pending batch, in revision
// order) with the plugin's output and dead letters, and reports it;
// complete says part ends the pending batch (the cursor may then move to
// the settled revision: nothing delivered below it is left to apply). A
// failed commit returns done false, with the error when the fold must
// stop (nil: keep the batch pending, retried later).
func (l *Loop) commitPart(part []Update, out Output, dead []DeadLetter, start time.Time, complete bool) (done bool, err error) {
	l.revs = l.revs[:0]
	var highTime int64
	var high protocol.Revision
	for i := range part {
		u := &part[i]
		l.revs = append(l.revs, u.Rev)
		if u.Rev > high {
			high, highTime = u.Rev, u.Time
		}
	}
	prev := l.store.Cursor()
	cursor := protocol.CursorAfterBatch(prev, l.revs, highTime)
	cursor = protocol.Settle(cursor, max(l.settled, prev.SettledRev()), l.settledTime, complete)
	c := Commit{Raw: part, Views: out.Views, Cursor: cursor, PluginIdentity: out.Identity, DeadLetters: dead}
	if len(out.Effects) > 0 && !l.cfg.DiscardEffects {
		c.Effects, c.EffectRev = out.Effects, high
	}
	err = l.store.Commit(c)
	if err != nil {
		if l.cfg.OnCommitError != nil {
			l.cfg.OnCommitError(err)
		}
		if errors.Is(err, ErrCursorRegression) || errors.Is(err, ErrClosed) || errors.Is(err, ErrInvalidCommit) {
			return false, err // broken invariant or no store: retrying cannot help
		}
		if errors.Is(err, ErrDiskFull) || errors.Is(err, ErrStoreBroken) {
			// Nothing of the batch was written (a broken store: nothing
			// more will be); retrying before space is freed cannot help,
			// and the fold's supervisor waits for it (host/lifecycle.go).
			return false, err
		}
		l.failures++
		if l.failures >= l.cfg.MaxCommitFailures {
			return false, fmt.Errorf("%w (%d): last: %w", ErrCommitFailures, l.failures, err)
		}
		l.cfg.Logger.Warn("fold: commit failed; batch kept for retry",
			"updates", len(l.pending), "failures", l.failures, "err", err)
		return false, nil
	}
	l.failures = 0
	if l.cfg.OnApplied != nil {
		l.cfg.OnApplied(Applied{Cursor: cursor, Updates: len(part), Rejected: out.Rejected, Views: len(out.Views), Effects: len(c.Effects),
			DeadLettered: len(dead), Took: l.cfg.Clock.Now().Sub(start)})
	}
	return true, nil
}

// isolate folds the pending batch, which the plugin failed (cause), part
// by part (LoopConfig.Poison). What is committed leaves the pending batch;
// a failed commit keeps the rest pending (retried, and isolated again, by
// a later flush).
func (l *Loop) isolate(ctx context.Context, cause error) error {
	batch := slices.Clone(l.pending)
	committed := 0
	commit := func(part []Update, out Output, dead []DeadLetter, start time.Time) error {
		if done, err := l.commitPart(part, out, dead, start, committed+len(part) == len(batch)); !done {
			return errKeepPending{err}
		}
		committed += len(part)
		return nil
	}
	err := Bisect(batch, cause, func(part []Update) (error, error) {
		start := l.cfg.Clock.Now()
		out, err := l.plugin.Apply(ctx, part, l.store)
		if err == nil {
			return nil, commit(part, out, nil, start)
		}
		if l.cfg.OnPluginError != nil {
			l.cfg.OnPluginError(err)
		}
		if ctx.Err() != nil {
			return nil, errKeepPending{nil} // shutdown: the rest stays for the last flush, then the resume
		}
		return err, nil
	}, func(u Update, failed error) error {
		return commit([]Update{u}, Output{}, []DeadLetter{l.cfg.Poison(u, failed)}, l.cfg.Clock.Now())
	})
	rest := batch[committed:]
	clear(l.pending)
	l.pending = append(l.pending[:0], rest...)
	var keep errKeepPending
	if errors.As(err, &keep) {
		return keep.err // nil: a transient commit failure, the rest stays pending
	}
	if err == nil {
		l.reportSynced()
	}
	return err
}

// errKeepPending carries a failed commit out of isolate's recursion: err
// stops the fold, nil keeps the rest of the batch pending.
type errKeepPending struct{ err error }

func (e errKeepPending) Error() string { return fmt.Sprint("commit failed: ", e.err) }

func (l *Loop) reportSynced() {
	if l.synced && !l.reported {
		l.reported = true
		if l.cfg.OnSynced != nil {
			l.cfg.OnSynced(l.store.Cursor())
		}
	}
}
