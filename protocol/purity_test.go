package protocol_test

import (
	"bytes"
	"context"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// The protocol package is pure: no I/O, no clock, no goroutines, no
// randomness, and no imports outside the standard library. These tests
// enforce that on every non-test file, so a change that breaks it fails here
// rather than in review.

const protocolImportPath = "github.com/foldhost/foldhost/protocol"

// TestPurityStdlibOnly lists the package's transitive dependencies with the
// go command and fails on anything outside the standard library.
func TestPurityStdlibOnly(t *testing.T) {
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go command not on PATH (the dependency check needs it): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, goBin, "list", "-deps",
		"-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", protocolImportPath)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps %s: %v\n%s", protocolImportPath, err, stderr.Bytes())
	}
	var self bool
	var bad []string
	for _, line := range strings.Split(string(out), "\n") {
		switch line = strings.TrimSpace(line); line {
		case "":
		case protocolImportPath:
			self = true
		default:
			bad = append(bad, line)
		}
	}
	if !self {
		t.Fatalf("go list did not report the package itself; output:\n%s", out)
	}
	if len(bad) > 0 {
		t.Fatalf("protocol depends on non-standard packages (stdlib only): %v", bad)
	}
}

// forbiddenImports are packages that do I/O, read a clock or randomness,
// start goroutines or synchronise them, or escape the type system. A path is
// forbidden when it equals an entry or lies below it (os/exec, net/http,
// sync/atomic, math/rand/v2, runtime/debug, ...).
var forbiddenImports = []string{
	"os", "net", "io/fs", "sync", "math/rand", "crypto/rand", "runtime",
	"syscall", "unsafe", "log", "plugin",
}

// clockFuncs are the time package's functions that read or wait on the clock.
// time.Duration and friends stay allowed: durations are parameters.
var clockFuncs = []string{"Now", "Since", "Until", "Sleep", "After", "AfterFunc", "Tick", "NewTicker", "NewTimer"}

func forbiddenImport(path string) bool {
	for _, f := range forbiddenImports {
		if path == f || strings.HasPrefix(path, f+"/") {
			return true
		}
	}
	return false
}

// impurities parses one Go source file and reports every forbidden import,
// clock read and go statement, with its position. Comments and strings never
// count: only the syntax tree is inspected.
func impurities(fset *token.FileSet, filename string, src any) ([]string, error) {
	f, err := parser.ParseFile(fset, filename, src, parser.SkipObjectResolution)
	if err != nil {
		return nil, err
	}
	var out []string
	report := func(n ast.Node, format string, args ...any) {
		out = append(out, fset.Position(n.Pos()).String()+": "+fmt.Sprintf(format, args...))
	}
	timeNames := map[string]bool{}
	for _, imp := range f.Imports {
		path, err := strconv.Unquote(imp.Path.Value)
		if err != nil {
			return nil, err
		}
		if forbiddenImport(path) {
			report(imp, "imports %q", path)
		}
		if path == "time" {
			switch {
			case imp.Name == nil:
				timeNames["time"] = true
			case imp.Name.Name == ".":
				report(imp, `dot-imports "time" (clock calls would be unqualified)`)
			case imp.Name.Name != "_":
				timeNames[imp.Name.Name] = true
			}
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.GoStmt:
			report(n, "go statement")
		case *ast.SelectorExpr:
			if x, ok := n.X.(*ast.Ident); ok && timeNames[x.Name] && slices.Contains(clockFuncs, n.Sel.Name) {
				report(n, "reads the clock: %s.%s", x.Name, n.Sel.Name)
			}
		}
		return true
	})
	return out, nil
}

// TestPurityNoIOClockOrGoroutines checks every non-test .go file of the
// package (the test's working directory).
func TestPurityNoIOClockOrGoroutines(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	checked := 0
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		checked++
		found, err := impurities(fset, name, nil)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		for _, f := range found {
			t.Errorf("impure: %s", f)
		}
	}
	if checked == 0 {
		t.Fatal("no non-test .go files found: wrong working directory?")
	}
	t.Logf("%d files checked", checked)
}

// TestPurityCheckerCatches proves the checker is not vacuous: it flags each
// kind of impurity, including through an aliased time import, and ignores
// the same words in comments and strings.
func TestPurityCheckerCatches(t *testing.T) {
	tests := []struct {
		name string
		src  string
		want []string // substrings, one per expected finding, in order
	}{
		{"clean file", `package p
import ("fmt"; "time")
// time.Now() and go func() and import "os" in a comment do not count.
var s = "time.Now() go f() os"
func F(d time.Duration) string { return fmt.Sprint(d, time.Second, s) }
`, nil},
		{"time.Now", `package p
import "time"
func F() int64 { return time.Now().UnixNano() }
`, []string{"reads the clock: time.Now"}},
		{"aliased time import", `package p
import clock "time"
func F() { clock.Sleep(1) }
`, []string{"reads the clock: clock.Sleep"}},
		{"time.Since", `package p
import "time"
var t0 time.Time
func F() time.Duration { return time.Since(t0) }
`, []string{"reads the clock: time.Since"}},
		{"dot-imported time", `package p
import . "time"
var D Duration
`, []string{"dot-imports"}},
		{"go statement", `package p
func F() { go func() {}() }
`, []string{"go statement"}},
		{"forbidden imports, including subpackages and blank imports", `package p
import (
	"os"
	"net/http"
	"io/fs"
	"sync/atomic"
	"math/rand/v2"
	_ "runtime/debug"
	"syscall"
	"unsafe"
)
var _ = os.Args
var _ http.Handler
var _ fs.FS
var _ atomic.Int64
var _ = rand.Int
var _ = syscall.Getpid
var _ unsafe.Pointer
`, []string{`"os"`, `"net/http"`, `"io/fs"`, `"sync/atomic"`, `"math/rand/v2"`, `"runtime/debug"`, `"syscall"`, `"unsafe"`}},
		{"look-alike paths are allowed", `package p
import ("osfoo/x"; "network"; "io"; "math"; "strings")
var _ = io.EOF
var _ = math.Pi
var _ = strings.Cut
var _ = x.Y
var _ = network.Z
`, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := impurities(token.NewFileSet(), "src.go", tt.src)
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("findings %q, want %d matching %q", got, len(tt.want), tt.want)
			}
			for i, w := range tt.want {
				if !strings.Contains(got[i], w) {
					t.Errorf("finding %d = %q, want it to mention %q", i, got[i], w)
				}
			}
		})
	}
}
