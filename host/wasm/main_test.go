package wasm

import (
	"os"
	"testing"

	"github.com/foldhost/foldhost/internal/leakcheck"
)

// testCacheDir is the compilation cache every test runtime shares, so each
// plugin is compiled once per test binary rather than once per test (the Go
// router takes over ten seconds to compile under the race detector). The
// test command points FOLDHOST_TEST_WASM_CACHE at a directory that persists
// across runs; otherwise it is a directory of this process.
var testCacheDir string

func TestMain(m *testing.M) {
	testCacheDir = os.Getenv("FOLDHOST_TEST_WASM_CACHE")
	var tmp string
	if testCacheDir == "" {
		dir, err := os.MkdirTemp("", "foldhost-wasm-cache")
		if err != nil {
			panic(err)
		}
		testCacheDir, tmp = dir, dir
	}
	code := leakcheck.Run(m)
	if tmp != "" {
		os.RemoveAll(tmp)
	}
	os.Exit(code)
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
