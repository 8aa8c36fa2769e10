// Package round runs export rounds: one fleet-wide round of a fold is
// lease -> export between two flushes of the fold's loop -> upload ->
// pointer swap -> lease completed -> prune (Run), and an Exporter runs a
// host's rounds against its artifact store and lease bucket, reporting
// each as a Report (RATIONALE.md, "Export: who runs a round, and when the
// lease is skipped").
//
// It sits above the artifact core, its stores and the lease, and below
// the host: it must not import package host or a fold's supervision.
package round
