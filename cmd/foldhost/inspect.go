package main

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/inspect"
	"github.com/foldhost/foldhost/protocol"
)

const inspectAbout = `Reads a stopped fold's store offline and prints JSON on stdout. Every
answer comes from one snapshot and carries the cursor it reflects.

  cursor              the applied cursor
  get KEY             one raw entry (the value of a NATS key)
  range [PREFIX]      raw entries whose key starts with PREFIX (all by default)
  view get KEY        one plugin view entry
  view range [PREFIX] plugin view entries by prefix
  stats               sizes and exact key counts
  outbox              the plugin effects committed and not yet published:
                      count, first and last ids, the oldest --limit (10)
                      with subject and size

Name the store with --data DIR, or with --config FILE [--fold NAME] (the
fold's data_dir; --fold may be omitted when the config has one fold). The
store must not be in use: a running 'foldhost run' holds its lock.

Byte strings follow the HTTP API's rule: "value" is the text when the bytes
are valid UTF-8 (omitted otherwise), "value_b64" is always the base64.
A missing key exits with code 3.`

func cmdInspect(c *cli, args []string) error {
	fs := c.flagSet("inspect", "inspect (--data DIR | --config FILE [--fold NAME]) cursor | get KEY | range [PREFIX] | view get KEY | view range [PREFIX] | stats | outbox", inspectAbout)
	dataDir := fs.String("data", "", "the fold's data `dir`")
	configPath := fs.String("config", "", "config `file` naming the fold's data dir")
	foldName := fs.String("fold", "", "fold `name` in the config")
	limit := fs.Int("limit", 0, "range: print at most `n` entries (0 = all); outbox: the oldest n (0 = 10)")
	b64 := fs.Bool("b64", false, "KEY and PREFIX are base64 (for binary view keys)")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing action: cursor, get, range, view get, view range, stats or outbox")
	}
	view := pos[0] == "view"
	if view {
		pos = pos[1:]
		if len(pos) == 0 {
			return usagef("missing view action: get or range")
		}
	}
	action, rest := pos[0], pos[1:]
	var arg string
	switch {
	case action == "get" && len(rest) == 1, action == "range" && len(rest) <= 1:
		if len(rest) == 1 {
			arg = rest[0]
		}
	case (action == "cursor" || action == "stats" || action == "outbox") && !view && len(rest) == 0:
	case action == "get":
		return usagef("get takes one KEY")
	case action == "range":
		return usagef("range takes at most one PREFIX")
	default:
		return usagef("unknown action %q", action)
	}
	if *limit < 0 {
		return usagef("--limit must be >= 0")
	}
	if *b64 {
		b, err := base64.StdEncoding.DecodeString(arg)
		if err != nil {
			return usagef("--b64: %q is not base64: %v", arg, err)
		}
		arg = string(b)
	}

	dir, fc, err := c.inspectDir(*dataDir, *configPath, *foldName)
	if err != nil {
		return err
	}
	store, err := host.OpenStopped(dir, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	if errors.Is(err, host.ErrNoStore) {
		return usagef("%v", err)
	}
	if err != nil {
		return err
	}
	defer store.Close()
	sn, err := store.Snapshot()
	if err != nil {
		return err
	}
	defer sn.Close()
	origin, hasOrigin, err := sn.Origin()
	if errors.Is(err, fold.ErrCorrupt) { // still inspectable: it is what an operator needs now
		fmt.Fprintf(c.stderr, "foldhost inspect: WARNING: %v ('foldhost run --adopt FOLD' records the config's)\n", err)
	} else if err != nil {
		return err
	}
	name := ""
	if fc != nil {
		name = fc.Name
		want := fold.NewOrigin(fc.Bucket, fc.Scope, time.Time{})
		if d := origin.Mismatch(want); hasOrigin && d != "" {
			fmt.Fprintf(c.stderr, "foldhost inspect: WARNING: the store in %s is of another source than fold %s (the store's %s): 'run' and 'export' refuse it\n",
				dir, name, d)
		}
	}
	var originOut *fold.Origin
	if hasOrigin {
		originOut = &origin
	}
	w := bufio.NewWriter(c.stdout)
	defer w.Flush()
	cursor := uint64(sn.Cursor().Rev)
	switch {
	case action == "cursor":
		return printJSON(w, inspect.CursorOf(sn, name, dir, originOut))
	case action == "stats":
		st, err := inspect.StatsOf(store, sn, name, dir, originOut)
		if err != nil {
			return err
		}
		return printJSON(w, st)
	case action == "outbox":
		ob, err := inspect.OutboxOf(store, name, dir, cursor, *limit)
		if err != nil {
			return err
		}
		return printJSON(w, ob)
	case action == "get" && !view:
		e, ok, err := sn.Get(arg)
		if err != nil {
			return err
		}
		if !ok {
			return &notFoundError{fmt.Sprintf("key %q not found (cursor %d)", arg, cursor)}
		}
		return printJSON(w, struct {
			Cursor uint64 `json:"cursor"`
			httpapi.RawItem
		}{cursor, httpapi.NewRawItem([]byte(arg), e.Rev, e.Value)})
	case action == "get":
		v, ok, err := sn.ViewGet([]byte(arg))
		if err != nil {
			return err
		}
		if !ok {
			return &notFoundError{fmt.Sprintf("view key %q not found (cursor %d)", arg, cursor)}
		}
		return printJSON(w, struct {
			Cursor uint64 `json:"cursor"`
			httpapi.ViewItem
		}{cursor, httpapi.NewViewItem([]byte(arg), v)})
	}
	// range: streamed, so memory does not grow with the fold.
	rw := httpapi.NewRangeWriter(w, *limit, cursor, arg)
	if view {
		err = sn.ViewRange([]byte(arg), func(k, v []byte) error { return rw.Item(httpapi.NewViewItem(k, v)) })
	} else {
		err = sn.RawRange(arg, func(k []byte, rev protocol.Revision, v []byte) error {
			return rw.Item(httpapi.NewRawItem(k, rev, v))
		})
	}
	if err != nil && !errors.Is(err, httpapi.ErrRangeLimit) {
		return err
	}
	return rw.End()
}

// inspectDir resolves the store directory from the flags, and the fold
// when named through a config.
func (c *cli) inspectDir(dataDir, configPath, foldName string) (string, *config.FoldConfig, error) {
	switch {
	case dataDir != "" && (configPath != "" || foldName != ""):
		return "", nil, usagef("--data and --config/--fold are exclusive")
	case dataDir != "":
		return dataDir, nil, nil
	case configPath == "":
		return "", nil, usagef("name the store with --data DIR or --config FILE")
	}
	cfg, err := config.Load(configPath, c.getenv)
	if err != nil {
		return "", nil, err
	}
	f, err := pickFold(cfg, foldName)
	if err != nil {
		return "", nil, err
	}
	return f.DataDir, &f, nil
}

// pickFold returns the named fold, or the only one when name is empty.
func pickFold(cfg *config.Config, name string) (config.FoldConfig, error) {
	f, err := cfg.Fold(name)
	if err != nil {
		return f, usagef("%v", err)
	}
	return f, nil
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
