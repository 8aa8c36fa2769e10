package main

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/skeleton"
)

// TestPluginNewBuildsAndChecks: the skeleton of every language builds
// with the command its README names (docs/plugins.md's plugin table), outside
// the repository and without network, and the result passes plugin check,
// folding the check batches (views, effects, its query's answer) as every
// other skeleton does, and plugin test on the fixture it ships.
func TestPluginNewBuildsAndChecks(t *testing.T) {
	applied := map[string]string{}
	for _, lang := range skeleton.Langs() {
		t.Run(lang, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "my-"+lang)
			code, out, errOut := runCLI(t, nil, "plugin", "new", lang, dir)
			if code != command.ExitOK || !strings.Contains(out, skeleton.BuildCommand(lang)) {
				t.Fatalf("plugin new %s: exit %d: %s %s", lang, code, out, errOut)
			}
			readme, err := os.ReadFile(filepath.Join(dir, "README.md"))
			if err != nil || !strings.Contains(string(readme), "    "+skeleton.BuildSteps(lang)+"\n") {
				t.Errorf("README.md lacks the build command %q (%v):\n%s", skeleton.BuildSteps(lang), err, readme)
			}
			start := time.Now()
			buildSkeleton(t, lang, dir)
			t.Logf("%s skeleton built in %v", lang, time.Since(start).Round(time.Millisecond))
			out = wantCheckPass(t, filepath.Join(dir, "plugin.wasm"), "name my-"+lang+", version 0.1.0, view schema 1, ABI "+sdkABI)
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "PASS apply") || strings.HasPrefix(l, "PASS output") || strings.HasPrefix(l, "PASS effects") ||
					strings.HasPrefix(l, "  get: ") {
					applied[lang] += l + "\n"
				}
			}
			// The fixture it ships passes, in its batches and in batches of
			// one: its views, effects and query answers (README.md, "Test").
			for _, size := range []string{"0", "1"} {
				code, out, errOut := runCLI(t, nil, "plugin", "test", "--batch-size", size, filepath.Join(dir, "plugin.wasm"), filepath.Join(dir, "fixture.jsonl"))
				if code != command.ExitOK || !strings.Contains(out, "PASS ") {
					t.Errorf("plugin test --batch-size %s on its fixture: exit %d\n%s\n%s", size, code, out, errOut)
				}
			}
			if !strings.Contains(string(readme), "sh test.sh") {
				t.Errorf("README.md does not run its test:\n%s", readme)
			}
		})
	}
	// One fold in four languages: the same view mutations from each.
	for lang, a := range applied {
		if want := applied["c"]; a != want {
			t.Errorf("the %s skeleton folded otherwise than the C one:\n%s\nC:\n%s", lang, a, want)
		}
	}
}

// buildSkeleton runs lang's documented build command in dir, with the
// toolchain scripts/build-plugins uses (a missing one fails the test:
// run scripts/build-plugins, which installs them).
func buildSkeleton(t *testing.T, lang, dir string) {
	t.Helper()
	env, _ := skeletonEnv(t, lang, dir)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", skeleton.BuildCommand(lang))
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v\n%s", skeleton.BuildCommand(lang), dir, err, out)
	}
}

// skeletonEnv is the environment lang's build command runs in, in dir:
// PATH starts with bin, a directory of the tools it needs.
func skeletonEnv(t *testing.T, lang, dir string) (env []string, bin string) {
	t.Helper()
	env = os.Environ()
	bin = t.TempDir() // the tools, under the names the command uses
	tool := func(name, path string) {
		if _, err := os.Stat(path); err != nil {
			t.Fatalf("the %s skeleton's build needs %s: %v (scripts/build-plugins installs it)", lang, path, err)
		}
		if err := os.Symlink(path, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	switch lang {
	case "go":
		// The go on PATH (runtime.GOROOT is empty in a -trimpath build).
		goBin, err := exec.LookPath("go")
		if err != nil {
			t.Fatalf("the go skeleton's build needs go on PATH: %v", err)
		}
		tool("go", goBin)
		// No network (GOPROXY=off: a download fails the build), no
		// toolchain switch, no workspace; -trimpath makes the module's
		// bytes the same in every temporary directory, so the test
		// cache's compiled copy serves the next run.
		env = append(env, "GOPROXY=off", "GOTOOLCHAIN=local", "GOWORK=off", "GOFLAGS=-trimpath")
	case "c":
		clang := os.Getenv("CLANG")
		if clang == "" {
			var err error
			if clang, err = exec.LookPath("clang"); err != nil {
				t.Fatalf("the C skeleton's build needs clang: %v (scripts/build-plugins installs it)", err)
			}
		}
		tool("clang", clang)
	case "rust":
		rustc := os.Getenv("WASM_RUSTC") // as scripts/build-plugins: Debian's by default
		if rustc == "" {
			rustc = "/usr/bin/rustc"
		}
		tool("rustc", rustc)
	case "assemblyscript":
		// What 'npm ci' makes, from the packages scripts/build-plugins
		// installed for the example (so no network): the compiler, and
		// the SDK linked as its file: dependency.
		mods := filepath.Join(repoRoot(t), "plugins", "example-router", "assemblyscript", "node_modules")
		for _, l := range [][2]string{
			{filepath.Join(mods, "assemblyscript"), "node_modules/assemblyscript"},
			{"../../foldhost-sdk", "node_modules/@foldhost/sdk-assemblyscript"},
			{"../assemblyscript/bin/asc.js", "node_modules/.bin/asc"},
		} {
			p := filepath.Join(dir, l[1])
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(l[0], p); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := os.Stat(filepath.Join(dir, "node_modules/.bin/asc")); err != nil {
			t.Fatalf("the AssemblyScript compiler: %v (scripts/build-plugins installs it)", err)
		}
		npx, err := exec.LookPath("npx")
		if err != nil {
			t.Fatalf("the AssemblyScript skeleton's build needs npx: %v", err)
		}
		tool("npx", npx)
	}
	// PATH: the tools first; and, as scripts/build-plugins does, no
	// directory holding a wasm-opt (clang would run it after linking).
	path := []string{bin}
	for _, d := range filepath.SplitList(os.Getenv("PATH")) {
		if _, err := os.Stat(filepath.Join(d, "wasm-opt")); d != "" && err != nil {
			path = append(path, d)
		}
	}
	return append(env, "PATH="+strings.Join(path, string(filepath.ListSeparator))), bin
}

// TestPluginNewRefuses: a directory that is not empty, or a language
// without a skeleton, is refused with nothing written.
func TestPluginNewRefuses(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("mine"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, errOut := runCLI(t, nil, "plugin", "new", "go", dir)
	if code != command.ExitUsage || !strings.Contains(errOut, "is not empty (nothing written)") {
		t.Errorf("plugin new into a directory that is not empty: exit %d: %s", code, errOut)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Errorf("plugin new wrote into a directory that was not empty: %v", ents)
	}
	missing := filepath.Join(t.TempDir(), "new")
	code, _, errOut = runCLI(t, nil, "plugin", "new", "java", missing)
	if code != command.ExitUsage || !strings.Contains(errOut, `unknown language "java": want one of assemblyscript, c, go, rust`) {
		t.Errorf("plugin new java: exit %d: %s", code, errOut)
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("plugin new java made its directory: %v", err)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "new", "go", filepath.Join(dir, "keep.txt")); code != command.ExitUsage {
		t.Errorf("plugin new into a file: exit %d: %s", code, errOut)
	}
	if code, _, errOut := runCLI(t, nil, "plugin", "new", "go"); code != command.ExitUsage || !strings.Contains(errOut, "assemblyscript, c, go, rust") {
		t.Errorf("plugin new without DIR: exit %d: %s", code, errOut)
	}
}

// repoRoot is the repository's root directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	return filepath.Join(testDir, "..", "..")
}

// TestPluginNewTestScript: a plugin made by plugin new, outside this
// repository, tests itself: its test.sh builds it offline as its README
// says, checks it and runs plugin test on its fixture (foldhost on PATH:
// here, this test binary as foldhost), and passes; a one-line change to
// the plugin that changes a view, an effect or a query answer makes the
// script fail, naming what differs. C: its build takes a fraction of a
// second (the other languages' skeletons pass the same fixture in
// TestPluginNewBuildsAndChecks).
func TestPluginNewTestScript(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "mirror")
	if code, _, errOut := runCLI(t, nil, "plugin", "new", "c", dir); code != command.ExitOK {
		t.Fatalf("plugin new: exit %d: %s", code, errOut)
	}
	env, bin := skeletonEnv(t, "c", dir)
	// foldhost: the test binary, which runs as foldhost under runMainEnv.
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	wrapper := "#!/bin/sh\n" + runMainEnv + "=1 exec '" + self + "' \"$@\"\n"
	if err := os.WriteFile(filepath.Join(bin, "foldhost"), []byte(wrapper), 0o755); err != nil {
		t.Fatal(err)
	}
	script := func() (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(dir, "test.sh")) // executable, as plugin new wrote it
		cmd.Dir, cmd.Env = t.TempDir(), env                            // it finds its directory itself
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	if out, err := script(); err != nil || strings.Count(out, "PASS fixture.jsonl: 2 batches, 4 updates") != 2 || !strings.Contains(out, "all checks passed") {
		t.Fatalf("test.sh of the skeleton as written: %v\n%s", err, out)
	}
	src := filepath.Join(dir, "plugin.c")
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ what, from, to, diff string }{
		{"a view", "fh_put(r->key.ptr, r->key.len, r->value.ptr, r->value.len);", "fh_put(r->key.ptr, r->key.len, r->value.ptr, r->value.len - 1);",
			`views differ (- expected, + produced):` + "\n" + `    - {"view":"bin","value_b64":"AP8="}`},
		{"an effect", `fh_emit_for(i, "changed", 7, 0, 0, r->key.ptr, r->key.len);`, `fh_emit_for(i, "change", 6, 0, 0, r->key.ptr, r->key.len);`,
			`+ {"effect":"change","update":1,"payload":"greeting"}`},
		{"a query answer", "fh_answer(v.ptr, v.len);", `fh_answer(v.ptr, v.len); fh_answers("!");`,
			`+ {"query":"get","input":"greeting","answer":"hello!"}`},
	} {
		if !strings.Contains(string(orig), c.from) {
			t.Fatalf("plugin.c has no line %q", c.from)
		}
		if err := os.WriteFile(src, []byte(strings.Replace(string(orig), c.from, c.to, 1)), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := script()
		if err == nil || !strings.Contains(out, c.diff) || !strings.Contains(out, "FAIL fixture.jsonl: ") {
			t.Errorf("test.sh after a one-line change of %s: %v, want a failure with %q:\n%s", c.what, err, c.diff, out)
		}
	}
}
