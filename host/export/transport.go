package export

import (
	"errors"
	"fmt"
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
	Upload(key, dir string) (Outcome, error)
	// UploadPayload stores the tar of the artifact in dir as key's payload
	// named by the manifest's address and returns the manifest bytes. It
	// does not touch the pointer.
	UploadPayload(key, dir string) ([]byte, error)
	// SwapPointer publishes manifest as key's pointer if the guard admits it.
	// The payload it names must already be stored.
	SwapPointer(key string, manifest []byte) (Outcome, error)
	// Pointer returns key's pointer bytes, or an error wrapping
	// [ErrNoPointer]. The bytes may be corrupt.
	Pointer(key string) ([]byte, error)
	// Download imports the payload named by key's pointer into dest.
	Download(key, dest string) (Manifest, error)
	// Prune deletes key's payloads that [protocol.PayloadPrunable] admits
	// (aged out: last written before now-grace) and returns their names
	// ("<address>.tar").
	Prune(key string, grace time.Duration, now time.Time) ([]string, error)
}

var (
	_ Transport = (*LocalDir)(nil)
	_ Transport = (*S3)(nil)
)

// ErrSwapContended: a pointer swap lost the compare-and-swap more times than
// the retry budget allows. Retry the round later.
var ErrSwapContended = errors.New("export: pointer swap contended")

// upload is every transport's Upload: the payload first, then the pointer
// swap (a crash in between leaves the old pointer, and an orphan payload
// that prune collects).
func upload(t Transport, key, dir string) (Outcome, error) {
	manifest, err := t.UploadPayload(key, dir)
	if err != nil {
		return 0, err
	}
	return t.SwapPointer(key, manifest)
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
