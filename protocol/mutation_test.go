package protocol_test

import (
	"context"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A source mutation: one guard of a kernel broken in a copy of the package,
// and the tests that must then fail. Every guard docs/correctness.md calls
// load-bearing is here: a guard no test notices when it is broken is a
// claim the suite does not back.
type mutation struct {
	name     string
	file     string // in protocol/
	from, to string // from must occur exactly once
	caughtBy string // -run pattern of the tests that must fail
}

var mutations = []mutation{
	{"CheckResume: no beyond-head refusal", "revision.go",
		"\tcase cursor > w.Last:\n\t\treturn ResumeBeyondHead\n", "",
		"^TestCheckResume$"},
	{"Advance: the last revision wins, not the highest", "cursor.go",
		"\tif rev > high {\n\t\treturn rev\n\t}", "\tif rev != NoRevision {\n\t\treturn rev\n\t}",
		"^TestAdvance$|^TestCursorAfterBatch$"},
	{"GapHoldsNoEviction: all of MaxAge, no headroom", "retention.go",
		"half := int64(r.MaxAge / 2)", "half := int64(r.MaxAge)",
		"^TestGapHoldsNoEviction"},
	{"GapHoldsNoEviction: a discard-old limit ignored", "retention.go",
		"if r.MaxAge <= 0 || r.PerMessageTTL || r.DiscardOldLimit {", "if r.MaxAge <= 0 || r.PerMessageTTL {",
		"^TestGapHoldsNoEviction"},
	{"PlanRepair: relist without the refusal", "repair.go",
		"\t\tif truth == TruthNo {\n\t\t\treturn PlanRefuse\n\t\t}\n\t\treturn PlanKeyListingDiff", "\t\treturn PlanKeyListingDiff",
		"^TestPlanRepairExhaustive$"},
	{"CursorlessStartNeedsRepair: a fold with data ignored", "repair.go",
		"\tif foldHasData {\n\t\treturn true\n\t}\n", "",
		"^TestCursorlessStartNeedsRepairExhaustive$"},
	{"RestoreAhead: an equal artifact counts as ahead", "repair.go",
		"return artifact > applied", "return artifact >= applied",
		"^TestRestoreAhead$|^TestRestoreAllowed$"},
	{"SettleDelivered: settles without looking at retention", "settle.go",
		"\tif !ResumeWindowOK(settled, r.First) && !GapHoldsNoEviction(r, settledUnixNano, serverNowUnixNano) {", "\tif false {",
		"^TestSettleDelivered$|^TestModelSettleGuarded$"},
	{"SettleQuiet: no second reading", "settle.go",
		"\tif !ResumeWindowOK(settled, firstAfter) {\n\t\treturn settled\n\t}\n", "",
		"^TestSettleQuiet$|^TestModelSettleGuarded$"},
	{"PointerSwapAllowed: a stale owner not fenced", "pointer.go",
		"return epoch == 0 || FenceMark(current.Epoch(), epoch) != MarkFenced", "return true",
		"^TestPointerSwapAllowed$"},
	{"CheckCursorResume: checks the position, not the settled point", "settle.go",
		"if !ResumeWindowOK(c.SettledRev(), w.First) {", "if !ResumeWindowOK(c.Rev, w.First) {",
		"^TestCheckCursorResume$|^TestModelSettleGuarded$"},
}

var allMutationTests = flag.Bool("protocol.mutations.full", false, "run the whole package's tests against each mutation, not only the tests that must catch it")

// TestMutationsAreCaught applies each mutation to a copy of the package
// and runs the tests that must catch it: they must fail, while the same
// tests pass on the unmutated copy. With -protocol.mutations.full every
// test of the package runs against each mutation (minutes).
func TestMutationsAreCaught(t *testing.T) {
	src, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not on PATH (the mutation check needs it): %v", err)
	}
	run := func(t *testing.T, m *mutation, pattern string) (string, error) {
		t.Helper()
		dir := copyPackage(t, src)
		if m != nil {
			p := filepath.Join(dir, "protocol", m.file)
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), m.from); n != 1 {
				t.Fatalf("%s: the code to mutate occurs %d times in %s: update the mutation", m.name, n, m.file)
			}
			if err := os.WriteFile(p, []byte(strings.Replace(string(b), m.from, m.to, 1)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		args := []string{"test", "-count=1", "-run", pattern, "./protocol"}
		if pattern == "" {
			args = []string{"test", "-count=1", "-run", "^Test[^M]|^TestM[^u]|^Example", "./protocol"} // all but this test
		}
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for i := range mutations {
		m := &mutations[i]
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			pattern := m.caughtBy
			if *allMutationTests {
				pattern = ""
			}
			if out, err := run(t, nil, pattern); err != nil {
				t.Fatalf("the unmutated copy fails %q:\n%s", pattern, out)
			}
			out, err := run(t, m, pattern)
			if err == nil {
				t.Fatalf("no test failed with the mutation (ran %q):\n%s", pattern, out)
			}
			if !strings.Contains(out, "--- FAIL") {
				t.Fatalf("the mutated copy did not build or run, rather than fail a test:\n%s", out)
			}
		})
	}
}

// copyPackage copies the package's sources into a module of their own
// (the package imports nothing outside the standard library) and returns
// the module's directory.
func copyPackage(t *testing.T, src string) string {
	t.Helper()
	dir := t.TempDir()
	pkg := filepath.Join(dir, "protocol")
	if err := os.MkdirAll(pkg, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || e.Name() == "mutation_test.go" || e.Name() == "purity_test.go" {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(pkg, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	gomod := "module github.com/foldhost/foldhost\n\ngo 1.26\n"
	if err := os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}
