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
	// effects holds the encoded effects (ABI minor 1), ne their count;
	// sealed is the length of buf before Bytes appended them (0: not
	// appended), so the writer can go on after a Bytes.
	effects []byte
	ne      uint32
	sealed  int
	// byUpdate: the effects name their updates (EmitFor; a status-3
	// record); lastUpdate the last one named; misuse the first misuse of
	// Emit and EmitFor, which Bytes turns into an error record.
	byUpdate   bool
	lastUpdate uint32
	misuse     string
}

// Reset starts a new ok output, keeping the buffer's capacity.
func (w *OutputWriter) Reset() {
	w.buf = append(w.buf[:0], 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0)
	w.rejected, w.n = 0, 0
	w.effects, w.ne, w.sealed = w.effects[:0], 0, 0
	w.byUpdate, w.lastUpdate, w.misuse = false, 0, ""
}

func (w *OutputWriter) ensure() {
	if len(w.buf) < 12 {
		w.Reset()
	}
	if w.sealed > 0 {
		w.buf, w.sealed = w.buf[:w.sealed], 0
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

// Emit appends an effect: a message for the host to publish once the batch
// is committed (ABI minor 1). The host validates it (ValidSubject,
// ValidHeaderName, ValidHeaderValue; a bad one is malformed output).
func (w *OutputWriter) Emit(subject []byte, headers []Header, payload []byte) {
	w.ensure()
	if w.byUpdate && w.misuse == "" {
		w.misuse = "Emit after EmitFor in one batch: every effect names its update or none does"
	}
	w.effects = appendEffect(w.effects, subject, headers, payload)
	w.ne++
}

// EmitFor appends an effect that derives from the batch's update at index
// update (ABI minor 3): its id is then the update's, whatever the batch
// around it, so replicas that batch differently file it alike. The
// indices must not decrease, and an output's effects either all name
// their update or none does; a misuse makes Bytes an error record.
func (w *OutputWriter) EmitFor(update uint32, subject []byte, headers []Header, payload []byte) {
	w.ensure()
	switch {
	case w.misuse != "":
	case w.ne > 0 && !w.byUpdate:
		w.misuse = "EmitFor after Emit in one batch: every effect names its update or none does"
	case w.byUpdate && update < w.lastUpdate:
		w.misuse = fmt.Sprintf("EmitFor names an earlier update than the effect before it (%d after %d)", update, w.lastUpdate)
	}
	w.byUpdate, w.lastUpdate = true, update
	w.effects = le.AppendUint32(w.effects, update)
	w.effects = appendEffect(w.effects, subject, headers, payload)
	w.ne++
}

// Reject counts one rejected update.
func (w *OutputWriter) Reject() { w.rejected++ }

// Bytes returns the ok output record; valid until the next call. Without
// effects it is a status-0 record, byte for byte what a minor-0 writer
// made; with effects a status-2 record, or status 3 when they name their
// updates (EmitFor). A misuse of EmitFor returns an error record.
func (w *OutputWriter) Bytes() []byte {
	if w.misuse != "" {
		return w.Error("foldhost: " + w.misuse)
	}
	w.ensure()
	le.PutUint32(w.buf[0:], StatusOK)
	le.PutUint32(w.buf[4:], w.rejected)
	le.PutUint32(w.buf[8:], w.n)
	if w.ne > 0 {
		le.PutUint32(w.buf[0:], StatusOKEffects)
		if w.byUpdate {
			le.PutUint32(w.buf[0:], StatusOKUpdateEffects)
		}
		w.sealed = len(w.buf)
		w.buf = le.AppendUint32(w.buf, w.ne)
		w.buf = append(w.buf, w.effects...)
	}
	return w.buf
}

// Error replaces the output with an error record carrying msg and returns it.
func (w *OutputWriter) Error(msg string) []byte {
	w.buf = le.AppendUint32(w.buf[:0], StatusError)
	w.buf = appendString(w.buf, msg)
	w.rejected, w.n = 0, 0
	w.effects, w.ne, w.sealed = w.effects[:0], 0, 0
	w.byUpdate, w.lastUpdate, w.misuse = false, 0, ""
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
// A record's effects are validated and dropped: see DecodeOutputEffects.
func DecodeOutputBounded(b []byte, maxMessage int, fn func(op byte, key, value []byte) error) (rejected int, err error) {
	return DecodeOutputEffects(b, maxMessage, fn, nil)
}

// DecodeOutputEffects is DecodeOutputBounded that also calls eff for each
// effect of a status-2 or status-3 record, in order, after every mutation
// (nil eff: they are validated, then dropped). Each effect is validated
// before eff sees it (subject, header names and values, and in a status-3
// record update indices that do not decrease; a bad one is ErrMalformed;
// whether an index is within the batch is the caller's to check); the
// Effect and what it points to are valid during the call only. A record
// with effects must carry at least one: the encoding is canonical, an
// output without effects is a status-0 record.
func DecodeOutputEffects(b []byte, maxMessage int, fn func(op byte, key, value []byte) error, eff func(e *Effect) error) (rejected int, err error) {
	r := reader{b: b}
	st := r.u32()
	switch {
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
	case st != StatusOK && st != StatusOKEffects && st != StatusOKUpdateEffects:
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
	if st != StatusOK && r.err == nil {
		byUpdate := st == StatusOKUpdateEffects
		min := 4 + 1 + 4 + 4
		if byUpdate {
			min += 4
		}
		ne := r.count(min)
		if r.err == nil && ne == 0 {
			r.fail(fmt.Sprintf("status %d without effects", st))
		}
		e := Effect{Update: -1}
		for i := 0; i < ne && r.err == nil; i++ {
			if byUpdate {
				u := int(r.u32())
				if r.err == nil && u < e.Update {
					r.fail(fmt.Sprintf("effect %d names update %d after update %d (the indices must not decrease)", i, u, e.Update))
				}
				e.Update = u
			}
			r.effect(&e)
			if r.err == nil && eff != nil {
				if err := eff(&e); err != nil {
					return 0, err
				}
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
