// Package kvlines is the lines `foldhost kv` reads and prints: watch's
// entries, one JSON object per line, and the lines put writes from stdin,
// one write each (package kvwrite), in one process and one connection (a
// process per key took 21 s for 1,000 keys). A stream's closing
// {"end":true,…} line is skipped, and so are empty lines. The first line
// that fails stops it, named with its number.
package kvlines

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
	"github.com/foldhost/foldhost/internal/kvwrite"
	"github.com/foldhost/foldhost/protocol"
)

// Entry is a KV entry as kv get and kv watch print it (and as Parse
// reads it back).
type Entry struct {
	Bucket  string `json:"bucket"`
	Op      string `json:"op"`
	Created string `json:"created"`
	httpapi.RawItem
}

// EntryOf is e of bucket as an Entry.
func EntryOf(bucket string, e jetstream.KeyValueEntry) Entry {
	return Entry{bucket, natskv.OpOf(e.Operation()).String(), e.Created().UTC().Format(time.RFC3339Nano),
		httpapi.NewRawItem([]byte(e.Key()), protocol.Revision(e.Revision()), e.Value())}
}

// Summary is what PutAll wrote.
type Summary struct {
	Bucket       string `json:"bucket"`
	Put          int    `json:"put"`
	Deleted      int    `json:"deleted"`
	LastRevision uint64 `json:"last_revision,omitempty"`
}

// PutAll writes every line of r to kv (bucket), each request bounded by
// timeout. A line holds at most one value, which NATS bounds by its max
// payload (maxPayload): in base64 inside JSON, 4/3 of it plus the key and
// the syntax. The summary counts what was written before an error.
func PutAll(ctx context.Context, kv jetstream.KeyValue, bucket string, r io.Reader, maxPayload int64, timeout time.Duration) (Summary, error) {
	maxLine := int(maxPayload)*4/3 + 64<<10
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	sum := Summary{Bucket: bucket}
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		w, skip, err := kvwrite.Parse(line)
		if err != nil {
			return sum, fmt.Errorf("stdin line %d: %w (%d lines written before it)", n, err, sum.Put+sum.Deleted)
		}
		if skip {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		switch w.Op {
		case "delete":
			err = kv.Delete(rctx, w.Key)
		case "purge":
			err = kv.Purge(rctx, w.Key)
		default:
			var rev uint64
			if rev, err = kv.Put(rctx, w.Key, w.Value); err == nil {
				sum.LastRevision = rev
			}
		}
		cancel()
		if err != nil {
			return sum, fmt.Errorf("stdin line %d: %s %q: %w (%d lines written before it)", n, w.Verb(), w.Key, err, sum.Put+sum.Deleted)
		}
		if w.Op == "" {
			sum.Put++
		} else {
			sum.Deleted++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes (the server's max payload %d, in base64, plus the key)", maxLine, maxPayload)
		}
		return sum, fmt.Errorf("stdin line %d: %w (%d lines written before it)", n+1, err, sum.Put+sum.Deleted)
	}
	return sum, nil
}

// Watch prints the current values of kv (bucket) under prefix (a
// whole-token prefix such as "route."; empty: all), unless updatesOnly,
// then its updates, one JSON object (an Entry) per line to out, until ctx
// ends; the end of the current values is told on stderr.
func Watch(ctx context.Context, kv jetstream.KeyValue, bucket, prefix string, updatesOnly bool, out, stderr io.Writer) error {
	filter, err := filterOf(prefix)
	if err != nil {
		return err
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
				fmt.Fprintln(stderr, "foldhost kv watch: current values done; watching for updates (Ctrl-C to stop)")
				continue
			}
			if err := printLine(out, EntryOf(bucket, e)); err != nil {
				return err
			}
		}
	}
}

// filterOf is the subject filter of the keys under prefix (a whole-token
// prefix such as "route."; empty: every key).
func filterOf(prefix string) (string, error) {
	if prefix == "" {
		return ">", nil
	}
	if err := (natskv.Scope{Prefixes: []string{prefix}}).Validate(); err != nil {
		return "", command.Usagef("%v", err)
	}
	return prefix + ">", nil
}

// printLine prints e as one compact JSON line.
func printLine(out io.Writer, e Entry) error {
	b, err := httpapi.Compact(e)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}
