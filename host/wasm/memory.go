package wasm

// sliceMemory is wazero's own way with a linear memory: a Go []byte grown
// by reallocation (the fallback of guestMemory).
type sliceMemory struct{ buf []byte }

func (m *sliceMemory) Reallocate(size uint64) []byte {
	if size <= uint64(cap(m.buf)) {
		m.buf = m.buf[:size]
		return m.buf
	}
	m.buf = append(m.buf[:cap(m.buf)], make([]byte, int(size)-cap(m.buf))...)
	return m.buf
}

func (m *sliceMemory) Free() { m.buf = nil }
