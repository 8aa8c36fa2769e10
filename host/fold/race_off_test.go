//go:build !race

package fold

const raceEnabled = false
