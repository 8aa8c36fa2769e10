package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// maxCmdLines bounds cmd/foldhost's non-test Go lines: the commands keep
// their flags, wiring and output; what they do lives in packages under
// host/ and internal/ (RATIONALE.md, "A thin cmd/foldhost").
const maxCmdLines = 1500

// TestCmdStaysThin: the non-test Go files of this directory hold at most
// maxCmdLines lines, so that logic added to a command goes to a package.
func TestCmdStaysThin(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	total := 0
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		total += bytes.Count(b, []byte("\n"))
	}
	if total == 0 {
		t.Fatal("no Go files counted: the test runs in the wrong directory")
	}
	if total > maxCmdLines {
		t.Errorf("cmd/foldhost's non-test Go files hold %d lines, more than %d: move the logic into a package under host/ or internal/, keeping flags, wiring and output here", total, maxCmdLines)
	}
	t.Logf("cmd/foldhost: %d non-test lines (limit %d)", total, maxCmdLines)
}
