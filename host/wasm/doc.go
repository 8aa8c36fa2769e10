// Package wasm runs foldhost plugins: WebAssembly modules speaking ABI v1
// (abi/ABI.md), executed by wazero. A Plugin implements fold.Plugin with one
// guest call per batch.
//
// Contract:
//   - A module is validated before it is used (Runtime.Load): WebAssembly
//     2.0, ABI marker and version, required exports and their signatures,
//     imports limited to WASI, the foldhost module and AssemblyScript's
//     env.abort, memory within the limit, and a trial instantiation that
//     reads the plugin's info, under the call deadline. A module that fails
//     any check is never used, and never replaces one that passed. Module
//     files are read only if regular and within Options.MaxModuleBytes.
//   - Containment: every module is metered (internal/meter) so the guest
//     yields to the host about every millisecond; there the call's deadline
//     and cancellation end it, and the Go runtime can preempt it. No guest,
//     spinning anywhere, can stall anything but its own calls.
//   - Sandbox by default: no preopened directories, no environment, no
//     network, a fake clock and a deterministic random source; stdout and
//     stderr are captured (the tail of stderr is attached to errors).
//   - A trap, a timeout (Options.CallTimeout, on by default), running out
//     of memory or a malformed output is a *PluginError. The instance is discarded and a fresh one is
//     instantiated for the next attempt; nothing of a failed batch is
//     committed (the fold loop commits only after Apply returned success).
//   - Hot reload (Plugin.Swap, WatchFile) takes effect at a batch boundary:
//     a batch in flight finishes on the module it started with. A Plugin
//     owns its Modules: a swapped-out module is released.
//
// A Plugin is not safe for concurrent Apply calls (the loop makes one at a
// time); Swap and Status may be called from any goroutine.
//
// It imports the ABI and package fold (the Plugin interface it
// implements); it must not import NATS, artifacts or the host.
package wasm
