package main

import (
	"log/slog"

	"github.com/foldhost/foldhost/host/plugincheck"
	"github.com/foldhost/foldhost/host/wasm"
)

// checkCacheDir, when set, keeps the modules plugin check compiles (the
// tests set it: the Go router takes seconds to compile under -race).
var checkCacheDir string

func cmdPluginCheck(c *cli, args []string) error {
	fs := c.flagSet("plugin check", "plugin check FILE [--memory-mb N] [--max-mb N] [--call-timeout D]", about("plugin-check"))
	memMB := fs.Int("memory-mb", wasm.DefaultMemoryLimitMB, "the plugin's memory limit in MiB (a fold's plugin_memory_mb)")
	maxMB := fs.Int("max-mb", wasm.DefaultMaxModuleBytes>>20, "the largest module file accepted, in MiB (plugin_max_mb)")
	timeout := fs.Duration("call-timeout", wasm.DefaultCallTimeout, "deadline of every call into the plugin; 0: none (plugin_call_timeout)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want: plugin check FILE")
	}
	if *memMB <= 0 || *memMB > 4096 || *maxMB <= 0 || *timeout < 0 {
		return usagef("--memory-mb must be 1..4096, --max-mb positive, --call-timeout not negative")
	}
	opts := wasm.Options{
		CacheDir:         checkCacheDir,
		MemoryLimitPages: uint32(*memMB) * 16, // 64 KiB pages
		MaxModuleBytes:   int64(*maxMB) << 20,
		CallTimeout:      *timeout,
		Retries:          wasm.NoRetries, // a failure is the verdict, not something to retry
		// The plugin's own log lines and stdout/stderr, as a node logs them.
		Logger: slog.New(slog.NewTextHandler(c.stderr, nil)),
	}
	if *timeout == 0 {
		opts.CallTimeout = wasm.NoCallTimeout
	}
	return plugincheck.Check(c.ctx, c.stdout, pos[0], opts)
}
