package fold

// Keyspace prefixes: the first byte of every pebble key. Printable so that
// pebble's own tools show readable keys. Never reuse a retired prefix.
const (
	spaceMeta byte = 'm'
	spaceRaw  byte = 'r'
	spaceView byte = 'v'
	// spaceView2 is the other view keyspace: the views live in one of the
	// two (metaViewKey says which; 'v' when absent), and a rebuild writes
	// the other one as a shadow, switched in by one commit (Shadow).
	spaceView2 byte = 'w'
	// spaceDead holds the dead letters (DeadLetter), keyed by revision.
	spaceDead byte = 'd'
	// spaceOutbox holds the committed effects awaiting publication
	// (outbox.go), keyed by revision and index.
	spaceOutbox byte = 'o'
)

// Metadata keys (under spaceMeta).
var (
	metaFormatKey = []byte{spaceMeta, 'f', 'o', 'r', 'm', 'a', 't'}
	metaCursorKey = []byte{spaceMeta, 'c', 'u', 'r', 's', 'o', 'r'}
	metaPluginKey = []byte{spaceMeta, 'p', 'l', 'u', 'g', 'i', 'n'}
	metaOriginKey = []byte{spaceMeta, 'o', 'r', 'i', 'g', 'i', 'n'}
	metaRepairKey = []byte{spaceMeta, 'r', 'e', 'p', 'a', 'i', 'r'}
	metaViewKey   = []byte{spaceMeta, 'v', 'i', 'e', 'w'}
	// metaOutboxKey: the highest revision effects were filed under, and
	// the next index under it (readOutboxHigh).
	metaOutboxKey = []byte{spaceMeta, 'o', 'u', 't', 'b', 'o', 'x'}
	// metaHoldKey: the store's effects hold (EffectsHold), when it has one.
	metaHoldKey = []byte{spaceMeta, 'h', 'o', 'l', 'd'}
)

// otherView is the view keyspace that is not space.
func otherView(space byte) byte {
	if space == spaceView {
		return spaceView2
	}
	return spaceView
}

// appendKey appends the pebble key of name in keyspace space to dst.
func appendKey[T string | []byte](dst []byte, space byte, name T) []byte {
	dst = append(dst, space)
	return append(dst, name...)
}

// prefixBounds returns the [lower, upper) pebble key bounds of every key in
// keyspace space that starts with prefix. upper is the smallest key greater
// than every such key: trailing 0xff bytes are dropped and the last remaining
// byte incremented. The space byte is never 0xff, so upper always exists.
func prefixBounds[T string | []byte](space byte, prefix T) (lower, upper []byte) {
	lower = appendKey(make([]byte, 0, 1+len(prefix)), space, prefix)
	upper = append(make([]byte, 0, len(lower)), lower...)
	for i := len(upper) - 1; i >= 0; i-- {
		if upper[i] != 0xff {
			upper[i]++
			return lower, upper[:i+1]
		}
	}
	panic("fold: keyspace prefix is 0xff") // unreachable: spaces are constants
}
