package kvlines

import (
	"context"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
)

// Client is what `foldhost kv` acts on: a bucket on a connection.
type Client struct {
	NC     *nats.Conn
	Bucket natskv.BucketConfig // the bucket; how put creates it when missing
	// NoCreate: its fold's create_bucket = false (put creates it neither).
	NoCreate bool
	Timeout  time.Duration // each request
	Notice   io.Writer     // where a creation is told
}

// Written is what put and del print: the revision written (a delete's is
// its marker's), for a read-your-writes read (?min_revision=).
type Written struct {
	Bucket   string `json:"bucket"`
	Key      string `json:"key"`
	Op       string `json:"op,omitempty"`
	Revision uint64 `json:"revision"`
}

// Put writes value under key, creating the bucket when missing (c.Bucket's
// settings, told on c.Notice) unless c.NoCreate.
func (c Client) Put(ctx context.Context, key string, value []byte) (Written, error) {
	b, err := c.forPut(ctx)
	if err != nil {
		return Written{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	rev, err := b.KV().Put(rctx, key, value)
	if err != nil {
		return Written{}, fmt.Errorf("put %q: %w", key, err)
	}
	return Written{Bucket: c.Bucket.Name, Key: key, Revision: rev}, nil
}

// PutAll writes every line of r (PutAll), creating the bucket as Put does.
func (c Client) PutAll(ctx context.Context, r io.Reader) (Summary, error) {
	b, err := c.forPut(ctx)
	if err != nil {
		return Summary{}, err
	}
	return PutAll(ctx, b.KV(), c.Bucket.Name, r, c.NC.MaxPayload(), c.Timeout)
}

// Get reads key's current entry (a command.NotFoundError when it has none).
func (c Client) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	kv, err := c.existing(ctx)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	e, err := kv.Get(rctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, command.NotFoundf("key %q not found in bucket %s", key, c.Bucket.Name)
	}
	if err != nil {
		return nil, fmt.Errorf("get %q: %w", key, err)
	}
	return e, nil
}

// Delete deletes key (purge: drops its history too) and returns the
// revision of the delete marker. It publishes the marker itself, as the
// KV client does, to get that revision, which the client's Delete drops.
func (c Client) Delete(ctx context.Context, key string, purge bool) (Written, error) {
	if _, err := c.existing(ctx); err != nil {
		return Written{}, err
	}
	if !validKey(key) {
		return Written{}, fmt.Errorf("del %q: %w", key, jetstream.ErrInvalidKey)
	}
	m := nats.NewMsg("$KV." + c.Bucket.Name + "." + key)
	op := "delete"
	m.Header.Set("KV-Operation", "DEL")
	if purge {
		op = "purge"
		m.Header.Set("KV-Operation", "PURGE")
		m.Header.Set(jetstream.MsgRollup, jetstream.MsgRollupSubject)
	}
	js, err := jetstream.New(c.NC)
	if err != nil {
		return Written{}, err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	ack, err := js.PublishMsg(rctx, m, jetstream.WithExpectStream("KV_"+c.Bucket.Name))
	if err != nil {
		return Written{}, fmt.Errorf("del %q: %w", key, err)
	}
	return Written{Bucket: c.Bucket.Name, Key: key, Op: op, Revision: ack.Sequence}, nil
}

// validKeyRe and validKey are the KV client's key rule (jetstream's
// keyValid), which its Delete checks.
var validKeyRe = regexp.MustCompile(`^[-/_=.a-zA-Z0-9]+$`)

func validKey(key string) bool {
	return key != "" && key[0] != '.' && key[len(key)-1] != '.' && !strings.Contains(key, "..") && validKeyRe.MatchString(key)
}

// Keys prints the keys of the bucket under prefix (a whole-token prefix
// such as "route."; empty: all), one per line, as `nats kv ls BUCKET`
// does for keys; how many went to stderr.
func (c Client) Keys(ctx context.Context, prefix string, out, stderr io.Writer) error {
	kv, err := c.existing(ctx)
	if err != nil {
		return err
	}
	filter, err := filterOf(prefix)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	l, err := kv.ListKeysFiltered(rctx, filter)
	if err != nil {
		return fmt.Errorf("list the keys of %s: %w", c.Bucket.Name, err)
	}
	n := 0
	for k := range l.Keys() {
		n++
		if _, err := fmt.Fprintln(out, k); err != nil {
			_ = l.Stop()
			return err
		}
	}
	if err := rctx.Err(); err != nil {
		return fmt.Errorf("list the keys of %s: %w (%d listed)", c.Bucket.Name, err, n)
	}
	fmt.Fprintf(stderr, "foldhost kv ls: %d keys in bucket %s\n", n, c.Bucket.Name)
	return nil
}

// History prints every revision the bucket keeps of key (its history
// setting), oldest first, one JSON object (an Entry) per line, as kv
// watch prints them.
func (c Client) History(ctx context.Context, key string, out io.Writer) error {
	kv, err := c.existing(ctx)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, c.Timeout)
	defer cancel()
	es, err := kv.History(rctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return command.NotFoundf("key %q has no history in bucket %s", key, c.Bucket.Name)
	}
	if err != nil {
		return fmt.Errorf("history of %q: %w", key, err)
	}
	for _, e := range es {
		if err := printLine(out, EntryOf(c.Bucket.Name, e)); err != nil {
			return err
		}
	}
	return nil
}

// Watch is Watch on the bucket.
func (c Client) Watch(ctx context.Context, prefix string, updatesOnly bool, out, stderr io.Writer) error {
	kv, err := c.existing(ctx)
	if err != nil {
		return err
	}
	return Watch(ctx, kv, c.Bucket.Name, prefix, updatesOnly, out, stderr)
}

// existing opens the bucket without creating it.
func (c Client) existing(ctx context.Context) (jetstream.KeyValue, error) {
	kv, err := natskv.OpenExisting(ctx, c.NC, c.Bucket.Name, c.Timeout)
	if nb := (*natskv.NoBucketError)(nil); errors.As(err, &nb) {
		return nil, fmt.Errorf("bucket %q does not exist%s (kv put creates it; so does 'foldhost run')", nb.Name, nb.Hint())
	}
	return kv, err
}

// forPut opens the bucket a put writes to: created when missing (told on
// c.Notice, with the settings), unless c.NoCreate.
func (c Client) forPut(ctx context.Context) (*natskv.Bucket, error) {
	bcfg := c.Bucket
	b, err := natskv.OpenBucket(ctx, c.NC, bcfg, natskv.Options{RequestTimeout: c.Timeout, NoCreate: c.NoCreate})
	if nb := (*natskv.NoBucketError)(nil); errors.As(err, &nb) {
		return nil, fmt.Errorf("bucket %q does not exist%s, and its fold's create_bucket = false: put creates it neither", nb.Name, nb.Hint())
	}
	if err != nil {
		return nil, err
	}
	if b.Created() {
		fmt.Fprintf(c.Notice, "foldhost kv: bucket %q did not exist: created it (history %d, max_age %v, max_bytes %d, replicas %d, memory %v, limit_marker_ttl %v)\n",
			bcfg.Name, bcfg.History, bcfg.MaxAge, bcfg.MaxBytes, bcfg.Replicas, bcfg.Memory, bcfg.LimitMarkerTTL)
		if near := b.NearBucket(); near != "" {
			fmt.Fprintf(c.Notice, "foldhost kv: the server has a bucket %q: did you mean it?\n", near)
		}
	}
	return b, nil
}
