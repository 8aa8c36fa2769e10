package main

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

// runMainEnv makes the test binary be foldhost itself (run with the
// binary's arguments): the signal tests need a process of their own, and
// this spares them building the binary.
const runMainEnv = "FOLDHOST_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		os.Exit(run(os.Args[1:]))
	}
	os.Exit(leakcheck.Run(m))
}

// testDir is this package's directory: go test starts a test binary there
// (read once, before any test changes directory). runtime.Caller would not
// do: the test command builds with -trimpath, which leaves no file paths.
var testDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()
