package foldrun

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/datadir"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// BootstrapOptions tune Bootstrap.
type BootstrapOptions struct {
	// Key overrides the fold's artifact key.
	Key string
	// OnManifest, if set, is called with the published manifest once it
	// passed the checks, before the payload downloads.
	OnManifest func(artifact.Manifest)
	// Progress, if set, is called as the payload downloads.
	Progress func(read, size int64)
	// StreamCreated, when known, is the bucket's live stream's identity:
	// an artifact of another stream (the bucket deleted and made again
	// since) is refused before it downloads.
	StreamCreated time.Time
}

// BootstrapResult is what a bootstrap installed.
type BootstrapResult struct {
	Fold, Key, Store string
	Cursor           uint64 // the artifact's cursor: the next run resumes after it
	Bytes            int64  // downloaded
	Took             time.Duration
	// Warning, when set, says the artifact's views came from another plugin
	// build than the fold's (they come across as they are).
	Warning string
}

// ErrNoArtifact: nothing is published under the fold's key.
var ErrNoArtifact = errors.New("no artifact published")

// Bootstrap fills fold f's empty data dir from the newest artifact
// published under its key in store (where names it in messages): it
// refuses, before downloading anything, a fold that has data and an
// artifact from another bucket or scope (the stream identity the artifact
// records is checked when the fold starts: it needs NATS); then it
// downloads and verifies the payload and moves it into the fold's data dir
// in one rename. A failed or interrupted bootstrap leaves the data dir as
// it was, and what a killed one left beside it is cleared by the next
// command that opens the fold. The next Run resumes from the artifact's
// cursor. f has its defaults applied (the host's Options did).
func Bootstrap(ctx context.Context, f Options, store artifact.Store, where string, log *slog.Logger, bo BootstrapOptions) (BootstrapResult, error) {
	if bo.Key != "" {
		f.ArtifactKey = bo.Key
	}
	if store == nil {
		return BootstrapResult{}, errors.New("no artifact store is configured")
	}
	if log == nil {
		log = slog.Default()
	}
	parent := filepath.Dir(f.DataDir)
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return BootstrapResult{}, err
	}
	lk, err := files.TryLock(datadir.BootstrapLock(f.DataDir))
	if err != nil {
		return BootstrapResult{}, fmt.Errorf("another bootstrap of fold %s is running: %w", f.Name, err)
	}
	defer lk.Unlock()
	if _, err := datadir.FinishSwap(f.DataDir, log); err != nil { // a killed repair --reset
		return BootstrapResult{}, fmt.Errorf("fold %s: %w", f.Name, err)
	}
	datadir.ClearStaleImports(f.DataDir)
	// A store that folded nothing (what a first run against an empty
	// bucket leaves) is replaced, but only once an artifact to replace it
	// with was found and checked: without one it stays as it was.
	replaceEmpty := false
	if entries, err := os.ReadDir(f.DataDir); err == nil && len(entries) > 0 {
		empty, err := emptyStore(f.DataDir)
		if err != nil {
			return BootstrapResult{}, fmt.Errorf("fold %s: %s: %w", f.Name, f.DataDir, err)
		}
		if !empty {
			return BootstrapResult{}, fmt.Errorf("fold %s already has data in %s: bootstrap only fills an empty fold (to replace it, stop foldhost and move the directory aside)", f.Name, f.DataDir)
		}
		replaceEmpty = true
	}

	res := BootstrapResult{Fold: f.Name, Key: f.ArtifactKey, Store: where}
	start := time.Now()
	var total atomic.Int64
	m, err := artifact.Download(ctx, store, f.ArtifactKey, f.DataDir, artifact.DownloadOptions{
		Check: func(m artifact.Manifest) error {
			got := m.Origin()
			if got.Bucket == "" {
				got.Bucket = f.Bucket // the earliest exporters did not record the bucket
			}
			if d := got.Mismatch(f.Origin(bo.StreamCreated)); d != "" {
				return fmt.Errorf("%w: the artifact %q is of another source than fold %s (the artifact's %s): bootstrap only from an artifact of the fold's bucket and scope",
					ErrOriginMismatch, f.ArtifactKey, f.Name, d)
			}
			if bo.OnManifest != nil {
				bo.OnManifest(m)
			}
			if replaceEmpty {
				if err := os.RemoveAll(f.DataDir); err != nil {
					return fmt.Errorf("fold %s: removing its empty store: %w", f.Name, err)
				}
			}
			return nil
		},
		Progress: func(read, size int64) {
			total.Store(read)
			if bo.Progress != nil {
				bo.Progress(read, size)
			}
		},
	})
	if errors.Is(err, artifact.ErrNoPointer) {
		return res, fmt.Errorf("%w under key %q in %s: export the fold on a node that has it", ErrNoArtifact, f.ArtifactKey, where)
	}
	if err != nil {
		return res, err
	}
	if err := joinOutbox(f.DataDir); err != nil {
		return res, fmt.Errorf("fold %s: %w", f.Name, err)
	}
	c, _ := m.DecodeCursor() // Download checked it
	res.Cursor, res.Bytes, res.Took = uint64(c.Rev), total.Load(), time.Since(start)
	res.Warning = pluginMismatch(f, m)
	return res, nil
}

// pluginMismatch says when the artifact's views were made by another
// plugin build than the fold's: the fold rebuilds them at its next start if
// its plugin's view schema differs (or the artifact has none), else they
// come across as they are. "" when they match.
func pluginMismatch(f Options, m artifact.Manifest) string {
	var theirs fold.PluginIdentity
	if m.PluginIdentity != nil {
		if b, err := hex.DecodeString(*m.PluginIdentity); err == nil {
			theirs, _ = fold.ParsePluginIdentity(b)
		}
	}
	if pluginobj.IsRef(f.Plugin) {
		// The module is in a NATS object store: not fetched for a message.
		if theirs.SHA256 == "" {
			return fmt.Sprintf("the artifact has no plugin views (a raw-only fold); fold %s's plugin rebuilds them from the raw fold when it starts", f.Name)
		}
		return fmt.Sprintf("the artifact's views were made by plugin %s %s (sha256 %.12s, view schema %d); fold %s's module comes from %s: if its view schema differs, the fold rebuilds the views when it starts, else they come across as they are",
			theirs.Name, theirs.Version, theirs.SHA256, theirs.ViewSchema, f.Name, f.Plugin)
	}
	ours := ""
	if f.Plugin != "" {
		max := f.PluginMaxBytes
		if max <= 0 {
			max = wasm.DefaultMaxModuleBytes
		}
		if b, err := files.ReadRegular(f.Plugin, max); err == nil {
			ours = wasm.ModuleHash(b)
		}
	}
	switch {
	case theirs.SHA256 == ours:
		return ""
	case theirs.SHA256 == "":
		return fmt.Sprintf("the artifact has no plugin views (a raw-only fold); fold %s's plugin rebuilds them from the raw fold when it starts", f.Name)
	case ours == "":
		return fmt.Sprintf("the artifact's views were made by plugin %s %s (sha256 %.12s); fold %s runs no plugin, so they will not be updated",
			theirs.Name, theirs.Version, theirs.SHA256, f.Name)
	}
	return fmt.Sprintf("the artifact's views were made by plugin %s %s (sha256 %.12s, view schema %d), fold %s runs sha256 %.12s: if its view schema differs, the fold rebuilds the views when it starts, else they come across as they are",
		theirs.Name, theirs.Version, theirs.SHA256, theirs.ViewSchema, f.Name, ours)
}

// emptyStore reports whether dir holds a fold store that folded nothing:
// no cursor, no raw or view entry, no repair begun. A directory that is not
// a pebble database is not opened (opening would create one in it): it is
// "not empty". A store held by a running foldhost is an error
// (fold.ErrLocked).
func emptyStore(dir string) (bool, error) {
	if m, _ := filepath.Glob(filepath.Join(dir, "MANIFEST-*")); len(m) == 0 {
		return false, nil
	}
	st, cur, err := fold.Open(dir, fold.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return false, err
	}
	defer st.Close()
	if cur.Rev != protocol.NoRevision || cur.EvictionSeen {
		return false, nil
	}
	if has, err := fold.AnyRawKey(st); has || err != nil {
		return false, err
	}
	errFound := errors.New("found")
	if err := st.ViewRange(nil, func(_, _ []byte) error { return errFound }); err != nil {
		return false, ignore(err, errFound)
	}
	pending, err := st.RepairPending()
	return !pending && err == nil, err
}

// joinOutbox prepares the store in dir, a copy of another node's, to join
// its effects midway: the exporting node's unpublished effects are its own
// to publish, so the outbox is dropped, and they come before this node's
// own, so the store holds its publisher until the fence covers the last
// effect the exporter filed (fold.Store.JoinedHold: a hold the copy
// carries already stays, at the later of the two points).
func joinOutbox(dir string) error {
	st, _, err := fold.Open(dir, fold.Options{Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		return err
	}
	h, ok, err := st.JoinedHold()
	if err == nil {
		var hold *fold.EffectsHold
		if ok {
			hold = &h
		}
		err = st.DropOutbox(hold) // one batch: no crash leaves the outbox dropped and nothing held
	}
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return err
}

// ignore is err, nil when it is target.
func ignore(err, target error) error {
	if errors.Is(err, target) {
		return nil
	}
	return err
}

// Fresh reports whether dir holds nothing a fold folded: it is absent or
// empty, or a store that folded nothing (what a first run against an empty
// bucket leaves). A store held by a running foldhost is an error.
func Fresh(dir string) (bool, error) {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) || (err == nil && len(entries) == 0) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return emptyStore(dir)
}
