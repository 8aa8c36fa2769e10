// Package wasm runs foldhost plugins: WebAssembly modules speaking ABI v1
// (abi/ABI.md), executed by wazero. A Plugin implements fold.Plugin with one
// guest call per batch.
//
// Contract:
//   - A module is validated before it is used (Runtime.Load): ABI marker and
//     version, required exports and their signatures, imports limited to
//     WASI, the foldhost module and AssemblyScript's env.abort, memory within
//     the limit, and a trial instantiation that reads the plugin's info. A
//     module that fails any check is never used, and never replaces one
//     that passed.
//   - Sandbox by default: no preopened directories, no environment, no
//     network, a fake clock and a deterministic random source; stdout and
//     stderr are captured (the tail of stderr is attached to errors).
//   - A trap, a timeout, running out of memory or a malformed output is a
//     *PluginError. The instance is discarded and a fresh one is
//     instantiated for the next attempt; nothing of a failed batch is
//     committed (the fold loop commits only after Apply returned success).
//   - Hot reload (Plugin.Swap, WatchFile) takes effect at a batch boundary:
//     a batch in flight finishes on the module it started with.
//
// A Plugin is not safe for concurrent Apply calls (the loop makes one at a
// time); Swap and Status may be called from any goroutine.
package wasm
