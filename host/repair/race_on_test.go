//go:build race

package repair_test

// raceEnabled: the race detector multiplies memory and time (unevenly:
// the repair runs more goroutines than the replay), so TestRepairScaling
// runs its smallest size once, for the detector, and asserts no figure.
const raceEnabled = true
