package wasm

import (
	"context"
	"sync"
	"testing"
)

// TestConcurrentLoadsOfOneModule: loads of the same module at once in one
// runtime whose compilation cache already holds it (a file watcher's reload
// and a SIGHUP's, both finding the same bytes). wazero v1.12.0 publishes a
// module read from its file cache before compiling its entry preambles, so
// a second load could instantiate it half-built and panic the process
// ("index out of range" in NewFunction; seen once in CI). Runtime.Load
// serializes compiles; without that this test panics within a few rounds.
func TestConcurrentLoadsOfOneModule(t *testing.T) {
	dir := t.TempDir()
	path := builtPlugin(t, "example-router", "router-c")
	warm := newRuntime(t, Options{CacheDir: dir})
	if _, err := warm.LoadFile(context.Background(), path); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		r := newRuntime(t, Options{CacheDir: dir})
		var wg sync.WaitGroup
		errs := make(chan error, 4)
		for range 4 {
			wg.Go(func() {
				m, err := r.LoadFile(context.Background(), path)
				if err == nil {
					m.Close(context.Background())
				}
				errs <- err
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		r.Close(context.Background())
	}
}
