// Package httpapi is foldhost's HTTP surface: health and readiness, the
// Prometheus metrics, fold status, and reads of the raw fold and the plugin
// views. It serves whatever implements [Fold]; it does not run folds.
//
// Every read answers from one fold Snapshot, so the cursor in a response is
// exactly the position of the data in it. Byte strings follow one rule (see
// [Bytes]): a field F is present as text when the bytes are valid UTF-8, and
// F_b64 (standard base64) is always present.
package httpapi

import (
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
)

// Fold is one fold as the HTTP surface sees it. Implementations must be safe
// for concurrent use.
type Fold interface {
	// Name is the fold's name (unique, URL-safe).
	Name() string
	// Status is the fold's current state, for /v1/folds and the metrics.
	Status() Status
	// Snapshot returns a consistent read view of the fold's store; the
	// caller closes it.
	Snapshot() (*fold.Snapshot, error)
}

// State is where a fold is in its life.
type State string

const (
	// StateStarting: the store is open, the watch has not started yet.
	StateStarting State = "starting"
	// StateHydrating: watching, not yet caught up with the stream head
	// seen at start (a state-sync's initial values or a resume's backlog).
	StateHydrating State = "hydrating"
	// StateFollowing: caught up; applying live updates.
	StateFollowing State = "following"
	// StateFailed: the fold stopped on an error (LastError). Its store is
	// still served, frozen at its cursor.
	StateFailed State = "failed"
	// StateStopped: shut down cleanly.
	StateStopped State = "stopped"
)

// Status is the JSON document of GET /v1/folds/{name}.
type Status struct {
	Name   string   `json:"name"`
	Bucket string   `json:"bucket"`
	Scope  []string `json:"scope"`
	State  State    `json:"state"`
	// Ready is true once the fold caught up with the stream head it saw at
	// start, and while NATS is reachable or was lost for less than the
	// host's disconnect grace (a short reconnect stays ready). Reason says
	// why not.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Cursor is the applied position (every revision <= Cursor is in the
	// fold). EvictionSeen is the cursor's eviction memo.
	Cursor       uint64 `json:"cursor"`
	EvictionSeen bool   `json:"eviction_seen"`
	// StreamLastSeq is the bucket stream's last revision as last polled;
	// HeadAtStart the one seen when the fold started. Lag is
	// StreamLastSeq - Cursor (0 when the cursor is ahead of the poll). For a
	// fold scoped to key prefixes, revisions outside the scope count in the
	// lag too: it is an upper bound.
	StreamLastSeq uint64 `json:"stream_last_seq"`
	HeadAtStart   uint64 `json:"head_at_start"`
	Lag           uint64 `json:"lag"`
	// NATS is the host's connection, which every fold shares; zero when
	// the fold has not connected (a stopped fold read offline).
	NATS natskv.ConnStatus `json:"nats"`
	// Plugin is the plugin the fold runs now (it changes on reload); zero
	// for a raw-only fold.
	Plugin fold.PluginIdentity `json:"plugin"`
	// Repair is the configured repair mode (protocol.RepairMode text).
	Repair   string   `json:"repair"`
	Counters Counters `json:"counters"`
	// LastError is the error that stopped the fold, or the last transient
	// one it recovered from; "" when none.
	LastError string `json:"last_error"`
	DataDir   string `json:"data_dir"`
	// Export is the fold's artifact export: its key and the last round
	// this process ran; nil when exporting is not configured.
	Export *ExportStatus `json:"export,omitempty"`
}

// ExportStatus describes a fold's artifact export.
type ExportStatus struct {
	Key   string `json:"key"`
	Store string `json:"store"`
	// Interval between rounds; "0s": on demand only.
	Interval string `json:"interval"`
	// The last round this process ran (absent before the first):
	// published, superseded, skipped or failed.
	LastAt      *time.Time `json:"last_at,omitempty"`
	LastOutcome string     `json:"last_outcome,omitempty"`
	LastCursor  uint64     `json:"last_cursor,omitempty"`
	LastError   string     `json:"last_error,omitempty"`
	// LastPublishedAt is when a round of this process last published.
	LastPublishedAt *time.Time `json:"last_published_at,omitempty"`
	// Rounds counts this process' rounds by outcome.
	Rounds ExportRounds `json:"rounds"`
}

// ExportRounds counts export rounds by outcome.
type ExportRounds struct {
	Published  uint64 `json:"published"`
	Superseded uint64 `json:"superseded"`
	Skipped    uint64 `json:"skipped"`
	Failed     uint64 `json:"failed"`
}

// Counters count since this process started the fold.
type Counters struct {
	// DeliveredSinceStart is the number of updates NATS delivered to the
	// fold and the fold committed (rejected ones included). After a restart
	// it is the delta the resume received, not the bucket's size.
	DeliveredSinceStart uint64 `json:"delivered_since_start"`
	// Applied is DeliveredSinceStart minus Rejected.
	Applied uint64 `json:"applied"`
	// Rejected counts updates the plugin rejected (malformed or
	// irrelevant; still covered by the cursor).
	Rejected uint64 `json:"rejected"`
	// Batches is the number of committed batches.
	Batches uint64 `json:"batches"`
	// PluginErrors counts failed plugin calls (each stops the fold).
	PluginErrors uint64 `json:"plugin_errors"`
	// CommitFailures counts failed store commits (each retried).
	CommitFailures uint64 `json:"commit_failures"`
}
