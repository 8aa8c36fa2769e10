// Package datadir owns the files that live beside a fold's data dir (the
// pebble directory itself is package fold's): where exports are staged,
// where a repair keeps its scratch store, the bootstrap lock and what a
// killed import left, and the crash-safe swap of `repair --reset`
// (RATIONALE.md, "The reset's swap: recorded before the first rename,
// rolled forward").
//
// Every path here is a hidden sibling of the data dir (".<name>.<what>"),
// never inside it, and on its filesystem (renames and hard links stay
// local). It imports no NATS, wasm or host package: it is plain files.
package datadir
