package foldhost

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"github.com/foldhost/foldhost/abi"
)

// Batch is the output side of one Apply: view mutations, and reads of the
// committed fold that see this batch's own earlier writes.
type Batch struct {
	// read answers a read request in a space outside WebAssembly (Native);
	// nil: the host's read import.
	read    func(space uint32, req []byte) ([]byte, bool)
	out     abi.OutputWriter
	arena   arena
	written map[string]entry    // view keys written in this batch
	cached  map[string]entry    // view keys read from the host in this batch
	raws    map[string]rawEntry // raw keys read from the host in this batch
	req     []byte
	resp    []byte
	keys    [][]byte
	idx     []byte // IndexPut and IndexDelete build their key here
	// updates maps a record Apply received to its update's index in the
	// batch (EmitFor); misuse is EmitFor's first bad record, which fails
	// the batch.
	updates []uint32
	misuse  string
}

type entry struct {
	value []byte
	found bool
}

type rawEntry struct {
	e     RawEntry
	found bool
}

// RawEntry is a raw fold entry: the KV entry as the host stored it.
type RawEntry struct {
	Rev   uint64 // the entry's revision in the bucket
	Value []byte // its value, byte for byte; valid until the batch ends
}

// ErrRead is returned when the host refuses a read.
var ErrRead = errors.New("foldhost: host read failed")

func (b *Batch) reset() {
	b.out.Reset()
	b.arena.reset()
	b.updates, b.misuse = b.updates[:0], ""
	if b.written == nil {
		b.written = make(map[string]entry)
		b.cached = make(map[string]entry)
		b.raws = make(map[string]rawEntry)
	}
	clear(b.written)
	clear(b.cached)
	clear(b.raws)
}

// Put writes a view key. key and value are copied.
func (b *Batch) Put(key, value []byte) {
	b.out.Put(key, value)
	b.written[b.arena.str(key)] = entry{value: b.arena.bytes(value), found: true}
}

// Delete removes a view key. key is copied.
func (b *Batch) Delete(key []byte) {
	b.out.Delete(key)
	b.written[b.arena.str(key)] = entry{}
}

// Emit appends an effect: a message the host publishes once this batch is
// committed (never if it is not), in the order emitted (abi/ABI.md,
// "Effects"). subject, headers and payload are copied. A subject or header
// the ABI's rules refuse makes the whole output malformed: the batch fails.
func (b *Batch) Emit(subject, payload []byte, headers ...abi.Header) {
	b.out.Emit(subject, headers, payload)
}

// EmitFor is Emit for an effect that derives from one update: the record
// at index record of those Apply received (ABI minor 3). Its id is then
// that update's, whatever the batch around it, so replicas that batch the
// same updates differently publish it once. In one batch, either every
// effect names its record or none does, and the records named must not
// decrease; otherwise the batch fails.
func (b *Batch) EmitFor(record int, subject, payload []byte, headers ...abi.Header) {
	if record < 0 || record >= len(b.updates) {
		if b.misuse == "" {
			b.misuse = fmt.Sprintf("foldhost: EmitFor names a record Apply did not receive (%d of %d)", record, len(b.updates))
		}
		return
	}
	b.out.EmitFor(b.updates[record], subject, headers, payload)
}

// Prefetch reads the given view keys from the committed fold in ONE host
// call (a host call costs tens of nanoseconds; a per-key call per update adds
// up), so later View calls for them are answered locally.
func (b *Batch) Prefetch(keys ...[]byte) error {
	b.keys = b.keys[:0]
	for _, k := range keys {
		if _, ok := b.written[unsafeString(k)]; ok {
			continue
		}
		if _, ok := b.cached[unsafeString(k)]; ok {
			continue
		}
		b.keys = append(b.keys, k)
	}
	if len(b.keys) == 0 {
		return nil
	}
	b.req = abi.AppendReadRequest(b.req[:0], b.keys)
	resp, ok := b.readSpace(abi.SpaceView, b.req)
	if !ok {
		return ErrRead
	}
	return abi.DecodeReadResponse(resp, len(b.keys), func(i int, found bool, v []byte) error {
		b.cached[b.arena.str(b.keys[i])] = entry{value: b.arena.bytes(v), found: found}
		return nil
	})
}

// errShortRaw: a raw hit too short to hold its revision.
var errShortRaw = errors.New("foldhost: host sent a raw entry without its revision")

// PrefetchRaw reads the given keys of the raw fold in ONE host call, so later
// Raw calls for them are answered locally (see Prefetch).
func (b *Batch) PrefetchRaw(keys ...[]byte) error {
	b.keys = b.keys[:0]
	for _, k := range keys {
		if _, ok := b.raws[unsafeString(k)]; !ok {
			b.keys = append(b.keys, k)
		}
	}
	if len(b.keys) == 0 {
		return nil
	}
	b.req = abi.AppendReadRequest(b.req[:0], b.keys)
	resp, ok := b.readSpace(abi.SpaceRaw, b.req)
	if !ok {
		return ErrRead
	}
	return abi.DecodeReadResponse(resp, len(b.keys), func(i int, found bool, v []byte) error {
		var e RawEntry
		if found {
			if len(v) < 8 {
				return errShortRaw
			}
			e = RawEntry{Rev: binary.LittleEndian.Uint64(v), Value: b.arena.bytes(v[8:])}
		}
		b.raws[b.arena.str(b.keys[i])] = rawEntry{e: e, found: found}
		return nil
	})
}

// Raw reads a key of the raw fold: the KV entry (revision and value) as
// committed before this batch; false when the fold holds no entry for it.
// Raw entries are never overlaid: a plugin writes views only. The value is
// valid until the batch ends. A read the host refuses returns ErrRead;
// return it from Apply (the batch fails, as in the C and Rust SDKs).
func (b *Batch) Raw(key []byte) (RawEntry, bool, error) {
	if e, ok := b.raws[unsafeString(key)]; ok {
		return e.e, e.found, nil
	}
	if err := b.PrefetchRaw(key); err != nil {
		return RawEntry{}, false, err
	}
	e := b.raws[unsafeString(key)]
	return e.e, e.found, nil
}

// readSpace sends one read request in space (abi.SpaceView, abi.SpaceRaw)
// and returns the response.
func (b *Batch) readSpace(space uint32, req []byte) ([]byte, bool) {
	if b.read != nil {
		return b.read(space, req)
	}
	n := hostRead(int32(space), ptrOf(req), uint32(len(req)))
	if n < 0 {
		return nil, false
	}
	if cap(b.resp) < int(n) {
		b.resp = make([]byte, n)
	}
	b.resp = b.resp[:n]
	if n > 0 {
		hostReadResult(ptrOf(b.resp))
	}
	return b.resp, true
}

// View returns a view key's value as this batch sees it: its own writes
// first, then the committed fold. The value is valid until the batch ends.
func (b *Batch) View(key []byte) ([]byte, bool, error) {
	if e, ok := b.written[unsafeString(key)]; ok {
		return e.value, e.found, nil
	}
	if e, ok := b.cached[unsafeString(key)]; !ok {
		if err := b.Prefetch(key); err != nil {
			return nil, false, err
		}
	} else {
		return e.value, e.found, nil
	}
	e := b.cached[unsafeString(key)]
	return e.value, e.found, nil
}

// Log sends a line to the host log (slog levels: -4 debug, 0 info, 4 warn,
// 8 error).
func (b *Batch) Log(level int32, msg string) {
	if len(msg) == 0 {
		return
	}
	hostLog(level, uint32(uintptr(unsafe.Pointer(unsafe.StringData(msg)))), uint32(len(msg)))
}

// unsafeString views b as a string for a map lookup (no copy, no escape).
func unsafeString(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// arena hands out stable copies for one batch: bytes live in fixed chunks
// that never move, so strings and slices pointing into them stay valid until
// reset, and the chunks are reused by the next batch.
type arena struct {
	chunks [][]byte
	cur    int
}

const chunkSize = 64 << 10

func (a *arena) reset() {
	a.cur = 0
	for i := range a.chunks {
		a.chunks[i] = a.chunks[i][:0]
	}
}

func (a *arena) bytes(p []byte) []byte {
	if len(p) == 0 {
		return nil
	}
	if len(p) > chunkSize {
		return append([]byte(nil), p...) // rare: its own allocation
	}
	for {
		if a.cur == len(a.chunks) {
			a.chunks = append(a.chunks, make([]byte, 0, chunkSize))
		}
		c := a.chunks[a.cur]
		if cap(c)-len(c) >= len(p) {
			start := len(c)
			c = append(c, p...)
			a.chunks[a.cur] = c
			return c[start:len(c):len(c)]
		}
		a.cur++
	}
}

func (a *arena) str(p []byte) string {
	b := a.bytes(p)
	return unsafe.String(unsafe.SliceData(b), len(b))
}
