package skeleton

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkeletonBuildsAreTheREADMEs: each skeleton's build command is the
// one the documentation's plugin table (docs/plugins.md, the page of
// README.md and docs/*.md holding "| language | SDK | build |") gives for
// its language, so a change to either shows here.
func TestSkeletonBuildsAreTheREADMEs(t *testing.T) {
	pages, err := filepath.Glob(filepath.Join("..", "..", "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	var table, page string
	for _, p := range append([]string{filepath.Join("..", "..", "README.md")}, pages...) {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if _, rest, ok := strings.Cut(string(b), "| language | SDK | build |\n"); ok {
			if table != "" {
				t.Fatalf("two plugin tables: %s and %s", page, p)
			}
			table, page = rest, p
		}
	}
	if table == "" {
		t.Fatal("no plugin table (| language | SDK | build |) in README.md or docs/*.md")
	}
	// The table's rows: the lines up to the first that is not one.
	if i := strings.Index(table, "\n\n"); i >= 0 {
		table = table[:i]
	}
	for _, lang := range Langs() {
		if !strings.Contains(table, "`"+BuildCommand(lang)+"`") {
			t.Errorf("%s's plugin table lacks the %s skeleton's build command `%s`", page, lang, BuildCommand(lang))
		}
	}
}
