package fold

import (
	"context"
	"errors"
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// Op is what an update does to its key. The zero Op is invalid, so a
// forgotten field is refused rather than read as a put.
type Op uint8

const (
	// OpPut sets the key's value.
	OpPut Op = iota + 1
	// OpDelete removes the key: a delete marker, a server "Remove" marker,
	// or a repair's synthetic delete.
	OpDelete
	// OpPurge removes the key and its history: a purge, or a server limit
	// marker such as MaxAge expiry on a bucket with limit markers. The fold
	// treats it as a delete; plugins see the difference.
	OpPurge
)

func (o Op) String() string {
	switch o {
	case OpPut:
		return "put"
	case OpDelete:
		return "delete"
	case OpPurge:
		return "purge"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

// Valid reports whether o is one of the three ops.
func (o Op) Valid() bool { return o >= OpPut && o <= OpPurge }

// Update is one change of a bucket key: what a Source delivers, what a
// Plugin applies and what Commit writes to the raw fold. It is the only
// update type of the host; the NATS side converts its entries into it once
// (package natskv), and the WASM side encodes it for the guest once
// (package wasm).
type Update struct {
	Key string // non-empty
	// Value is the new value of an OpPut (owned by the receiver); ignored
	// otherwise.
	Value []byte
	// Rev is the revision of the message (its stream sequence); a put
	// requires one. A repair's synthetic delete carries protocol.NoRevision
	// and never moves the cursor.
	Rev protocol.Revision
	Op  Op
	// Time is the server's timestamp of the message, Unix nanoseconds; 0
	// when unknown.
	Time int64
}

// Event is what a Source delivers: an Update, the marker (Synced) that every
// value present when the watch started has been delivered, or a settle mark.
type Event struct {
	Update
	Synced bool
	// Unsettled marks an Update handed on before its source confirmed that
	// retention evicted nothing of the scope below it: a prefix watch's
	// consumer is clamped silently when it lags behind retention, and the
	// watch confirms its deliveries after the fact, with a settle mark
	// (protocol.Cursor.Unsettled). Every other update settles the fold up
	// to its revision as it is accepted.
	Unsettled bool
	// Settle, when not protocol.NoRevision, is a settle mark: every update
	// of the scope at or below it was delivered before this event. Alone
	// (no Update, not Synced) the event is only that; a Synced marker may
	// carry one. SettleTime is the server time of a message at or below
	// Settle (Unix nanoseconds; 0 when unknown).
	Settle     protocol.Revision
	SettleTime int64
	// Behind is how many messages of the watch the server still held
	// after this update when it sent it (the consumer's pending count; 0
	// when unknown or at the head): the loop's measure of how far the
	// fold is from the head.
	Behind uint64
}

// SettleOnly reports whether ev is a bare settle mark.
func (ev *Event) SettleOnly() bool {
	return !ev.Synced && ev.Key == "" && ev.Settle != protocol.NoRevision
}

// Source is one watch the loop consumes: a *natskv.Watcher in production.
type Source interface {
	// Events delivers updates in revision order and is closed when the
	// watch ends.
	Events() <-chan Event
	// Stop ends the watch; safe to call more than once, and concurrently
	// with a reader of Events.
	Stop()
	// Err says why the watch ended (nil after Stop); it waits until it
	// has.
	Err() error
}

// Feed starts watches of one bucket and scope: a NATS KV bucket in
// production (natskv.Bucket.Feed).
type Feed interface {
	// Watch starts a watch from the cursor: a resume after from.Rev, or a
	// state-sync (every current value, then Synced, then live updates)
	// when from has no revision. A cursor the bucket can no longer resume
	// from is refused with an error matching ErrCursorExpired or
	// ErrCursorBeyondHead.
	Watch(ctx context.Context, from protocol.Cursor) (Source, error)
}

// Watch refusals: a Feed's Watch, or a Source's Err mid-watch, matches one
// of these (errors.Is) when the fold's cursor cannot be resumed from.
var (
	// ErrCursorExpired: retention evicted revisions after the cursor. The
	// fold needs the cursor-expiry repair.
	ErrCursorExpired = errors.New("fold: cursor expired: retention evicted revisions after it")
	// ErrCursorBeyondHead: the cursor is past the stream's last revision
	// (or at the maximum revision). The bucket was most likely deleted and
	// recreated; the fold does not belong to this stream's history.
	ErrCursorBeyondHead = errors.New("fold: cursor beyond the stream head")
	// ErrStreamReplaced: the bucket's stream is not the one the fold's
	// cursor belongs to (the bucket was deleted and made again while the
	// fold ran); its revisions number another history.
	ErrStreamReplaced = errors.New("fold: the bucket's stream was replaced")
	// ErrRepairRefused: the cursor expired and the repair the fold's mode
	// plans cannot run (a key listing that is not the truth, no artifact
	// to restore from). The fold stops untouched.
	ErrRepairRefused = errors.New("fold: repair refused")
)
