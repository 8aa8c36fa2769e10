package round

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/lease"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// Outcome is how an export round ended (a Report's).
type Outcome int

const (
	// Published: the round's artifact is the key's pointer now.
	Published Outcome = iota + 1
	// Superseded: the store already holds a newer artifact; nothing
	// was published (a normal outcome).
	Superseded
	// Skipped: another node (or this one) holds the key's lease:
	// it exported within the lease's TTL. Nothing was exported.
	Skipped
	// Failed: the round failed (Report.Error says why).
	Failed
	// Fenced: a newer owner of the fold (a fleet's epoch above this
	// node's) holds the key's pointer: this node exported as a stale owner
	// (paused or cut off past its lease); nothing was published.
	Fenced
)

var outcomeNames = [...]string{Published: "published", Superseded: "superseded", Skipped: "skipped", Failed: "failed", Fenced: "fenced"}

func (o Outcome) String() string {
	if o >= Published && o <= Fenced {
		return outcomeNames[o]
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// MarshalText is the outcome's name.
func (o Outcome) MarshalText() ([]byte, error) { return []byte(o.String()), nil }

// UnmarshalText reads an outcome's name.
func (o *Outcome) UnmarshalText(b []byte) error {
	if i := slices.Index(outcomeNames[:], string(b)); i > 0 {
		*o = Outcome(i)
		return nil
	}
	return fmt.Errorf("unknown export outcome %q", b)
}

// Report is how a fold's export round ended, as the CLI prints it and
// the HTTP API returns it.
type Report struct {
	Fold    string  `json:"fold"`
	Key     string  `json:"key"`
	Store   string  `json:"store"`
	Outcome Outcome `json:"outcome"`
	// Cursor is the exported cursor (published, superseded).
	Cursor uint64   `json:"cursor,omitempty"`
	Pruned []string `json:"pruned,omitempty"`
	// LeaseHolder and LeaseExpires name the node holding the lease when
	// the round was skipped.
	LeaseHolder  string    `json:"lease_holder,omitempty"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	// LeaseCompleted is when the holder's round completed; zero while the
	// round runs, or when it died without completing (the lease then
	// holds until it expires).
	LeaseCompleted time.Time `json:"lease_completed,omitzero"`
	Forced         bool      `json:"forced,omitempty"`
	TookMS         int64     `json:"took_ms"`
	// Reason says why a round skipped without asking for the lease:
	// SkipEmpty. "" for a lease skip.
	Reason string `json:"reason,omitempty"`
	// Error says why a round failed (outcome failed).
	Error string `json:"error,omitempty"`
}

// SkipEmpty is the Reason of a round skipped because the fold has folded
// nothing yet (no cursor): there is nothing to publish, which is no failure.
const SkipEmpty = "empty"

func (r Report) String() string {
	switch r.Outcome {
	case Skipped:
		if r.Reason == SkipEmpty {
			return fmt.Sprintf("fold %s: skipped: the fold has folded nothing yet (no cursor): nothing to export", r.Fold)
		}
		what := "its round has not completed: it is still running, or it died (the lease then holds until it expires)"
		if !r.LeaseCompleted.IsZero() {
			what = "it completed a round at " + r.LeaseCompleted.Format(time.RFC3339) + ", and a round holds the key for lease_ttl"
		}
		return fmt.Sprintf("fold %s: skipped: %s holds the export lease of %q until %s: %s; --force exports anyway",
			r.Fold, r.LeaseHolder, r.Key, r.LeaseExpires.Format(time.RFC3339), what)
	case Superseded:
		return fmt.Sprintf("fold %s: superseded: %s already holds a newer artifact of %q than cursor %d; nothing published",
			r.Fold, r.Store, r.Key, r.Cursor)
	case Failed:
		return fmt.Sprintf("fold %s: export failed: %s", r.Fold, r.Error)
	case Fenced:
		return fmt.Sprintf("fold %s: fenced: a newer owner of the fold holds the pointer of %q in %s; this node is not the fold's owner any more, nothing published",
			r.Fold, r.Key, r.Store)
	}
	return fmt.Sprintf("fold %s: published artifact %q at cursor %d to %s in %s (pruned %d old payloads)",
		r.Fold, r.Key, r.Cursor, r.Store, time.Duration(r.TookMS)*time.Millisecond, len(r.Pruned))
}

// ExporterOptions configure an Exporter.
type ExporterOptions struct {
	// Store holds the artifacts; Where describes it in logs and reports.
	Store artifact.Store
	Where string
	// LeaseBucket is the KV bucket of the fleet's export leases, LeaseTTL
	// a round's lease, Holder this node's name in them.
	LeaseBucket string
	LeaseTTL    time.Duration
	Holder      string
	// NC is the NATS connection the lease bucket is opened on (lazily, so
	// a host that never exports needs no permission to create it); nil
	// runs every round without the lease (a single node on a stopped
	// embedded server).
	NC             *nats.Conn
	RequestTimeout time.Duration
	Logger         *slog.Logger
}

// Exporter runs the export rounds of one host: one artifact store and
// one lease bucket for every fold. Safe for concurrent use; a fold's own
// rounds are serialized by the fold.
type Exporter struct {
	o ExporterOptions

	mu    sync.Mutex
	lease *lease.Lease
}

// NewExporter is nil when no artifact store is configured.
func NewExporter(o ExporterOptions) *Exporter {
	if o.Store == nil {
		return nil
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return &Exporter{o: o}
}

// Fold names the fold a round exports.
type Fold struct {
	Name        string
	ArtifactKey string // the artifact key (and the lease's)
	DataDir     string // its store's directory: the round stages beside it
	// Epoch is, in a fleet, the owner's epoch the round exports under:
	// its pointer carries it, and a newer owner's refuses it. 0: outside
	// a fleet.
	Epoch protocol.Revision
}

// PointerEpoch is the fleet epoch key's pointer carries (0: none, no
// pointer, or a corrupt one).
func (e *Exporter) PointerEpoch(ctx context.Context, key string) (protocol.Revision, error) {
	b, err := e.o.Store.Pointer(ctx, key)
	if errors.Is(err, artifact.ErrNoPointer) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	return artifact.PointerState(b).Epoch(), nil
}

// RaiseEpoch writes a fleet owner's epoch into key's pointer, as it is
// (artifact.RaisePointerEpoch): from then on the store refuses an older
// owner's swap.
func (e *Exporter) RaiseEpoch(ctx context.Context, key string, epoch protocol.Revision) (artifact.Outcome, error) {
	return artifact.RaisePointerEpoch(ctx, e.o.Store, key, epoch)
}

// leaseFor opens the lease bucket on first use.
func (e *Exporter) leaseFor(ctx context.Context) (*lease.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease != nil {
		return e.lease, nil
	}
	b, err := natskv.OpenBucket(ctx, e.o.NC, natskv.BucketConfig{Name: e.o.LeaseBucket, History: 1, Replicas: 1},
		natskv.Options{RequestTimeout: e.o.RequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("export lease bucket %s: %w", e.o.LeaseBucket, err)
	}
	e.lease = lease.New(b.KV(), lease.Options{RequestTimeout: e.o.RequestTimeout})
	return e.lease, nil
}

// Round runs one export round of fold o from store (loop nil: nothing
// folds into the store meanwhile); settle, if set, runs on the loop first
// (Config.Settle). force, or no NATS connection, skips the lease.
func (e *Exporter) Round(ctx context.Context, o Fold, store *fold.Store, loop *fold.Loop, force bool, settle func(context.Context, fold.Target) error) (Report, error) {
	start := time.Now()
	res := Report{Fold: o.Name, Key: o.ArtifactKey, Store: e.o.Where, Forced: force}
	if store.Cursor().Rev == protocol.NoRevision {
		res.Outcome, res.Reason = Skipped, SkipEmpty
		return res, nil
	}
	var ls *lease.Lease
	if !force && e.o.NC != nil {
		var err error
		if ls, err = e.leaseFor(ctx); err != nil {
			return res, err
		}
	}
	rr, err := Run(ctx, loop, store, e.o.Store, ls, Config{
		Key: o.ArtifactKey, Holder: e.o.Holder, TTL: e.o.LeaseTTL,
		StageDir: datadir.StageDir(o.DataDir), IgnoreLease: ls == nil, Logger: e.o.Logger.With("fold", o.Name), Settle: settle,
		Epoch: o.Epoch,
	})
	res.TookMS = time.Since(start).Milliseconds()
	if err != nil {
		return res, err
	}
	switch {
	case rr.Skipped:
		res.Outcome = Skipped
		res.LeaseHolder = rr.Holder.HolderID
		res.LeaseExpires = time.Unix(rr.Holder.ExpiresAtUnix, 0).UTC()
		if c := rr.Holder.CompletedAtUnix; c != nil {
			res.LeaseCompleted = time.Unix(*c, 0).UTC()
		}
	case rr.Outcome == artifact.SupersededByNewer:
		res.Outcome, res.Cursor = Superseded, uint64(rr.Cursor.Rev)
	case rr.Outcome == artifact.FencedOut:
		res.Outcome, res.Cursor = Fenced, uint64(rr.Cursor.Rev)
	default:
		res.Outcome, res.Cursor, res.Pruned = Published, uint64(rr.Cursor.Rev), rr.Pruned
	}
	return res, nil
}
