// Package kvwrite is one write of a KV bucket as a line of text: the
// lines `foldhost kv put` reads from stdin, and the updates of a `foldhost
// plugin test` fixture. A line is KEY=VALUE (split at the first "="), or a
// JSON object with key (or key_b64) and value (or value_b64; a value that
// is not a JSON string is written as its JSON text), as foldhost's own
// listings and `kv watch` print them: their other fields are ignored, and
// an "op" of delete or purge deletes the key. It imports nothing of
// foldhost.
package kvwrite

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

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

// Parse reads one line (not empty); skip: a stream's closing
// {"end":true,…} line.
func Parse(line []byte) (w Write, skip bool, err error) {
	if t := bytes.TrimSpace(line); len(t) > 0 && t[0] == '{' {
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
		key, err := TextOrB64("key", j.Key, j.KeyB64)
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
			v, err := TextOrB64("value", text, j.ValueB64)
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

// TextOrB64 is a field given as text, or in base64 as name_b64 (both:
// they must agree, as in foldhost's listings); nil when neither is.
func TextOrB64(name string, text, b64 *string) ([]byte, error) {
	var fromB64 []byte
	if b64 != nil {
		var err error
		if fromB64, err = DecodeB64(*b64); err != nil {
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

// DecodeB64 decodes base64 in the standard alphabet that foldhost's
// answers use, or the URL-safe one, padded or not. A space is read as
// "+": a query string's decoding turns an unescaped "+" into one, and
// base64 has no spaces.
func DecodeB64(s string) ([]byte, error) {
	s = strings.ReplaceAll(s, " ", "+")
	var err error
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		var b []byte
		if b, err = enc.DecodeString(s); err == nil {
			return b, nil
		}
	}
	return nil, err
}
