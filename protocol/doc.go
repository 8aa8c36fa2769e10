// Package protocol holds every decision foldhost's guarantees rest on, as
// pure functions: values in, decisions out. No I/O, no clock, no goroutines,
// no imports outside the standard library (a test enforces both). Time, when a
// decision needs it, is a parameter.
//
// Production code calls these functions; it never re-implements them. The exhaustive model tests in this package (model_*_test.go) call the same
// functions, and express each mutation by forging a kernel's input, never by
// re-implementing a decision. A change to a kernel is therefore re-verified
// against every bounded state space on the next test run.
//
// The guarantees, and the kernel that carries each:
//
//   - Cursor-after-apply: [CursorAfterBatch].
//   - No silent divergence after NATS compaction: [ResumeWindowOK], [CheckResume],
//     [GapHoldsNoEviction]; for a prefix-scoped (filtered) watch, whose gaps
//     prove nothing: [SettleDelivered], [SettleQuiet], [Settle],
//     [CheckCursorResume].
//   - Repair never deletes what the bucket still holds, never moves the fold
//     backward: [ListingIsTruth], [PlanRepair], [CursorlessStartNeedsRepair],
//     [RestoreAllowed], [RestoreKey].
//   - Monotone artifact pointer, never dangling: [PointerPublishAllowed],
//     [PayloadPrunable].
//   - One fenced owner per unit of a fleet, placed without a coordinator:
//     [Place] and [RankNodes] (where a unit runs), [Decide] and [RoleOf]
//     (when a node claims, hands over, folds as owner or standby),
//     [FenceMark] (an owner's epoch in the stream its effects go to),
//     [PointerSwapAllowed] (and on its artifact pointer), [PartitionOf]
//     (the unit of a key: the server's own partition of its subject).
//
// See RATIONALE.md at the repository root for why each guard has its shape.
package protocol
