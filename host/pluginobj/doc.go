// Package pluginobj holds plugin modules in a NATS object store: the
// nats-object:// reference a fold's config names, fetching a module (its
// bytes checked against the store's digest, and against the reference's
// pin), watching for new versions, pushing one, and the fleet's record of
// which module each node runs (a KV bucket, one entry per fold and node).
//
// Validating a module (is it a plugin this host can run?) is not done here:
// the caller's WASM runtime does it, before anything is swapped in.
//
// It imports nothing of foldhost: the fold's supervision (package
// foldrun) wires it to a fold's plugin.
package pluginobj
