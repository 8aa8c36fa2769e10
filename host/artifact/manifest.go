package artifact

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/zeebo/blake3"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

const (
	// SchemaVersion is the manifest schema this build writes. It reads
	// schema 1 too: manifests written before the stream identity was
	// recorded (they have no stream_created).
	SchemaVersion = 2

	// Backend is the backend identity of artifacts exported from a
	// [fold.Store].
	Backend = "pebble/v2"

	// PebbleFormat is the pebble format major version of the checkpoints
	// this build exports and the only one it imports. It must equal
	// host/fold's pinned format; [Export] checks the staged copy's actual
	// format against it, so a drift fails the export instead of shipping a
	// mislabelled artifact.
	PebbleFormat = pebble.FormatValueSeparation

	// ManifestName is the manifest's name in an artifact directory and tar.
	ManifestName = "MANIFEST.json"

	// DataDir is the directory holding the store's files in an artifact
	// directory; every manifest file path starts with DataDir + "/".
	DataDir = "data"

	// MaxManifestSize bounds a manifest read from anywhere untrusted: a
	// payload tar, a pointer.
	MaxManifestSize = 16 << 20
)

// Manifest describes one artifact. Its JSON encoding ([Manifest.Encode]) is
// canonical: fields in declaration order, files sorted by path, no
// insignificant whitespace, so equal manifests have equal bytes.
type Manifest struct {
	// Schema is the manifest schema version ([SchemaVersion]).
	Schema int `json:"schema"`
	// Backend is the backend identity ([Backend]).
	Backend string `json:"backend"`
	// StoreFormat is the fold store layout version ([fold.FormatVersion]).
	StoreFormat uint32 `json:"store_format"`
	// PebbleFormat is pebble's on-disk format major version ([PebbleFormat]).
	PebbleFormat uint64 `json:"pebble_format"`
	// Cursor is the hex of the binary encoding of the cursor the data is
	// exactly consistent with ([protocol.Cursor.MarshalBinary]), memo
	// included. Use [Manifest.DecodeCursor].
	Cursor string `json:"cursor"`
	// Bucket is the KV bucket the fold folds ("" when the exporter did not
	// say).
	Bucket string `json:"bucket"`
	// Scope is the exporting watch's key scope: its key prefixes, sorted,
	// empty for the whole bucket.
	Scope []string `json:"scope"`
	// StreamCreated identifies the bucket's stream the cursor's revisions
	// belong to ([fold.Origin]); zero (omitted) when the store did not
	// know it, and always in schema 1.
	StreamCreated time.Time `json:"stream_created,omitzero"`
	// Partition is the partition of the bucket's keys the fold folds
	// ([fold.Origin]), "" for the whole bucket: an artifact restores only
	// a fold of the same partition.
	Partition string `json:"partition,omitempty"`
	// PluginIdentity is the hex of the store's plugin identity bytes, or
	// nil when the store has none.
	PluginIdentity *string `json:"plugin_identity"`
	// Files lists every data file, sorted by Path.
	Files []File `json:"files"`
	// Epoch is, in a pointer, the fleet epoch of the owner that published
	// it (0, omitted: outside a fleet); a newer owner's refuses an older
	// one's swap ([protocol.PointerSwapAllowed]). It is the pointer's, not
	// the artifact's: a payload's own manifest has none, and it takes no
	// part in the artifact's [Address].
	Epoch uint64 `json:"epoch,omitempty"`
}

// File is one data file of an artifact.
type File struct {
	// Path is relative to the artifact directory, slash-separated, and
	// starts with "data/".
	Path string `json:"path"`
	// Size in bytes.
	Size int64 `json:"size"`
	// BLAKE3 is the hex of the file's 32-byte BLAKE3 digest.
	BLAKE3 string `json:"blake3"`
}

// Encode returns the canonical encoding of m.
func (m Manifest) Encode() ([]byte, error) {
	if m.Scope == nil {
		m.Scope = []string{}
	}
	if m.Files == nil {
		m.Files = []File{}
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("artifact: encode manifest: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// Origin is the source the artifact's store folds, as the manifest says.
func (m Manifest) Origin() fold.Origin {
	o := fold.NewOrigin(m.Bucket, m.Scope, m.StreamCreated)
	o.Partition = m.Partition
	return o
}

// CandidateCursor checks the key and the manifest a store is asked to
// publish as key's pointer ([Store.SwapPointer]) and returns its cursor.
func CandidateCursor(key string, manifest []byte) (protocol.Cursor, error) {
	c, _, err := Candidate(key, manifest)
	return c, err
}

// Candidate is CandidateCursor with the epoch the pointer would be
// published under (Manifest.Epoch).
func Candidate(key string, manifest []byte) (protocol.Cursor, protocol.Revision, error) {
	if err := CheckKey(key); err != nil {
		return protocol.Cursor{}, 0, err
	}
	m, err := ParseManifest(manifest)
	if err == nil {
		var c protocol.Cursor
		if c, err = m.DecodeCursor(); err == nil {
			return c, protocol.Revision(m.Epoch), nil
		}
	}
	return protocol.Cursor{}, 0, fmt.Errorf("artifact: swap pointer: %w", err)
}

// Judge is a store's decision on swapping the pointer at state to an
// artifact of rank under epoch: 0 (swap it), SupersededByNewer, or
// FencedOut (protocol.PointerSwapAllowed).
func Judge(state protocol.PointerState, rank, epoch protocol.Revision) Outcome {
	switch {
	case protocol.PointerSwapAllowed(state, rank, epoch):
		return 0
	case protocol.PointerPublishAllowed(state, rank):
		return FencedOut
	}
	return SupersededByNewer
}

// DecodeCursor decodes m.Cursor.
func (m Manifest) DecodeCursor() (protocol.Cursor, error) {
	raw, err := hex.DecodeString(m.Cursor)
	if err != nil {
		return protocol.Cursor{}, invalid("manifest cursor %q: %v", m.Cursor, err)
	}
	var c protocol.Cursor
	if err := c.UnmarshalBinary(raw); err != nil {
		return protocol.Cursor{}, invalid("manifest cursor %q: %v", m.Cursor, err)
	}
	return c, nil
}

// Address is the content address of manifest bytes: the hex of the first
// 8 bytes of their BLAKE3 digest. It names the payload.
func Address(manifest []byte) string {
	sum := blake3.Sum256(WithoutEpoch(manifest))
	return hex.EncodeToString(sum[:8])
}

// WithoutEpoch is manifest as its artifact's payload holds it: a
// pointer's epoch removed (canonically re-encoded), other bytes as they
// are.
func WithoutEpoch(manifest []byte) []byte {
	if !bytes.Contains(manifest, []byte(`"epoch":`)) {
		return manifest
	}
	m, err := ParseManifest(manifest)
	if err != nil || m.Epoch == 0 {
		return manifest
	}
	m.Epoch = 0
	b, err := m.Encode()
	if err != nil {
		return manifest
	}
	return b
}

// WithEpoch is manifest as a pointer published under a fleet's epoch
// holds it (epoch 0: as it is).
func WithEpoch(manifest []byte, epoch protocol.Revision) ([]byte, error) {
	m, err := ParseManifest(manifest)
	if err != nil {
		return nil, err
	}
	if uint64(epoch) == m.Epoch {
		return manifest, nil
	}
	m.Epoch = uint64(epoch)
	return m.Encode()
}

// ParseManifest decodes and validates manifest bytes (unknown fields are
// refused) and checks that this build can import the artifact: schema,
// backend and both format versions. Every failure wraps
// [ErrArtifactInvalid].
func ParseManifest(b []byte) (Manifest, error) {
	var m Manifest
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&m); err != nil {
		return Manifest{}, invalid("manifest: %v", err)
	}
	if dec.More() {
		return Manifest{}, invalid("manifest: trailing data")
	}
	if err := m.validate(); err != nil {
		return Manifest{}, err
	}
	return m, nil
}

func (m Manifest) validate() error {
	switch {
	case m.Schema != SchemaVersion && m.Schema != 1:
		return invalid("manifest schema %d, this build reads 1 and %d", m.Schema, SchemaVersion)
	case m.Schema == 1 && !m.StreamCreated.IsZero():
		return invalid("manifest schema 1 has no stream_created")
	case m.Backend != Backend:
		return invalid("backend %q, this build imports %q", m.Backend, Backend)
	case m.StoreFormat != fold.FormatVersion:
		return invalid("store format %d, this build imports %d", m.StoreFormat, fold.FormatVersion)
	case m.PebbleFormat != uint64(PebbleFormat):
		return invalid("pebble format %d, this build imports %d", m.PebbleFormat, uint64(PebbleFormat))
	}
	if _, err := m.DecodeCursor(); err != nil {
		return err
	}
	if m.PluginIdentity != nil {
		if _, err := hex.DecodeString(*m.PluginIdentity); err != nil {
			return invalid("plugin identity: %v", err)
		}
	}
	prev := ""
	for i, f := range m.Files {
		if err := checkDataPath(f.Path); err != nil {
			return err
		}
		if i > 0 && f.Path <= prev {
			return invalid("manifest files not sorted or duplicated at %q", f.Path)
		}
		prev = f.Path
		if f.Size < 0 {
			return invalid("file %q: negative size", f.Path)
		}
		if d, err := hex.DecodeString(f.BLAKE3); err != nil || len(d) != 32 {
			return invalid("file %q: bad blake3 %q", f.Path, f.BLAKE3)
		}
	}
	return nil
}

// checkDataPath accepts only clean, relative, slash-separated paths under
// data/ with no "..", backslash or NUL.
func checkDataPath(p string) error {
	switch {
	case p == "" || strings.HasPrefix(p, "/"):
		return invalid("path %q: absolute or empty", p)
	case strings.ContainsAny(p, "\\\x00"):
		return invalid("path %q: bad character", p)
	case path.Clean(p) != p:
		return invalid("path %q: not clean", p)
	}
	for _, el := range strings.Split(p, "/") {
		if el == ".." || el == "." {
			return invalid("path %q: contains %q", p, el)
		}
	}
	if !strings.HasPrefix(p, DataDir+"/") {
		return invalid("path %q: not under %s/", p, DataDir)
	}
	return nil
}
