//go:build wasip1

package foldhost

import (
	"runtime"
	"runtime/debug"

	"github.com/foldhost/foldhost/abi"
)

// The guest runs with its collector off: in reactor mode the Go GC stalls
// after ~100 cycles because no goroutine runs between export calls; the
// host drives collections through foldhost_gc instead. wasip1 only: the
// host links this package too (Native), and must never lose its GC.
func init() { debug.SetGCPercent(-1) }

// sdkMinor is the ABI minor the Go SDK speaks: 3 (effects that name
// their update, Batch.EmitFor).
const sdkMinor = 3

//go:wasmexport foldhost_abi_v1
func abiV1() int32 { return sdkMinor }

//go:wasmexport foldhost_alloc
func alloc(size int32) int32 {
	if size < 0 {
		return 0
	}
	if cap(inbuf) < int(size) || cap(inbuf) == 0 {
		inbuf = make([]byte, max(int(size), 64<<10, 2*cap(inbuf)))
	}
	inbuf = inbuf[:cap(inbuf)]
	return int32(ptrOf(inbuf))
}

//go:wasmexport foldhost_info
func info() int64 { return packed(infoBuf) }

//go:wasmexport foldhost_apply
func apply(n int32) int64 {
	if active == nil {
		var w abi.OutputWriter
		return packed(w.Error("no plugin registered (call foldhost.Register in init)"))
	}
	if n < 0 || int(n) > len(inbuf) {
		var w abi.OutputWriter
		return packed(w.Error("apply: length outside the input buffer"))
	}
	return int64(active.apply(inbuf[:n]))
}

//go:wasmexport foldhost_gc
func gc() { runtime.GC() }

// foldhost_queries and foldhost_query (minor 2) are exported by every Go
// module: one without RegisterQueries lists none, which the host reads as
// no queries (abi/ABI.md). The range import is linked only into a module
// whose code calls Query.Range (Prefix, IndexScan).

//go:wasmexport foldhost_queries
func queriesExport() int64 { return packed(queriesBuf) }

//go:wasmexport foldhost_query
func queryExport(nameLen, inputLen int32) int64 {
	if nameLen < 0 || inputLen < 0 || int(nameLen)+int(inputLen) > len(inbuf) {
		return packed(abi.AppendQueryError(nil, "foldhost: query name and input exceed the input buffer"))
	}
	return packed(runQuery(inbuf[:nameLen], inbuf[nameLen:nameLen+inputLen]))
}
