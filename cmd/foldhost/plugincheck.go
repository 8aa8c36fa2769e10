package main

import (
	"flag"
	"fmt"
	"io"
	"log/slog"

	"github.com/foldhost/foldhost/host/plugincheck"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
)

// checkCacheDir, when set, keeps the modules the plugin commands compile
// (the tests set it: the Go router takes seconds to compile under -race).
var checkCacheDir string

// limitFlags adds the flags of a module's limits to fs; the function it
// returns makes the runtime options of their values.
func (c *cli) limitFlags(fs *flag.FlagSet) func() (wasm.Options, error) {
	memMB := fs.Int("memory-mb", wasm.DefaultMemoryLimitMB, "the plugin's memory limit in MiB (a fold's plugin_memory_mb)")
	maxMB := fs.Int("max-mb", wasm.DefaultMaxModuleBytes>>20, "the largest module file accepted, in MiB (plugin_max_mb)")
	timeout := fs.Duration("call-timeout", wasm.DefaultCallTimeout, "deadline of every call into the plugin; 0: none (plugin_call_timeout)")
	return func() (wasm.Options, error) {
		// The plugin's own log lines and stdout/stderr, as a node logs them.
		o, err := plugincheck.Options(*memMB, *maxMB, *timeout, checkCacheDir, slog.New(slog.NewTextHandler(c.stderr, nil)))
		if err != nil {
			return o, usagef("%v", err)
		}
		return o, nil
	}
}

func cmdPluginCheck(c *cli, args []string) error {
	fs := c.flagSet("plugin check", "plugin check FILE [--memory-mb N] [--max-mb N] [--call-timeout D]", about("plugin-check"))
	limits := c.limitFlags(fs)
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usagef("want: plugin check FILE")
	}
	opts, err := limits()
	if err != nil {
		return err
	}
	return plugincheck.Check(c.ctx, c.stdout, pos[0], opts)
}

func cmdPluginTest(c *cli, args []string) error {
	fs := c.flagSet("plugin test", "plugin test FILE FIXTURE... [--update] [--batch-size N] [--memory-mb N] [--max-mb N] [--call-timeout D]", about("plugin-test"))
	limits := c.limitFlags(fs)
	update := fs.Bool("update", false, "rewrite the fixtures' expectations from what the module produced (golden files)")
	size := fs.Int("batch-size", 0, "fold batches of at most `n` updates, not the fixture's (expectations are still checked where its batches end)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) < 2 || *size < 0 {
		return usagef("want: plugin test FILE FIXTURE... (--batch-size not negative)")
	}
	opts, err := limits()
	if err != nil {
		return err
	}
	return plugincheck.Test(c.ctx, c.stdout, pos[0], pos[1:], plugincheck.TestOptions{Load: opts, BatchSize: *size, Update: *update})
}

func cmdPluginCall(c *cli, args []string) error {
	fs := c.flagSet("plugin call", "plugin call FILE QUERY [--input TEXT | --input-file FILE] [--fixture FIXTURE]", about("plugin-call"))
	limits := c.limitFlags(fs)
	input := fs.String("input", "", "the query's input")
	inputFile := fs.String("input-file", "", "read the query's input from `file` (-: stdin)")
	fixture := fs.String("fixture", "", "fold this fixture `file`'s updates first (default: query an empty store)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 2 {
		return usagef("want: plugin call FILE QUERY")
	}
	in := []byte(*input)
	switch {
	case *inputFile != "" && *input != "":
		return usagef("--input and --input-file are exclusive")
	case *inputFile == "-":
		in, err = io.ReadAll(io.LimitReader(c.stdin, plugincheck.MaxCallInput+1)) // more: refused by the query's bound
	case *inputFile != "":
		in, err = files.ReadRegular(*inputFile, plugincheck.MaxCallInput)
	}
	if err != nil {
		return fmt.Errorf("the query's input: %w", err)
	}
	opts, err := limits()
	if err != nil {
		return err
	}
	answer, err := plugincheck.Call(c.ctx, pos[0], *fixture, pos[1], in, opts)
	if err != nil {
		return err
	}
	_, err = c.stdout.Write(answer)
	return err
}
