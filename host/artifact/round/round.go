package round

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/lease"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/testhook"
	"github.com/foldhost/foldhost/protocol"
)

// Config configures one export round.
type Config struct {
	Key      string        // the artifact key (transport layout and lease key)
	Holder   string        // this node's identity in the lease
	TTL      time.Duration // the lease's lifetime; payloads are pruned after 4x TTL
	StageDir string        // where the artifact is staged: on the fold's filesystem
	// IgnoreLease runs the round without the lease (lease may be nil): an
	// operator's forced export, or a single-node setup. Safe, since the
	// lease only deduplicates work: the pointer swap alone keeps the
	// published cursor monotone.
	IgnoreLease bool
	// Now reads the wall clock (lease expiry, prune age); default time.Now.
	Now    func() time.Time
	Logger *slog.Logger // default slog.Default()
	// Settle, if set, runs on the loop right before the export, with
	// nothing pending (a prefix fold settles its cursor there, so the
	// artifact carries a settled one).
	Settle func(context.Context, fold.Target) error
	// Epoch is, in a fleet, the owner's epoch the pointer is published
	// under (artifact.UploadAt); 0 outside a fleet.
	Epoch protocol.Revision
}

// Result is what a round did.
type Result struct {
	// Skipped: another node holds the lease (Holder, until its expiry);
	// nothing was exported.
	Skipped bool
	Holder  lease.Record
	Outcome artifact.Outcome // artifact.Published, SupersededByNewer or FencedOut (when not skipped)
	Cursor  protocol.Cursor  // the exported cursor
	Pruned  []string         // payloads deleted after a publish
}

// PruneGraceFactor is the prune grace in lease TTLs: a payload is deleted
// only once it is older than 4 x TTL, which outlasts any round still
// uploading toward it (RATIONALE.md, "Prune needs a grace period even with
// the strict rank rule").
const PruneGraceFactor = 4

// Run runs one fleet-wide export round for a live fold: lease ->
// export between flushes of the fold's loop (its pending batch flushed
// first, so the artifact's cursor is the applied cursor) -> upload -> pointer
// swap -> complete -> prune -> delete the local artifact. Failure handling
// is this: a failed export or upload abandons the lease
// (the next trigger elects a new node) and deletes the local artifact; a
// round superseded by a newer pointer abandons the lease too, a normal
// outcome; failures to complete the lease or to prune after a publish are
// logged, not returned (the artifact is published; the next round retries).
//
// loop must be the running loop that folds into store; Run blocks on
// loop.Do until the loop handles the request. loop is nil for a store that
// nothing folds into while the round runs (an offline export).
func Run(ctx context.Context, loop *fold.Loop, store *fold.Store, st artifact.Store, ls *lease.Lease, cfg Config) (Result, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	var guard *lease.Guard
	if !cfg.IgnoreLease {
		var err error
		guard, err = ls.TryAcquire(ctx, cfg.Key, cfg.Holder, cfg.TTL, cfg.Now())
		if err != nil {
			return Result{}, fmt.Errorf("export round %s: lease: %w", cfg.Key, err)
		}
		if guard == nil {
			rec, err := ls.Read(ctx, cfg.Key)
			if err != nil {
				log.Debug("export round: reading the held lease failed", "key", cfg.Key, "err", err)
			}
			return Result{Skipped: true, Holder: rec}, nil
		}
	}
	// The lease is released even when ctx ended (a shutdown, a caller
	// that went away): otherwise the fleet skips the key for a whole TTL.
	// The lease bounds each request itself.
	leaseCtx := context.WithoutCancel(ctx)
	abandon := func(why error) error {
		if guard == nil {
			return why
		}
		if err := guard.Abandon(leaseCtx); err != nil {
			log.Warn("export round: abandoning the lease failed; it expires on its own", "key", cfg.Key, "err", err)
		}
		return why
	}

	var dir string
	var m artifact.Manifest
	export := func(ctx context.Context, t fold.Target) error {
		if cfg.Settle != nil && t != nil {
			if err := cfg.Settle(ctx, t); err != nil {
				return err
			}
		}
		var err error
		dir, m, err = artifact.Export(store, cfg.StageDir)
		return err
	}
	var err error
	if loop != nil {
		err = loop.Do(ctx, export)
	} else {
		err = export(ctx, nil)
	}
	if dir != "" {
		defer os.RemoveAll(dir) // artifacts are transient: they pin files the store compacts away
	}
	if err != nil {
		return Result{}, abandon(fmt.Errorf("export round %s: export: %w", cfg.Key, err))
	}
	cursor, err := m.DecodeCursor()
	if err != nil {
		return Result{}, abandon(fmt.Errorf("export round %s: %w", cfg.Key, err))
	}
	testhook.Export(ctx, "before-upload")
	out, err := artifact.UploadAt(ctx, st, cfg.Key, dir, cfg.Epoch)
	if err != nil {
		return Result{}, abandon(fmt.Errorf("export round %s: upload: %w", cfg.Key, err))
	}
	res := Result{Outcome: out, Cursor: cursor}
	if out == artifact.FencedOut {
		_ = abandon(nil)
		log.Warn("export round refused: a newer owner of the fold holds the artifact pointer (this node was paused or cut off past its lease)",
			"key", cfg.Key, "cursor", uint64(cursor.Rev), "epoch", uint64(cfg.Epoch))
		return res, nil
	}
	if out != artifact.Published {
		_ = abandon(nil)
		log.Info("export round superseded by a newer artifact", "key", cfg.Key, "cursor", uint64(cursor.Rev))
		return res, nil
	}
	if guard != nil {
		if err := guard.Complete(leaseCtx, cursor, cfg.Now()); err != nil && !errors.Is(err, lease.ErrLost) {
			log.Warn("export round: completing the lease failed", "key", cfg.Key, "err", err)
		}
	}
	res.Pruned, err = st.Prune(ctx, cfg.Key, PruneGraceFactor*cfg.TTL, cfg.Now())
	if err != nil {
		log.Warn("export round: prune failed; stale payloads linger until the next round", "key", cfg.Key, "err", err)
	}
	log.Info("export round published", "key", cfg.Key, "cursor", uint64(cursor.Rev), "pruned", len(res.Pruned))
	return res, nil
}
