// Package command is the machinery of foldhost's CLI commands, apart from
// the commands themselves: a flag set whose help lists the synopsis, the
// text about the command and its flags; flags parsed anywhere among the
// arguments; the error kinds that choose the exit code (usage, not found)
// and that code, with the error printed as the CLI prints it; signals
// turned into a graceful shutdown.
package command

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/config"
)

// Exit codes. Documented in the top-level help and docs/operations.md.
const (
	ExitOK       = 0 // success; `run` shut down cleanly on SIGINT/SIGTERM
	ExitFailure  = 1 // runtime failure: NATS unreachable, a store error, a fold that stopped on an error
	ExitUsage    = 2 // usage or config error: nothing was started
	ExitNotFound = 3 // the key asked for does not exist (inspect get, kv get)
)

// Error kinds that choose the exit code.
type (
	// UsageError is a usage error: exit 2, with a pointer to the help.
	UsageError struct{ Msg string }
	// NotFoundError is a key asked for that does not exist: exit 3.
	NotFoundError struct{ Msg string }
)

func (e *UsageError) Error() string    { return e.Msg }
func (e *NotFoundError) Error() string { return e.Msg }

// Usagef is a usage error.
func Usagef(format string, args ...any) error {
	return &UsageError{fmt.Sprintf(format, args...)}
}

// NotFoundf is a not-found error.
func NotFoundf(format string, args ...any) error {
	return &NotFoundError{fmt.Sprintf(format, args...)}
}

// ExitCode is the exit code of command cmd's result err, which it prints
// to stderr (none for nil or flag.ErrHelp). A usage error (or an invalid
// config: a *config.Error) exits 2, a not-found error 3, anything else 1.
func ExitCode(stderr io.Writer, cmd string, err error) int {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		return ExitOK
	}
	var ue *UsageError
	var ce *config.Error
	var nf *NotFoundError
	switch {
	case errors.As(err, &ue):
		fmt.Fprintf(stderr, "foldhost %s: %v\nRun 'foldhost %s --help' for usage.\n", cmd, err, cmd)
		return ExitUsage
	case errors.As(err, &ce):
		fmt.Fprintf(stderr, "foldhost %s: invalid %v\n", cmd, err)
		return ExitUsage
	case errors.As(err, &nf):
		fmt.Fprintf(stderr, "foldhost %s: %v\n", cmd, err)
		return ExitNotFound
	}
	fmt.Fprintf(stderr, "foldhost %s: %v\n", cmd, err)
	return ExitFailure
}

// FlagSet makes a command's flag set; its usage (--help) goes to w: the
// synopsis lines, about, and the flags.
func FlagSet(w io.Writer, name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("foldhost "+name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {
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

// Parse parses flags anywhere among args (flags may follow positional
// arguments; "--" ends flag parsing) and returns the positional arguments.
// --help prints the usage and returns flag.ErrHelp; a bad flag is a usage
// error, printed alone with where the help is (not the whole help, which
// would bury it).
func Parse(fs *flag.FlagSet, args []string) ([]string, error) {
	usage := fs.Usage
	fs.Usage = func() {} // the flag package calls it on every error
	defer func() { fs.Usage = usage }()
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return nil, err
			}
			return nil, Usagef("%v", err)
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

// WatchSignals turns the first signal of sigs into cancel (the command's
// graceful shutdown, which stderr is told of); a second signal, or the
// shutdown grace (grace's, read then) running out, exits at once with
// ExitFailure (nothing is left half-written: every commit is atomic, and
// what was not committed is folded again after a restart).
func WatchSignals(stderr io.Writer, grace func() time.Duration, sigs <-chan os.Signal, done <-chan struct{}, cancel func(), exit func(int)) {
	var sig os.Signal
	select {
	case sig = <-sigs:
	case <-done:
		return
	}
	cancel()
	g := grace()
	fmt.Fprintf(stderr, "foldhost: %v: shutting down (within %v; a second signal exits at once)\n", sig, g)
	t := time.NewTimer(g)
	defer t.Stop()
	select {
	case sig = <-sigs:
		fmt.Fprintf(stderr, "foldhost: %v again: exiting now\n", sig)
	case <-t.C:
		fmt.Fprintf(stderr, "foldhost: shutdown did not finish within %v (shutdown_grace): exiting now\n", g)
	case <-done:
		return
	}
	exit(ExitFailure)
}
