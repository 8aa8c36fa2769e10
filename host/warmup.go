package host

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/foldrun"
)

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
