package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm"
)

func init() {
	// Compiled modules persist across test runs when the test command
	// provides a cache (the Go router takes seconds to compile under -race).
	checkCacheDir = os.Getenv("FOLDHOST_TEST_WASM_CACHE")
}

// TestPluginCheckPassesOnEveryRouterBuild: every language's build of the
// example router passes plugin check, each check named, with its views.
func TestPluginCheckPassesOnEveryRouterBuild(t *testing.T) {
	for _, lang := range []string{"c", "as", "rust", "go"} {
		t.Run(lang, func(t *testing.T) {
			abi := "v1.1"
			if lang == "c" {
				abi = "v1.2" // the C SDK speaks minor 2 (queries), the others minor 1
			}
			out := wantCheckPass(t, builtPlugin(t, "example-router", "router-"+lang), "name example-router, version 1.0.0, view schema 1, ABI "+abi)
			// The C build's queries are listed (validated by the load).
			if has := strings.Contains(out, "queries: hosts_of_upstream (application/json), top_upstreams (application/json)\n"); has != (lang == "c") {
				t.Errorf("queries listed: %v, want %v:\n%s", has, lang == "c", out)
			}
		})
	}
}

// wantCheckPass runs plugin check on file and wants every check passed
// and the plugin's description (want) printed.
func wantCheckPass(t *testing.T, file, want string) string {
	t.Helper()
	code, out, errOut := runCLI(t, nil, "plugin", "check", file)
	if code != exitOK {
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
	} {
		t.Run(c.name, func(t *testing.T) {
			code, out, errOut := runCLI(t, nil, "plugin", "check", c.file)
			if code != exitFailure || !strings.Contains(out, "FAIL "+c.check) || !strings.Contains(out, c.reason) ||
				!strings.Contains(errOut, "check "+c.check+" failed") {
				t.Errorf("exit %d, want %d with FAIL %s and %q\nstdout:\n%s\nstderr:\n%s", code, exitFailure, c.check, c.reason, out, errOut)
			}
			if strings.Contains(out, "all checks passed") {
				t.Errorf("a failed check printed success:\n%s", out)
			}
		})
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "check"); code != exitUsage {
		t.Errorf("plugin check without FILE: exit %d: %s", code, errOut)
	}
}

// TestPluginCheckRunsOnFreshPlugins drives the apply, output and
// determinism checks with fakes (fault injection: no module in the host's
// sandbox varies between instances, and none of the built ones makes an
// output the host refuses on the check's batches).
func TestPluginCheckRunsOnFreshPlugins(t *testing.T) {
	ctx := context.Background()
	run := func(fresh func() fold.Plugin) (string, error) {
		var out bytes.Buffer
		fail := func(check string, err error) error {
			out.WriteString("FAIL " + check + " " + err.Error() + "\n")
			return &checkFailed{check, err}
		}
		err := checkRuns(ctx, &out, fail, fresh)
		return out.String(), err
	}
	// The batches: a put, a delete, and a key that is not UTF-8.
	var seen []fold.Update
	runs := 0
	out, err := run(func() fold.Plugin {
		runs++
		return fold.PluginFunc(func(_ context.Context, batch []fold.Update, _ fold.Reader) (fold.Output, error) {
			if runs == 1 {
				seen = append(seen, batch...)
			}
			return fold.Output{Views: []fold.ViewMutation{{Op: fold.ViewPut, Key: []byte("n"), Value: []byte{byte('0' + len(batch))}}}}, nil
		})
	})
	if err != nil || runs != 2 || !strings.Contains(out, "PASS determinism") {
		t.Fatalf("a deterministic fake: %v after %d runs:\n%s", err, runs, out)
	}
	var put, del, binary bool
	for _, u := range seen {
		put = put || u.Op == fold.OpPut
		del = del || u.Op == fold.OpDelete
		binary = binary || !utf8.ValidString(u.Key)
	}
	if !put || !del || !binary {
		t.Errorf("the check batches lack a put (%v), a delete (%v) or a key that is not UTF-8 (%v): %+v", put, del, binary, seen)
	}

	// nondeterministicFake: the second instance puts another value of the
	// same length.
	runs = 0
	out, err = run(func() fold.Plugin {
		runs++
		v := []byte{byte('a' + runs)}
		return fold.PluginFunc(func(context.Context, []fold.Update, fold.Reader) (fold.Output, error) {
			return fold.Output{Views: []fold.ViewMutation{{Op: fold.ViewPut, Key: []byte("k"), Value: v}}}, nil
		})
	})
	var cf *checkFailed
	if !asCheckFailed(err, &cf) || cf.check != "determinism" || !strings.Contains(out, "FAIL determinism batch 1") {
		t.Errorf("a nondeterministic fake: %v:\n%s", err, out)
	}

	// malformedFake: what the host refuses of an output fails the output
	// check, anything else the apply check.
	for kind, check := range map[wasm.Kind]string{wasm.KindMalformed: "output", wasm.KindLimit: "output", wasm.KindTrap: "apply", wasm.KindTimeout: "apply"} {
		out, err = run(func() fold.Plugin {
			return fold.PluginFunc(func(context.Context, []fold.Update, fold.Reader) (fold.Output, error) {
				return fold.Output{}, &wasm.PluginError{Kind: kind, Module: "fake", Err: os.ErrInvalid}
			})
		})
		if !asCheckFailed(err, &cf) || cf.check != check || strings.Contains(out, "PASS") {
			t.Errorf("a fake failing with %s: %v, want check %s failed:\n%s", kind, err, check, out)
		}
	}
}

func asCheckFailed(err error, cf **checkFailed) bool {
	c, ok := err.(*checkFailed)
	*cf = c
	return ok
}
