package fold

// The encoding of an outbox value (a group of effects), as outbox.go describes it.

import (
	"encoding/binary"
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// groupRecordHead is the length of a group record's head (before its
// effect) in a group of version v: index and length, and in version 3
// the revision before them.
func groupRecordHead(v byte) int {
	if v == outboxVersion3 {
		return 8 + 4 + 4
	}
	return 4 + 4
}

// effectLen is the length of e's encoding in a group (without its index
// and length).
func effectLen(e *Effect) int {
	n := 4 + len(e.Subject) + 4 + len(e.Payload)
	for _, h := range e.Headers {
		n += 8 + len(h.Name) + len(h.Value)
	}
	return n
}

func appendEffect(b []byte, e *Effect) []byte {
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Subject)))
	b = append(b, e.Subject...)
	b = binary.BigEndian.AppendUint32(b, uint32(len(e.Headers)))
	for _, h := range e.Headers {
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.Name)))
		b = append(b, h.Name...)
		b = binary.BigEndian.AppendUint32(b, uint32(len(h.Value)))
		b = append(b, h.Value...)
	}
	return append(b, e.Payload...)
}

// groupLen is the length of the group of effects (its value).
func groupLen(effects []Effect) int {
	n := 1 + 4
	for i := range effects {
		n += 8 + effectLen(&effects[i])
	}
	return n
}

// appendGroup appends the group of effects, indexed from first.
func appendGroup(b []byte, first uint32, effects []Effect) []byte {
	b = append(b, outboxVersion)
	b = binary.BigEndian.AppendUint32(b, uint32(len(effects)))
	for i := range effects {
		b = binary.BigEndian.AppendUint32(b, first+uint32(i))
		b = binary.BigEndian.AppendUint32(b, uint32(effectLen(&effects[i])))
		b = appendEffect(b, &effects[i])
	}
	return b
}

// appendUpdateGroup appends the version 3 group of effects, each under its
// UpdateRev, indexed from 0 within its revision.
func appendUpdateGroup(b []byte, effects []Effect) []byte {
	b = append(b, outboxVersion3)
	b = binary.BigEndian.AppendUint32(b, uint32(len(effects)))
	index := uint32(0)
	for i := range effects {
		if i > 0 && effects[i].UpdateRev != effects[i-1].UpdateRev {
			index = 0
		}
		b = binary.BigEndian.AppendUint64(b, uint64(effects[i].UpdateRev))
		b = binary.BigEndian.AppendUint32(b, index)
		b = binary.BigEndian.AppendUint32(b, uint32(effectLen(&effects[i])))
		b = appendEffect(b, &effects[i])
		index++
	}
	return b
}

// groupCount is how many effects an outbox value holds.
func groupCount(key, v []byte) (int, error) {
	switch {
	case len(v) >= 1 && v[0] == outboxVersion1:
		return 1, nil
	case len(v) >= 5 && (v[0] == outboxVersion || v[0] == outboxVersion3):
		return int(binary.BigEndian.Uint32(v[1:])), nil
	}
	return 0, fmt.Errorf("%w: outbox entry %x: unknown version", ErrCorrupt, key)
}

// decodeGroup calls fn for each effect of an outbox entry (key without
// the space byte), decoded into fresh memory, in order.
func decodeGroup(key, v []byte, fn func(OutboxEntry) error) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: outbox entry %x: %s", ErrCorrupt, key, what)
	}
	if len(key) != outboxKeyLen-1 {
		return bad("key length")
	}
	rev, index := protocol.Revision(binary.BigEndian.Uint64(key)), binary.BigEndian.Uint32(key[8:])
	if len(v) >= 1 && v[0] == outboxVersion1 {
		e := OutboxEntry{Rev: rev, Index: index}
		if !decodeEffect(v[1:], &e.Effect) {
			return bad("truncated effect")
		}
		return fn(e)
	}
	return groupRecords(key, v, func(rev protocol.Revision, index uint32, rec []byte) error {
		e := OutboxEntry{Rev: rev, Index: index}
		if !decodeEffect(rec[groupRecordHead(v[0]):], &e.Effect) {
			return bad("truncated effect")
		}
		return fn(e)
	})
}

// groupRecords calls fn for each effect of an outbox entry (key without
// the space byte) with its record in a group (index:u32 ++ len:u32 ++
// effect), a slice of v, undecoded. A version 1 entry's one effect has no
// such record: rec is nil (it is never written again, only deleted).
func groupRecords(key, v []byte, fn func(rev protocol.Revision, index uint32, rec []byte) error) error {
	bad := func(what string) error {
		return fmt.Errorf("%w: outbox entry %x: %s", ErrCorrupt, key, what)
	}
	if len(key) != outboxKeyLen-1 {
		return bad("key length")
	}
	rev := protocol.Revision(binary.BigEndian.Uint64(key))
	if len(v) >= 1 && v[0] == outboxVersion1 {
		return fn(rev, binary.BigEndian.Uint32(key[8:]), nil)
	}
	if len(v) < 5 || v[0] != outboxVersion && v[0] != outboxVersion3 {
		return bad("unknown version")
	}
	head := groupRecordHead(v[0])
	n := binary.BigEndian.Uint32(v[1:])
	v = v[5:]
	if uint64(n)*uint64(head) > uint64(len(v)) {
		return bad("effect count")
	}
	for range n {
		if len(v) < head || uint64(binary.BigEndian.Uint32(v[head-4:])) > uint64(len(v)-head) {
			return bad("truncated group")
		}
		l := head + int(binary.BigEndian.Uint32(v[head-4:]))
		index := binary.BigEndian.Uint32(v[head-8:])
		if head == groupRecordHead(outboxVersion3) {
			rev = protocol.Revision(binary.BigEndian.Uint64(v))
		}
		if err := fn(rev, index, v[:l:l]); err != nil {
			return err
		}
		v = v[l:]
	}
	if len(v) != 0 {
		return bad("trailing bytes")
	}
	return nil
}

// decodeEffect decodes one effect's encoding (appendEffect) into e, in
// fresh memory.
func decodeEffect(v []byte, e *Effect) bool {
	str := func() (string, bool) {
		if len(v) < 4 {
			return "", false
		}
		n := binary.BigEndian.Uint32(v)
		if uint64(len(v)-4) < uint64(n) {
			return "", false
		}
		s := string(v[4 : 4+n])
		v = v[4+n:]
		return s, true
	}
	var ok bool
	if e.Subject, ok = str(); !ok || len(v) < 4 {
		return false
	}
	nh := binary.BigEndian.Uint32(v)
	v = v[4:]
	if uint64(nh)*8 > uint64(len(v)) {
		return false
	}
	for range nh {
		var h EffectHeader
		var ok1, ok2 bool
		h.Name, ok1 = str()
		h.Value, ok2 = str()
		if !ok1 || !ok2 {
			return false
		}
		e.Headers = append(e.Headers, h)
	}
	e.Payload = append([]byte(nil), v...)
	return true
}
