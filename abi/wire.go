package abi

import (
	"encoding/binary"
	"fmt"
)

var le = binary.LittleEndian

func appendString(b []byte, s string) []byte {
	b = le.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

func appendBytes(b []byte, s []byte) []byte {
	b = le.AppendUint32(b, uint32(len(s)))
	return append(b, s...)
}

// reader reads the wire types from a buffer, recording the first error.
type reader struct {
	b   []byte
	off int
	err error
}

func (r *reader) fail(what string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at offset %d of %d", ErrMalformed, what, r.off, len(r.b))
	}
}

func (r *reader) u8() byte {
	if r.err != nil || len(r.b)-r.off < 1 {
		r.fail("truncated u8")
		return 0
	}
	v := r.b[r.off]
	r.off++
	return v
}

func (r *reader) u32() uint32 {
	if r.err != nil || len(r.b)-r.off < 4 {
		r.fail("truncated u32")
		return 0
	}
	v := le.Uint32(r.b[r.off:])
	r.off += 4
	return v
}

func (r *reader) u64() uint64 {
	if r.err != nil || len(r.b)-r.off < 8 {
		r.fail("truncated u64")
		return 0
	}
	v := le.Uint64(r.b[r.off:])
	r.off += 8
	return v
}

// bytes returns a length-prefixed byte string, aliasing the buffer.
func (r *reader) bytes() []byte {
	n := r.u32()
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)-r.off) < uint64(n) {
		r.fail("string longer than the record")
		return nil
	}
	v := r.b[r.off : r.off+int(n) : r.off+int(n)]
	r.off += int(n)
	return v
}

func (r *reader) end() {
	if r.err == nil && r.off != len(r.b) {
		r.fail(fmt.Sprintf("%d trailing bytes", len(r.b)-r.off))
	}
}

// count reads an element count and refuses one that cannot fit in the rest
// of the record (each element takes at least min bytes), so a hostile count
// never drives a large allocation or a long loop.
func (r *reader) count(min int) int {
	n := r.u32()
	if r.err == nil && uint64(n)*uint64(min) > uint64(len(r.b)-r.off) {
		r.fail(fmt.Sprintf("count %d cannot fit", n))
		return 0
	}
	return int(n)
}
