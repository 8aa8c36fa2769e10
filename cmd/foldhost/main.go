// Command foldhost turns NATS JetStream KV buckets into local, durable,
// queryable folds and serves them over HTTP. See `foldhost --help` and
// README.md and docs/.
package main

import (
	"context"
	"embed"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/internal/command"
)

// cli is one invocation's environment, injectable for tests.
type cli struct {
	// ctx is cancelled by the first SIGINT or SIGTERM: every command shuts
	// down gracefully from there (command.WatchSignals).
	ctx    context.Context
	stdout io.Writer
	stderr io.Writer
	stdin  io.Reader
	getenv config.Getenv
	// grace bounds a graceful shutdown (nanoseconds); a command that loads
	// a config sets it from shutdown_grace.
	grace atomic.Int64
}

type subcommand struct {
	name    string
	summary string
	run     func(c *cli, args []string) error
}

func commands() []subcommand {
	return []subcommand{
		{"run", "run the folds of a config file and serve the HTTP API", cmdRun},
		{"inspect", "read a stopped fold's store offline (JSON)", cmdInspect},
		{"kv", "put, get, delete and watch keys of a NATS KV bucket", cmdKV},
		{"demo", "a self-contained tour on embedded defaults (embedded NATS, example plugin)", cmdDemo},
		{"export", "export folds as artifacts to the artifact store now", cmdExport},
		{"artifacts", "list the artifacts an artifact store holds (list), or show one in full (show)", cmdArtifacts},
		{"bootstrap", "fill an empty fold from the newest published artifact", cmdBootstrap},
		{"repair", "repair a stopped fold now (key listing or artifact restore)", cmdRepair},
		{"top", "a terminal view of a running foldhost's folds, refreshed (HTTP API)", cmdTop},
		{"admin", "pause, resume, reload, rebuild, release effects or replay dead letters of a running fold", cmdAdmin},
		{"fleet", "where each fold's partitions run in a fleet: owner, epoch, standbys (HTTP API)", cmdFleet},
		{"plugins", "list the plugin module each node runs (modules from a NATS object store)", cmdPlugins},
		{"plugin", "push a plugin module to a fold's NATS object store, check, test or query one, or start one (push, check, test, call, new)", cmdPlugin},
		{"bench", "measure folding rates and ratios end to end (embedded NATS or --nats URL)", cmdBench},
	}
}

func main() { os.Exit(run(os.Args[1:])) }

// helpTexts are the commands' help texts, prose kept as text files.
//
//go:embed help/*.txt
var helpTexts embed.FS

// about is the help text of help/NAME.txt (a missing one panics: every
// command's --help, which TestHelp runs, finds it).
func about(name string) string {
	b, err := helpTexts.ReadFile("help/" + name + ".txt")
	if err != nil {
		panic(err)
	}
	return string(b)
}

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
	go command.WatchSignals(c.stderr, func() time.Duration { return time.Duration(c.grace.Load()) }, sigs, done, cancel, os.Exit)
	return c.main(args)
}

// main dispatches args and maps the result to an exit code.
func (c *cli) main(args []string) int {
	if len(args) == 0 {
		c.usage(c.stderr)
		return command.ExitUsage
	}
	name := args[0]
	switch name {
	case "-h", "-help", "--help":
		c.usage(c.stdout)
		return command.ExitOK
	case "help":
		if len(args) == 1 {
			c.usage(c.stdout)
			return command.ExitOK
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
	return command.ExitUsage
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

// usagef, parse and notFoundf are package command's, under the names the
// commands use.
var (
	usagef    = command.Usagef
	notFoundf = command.NotFoundf
	parse     = command.Parse
)

func (c *cli) exitCode(cmd string, err error) int { return command.ExitCode(c.stderr, cmd, err) }

// flagSet makes a command's flag set; its usage goes to the help text.
func (c *cli) flagSet(name, synopsis, text string) *flag.FlagSet {
	return command.FlagSet(c.stdout, name, synopsis, text)
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
