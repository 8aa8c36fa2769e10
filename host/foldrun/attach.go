package foldrun

import (
	"context"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/repair"
	"github.com/foldhost/foldhost/protocol"
)

// Attach opens the fold's bucket on nc (made, loudly, when it does not
// exist and the fold may create it) and, unless effects are dropped, its
// effects stream and the store's effects hold. The host calls it once,
// at its start.
func (f *Fold) Attach(ctx context.Context, nc *nats.Conn) error {
	b, err := natskv.OpenBucket(ctx, nc, f.o.CreateBucket, natskv.Options{RequestTimeout: f.env.RequestTimeout, NoCreate: f.o.NoCreateBucket})
	if errors.Is(err, natskv.ErrNoBucket) {
		return fmt.Errorf("fold %s: %w, and create_bucket = false: create it, or correct the fold's bucket name", f.o.Name, err)
	}
	if err != nil {
		return fmt.Errorf("fold %s: %w", f.o.Name, err)
	}
	if b.Created() {
		c := f.o.CreateBucket
		storage := "file"
		if c.Memory {
			storage = "memory"
		}
		args := []any{"bucket", c.Name, "history", c.History, "max_age", c.MaxAge.String(), "max_bytes", c.MaxBytes,
			"replicas", c.Replicas, "storage", storage, "limit_marker_ttl", c.LimitMarkerTTL.String()}
		if near := b.NearBucket(); near != "" {
			args = append(args, "nearest_existing_bucket", near)
		}
		f.log.Warn("the bucket did not exist: created it, empty (a misspelled bucket name? create_bucket = false refuses a missing bucket)", args...)
	}
	f.bucket = b
	if f.o.EffectsStream != "" && !f.o.Refold {
		if err := f.effectsStream(ctx, nc); err != nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
		if err := f.fx.Open(ctx, nc, f.env.RequestTimeout); err != nil {
			return fmt.Errorf("fold %s: %w", f.o.Name, err)
		}
	}
	return nil
}

// CheckOrigin compares what the fold's store records it folds with its
// config and the live stream, writing nothing (DecideOrigin): the update
// it returns records it, once the host has checked every fold. From then
// on the fold's repairs are ready.
func (f *Fold) CheckOrigin(ctx context.Context) (OriginUpdate, error) {
	created, err := f.bucket.StreamCreated(ctx)
	if err != nil {
		return OriginUpdate{}, err
	}
	origin, u, err := DecideOrigin(f.store, f.o, f.o.Origin(created))
	if err != nil {
		return OriginUpdate{}, err
	}
	f.origin = origin
	f.repairer = f.newRepairer()
	return u, nil
}

// errOperator is the cause of a repair an operator asked for.
var errOperator = errors.New("an operator asked for a repair")

// RepairNow runs one repair of the fold, whose host started and does not
// run it, whether or not its cursor expired: planned from the live
// retention as a running fold would, with progress (if set) receiving the
// figures as it goes. It returns the repair's record; a refused repair is
// an error matching fold.ErrRepairRefused.
func (f *Fold) RepairNow(ctx context.Context, progress func(repair.Progress)) (httpapi.RepairRun, error) {
	f.onRepair = progress
	src, err := f.repair(ctx, f.feed(), f.applier(), errOperator)
	if src != nil {
		src.Stop()
	}
	var run httpapi.RepairRun
	if last := f.repairStatus().Last; last != nil {
		run = *last
	}
	return run, err
}

// StreamHead is the stream's last revision now.
func (f *Fold) StreamHead(ctx context.Context) (protocol.Revision, error) {
	ret, _, err := f.bucket.Retention(ctx)
	return ret.Last, err
}

// LiveLoop is the loop the fold's live watch commits on, nil while none
// runs (a test holds it, as a stopped process would).
func (f *Fold) LiveLoop() *fold.Loop { return f.loop.Load() }
