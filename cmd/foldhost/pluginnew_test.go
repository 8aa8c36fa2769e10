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
// folding the check batches as every other skeleton does.
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
			// A skeleton declares no query.
			out = wantCheckPass(t, filepath.Join(dir, "plugin.wasm"), "name my-"+lang+", version 0.1.0, view schema 1, ABI "+sdkABI)
			for _, l := range strings.Split(out, "\n") {
				if strings.HasPrefix(l, "PASS apply") || strings.HasPrefix(l, "PASS output") {
					applied[lang] += l + "\n"
				}
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
	env := os.Environ()
	bin := t.TempDir() // the tools, under the names the command uses
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
	env = append(env, "PATH="+strings.Join(path, string(filepath.ListSeparator)))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-c", skeleton.BuildCommand(lang))
	cmd.Dir, cmd.Env = dir, env
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s in %s: %v\n%s", skeleton.BuildCommand(lang), dir, err, out)
	}
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
