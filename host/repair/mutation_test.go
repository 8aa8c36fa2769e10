package repair_test

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// A source mutation of the host's repair code (repair.Runner: planning,
// memo, Verify, artifact checks): one guard broken in the source, and the
// tests that must then fail. It is applied with go test -overlay (the
// mutated file replaces the real one in the build; nothing is copied), one
// test binary per mutation and package. The protocol kernels have their own
// check (protocol/mutation_test.go).
type sourceMutation struct {
	name     string
	file     string // in host/repair
	from, to string // from must occur exactly once
	// caughtBy lists the tests that must fail, per package (relative to
	// the module root); full those that run only with
	// -repair.mutations.full (the host's end-to-end tests: NATS, and a
	// host test binary per mutation).
	caughtBy, full map[string][]string
	// simSeed, when set, is a schedule seed that caught the mutation in
	// the simulation before: it runs first, alone; only if it no longer
	// catches it does the simulation search simMutationSchedules from a
	// new seed (which took up to 40 s per mutation).
	simSeed uint64
}

const (
	simPkg  = "./host/repair/sim"
	repPkg  = "./host/repair"
	hostPkg = "./host"
)

var sourceMutations = []sourceMutation{
	{name: "covers: the prefix test reversed (a narrower artifact covers)", file: "fromartifact.go",
		from: "return strings.HasPrefix(p, q)", to: "return strings.HasPrefix(q, p)",
		caughtBy: map[string][]string{repPkg: {"TestCheckArtifact"}},
		full:     map[string][]string{hostPkg: {"TestRestoreScope"}}},
	{name: "covers: the scopes swapped", file: "fromartifact.go",
		from: "!covers(m.Scope, r.Scope)", to: "!covers(r.Scope, m.Scope)",
		caughtBy: map[string][]string{repPkg: {"TestCheckArtifact"}},
		full:     map[string][]string{hostPkg: {"TestRestoreScope"}}},
	{name: "the eviction memo never set", file: "runner.go",
		from: "\tcur.EvictionSeen = true\n", to: "",
		caughtBy: map[string][]string{simPkg: {"TestSimulation"}},
		full:     map[string][]string{hostPkg: {"TestRepairRefusedWhereTheListingIsNotTheTruth"}},
		simSeed:  1796410005965645151},
	{name: "the artifact's stream identity ignored", file: "fromartifact.go",
		from: "if !m.StreamCreated.Equal(r.Stream) {", to: "if false {",
		caughtBy: map[string][]string{repPkg: {"TestCheckArtifact"}, simPkg: {"TestSimulation"}},
		simSeed:  1796410005965645196},
	{name: "the key-listing repair skips its Verify", file: "runner.go",
		from: "Verify: func(ctx context.Context) error {\n", to: "Verify: func(ctx context.Context) error {\n\t\t\treturn nil\n",
		caughtBy: map[string][]string{simPkg: {"TestSimulation"}},
		simSeed:  1796410005965645155},
	{name: "the restore never checks the artifact", file: "fromartifact.go",
		from: "vetted = r.CheckArtifact(m, local, ret)", to: "vetted = nil",
		caughtBy: map[string][]string{simPkg: {"TestSimulation"}},
		full:     map[string][]string{hostPkg: {"TestRestoreScope"}},
		simSeed:  1796410005965645147},
	{name: "the restore skips its Verify", file: "fromartifact.go",
		from: "Verify: func(ctx context.Context, c protocol.Cursor) error {\n", to: "Verify: func(ctx context.Context, c protocol.Cursor) error {\n\t\t\treturn nil\n",
		caughtBy: map[string][]string{simPkg: {"TestSimulation"}},
		simSeed:  1796410005965645320},
}

var fullMutations = flag.Bool("repair.mutations.full", false, "also run the host's end-to-end tests named for each source mutation (NATS, a host test binary per mutation: minutes)")

// simMutationSchedules bounds the simulation's schedules under a mutation:
// it stops at the first that fails.
const simMutationSchedules = 2000

// TestSourceMutationsAreCaught applies each source mutation and runs the
// tests named for it: each must fail, and pass without the mutation (for
// the simulation: the schedule that caught it, replayed from its seed).
// The host's end-to-end tests named for a mutation run only with
// -repair.mutations.full.
func TestSourceMutationsAreCaught(t *testing.T) {
	if raceEnabled {
		t.Skip("a source check: it builds its own test binaries, without the race detector; the plain run covers it")
	}
	wd, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(wd, "..", "..")
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("the module root is not two levels up from %s: %v", wd, err)
	}
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not on PATH (the mutation check needs it): %v", err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("simulation base seed %d", seed)
	gotest := func(t *testing.T, overlay, pkg string, tests []string, simArgs ...string) (string, error) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Minute)
		defer cancel()
		args := []string{"test", "-count=1", "-run", "^(" + strings.Join(tests, "|") + ")$"}
		if overlay != "" {
			args = append(args, "-overlay", overlay)
		}
		args = append(args, pkg)
		if pkg == simPkg {
			args = append(append(args, "-args"), simArgs...)
		}
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = root
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	for _, m := range sourceMutations {
		t.Run(m.name, func(t *testing.T) {
			t.Parallel()
			overlay := mutate(t, filepath.Join(wd, m.file), m.from, m.to)
			catch := m.caughtBy
			if *fullMutations {
				catch = mergeCatches(m.caughtBy, m.full)
			}
			for pkg, tests := range catch {
				var out string
				var err error
				if pkg == simPkg && m.simSeed != 0 {
					out, err = gotest(t, overlay, pkg, tests, fmt.Sprintf("-repair.sim.seed=%d", m.simSeed), "-repair.sim.schedules=1")
					if err == nil {
						t.Logf("its known schedule %d no longer catches it: searching (put the schedule number found in simSeed)", m.simSeed)
					}
				}
				if err == nil {
					out, err = gotest(t, overlay, pkg, tests,
						fmt.Sprintf("-repair.sim.seed=%d", seed), fmt.Sprintf("-repair.sim.schedules=%d", simMutationSchedules))
				}
				if err == nil {
					t.Fatalf("%s: no test failed with the mutation (ran %s):\n%s", pkg, tests, tail(out))
				}
				for _, name := range tests {
					if !strings.Contains(out, "--- FAIL: "+name+" ") {
						t.Fatalf("%s: %s did not fail with the mutation (a build failure, or not caught):\n%s", pkg, name, tail(out))
					}
				}
				// Without the mutation the same tests pass; the simulation
				// replays the schedule that caught it.
				simArgs := []string{fmt.Sprintf("-repair.sim.seed=%d", seed), fmt.Sprintf("-repair.sim.schedules=%d", simMutationSchedules)}
				if pkg == simPkg {
					s := simFailure.FindStringSubmatch(out)
					if s == nil {
						t.Fatalf("%s: the simulation's failure names no seed:\n%s", pkg, tail(out))
					}
					simArgs = []string{"-repair.sim.seed=" + s[1], "-repair.sim.schedules=1"}
					t.Logf("caught by the simulation's seed %s: %s", s[1], s[2])
				}
				if out, err := gotest(t, "", pkg, tests, simArgs...); err != nil {
					t.Fatalf("%s: the tests fail without the mutation too (%s):\n%s", pkg, simArgs, tail(out))
				}
			}
		})
	}
}

// simFailure matches TestSimulation's failure: the random schedule it ran, and the violation.
var simFailure = regexp.MustCompile(`seed (\d+) \(maxbatch[^)]*\): ([^\n]*)`)

// mutate writes src with from replaced by to (from must occur exactly
// once) into a temp dir and returns the go test -overlay file that puts it
// in src's place.
func mutate(t *testing.T, src, from, to string) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(b), from); n != 1 {
		t.Fatalf("the code to mutate occurs %d times in %s, not once: update the mutation", n, src)
	}
	dir := t.TempDir()
	mutated := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(mutated, []byte(strings.Replace(string(b), from, to, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	overlay, err := json.Marshal(map[string]map[string]string{"Replace": {src: mutated}})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "overlay.json")
	if err := os.WriteFile(p, overlay, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func mergeCatches(a, b map[string][]string) map[string][]string {
	m := map[string][]string{}
	for _, c := range []map[string][]string{a, b} {
		for pkg, tests := range c {
			m[pkg] = append(m[pkg], tests...)
		}
	}
	return m
}

// tail is the end of a go test output, which holds the failures.
func tail(s string) string {
	const max = 4000
	if len(s) > max {
		return "…" + s[len(s)-max:]
	}
	return s
}
