package abi

import (
	"fmt"
	"unicode/utf8"
)

// OutputWriter builds an output record in a reusable buffer (guest side).
type OutputWriter struct {
	buf      []byte
	rejected uint32
	n        uint32
}

// Reset starts a new ok output, keeping the buffer's capacity.
func (w *OutputWriter) Reset() {
	w.buf = append(w.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	w.rejected, w.n = 0, 0
}

func (w *OutputWriter) ensure() {
	if len(w.buf) < 12 {
		w.Reset()
	}
}

// Put appends a view put.
func (w *OutputWriter) Put(key, value []byte) {
	w.ensure()
	w.buf = append(w.buf, MutPut)
	w.buf = appendBytes(w.buf, key)
	w.buf = appendBytes(w.buf, value)
	w.n++
}

// Delete appends a view delete.
func (w *OutputWriter) Delete(key []byte) {
	w.ensure()
	w.buf = append(w.buf, MutDelete)
	w.buf = appendBytes(w.buf, key)
	w.n++
}

// Reject counts one rejected update.
func (w *OutputWriter) Reject() { w.rejected++ }

// Bytes returns the ok output record; valid until the next call.
func (w *OutputWriter) Bytes() []byte {
	w.ensure()
	le.PutUint32(w.buf[0:], StatusOK)
	le.PutUint32(w.buf[4:], w.rejected)
	le.PutUint32(w.buf[8:], w.n)
	return w.buf
}

// Error replaces the output with an error record carrying msg and returns it.
func (w *OutputWriter) Error(msg string) []byte {
	w.buf = le.AppendUint32(w.buf[:0], StatusError)
	w.buf = appendString(w.buf, msg)
	w.rejected, w.n = 0, 0
	return w.buf
}

// GuestError is a plugin's own status-1 report.
type GuestError struct {
	Message string
	// Size is the message's length as the plugin sent it, when Message
	// is a cut of it (DecodeOutputBounded); 0 when Message is whole.
	Size int
}

func (e *GuestError) Error() string {
	if e.Size > 0 {
		return fmt.Sprintf("plugin reported (a message of %d bytes, cut): %s…", e.Size, e.Message)
	}
	return "plugin reported: " + e.Message
}

// DecodeOutput decodes an output record (host side), calling fn for each
// mutation in order; key and value alias b. It returns the rejected count, a
// *GuestError for a status-1 record, or an error wrapping ErrMalformed. A
// non-nil error from fn stops decoding and is returned.
func DecodeOutput(b []byte, fn func(op byte, key, value []byte) error) (rejected int, err error) {
	return DecodeOutputBounded(b, -1, fn)
}

// DecodeOutputBounded is DecodeOutput whose *GuestError keeps at most
// maxMessage bytes of the plugin's message (cut at a rune boundary; a
// negative maxMessage keeps it whole): the rest is never copied out of b.
func DecodeOutputBounded(b []byte, maxMessage int, fn func(op byte, key, value []byte) error) (rejected int, err error) {
	r := reader{b: b}
	switch st := r.u32(); {
	case r.err != nil:
		return 0, r.err
	case st == StatusError:
		msg := r.bytes()
		r.end()
		if r.err != nil {
			return 0, r.err
		}
		if maxMessage >= 0 && len(msg) > maxMessage {
			return 0, &GuestError{Message: string(cutRunes(msg[:maxMessage])), Size: len(msg)}
		}
		return 0, &GuestError{Message: string(msg)}
	case st != StatusOK:
		return 0, fmt.Errorf("%w: unknown status %d", ErrMalformed, st)
	}
	rej := r.u32()
	n := r.count(1 + 4)
	for i := 0; i < n && r.err == nil; i++ {
		op := r.u8()
		key := r.bytes()
		var val []byte
		switch {
		case r.err != nil:
		case op == MutPut:
			val = r.bytes()
		case op != MutDelete:
			r.fail(fmt.Sprintf("unknown mutation op %d", op))
		}
		if r.err == nil {
			if err := fn(op, key, val); err != nil {
				return 0, err
			}
		}
	}
	r.end()
	if r.err != nil {
		return 0, r.err
	}
	return int(rej), nil
}

// cutRunes drops the incomplete rune, if any, that a cut left at the end
// of b (at most utf8.UTFMax-1 bytes; invalid bytes elsewhere stay).
func cutRunes(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if c := b[len(b)-i]; c < utf8.RuneSelf {
			return b
		} else if utf8.RuneStart(c) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			return b
		}
	}
	return b
}
