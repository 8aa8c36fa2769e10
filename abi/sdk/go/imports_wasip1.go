//go:build wasip1

package foldhost

//go:wasmimport foldhost read
func hostRead(space int32, ptr uint32, n uint32) int32

//go:wasmimport foldhost read_result
func hostReadResult(dst uint32)

//go:wasmimport foldhost log
func hostLog(level int32, ptr uint32, n uint32)

//go:wasmimport foldhost range
func hostRange(space int32, ptr uint32, n uint32) int32
