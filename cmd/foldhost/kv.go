package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/kvlines"
	"github.com/foldhost/foldhost/internal/target"
)

func cmdKV(c *cli, args []string) error {
	fs := c.flagSet("kv", "kv [flags] put KEY [VALUE]\nkv [flags] put < LINES\nkv [flags] get KEY\nkv [flags] del KEY\nkv [flags] watch [PREFIX]", about("kv"))
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
		return usagef("missing action: put, get, del or watch")
	}
	action, rest := pos[0], pos[1:]
	switch {
	case action == "put" && len(rest) <= 2: // none: lines on stdin
	case (action == "get" || action == "del") && len(rest) == 1:
	case action == "watch" && len(rest) <= 1:
	case action == "put", action == "get", action == "del", action == "watch":
		return usagef("wrong number of arguments for %s", action)
	default:
		return usagef("unknown action %q", action)
	}
	if *raw && action != "get" {
		return usagef("--raw applies to get only")
	}
	if *purge && action != "del" {
		return usagef("--purge applies to del only")
	}
	if *updatesOnly && action != "watch" {
		return usagef("--updates-only applies to watch only")
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

	ctx := c.ctx
	w := c.stdout
	if action == "put" && len(rest) == 0 {
		return c.kvPutLines(ctx, nc, bcfg, *timeout, noCreate)
	}
	switch action {
	case "put":
		var value []byte
		if len(rest) == 2 {
			value = []byte(rest[1])
		} else if value, err = io.ReadAll(c.stdin); err != nil {
			return fmt.Errorf("read value from stdin: %w", err)
		}
		b, err := target.PutBucket(ctx, nc, bcfg, *timeout, noCreate, c.stderr)
		if err != nil {
			return err
		}
		rctx, cancel := context.WithTimeout(ctx, *timeout)
		defer cancel()
		rev, err := b.KV().Put(rctx, rest[0], value)
		if err != nil {
			return fmt.Errorf("put %q: %w", rest[0], err)
		}
		return printJSON(w, struct {
			Bucket   string `json:"bucket"`
			Key      string `json:"key"`
			Revision uint64 `json:"revision"`
		}{bcfg.Name, rest[0], rev})
	case "watch":
		kv, err := target.ExistingBucket(ctx, nc, bcfg.Name, *timeout)
		if err != nil {
			return err
		}
		prefix := ""
		if len(rest) == 1 {
			prefix = rest[0]
		}
		return kvlines.Watch(ctx, kv, bcfg.Name, prefix, *updatesOnly, c.stdout, c.stderr)
	}
	kv, err := target.ExistingBucket(ctx, nc, bcfg.Name, *timeout)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	key := rest[0]
	if action == "del" {
		if *purge {
			err = kv.Purge(rctx, key)
		} else {
			err = kv.Delete(rctx, key)
		}
		if err != nil {
			return fmt.Errorf("del %q: %w", key, err)
		}
		return printJSON(w, struct {
			Bucket string `json:"bucket"`
			Key    string `json:"key"`
			Op     string `json:"op"`
		}{bcfg.Name, key, map[bool]string{false: "delete", true: "purge"}[*purge]})
	}
	e, err := kv.Get(rctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return notFoundf("key %q not found in bucket %s", key, bcfg.Name)
	}
	if err != nil {
		return fmt.Errorf("get %q: %w", key, err)
	}
	if *raw {
		_, err := w.Write(e.Value())
		return err
	}
	return printJSON(w, kvlines.EntryOf(bcfg.Name, e))
}

// kvPutLines is `kv put` without KEY: every line of stdin is one write
// (package kvlines).
func (c *cli) kvPutLines(ctx context.Context, nc *nats.Conn, bcfg natskv.BucketConfig, timeout time.Duration, noCreate bool) error {
	b, err := target.PutBucket(ctx, nc, bcfg, timeout, noCreate, c.stderr)
	if err != nil {
		return err
	}
	sum, err := kvlines.PutAll(ctx, b.KV(), bcfg.Name, c.stdin, nc.MaxPayload(), timeout)
	if err != nil {
		return err
	}
	return printJSON(c.stdout, sum)
}
