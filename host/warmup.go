package host

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/protocol"
)

// warmUpParallel is how many folds warm up at once.
const warmUpParallel = 4

// toWarmUp says which folds warm up from their artifacts: in a fleet with
// an artifact store, those whose data dir is fresh (a node joining the
// fleet, or one whose disk was replaced). A single node's fresh fold
// hydrates from NATS unless bootstrapped by hand, as it always did. A data
// dir that cannot be read is left to the store's open to report.
func (h *Host) toWarmUp() []bool {
	warm := make([]bool, len(h.o.Folds))
	if h.o.Fleet.Name == "" || h.o.Artifacts.Store == nil {
		return warm
	}
	for i, fo := range h.o.Folds {
		fresh, err := foldrun.Fresh(fo.DataDir)
		warm[i] = fresh && err == nil
	}
	return warm
}

// warmShare narrows warm to the units this node will likely hold a role
// for: placed (protocol.Place, with their standbys) over the fleet's
// members as its bucket shows them now, this node included. A node
// joining installs its share's artifacts, not every fold's: the rest it
// may never fold (RATIONALE.md, "The fleet"). The guess can be wrong (a
// node that joins or dies meanwhile): a unit handed to this node that it
// did not warm up hydrates from NATS, one it warmed and does not get is
// a copy it keeps. When the members cannot be read, every fresh fold
// warms up.
func (h *Host) warmShare(ctx context.Context, warm []bool) []bool {
	if !slices.Contains(warm, true) {
		return warm
	}
	rctx, cancel := context.WithTimeout(ctx, h.o.NATS.RequestTimeout)
	defer cancel()
	members, err := fleet.Members(rctx, h.nc, h.o.Fleet.Name, h.o.Fleet.NodeTTL)
	if err != nil {
		h.log.Info("warm-up: the fleet's members are not readable: every fresh fold warms up", "err", err)
		return warm
	}
	live := append(slices.DeleteFunc(members, func(n string) bool { return n == h.o.Admin.Node }), h.o.Admin.Node)
	slices.Sort(live)
	share := make([]bool, len(warm))
	for i, fo := range h.o.Folds {
		if !warm[i] {
			continue
		}
		p := protocol.Place(fo.Unit(), live, fo.Standbys)
		share[i] = p.Owner == h.o.Admin.Node || slices.Contains(p.Standbys, h.o.Admin.Node)
		if !share[i] {
			h.log.Info("no warm-up: the fleet will likely place the unit on other nodes; it hydrates from NATS if it comes here",
				"fold", fo.Name, "owner", p.Owner, "standbys", p.Standbys)
		}
	}
	return share
}

// warmUp fills fold fo's fresh data dir from the newest artifact published
// under its key, checked against the bucket's live stream (an artifact of
// a bucket since deleted and made again is not installed): the fold then
// folds only the delta past the artifact's cursor, and a unit handed to
// this node waits until it has caught up (RATIONALE.md, "The fleet").
// Anything short of an installed artifact (none published,
// the store unreachable, the bucket not made yet, an artifact of another
// source) leaves the fold fresh, logged: it hydrates from NATS.
func (h *Host) warmUp(ctx context.Context, fo FoldOptions) {
	log := h.log.With("fold", fo.Name, "key", fo.ArtifactKey, "store", h.o.Artifacts.Where)
	created, err := streamCreated(ctx, h, fo.Bucket)
	if err != nil {
		log.Info("no warm-up from the artifact: the bucket's stream is not readable; the fold hydrates from NATS", "err", err)
		return
	}
	log.Info("warming up from the fold's artifact")
	next := time.Now()
	res, err := foldrun.Bootstrap(ctx, fo, h.o.Artifacts.Store, h.o.Artifacts.Where, h.log, foldrun.BootstrapOptions{
		StreamCreated: created,
		Progress: func(read, size int64) {
			if now := time.Now(); now.After(next) {
				next = now.Add(h.o.ProgressInterval)
				log.Info("warm-up downloading", "read_bytes", read, "size_bytes", size)
			}
		},
	})
	switch {
	case errors.Is(err, foldrun.ErrNoArtifact):
		log.Info("no artifact to warm up from: the fold hydrates from NATS")
	case err != nil:
		log.Warn("warm-up from the artifact failed: the fold hydrates from NATS", "err", err)
	default:
		log.Info("warmed up from the fold's artifact: it folds the delta past its cursor",
			"cursor", res.Cursor, "bytes", res.Bytes, "took", res.Took.Round(time.Millisecond).String())
		if res.Warning != "" {
			log.Warn("warm-up: " + res.Warning)
		}
	}
}

// streamCreated is the creation time of bucket's stream (its identity).
func streamCreated(ctx context.Context, h *Host, bucket string) (time.Time, error) {
	js, err := jetstream.New(h.nc)
	if err != nil {
		return time.Time{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, h.o.NATS.RequestTimeout)
	defer cancel()
	s, err := js.Stream(rctx, "KV_"+bucket)
	if err != nil {
		return time.Time{}, err
	}
	return s.CachedInfo().Created.UTC(), nil
}
