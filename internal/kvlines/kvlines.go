// Package kvlines is the lines `foldhost kv` reads and prints: watch's
// entries, one JSON object per line, and the lines put writes from stdin,
// one write each, in one process and one connection (a process per key took
// 21 s for 1,000 keys). A line is KEY=VALUE (split at the first "="), or a
// JSON object with key (or key_b64) and value (or value_b64; a value that
// is not a JSON string is written as its JSON text), as foldhost's own
// listings and `kv watch` print them: their other fields are ignored, an
// "op" of delete or purge deletes the key, and a stream's closing
// {"end":true,…} line is skipped. Empty lines are skipped. The first line
// that fails stops it, named with its number.
package kvlines

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/command"
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
		w, skip, err := Parse(line)
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

// Write is one line's write: a put of Value, or Op "delete" or "purge".
type Write struct {
	Key   string
	Value []byte
	Op    string
}

// Verb names the write: put, delete or purge.
func (w Write) Verb() string {
	if w.Op == "" {
		return "put"
	}
	return w.Op
}

// Parse reads one line; skip: a stream's end line.
func Parse(line []byte) (w Write, skip bool, err error) {
	if t := bytes.TrimSpace(line); t[0] == '{' {
		var j struct {
			Key      *string         `json:"key"`
			KeyB64   *string         `json:"key_b64"`
			Value    json.RawMessage `json:"value"`
			ValueB64 *string         `json:"value_b64"`
			Op       string          `json:"op"`
			End      bool            `json:"end"`
		}
		if err := json.Unmarshal(t, &j); err != nil {
			return w, false, fmt.Errorf("not a JSON object: %w", err)
		}
		if j.End && j.Key == nil && j.KeyB64 == nil {
			return w, true, nil
		}
		key, err := textOrB64("key", j.Key, j.KeyB64)
		if err != nil {
			return w, false, err
		}
		if key == nil {
			return w, false, errors.New(`no "key" or "key_b64"`)
		}
		w.Key = string(key)
		switch j.Op {
		case "", "put":
			var text *string
			if len(j.Value) > 0 && string(j.Value) != "null" {
				s := string(j.Value) // an object, array, number or boolean: its JSON text
				if j.Value[0] == '"' {
					if err := json.Unmarshal(j.Value, &s); err != nil {
						return w, false, fmt.Errorf("value: %w", err)
					}
				}
				text = &s
			}
			v, err := textOrB64("value", text, j.ValueB64)
			if err != nil {
				return w, false, err
			}
			if v == nil {
				return w, false, errors.New(`no "value" or "value_b64"`)
			}
			w.Value = v
		case "delete", "purge":
			w.Op = j.Op
		default:
			return w, false, fmt.Errorf(`op %q: want put, delete or purge`, j.Op)
		}
		return w, false, nil
	}
	k, v, ok := bytes.Cut(line, []byte("="))
	if !ok || len(k) == 0 {
		return w, false, errors.New(`want KEY=VALUE or a JSON object {"key":…,"value":…}`)
	}
	return Write{Key: string(k), Value: v}, false, nil
}

// textOrB64 is a field given as text, or in base64 as name_b64 (both:
// they must agree, as in foldhost's listings); nil when neither is.
func textOrB64(name string, text, b64 *string) ([]byte, error) {
	var fromB64 []byte
	if b64 != nil {
		var err error
		if fromB64, err = httpapi.DecodeB64(*b64); err != nil {
			return nil, fmt.Errorf("%s_b64 is not base64: %w", name, err)
		}
	}
	switch {
	case text != nil && b64 != nil && *text != string(fromB64):
		return nil, fmt.Errorf("%s and %s_b64 differ", name, name)
	case text != nil:
		return []byte(*text), nil
	}
	return fromB64, nil
}

// Watch prints the current values of kv (bucket) under prefix (a
// whole-token prefix such as "route."; empty: all), unless updatesOnly,
// then its updates, one JSON object (an Entry) per line to out, until ctx
// ends; the end of the current values is told on stderr.
func Watch(ctx context.Context, kv jetstream.KeyValue, bucket, prefix string, updatesOnly bool, out, stderr io.Writer) error {
	filter := ">"
	if prefix != "" {
		if err := (natskv.Scope{Prefixes: []string{prefix}}).Validate(); err != nil {
			return command.Usagef("%v", err)
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
				fmt.Fprintln(stderr, "foldhost kv watch: current values done; watching for updates (Ctrl-C to stop)")
				continue
			}
			b, err := httpapi.Compact(EntryOf(bucket, e))
			if err != nil {
				return err
			}
			if _, err := fmt.Fprintf(out, "%s\n", b); err != nil {
				return err
			}
		}
	}
}
