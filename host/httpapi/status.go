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
	"github.com/foldhost/foldhost/host/repair"
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
	// StateWaiting: the fold cannot start yet, and the rest of the host
	// runs without it: its plugin module (a nats-object:// reference) has
	// not been pushed, or the version there was refused (Reason says
	// which). It starts once a module loads; not ready meanwhile, its
	// store served as it was.
	StateWaiting State = "waiting"
	// StateHydrating: watching, not yet caught up with the stream head
	// seen at start (a state-sync's initial values or a resume's backlog).
	StateHydrating State = "hydrating"
	// StateFollowing: caught up; applying live updates.
	StateFollowing State = "following"
	// StateRepairing: the cursor expired and a repair runs (Repairs.Running
	// has its progress). Reads answer from the fold as it was when the
	// repair began, cursor included: never a half-repaired state.
	StateRepairing State = "repairing"
	// StateRebuilding: the views are rebuilt through a plugin whose view
	// schema differs from the one that made them (or a plugin was added
	// to a raw-only fold) before the fold follows again; reads answer from
	// the old views, at the fold's cursor. (A rebuild begun by a reload
	// while following runs beside the live fold, whose state stays
	// following: Rebuild.Running shows it.)
	StateRebuilding State = "rebuilding"
	// StatePaused: an operator paused the fold (its pending batch was
	// committed); it is served at its cursor, not ready, until resumed.
	StatePaused State = "paused"
	// StateDraining: the host is shutting down; the fold flushes its
	// pending batch.
	StateDraining State = "draining"
	// StateFailed: the fold's watch stopped on an error (LastError). Its
	// store is still served, frozen at its cursor, its head still polled;
	// it is retried from its cursor on an accepted plugin reload, an
	// explicit reload (SIGHUP) or a resume.
	StateFailed State = "failed"
	// StateStopped: shut down cleanly.
	StateStopped State = "stopped"
	// StateElsewhere: the host is a node of a fleet that placed the fold
	// on other nodes (its owner, its standbys): this node does not fold
	// it; its store, if any, is frozen at its cursor. Not counted by
	// readiness.
	StateElsewhere State = "elsewhere"
)

// Status is the JSON document of GET /v1/folds/{name}.
type Status struct {
	Name   string   `json:"name"`
	Bucket string   `json:"bucket"`
	Scope  []string `json:"scope"`
	State  State    `json:"state"`
	// StateSince is when the fold entered State.
	StateSince time.Time `json:"state_since"`
	// Ready is true once the fold caught up with the stream head it saw at
	// start, and while NATS is reachable or was lost for less than the
	// host's disconnect grace (a short reconnect stays ready). Reason says
	// why not.
	Ready  bool   `json:"ready"`
	Reason string `json:"reason,omitempty"`
	// Cursor is the applied position (every revision <= Cursor is in the
	// fold). EvictionSeen is the cursor's eviction memo. Settled is the
	// revision up to which the fold is known to have been delivered every
	// update of its scope: the cursor, except on a prefix-scoped fold for
	// up to its settle probe's interval after a delivery (its filtered
	// consumer could have been clamped past updates retention evicted; the
	// probe finds out, and the fold then repairs).
	Cursor       uint64 `json:"cursor"`
	Settled      uint64 `json:"settled"`
	EvictionSeen bool   `json:"eviction_seen"`
	// StreamLastSeq is the bucket stream's last revision as last polled;
	// HeadAtStart the one seen when the fold started. Lag is
	// StreamLastSeq - Cursor (0 when the cursor is ahead of the poll). A
	// fold scoped to key prefixes moves its cursor over revisions outside
	// its scope with its settle probe, so their lag lasts about one probe
	// interval.
	StreamLastSeq uint64 `json:"stream_last_seq"`
	HeadAtStart   uint64 `json:"head_at_start"`
	Lag           uint64 `json:"lag"`
	// LagSeconds is how long the fold has been behind: 0 while Lag is 0,
	// else the time since it was last seen at the stream head (a commit
	// that reached the head as last polled, or a poll that found the
	// cursor there), so exact to about one head poll interval; absent
	// when it has not been seen at the head since the start (a resume's
	// backlog).
	LagSeconds *float64 `json:"lag_seconds,omitempty"`
	// NATS is the host's connection, which every fold shares; zero when
	// the fold has not connected (a stopped fold read offline).
	NATS natskv.ConnStatus `json:"nats"`
	// Plugin is the plugin the fold runs now (it changes on reload) and
	// its reloads; zero for a raw-only fold.
	Plugin PluginStatus `json:"plugin"`
	// Repair is the configured repair mode (protocol.RepairMode text).
	Repair string `json:"repair"`
	// Repairs describes this process' cursor-expiry repairs of the fold.
	Repairs RepairStatus `json:"repairs"`
	// Rebuild describes this process' view rebuilds of the fold; absent
	// before the first.
	Rebuild *RebuildStatus `json:"rebuild,omitempty"`
	// DeadLetters describes the updates the plugin failed on and the fold
	// skipped (on_plugin_error = "skip"); absent for a fold that stops on
	// plugin errors and holds none.
	DeadLetters *DeadLetterStatus `json:"dead_letters,omitempty"`
	Counters    Counters          `json:"counters"`
	// LastCommitAt is when this process last committed a batch of updates
	// (absent before the first). A cursor moved alone (a prefix-scoped
	// fold's settle probe) is not a batch: under idle traffic it stays old,
	// so judge it beside Lag.
	LastCommitAt *time.Time `json:"last_commit_at,omitempty"`
	// LastError is the error that stopped the fold, or the last transient
	// one it recovered from; "" when none.
	LastError string `json:"last_error"`
	DataDir   string `json:"data_dir"`
	// Export is the fold's artifact export: its key and the last round
	// this process ran; nil when exporting is not configured.
	Export *ExportStatus `json:"export,omitempty"`
	// Effects counts the plugin's effects (docs/effects.md); nil
	// before the first.
	Effects *EffectsStatus `json:"effects,omitempty"`
	// Fleet is the fold's place in the host's fleet, nil without one.
	Fleet *FleetRole `json:"fleet,omitempty"`
}

// FleetRole is a fold's role on this node of a fleet: owner (it folds the
// fold, publishes its effects and exports it, under Epoch), standby (it
// folds a warm, read-only copy) or none (other nodes fold it).
type FleetRole struct {
	Role  string `json:"role"`
	Epoch uint64 `json:"epoch,omitempty"`
}

// EffectsStatus is what became of a fold's effects since the start.
type EffectsStatus struct {
	// Stream is the effects stream; "" when effects are dropped.
	Stream string `json:"stream,omitempty"`
	// PublishedByThisNode: effects this node published, its batches
	// acknowledged by the stream (and deleted from the outbox).
	PublishedByThisNode uint64 `json:"published_by_this_node"`
	// Dropped: emitted with no effects stream configured.
	Dropped uint64 `json:"dropped"`
	// Fence is the fold's fence subject in Stream; FoundInStream counts the
	// effects deleted from the outbox unpublished here because the fence
	// showed them in the stream already (another replica published them,
	// or this node did and its acknowledgement was lost); FenceMoves the
	// batches the stream refused because the fence had moved since it was
	// read. Published by this node plus found in the stream is every
	// effect that left the outbox for the stream.
	Fence string `json:"fence,omitempty"`
	// Outbox is how many effects wait to be published; OutboxWaitSeconds
	// how long the first of them has waited since this process saw it (0
	// with an empty outbox): it grows while the publisher cannot publish.
	Outbox            int64   `json:"outbox"`
	OutboxWaitSeconds float64 `json:"outbox_wait_seconds"`
	FoundInStream     uint64  `json:"found_in_stream"`
	FenceMoves        uint64  `json:"fence_moves"`
	// DeadLettered counts the effects the stream refused for good (too
	// large for it or the server), moved from the outbox to the fold's
	// dead letters since start.
	DeadLettered uint64 `json:"dead_lettered"`
	// MaxWaitSeconds is effects_max_wait (0: the outbox's wait does not
	// make the fold unready).
	MaxWaitSeconds float64 `json:"max_wait_seconds,omitempty"`
	// LastError is the last failed publish, while the publisher retries.
	LastError string `json:"last_error,omitempty"`
	// Held says why the publisher waits, when it does: the fold joined
	// another publisher's history midway, and publishes once the fence
	// passes the point it joined at (or an operator releases it).
	Held string `json:"held,omitempty"`
	// RefusedStale counts this node's batches the stream refused because a
	// newer owner of the fold's unit (in a fleet) had marked its claim: this
	// node had been paused, or cut off, past its lease.
	RefusedStale uint64 `json:"refused_stale_owner,omitempty"`
	// DroppedJoining: emitted while the fold caught up with a history it
	// joined midway (the collapsed change, which is not this fold's to
	// publish), since start.
	DroppedJoining uint64 `json:"dropped_joining,omitempty"`
}

// PluginStatus is the plugin a fold runs and what became of the reloads
// of its file.
type PluginStatus struct {
	fold.PluginIdentity
	// Source is where the module comes from: a file's path, or a
	// nats-object:// reference.
	Source string `json:"source,omitempty"`
	// LastReload is the last reload verdict (nil before the first): a new
	// module accepted (swapped in at the next batch), or a file refused
	// (the running module stays).
	LastReload *PluginReload `json:"last_reload,omitempty"`
	// Reloads counts the verdicts since start.
	Reloads PluginReloads `json:"reloads"`
	// Queries are the queries the plugin declares (ABI minor 2; served at
	// /v1/folds/{name}/query/{query}), of the module the next batch runs;
	// absent when none.
	Queries []PluginQuery `json:"queries,omitempty"`
	// QueryInstances is how many of those queries run at once
	// (plugin_query_instances); absent when none are declared.
	QueryInstances int `json:"query_instances,omitempty"`
}

// PluginQuery is one query a plugin declares.
type PluginQuery struct {
	Name        string `json:"name"`
	ContentType string `json:"content_type,omitempty"` // absent: application/octet-stream
}

// PluginReload is one reload verdict.
type PluginReload struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"`          // "accepted" or "refused"
	Module  string    `json:"module,omitempty"` // sha256 of the accepted module
	Reason  string    `json:"reason,omitempty"` // why the file was refused
}

// PluginReloads counts reload verdicts.
type PluginReloads struct {
	Accepted uint64 `json:"accepted"`
	Refused  uint64 `json:"refused"`
}

// DeadLetterStatus describes a fold's dead letters.
type DeadLetterStatus struct {
	Policy            string `json:"policy"` // on_plugin_error: stop or skip
	Stored            int64  `json:"stored"` // -1 when they could not be counted
	SkippedSinceStart uint64 `json:"skipped_since_start"`
	Max               int    `json:"max"`
	MaxAge            string `json:"max_age"`
}

// ReplayResult is what a dead letter replay did.
type ReplayResult struct {
	Replayed int `json:"replayed"` // folded now, removed from the dead letters
	Failed   int `json:"failed"`   // failed again, kept with the new error
	// Effects: dead letters of poison effects, not replayed (kept; a
	// replay folds keys, and an effect is not a key).
	Effects int `json:"effects,omitempty"`
}

// RebuildStatus describes a fold's view rebuilds since start.
type RebuildStatus struct {
	// Running is the rebuild in progress, nil when none runs.
	Running *RebuildRun `json:"running,omitempty"`
	// Last is the last rebuild that ended.
	Last *RebuildRun `json:"last,omitempty"`
}

// RebuildRun is one view rebuild.
type RebuildRun struct {
	// Why it runs: the view schema changed, a plugin was added to a
	// raw-only fold.
	Why    string `json:"why"`
	Module string `json:"module"` // sha256 of the module rebuilding the views
	// Live: it runs beside the live fold (begun by a reload while it
	// followed), else before the fold follows again.
	Live bool `json:"live"`
	// Outcome of an ended rebuild: done (switched in), failed (the old
	// views and plugin stay; Error), cancelled (shutdown, or a newer
	// module), deferred (the live fold stopped first: the rebuild runs
	// before it follows again).
	Outcome   string    `json:"outcome,omitempty"`
	StartedAt time.Time `json:"started_at"`
	Took      string    `json:"took,omitempty"`
	Error     string    `json:"error,omitempty"`
	fold.RebuildProgress
}

// RepairStatus describes a fold's cursor-expiry repairs since start.
type RepairStatus struct {
	// Running is the repair in progress, nil when none runs.
	Running *repair.Progress `json:"running,omitempty"`
	// Last is the last repair that ended.
	Last *RepairRun `json:"last,omitempty"`
	// Counts counts ended repairs by plan and outcome.
	Counts []RepairCount `json:"counts"`
	// Pending: a repair began on the store and has not finished (it failed
	// or was cut short): some data is newer than the cursor, reads say so
	// (repair_pending), exports refuse, and the next repair finishes it.
	Pending bool `json:"pending,omitempty"`
}

// RepairRun is one ended repair.
type RepairRun struct {
	// Plan is protocol.RepairPlan text: key-listing-diff, relist-only,
	// refuse or restore.
	Plan string `json:"plan"`
	// Outcome: done, failed (retried: a transient error) or refused (the
	// fold stopped).
	Outcome string    `json:"outcome"`
	At      time.Time `json:"at"`
	Took    string    `json:"took"`
	Error   string    `json:"error,omitempty"`
	repair.Progress
}

// RepairCount is how many repairs of one plan ended with one outcome.
type RepairCount struct {
	Plan    string `json:"plan"`
	Outcome string `json:"outcome"`
	N       uint64 `json:"n"`
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
	// ExportedCursor is the highest cursor this process' rounds published
	// or found superseded by a newer artifact (absent before the first):
	// an interval round is not attempted while the fold's cursor is at or
	// below it (nothing new to export).
	ExportedCursor *uint64 `json:"exported_cursor,omitempty"`
	// UpToDateAt is when this process last knew an artifact to hold
	// everything the fold had folded: a round that published or was
	// superseded, or an interval tick that found the cursor at or below
	// ExportedCursor (absent before the first). An idle fold's stays
	// fresh; its age is how long the fold has held revisions no artifact
	// has, to about an interval (the alert on artifact staleness reads it).
	UpToDateAt *time.Time `json:"up_to_date_at,omitempty"`
	// Rounds counts this process' rounds by outcome.
	Rounds ExportRounds `json:"rounds"`
}

// ExportRounds counts export rounds by outcome.
type ExportRounds struct {
	Published  uint64 `json:"published"`
	Superseded uint64 `json:"superseded"`
	Skipped    uint64 `json:"skipped"`
	Failed     uint64 `json:"failed"`
	// Fenced: in a fleet, rounds of this node refused because a newer
	// owner of the fold holds the pointer (this node was a stale owner).
	Fenced uint64 `json:"fenced"`
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
