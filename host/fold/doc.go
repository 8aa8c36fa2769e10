// Package fold is the durable fold store (a pebble database holding the raw
// fold of a bucket, the views a plugin derives from it, and the cursor that
// names how far both have been applied) and the applied loop that fills it.
// It owns its types (Update, Op, Event, Source, Feed, Plugin) and imports no
// NATS package: package natskv adapts a NATS KV bucket to a Feed.
//
// # Contract
//
//   - Atomic commit. [Store.Commit] writes raw entries, view mutations, the
//     cursor and optional metadata in one pebble batch. The cursor is never
//     written on its own, so a reopened store's cursor C always describes
//     exactly the data beside it (cursor-after-apply; see the loop's contract below).
//   - Fold + tail = truth. The fold at cursor C plus a resume from C is every
//     write minus every real delete. Under the default NoSync mode a crash
//     (of the process too, not only of the machine: pebble writes its WAL
//     asynchronously) can drop the last commits; the store reopens at an
//     earlier, consistent cursor and the resume re-folds the lost tail. See
//     [Options.Sync].
//   - The cursor never moves backward. A commit that would lower it (or clear
//     the eviction memo) is a broken invariant in the caller; it is refused
//     with [ErrCursorRegression] and the store is left untouched.
//
// # The applied loop
//
// A [Loop] runs on one goroutine and does, for every batch, in this order
// (the order is the guarantee: a persisted cursor never names an update the
// plugin has not applied):
//
//  1. Read. It takes events from its [Source]; between them it also takes
//     requests ([Loop.Do]), the batch window's expiry and shutdown.
//  2. Batch. An update joins the open batch. The batch closes at
//     LoopConfig.MaxBatch updates, at the source's Synced marker, when the
//     window (timed from the batch's first update) ends, before a request
//     runs, and at shutdown.
//  3. Apply. The [Plugin] gets the batch, in revision order, and a [Reader]
//     of the fold as committed before it. An error commits nothing, leaves
//     the cursor where it was and stops the loop ([ErrPlugin]).
//  4. Cursor. Only after Apply returned, the batch's cursor is computed:
//     protocol.CursorAfterBatch of the stored cursor and the batch's
//     revisions.
//  5. Commit. Raw updates, view mutations, the cursor and the plugin
//     identity go into one [Store.Commit]. A failed commit keeps the batch,
//     in front of whatever arrived since, and retries it after a backoff
//     (never dropped: that would leave a cursor gap); MaxCommitFailures in
//     a row stop the loop.
//  6. On-applied. LoopConfig.OnApplied runs after the commit, and OnSynced
//     once everything delivered before the Synced marker is committed; the
//     next batch's Apply comes after both.
//
// A request ([Loop.Do]) runs between step 6 and the next step 1, once the
// pending batch is committed, never concurrently with an apply. [Follow]
// runs loops over a [Feed], one per watch, re-arming after transient ends.
// Time comes from LoopConfig.Clock, so a simulation can drive all of it.
//
// # Layout
//
// One pebble keyspace per concern, told apart by the first key byte:
//
//	'r' + NATS key  -> rev:u64be ++ value      raw fold (one entry per live key)
//	'v' + view key  -> bytes                   plugin views
//	'm' + name      -> bytes                   metadata: format, cursor,
//	                                           plugin identity, origin
//
// The format version is written when a store is created; [Open] refuses a
// store whose version it does not know ([ErrFormatVersion]). The origin
// ([Origin]: bucket, scope, stream identity) is optional in the layout: a
// store written before it existed has none, and its host records one. Decisions that
// are not obvious from the code (sync mode, pebble tuning, why keys are
// handed out as []byte) are in RATIONALE.md.
//
// # Concurrency
//
// A Store is safe for concurrent use. Commits are serialized; reads run
// concurrently with each other and with commits, each read (or range) seeing
// one consistent state. Bytes handed to a range callback are valid only
// during that call. Close waits for in-flight operations; operations after
// Close return [ErrClosed].
package fold
