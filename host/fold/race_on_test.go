//go:build race

package fold

// raceEnabled: pebble turns on its invariant checks under -race, which
// allocate on the iteration path; allocation-count tests skip their bound.
const raceEnabled = true
