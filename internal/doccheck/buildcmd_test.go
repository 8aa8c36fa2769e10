package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPluginBuildCommandsMatchBuildPlugins: the build command README.md's
// plugin table gives for each language, and the one in each SDK's README,
// has the flags scripts/build-plugins builds the example router with,
// modulo file names and the flags that only turn warnings into errors (so
// a reader's plugin.wasm is built as the repository's is). A flag added to
// the script and not to the documentation, or dropped from a README, fails
// it.
func TestPluginBuildCommandsMatchBuildPlugins(t *testing.T) {
	script := read(t, "scripts/build-plugins")
	want := map[string][]string{
		"C":              options(bashArray(t, script, "cflags")),
		"Rust":           options(bashArray(t, script, "rustflags")),
		"Go":             options(fields(scriptLine(t, script, "-buildmode=c-shared -o", "./plugins/example-router/go"))),
		"AssemblyScript": options(fields(scriptLine(t, script, "asc assembly/index.ts", ""))),
	}
	rows := pluginTable(t, read(t, "README.md"))
	for lang, w := range want {
		cmd, ok := rows[lang]
		if !ok {
			t.Errorf("README.md's plugin table has no %s row", lang)
			continue
		}
		if got := options(fields(cmd)); !slices.Equal(got, w) {
			t.Errorf("README.md, %s: the command's flags %q differ from scripts/build-plugins' %q", lang, got, w)
		}
	}
	for lang, readme := range map[string]string{
		"C":    "abi/sdk/c/README.md",
		"Rust": "abi/sdk/rust/README.md",
		"Go":   "abi/sdk/go/README.md",
	} {
		cmd := buildBlock(t, read(t, readme))
		if got := options(fields(cmd)); !slices.Equal(got, want[lang]) {
			t.Errorf("%s: the build command's flags %q differ from scripts/build-plugins' %q", readme, got, want[lang])
		}
	}
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginTable returns the build command of each row of README.md's
// "| language | SDK | build |" table: the first code span of its last cell.
func pluginTable(t *testing.T, readme string) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(readme, "| language | SDK | build |\n")
	if !ok {
		t.Fatal("README.md has no plugin table (| language | SDK | build |)")
	}
	rows := map[string]string{}
	span := regexp.MustCompile("`([^`]*)`")
	for _, line := range strings.Split(table, "\n") {
		if !strings.HasPrefix(line, "|") {
			break
		}
		cells := strings.Split(line, " | ")
		if len(cells) < 3 || strings.HasPrefix(line, "|---") {
			continue
		}
		m := span.FindStringSubmatch(cells[2])
		if m == nil {
			t.Fatalf("README.md: plugin table row without a command: %s", line)
		}
		rows[strings.TrimPrefix(cells[0], "| ")] = m[1]
	}
	return rows
}

// buildBlock returns the first ```sh block after a README's "## Build"
// heading, its continuation lines joined.
func buildBlock(t *testing.T, readme string) string {
	t.Helper()
	_, rest, ok := strings.Cut(readme, "\n## Build\n")
	if ok {
		_, rest, ok = strings.Cut(rest, "```sh\n")
	}
	if ok {
		rest, _, ok = strings.Cut(rest, "```")
	}
	if !ok {
		t.Fatal("no ```sh block under ## Build")
	}
	return strings.ReplaceAll(rest, "\\\n", " ")
}

// bashArray returns the words of the script's `name=( ... )` array.
func bashArray(t *testing.T, script, name string) []string {
	t.Helper()
	_, rest, ok := strings.Cut(script, "\n"+name+"=(")
	if ok {
		rest, _, ok = strings.Cut(rest, ")")
	}
	if !ok {
		t.Fatalf("scripts/build-plugins defines no %s array", name)
	}
	return fields(rest)
}

// scriptLine returns the first command of the script holding both has and
// and (continuation lines joined).
func scriptLine(t *testing.T, script, has, and string) string {
	t.Helper()
	for _, line := range strings.Split(strings.ReplaceAll(script, "\\\n", " "), "\n") {
		if strings.Contains(line, has) && strings.Contains(line, and) {
			return line
		}
	}
	t.Fatalf("scripts/build-plugins has no command with %q and %q", has, and)
	return ""
}

// fields splits a command into words, dropping shell quotes and the
// script's "$root/" prefix.
func fields(cmd string) []string {
	ws := strings.Fields(cmd)
	for i, w := range ws {
		w = strings.ReplaceAll(w, `"`, "")
		ws[i] = strings.TrimPrefix(w, "$root/")
	}
	return ws
}

// withArg are the options whose argument is the next word.
var withArg = map[string]bool{"-C": true, "-D": true, "-I": true, "-o": true,
	"--target": true, "--edition": true, "--crate-type": true, "--outFile": true}

// notBuild are options that change no output: they only refuse code the
// repository must compile cleanly, and a reader's plugin need not.
var notBuild = map[string]bool{"-Wall": true, "-Wextra": true, "-Werror": true, "-D warnings": true}

// options returns a command's options that shape its output, sorted:
// flags (with their argument), and environment assignments other than
// PATH; program names, input files and the output file (-o, --outFile)
// are left out.
func options(ws []string) []string {
	var out []string
	env := regexp.MustCompile(`^[A-Z][A-Z0-9_]*=`)
	for i := 0; i < len(ws); i++ {
		w := ws[i]
		switch {
		case withArg[w] && i+1 < len(ws):
			i++
			if w != "-o" && w != "--outFile" {
				out = append(out, w+" "+ws[i])
			}
		case strings.HasPrefix(w, "-"):
			out = append(out, w)
		case env.MatchString(w) && !strings.HasPrefix(w, "PATH="):
			out = append(out, w)
		}
	}
	out = slices.DeleteFunc(out, func(o string) bool { return notBuild[o] })
	slices.Sort(out)
	return out
}
