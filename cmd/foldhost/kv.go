package main

import (
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/internal/kvlines"
	"github.com/foldhost/foldhost/internal/target"
)

func cmdKV(c *cli, args []string) error {
	fs := c.flagSet("kv", "kv [flags] put KEY [VALUE]\nkv [flags] put < LINES\nkv [flags] get KEY\nkv [flags] del KEY\nkv [flags] ls [PREFIX]\nkv [flags] history KEY\nkv [flags] watch [PREFIX]", about("kv"))
	configPath := fs.String("config", "", "config `file` (server, credentials, bucket)")
	natsURL := fs.String("nats", "", "NATS server `url` (overrides the config)")
	bucketName := fs.String("bucket", "", "bucket `name`")
	foldName := fs.String("fold", "", "use the bucket of the config's fold `name`")
	timeout := fs.Duration("timeout", 10*time.Second, "bound for connecting and for each request (not for watch)")
	raw := fs.Bool("raw", false, "get: print the value's bytes only")
	purge := fs.Bool("purge", false, "del: purge the key (drop its history)")
	updatesOnly := fs.Bool("updates-only", false, "watch: skip current values, print only new updates")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usagef("missing action: put, get, del, ls, history or watch")
	}
	action, rest := pos[0], pos[1:]
	switch {
	case action == "put" && len(rest) <= 2: // none: lines on stdin
	case (action == "get" || action == "del" || action == "history") && len(rest) == 1:
	case (action == "watch" || action == "ls") && len(rest) <= 1:
	case action == "put", action == "get", action == "del", action == "history", action == "watch", action == "ls":
		return usagef("wrong number of arguments for %s", action)
	default:
		return usagef("unknown action %q", action)
	}
	for _, bad := range []struct {
		on  bool
		msg string
	}{{*raw && action != "get", "--raw applies to get only"}, {*purge && action != "del", "--purge applies to del only"},
		{*updatesOnly && action != "watch", "--updates-only applies to watch only"}} {
		if bad.on {
			return usagef("%s", bad.msg)
		}
	}
	var cfg *config.Config
	if *configPath != "" {
		if cfg, err = config.Load(*configPath, c.getenv); err != nil {
			return err
		}
	}
	bcfg, noCreate, err := target.Bucket(cfg, *bucketName, *foldName)
	if err != nil {
		return err
	}
	nc, err := target.Conn(cfg, *natsURL, c.getenv, *timeout)
	if err != nil {
		return err
	}
	defer nc.Close()
	kv := kvlines.Client{NC: nc, Bucket: bcfg, NoCreate: noCreate, Timeout: *timeout, Notice: c.stderr}
	arg := ""
	if len(rest) > 0 {
		arg = rest[0]
	}
	var res any
	switch action {
	case "put":
		if len(rest) == 0 {
			res, err = kv.PutAll(c.ctx, c.stdin)
			break
		}
		var value []byte
		if len(rest) == 2 {
			value = []byte(rest[1])
		} else if value, err = io.ReadAll(c.stdin); err != nil {
			return fmt.Errorf("read value from stdin: %w", err)
		}
		res, err = kv.Put(c.ctx, arg, value)
	case "del":
		res, err = kv.Delete(c.ctx, arg, *purge)
	case "ls":
		return kv.Keys(c.ctx, arg, c.stdout, c.stderr)
	case "history":
		return kv.History(c.ctx, arg, c.stdout)
	case "watch":
		return kv.Watch(c.ctx, arg, *updatesOnly, c.stdout, c.stderr)
	case "get":
		var e jetstream.KeyValueEntry
		if e, err = kv.Get(c.ctx, arg); err == nil && *raw {
			_, err = c.stdout.Write(e.Value())
			return err
		} else if err == nil {
			res = kvlines.EntryOf(bcfg.Name, e)
		}
	}
	if err != nil {
		return err
	}
	return printJSON(c.stdout, res)
}
