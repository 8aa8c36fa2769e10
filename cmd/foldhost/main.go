// Command foldhost turns NATS JetStream KV buckets into local, durable,
// queryable folds and serves them over HTTP. See `foldhost --help` and
// README.md.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host/config"
)

// Exit codes. Documented in the top-level help and the README.
const (
	exitOK       = 0 // success; `run` shut down cleanly on SIGINT/SIGTERM
	exitFailure  = 1 // runtime failure: NATS unreachable, a store error, a fold that stopped on an error
	exitUsage    = 2 // usage or config error: nothing was started
	exitNotFound = 3 // the key asked for does not exist (inspect get, kv get)
)

// cli is one invocation's environment, injectable for tests.
type cli struct {
	// ctx is cancelled by the first SIGINT or SIGTERM: every command shuts
	// down gracefully from there (watchSignals).
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
	getenv config.Getenv
	// grace bounds a graceful shutdown (nanoseconds); a command that loads
	// a config sets it from shutdown_grace.
	grace atomic.Int64
}

type command struct {
	name    string
	summary string
	run     func(c *cli, args []string) error
}

func commands() []command {
	return []command{
		{"run", "run the folds of a config file and serve the HTTP API", cmdRun},
		{"inspect", "read a stopped fold's store offline (JSON)", cmdInspect},
		{"kv", "put, get, delete and watch keys of a NATS KV bucket", cmdKV},
		{"demo", "a self-contained tour on embedded defaults (embedded NATS, example plugin)", cmdDemo},
		{"export", "export folds as artifacts to the artifact store now", cmdExport},
		{"artifacts", "list the artifacts an artifact store holds (list), or show one in full (show)", cmdArtifacts},
		{"bootstrap", "fill an empty fold from the newest published artifact", cmdBootstrap},
		{"repair", "repair a stopped fold now (key listing or artifact restore)", cmdRepair},
		{"top", "a terminal view of a running foldhost's folds, refreshed (HTTP API)", cmdTop},
		{"admin", "pause, resume, reload, rebuild or replay dead letters of a running fold", cmdAdmin},
		{"plugins", "list the plugin module each node runs (modules from a NATS object store)", cmdPlugins},
		{"plugin", "push a plugin module to a fold's NATS object store, check one, or start one (push, check, new)", cmdPlugin},
		{"bench", "measure folding rates and ratios end to end (embedded NATS or --nats URL)", cmdBench},
	}
}

func main() { os.Exit(run(os.Args[1:])) }

// run is the process: signals installed before anything else happens, so
// they work in every state (config loading, plugin loading, start,
// bootstrap, export, shutdown).
func run(args []string) int {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c := &cli{ctx: ctx, stdout: os.Stdout, stderr: os.Stderr, stdin: os.Stdin, getenv: os.LookupEnv}
	c.grace.Store(int64(config.DefaultShutdownGrace))
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	done := make(chan struct{})
	defer close(done)
	go c.watchSignals(sigs, done, cancel, os.Exit)
	return c.main(args)
}

// watchSignals turns the first signal into the cancellation of c.ctx; a
// second signal, or the shutdown grace running out, exits at once with
// exitFailure (nothing is left half-written: every commit is atomic, and
// what was not committed is folded again after a restart).
func (c *cli) watchSignals(sigs <-chan os.Signal, done <-chan struct{}, cancel func(), exit func(int)) {
	var sig os.Signal
	select {
	case sig = <-sigs:
	case <-done:
		return
	}
	cancel()
	grace := time.Duration(c.grace.Load())
	fmt.Fprintf(c.stderr, "foldhost: %v: shutting down (within %v; a second signal exits at once)\n", sig, grace)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case sig = <-sigs:
		fmt.Fprintf(c.stderr, "foldhost: %v again: exiting now\n", sig)
	case <-t.C:
		fmt.Fprintf(c.stderr, "foldhost: shutdown did not finish within %v (shutdown_grace): exiting now\n", grace)
	case <-done:
		return
	}
	exit(exitFailure)
}

// main dispatches args and maps the result to an exit code.
func (c *cli) main(args []string) int {
	if len(args) == 0 {
		c.usage(c.stderr)
		return exitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		c.usage(c.stdout)
		return exitOK
	case "help":
		if len(args) == 1 {
			c.usage(c.stdout)
			return exitOK
		}
		name, args = args[1], []string{args[1], "--help"}
	}
	for _, cmd := range commands() {
		if cmd.name == name {
			return c.exitCode(name, cmd.run(c, args[1:]))
		}
	}
	fmt.Fprintf(c.stderr, "foldhost: unknown command %q\n\n", name)
	c.usage(c.stderr)
	return exitUsage
}

func (c *cli) usage(w io.Writer) {
	fmt.Fprint(w, `foldhost turns NATS JetStream KV buckets into local, durable, queryable folds.

Usage:
  foldhost <command> [flags] [arguments]

Commands:
`)
	for _, cmd := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", cmd.name, cmd.summary)
	}
	fmt.Fprint(w, `
Run 'foldhost <command> --help' (or 'foldhost help <command>') for its flags.

Exit codes:
  0  success (run: clean shutdown on SIGINT/SIGTERM)
  1  runtime failure (NATS unreachable, store error, a fold stopped on an error;
     a second signal, or a shutdown that outlasts shutdown_grace)
  2  usage or config error (nothing was started)
  3  not found (inspect get, kv get: the key does not exist)
`)
}

// Error kinds that choose the exit code.
type (
	usageError    struct{ msg string }
	notFoundError struct{ msg string }
)

func (e *usageError) Error() string    { return e.msg }
func (e *notFoundError) Error() string { return e.msg }

func usagef(format string, args ...any) error {
	return &usageError{fmt.Sprintf(format, args...)}
}

func (c *cli) exitCode(cmd string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return exitOK
	}
	var ue *usageError
	var ce *config.Error
	var nf *notFoundError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(c.stderr, "foldhost %s: %v\nRun 'foldhost %s --help' for usage.\n", cmd, err, cmd)
		return exitUsage
	case errors.As(err, &ce):
		fmt.Fprintf(c.stderr, "foldhost %s: invalid %v\n", cmd, err)
		return exitUsage
	case errors.As(err, &nf):
		fmt.Fprintf(c.stderr, "foldhost %s: %v\n", cmd, err)
		return exitNotFound
	}
	fmt.Fprintf(c.stderr, "foldhost %s: %v\n", cmd, err)
	return exitFailure
}

// flagSet makes a command's flag set; its usage goes to the help text.
func (c *cli) flagSet(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("foldhost "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
		w := c.stdout
		fmt.Fprintf(w, "Usage:\n")
		for _, l := range strings.Split(synopsis, "\n") {
			fmt.Fprintf(w, "  foldhost %s\n", l)
		}
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(about))
		var has bool
		fs.VisitAll(func(*flag.Flag) { has = true })
		if has {
			fmt.Fprintf(w, "\nFlags:\n")
			fs.SetOutput(w)
			fs.PrintDefaults()
			fs.SetOutput(io.Discard)
		}
	}
	return fs
}

// parse parses flags anywhere among args (flags may follow positional
// arguments; "--" ends flag parsing) and returns the positional arguments.
// --help prints the usage to stdout and returns flag.ErrHelp.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				return nil, err // the flag package printed the usage
			}
			return nil, usagef("%v", err)
		}
		rest := fs.Args()
		consumed := len(args) - len(rest)
		if len(rest) == 0 || (consumed > 0 && args[consumed-1] == "--") {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// parseConfig parses a command that takes flags only, then loads and
// validates the config file its --config flag names; its shutdown_grace
// bounds the command's shutdown from then on.
func (c *cli) parseConfig(fs *flag.FlagSet, configPath *string, args []string) (*config.Config, error) {
	pos, err := parse(fs, args)
	if err != nil {
		return nil, err
	}
	if len(pos) > 0 {
		return nil, usagef("unexpected argument %q", pos[0])
	}
	return c.loadConfig(*configPath)
}

// loadConfig loads and validates the config file at path; its
// shutdown_grace bounds the command's shutdown from then on.
func (c *cli) loadConfig(path string) (*config.Config, error) {
	cfg, err := config.Load(path, c.getenv)
	if err == nil {
		c.grace.Store(int64(cfg.ShutdownGrace))
	}
	return cfg, err
}
