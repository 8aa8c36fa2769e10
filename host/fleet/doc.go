// Package fleet places a host's units (its folds' partitions) over the
// nodes that share a fleet name, through one NATS KV bucket: each node
// keeps a record there (its heartbeat, and how far each of its units has
// caught up), and each unit has a claim register, changed only by
// compare-and-set, whose revision is its owner's epoch. The decisions are
// package protocol's (Place, Decide, RoleOf: RATIONALE.md, "The fleet");
// this package reads the bucket, feeds them, writes what they decide, and
// tells the host which units to fold and how (a Runner).
//
// Liveness (who is alive) comes from heartbeats and this node's own clock,
// never from a comparison of clocks between machines; it decides who
// claims, never safety: a node wrongly taken for dead loses its units, and
// what it still does under its old epoch is refused by the server.
//
// It imports the kernels and NATS; it must not import the host (which
// composes it), a fold's supervision (host/foldrun: the host drives the
// folds the Runner is told about), nor the plugin runtime.
package fleet
