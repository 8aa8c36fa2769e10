package host

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/foldhost/foldhost/host/fold"
)

// OriginError: a fold's store records that it folds another source (bucket,
// scope or stream) than the fold's config says. Its cursor names revisions
// the fold would never fold, and its keys belong to another fold: nothing
// is started, exported or bootstrapped from it.
type OriginError struct {
	Fold, DataDir string
	Recorded      fold.Origin // what the store says it folds
	Want          fold.Origin // what the config (and the live stream) say
}

func (e *OriginError) Error() string {
	return fmt.Sprintf("fold %s: the store in %s folds %s; the fold's config says %s (%s): "+
		"use the fold's own data_dir, move this one aside to fold from scratch (or bootstrap), "+
		"or, if the store really holds this fold, adopt it once with 'foldhost run --adopt %s'",
		e.Fold, e.DataDir, e.Recorded, e.Want, e.Recorded.Mismatch(e.Want), e.Fold)
}

// ErrOriginMismatch matches every *OriginError.
var ErrOriginMismatch = errors.New("store folds another source")

func (e *OriginError) Is(target error) bool { return target == ErrOriginMismatch }

// origin is the origin the fold's config names, on the stream created at
// created (zero: not known here, e.g. offline).
func (o FoldOptions) origin(created time.Time) fold.Origin {
	return fold.NewOrigin(o.Bucket, o.Scope, created)
}

// checkOrigin compares the store's record with want and settles it: a
// store without a record (new, or from an earlier version) gets want; a
// record that lacks the stream identity gets it filled in; a record that
// disagrees is an *OriginError, unless adopt, which records want instead
// (logged as a warning). It returns the origin the store records now.
func checkOrigin(st *fold.Store, o FoldOptions, want fold.Origin, log *slog.Logger) (fold.Origin, error) {
	rec, ok, err := st.Origin()
	if err != nil {
		return fold.Origin{}, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	switch {
	case ok && rec.Mismatch(want) != "":
		if !o.Adopt {
			return rec, &OriginError{Fold: o.Name, DataDir: o.DataDir, Recorded: rec, Want: want}
		}
		log.Warn("adopting the store (--adopt): it recorded another origin; recording the config's",
			"recorded", rec.String(), "now", want.String(), "differences", rec.Mismatch(want))
	case ok && (!rec.StreamCreated.IsZero() || want.StreamCreated.IsZero()):
		return rec, nil // agrees, and there is nothing to add
	case ok: // agrees; an upgraded record learns its stream
	case st.Cursor().Rev != 0:
		log.Info("the store has no record of what it folds (written by an earlier version): recording the config's",
			"origin", want.String())
	}
	if err := st.SetOrigin(want); err != nil {
		return fold.Origin{}, fmt.Errorf("fold %s: %w", o.Name, err)
	}
	return want, nil
}
