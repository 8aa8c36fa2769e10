package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/command"
)

func init() {
	// Compiled modules persist across test runs when the test command
	// provides a cache (the Go router takes seconds to compile under -race).
	checkCacheDir = os.Getenv("FOLDHOST_TEST_WASM_CACHE")
}

// sdkABI is the ABI version every SDK declares: minor 3 (effects that
// name their update).
const sdkABI = "v1.3"

// TestPluginCheckPassesOnEveryRouterBuild: every language's build of the
// example router passes plugin check, each check named, with its views.
func TestPluginCheckPassesOnEveryRouterBuild(t *testing.T) {
	for _, lang := range []string{"c", "as", "rust", "go"} {
		t.Run(lang, func(t *testing.T) {
			out := wantCheckPass(t, builtPlugin(t, "example-router", "router-"+lang), "name example-router, version 1.0.0, view schema 1, ABI "+sdkABI)
			// Every build's queries are listed (validated by the load).
			// Every build's effects name their update.
			if !strings.Contains(out, "PASS effects     4 effects, each naming its update") {
				t.Errorf("no effects line naming their update:\n%s", out)
			}
			if !strings.Contains(out, "queries: hosts_of_upstream (application/json), top_upstreams (application/json)\n") {
				t.Errorf("queries not listed:\n%s", out)
			}
			// And run, on the folded check batches: top_upstreams answers
			// an empty input, hosts_of_upstream refuses it (no address);
			// each answer is printed, not only its size.
			if !strings.Contains(out, "PASS queries") || !strings.Contains(out, "\n  hosts_of_upstream: refused: hosts_of_upstream: the input must be an upstream addr") ||
				!strings.Contains(out, "\n  top_upstreams: 34 bytes: [{\"addr\":\"10.0.0.2:80\",\"hosts\":1}]\n") {
				t.Errorf("queries not run, or their answers not printed:\n%s", out)
			}
		})
	}
}

// wantCheckPass runs plugin check on file and wants every check passed
// and the plugin's description (want) printed.
func wantCheckPass(t *testing.T, file, want string) string {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "plugin", "check", file)
	if code != command.ExitOK {
		t.Fatalf("plugin check %s: exit %d\nstdout:\n%s\nstderr:\n%s", file, code, out, errOut)
	}
	for _, line := range []string{want, "PASS load", "PASS apply", "PASS output", "PASS determinism", "all checks passed"} {
		if !strings.Contains(out, line) {
			t.Errorf("plugin check output lacks %q:\n%s", line, out)
		}
	}
	return out
}

// TestPluginCheckFailsClearly: what is no plugin, or a plugin that fails,
// exits 1 with a FAIL line naming the check and the reason.
func TestPluginCheckFailsClearly(t *testing.T) {
	dir := t.TempDir()
	text := filepath.Join(dir, "plugin.wasm")
	if err := os.WriteFile(text, []byte("int main() { return 0; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, file, check, reason string
	}{
		{"missing", filepath.Join(dir, "absent.wasm"), "load", "no such file"},
		{"text", text, "load", "does not compile as WebAssembly"},
		// Never read: a device is refused before a byte of it is.
		{"device", "/dev/zero", "load", "not a regular file"},
		{"directory", dir, "load", "not a regular file"},
		{"go command", builtPlugin(t, "testdata", "router-go-command"), "load", "-buildmode=c-shared"},
		{"no apply export", builtPlugin(t, "testdata", "noexport"), "load", "foldhost_apply is missing"},
		{"trap", builtPlugin(t, "testdata", "trap"), "apply", "trap.wasm: about to trap"},
		{"status 1", builtPlugin(t, "testdata", "status1"), "apply", "deliberate failure"},
		// Its query "trap" traps whatever its input.
		{"trapping query", builtPlugin(t, "testdata", "query"), "queries", "query trap with an empty input"},
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, "plugin", "check", c.file)
			if code != command.ExitFailure || !strings.Contains(out, "FAIL "+c.check) || !strings.Contains(out, c.reason) ||
				!strings.Contains(errOut, "check "+c.check+" failed") {
				t.Errorf("exit %d, want %d with FAIL %s and %q\nstdout:\n%s\nstderr:\n%s", code, command.ExitFailure, c.check, c.reason, out, errOut)
			}
			if strings.Contains(out, "all checks passed") {
				t.Errorf("a failed check printed success:\n%s", out)
			}
		})
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "check"); code != command.ExitUsage {
		t.Errorf("plugin check without FILE: exit %d: %s", code, errOut)
	}
}
