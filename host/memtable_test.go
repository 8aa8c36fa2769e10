package host_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestFoldStoreTakesItsMemTableSize: FoldOptions.MemTableSize (config
// memtable_mb) is the memtable size the fold's store runs with, as pebble
// records it in the store's OPTIONS file; unset, the store's default.
func TestFoldStoreTakesItsMemTableSize(t *testing.T) {
	url, _ := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{
			{Name: "small", Bucket: "routes", DataDir: filepath.Join(dir, "small"), MemTableSize: 8 << 20},
			{Name: "default", Bucket: "routes", DataDir: filepath.Join(dir, "default")},
		},
	})
	defer r.Stop(t)
	for name, want := range map[string]string{"small": "mem_table_size=8388608", "default": "mem_table_size=67108864"} {
		opts, err := filepath.Glob(filepath.Join(dir, name, "OPTIONS-*"))
		if err != nil || len(opts) == 0 {
			t.Fatalf("%s: no OPTIONS file in the store (%v)", name, err)
		}
		text, err := os.ReadFile(opts[len(opts)-1])
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(text), want) {
			t.Errorf("%s: the store's OPTIONS do not say %s", name, want)
		}
	}
}
