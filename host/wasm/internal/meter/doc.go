// Package meter instruments a WebAssembly module so that a running guest
// calls back into its host at bounded intervals, whatever the guest does.
//
// Compiled guest code has no preemption point of its own: a guest that
// spins never returns to Go, so nothing can stop it, and the Go runtime's
// stop-the-world phases (garbage collection among them) wait for it forever,
// freezing the whole process. Instrument inserts checks at the head of
// every loop and at the entry of every function that calls another one:
// each decrements a fuel count and, when the count reaches zero, calls the
// imported function ImportModule.ImportName, which returns the next
// allowance. Every path of unbounded length passes through loop heads or
// calls, so the yield runs at least once per allowance of checks; the host
// decides there whether the call may go on (its deadline, a cancellation)
// and, by running Go code, gives the Go scheduler the preemption point it
// needs.
//
// The count lives in a local of each metered function (a register once
// compiled: a loop head costs a decrement and a branch) and in a mutable
// global that carries it across calls: the local is stored to the global
// before every call and every exit, and loaded from it at entry and after
// every call, so a callee's checks are charged to its caller's count and
// nesting loops in calls cannot multiply the work between yields. A
// function with neither loops nor calls runs in bounded time and is left
// as it is.
//
// The output module is the input with:
//   - one more function type, () -> i32, unless the module has it;
//   - one more function import, ImportModule.ImportName, after the
//     module's own function imports (so every defined function's index
//     moves up by one, and every reference to one is renumbered: calls,
//     ref.func, exports, the start function, element segments, the name
//     section);
//   - one more mutable i32 global, the fuel, starting at one (the first
//     check yields at once);
//   - one more i32 local in each function that has a check;
//   - no custom sections but "name": debug sections describe the input's
//     code offsets, which the rewrite moves, and producers and other
//     custom sections are not needed to run the module (and would be
//     held in memory for nothing).
//
// Only WebAssembly 2.0 is understood (the feature set the host enables);
// anything else is refused with an error rather than copied unexamined,
// since an instruction the rewriter does not know could hide a call.
// The package only rewrites bytes: the engine validates the output.
//
// It imports nothing but the standard library.
package meter
