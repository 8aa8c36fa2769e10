package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// kvPutLines is `kv put` without KEY: every line of stdin is one write, in
// one process and one connection (a process per key took 21 s for 1,000
// keys). A line is KEY=VALUE (split at the first "="), or a JSON object
// with key (or key_b64) and value (or value_b64; a value that is not a
// JSON string is written as its JSON text), as foldhost's own listings and
// `kv watch` print them: their other fields are ignored, an
// "op" of delete or purge deletes the key, and a stream's closing
// {"end":true,…} line is skipped. Empty lines are skipped. The first line
// that fails stops it, named with its number.
func (c *cli) kvPutLines(ctx context.Context, nc *nats.Conn, bcfg natskv.BucketConfig, timeout time.Duration, noCreate bool) error {
	b, err := c.openPutBucket(ctx, nc, bcfg, timeout, noCreate)
	if err != nil {
		return err
	}
	kv := b.KV()
	// A line holds at most one value, which NATS bounds by its max payload:
	// in base64 inside JSON, 4/3 of it plus the key and the syntax.
	maxLine := int(nc.MaxPayload())*4/3 + 64<<10
	sc := bufio.NewScanner(c.stdin)
	sc.Buffer(make([]byte, 0, 64<<10), maxLine)
	var sum struct {
		Bucket       string `json:"bucket"`
		Put          int    `json:"put"`
		Deleted      int    `json:"deleted"`
		LastRevision uint64 `json:"last_revision,omitempty"`
	}
	sum.Bucket = bcfg.Name
	n := 0
	for sc.Scan() {
		n++
		line := bytes.TrimSuffix(sc.Bytes(), []byte("\r"))
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		w, skip, err := parseKVLine(line)
		if err != nil {
			return fmt.Errorf("stdin line %d: %w (%d lines written before it)", n, err, sum.Put+sum.Deleted)
		}
		if skip {
			continue
		}
		rctx, cancel := context.WithTimeout(ctx, timeout)
		switch w.op {
		case "delete":
			err = kv.Delete(rctx, w.key)
		case "purge":
			err = kv.Purge(rctx, w.key)
		default:
			var rev uint64
			if rev, err = kv.Put(rctx, w.key, w.value); err == nil {
				sum.LastRevision = rev
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("stdin line %d: %s %q: %w (%d lines written before it)", n, w.verb(), w.key, err, sum.Put+sum.Deleted)
		}
		if w.op == "" {
			sum.Put++
		} else {
			sum.Deleted++
		}
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			err = fmt.Errorf("longer than %d bytes (the server's max payload %d, in base64, plus the key)", maxLine, nc.MaxPayload())
		}
		return fmt.Errorf("stdin line %d: %w (%d lines written before it)", n+1, err, sum.Put+sum.Deleted)
	}
	return printJSON(c.stdout, sum)
}

// kvWrite is one line's write: a put of value, or op "delete" or "purge".
type kvWrite struct {
	key   string
	value []byte
	op    string
}

func (w kvWrite) verb() string {
	if w.op == "" {
		return "put"
	}
	return w.op
}

// parseKVLine reads one line of `kv put`'s input; skip: a stream's end line.
func parseKVLine(line []byte) (w kvWrite, skip bool, err error) {
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
		w.key = string(key)
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
			w.value = v
		case "delete", "purge":
			w.op = j.Op
		default:
			return w, false, fmt.Errorf(`op %q: want put, delete or purge`, j.Op)
		}
		return w, false, nil
	}
	k, v, ok := bytes.Cut(line, []byte("="))
	if !ok || len(k) == 0 {
		return w, false, errors.New(`want KEY=VALUE or a JSON object {"key":…,"value":…}`)
	}
	return kvWrite{key: string(k), value: v}, false, nil
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
