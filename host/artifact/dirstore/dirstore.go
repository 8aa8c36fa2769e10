package dirstore

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/zeebo/blake3"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// Store is the local-directory artifact store:
//
//	<root>/<key>.payloads/<hex8>.tar   content-addressed payload, write-once
//	<root>/<key>.manifest.json         pointer: the published manifest's bytes
//	<root>/<key>.lock                  flock(2) lock serializing pointer swaps
//
// Pointer swaps and prunes are compare-and-swap: each runs under an
// exclusive flock(2) on the key's lock file, which serializes them across
// goroutines and processes on one host (Linux/Unix semantics; not over NFS),
// and publishes by temp file + fsync + rename + directory fsync, so readers,
// which take no lock, see the old pointer or the new one, never a torn one.
// A Store is safe for concurrent use.
type Store struct {
	root string
}

var _ artifact.Store = (*Store)(nil)

// New returns the store rooted at root, creating it if needed.
func New(root string) (*Store, error) {
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, fmt.Errorf("artifact: local dir: %w", err)
	}
	return &Store{root: root}, nil
}

func (l *Store) pointerPath(key string) string {
	return filepath.Join(l.root, key+".manifest.json")
}
func (l *Store) payloadDir(key string) string { return filepath.Join(l.root, key+".payloads") }
func (l *Store) payloadPath(key, addr string) string {
	return filepath.Join(l.payloadDir(key), addr+".tar")
}

// UploadPayload writes the tar of the artifact in dir to
// <key>.payloads/<artifact.Address(manifest)>.tar, write-once: the tar goes to a temp
// file, is fsynced, then hard-linked to its final name, which fails rather
// than replaces. An existing payload of the same name must have identical
// bytes (then its mtime is refreshed, restarting its prune grace); anything
// else is an error. It returns the manifest bytes.
func (l *Store) UploadPayload(ctx context.Context, key, dir string) ([]byte, error) {
	manifest, err := artifact.StagedManifest(key, dir)
	if err != nil {
		return nil, err
	}
	pdir := l.payloadDir(key)
	if err := os.MkdirAll(pdir, 0o755); err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	tmp, err := os.CreateTemp(pdir, ".upload-*")
	if err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	h := blake3.New()
	if err := artifact.WriteTar(ctxWriter{ctx, io.MultiWriter(tmp, h)}, dir); err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	final := l.payloadPath(key, artifact.Address(manifest))
	if err := os.Link(tmp.Name(), final); err != nil {
		if !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("artifact: upload: %w", err)
		}
		_, sum, err := artifact.HashFile(final)
		if err != nil {
			return nil, fmt.Errorf("artifact: upload: existing payload: %w", err)
		}
		if want := fmt.Sprintf("%x", h.Sum(nil)); sum != want {
			return nil, fmt.Errorf("artifact: upload: payload %s exists with different bytes", final)
		}
		now := time.Now()
		if err := os.Chtimes(final, now, now); err != nil {
			return nil, fmt.Errorf("artifact: upload: %w", err)
		}
	}
	if err := files.SyncDir(pdir); err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	return manifest, nil
}

// SwapPointer publishes manifest as key's pointer if
// [protocol.PointerSwapAllowed] admits its rank and epoch against the
// current pointer (absent, parseable rank, or corrupt), atomically with
// respect to every other SwapPointer and Prune on the key. The payload it
// names must already be stored. It returns [SupersededByNewer] when the
// pointer is strictly newer, [FencedOut] when a newer owner published it.
func (l *Store) SwapPointer(ctx context.Context, key string, manifest []byte) (artifact.Outcome, error) {
	cur, epoch, err := artifact.Candidate(key, manifest)
	if err != nil {
		return 0, err
	}
	if _, err := os.Stat(l.payloadPath(key, artifact.Address(manifest))); err != nil {
		return 0, fmt.Errorf("artifact: swap pointer: payload not stored: %w", err)
	}
	unlock, err := l.lock(ctx, key)
	if err != nil {
		return 0, err
	}
	defer unlock()
	old, state, err := l.readPointer(key)
	if err != nil {
		return 0, err
	}
	if out := artifact.Judge(state, cur.Rev, epoch); out != 0 {
		return out, nil
	}
	if bytes.Equal(old, manifest) {
		return artifact.Published, nil
	}
	if err := l.writePointer(key, manifest); err != nil {
		return 0, err
	}
	return artifact.Published, nil
}

// readPointer returns the pointer's bytes (nil when absent) and its state.
func (l *Store) readPointer(key string) ([]byte, protocol.PointerState, error) {
	b, err := files.ReadRegular(l.pointerPath(key), artifact.MaxManifestSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, protocol.PointerAbsent(), nil
	}
	if err != nil {
		return nil, protocol.PointerState{}, fmt.Errorf("artifact: read pointer: %w", err)
	}
	return b, artifact.PointerState(b), nil
}

func (l *Store) writePointer(key string, manifest []byte) error {
	tmp, err := os.CreateTemp(l.root, "."+key+".pointer-*")
	if err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	if _, err := tmp.Write(manifest); err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	if err := os.Rename(tmp.Name(), l.pointerPath(key)); err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	if err := files.SyncDir(l.root); err != nil {
		return fmt.Errorf("artifact: write pointer: %w", err)
	}
	return nil
}

// lock takes the key's exclusive flock, waiting until ctx is done. Each
// call opens its own file description, so it excludes other goroutines of
// this process as well as other processes.
func (l *Store) lock(ctx context.Context, key string) (func(), error) {
	lk, err := files.LockWait(ctx, filepath.Join(l.root, key+".lock"))
	if err != nil {
		return nil, fmt.Errorf("artifact: %w", err)
	}
	return lk.Unlock, nil
}

// ctxWriter fails writes once ctx is done.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (w ctxWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	return w.w.Write(p)
}

// Pointer returns key's pointer bytes: the published manifest, the single
// trusted object. It fails with [ErrNoPointer] when there is none. The bytes
// may be corrupt; [Store.Download] and [Import] check them.
func (l *Store) Pointer(_ context.Context, key string) ([]byte, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	b, err := files.ReadRegular(l.pointerPath(key), artifact.MaxManifestSize)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", artifact.ErrNoPointer, key)
	}
	if err != nil {
		return nil, fmt.Errorf("artifact: read pointer: %w", err)
	}
	return b, nil
}

// OpenPayload opens key's payload named by [Address] of manifest.
func (l *Store) OpenPayload(_ context.Context, key string, manifest []byte) (io.ReadCloser, int64, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, 0, err
	}
	// A FIFO or a device named like a payload is refused, not read (a FIFO
	// used to hang bootstrap forever).
	f, size, err := files.OpenRegular(l.payloadPath(key, artifact.Address(manifest)), math.MaxInt64)
	if err != nil {
		return nil, 0, err
	}
	return f, size, nil
}

// Prune deletes key's payloads that [protocol.PayloadPrunable] admits, under
// the key's lock (so the pointer cannot move meanwhile), and returns the
// names deleted. A payload's rank is read from the manifest inside it and
// counts only when that manifest's address is the payload's name; otherwise
// the rank is unknown and the payload is kept. A payload is aged out when
// its mtime is older than now-grace. Production must pass a grace longer
// than any upload-to-swap window (RATIONALE.md, "Prune needs a grace period
// even with the strict rank rule").
func (l *Store) Prune(ctx context.Context, key string, grace time.Duration, now time.Time) ([]string, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	unlock, err := l.lock(ctx, key)
	if err != nil {
		return nil, err
	}
	defer unlock()
	ptr, state, err := l.readPointer(key)
	if err != nil {
		return nil, err
	}
	target := ""
	if ptr != nil {
		target = artifact.Address(ptr) + ".tar"
	}
	stale := now.Add(-artifact.MinAbandonedAge)
	removeStaleTemps(l.root, "."+key+".pointer-", stale)
	removeStaleTemps(l.payloadDir(key), ".upload-", stale)
	entries, err := os.ReadDir(l.payloadDir(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("artifact: prune: %w", err)
	}
	var deleted []string
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".tar") {
			continue
		}
		p := filepath.Join(l.payloadDir(key), name)
		info, err := e.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue // another pruner took it (a directory shared without working locks)
		}
		if err != nil {
			return deleted, fmt.Errorf("artifact: prune: %w", err)
		}
		rank, known := payloadRank(p, strings.TrimSuffix(name, ".tar"))
		pl := protocol.Payload{
			Rank:            rank,
			RankKnown:       known,
			IsPointerTarget: name == target,
			AgedOut:         info.ModTime().Before(now.Add(-grace)),
		}
		if !protocol.PayloadPrunable(pl, state) {
			continue
		}
		if err := os.Remove(p); errors.Is(err, os.ErrNotExist) {
			continue // gone already: pruning is idempotent
		} else if err != nil {
			return deleted, fmt.Errorf("artifact: prune: %w", err)
		}
		deleted = append(deleted, name)
	}
	if len(deleted) > 0 {
		if err := files.SyncDir(l.payloadDir(key)); err != nil {
			return deleted, fmt.Errorf("artifact: prune: %w", err)
		}
	}
	return deleted, nil
}

// Keys returns the keys that have a pointer (<key>.manifest.json), sorted.
func (l *Store) Keys(_ context.Context) ([]string, error) {
	entries, err := os.ReadDir(l.root)
	if err != nil {
		return nil, fmt.Errorf("artifact: list keys: %w", err)
	}
	var keys []string
	for _, e := range entries {
		key, ok := strings.CutSuffix(e.Name(), ".manifest.json")
		if ok && e.Type().IsRegular() && artifact.CheckKey(key) == nil {
			keys = append(keys, key) // ReadDir sorts by name, so keys are sorted
		}
	}
	return keys, nil
}

// Payloads returns key's payloads (<key>.payloads/<address>.tar), sorted by
// name; an upload's temp file is not one.
func (l *Store) Payloads(_ context.Context, key string) ([]artifact.PayloadInfo, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, err
	}
	entries, err := os.ReadDir(l.payloadDir(key))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("artifact: list payloads: %w", err)
	}
	var out []artifact.PayloadInfo
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || strings.HasPrefix(name, ".") || !strings.HasSuffix(name, ".tar") {
			continue
		}
		info, err := e.Info()
		if errors.Is(err, os.ErrNotExist) {
			continue // pruned meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("artifact: list payloads: %w", err)
		}
		out = append(out, artifact.PayloadInfo{Name: name, Size: info.Size(), Modified: info.ModTime().UTC()})
	}
	return out, nil
}

// removeStaleTemps removes the temp files in dir whose names start with
// prefix and that were last written before cutoff: what an upload or a
// pointer swap killed mid-way left behind (a live one keeps writing its
// temp file). Best effort: failures are ignored.
func removeStaleTemps(dir, prefix string, cutoff time.Time) {
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), prefix) || !e.Type().IsRegular() {
			continue
		}
		if info, err := e.Info(); err == nil && info.ModTime().Before(cutoff) {
			_ = os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}

// payloadRank reads the rank of the payload at p from its embedded
// manifest, which must parse and have address addr.
func payloadRank(p, addr string) (protocol.Revision, bool) {
	f, _, err := files.OpenRegular(p, math.MaxInt64)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	return artifact.PayloadRank(f, addr)
}

// PayloadManifest implements [artifact.ManifestReader]: the tar is read
// from the file, its data entries skipped by seeking.
func (l *Store) PayloadManifest(_ context.Context, key string, p artifact.PayloadInfo) ([]byte, bool, error) {
	if err := artifact.CheckKey(key); err != nil {
		return nil, false, err
	}
	addr, ok := strings.CutSuffix(p.Name, ".tar")
	if !ok || strings.ContainsAny(addr, "/\\") || strings.HasPrefix(addr, ".") {
		return nil, false, nil
	}
	f, _, err := files.OpenRegular(filepath.Join(l.payloadDir(key), p.Name), math.MaxInt64)
	if errors.Is(err, os.ErrNotExist) {
		return nil, false, nil // pruned meanwhile
	}
	if err != nil {
		return nil, false, fmt.Errorf("artifact: read payload: %w", err)
	}
	defer f.Close()
	b, ok := artifact.PayloadManifest(f, addr)
	return b, ok, nil
}
