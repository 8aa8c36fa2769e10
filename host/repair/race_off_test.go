//go:build !race

package repair_test

const raceEnabled = false
