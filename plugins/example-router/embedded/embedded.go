// Package embedded holds committed copies of the example router's small
// WASM builds (C, AssemblyScript, Rust), embedded in the foldhost binary so
// that `foldhost demo` and `foldhost bench` work from an installed binary
// anywhere, not only from the repository root after scripts/build-plugins.
// The Go build (megabytes) is not embedded.
//
// The copies must be the bytes scripts/build-plugins makes from the current
// sources: TestEmbeddedBuildsAreCurrent compares them after every build, and
// says how to refresh them.
package embedded

import (
	"embed"
	"fmt"
	"os"
	"path/filepath"
	"slices"
)

//go:embed router-c.wasm router-as.wasm router-rust.wasm
var files embed.FS

// Langs are the embedded builds' languages, fastest first.
var Langs = []string{"c", "rust", "as"}

// Router returns the embedded router build of lang (one of Langs).
func Router(lang string) ([]byte, bool) {
	if !slices.Contains(Langs, lang) {
		return nil, false
	}
	b, err := files.ReadFile("router-" + lang + ".wasm")
	return b, err == nil
}

// WriteFile writes the embedded router build of lang into dir, as
// router-<lang>.wasm, and returns its path.
func WriteFile(dir, lang string) (string, error) {
	b, ok := Router(lang)
	if !ok {
		return "", fmt.Errorf("no embedded %s build of the example router", lang)
	}
	p := filepath.Join(dir, "router-"+lang+".wasm")
	return p, os.WriteFile(p, b, 0o644)
}
