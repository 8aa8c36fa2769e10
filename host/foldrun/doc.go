// Package foldrun runs one fold inside a host: it supervises the fold's
// life (hydrating, following, failed, paused, repairing, rebuilding,
// stopped, and the retries between), its applied loop over the store
// (package fold) fed by the bucket's watch (package natskv) through its
// plugin (package wasm), its repairs when the cursor expired (package
// repair), its view rebuilds, its dead letters, its queries, its export
// rounds (package round) and its effects publisher (package effects); and
// it reports all of it as the fold's status and counters (httpapi.Status).
//
// A Fold is made by the host's composition (package host), which owns
// what the folds share (Env: the NATS connection, metrics, the exporter)
// and drives each fold's start (New, LoadPlugin, Attach, CheckOrigin),
// Run and close. A Fold knows nothing of other folds, of the HTTP or
// NATS admin surfaces, or of the command line.
//
// It must not import package host (the composition above it), the CLI
// (cmd/, internal/command) or a placement of folds over nodes: a fleet
// decides which folds (units) a node runs and starts a Fold for each.
package foldrun
