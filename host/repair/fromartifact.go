package repair

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// restore runs the artifact restore (protocol.PlanRestore): the newest
// artifact under the fold's key, vetted (CheckArtifact) before anything is
// downloaded, imported into the scratch dir, checked again against the
// imported store's own origin, and the difference folded through the
// plugin (Restore). It returns the watch that resumes from the artifact's
// cursor.
func (r *Runner) restore(ctx context.Context, feed fold.Feed, plugin fold.Plugin, ret protocol.Retention, cause error) (fold.Source, error) {
	const plan = protocol.PlanRestore
	refuse := func(format string, args ...any) error {
		err := withCause(fmt.Errorf("%w (repair = %q): "+format, append([]any{fold.ErrRepairRefused, r.Mode}, args...)...), cause)
		r.end(plan, "refused", err, Result{})
		return err
	}
	if r.Artifacts == nil {
		if cause == nil {
			return r.noRestoreSource(ret, "no artifact store is configured")
		}
		return nil, refuse("%s and no artifact store is configured to restore from; keep this data_dir (it holds values NATS no longer has)", evictionWhy(ret, r.Store.Cursor()))
	}
	key := r.ArtifactKey
	local := r.Store.Cursor()
	if err := os.RemoveAll(r.ScratchDir); err != nil {
		return nil, fmt.Errorf("clearing the repair's scratch dir: %w", err)
	}
	if err := os.MkdirAll(r.ScratchDir, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(r.ScratchDir)
	r.log().Warn("restore starting", "key", key, "store", r.ArtifactsWhere, "cursor", uint64(local.Rev), "retains", fmt.Sprintf("%d..%d", ret.First, ret.Last), "cause", causeText(cause))
	end := r.begin(plan)
	defer end()
	var vetted error
	dest := filepath.Join(r.ScratchDir, "artifact")
	m, err := artifact.Download(ctx, r.Artifacts, key, dest, artifact.DownloadOptions{Check: func(m artifact.Manifest) error {
		vetted = r.CheckArtifact(m, local, ret)
		return vetted
	}})
	switch {
	case errors.Is(err, artifact.ErrNoPointer):
		if cause == nil {
			end()
			r.end(plan, "skipped", nil, Result{})
			return r.noRestoreSource(ret, fmt.Sprintf("no artifact is published under key %q", key))
		}
		return nil, refuse("%s and no artifact is published under key %q in %s to restore from; keep this data_dir (it holds values NATS no longer has)",
			evictionWhy(ret, local), key, r.ArtifactsWhere)
	case err != nil && vetted != nil:
		return nil, refuse("the newest artifact under key %q cannot restore this fold: %v", key, vetted)
	case err != nil:
		r.end(plan, "failed", err, Result{})
		return nil, fmt.Errorf("restore: %w", err) // transient: the next attempt downloads again
	}
	art, _, err := fold.Open(dest, fold.Options{Logger: r.Logger, MemTableSize: 4 << 20, CacheSize: 8 << 20})
	if err != nil {
		r.end(plan, "failed", err, Result{})
		return nil, fmt.Errorf("restore: opening the imported artifact: %w", err)
	}
	defer art.Close()
	if o, ok, err := art.Origin(); err != nil || !ok || o.Bucket != m.Bucket || !o.StreamCreated.Equal(m.StreamCreated) || o.Partition != m.Partition {
		return nil, refuse("the imported artifact's store records origin %v (%t, %v), its manifest says %v", o, ok, err, m.Origin())
	}
	if err := r.join(ctx, plan, art); err != nil {
		err = fmt.Errorf("restore: %w", err)
		r.failed(ctx, plan, err, Result{})
		return nil, err
	}
	res, err := Restore(ctx, r.Store, art, plugin, RestoreConfig{
		Scope:    r.Scope,
		MaxBatch: r.MaxBatch,
		Listed:   r.Listed,
		Poison:   r.Poison,
		Verify: func(ctx context.Context, c protocol.Cursor) error {
			ret, err := r.ReadRetention(ctx, r.Store.Commit)
			if err != nil {
				return fmt.Errorf("re-reading retention before moving the cursor: %w", err)
			}
			if v := protocol.CheckCursorResume(c, ret.Window); v != protocol.ResumeOK {
				return fmt.Errorf("%w: retention passed the artifact's cursor %d while it was folded in (the stream retains %d..%d: %s); the next attempt takes a newer artifact",
					fold.ErrCursorExpired, c.Rev, ret.First, ret.Last, v)
			}
			return nil
		},
		Progress: r.Hooks.Progress,
		Logger:   r.Logger,
	})
	if err != nil {
		r.failed(ctx, plan, err, res)
		return nil, err
	}
	end()
	r.end(plan, "done", nil, res)
	r.log().Warn("restore done; resuming from the artifact's cursor", "cursor", res.Cursor, "folded", res.Folded,
		"deleted", res.Deleted, "unchanged", res.Unchanged, "took", res.Took.Round(time.Millisecond).String())
	return feed.Watch(ctx, r.Store.Cursor())
}

// noRestoreSource lets a cursorless start state-sync when there is nothing
// to restore from (the first node of a fleet): keys already evicted from
// the bucket are then missing, and the log says so.
func (r *Runner) noRestoreSource(ret protocol.Retention, why string) (fold.Source, error) {
	r.log().Warn("starting without a cursor on a bucket whose listing is incomplete, and "+why+": values the bucket already evicted are not in the fold",
		"eviction", evictionOf(ret))
	return nil, nil
}

// CheckArtifact vets the manifest m of an artifact for restoring the fold
// (whose store is at cursor local) against the live retention ret, before
// anything is downloaded: the same bucket and stream, a scope covering the
// fold's, protocol.RestoreAhead and protocol.RestoreAllowed. Its error says
// why the artifact cannot restore the fold.
func (r *Runner) CheckArtifact(m artifact.Manifest, local protocol.Cursor, ret protocol.Retention) error {
	if m.Bucket != r.Bucket {
		return fmt.Errorf("it folds bucket %q, the fold %q", m.Bucket, r.Bucket)
	}
	if m.Partition != r.Partition {
		return fmt.Errorf("it folds partition %s of the bucket, the fold partition %s", partitionText(m.Partition), partitionText(r.Partition))
	}
	if !covers(m.Scope, r.Scope) {
		return fmt.Errorf("its scope %s does not cover the fold's %s", scopeText(m.Scope), scopeText(r.Scope))
	}
	if m.StreamCreated.IsZero() {
		return errors.New("it does not record its stream (an artifact of an older foldhost): it may be of a previous incarnation of the bucket")
	}
	if !m.StreamCreated.Equal(r.Stream) {
		return fmt.Errorf("it is of another incarnation of the bucket (its stream was created at %s, the fold's at %s)",
			m.StreamCreated.UTC().Format(time.RFC3339Nano), r.Stream.UTC().Format(time.RFC3339Nano))
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return err
	}
	if !protocol.RestoreAhead(c.Rev, local.Rev) {
		return fmt.Errorf("its cursor %d is not ahead of the fold's %d (a node never restores from its own exports: restore needs another node's newer one)", c.Rev, local.Rev)
	}
	if !protocol.RestoreAllowed(c.Rev, local.Rev, ret.Window) {
		return fmt.Errorf("a resume from its cursor %d is not sound: the stream retains %d..%d (%s)", c.Rev, ret.First, ret.Last, protocol.CheckResume(c.Rev, ret.Window))
	}
	if v := protocol.CheckCursorResume(c, ret.Window); v != protocol.ResumeOK {
		return fmt.Errorf("a resume from its cursor %v is not sound: the stream retains %d..%d past the revision its prefix watch had settled (%s)", c, ret.First, ret.Last, v)
	}
	return nil
}

// covers reports whether an artifact of scope theirs holds every key of
// scope ours (no prefixes: the whole bucket): each of our prefixes must
// start with one of theirs. A narrower artifact lacks keys the fold holds,
// and a restore would delete those the bucket no longer lists.
func partitionText(p string) string {
	if p == "" {
		return "(whole bucket)"
	}
	return p
}

func covers(theirs, ours []string) bool {
	if len(theirs) == 0 {
		return true
	}
	if len(ours) == 0 {
		return false
	}
	for _, p := range ours {
		if !slices.ContainsFunc(theirs, func(q string) bool { return strings.HasPrefix(p, q) }) {
			return false
		}
	}
	return true
}

func scopeText(scope []string) string {
	if len(scope) == 0 {
		return "(whole bucket)"
	}
	return fmt.Sprintf("%q", scope)
}
