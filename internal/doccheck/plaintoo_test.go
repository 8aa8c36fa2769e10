package doccheck

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// TestPlainTooListsEveryRaceSensitiveTest: scripts/test runs the tests of
// the packages with goroutines once, under the race detector, and without
// it only the tests its plain_too pattern names. Those must be exactly the
// tests that behave differently under the detector: every Test function
// that reads raceEnabled, itself or through a function of its package that
// does (a count cut, an assertion the detector distorts, a skip). A test
// given a raceEnabled branch and not listed would never run its plain
// form; one listed that has none runs twice for nothing.
func TestPlainTooListsEveryRaceSensitiveTest(t *testing.T) {
	script := read(t, "scripts/test")
	m := regexp.MustCompile(`(?m)^plain_too='\^\(([^)]*)\)\$'`).FindStringSubmatch(script)
	if m == nil {
		t.Fatal("scripts/test has no line plain_too='^(TestA|TestB)$'")
	}
	listed := strings.Split(m[1], "|")
	slices.Sort(listed)

	var want []string
	for _, root := range []string{"host", "cmd", "internal/command"} {
		dirs := map[string][]string{}
		err := filepath.WalkDir(filepath.Join("..", "..", root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && !d.IsDir() && strings.HasSuffix(p, "_test.go") {
				dirs[filepath.Dir(p)] = append(dirs[filepath.Dir(p)], p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range slices.Sorted(maps.Keys(dirs)) {
			want = append(want, raceSensitiveTests(t, dirs[dir])...)
		}
	}
	slices.Sort(want)
	want = slices.Compact(want)
	if !slices.Equal(listed, want) {
		t.Errorf("scripts/test's plain_too lists %v;\nthe tests that read raceEnabled (themselves or through a helper) are %v", listed, want)
	}
}

// raceSensitiveTests are the Test functions of one package's test files
// that reach raceEnabled through the package's own functions.
func raceSensitiveTests(t *testing.T, files []string) []string {
	refs := map[string]map[string]bool{} // function -> identifiers it names
	fset := token.NewFileSet()
	for _, f := range files {
		af, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range af.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || fd.Body == nil {
				continue
			}
			names := map[string]bool{}
			ast.Inspect(fd.Body, func(n ast.Node) bool {
				if id, ok := n.(*ast.Ident); ok {
					names[id.Name] = true
				}
				return true
			})
			refs[fd.Name.Name] = names
		}
	}
	reach := map[string]bool{"raceEnabled": true}
	for grew := true; grew; {
		grew = false
		for fn, names := range refs {
			if reach[fn] {
				continue
			}
			for n := range names {
				if reach[n] {
					reach[fn], grew = true, true
					break
				}
			}
		}
	}
	var out []string
	for fn := range reach {
		if strings.HasPrefix(fn, "Test") {
			out = append(out, fn)
		}
	}
	return out
}
