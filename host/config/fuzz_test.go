package config

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse: any file content is refused with a *Error that lists at least
// one problem, or yields a config whose folds are usable as they are
// (names valid and unique, absolute data dirs, positive batch bounds).
func FuzzParse(f *testing.F) {
	if b, err := os.ReadFile("../../config.toml.example"); err == nil {
		f.Add(b)
	}
	f.Add([]byte("[[fold]]\nname = \"a\"\nscope = [\"route.\"]\n"))
	f.Add([]byte("data_dir = 1\n[nats]\nurl = \"nats://x:4222\"\n[[fold]]\nname=\"b\"\nbatch_size = 0\n"))
	f.Add([]byte("[[fold]]\nname = \"a\"\n[[fold]]\nname = \"a\"\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := Parse(data, filepath.Join(dir, "config.toml"), noEnv)
		if err != nil {
			var ce *Error
			if !errors.As(err, &ce) || len(ce.Problems) == 0 || ce.Error() == "" {
				t.Fatalf("refusal is not a *Error with problems: %v", err)
			}
			return
		}
		names := map[string]bool{}
		for _, fc := range cfg.Folds {
			if !ValidName(fc.Name) || names[fc.Name] || !filepath.IsAbs(fc.DataDir) || fc.BatchSize < 1 || fc.Buffer < 1 {
				t.Fatalf("accepted a fold that cannot run: %+v", fc)
			}
			names[fc.Name] = true
		}
		if len(cfg.Folds) == 0 {
			t.Fatal("accepted a config without folds")
		}
	})
}
