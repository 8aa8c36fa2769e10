// Package repair holds the cursor-expiry repairs: the I/O side of the
// decisions in package protocol (PlanRepair, ListingTruth,
// CursorlessStartNeedsRepair). A repair runs between flushes, with the store
// holding every delivered update, never concurrently with an apply.
//
// [Relist] is the key-listing repair: a state-sync of the fold's scope is
// matched, in the revision order it delivers in, against the fold's raw
// entries sorted by revision on disk beside it, and the difference folded
// through the plugin (synthetic deletes for keys the bucket no longer
// lists), under the old cursor until the last commit moves it. [Restore] folds the difference between the fold and an imported
// artifact through the plugin, per key as protocol.RestoreKey decides, and
// moves the cursor to the artifact's in its last commit.
package repair
