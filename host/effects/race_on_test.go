//go:build race

package effects_test

// raceEnabled: the detector slows the kill loops tenfold (they run fewer
// kills under it, and in full without it).
const raceEnabled = true
