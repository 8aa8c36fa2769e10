//go:build race

package wasm

// raceEnabled: tests that repeat a race many times to catch it run fewer
// rounds under the race detector, which slows every round tenfold.
const raceEnabled = true
