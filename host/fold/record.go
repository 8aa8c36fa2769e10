package fold

import (
	"encoding/binary"
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// A raw fold record is the entry's revision followed by its value:
//
//	rev:u64be ++ value
//
// The revision is the NATS stream sequence of the message that wrote the
// value; 8 fixed bytes because NATS revisions are u64 (unlike the original design's
// length-prefixed versions, which also carried FDB versionstamps).
const recordRevLen = 8

// recordLen is the encoded length of a record holding value.
func recordLen(value []byte) int { return recordRevLen + len(value) }

// putRecord encodes rev and value into dst, which is exactly recordLen long.
func putRecord(dst []byte, rev protocol.Revision, value []byte) {
	binary.BigEndian.PutUint64(dst, uint64(rev))
	copy(dst[recordRevLen:], value)
}

// decodeRecord splits a stored record. value aliases rec.
func decodeRecord(rec []byte) (protocol.Revision, []byte, error) {
	if len(rec) < recordRevLen {
		return 0, nil, fmt.Errorf("%w: raw record of %d bytes", ErrCorrupt, len(rec))
	}
	return protocol.Revision(binary.BigEndian.Uint64(rec)), rec[recordRevLen:], nil
}
