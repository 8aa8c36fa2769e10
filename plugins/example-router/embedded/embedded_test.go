package embedded

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// TestEmbeddedBuildsAreCurrent: every embedded build is byte for byte what
// scripts/build-plugins made from the current sources (the test command
// builds them first). A source changed without refreshing the copy fails.
func TestEmbeddedBuildsAreCurrent(t *testing.T) {
	for _, lang := range Langs {
		emb, ok := Router(lang)
		if !ok || len(emb) == 0 {
			t.Fatalf("no embedded %s build", lang)
		}
		built, err := os.ReadFile(filepath.Join("..", "build", "router-"+lang+".wasm"))
		if err != nil {
			t.Fatalf("%v: run scripts/build-plugins first (the test command does)", err)
		}
		if !bytes.Equal(emb, built) {
			t.Errorf("the embedded router-%s.wasm is not the current build: run\n  cp plugins/example-router/build/router-%s.wasm plugins/example-router/embedded/", lang, lang)
		}
	}
	if _, ok := Router("go"); ok {
		t.Error("the Go build is embedded")
	}
}
