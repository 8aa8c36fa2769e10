//go:build race

package repair_test

// raceEnabled: the source-mutation check builds its own test binaries
// (without the race detector), so the race run skips it.
const raceEnabled = true
