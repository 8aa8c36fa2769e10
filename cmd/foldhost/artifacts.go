package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/lease"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// openArtifactStore opens the configured artifact store and describes it for
// logs.
func openArtifactStore(a ArtifactsConfig) (artifact.Store, string, error) {
	if a.Store == "s3" {
		tr, err := s3store.New(s3store.Options{
			Endpoint: a.S3.Endpoint, Region: a.S3.Region, Bucket: a.S3.Bucket, Prefix: a.S3.Prefix,
			AccessKey: a.S3.AccessKey, SecretKey: a.S3.SecretKey, SessionToken: a.S3.SessionToken, UsePathStyle: a.S3.PathStyle,
			PartSize: int64(a.S3.PartSizeMB) << 20, Concurrency: a.S3.Concurrency, OpTimeout: a.S3.RequestTimeout,
		})
		if err != nil {
			return nil, "", err
		}
		where := "s3://" + a.S3.Bucket
		if a.S3.Prefix != "" {
			where += "/" + a.S3.Prefix
		}
		if a.S3.Endpoint != "" {
			where += " at " + a.S3.Endpoint
		}
		return tr, where, nil
	}
	tr, err := dirstore.New(a.Dir)
	if err != nil {
		return nil, "", err
	}
	return tr, a.Dir, nil
}

// stageDir is where a fold's artifacts are staged: a sibling of its data
// dir, so on its filesystem (the checkpoint hard-links sstables).
func stageDir(f FoldConfig) string {
	return filepath.Join(filepath.Dir(f.DataDir), "."+filepath.Base(f.DataDir)+".export")
}

// resetStageDir empties a fold's stage dir: anything in it was left by an
// export that died mid-way (the caller holds the fold's store, so no other
// export of the fold runs).
func resetStageDir(f FoldConfig) error {
	dir := stageDir(f)
	if err := os.RemoveAll(dir); err != nil {
		return fmt.Errorf("fold %s: clearing stale exports: %w", f.Name, err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("fold %s: %w", f.Name, err)
	}
	return nil
}

// exporter runs the export rounds of one process: one artifact store and
// one lease bucket for every fold.
type exporter struct {
	cfg   ArtifactsConfig
	tr    artifact.Store
	where string
	// nc is the NATS connection the lease bucket is opened on (lazily, so
	// a daemon that never exports needs no permission to create it); nil
	// runs every round without the lease (a single node on a stopped
	// embedded server).
	nc         *nats.Conn
	reqTimeout time.Duration
	log        *slog.Logger

	mu    sync.Mutex
	lease *lease.Lease
}

func newExporter(cfg *Config, nc *nats.Conn, log *slog.Logger) (*exporter, error) {
	tr, where, err := openArtifactStore(cfg.Artifacts)
	if err != nil {
		return nil, fmt.Errorf("artifacts: %w", err)
	}
	return &exporter{cfg: cfg.Artifacts, tr: tr, where: where, nc: nc, reqTimeout: cfg.NATS.RequestTimeout, log: log}, nil
}

// leaseFor opens the lease bucket on first use.
func (e *exporter) leaseFor(ctx context.Context) (*lease.Lease, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.lease != nil {
		return e.lease, nil
	}
	b, err := natskv.OpenBucket(ctx, e.nc, natskv.BucketConfig{Name: e.cfg.LeaseBucket, History: 1, Replicas: 1},
		natskv.Options{RequestTimeout: e.reqTimeout})
	if err != nil {
		return nil, fmt.Errorf("export lease bucket %s: %w", e.cfg.LeaseBucket, err)
	}
	e.lease = lease.New(b.KV(), lease.Options{RequestTimeout: e.reqTimeout})
	return e.lease, nil
}

// roundResult is a round's outcome as `foldhost export` prints it and the
// HTTP API returns it.
type roundResult struct {
	Fold    string `json:"fold"`
	Key     string `json:"key"`
	Store   string `json:"store"`
	Outcome string `json:"outcome"` // published | superseded | skipped
	// Cursor is the exported cursor (published, superseded).
	Cursor uint64   `json:"cursor,omitempty"`
	Pruned []string `json:"pruned,omitempty"`
	// LeaseHolder and LeaseExpires name the node holding the lease when
	// the round was skipped.
	LeaseHolder  string    `json:"lease_holder,omitempty"`
	LeaseExpires time.Time `json:"lease_expires,omitzero"`
	Forced       bool      `json:"forced,omitempty"`
	TookMS       int64     `json:"took_ms"`
	// Error says why a round failed (outcome "failed"; `foldhost export
	// --json` only: the HTTP API answers an error status instead).
	Error string `json:"error,omitempty"`
}

func (r roundResult) String() string {
	switch r.Outcome {
	case "skipped":
		return fmt.Sprintf("fold %s: skipped: %s holds the export lease of %q until %s (a completed round holds it for lease_ttl; --force exports anyway)",
			r.Fold, r.LeaseHolder, r.Key, r.LeaseExpires.Format(time.RFC3339))
	case "superseded":
		return fmt.Sprintf("fold %s: superseded: %s already holds a newer artifact of %q than cursor %d; nothing published",
			r.Fold, r.Store, r.Key, r.Cursor)
	}
	return fmt.Sprintf("fold %s: published artifact %q at cursor %d to %s in %s (pruned %d old payloads)",
		r.Fold, r.Key, r.Cursor, r.Store, time.Duration(r.TookMS)*time.Millisecond, len(r.Pruned))
}

// round runs one export round of fold f from store (loop nil: nothing
// folds into the store meanwhile). force, or no NATS connection, skips the
// lease.
func (e *exporter) round(ctx context.Context, f FoldConfig, store *fold.Store, loop *fold.Loop, force bool) (roundResult, error) {
	start := time.Now()
	res := roundResult{Fold: f.Name, Key: f.ArtifactKey, Store: e.where, Forced: force}
	if store.Cursor().Rev == protocol.NoRevision {
		return res, fmt.Errorf("fold %s has folded nothing yet (no cursor): nothing to export", f.Name)
	}
	var lease *lease.Lease
	if !force && e.nc != nil {
		var err error
		if lease, err = e.leaseFor(ctx); err != nil {
			return res, err
		}
	}
	rr, err := host.RunRound(ctx, loop, store, e.tr, lease, host.RoundConfig{
		Key: f.ArtifactKey, Holder: e.cfg.Holder, TTL: e.cfg.LeaseTTL,
		Source:   artifact.Source{Bucket: f.Bucket, Scope: slices.Sorted(slices.Values(f.Scope))},
		StageDir: stageDir(f), IgnoreLease: lease == nil, Logger: e.log.With("fold", f.Name),
	})
	res.TookMS = time.Since(start).Milliseconds()
	if err != nil {
		return res, err
	}
	switch {
	case rr.Skipped:
		res.Outcome = "skipped"
		res.LeaseHolder = rr.Holder.HolderID
		res.LeaseExpires = time.Unix(rr.Holder.ExpiresAtUnix, 0).UTC()
	case rr.Outcome == artifact.SupersededByNewer:
		res.Outcome, res.Cursor = "superseded", uint64(rr.Cursor.Rev)
	default:
		res.Outcome, res.Cursor, res.Pruned = "published", uint64(rr.Cursor.Rev), rr.Pruned
	}
	return res, nil
}

// Export implements httpapi.Exporter: a round now, on the live loop. It
// runs under the fold's context, not the request's: a client that goes away
// does not cut a round short (its work would be lost and its lease held);
// a shutdown does.
func (r *runner) Export(_ context.Context, force bool) (any, error) {
	if r.exp == nil {
		return nil, httpapi.ErrExportNotConfigured
	}
	ctx := r.runCtx.Load()
	if ctx == nil {
		return nil, errors.New("the fold is not running")
	}
	res, err := r.exportRound(*ctx, force)
	if err != nil {
		return nil, err
	}
	return res, nil
}

// exportRound runs one round on the fold's live loop; rounds of one fold
// never overlap.
func (r *runner) exportRound(ctx context.Context, force bool) (roundResult, error) {
	r.exportMu.Lock()
	defer r.exportMu.Unlock()
	loop := r.loop.Load()
	if loop == nil {
		return roundResult{Fold: r.cfg.Name}, errors.New("the fold is not running yet")
	}
	if st := r.state.Load(); st == httpapi.StateFailed || st == httpapi.StateStopped {
		return roundResult{Fold: r.cfg.Name}, fmt.Errorf("the fold is %s: export it with 'foldhost export' once foldhost is stopped", st)
	}
	res, err := r.exp.round(ctx, r.cfg, r.store, loop, force)
	now := time.Now().UTC()
	r.exportMeta.Lock()
	defer r.exportMeta.Unlock()
	r.lastExport = &lastExport{At: now, Result: res, Err: err}
	switch {
	case err != nil:
		r.exportRounds.Failed++
	case res.Outcome == "published":
		r.exportRounds.Published++
		r.lastPublished = now
		r.exportedCursor = max(r.exportedCursor, res.Cursor)
	case res.Outcome == "superseded":
		r.exportRounds.Superseded++
		r.exportedCursor = max(r.exportedCursor, res.Cursor)
	case res.Outcome == "skipped":
		r.exportRounds.Skipped++
	}
	return res, err
}

// lastPublishedCursor is the cursor this process' rounds last published
// or found superseded (0: none).
func (r *runner) lastPublishedCursor() uint64 {
	r.exportMeta.Lock()
	defer r.exportMeta.Unlock()
	return r.exportedCursor
}

// lastExport is the most recent round, for the status.
type lastExport struct {
	At     time.Time
	Result roundResult
	Err    error
}

// exportStatus is the fold's export status; nil when exporting is not
// configured.
func (r *runner) exportStatus() *httpapi.ExportStatus {
	if r.exp == nil {
		return nil
	}
	st := &httpapi.ExportStatus{Key: r.cfg.ArtifactKey, Store: r.exp.where, Interval: r.cfg.ExportInterval.String()}
	r.exportMeta.Lock()
	defer r.exportMeta.Unlock()
	st.Rounds = r.exportRounds
	if !r.lastPublished.IsZero() {
		at := r.lastPublished
		st.LastPublishedAt = &at
	}
	if le := r.lastExport; le != nil {
		at := le.At
		st.LastAt, st.LastOutcome, st.LastCursor = &at, le.Result.Outcome, le.Result.Cursor
		if le.Err != nil {
			st.LastOutcome, st.LastError = "failed", le.Err.Error()
		}
	}
	return st
}

// exportEvery runs a round every export_interval once the fold caught up
// (an artifact of a hydrating fold is behind the fleet's). Failures are
// logged; the next tick retries.
func (r *runner) exportEvery(ctx context.Context) {
	if r.exp == nil || r.cfg.ExportInterval <= 0 {
		return
	}
	t := time.NewTicker(r.cfg.ExportInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !r.ready.Load() || r.state.Load() != httpapi.StateFollowing {
			continue
		}
		// Nothing new to export: an empty fold, or the cursor a round of
		// this process already published (a new artifact of the same
		// cursor would only add a payload for prune to collect).
		if cur := uint64(r.store.Cursor().Rev); cur == 0 || cur <= r.lastPublishedCursor() {
			continue
		}
		res, err := r.exportRound(ctx, false)
		switch {
		case err != nil && ctx.Err() == nil:
			r.log.Error("export round failed; the next one retries", "key", r.cfg.ArtifactKey, "err", err)
		case err == nil && res.Outcome == "skipped":
			r.log.Debug("export round skipped: another node holds the lease", "key", r.cfg.ArtifactKey, "holder", res.LeaseHolder)
		case err == nil:
			r.log.Info("export round done", "key", r.cfg.ArtifactKey, "outcome", res.Outcome, "cursor", res.Cursor,
				"took", time.Duration(res.TookMS)*time.Millisecond)
		}
	}
}
