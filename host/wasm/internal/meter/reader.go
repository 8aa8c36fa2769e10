package meter

import (
	"errors"
	"fmt"
)

// errTruncated: the input ends inside a construct.
var errTruncated = errors.New("unexpected end")

// reader decodes the WebAssembly binary format. The first error sticks:
// later reads return zero values, so callers check r.err once per construct.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(err error) {
	if r.err == nil {
		r.err = fmt.Errorf("at byte %d: %w", r.off, err)
	}
}

func (r *reader) failf(format string, args ...any) { r.fail(fmt.Errorf(format, args...)) }

func (r *reader) done() bool { return r.err != nil || r.off >= len(r.b) }

func (r *reader) byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.fail(errTruncated)
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

func (r *reader) bytes(n int) []byte {
	if r.err != nil {
		return nil
	}
	if n < 0 || n > len(r.b)-r.off {
		r.fail(errTruncated)
		return nil
	}
	s := r.b[r.off : r.off+n]
	r.off += n
	return s
}

// u32 reads an unsigned LEB128 of at most 32 bits.
func (r *reader) u32() uint32 {
	var v uint32
	for i := 0; i < 5; i++ {
		c := r.byte()
		if r.err != nil {
			return 0
		}
		if i == 4 && c&0xf0 != 0 {
			r.failf("u32 out of range")
			return 0
		}
		v |= uint32(c&0x7f) << (7 * i)
		if c&0x80 == 0 {
			return v
		}
	}
	r.failf("u32 too long")
	return 0
}

// skipSigned skips a signed LEB128 of at most bits bits (33 or 64; 32 for
// i32.const), checking only its length: the engine validates its value.
func (r *reader) skipSigned(bits int) {
	max := (bits + 6) / 7
	for i := 0; i < max; i++ {
		c := r.byte()
		if r.err != nil {
			return
		}
		if c&0x80 == 0 {
			return
		}
	}
	r.failf("signed LEB128 longer than %d bytes", max)
}

// name reads a length-prefixed string.
func (r *reader) name() []byte { return r.bytes(int(r.u32())) }

// appendU32 appends v as an unsigned LEB128.
func appendU32(b []byte, v uint32) []byte {
	for {
		c := byte(v & 0x7f)
		v >>= 7
		if v != 0 {
			b = append(b, c|0x80)
			continue
		}
		return append(b, c)
	}
}

// appendName appends a length-prefixed string.
func appendName(b []byte, s []byte) []byte { return append(appendU32(b, uint32(len(s))), s...) }
