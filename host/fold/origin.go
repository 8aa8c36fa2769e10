package fold

import (
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2"
)

// Origin is a store's record of what it folds: the KV bucket, the key
// scope and the identity of the bucket's stream. A cursor names revisions
// of one stream, read through one scope; the record is what ties a store's
// cursor to them, so a host checks it against its config before it resumes,
// exports or bootstraps (a store given to the wrong fold would otherwise
// resume at another stream's cursor and mix two folds without a word).
//
// The plugin is deliberately not part of the origin: a new plugin build
// folding the same source (hot reload, rebuild, fix-and-resume) is the same
// fold.
type Origin struct {
	Bucket string `json:"bucket"`
	// Scope is the watch's key prefixes, sorted and deduplicated (see
	// [NewOrigin]); empty for the whole bucket.
	Scope []string `json:"scope"`
	// StreamCreated identifies the bucket's stream by its creation time,
	// which NATS sets once and keeps for the stream's life: a bucket
	// deleted and made again under the same name has a new one, and its
	// revisions start again. Zero when unknown (a record upgraded from a
	// store or artifact written before streams were recorded).
	StreamCreated time.Time `json:"stream_created,omitzero"`
	// Partition is the partition of the bucket's keys the store folds,
	// as protocol.Partition.String writes it ("2/4"); "" for the whole
	// bucket. A store of one partition holds no other's keys, so it is
	// another fold than one of the same partition of another count.
	Partition string `json:"partition,omitempty"`
}

// NewOrigin returns the origin of a fold of bucket through scope (in any
// order, duplicates ignored) on the stream created at created (zero when
// unknown).
func NewOrigin(bucket string, scope []string, created time.Time) Origin {
	sc := slices.Compact(slices.Sorted(slices.Values(scope)))
	if len(sc) == 0 {
		sc = nil
	}
	if !created.IsZero() {
		created = created.UTC()
	}
	return Origin{Bucket: bucket, Scope: sc, StreamCreated: created}
}

// Mismatch says how o (a record) differs from want (what a config and the
// live stream say), or "" when they agree. An unknown stream identity on
// either side agrees with any; streams of different buckets are not
// compared.
func (o Origin) Mismatch(want Origin) string {
	var diffs []string
	if o.Bucket != want.Bucket {
		diffs = append(diffs, fmt.Sprintf("bucket %q, not %q", o.Bucket, want.Bucket))
	}
	if !slices.Equal(NewOrigin("", o.Scope, time.Time{}).Scope, NewOrigin("", want.Scope, time.Time{}).Scope) {
		diffs = append(diffs, fmt.Sprintf("scope %s, not %s", scopeString(o.Scope), scopeString(want.Scope)))
	}
	if o.Partition != want.Partition {
		diffs = append(diffs, fmt.Sprintf("partition %s, not %s", partitionString(o.Partition), partitionString(want.Partition)))
	}
	if o.Bucket == want.Bucket && !o.StreamCreated.IsZero() && !want.StreamCreated.IsZero() && !o.StreamCreated.Equal(want.StreamCreated) {
		diffs = append(diffs, fmt.Sprintf("the stream created at %s, not the one created at %s (the bucket was deleted and made again?)",
			o.StreamCreated.UTC().Format(time.RFC3339Nano), want.StreamCreated.UTC().Format(time.RFC3339Nano)))
	}
	return strings.Join(diffs, "; ")
}

// Equal reports whether o and p record the same origin, stream identity
// included (an unknown one equals only an unknown one).
func (o Origin) Equal(p Origin) bool {
	o, p = o.normal(), p.normal()
	return o.Bucket == p.Bucket && slices.Equal(o.Scope, p.Scope) && o.StreamCreated.Equal(p.StreamCreated) && o.Partition == p.Partition
}

// String is a one-line description for logs and errors.
func (o Origin) String() string {
	s := fmt.Sprintf("bucket %q scope %s", o.Bucket, scopeString(o.Scope))
	if o.Partition != "" {
		s += " partition " + o.Partition
	}
	if !o.StreamCreated.IsZero() {
		s += " stream created " + o.StreamCreated.UTC().Format(time.RFC3339Nano)
	}
	return s
}

// normal is o as NewOrigin makes it, its partition kept.
func (o Origin) normal() Origin {
	n := NewOrigin(o.Bucket, o.Scope, o.StreamCreated)
	n.Partition = o.Partition
	return n
}

func partitionString(p string) string {
	if p == "" {
		return "(whole bucket)"
	}
	return p
}

func scopeString(scope []string) string {
	if len(scope) == 0 {
		return "(whole bucket)"
	}
	return fmt.Sprintf("%q", scope)
}

// Origin returns the store's recorded origin; ok is false for a store that
// has none yet (new, or written before origins were recorded).
func (s *Store) Origin() (o Origin, ok bool, err error) {
	if !s.gate.enter() {
		return Origin{}, false, ErrClosed
	}
	defer s.gate.exit()
	return readOrigin(s.db)
}

// Origin returns the origin recorded in the snapshot's state.
func (sn *Snapshot) Origin() (Origin, bool, error) {
	if !sn.enter() {
		return Origin{}, false, ErrClosed
	}
	defer sn.s.gate.exit()
	return readOrigin(sn.snap)
}

// SetOrigin records o (durably, before it returns). It does not touch the
// cursor or the data: the caller decides whether the store's contents are
// a fold of o.
func (s *Store) SetOrigin(o Origin) error {
	if !s.gate.enter() {
		return ErrClosed
	}
	defer s.gate.exit()
	o = o.normal()
	b, err := json.Marshal(o)
	if err != nil {
		return fmt.Errorf("fold: encode origin: %w", err)
	}
	batch := s.db.NewBatch()
	defer batch.Close()
	if err := batch.Set(metaOriginKey, b, nil); err != nil {
		return fmt.Errorf("fold: record origin in %s: %w", s.dir, err)
	}
	if err := s.apply(batch, pebble.Sync); err != nil {
		return fmt.Errorf("fold: record origin in %s: %w", s.dir, err)
	}
	return nil
}

func readOrigin(r pebble.Reader) (Origin, bool, error) {
	b, ok, err := getCopy(r, metaOriginKey)
	if err != nil || !ok {
		return Origin{}, false, err
	}
	var o Origin
	if err := json.Unmarshal(b, &o); err != nil {
		return Origin{}, false, fmt.Errorf("%w: origin record %q: %v", ErrCorrupt, b, err)
	}
	return o.normal(), true, nil
}
