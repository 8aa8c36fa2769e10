// Package fold is the durable fold store: a pebble database holding the raw
// fold of a NATS KV bucket, the views a plugin derives from it, and the
// cursor that names how far both have been applied.
//
// # Contract
//
//   - Atomic commit. [Store.Commit] writes raw entries, view mutations, the
//     cursor and optional metadata in one pebble batch. The cursor is never
//     written on its own, so a reopened store's cursor C always describes
//     exactly the data beside it (cursor-after-apply, DESIGN.md).
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
// # Layout
//
// One pebble keyspace per concern, told apart by the first key byte:
//
//	'r' + NATS key  -> rev:u64be ++ value      raw fold (one entry per live key)
//	'v' + view key  -> bytes                   plugin views
//	'm' + name      -> bytes                   metadata: format, cursor, plugin
//
// The format version is written when a store is created; [Open] refuses a
// store whose version it does not know ([ErrFormatVersion]). Decisions that
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
