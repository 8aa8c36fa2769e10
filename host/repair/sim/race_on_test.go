//go:build race

package sim

// raceEnabled: the race detector slows the simulation about twelvefold
// (300 schedules: 47 s plain, over 9 minutes raced on a loaded machine).
// The race run is there to watch the real loop's goroutines, which every
// schedule exercises alike: it runs raceSchedules of them, and skips
// TestSimulationCatchesEachMutation (a property of the checker, not of
// concurrency: the plain run asserts it).
const raceEnabled = true
