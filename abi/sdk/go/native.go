//go:build !wasip1

package foldhost

// Native runs a Plugin as ordinary Go code of the host's process instead of
// a WebAssembly module: the same SDK path (batch decoding, Parse, Apply,
// the overlay, output encoding) without the module boundary. It is the
// baseline the host's benchmarks compare a plugin's WASM builds with.
type Native[R any] struct {
	t typed[R]
}

// NewNative runs p; read answers a read request (abi.AppendReadRequest
// encoding) in space (abi.SpaceView or abi.SpaceRaw) with its response
// (abi.AppendReadHit/AppendReadRawHit/AppendReadMiss), or false to refuse
// it, as the host's read import would.
func NewNative[R any](p Plugin[R], read func(space uint32, req []byte) ([]byte, bool)) *Native[R] {
	n := &Native[R]{t: typed[R]{p: p}}
	n.t.batch.read = read
	return n
}

// Apply runs one encoded batch (abi.BatchEncoder) and returns the output
// record (abi.DecodeOutput decodes it), valid until the next Apply.
func (n *Native[R]) Apply(batch []byte) []byte { return n.t.run(batch) }
