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

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/internal/inspect"
	"github.com/foldhost/foldhost/internal/target"
)

func cmdInspect(c *cli, args []string) error {
	fs := c.flagSet("inspect", "inspect (--data DIR | --config FILE [--fold NAME]) cursor | get KEY | range [PREFIX] | view get KEY | view range [PREFIX] | stats | outbox", about("inspect"))
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

	dir, fc, err := target.StoreDir(*dataDir, *configPath, *foldName, c.getenv)
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
	originOut, warnings, err := inspect.Origin(sn, fc, dir)
	if err != nil {
		return err
	}
	for _, w := range warnings {
		fmt.Fprintf(c.stderr, "foldhost inspect: WARNING: %s\n", w)
	}
	name := ""
	if fc != nil {
		name = fc.Name
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
		e, ok, err := inspect.Get(sn, arg)
		if err == nil && !ok {
			err = notFoundf("key %q not found (cursor %d)", arg, cursor)
		}
		if err != nil {
			return err
		}
		return printJSON(w, e)
	case action == "get":
		e, ok, err := inspect.ViewGet(sn, arg)
		if err == nil && !ok {
			err = notFoundf("view key %q not found (cursor %d)", arg, cursor)
		}
		if err != nil {
			return err
		}
		return printJSON(w, e)
	}
	return inspect.Range(w, sn, view, arg, *limit)
}

func printJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}
