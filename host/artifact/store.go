package artifact

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// Store keeps artifacts behind a monotone pointer. Every implementation must
// pass the same contract suite (package storetest):
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
type Store interface {
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
	// once idle for [MinAbandonedAge]. A payload another pruner deleted
	// meanwhile is not an error.
	Prune(ctx context.Context, key string, grace time.Duration, now time.Time) ([]string, error)
	// Keys returns the keys that have a pointer, sorted.
	Keys(ctx context.Context) ([]string, error)
	// Payloads returns key's stored payloads, sorted by name: none when
	// the key has none. An upload in progress, or what a killed one left,
	// is not a payload.
	Payloads(ctx context.Context, key string) ([]PayloadInfo, error)
}

// PayloadInfo describes one stored payload.
type PayloadInfo struct {
	// Name is "<address>.tar" ([Address] of the manifest inside).
	Name string `json:"name"`
	Size int64  `json:"size"`
	// Modified is its last write: its upload, or a later upload of the
	// same bytes (which restarts its prune grace).
	Modified time.Time `json:"modified"`
}

// Listing is what a store holds under one key ([List]).
type Listing struct {
	Key string `json:"key"`
	// Published describes the pointer's artifact; nil when the pointer is
	// corrupt (PointerError says how: the next export replaces it).
	Published    *PublishedArtifact `json:"published,omitempty"`
	PointerError string             `json:"pointer_error,omitempty"`
	// Payloads are the key's payloads, sorted by name; at most one is the
	// published one, the others wait for Prune (or were uploaded by a
	// round that lost the pointer swap).
	Payloads []ListedPayload `json:"payloads"`
}

// PublishedArtifact describes a key's published artifact, from its
// manifest.
type PublishedArtifact struct {
	// Cursor is the revision the artifact is consistent with.
	Cursor uint64 `json:"cursor"`
	// Payload is the payload's name; Size its size in bytes (0 when the
	// payload is missing, which Missing says).
	Payload string `json:"payload"`
	Size    int64  `json:"size"`
	Missing bool   `json:"missing,omitempty"`
	// At is the payload's last write (about when it was exported).
	At     time.Time `json:"at,omitzero"`
	Bucket string    `json:"bucket"`
	Scope  []string  `json:"scope"`
	// Files and DataBytes count the store files the artifact holds.
	Files     int   `json:"files"`
	DataBytes int64 `json:"data_bytes"`
}

// ListedPayload is one payload of a [Listing].
type ListedPayload struct {
	PayloadInfo
	// Published: the pointer names it.
	Published bool `json:"published,omitempty"`
	// Manifest summarizes the payload's manifest: the pointer's for the
	// published one, the one inside it for the others when the store can
	// read it ([ManifestReader]); nil otherwise, or when it is unreadable
	// (ManifestError says why).
	Manifest      *Summary `json:"manifest,omitempty"`
	ManifestError string   `json:"manifest_error,omitempty"`
}

// List lists the store's keys (only those of keys, when given; a key
// without a pointer or payloads is listed empty): each key's published
// artifact, read from its pointer, and its payloads, each with what its
// manifest says ([ListedPayload.Manifest]).
func List(ctx context.Context, s Store, keys ...string) ([]Listing, error) {
	return list(ctx, s, true, keys)
}

// list is List, describing the payloads only when describe is set (Show
// finds its artifact first and reads that one's manifest only).
func list(ctx context.Context, s Store, describe bool, keys []string) ([]Listing, error) {
	if len(keys) == 0 {
		var err error
		if keys, err = s.Keys(ctx); err != nil {
			return nil, fmt.Errorf("artifact: list keys: %w", err)
		}
	}
	out := make([]Listing, 0, len(keys))
	for _, key := range keys {
		l := Listing{Key: key, Payloads: []ListedPayload{}}
		pays, err := s.Payloads(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("artifact: list %s: %w", key, err)
		}
		ptr, err := s.Pointer(ctx, key)
		switch {
		case errors.Is(err, ErrNoPointer):
		case err != nil:
			return nil, fmt.Errorf("artifact: list %s: %w", key, err)
		default:
			l.Published, err = published(ptr)
			if err != nil {
				l.PointerError = err.Error()
			}
		}
		for _, p := range pays {
			lp := ListedPayload{PayloadInfo: p}
			if l.Published != nil && p.Name == l.Published.Payload {
				lp.Published = true
				l.Published.Size, l.Published.At = p.Size, p.Modified
			}
			l.Payloads = append(l.Payloads, lp)
		}
		if l.Published != nil && l.Published.Size == 0 && l.Published.At.IsZero() {
			l.Published.Missing = true
		}
		if describe {
			if err := describePayloads(ctx, s, &l, ptr); err != nil {
				return nil, err
			}
		}
		out = append(out, l)
	}
	return out, nil
}

// published describes the artifact of pointer bytes b.
func published(b []byte) (*PublishedArtifact, error) {
	m, err := ParseManifest(b)
	if err != nil {
		return nil, err
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return nil, err
	}
	p := &PublishedArtifact{Cursor: uint64(c.Rev), Payload: Address(b) + ".tar", Bucket: m.Bucket, Scope: m.Scope, Files: len(m.Files)}
	if p.Scope == nil {
		p.Scope = []string{}
	}
	for _, f := range m.Files {
		p.DataBytes += f.Size
	}
	return p, nil
}

// MinAbandonedAge is the idle time after which Prune takes an upload's
// leftovers (a temp file, an S3 multipart upload) for abandoned. A live
// upload writes far more often: a local one continuously, an S3 one a part
// per request, and no request may take longer than [MaxRequestTimeout].
const MinAbandonedAge = 10 * time.Minute

// MaxRequestTimeout bounds a store's per-request timeout (an upload part
// that could take longer would look abandoned while it runs).
const MaxRequestTimeout = MinAbandonedAge / 2

// ErrSwapContended: a pointer swap lost the compare-and-swap more times than
// the retry budget allows. Retry the round later.
var ErrSwapContended = errors.New("artifact: pointer swap contended")

// Upload publishes the artifact in dir (made by [Export]) under key: the
// payload first (UploadPayload), then the pointer swap (SwapPointer). A crash
// in between leaves the old pointer, and an orphan payload that prune
// collects.
func Upload(ctx context.Context, s Store, key, dir string) (Outcome, error) {
	manifest, err := s.UploadPayload(ctx, key, dir)
	if err != nil {
		return 0, err
	}
	return s.SwapPointer(ctx, key, manifest)
}

// UploadAt is Upload by a fleet's owner at epoch: its pointer carries the
// epoch, and a pointer of a newer owner refuses it ([FencedOut]). Epoch
// 0 is Upload.
func UploadAt(ctx context.Context, s Store, key, dir string, epoch protocol.Revision) (Outcome, error) {
	manifest, err := s.UploadPayload(ctx, key, dir)
	if err != nil {
		return 0, err
	}
	if manifest, err = WithEpoch(manifest, epoch); err != nil {
		return 0, err
	}
	return s.SwapPointer(ctx, key, manifest)
}

// RaisePointerEpoch writes a fleet owner's epoch into key's pointer, as it
// is, so that from then on the store refuses a swap of any older owner
// (one paused past its lease, resumed). It returns FencedOut when a newer
// owner's epoch is there; nothing is done when there is no pointer (the
// owner's first export carries its epoch) or a corrupt one (replaced by
// the next export). Each write is the store's conditional swap; a pointer
// moved meanwhile is read again.
func RaisePointerEpoch(ctx context.Context, s Store, key string, epoch protocol.Revision) (Outcome, error) {
	for attempt := 0; ; attempt++ {
		b, err := s.Pointer(ctx, key)
		if errors.Is(err, ErrNoPointer) {
			return Published, nil
		}
		if err != nil {
			return 0, err
		}
		m, err := ParseManifest(b)
		if err != nil {
			return Published, nil
		}
		switch protocol.FenceMark(protocol.Revision(m.Epoch), epoch) {
		case protocol.MarkHeld:
			return Published, nil
		case protocol.MarkFenced:
			return FencedOut, nil
		}
		raised, err := WithEpoch(b, epoch)
		if err != nil {
			return 0, err
		}
		out, err := s.SwapPointer(ctx, key, raised)
		if err != nil || out == Published || out == FencedOut {
			return out, err
		}
		if attempt >= 8 { // superseded each time: another exporter keeps publishing
			return 0, fmt.Errorf("%w: raising the epoch of %s's pointer to %d", ErrSwapContended, key, epoch)
		}
	}
}

// StagedManifest checks key and reads and parses the manifest of the
// artifact in dir: the first step of every Store's UploadPayload.
func StagedManifest(key, dir string) ([]byte, error) {
	if err := CheckKey(key); err != nil {
		return nil, err
	}
	manifest, err := os.ReadFile(filepath.Join(dir, ManifestName))
	if err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
	}
	if _, err := ParseManifest(manifest); err != nil {
		return nil, fmt.Errorf("artifact: upload: %w", err)
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
func Download(ctx context.Context, t Store, key, dest string, o DownloadOptions) (Manifest, error) {
	manifest, err := t.Pointer(ctx, key)
	if err != nil {
		return Manifest{}, err
	}
	m, err := ParseManifest(manifest)
	if err != nil {
		return Manifest{}, fmt.Errorf("artifact: download %s: pointer: %w", key, err)
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
		return Manifest{}, fmt.Errorf("artifact: download %s: %w", key, err)
	}
	defer body.Close()
	pr := &progressReader{ctx: ctx, r: body, total: size, fn: o.Progress}
	m, err = Import(pr, manifest, dest)
	if err != nil && ctx.Err() != nil {
		// Cancelled: whatever the import made of the cut stream, the cause
		// is the caller's (Import formats a tar read error, losing ctx's).
		return Manifest{}, fmt.Errorf("artifact: download %s: %w", key, ctx.Err())
	}
	if err != nil && pr.failed != nil {
		// The stream broke, not the artifact: whatever Import made of the
		// short read (a truncated tar), the cause is the transfer.
		if !errors.Is(pr.failed, ErrTransport) {
			pr.failed = fmt.Errorf("%w: %w", ErrTransport, pr.failed)
		}
		return Manifest{}, fmt.Errorf("artifact: download %s: after %d of %d bytes: %w", key, pr.read, size, pr.failed)
	}
	return m, err
}

// progressReader reports progress and stops at ctx's end.
type progressReader struct {
	ctx   context.Context
	r     io.Reader
	read  int64
	total int64
	fn    func(read, total int64)
	// failed is the first read error other than EOF: the transfer broke.
	failed error
}

func (p *progressReader) Read(b []byte) (int, error) {
	if err := p.ctx.Err(); err != nil {
		return 0, err
	}
	n, err := p.r.Read(b)
	if err != nil && err != io.EOF && p.failed == nil {
		p.failed = err
	}
	p.read += int64(n)
	if p.fn != nil && n > 0 {
		p.fn(p.read, p.total)
	}
	return n, err
}

// Outcome is the result of a pointer swap.
type Outcome int

const (
	// Published: the pointer now names the candidate artifact (or already
	// did).
	Published Outcome = iota + 1
	// SupersededByNewer: the pointer names a strictly newer artifact; the
	// candidate was not published. A normal outcome, not an error.
	SupersededByNewer
	// FencedOut: the pointer was published by a newer owner of the fold
	// in a fleet (its epoch above the candidate's); the candidate was not
	// published: this exporter is a stale owner.
	FencedOut
)

func (o Outcome) String() string {
	switch o {
	case Published:
		return "published"
	case SupersededByNewer:
		return "superseded by newer"
	case FencedOut:
		return "fenced out by a newer owner"
	}
	return fmt.Sprintf("Outcome(%d)", int(o))
}

// CheckKey refuses a key that could escape a store's layout: empty, with
// a path separator or NUL, or hidden.
func CheckKey(key string) error {
	if key == "" || strings.ContainsAny(key, "/\\\x00") || strings.HasPrefix(key, ".") {
		return fmt.Errorf("artifact: bad key %q", key)
	}
	return nil
}

// PayloadRank reads the rank of a payload tar from its embedded manifest,
// which must parse and have address addr (so the rank is authenticated by
// the payload's name). Stores use it to prune ([protocol.PayloadPrunable]).
func PayloadRank(r io.Reader, addr string) (protocol.Revision, bool) {
	b, ok := PayloadManifest(r, addr)
	if !ok {
		return 0, false
	}
	return ManifestRank(b)
}

// PayloadManifest reads the manifest embedded in a payload tar (its
// MANIFEST.json entry, the last one): ok only when its bytes have address
// addr, the payload's name, so they are the manifest the payload was
// published under. A reader that can seek skips the data files unread.
func PayloadManifest(r io.Reader, addr string) ([]byte, bool) {
	tr := tar.NewReader(r)
	for {
		hdr, err := tr.Next()
		if err != nil {
			return nil, false
		}
		if hdr.Name != ManifestName || hdr.Typeflag != tar.TypeReg || hdr.Size > MaxManifestSize {
			continue
		}
		b, err := io.ReadAll(tr)
		if err != nil || Address(b) != addr {
			return nil, false
		}
		return b, true
	}
}

// ManifestRank is the rank of manifest bytes b if they parse.
func ManifestRank(b []byte) (protocol.Revision, bool) {
	m, err := ParseManifest(b)
	if err != nil {
		return 0, false
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return 0, false
	}
	return c.Rev, true
}

// PointerState classifies present pointer bytes for
// [protocol.PointerPublishAllowed]: a manifest whose cursor
// decodes has that cursor's revision as rank; anything else is corrupt.
func PointerState(b []byte) protocol.PointerState {
	m, err := ParseManifest(b)
	if err != nil {
		return protocol.PointerCorrupt()
	}
	c, err := m.DecodeCursor()
	if err != nil {
		return protocol.PointerCorrupt()
	}
	return protocol.PointerAtEpoch(c.Rev, protocol.Revision(m.Epoch))
}
