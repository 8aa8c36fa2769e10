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
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/kvlines"
)

const kvAbout = `Writes and reads a NATS KV bucket, so test data can be made with foldhost
alone. Prints JSON on stdout (watch: one JSON object per line).

  put KEY [VALUE]   write VALUE (read from stdin when omitted); creates the
                    bucket if missing (with the fold's create_bucket settings,
                    saying so on stderr; not when it is create_bucket = false)
  put               write many keys, one per line of stdin: KEY=VALUE (split
                    at the first "="), or NDJSON {"key":…,"value":…} (or
                    key_b64, value_b64; "op":"delete" deletes), as kv watch
                    and the HTTP API's listings print them; prints the count
  get KEY           read the current value (--raw: the bytes only); exit 3
                    when the key does not exist
  del KEY           delete the key (--purge: also drop its history)
  watch [PREFIX]    print current values, then updates, until interrupted;
                    PREFIX is a whole-token prefix such as "route."

The server: --nats URL; else the config's nats.url (--config FILE); with an
embedded config, nats://<nats.embedded_listen>. The embedded server lives only
while 'foldhost run' runs, so start 'run' first. Without --nats and --config:
$FOLDHOST_NATS_URL, else nats://127.0.0.1:4222. Credentials come from the
config, or from $FOLDHOST_NATS_CREDS / $FOLDHOST_NATS_CREDS_FILE.

The bucket: --bucket NAME; else the bucket of --fold NAME, or of the only
fold in the config.`

func cmdKV(c *cli, args []string) error {
	fs := c.flagSet("kv", "kv [flags] put KEY [VALUE]\nkv [flags] put < LINES\nkv [flags] get KEY\nkv [flags] del KEY\nkv [flags] watch [PREFIX]", kvAbout)
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
	bcfg, noCreate, err := kvBucket(cfg, *bucketName, *foldName)
	if err != nil {
		return err
	}
	nc, err := c.clientConn(cfg, *natsURL, *timeout)
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
		b, err := c.openPutBucket(ctx, nc, bcfg, *timeout, noCreate)
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
		kv, err := existingBucket(ctx, nc, bcfg.Name, *timeout)
		if err != nil {
			return err
		}
		prefix := ""
		if len(rest) == 1 {
			prefix = rest[0]
		}
		return kvWatch(ctx, c, kv, bcfg.Name, prefix, *updatesOnly)
	}
	kv, err := existingBucket(ctx, nc, bcfg.Name, *timeout)
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
		return &notFoundError{fmt.Sprintf("key %q not found in bucket %s", key, bcfg.Name)}
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

func kvWatch(ctx context.Context, c *cli, kv jetstream.KeyValue, bucket, prefix string, updatesOnly bool) error {
	filter := ">"
	if prefix != "" {
		if err := (natskv.Scope{Prefixes: []string{prefix}}).Validate(); err != nil {
			return usagef("%v", err)
		}
		filter = prefix + ">"
	}
	var opts []jetstream.WatchOpt
	if updatesOnly {
		opts = append(opts, jetstream.UpdatesOnly())
	}
	kw, err := kv.Watch(ctx, filter, opts...)
	if err != nil {
		return fmt.Errorf("watch %s: %w", bucket, err)
	}
	defer kw.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case e, ok := <-kw.Updates():
			if !ok {
				if ctx.Err() != nil {
					return nil
				}
				return errors.New("watch ended: the connection closed")
			}
			if e == nil {
				fmt.Fprintln(c.stderr, "foldhost kv watch: current values done; watching for updates (Ctrl-C to stop)")
				continue
			}
			b, err := httpapi.Compact(kvlines.EntryOf(bucket, e))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(c.stdout, "%s\n", b); err != nil {
				return err
			}
		}
	}
}

// kvBucket picks the bucket (how to create it, and whether its fold's
// create_bucket = false forbids that) from the flags and the config.
// openPutBucket opens the bucket a put writes to: created when missing
// (saying so on stderr, with the settings), unless noCreate (its fold's
// create_bucket = false).
func (c *cli) openPutBucket(ctx context.Context, nc *nats.Conn, bcfg natskv.BucketConfig, timeout time.Duration, noCreate bool) (*natskv.Bucket, error) {
	b, err := natskv.OpenBucket(ctx, nc, bcfg, natskv.Options{RequestTimeout: timeout, NoCreate: noCreate})
	if errors.Is(err, natskv.ErrNoBucket) {
		return nil, fmt.Errorf("bucket %q does not exist, and its fold's create_bucket = false: put creates it neither", bcfg.Name)
	}
	if err != nil {
		return nil, err
	}
	if b.Created() {
		fmt.Fprintf(c.stderr, "foldhost kv: bucket %q did not exist: created it (history %d, max_age %v, max_bytes %d, replicas %d, memory %v, limit_marker_ttl %v)\n",
			bcfg.Name, bcfg.History, bcfg.MaxAge, bcfg.MaxBytes, bcfg.Replicas, bcfg.Memory, bcfg.LimitMarkerTTL)
	}
	return b, nil
}

func kvBucket(cfg *config.Config, bucket, foldName string) (natskv.BucketConfig, bool, error) {
	switch {
	case bucket != "" && foldName != "":
		return natskv.BucketConfig{}, false, usagef("--bucket and --fold are exclusive")
	case bucket != "":
		if !config.ValidBucket(bucket) {
			return natskv.BucketConfig{}, false, usagef("%q is not a valid bucket name (A-Z a-z 0-9 _ -)", bucket)
		}
		if cfg != nil {
			for _, f := range cfg.Folds {
				if f.Bucket == bucket {
					return f.CreateBucket, f.NoCreateBucket, nil
				}
			}
		}
		return natskv.BucketConfig{Name: bucket, History: 1, Replicas: 1}, false, nil
	case cfg == nil:
		return natskv.BucketConfig{}, false, usagef("name the bucket with --bucket NAME (or --config FILE [--fold NAME])")
	}
	f, err := pickFold(cfg, foldName)
	if err != nil {
		return natskv.BucketConfig{}, false, err
	}
	return f.CreateBucket, f.NoCreateBucket, nil
}

// existingBucket opens a bucket without creating it.
func existingBucket(ctx context.Context, nc *nats.Conn, name string, timeout time.Duration) (jetstream.KeyValue, error) {
	kv, err := natskv.OpenExisting(ctx, nc, name, timeout)
	if errors.Is(err, natskv.ErrNoBucket) {
		return nil, fmt.Errorf("bucket %q does not exist (kv put creates it; so does 'foldhost run')", name)
	}
	return kv, err
}

// kvPutLines is `kv put` without KEY: every line of stdin is one write
// (package kvlines).
func (c *cli) kvPutLines(ctx context.Context, nc *nats.Conn, bcfg natskv.BucketConfig, timeout time.Duration, noCreate bool) error {
	b, err := c.openPutBucket(ctx, nc, bcfg, timeout, noCreate)
	if err != nil {
		return err
	}
	sum, err := kvlines.PutAll(ctx, b.KV(), bcfg.Name, c.stdin, nc.MaxPayload(), timeout)
	if err != nil {
		return err
	}
	return printJSON(c.stdout, sum)
}
