package foldrun

import (
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host/fold"
)

// OriginError: a fold's store records that it folds another source (bucket,
// scope or stream) than the fold's config and the live bucket say, or its
// record is unreadable. Its cursor names revisions the fold would never
// fold, or its keys belong to another fold: nothing is started, exported or
// bootstrapped from it, and nothing in it is changed. Its message does not
// name the fold: callers prefix "fold NAME: ".
type OriginError struct {
	Fold, DataDir string
	Recorded      fold.Origin // what the store says it folds
	Want          fold.Origin // what the config (and the live stream) say
	// Unreadable, when set, is why the store's record could not be read.
	Unreadable error
}

func (e *OriginError) Error() string {
	adopt := fmt.Sprintf("'foldhost run --adopt %s'", e.Fold)
	r, w := e.Recorded, e.Want
	switch {
	case e.Unreadable != nil:
		return fmt.Sprintf("the store in %s has an unreadable origin record (%v): if the store is this fold's, %s records the config's (%s)",
			e.DataDir, e.Unreadable, adopt, w)
	case r.Bucket != w.Bucket:
		return fmt.Sprintf("the store in %s folds bucket %q, the fold's config says bucket %q: two folds share a data_dir, or it is mistyped; "+
			"give the fold its own data_dir (%s takes the store over, but only a copy of the same stream with the same revisions makes sense: anything else skips or mixes data silently)",
			e.DataDir, r.Bucket, w.Bucket, adopt)
	case !slices.Equal(r.Scope, w.Scope):
		return fmt.Sprintf("the store in %s folds scope %s of bucket %q, the fold's config says scope %s: a store holds only what its scope let through, so a new scope needs a fresh fold: "+
			"move the data_dir aside (or bootstrap). %s would keep the cursor: keys of added prefixes below it would never be folded, keys of dropped ones would stay",
			e.DataDir, scopeText(r.Scope), r.Bucket, scopeText(w.Scope), adopt)
	case r.Partition != w.Partition:
		return fmt.Sprintf("the store in %s folds partition %s of bucket %q, the fold's config says partition %s: partitions are fixed for a fold's life (a store holds only its partition's keys). "+
			"To fold the bucket with another count of partitions, move the fold's data_dir aside and fold it again, or configure a new fold beside it; %s cannot make one partition's store another's",
			e.DataDir, orWhole(r.Partition), r.Bucket, orWhole(w.Partition), adopt)
	default:
		return fmt.Sprintf("the store in %s folds the stream of bucket %q created at %s; the bucket's stream now was created at %s: "+
			"the bucket was deleted and made again, and its revisions number another history. Move the data_dir aside to fold the new stream from scratch "+
			"(keep it: if the old stream held values the new one lacks, it is their only copy). %s is only for a stream restored from a backup of the old one",
			e.DataDir, r.Bucket, stamp(r.StreamCreated), stamp(w.StreamCreated), adopt)
	}
}

func scopeText(scope []string) string {
	if len(scope) == 0 {
		return "(whole bucket)"
	}
	return fmt.Sprintf("%q", scope)
}

func orWhole(p string) string {
	if p == "" {
		return "(whole bucket)"
	}
	return p
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339Nano) }

// ErrOriginMismatch matches every *OriginError, and a bootstrap's refusal
// of an artifact of another bucket or scope.
var ErrOriginMismatch = errors.New("origin mismatch")

func (e *OriginError) Is(target error) bool { return target == ErrOriginMismatch }

// OriginUpdate is what settling a store's origin will write: nothing
// (write false), or want, with a reason to log (Apply).
type OriginUpdate struct {
	st    *fold.Store
	o     Options
	want  fold.Origin
	write bool
	warn  bool   // log at Warn (an adoption), else Info
	why   string // the log line
	was   string // the replaced record, for the log
}

// DecideOrigin compares the store's record with want without writing
// anything: a store without a record (new, or from an earlier version) is
// to get want; a record lacking the stream identity gets it filled in; a
// record that disagrees, or is unreadable, is an *OriginError unless
// o.Adopt, which records want instead. The returned origin is what the
// store records once the update is applied.
func DecideOrigin(st *fold.Store, o Options, want fold.Origin) (fold.Origin, OriginUpdate, error) {
	u := OriginUpdate{st: st, o: o, want: want, write: true}
	rec, ok, err := st.Origin()
	switch {
	case err != nil && errors.Is(err, fold.ErrCorrupt):
		if !o.Adopt {
			return fold.Origin{}, OriginUpdate{}, &OriginError{Fold: o.Name, DataDir: o.DataDir, Want: want, Unreadable: err}
		}
		u.warn, u.why, u.was = true, "adopting the store (--adopt): its origin record is unreadable; recording the config's", err.Error()
	case err != nil:
		return fold.Origin{}, OriginUpdate{}, err
	case ok && rec.Mismatch(want) != "":
		if !o.Adopt || rec.Partition != want.Partition {
			return rec, OriginUpdate{}, &OriginError{Fold: o.Name, DataDir: o.DataDir, Recorded: rec, Want: want}
		}
		u.warn, u.why, u.was = true, "adopting the store (--adopt): it recorded another origin; recording the config's", rec.String()
	case ok && (!rec.StreamCreated.IsZero() || want.StreamCreated.IsZero()):
		return rec, OriginUpdate{}, nil // agrees, and there is nothing to add
	case ok:
		u.why, u.was = "recording the stream the store folds (its record predates stream identities)", rec.String()
	case st.Cursor().Rev != 0:
		u.why = "the store has no record of what it folds (written by an earlier version): recording the config's"
	default:
		u.why = "" // a new store: nothing worth a log line
	}
	return want, u, nil
}

// Apply writes the update, if any, and logs it.
func (u OriginUpdate) Apply(log *slog.Logger) error {
	if !u.write {
		return nil
	}
	if err := u.st.SetOrigin(u.want); err != nil {
		return err
	}
	switch {
	case u.warn:
		log.Warn(u.why, "fold", u.o.Name, "was", u.was, "now", u.want.String())
	case u.why != "":
		log.Info(u.why, "fold", u.o.Name, "origin", u.want.String())
	}
	return nil
}
