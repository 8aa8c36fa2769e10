package wasm

import (
	"math"
	"syscall"

	"github.com/tetratelabs/wazero/experimental"
)

// guestMemory reserves a guest's linear memory at its maximum size in an
// anonymous mapping of its own, outside the Go heap: growing it moves
// nothing (pages become resident as the guest touches them), and closing
// the instance unmaps it at once. wazero's default, a Go []byte grown by
// reallocation, made a guest growing its memory a page at a time hold
// several times its limit until the collector caught up, and counted the
// guest's memory in the heap the collector paces itself by (RATIONALE.md,
// "What a plugin can make the host hold"). A reservation the kernel
// refuses falls back to wazero's way.
var guestMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(
	func(_, maxBytes uint64) experimental.LinearMemory {
		if maxBytes == 0 || maxBytes > math.MaxInt {
			return &sliceMemory{}
		}
		b, err := syscall.Mmap(-1, 0, int(maxBytes), syscall.PROT_READ|syscall.PROT_WRITE,
			syscall.MAP_PRIVATE|syscall.MAP_ANONYMOUS|syscall.MAP_NORESERVE)
		if err != nil {
			return &sliceMemory{}
		}
		return &mappedMemory{buf: b}
	})

// mappedMemory is a linear memory in its own mapping. The instance must
// not be used after Free (its memory is gone): the host closes an
// instance only when no call into it runs, and copies what it keeps
// before.
type mappedMemory struct{ buf []byte }

func (m *mappedMemory) Reallocate(size uint64) []byte {
	if size > uint64(len(m.buf)) {
		return nil
	}
	return m.buf[:size]
}

func (m *mappedMemory) Free() {
	if m.buf != nil {
		_ = syscall.Munmap(m.buf)
		m.buf = nil
	}
}
