package fold

import (
	"errors"
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

var (
	// ErrClosed is returned by every operation on a closed Store or on a
	// Snapshot whose Store was closed.
	ErrClosed = errors.New("fold: store closed")

	// ErrInvalidCommit is wrapped by every Commit validation failure (empty
	// key, unknown op, put without a revision). Nothing was written.
	ErrInvalidCommit = errors.New("fold: invalid commit")

	// ErrCursorRegression is wrapped by a [*CursorRegressionError]: a commit
	// tried to move the cursor backward. Nothing was written.
	ErrCursorRegression = errors.New("fold: cursor regression")

	// ErrFormatVersion is wrapped by a [*FormatError]: the store was written
	// in a format this build does not know, or is not a fold store at all.
	ErrFormatVersion = errors.New("fold: unsupported store format")

	// ErrCorrupt is wrapped when a stored record or cursor does not decode.
	// It is not retryable: the store needs a restore from an artifact.
	ErrCorrupt = errors.New("fold: corrupt store")
)

// CursorRegressionError reports a refused commit whose cursor would have
// moved the stored cursor backward: a lower revision, or the eviction memo
// cleared. It signals a broken invariant in the caller (cursor-after-apply
// only ever raises the cursor), not bad input; the store is untouched, but
// the caller's view of its position is wrong and it should stop, not retry.
type CursorRegressionError struct {
	Stored, Proposed protocol.Cursor
}

func (e *CursorRegressionError) Error() string {
	return fmt.Sprintf("%v: stored %v, commit proposes %v", ErrCursorRegression, e.Stored, e.Proposed)
}

// Unwrap makes errors.Is(err, ErrCursorRegression) hold.
func (e *CursorRegressionError) Unwrap() error { return ErrCursorRegression }

// FormatError reports a store [Open] refused because of its format marker.
type FormatError struct {
	Dir string
	// Found is the stored format version, 0 when the marker is missing or
	// malformed (Detail says which).
	Found uint32
	// Supported is the only version this build reads: [FormatVersion].
	Supported uint32
	Detail    string
}

func (e *FormatError) Error() string {
	if e.Detail != "" {
		return fmt.Sprintf("%v: %s: %s", ErrFormatVersion, e.Dir, e.Detail)
	}
	return fmt.Sprintf("%v: %s: version %d, this build reads version %d",
		ErrFormatVersion, e.Dir, e.Found, e.Supported)
}

// Unwrap makes errors.Is(err, ErrFormatVersion) hold.
func (e *FormatError) Unwrap() error { return ErrFormatVersion }
