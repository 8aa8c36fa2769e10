package main

import (
	"os/exec"
	"path/filepath"
	"testing"
)

// TestQuickStartLeavesTheTreeClean: what the README's tour makes in
// a checkout (the binary, config.toml copied from the example, and the
// default data_dir "data" beside it, with the embedded server's JetStream
// and the fold stores) is ignored by git, so it cannot be committed by
// accident; the example config itself is not. (config.toml and data/ were
// not ignored.)
func TestQuickStartLeavesTheTreeClean(t *testing.T) {
	root := filepath.Join(testDir, "..", "..")
	ignored := func(path string) bool {
		t.Helper()
		cmd := exec.Command("git", "-C", root, "check-ignore", "--no-index", "-q", path)
		err := cmd.Run()
		if ee, ok := err.(*exec.ExitError); ok && ee.ExitCode() == 1 {
			return false
		}
		if err != nil {
			t.Fatalf("git check-ignore %s: %v", path, err)
		}
		return true
	}
	for _, p := range []string{"foldhost", "config.toml", "data/nats/jetstream/x", "data/folds/routes/CURRENT", "data/wasm-cache/x", "data/artifacts/x"} {
		if !ignored(p) {
			t.Errorf("%s is not ignored by git (the quick start makes it)", p)
		}
	}
	for _, p := range []string{"config.toml.example", "cmd/foldhost/main.go", "plugins/testdata/README.md", "host/data/x.go"} {
		if ignored(p) {
			t.Errorf("%s is ignored by git: the patterns are too broad", p)
		}
	}
}
