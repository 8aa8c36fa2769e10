// Package repair holds the cursor-expiry repairs: the I/O side of the
// decisions in package protocol (PlanRepair, ListingTruth,
// CursorlessStartNeedsRepair). A repair runs between flushes, with the store
// holding every delivered update, never concurrently with an apply.
//
// [Runner] is the repair a fold runs (the host's, and the simulation's in
// package sim): it reads the live retention and records the cursor's
// eviction memo, plans, and runs the plan: a refusal, [Relist], or a
// restore from the newest artifact ([Runner.CheckArtifact], the download,
// [Restore]).
//
// [Relist] is the key-listing repair: a state-sync of the fold's scope is
// matched, in the revision order it delivers in, against the fold's raw
// entries sorted by revision on disk beside it, and the difference folded
// through the plugin (synthetic deletes for keys the bucket no longer
// lists), under the old cursor until the last commit moves it. [Restore] folds the difference between the fold and an imported
// artifact through the plugin, per key as protocol.RestoreKey decides, and
// moves the cursor to the artifact's in its last commit.
//
// The source-mutation check (mutation_test.go) breaks the Runner's guards
// one at a time and requires the tests named for each to fail.
//
// It imports the store, the artifact core and the kernels; it must not
// import the fold's supervision (package foldrun, which runs it), the
// host, NATS (the bucket reaches it as the Runner's functions) or the
// plugin runtime (a repair folds through the fold.Plugin it is given).
package repair
