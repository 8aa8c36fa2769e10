//go:build !linux

package wasm

import "github.com/tetratelabs/wazero/experimental"

// guestMemory is wazero's default elsewhere than on Linux: a Go []byte
// grown by reallocation.
var guestMemory experimental.MemoryAllocator = experimental.MemoryAllocatorFunc(
	func(_, _ uint64) experimental.LinearMemory { return &sliceMemory{} })
