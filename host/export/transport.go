package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// Transport stores artifacts behind a monotone pointer. Every implementation
// must pass the same contract suite (transport_contract_test.go):
//
//   - payloads are content-addressed by [Address] of their manifest and
//     write-once (re-uploading an identical payload is not an error);
//   - the pointer is swapped by compare-and-swap only when
//     [protocol.PointerPublishAllowed] admits the candidate, so the published
//     rank never regresses; losing to a newer pointer is the outcome
//     [SupersededByNewer], not an error; a corrupt pointer is replaceable;
//   - readers derive the payload from the pointer's bytes and [Import] it,
//     verifying everything;
//   - Prune deletes only what [protocol.PayloadPrunable] admits.
//
// Implementations are safe for concurrent use.
type Transport interface {
	// Upload uploads the artifact in dir (made by [Export]) under key:
	// UploadPayload, then SwapPointer.
	Upload(ctx context.Context, key, dir string) (Outcome, error)
	// UploadPayload stores the tar of the artifact in dir as key's payload
	// named by the manifest's address and returns the manifest bytes. It
	// does not touch the pointer.
	UploadPayload(ctx context.Context, key, dir string) ([]byte, error)
	// SwapPointer publishes manifest as key's pointer if the guard admits it.
	// The payload it names must already be stored.
	SwapPointer(ctx context.Context, key string, manifest []byte) (Outcome, error)
	// Pointer returns key's pointer bytes, or an error wrapping
	// [ErrNoPointer]. The bytes may be corrupt.
	Pointer(ctx context.Context, key string) ([]byte, error)
	// OpenPayload opens key's payload named by [Address] of manifest (the
	// name is derived, never stored) and returns it with its size in bytes.
	// The content is untrusted: read it through [Import] ([Download] does).
	OpenPayload(ctx context.Context, key string, manifest []byte) (io.ReadCloser, int64, error)
	// Prune deletes key's payloads that [protocol.PayloadPrunable] admits
	// (aged out: last written before now-grace) and returns their names
	// ("<address>.tar"). It also removes what uploads killed mid-way left,
	// once idle for max(grace, [MinAbandonedAge]).
	Prune(ctx context.Context, key string, grace time.Duration, now time.Time) ([]string, error)
}

var (
	_ Transport = (*LocalDir)(nil)
	_ Transport = (*S3)(nil)
)

// MinAbandonedAge is the least idle time after which Prune takes an
// upload's leftovers (a temp file, an S3 multipart upload) for abandoned,
// whatever the prune grace: a live upload writes far more often, and the
// grace alone (4 x a lease TTL that may be seconds) could cut a slow one.
const MinAbandonedAge = time.Hour

// ErrSwapContended: a pointer swap lost the compare-and-swap more times than
// the retry budget allows. Retry the round later.
var ErrSwapContended = errors.New("export: pointer swap contended")

// upload is every transport's Upload: the payload first, then the pointer
// swap (a crash in between leaves the old pointer, and an orphan payload
// that prune collects).
func upload(ctx context.Context, t Transport, key, dir string) (Outcome, error) {
	manifest, err := t.UploadPayload(ctx, key, dir)
	if err != nil {
		return 0, err
	}
	return t.SwapPointer(ctx, key, manifest)
}

// artifactManifest checks key and reads and parses the manifest of the
// artifact in dir: the first step of every UploadPayload.
func artifactManifest(key, dir string) ([]byte, error) {
	if err := checkKey(key); err != nil {
		return nil, err
	}
	manifest, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("export: upload: %w", err)
	}
	if _, err := ParseManifest(manifest); err != nil {
		return nil, fmt.Errorf("export: upload: %w", err)
	}
	return manifest, nil
}

// DownloadOptions tune [Download].
type DownloadOptions struct {
	// Progress, when set, is called as the payload streams in with the
	// bytes read so far and the payload's size. It runs on the downloading
	// goroutine: keep it cheap (store the numbers, print elsewhere).
	Progress func(read, total int64)
	// Check, when set, vets the published manifest before anything is
	// downloaded (the bucket and scope it was exported from); its error
	// stops the download.
	Check func(Manifest) error
}

// Download imports key's published artifact into dest: it reads the
// pointer (the single trusted object), derives the payload's name from the
// pointer's bytes, and streams the payload through [Import], which verifies
// everything and installs dest atomically, or leaves it untouched. A
// non-empty dest is refused ([ErrDestNotEmpty]) before anything is
// downloaded.
func Download(ctx context.Context, t Transport, key, dest string, o DownloadOptions) (Manifest, error) {
	manifest, err := t.Pointer(ctx, key)
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("export: download %s: pointer: %w", key, err)
	}
	if o.Check != nil {
		if err := o.Check(m); err != nil {
			return Manifest{}, err
		}
	}
	if err := checkDest(dest); err != nil {
		return Manifest{}, err
	}
	body, size, err := t.OpenPayload(ctx, key, manifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("export: download %s: %w", key, err)
	}
	defer body.Close()
	return Import(&progressReader{ctx: ctx, r: body, total: size, fn: o.Progress}, manifest, dest)
}

// progressReader reports progress and stops at ctx's end.
type progressReader struct {
	ctx   context.Context
	r     io.Reader
	read  int64
	total int64
	fn    func(read, total int64)
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	p.read += int64(n)
	if p.fn != nil && n > 0 {
		p.fn(p.read, p.total)
	}
	return n, err
}
