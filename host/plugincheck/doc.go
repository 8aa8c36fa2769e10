// Package plugincheck holds the checks of `foldhost plugin check`: a
// plugin module loaded through the host's own loader with a node's
// limits, then two small batches folded through it into a scratch store as
// a fold would (puts, a delete, a key and a value that are not UTF-8), on
// two fresh instances: load, apply, output and determinism, then each
// query the module declares run once on the folded store: each PASS or
// FAIL. Plugin authors' Go tests can run them too.
//
// It imports the plugin runtime (package wasm), the store and the ABI:
// not the host, not NATS.
package plugincheck
