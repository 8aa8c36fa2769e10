package skeleton

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSkeletonBuildsAreTheREADMEs: each skeleton's build command is the
// one README.md's plugin table gives for its language, so a change to
// either shows here.
func TestSkeletonBuildsAreTheREADMEs(t *testing.T) {
	readme, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, lang := range Langs() {
		if !strings.Contains(string(readme), "`"+BuildCommand(lang)+"`") {
			t.Errorf("README.md's plugin table lacks the %s skeleton's build command `%s`", lang, BuildCommand(lang))
		}
	}
}
