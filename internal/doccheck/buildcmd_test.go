package doccheck

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPluginBuildCommandsMatchBuildPlugins: the build command the plugin
// table gives for each language (the one table "| language | SDK | build |"
// of README.md and docs/*.md: docs/plugins.md's), and the one in each
// SDK's README,
// has the flags scripts/build-plugins builds the example router with,
// modulo file names and the flags that only turn warnings into errors (so
// a reader's plugin.wasm is built as the repository's is). A flag added to
// the script and not to the documentation, or dropped from a README, fails
// it. The AssemblyScript SDK's README is checked by asReadme.
func TestPluginBuildCommandsMatchBuildPlugins(t *testing.T) {
	script := read(t, "scripts/build-plugins")
	want := map[string][]string{
		"C":              options(bashArray(t, script, "cflags")),
		"Rust":           options(bashArray(t, script, "rustflags")),
		"Go":             options(fields(scriptLine(t, script, "-buildmode=c-shared -o", "./plugins/example-router/go"))),
		"AssemblyScript": options(fields(scriptLine(t, script, "asc assembly/index.ts", ""))),
	}
	page := pluginTablePage(t)
	rows := pluginTable(t, page, read(t, page))
	for lang, w := range want {
		cmd, ok := rows[lang]
		if !ok {
			t.Errorf("%s's plugin table has no %s row", page, lang)
			continue
		}
		if got := options(fields(cmd)); !slices.Equal(got, w) {
			t.Errorf("%s, %s: the command's flags %q differ from scripts/build-plugins' %q", page, lang, got, w)
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
	asReadme(t, want["AssemblyScript"])
}

// asReadme checks abi/sdk/assemblyscript/README.md against how
// scripts/build-plugins builds the example router (asc's flags want, with
// the example's package.json and asconfig.json): its package.json's build
// script has the script's flags and the example's compiler version; its
// asconfig.json has the example's settings (but outFile, and false
// booleans: asc's defaults); and the command its Build block spells out
// (npx asc ... with the asconfig's flags in parentheses) has the script's
// flags plus the example's asconfig as flags.
func asReadme(t *testing.T, want []string) {
	const (
		readme  = "abi/sdk/assemblyscript/README.md"
		example = "plugins/example-router/assemblyscript/"
	)
	doc := read(t, readme)
	var exPkg, docPkg asPackage
	var exCfg, docCfg asConfig
	decode(t, example+"package.json", read(t, example+"package.json"), &exPkg)
	decode(t, example+"asconfig.json", read(t, example+"asconfig.json"), &exCfg)
	decode(t, readme+", package.json", blockAfter(t, readme, doc, "`package.json`", "json"), &docPkg)
	decode(t, readme+", asconfig.json", blockAfter(t, readme, doc, "`asconfig.json`", "json"), &docCfg)

	if got := options(fields(docPkg.Scripts.Build)); !slices.Equal(got, want) {
		t.Errorf("%s: package.json's build script's flags %q differ from scripts/build-plugins' %q", readme, got, want)
	}
	if got, w := docPkg.DevDependencies["assemblyscript"], exPkg.DevDependencies["assemblyscript"]; got != w {
		t.Errorf("%s: package.json pins assemblyscript %q, the example %q", readme, got, w)
	}
	exSettings, err := exCfg.settings()
	if err != nil {
		t.Fatalf("%s: %v", example+"asconfig.json", err)
	}
	docSettings, err := docCfg.settings()
	if err != nil {
		t.Fatalf("%s, asconfig.json: %v", readme, err)
	}
	if !slices.Equal(docSettings, exSettings) {
		t.Errorf("%s: asconfig.json's settings %q differ from %sasconfig.json's %q", readme, docSettings, example, exSettings)
	}

	cmd := blockAfter(t, readme, doc, "Build:", "sh")
	if !strings.Contains(cmd, "asc assembly/index.ts") {
		t.Fatalf("%s: the Build block spells out no asc assembly/index.ts command", readme)
	}
	cmd = strings.NewReplacer("#", " ", "(", " ", ")", " ").Replace(cmd)
	exFlags, err := exCfg.flags()
	if err != nil {
		t.Fatalf("%s: %v", example+"asconfig.json", err)
	}
	wantCmd := append(slices.Clone(want), exFlags...)
	slices.Sort(wantCmd)
	if got := options(fields(cmd)); !slices.Equal(got, wantCmd) {
		t.Errorf("%s: the Build block's asc flags %q differ from scripts/build-plugins' with the example's asconfig.json, %q", readme, got, wantCmd)
	}
}

// asPackage is what asReadme reads of a package.json.
type asPackage struct {
	DevDependencies map[string]string `json:"devDependencies"`
	Scripts         struct {
		Build string `json:"build"`
	} `json:"scripts"`
}

// asConfig is an asconfig.json: the release target (the one --target
// release picks) and the options of every target.
type asConfig struct {
	Targets struct {
		Release map[string]any `json:"release"`
	} `json:"targets"`
	Options map[string]any `json:"options"`
}

// all merges the release target over the options, without outFile.
func (c asConfig) all() map[string]any {
	m := map[string]any{}
	for k, v := range c.Options {
		m[k] = v
	}
	for k, v := range c.Targets.Release {
		m[k] = v
	}
	delete(m, "outFile")
	return m
}

// settings returns the config's settings as sorted "name=value" words,
// false booleans (asc's defaults) left out.
func (c asConfig) settings() ([]string, error) {
	var out []string
	for k, v := range c.all() {
		switch v := v.(type) {
		case bool:
			if v {
				out = append(out, k+"=true")
			}
		case string, float64:
			out = append(out, fmt.Sprintf("%s=%v", k, v))
		case []any:
			for _, e := range v {
				out = append(out, fmt.Sprintf("%s=%v", k, e))
			}
		default:
			return nil, fmt.Errorf("asconfig setting %s: unexpected %T", k, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

// flags returns the config's settings as asc's command-line flags:
// optimizeLevel o and shrinkLevel s as -O<o>, -O<o>s or -O<o>z, true
// booleans as --name, others as --name value.
func (c asConfig) flags() ([]string, error) {
	m := c.all()
	var out []string
	o, hasO := m["optimizeLevel"].(float64)
	sh, hasS := m["shrinkLevel"].(float64)
	delete(m, "optimizeLevel")
	delete(m, "shrinkLevel")
	if hasO || hasS {
		if !hasO || sh < 0 || sh > 2 {
			return nil, fmt.Errorf("asconfig: optimizeLevel %v with shrinkLevel %v has no -O flag", m["optimizeLevel"], sh)
		}
		out = append(out, fmt.Sprintf("-O%d%s", int(o), []string{"", "s", "z"}[int(sh)]))
	}
	for k, v := range m {
		switch v := v.(type) {
		case bool:
			if v {
				out = append(out, "--"+k)
			}
		case string, float64:
			out = append(out, fmt.Sprintf("--%s %v", k, v))
		case []any:
			for _, e := range v {
				out = append(out, fmt.Sprintf("--%s %v", k, e))
			}
		default:
			return nil, fmt.Errorf("asconfig setting %s: unexpected %T", k, v)
		}
	}
	slices.Sort(out)
	return out, nil
}

func decode(t *testing.T, what, text string, v any) {
	t.Helper()
	if err := json.Unmarshal([]byte(text), v); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// blockAfter returns the first ```lang block after marker in doc (named
// name in failures).
func blockAfter(t *testing.T, name, doc, marker, lang string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, marker)
	if ok {
		_, rest, ok = strings.Cut(rest, "```"+lang+"\n")
	}
	if ok {
		rest, _, ok = strings.Cut(rest, "```")
	}
	if !ok {
		t.Fatalf("%s: no ```%s block after %q", name, lang, marker)
	}
	return rest
}

func read(t *testing.T, rel string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", rel))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// pluginTableHeader heads the documentation's plugin table.
const pluginTableHeader = "| language | SDK | build |\n"

// pluginTablePage returns the page of README.md and docs/*.md that holds
// the plugin table; there must be exactly one.
func pluginTablePage(t *testing.T) string {
	t.Helper()
	var found []string
	for _, page := range docPages(t) {
		if strings.Contains(read(t, page), pluginTableHeader) {
			found = append(found, page)
		}
	}
	if len(found) != 1 {
		t.Fatalf("want one plugin table (%s) in README.md and docs/*.md, found one in %q", strings.TrimSpace(pluginTableHeader), found)
	}
	return found[0]
}

// pluginTable returns the build command of each row of the page's
// "| language | SDK | build |" table: the first code span of its last cell.
func pluginTable(t *testing.T, page, doc string) map[string]string {
	t.Helper()
	_, table, ok := strings.Cut(doc, pluginTableHeader)
	if !ok {
		t.Fatalf("%s has no plugin table (%s)", page, strings.TrimSpace(pluginTableHeader))
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
			t.Fatalf("%s: plugin table row without a command: %s", page, line)
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
	"--target": true, "--edition": true, "--crate-type": true, "--outFile": true,
	"--runtime": true, "--use": true}

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
