package protocol

import (
	"encoding/binary"
	"fmt"
	"math"
	"strconv"
)

// Revision is a position in a KV bucket's stream: the NATS stream sequence of
// one message. Real revisions start at 1, so the zero Revision never names a
// message: in an update it means "unknown" (a synthetic repair delete), in a
// cursor it means "nothing applied yet".
//
// Binary encoding: 8 bytes, big-endian (so encoded revisions sort like the
// numbers). Text encoding: decimal.
type Revision uint64

// NoRevision is the zero Revision: unknown, or no position.
const NoRevision Revision = 0

// MaxRevision is the largest representable revision. A resume from it is
// refused: the next revision would wrap to 0.
const MaxRevision Revision = math.MaxUint64

// Known reports whether r names a real stream position.
func (r Revision) Known() bool { return r != NoRevision }

// AppendBinary appends the 8-byte big-endian encoding of r.
func (r Revision) AppendBinary(b []byte) ([]byte, error) {
	return binary.BigEndian.AppendUint64(b, uint64(r)), nil
}

// MarshalBinary returns the 8-byte big-endian encoding of r.
func (r Revision) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil) }

// UnmarshalBinary decodes exactly 8 big-endian bytes.
func (r *Revision) UnmarshalBinary(b []byte) error {
	if len(b) != 8 {
		return fmt.Errorf("protocol: revision: want 8 bytes, got %d", len(b))
	}
	*r = Revision(binary.BigEndian.Uint64(b))
	return nil
}

// MarshalText encodes r in decimal.
func (r Revision) MarshalText() ([]byte, error) {
	return strconv.AppendUint(nil, uint64(r), 10), nil
}

// UnmarshalText decodes a decimal revision.
func (r *Revision) UnmarshalText(b []byte) error {
	v, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		return fmt.Errorf("protocol: revision: %w", err)
	}
	*r = Revision(v)
	return nil
}

func (r Revision) String() string { return strconv.FormatUint(uint64(r), 10) }

// Window is the range of revisions a stream still retains, as NATS reports it
// (stream info FirstSeq/LastSeq). An empty stream has First == Last+1 (or both
// 0 on a stream that never held a message).
type Window struct {
	First Revision // first retained revision
	Last  Revision // last revision ever written (the stream head)
}

// ResumeWindowOK reports whether a resume from cursor (which reads cursor+1
// onward) is gap-free against a stream whose first retained revision is
// first: sound iff first <= cursor+1. NATS does not refuse a start below its
// first retained revision; it silently clamps to it, skipping whatever was
// evicted (delete markers included). This check is ours to make.
//
// It also serves the live floor guard: with cursor = the watch's frontier, a
// false result means retention overran the watch.
func ResumeWindowOK(cursor, first Revision) bool {
	if cursor == MaxRevision {
		return first <= cursor // saturating cursor+1
	}
	return first <= cursor+1
}

// ResumeVerdict is the outcome of [CheckResume].
type ResumeVerdict uint8

const (
	// ResumeOK: the resume from the cursor is gap-free.
	ResumeOK ResumeVerdict = iota
	// ResumeExpired: retention evicted revisions after the cursor (NATS would
	// silently clamp). The fold needs the cursor-expiry repair.
	ResumeExpired
	// ResumeBeyondHead: the cursor is past the stream's last revision. NATS
	// would silently skip every revision up to the cursor once they are
	// written, which is what happens after a bucket is deleted and recreated.
	// The cursor belongs to another stream's history; the fold cannot resume.
	ResumeBeyondHead
	// ResumeAtMax: the cursor is MaxRevision; cursor+1 would wrap to 0.
	ResumeAtMax
)

var resumeVerdictNames = [...]string{"ok", "expired", "beyond-head", "at-max"}

func (v ResumeVerdict) String() string {
	if int(v) < len(resumeVerdictNames) {
		return resumeVerdictNames[v]
	}
	return "ResumeVerdict(" + strconv.Itoa(int(v)) + ")"
}

// CheckResume decides whether a fold whose cursor is at position cursor may
// resume (read cursor+1 onward) from a stream retaining w. It combines
// [ResumeWindowOK] with the guards the original design lacked: a cursor beyond the stream
// head, and the cursor at MaxRevision.
//
// cursor must be a known position; a fold without one starts with a
// state-sync, not a resume.
func CheckResume(cursor Revision, w Window) ResumeVerdict {
	switch {
	case cursor == MaxRevision:
		return ResumeAtMax
	case cursor > w.Last:
		return ResumeBeyondHead
	case !ResumeWindowOK(cursor, w.First):
		return ResumeExpired
	}
	return ResumeOK
}
