//go:build !wasip1

package foldhost

// Outside WebAssembly there is no host: reads fail and logs are dropped, so
// a plugin's logic can still be built and unit-tested natively.

func hostRead(space int32, ptr uint32, n uint32) int32 { return -1 }

func hostReadResult(dst uint32) {}

func hostLog(level int32, ptr uint32, n uint32) {}

func hostRange(space int32, ptr uint32, n uint32) int32 { return -1 }
