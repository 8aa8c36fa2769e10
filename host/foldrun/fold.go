package foldrun

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/effects"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// Fold is one running fold of a host: its store, plugin and watch, its
// state, counters and export rounds. It implements httpapi.Fold and
// httpapi.Exporter. Safe for concurrent use.
//
// Its life, as the host drives it: New (opens the store), LoadPlugin,
// Attach (the bucket and the effects stream, once NATS is connected),
// CheckOrigin and its update's Apply, Run (until its context ends), then
// ClosePlugin and CloseStore.
type Fold struct {
	o      Options
	env    *Env
	log    *slog.Logger
	store  *fold.Store
	bucket *natskv.Bucket
	plugin atomic.Pointer[plugin] // nil: a raw-only fold, or one waiting for its module (waitFor)
	origin fold.Origin            // what the store folds: checked against the config at Start

	// A fold whose object-store module was not pushed at the start waits
	// for it in Run (awaitPlugin): waitFor is set at Start, never after.
	waitFor    *objectSource
	waitReason atomic.Pointer[string] // why it waits (its status's reason)
	waitKick   chan struct{}          // cap 1: look for the module now

	state                 *stateCell
	sup                   supervisor
	ready                 atomic.Bool
	headAtStart, lastSeq  atomic.Uint64
	delivered, rejected   atomic.Uint64
	batches               atomic.Uint64
	lastCommit            atomic.Int64 // UnixNano of the last committed batch of updates; 0 before
	pluginErrs, commitErr atomic.Uint64
	lastErr               atomic.Pointer[string]

	// atHead is when the fold was last seen at the stream head (UnixNano;
	// 0 before): a commit that reached the head as last known, or a head
	// poll that found the cursor there. The status's LagSeconds is the
	// time since, while the fold lags.
	atHead atomic.Int64

	rb   rebuilds
	dead deadLetters

	repairMu sync.Mutex
	repairs  httpapi.RepairStatus
	pinned   atomic.Pointer[fold.Snapshot] // the pre-repair state readers see while a repair runs
	onRepair func(repair.Progress)         // RepairStopped's progress, if set
	repairer *repair.Runner                // plans and runs the repairs (Start makes it: newRepairer)

	fx *effects.Publisher // the plugin's effects: screened, held, published

	// role is the fold's protocol.Role in a fleet (owner without one), and
	// epoch its unit's owner epoch (role.go).
	role        atomic.Int32
	epoch       atomic.Uint64
	roleChanged chan struct{} // cap 1: SetRole was called (pointerfence.go)

	loop   atomic.Pointer[fold.Loop]       // the live loop rounds run on
	runCtx atomic.Pointer[context.Context] // the fold's context while it runs
	export exportState
}

// plug is the fold's plugin: nil for a raw-only fold, and for one whose
// module (from a NATS object store) is not loaded yet (waitFor). It is set
// once, never unset.
func (f *Fold) plug() *plugin { return f.plugin.Load() }

var (
	_ httpapi.Fold         = (*Fold)(nil)
	_ httpapi.Exporter     = (*Fold)(nil)
	_ httpapi.Controller   = (*Fold)(nil)
	_ httpapi.DeadLetterer = (*Fold)(nil)
)

// New opens the fold's store (o with its defaults applied) and clears
// its export staging dir (anything there was left by an export that died
// mid-way; the store's lock, now held, keeps other exports of the fold
// out) and what a killed bootstrap left.
func New(o Options, env *Env) (*Fold, error) {
	f := &Fold{o: o, env: env, log: env.Logger.With("fold", o.Name)}
	f.role.Store(int32(protocol.RoleOwner)) // without a fleet, every fold is its own
	f.state = newStateCell(f.log)
	f.sup.wake = make(chan struct{}, 1)
	f.waitKick = make(chan struct{}, 1)
	f.roleChanged = make(chan struct{}, 1)
	f.dead.stored.Store(-1) // counted on first demand
	// A repair --reset killed mid-swap left its fresh store recorded:
	// put in place before the data dir is opened (else an empty store
	// would be made there).
	if _, err := datadir.FinishSwap(o.DataDir, f.log); err != nil {
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	so := fold.Options{Sync: o.Sync, Logger: f.log, DiskReserve: o.DiskReserve, MemTableSize: o.MemTableSize}
	if hook := testhook.StoreOptions; hook != nil {
		hook(o.Name, &so)
	}
	st, _, err := fold.Open(o.DataDir, so)
	if err != nil {
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	f.store = st
	eo := o.effects()
	eo.Fleet = env.Fleet
	f.fx = effects.New(effects.Config{Fold: o.Name, Store: st, Options: eo, Refold: o.Refold, Logger: f.log, Node: env.Node,
		Hydrating: func() bool { return f.state.Load() == httpapi.StateHydrating },
		DeadLettered: func() {
			f.dead.stored.Store(-1) // recounted by the prune
			f.dead.pending.Store(true)
			f.pruneDeadLetters()
		},
		SetErr:  f.setErr,
		Standby: func() bool { return !f.owner() },
		Epoch: func() protocol.Revision {
			if role, epoch := f.Role(); env.Fleet && role == protocol.RoleOwner {
				return epoch
			}
			return 0
		},
	})
	datadir.ClearStaleImportsIfIdle(o.DataDir)
	// A repair's scratch dir is left only by a process that died
	// mid-repair (the store's lock, now held, keeps every other out).
	if err := os.RemoveAll(datadir.RepairDir(o.DataDir)); err != nil {
		st.Close()
		return nil, fmt.Errorf("fold %s: clearing a stale repair scratch dir: %w", o.Name, err)
	}
	if err := datadir.ResetStageDir(o.DataDir); err != nil {
		st.Close()
		return nil, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	return f, nil
}

// Store returns a fold's store, for reads while the host runs (the status
// API's snapshots use it too).
func (f *Fold) Store() *fold.Store { return f.store }

// CloseStore closes the fold's store, once it stopped.
func (f *Fold) CloseStore() {
	if err := f.store.Close(); err != nil && !errors.Is(err, fold.ErrClosed) {
		f.log.Error("closing store failed", "err", err)
	}
}

// Name implements httpapi.Fold.
func (f *Fold) Name() string { return f.o.Name }

// Snapshot implements httpapi.Fold. While a repair runs it is a share of the
// pre-repair state: a reader never sees a half-repaired fold.
func (f *Fold) Snapshot() (*fold.Snapshot, error) {
	if p := f.pinned.Load(); p != nil {
		if sn, err := p.Share(); err == nil {
			return sn, nil
		}
		// Unpinned meanwhile: the repair is over, the store is whole.
	}
	return f.store.Snapshot()
}

// Options are the fold's options, with their defaults applied.
func (f *Fold) Options() Options { return f.o }
