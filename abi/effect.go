package abi

import (
	"bytes"
	"fmt"
)

// MaxSubjectBytes caps an effect's subject (a NATS server refuses control
// lines over 4 KiB by default; a subject this long is a bug, not a design).
const MaxSubjectBytes = 1024

// Reserved header name prefixes (case-insensitive): the host sets the
// Nats-* headers (the message id, and later the fence), and Foldhost-*
// is kept for the host's own. A plugin's effect that sets one is
// malformed output.
var reservedHeaderPrefixes = []string{"nats-", "foldhost-"}

// Header is one header of an effect.
type Header struct{ Name, Value []byte }

// Effect is one message a plugin emits with its batch output (ABI minor 1).
// A decoded Effect aliases the output record, and its Headers slice is
// reused by the decoder: valid during the callback only.
type Effect struct {
	// Update is the index, in the batch the plugin was given, of the
	// update the effect derives from (a status-3 record); -1 in a status-2
	// record, whose effects belong to the batch as a whole.
	Update  int
	Subject []byte
	Headers []Header
	Payload []byte
}

// Size is what the host counts against its per-effect bound: the subject,
// every header's name and value, and the payload.
func (e *Effect) Size() int {
	n := len(e.Subject) + len(e.Payload)
	for _, h := range e.Headers {
		n += len(h.Name) + len(h.Value)
	}
	return n
}

// ValidSubject checks a subject an effect may be published to: non-empty, at
// most MaxSubjectBytes, tokens separated by '.', no empty token, no
// wildcard character ('*' or '>', anywhere: an effect names one subject), no
// whitespace or control character, and no DEL.
func ValidSubject(s []byte) error {
	switch {
	case len(s) == 0:
		return fmt.Errorf("empty subject")
	case len(s) > MaxSubjectBytes:
		return fmt.Errorf("subject of %d bytes (at most %d)", len(s), MaxSubjectBytes)
	case s[0] == '.' || s[len(s)-1] == '.' || bytes.Contains(s, []byte("..")):
		return fmt.Errorf("subject %q has an empty token", s)
	}
	for _, c := range s {
		switch {
		case c == '*' || c == '>':
			return fmt.Errorf("subject %q has a wildcard", s)
		case c <= ' ' || c == 0x7f:
			return fmt.Errorf("subject %q has whitespace or a control character", s)
		}
	}
	return nil
}

// ValidHeaderName checks a header name: 1 to 256 printable ASCII characters
// without ':' (a MIME header field name), not one of the reserved prefixes.
func ValidHeaderName(n []byte) error {
	if len(n) == 0 || len(n) > 256 {
		return fmt.Errorf("header name of %d bytes (1 to 256)", len(n))
	}
	for _, c := range n {
		if c <= ' ' || c >= 0x7f || c == ':' {
			return fmt.Errorf("header name %q: not a printable ASCII token", n)
		}
	}
	for _, p := range reservedHeaderPrefixes {
		if len(n) >= len(p) && bytes.EqualFold(n[:len(p)], []byte(p)) {
			return fmt.Errorf("header name %q: the %s* headers are the host's", n, n[:len(p)])
		}
	}
	return nil
}

// ValidHeaderValue checks a header value: no control character but tab
// (CR and LF would end the header), and no leading or trailing space or
// tab (the NATS header parser trims them: the value would not arrive as
// sent).
func ValidHeaderValue(v []byte) error {
	for _, c := range v {
		if (c < ' ' && c != '\t') || c == 0x7f {
			return fmt.Errorf("header value %q has a control character", v)
		}
	}
	if len(v) > 0 && (v[0] == ' ' || v[0] == '\t' || v[len(v)-1] == ' ' || v[len(v)-1] == '\t') {
		return fmt.Errorf("header value %q has leading or trailing whitespace", v)
	}
	return nil
}

// appendEffect encodes one effect.
func appendEffect(b []byte, subject []byte, headers []Header, payload []byte) []byte {
	b = appendBytes(b, subject)
	b = le.AppendUint32(b, uint32(len(headers)))
	for _, h := range headers {
		b = appendBytes(b, h.Name)
		b = appendBytes(b, h.Value)
	}
	return appendBytes(b, payload)
}

// effect decodes and validates one effect into e (its Headers reused).
func (r *reader) effect(e *Effect) {
	e.Subject = r.bytes()
	if r.err == nil {
		if err := ValidSubject(e.Subject); err != nil {
			r.fail("effect: " + err.Error())
			return
		}
	}
	n := r.count(4 + 4)
	e.Headers = e.Headers[:0]
	for i := 0; i < n && r.err == nil; i++ {
		h := Header{Name: r.bytes()}
		h.Value = r.bytes()
		if r.err != nil {
			return
		}
		if err := ValidHeaderName(h.Name); err != nil {
			r.fail("effect: " + err.Error())
			return
		}
		if err := ValidHeaderValue(h.Value); err != nil {
			r.fail("effect: " + err.Error())
			return
		}
		e.Headers = append(e.Headers, h)
	}
	e.Payload = r.bytes()
}
