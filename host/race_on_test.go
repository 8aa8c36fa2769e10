//go:build race

package host_test

// raceEnabled: the race detector's shadow memory about doubles what the
// host holds of its own (TestHostilePluginsStayWithinMemory).
const raceEnabled = true
