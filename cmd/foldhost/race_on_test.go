//go:build race

package main

// raceEnabled: the end-to-end test builds the binary with -race too.
const raceEnabled = true
