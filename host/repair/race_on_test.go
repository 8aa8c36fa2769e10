//go:build race

package repair_test

// raceEnabled: the source-mutation check builds its own test binaries
// (without the race detector), so the race run skips it; and the race
// detector multiplies memory and time (unevenly: the repair runs more
// goroutines than the replay), so TestRepairScaling runs its smallest size
// once, for the detector, and asserts no figure.
const raceEnabled = true
