// Package logattrs holds TestLogAttrs: every structured log attribute the
// program writes has one JSON type per name, and none is a nanosecond
// duration or a Go struct dump, checked over the source with the type
// checker (a run could only see the lines it happened to log).
package logattrs

import (
	"encoding/json"
	"fmt"
	"go/ast"
	"go/constant"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// site is one attribute as the source writes it.
type site struct {
	key, kind, typ, pos string
}

// TestLogAttrs type-checks every non-test package of host/ and cmd/ and
// collects the key/value pairs handed to a *slog.Logger (Debug, Info, Warn,
// Error, Log and their Context forms, With), and the []any key/value lists
// built for them. For each value it derives the JSON type slog's JSON
// handler writes; then:
//
//   - a name has one JSON type everywhere ("cursor" was a number in some
//     lines and a string, protocol.Revision's text, in others);
//   - no value is a time.Duration (the JSON handler writes nanoseconds;
//     durations are strings, time.Duration.String());
//   - no value is a struct or a pointer to one without a JSON or text form
//     (the text handler dumps it raw).
func TestLogAttrs(t *testing.T) {
	root := filepath.Join(testDir, "..", "..")
	sites := collect(t, root, "./host/...", "./cmd/...")
	if len(sites) < 100 {
		t.Fatalf("only %d attributes found: the collector is broken", len(sites))
	}
	byKey := map[string][]site{}
	for _, s := range sites {
		switch s.kind {
		case "duration":
			t.Errorf("%s: %q is a time.Duration (%s): JSON writes nanoseconds; log d.String() (or a rounded one)", s.pos, s.key, s.typ)
		case "struct":
			t.Errorf("%s: %q is a %s: a struct without a JSON or text form is dumped raw; log its fields", s.pos, s.key, s.typ)
		}
		if s.kind != "any" {
			byKey[s.key] = append(byKey[s.key], s)
		}
	}
	keys := make([]string, 0, len(byKey))
	for k := range byKey {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		kinds := map[string][]string{}
		for _, s := range byKey[k] {
			kinds[s.kind] = append(kinds[s.kind], s.pos+" ("+s.typ+")")
		}
		if len(kinds) > 1 {
			var b strings.Builder
			for kind, where := range kinds {
				fmt.Fprintf(&b, "\n  %s: %s", kind, strings.Join(where, ", "))
			}
			t.Errorf("attribute %q has %d JSON types:%s", k, len(kinds), b.String())
		}
	}
	t.Logf("%d attributes, %d names", len(sites), len(byKey))
}

// collect type-checks the packages patterns name (dependencies from the
// build's export data) and returns their log attributes.
func collect(t *testing.T, root string, patterns ...string) []site {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-deps", "-export", "-json=ImportPath,Dir,GoFiles,Export,Module,Standard"}, patterns...)...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	type pkg struct {
		ImportPath, Dir, Export string
		GoFiles                 []string
		Standard                bool
		Module                  *struct{ Path string }
	}
	exports := map[string]string{}
	var ours []pkg
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkg
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		exports[p.ImportPath] = p.Export
		if p.Module != nil && p.Module.Path == "github.com/foldhost/foldhost" &&
			(strings.Contains(p.ImportPath, "/host") || strings.Contains(p.ImportPath, "/cmd/")) {
			ours = append(ours, p)
		}
	}
	fset := token.NewFileSet()
	imp := importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok || f == "" {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
	var sites []site
	for _, p := range ours {
		var files []*ast.File
		for _, name := range p.GoFiles {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, 0)
			if err != nil {
				t.Fatal(err)
			}
			files = append(files, f)
		}
		info := &types.Info{Types: map[ast.Expr]types.TypeAndValue{}}
		conf := types.Config{Importer: imp}
		if _, err := conf.Check(p.ImportPath, fset, files, info); err != nil {
			t.Fatalf("type-check %s: %v", p.ImportPath, err)
		}
		for _, f := range files {
			sites = append(sites, inspect(fset, root, f, info)...)
		}
	}
	return sites
}

// loggerMethods maps a *slog.Logger method to the index of its first
// key/value argument.
var loggerMethods = map[string]int{
	"Debug": 1, "Info": 1, "Warn": 1, "Error": 1, "Log": 3,
	"DebugContext": 2, "InfoContext": 2, "WarnContext": 2, "ErrorContext": 2, "With": 0,
}

func inspect(fset *token.FileSet, root string, f *ast.File, info *types.Info) []site {
	var out []site
	pairs := func(args []ast.Expr) {
		for i := 0; i+1 < len(args); i += 2 {
			tv, ok := info.Types[args[i]]
			if !ok || tv.Value == nil || tv.Value.Kind() != constant.String {
				if isAttr(info.Types[args[i]].Type) {
					i-- // a slog.Attr takes one place
					continue
				}
				return // not a key/value list from here on
			}
			v := args[i+1]
			kind, typ := jsonKind(info.Types[v].Type)
			pos := fset.Position(v.Pos())
			rel, _ := filepath.Rel(root, pos.Filename)
			out = append(out, site{key: constant.StringVal(tv.Value), kind: kind, typ: typ, pos: fmt.Sprintf("%s:%d", rel, pos.Line)})
		}
	}
	ast.Inspect(f, func(n ast.Node) bool {
		switch n := n.(type) {
		case *ast.CallExpr:
			if sel, ok := n.Fun.(*ast.SelectorExpr); ok {
				if first, ok := loggerMethods[sel.Sel.Name]; ok && isLogger(info.Types[sel.X].Type) && len(n.Args) > first {
					pairs(n.Args[first:])
				}
			}
			if id, ok := n.Fun.(*ast.Ident); ok && id.Name == "append" && len(n.Args) > 1 && isAnySlice(info.Types[n.Args[0]].Type) && n.Ellipsis == token.NoPos {
				pairs(n.Args[1:])
			}
		case *ast.CompositeLit:
			if isAnySlice(info.Types[n].Type) {
				pairs(n.Elts)
			}
		}
		return true
	})
	return out
}

func isLogger(t types.Type) bool {
	p, ok := t.(*types.Pointer)
	if !ok {
		return false
	}
	n, ok := p.Elem().(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "log/slog" && n.Obj().Name() == "Logger"
}

func isAttr(t types.Type) bool {
	n, ok := t.(*types.Named)
	return ok && n.Obj().Pkg() != nil && n.Obj().Pkg().Path() == "log/slog" && n.Obj().Name() == "Attr"
}

func isAnySlice(t types.Type) bool {
	s, ok := t.(*types.Slice)
	if !ok {
		return false
	}
	i, ok := s.Elem().Underlying().(*types.Interface)
	return ok && i.Empty()
}

// jsonKind is the JSON type slog's JSON handler writes for a value of type
// t: "number", "string", "bool", "array", "object", or "duration" and
// "struct" (refused), "any" (unknown until run time).
func jsonKind(t types.Type) (kind, name string) {
	if t == nil {
		return "any", "?"
	}
	name = types.TypeString(t, func(p *types.Package) string { return p.Name() })
	if n, ok := t.(*types.Named); ok && n.Obj().Pkg() != nil {
		switch n.Obj().Pkg().Path() + "." + n.Obj().Name() {
		case "time.Duration":
			return "duration", name
		case "time.Time":
			return "string", name
		case "log/slog.Level":
			return "string", name
		}
	}
	if implements(t, "Error") {
		return "string", name // the JSON handler writes err.Error()
	}
	if implements(t, "MarshalJSON") {
		return "json:" + name, name // its own: one type per name anyway
	}
	if implements(t, "MarshalText") {
		return "string", name
	}
	switch u := t.Underlying().(type) {
	case *types.Basic:
		switch {
		case u.Info()&types.IsBoolean != 0:
			return "bool", name
		case u.Info()&types.IsNumeric != 0:
			return "number", name
		case u.Info()&types.IsString != 0:
			return "string", name
		}
	case *types.Interface:
		return "any", name
	case *types.Pointer:
		k, _ := jsonKind(u.Elem())
		return k, name
	case *types.Slice:
		if b, ok := u.Elem().Underlying().(*types.Basic); ok && b.Kind() == types.Byte {
			return "string", name // base64
		}
		return "array", name
	case *types.Array:
		return "array", name
	case *types.Map:
		return "object", name
	case *types.Struct:
		return "struct", name
	}
	return "any", name
}

// implements reports whether t (or *t, for a value that is not a pointer)
// has a method called m.
func implements(t types.Type, m string) bool {
	sets := []*types.MethodSet{types.NewMethodSet(t)}
	if _, p := t.(*types.Pointer); !p {
		sets = append(sets, types.NewMethodSet(types.NewPointer(t)))
	}
	for _, ms := range sets {
		for i := range ms.Len() {
			if ms.At(i).Obj().Name() == m {
				return true
			}
		}
	}
	return false
}

// testDir is this package's directory: go test starts a test binary there
// (read once, before any test changes directory). runtime.Caller would not
// do: the test command builds with -trimpath, which leaves no file paths.
var testDir = func() string {
	wd, err := os.Getwd()
	if err != nil {
		panic(err)
	}
	return wd
}()
