package abi

import "fmt"

// Update is one decoded batch entry. Key and Value alias the batch buffer.
type Update struct {
	Op    byte
	Rev   uint64
	Time  int64
	Key   []byte
	Value []byte
}

// minUpdate is the smallest encoded update: op, rev, time, two lengths.
const minUpdate = 1 + 8 + 8 + 4 + 4

// BatchEncoder builds a batch record in a reusable buffer.
type BatchEncoder struct {
	buf []byte
	n   uint32
}

// Reset starts a new batch, keeping the buffer's capacity.
func (e *BatchEncoder) Reset() {
	e.buf = append(e.buf[:0], 0, 0, 0, 0)
	e.n = 0
}

// Add appends one update.
func (e *BatchEncoder) Add(op byte, rev uint64, time int64, key string, value []byte) {
	if len(e.buf) < 4 {
		e.Reset()
	}
	e.buf = append(e.buf, op)
	e.buf = le.AppendUint64(e.buf, rev)
	e.buf = le.AppendUint64(e.buf, uint64(time))
	e.buf = appendString(e.buf, key)
	e.buf = appendBytes(e.buf, value)
	e.n++
}

// Bytes returns the encoded batch; valid until the next Reset or Add.
func (e *BatchEncoder) Bytes() []byte {
	if len(e.buf) < 4 {
		e.Reset()
	}
	le.PutUint32(e.buf, e.n)
	return e.buf
}

// BatchReader decodes a batch in place.
//
//	r := abi.NewBatchReader(buf)
//	for r.Next() { u := r.Update(); ... }
//	if err := r.Err(); err != nil { ... }
type BatchReader struct {
	r    reader
	left int
	cur  Update
}

// NewBatchReader starts decoding buf.
func NewBatchReader(buf []byte) BatchReader {
	br := BatchReader{r: reader{b: buf}}
	br.left = br.r.count(minUpdate)
	return br
}

// Len is the number of updates the batch declares.
func (br *BatchReader) Len() int { return br.left }

// Next decodes the next update; false at the end or on an error.
func (br *BatchReader) Next() bool {
	if br.r.err != nil {
		return false
	}
	if br.left == 0 {
		br.r.end()
		return false
	}
	br.left--
	u := Update{Op: br.r.u8(), Rev: br.r.u64(), Time: int64(br.r.u64())}
	u.Key = br.r.bytes()
	u.Value = br.r.bytes()
	if br.r.err == nil && (u.Op < OpPut || u.Op > OpPurge) {
		br.r.fail(fmt.Sprintf("unknown update op %d", u.Op))
	}
	if br.r.err != nil {
		return false
	}
	br.cur = u
	return true
}

// Update is the update Next decoded.
func (br *BatchReader) Update() Update { return br.cur }

// Err is the decoding error, if any.
func (br *BatchReader) Err() error { return br.r.err }
