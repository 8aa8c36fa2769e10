package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// ErrRangeLimit is returned by [RangeWriter.Item] once the limit is
// reached; the range callback passes it on to stop the scan.
var ErrRangeLimit = errors.New("range limit reached")

// RangeWriter streams a range as {"cursor":..,"prefix":..,"prefix_b64":..,"items":[..],
// "count":..,"truncated":..}, one item at a time, so memory does not grow
// with the range (the server's responses are bounded by MaxLimit and built
// whole; offline readers such as inspect use this).
type RangeWriter struct {
	w         io.Writer
	limit     int
	count     int
	truncated bool
	err       error
}

// NewRangeWriter writes the range's head to w; limit 0 means no limit.
func NewRangeWriter(w io.Writer, limit int, cursor uint64, prefix string) *RangeWriter {
	r := &RangeWriter{w: w, limit: limit}
	text, b64 := Bytes([]byte(prefix))
	head := fmt.Sprintf("{\n  \"cursor\": %d,\n", cursor)
	if text != nil {
		p, _ := Compact(*text)
		head += fmt.Sprintf("  \"prefix\": %s,\n", p)
	}
	_, r.err = fmt.Fprintf(r.w, "%s  \"prefix_b64\": %q,\n  \"items\": [", head, b64)
	return r
}

// Item writes one item, or returns ErrRangeLimit when the limit is reached.
func (r *RangeWriter) Item(v any) error {
	if r.err != nil {
		return r.err
	}
	if r.limit > 0 && r.count == r.limit {
		r.truncated = true
		return ErrRangeLimit
	}
	b, err := Compact(v)
	if err != nil {
		return err
	}
	sep := ",\n    "
	if r.count == 0 {
		sep = "\n    "
	}
	r.count++
	_, r.err = fmt.Fprintf(r.w, "%s%s", sep, b)
	return r.err
}

// End closes the document, recording the count and whether it was cut.
func (r *RangeWriter) End() error {
	if r.err != nil {
		return r.err
	}
	closing := "]"
	if r.count > 0 {
		closing = "\n  ]"
	}
	_, err := fmt.Fprintf(r.w, "%s,\n  \"count\": %d,\n  \"truncated\": %t\n}\n", closing, r.count, r.truncated)
	return err
}

// Compact is json.Marshal without HTML escaping.
func Compact(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(b.Bytes(), "\n"), nil
}
