package foldrun

import (
	"context"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/protocol"
)

// pointerFenceRetry bounds the wait between two attempts to raise the
// pointer's epoch (the artifact store unreachable).
const pointerFenceRetry = 5 * time.Second

// fencePointer, in a fleet with an artifact store, writes this node's
// epoch into the fold's artifact pointer each time it becomes the fold's
// owner (artifact.RaisePointerEpoch): from then on the store refuses a
// pointer swap of any older owner (paused or cut off past its lease, then
// resumed), before this owner's first export. Until the raise lands (the
// store unreachable), the older owner's swap is refused only once this
// owner has exported. It retries until it lands, the role changes, or ctx
// ends.
func (f *Fold) fencePointer(ctx context.Context) {
	if !f.env.Fleet || f.env.Exporter == nil {
		return
	}
	var raised protocol.Revision
	failures := 0
	for {
		var retry <-chan time.Time
		if role, epoch := f.Role(); role == protocol.RoleOwner && epoch > raised {
			out, err := f.env.Exporter.RaiseEpoch(ctx, f.o.ArtifactKey, epoch)
			switch {
			case ctx.Err() != nil:
				return
			case err != nil:
				failures++
				if failures == 1 || failures%10 == 0 {
					f.log.Warn("could not write this owner's epoch into the artifact pointer; retrying (an older owner's export is refused once this one exports)",
						"key", f.o.ArtifactKey, "epoch", uint64(epoch), "failures", failures, "err", err)
				}
				retry = time.After(min(time.Duration(failures)*500*time.Millisecond, pointerFenceRetry))
			case out == artifact.FencedOut:
				raised, failures = epoch, 0
				f.log.Warn("the artifact pointer carries a newer owner's epoch: this node is not the fold's owner any more", "key", f.o.ArtifactKey, "epoch", uint64(epoch))
			default:
				raised, failures = epoch, 0
				f.log.Info("the artifact pointer carries this owner's epoch: an older owner's exports are refused", "key", f.o.ArtifactKey, "epoch", uint64(epoch))
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-f.roleChanged:
		case <-retry:
		}
	}
}

// EpochFloor is the highest epoch an owner of the fold left where a
// server or store fences by it: the claim mark in its effects stream, the
// epoch on its artifact pointer (0: none). A fleet's bucket made again
// numbers its epochs above every fold's.
func (f *Fold) EpochFloor(ctx context.Context) (protocol.Revision, error) {
	floor, err := f.fx.MarkEpoch(ctx)
	if err != nil {
		return 0, fmt.Errorf("fold %s: %w", f.o.Name, err)
	}
	if f.env.Exporter != nil {
		e, err := f.env.Exporter.PointerEpoch(ctx, f.o.ArtifactKey)
		if err != nil {
			return 0, fmt.Errorf("fold %s: the artifact pointer's epoch: %w", f.o.Name, err)
		}
		floor = max(floor, e)
	}
	return floor, nil
}
