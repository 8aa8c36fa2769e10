//go:build !race

package effects_test

const raceEnabled = false
