package layers

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

const module = "github.com/foldhost/foldhost"

// levels places every package of the module, bottom up. A package may
// import only packages of a lower level (its own subtree's packages are
// placed so that this holds too). The names say what each level is.
var levels = []struct {
	name string
	pkgs []string
}{
	{"foundations: the pure kernels, the ABI, the SDKs' sources, plain helpers", []string{
		"", "protocol", "abi", "deploy",
		"internal/files", "internal/syncbuf", "internal/textfmt", "internal/term", "internal/leakcheck", "internal/freeport", "internal/tcpproxy",
		"internal/logattrs", "internal/progress", "internal/natsload",
		"internal/census", "internal/doccheck", "internal/layers", "internal/kvwrite",
		"plugins/example-router/embedded", "plugins/example-router/workload",
	}},
	{"the guest side: the Go SDK, the skeletons of new plugins", []string{"abi/sdk/go", "internal/skeleton"}},
	{"the example plugin, in Go (built natively too, for the benchmarks' baseline)", []string{"plugins/example-router/go/router"}},
	{"the store, and what needs nothing of it (reads carried between nodes too)", []string{
		"host/fold", "host/embeddednats", "host/pluginobj", "host/wasm/internal/meter", "host/artifact/s3test", "host/repair/sim",
		"host/forward",
	}},
	{"mechanisms over the store: NATS, plugins, artifacts, test seams", []string{
		"host/natskv", "host/wasm", "host/artifact", "internal/testhook",
	}},
	{"mechanisms over those: stores of artifacts, the lease, repairs, a data dir's neighbours, plugin checks", []string{
		"host/artifact/dirstore", "host/artifact/s3store", "host/artifact/storetest", "host/artifact/lease",
		"host/repair", "host/datadir", "host/plugincheck", "internal/natstest", "internal/pluginrecords",
	}},
	{"the HTTP surface's types and handler, export rounds", []string{
		"host/httpapi", "host/artifact/round",
	}},
	{"the effects publisher", []string{"host/effects"}},
	{"a fold's supervision; the fleet's placement of units over nodes (neither knows the other: the host drives both)", []string{"host/foldrun", "host/fleet"}},
	{"the host: composition (New, Start, Run, Close), NATS and HTTP wiring, offline commands", []string{"host"}},
	{"configuration, and what runs a whole host", []string{
		"host/config", "host/bench", "internal/demo", "internal/hosttest", "internal/top", "internal/fleetview",
	}},
	{"the CLI's own machinery", []string{"internal/command", "internal/daemon", "internal/inspect"}},
	{"the CLI's commands' helpers", []string{"internal/kvlines", "internal/target"}},
	{"the command", []string{"cmd/foldhost"}},
}

// denied are imports from outside the module that a package must not
// have (transitively too): what its doc.go promises.
var denied = map[string][]string{
	"host/fold":    {"github.com/nats-io/", "github.com/tetratelabs/wazero"},
	"host/datadir": {"github.com/nats-io/", "github.com/tetratelabs/wazero"},
	"host/repair":  {"github.com/nats-io/", "github.com/tetratelabs/wazero"},
	"host/wasm":    {"github.com/nats-io/"},
	"host/natskv":  {"github.com/tetratelabs/wazero"},
	"host/effects": {"github.com/tetratelabs/wazero"},
	"host/forward": {"github.com/tetratelabs/wazero", "github.com/cockroachdb/pebble"},
}

type pkg struct {
	ImportPath string
	Imports    []string
	Deps       []string
}

// TestImportsGoDown: every package of the module has a level, and imports
// only packages of lower levels; no package reaches an import its doc
// denies it. Checked by breaking it: host/natskv importing host/wasm (two
// mechanisms of one level), host/fold importing nats.go, and a new
// package with no level each fail it.
func TestImportsGoDown(t *testing.T) {
	level := map[string]int{}
	for i, l := range levels {
		for _, p := range l.pkgs {
			if _, dup := level[p]; dup {
				t.Fatalf("package %q is placed twice", p)
			}
			level[p] = i
		}
	}
	var out, stderr bytes.Buffer
	cmd := exec.Command("go", "list", "-deps=false", "-json", module+"/...")
	cmd.Dir = "../.."
	cmd.Stdout, cmd.Stderr = &out, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("go list: %v\n%s", err, stderr.Bytes())
	}
	var pkgs []pkg
	for dec := json.NewDecoder(&out); dec.More(); {
		var p pkg
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) < 20 {
		t.Fatalf("go list found %d packages: not the module's", len(pkgs))
	}
	rel := func(path string) (string, bool) {
		if path == module {
			return "", true
		}
		r, ok := strings.CutPrefix(path, module+"/")
		return r, ok
	}
	seen := map[string]bool{}
	var bad []string
	for _, p := range pkgs {
		me, _ := rel(p.ImportPath)
		seen[me] = true
		lm, placed := level[me]
		if !placed {
			bad = append(bad, fmt.Sprintf("%s has no level: place it in internal/layers' table (what does it hold, and what may it import?)", p.ImportPath))
			continue
		}
		for _, imp := range p.Imports {
			them, ours := rel(imp)
			if !ours {
				continue
			}
			if lt, ok := level[them]; ok && lt >= lm {
				bad = append(bad, fmt.Sprintf("%s (level %d, %s) imports %s (level %d, %s): imports go down only",
					me, lm, levels[lm].name, them, lt, levels[lt].name))
			}
		}
		for _, d := range deniedOf(t, me, p) {
			bad = append(bad, d)
		}
	}
	for p := range level {
		if !seen[p] {
			bad = append(bad, fmt.Sprintf("the table places %q, which is not a package of the module (moved or removed?)", p))
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// deniedOf is what p reaches (go list -deps) that its entry in denied
// forbids.
func deniedOf(t *testing.T, me string, p pkg) []string {
	deny := denied[me]
	if len(deny) == 0 {
		return nil
	}
	out, err := exec.Command("go", "list", "-deps", module+"/"+me).Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v", me, err)
	}
	var bad []string
	for _, dep := range strings.Fields(string(out)) {
		for _, d := range deny {
			if strings.HasPrefix(dep, d) {
				bad = append(bad, fmt.Sprintf("%s depends on %s: its doc says it must not (no %s)", me, dep, d))
			}
		}
	}
	return bad
}
