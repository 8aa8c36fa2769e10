package foldhost

import (
	"errors"

	"github.com/foldhost/foldhost/abi"
)

// Queries (ABI minor 2): named, read-only queries a plugin declares with
// RegisterQueries. The host calls one with its input; it reads the fold at
// one snapshot (View, Raw, Range, Prefix, IndexScan) and answers bytes
// (Answer), or fails with an error the caller sees as the plugin's verdict
// on its input. A query cannot write: it has no Batch.

// QueryFunc runs one query: input is the caller's bytes (valid during the
// call only). It appends its answer with q.Answer; a non-nil error makes
// the query fail with the error's message (HTTP 422), the answer dropped.
// A read or range the host refused fails the query whatever it returns.
type QueryFunc func(q *Query, input []byte) error

// QueryDef declares one query.
type QueryDef struct {
	// Name is 1 to 64 of [A-Za-z0-9_.-]: the host refuses the module
	// otherwise (abi.ValidQueryName).
	Name string
	// ContentType is the media type the host answers with ("" means
	// application/octet-stream); at most 128 printable ASCII bytes.
	ContentType string
	Run         QueryFunc
}

var (
	queryDefs  []QueryDef
	queriesBuf = abi.AppendQueries(nil, nil) // the list foldhost_queries returns
	theQuery   Query
)

// RegisterQueries declares the module's queries (call it once, from main's
// init, beside Register). A module that registers none declares no
// queries: it exports an empty list, and never imports range.
func RegisterQueries(qs ...QueryDef) {
	queryDefs = append(queryDefs[:0], qs...)
	list := make([]abi.Query, len(qs))
	for i, q := range qs {
		list[i] = abi.Query{Name: q.Name, ContentType: q.ContentType}
	}
	queriesBuf = abi.AppendQueries(queriesBuf[:0], list)
}

// Query is one running query: reads at the query's snapshot (no overlay:
// a query writes nothing) and its answer. Everything it hands out is valid
// until the query returns.
type Query struct {
	// read and rng answer read and range requests outside WebAssembly
	// (tests); nil: the host's imports.
	read   func(space uint32, req []byte) ([]byte, bool)
	rng    func(req []byte) ([]byte, bool)
	answer []byte
	arena  arena
	req    []byte
	resp   []byte
	out    []byte
	keys   [][]byte
	kvs    []KV // the entries of this query's ranges, reused by the next query
	// failed is the first read or range the host refused (or answered
	// malformed): it fails the query even if the plugin carries on, as in
	// the C and Rust SDKs.
	failed error
}

// KV is one entry of a range: key and value are valid until the query
// returns.
type KV struct{ Key, Value []byte }

// Range is the answer to one range read.
type Range struct {
	Entries []KV
	// More: the range holds entries past the last one answered (the limit
	// was reached, or the host's read bound); the next page starts at
	// After(last key) or, in reverse, ends at the last key.
	More bool
}

// ErrRange is returned when the host refuses a range request (or a range
// is read outside a query).
var ErrRange = errors.New("foldhost: the host refused a range request")

// Answer appends p to the query's answer (copied).
func (q *Query) Answer(p []byte) { q.answer = append(q.answer, p...) }

// AnswerString appends s to the query's answer.
func (q *Query) AnswerString(s string) { q.answer = append(q.answer, s...) }

func (q *Query) reset() {
	q.answer = q.answer[:0]
	q.arena.reset()
	q.kvs = q.kvs[:0]
	q.failed = nil
}

// fail records err as the query's failure (the first wins) and returns it.
func (q *Query) fail(err error) error {
	if err != nil && q.failed == nil {
		q.failed = err
	}
	return err
}

// View reads a view key at the query's snapshot.
func (q *Query) View(key []byte) ([]byte, bool, error) {
	v, found, _, err := q.get(abi.SpaceView, key)
	return v, found, err
}

// Raw reads a raw fold entry at the query's snapshot.
func (q *Query) Raw(key []byte) (RawEntry, bool, error) {
	v, found, rev, err := q.get(abi.SpaceRaw, key)
	return RawEntry{Rev: rev, Value: v}, found, err
}

func (q *Query) get(space uint32, key []byte) ([]byte, bool, uint64, error) {
	q.keys = append(q.keys[:0], key)
	q.req = abi.AppendReadRequest(q.req[:0], q.keys)
	resp, ok := q.call(false, space, q.req)
	if !ok {
		return nil, false, 0, q.fail(ErrRead)
	}
	var (
		value []byte
		found bool
		rev   uint64
	)
	err := abi.DecodeReadResponse(resp, 1, func(_ int, f bool, v []byte) error {
		if f && space == abi.SpaceRaw {
			if len(v) < 8 {
				return errShortRaw
			}
			rev = uint64(v[0]) | uint64(v[1])<<8 | uint64(v[2])<<16 | uint64(v[3])<<24 |
				uint64(v[4])<<32 | uint64(v[5])<<40 | uint64(v[6])<<48 | uint64(v[7])<<56
			v = v[8:]
		}
		value, found = q.arena.bytes(v), f
		return nil
	})
	return value, found, rev, q.fail(err)
}

// Range reads the view keys k with start <= k < end (an empty end: no
// upper bound) at the query's snapshot, at most limit of them, in key
// order or, with reverse, from the end down. The answer may stop short of
// limit at the host's read bound (More set). limit <= 0 answers nothing.
func (q *Query) Range(start, end []byte, limit int, reverse bool) (Range, error) {
	if limit <= 0 {
		return Range{}, nil
	}
	if limit > 1<<31-1 {
		limit = 1<<31 - 1
	}
	flags := byte(0)
	if reverse {
		flags = abi.RangeReverse
	}
	q.req = abi.AppendRangeRequest(q.req[:0], flags, uint32(limit), start, end)
	resp, ok := q.call(true, abi.SpaceView, q.req)
	if !ok {
		return Range{}, q.fail(ErrRange)
	}
	// The entries go to q.kvs, kept between queries (with the GC off, a
	// slice per range would be garbage until the host's next foldhost_gc);
	// an earlier range's Entries keep the array they were cut from.
	first := len(q.kvs)
	more, err := abi.DecodeRangeAnswer(resp, func(k, v []byte) error {
		q.kvs = append(q.kvs, KV{Key: q.arena.bytes(k), Value: q.arena.bytes(v)})
		return nil
	})
	r := Range{Entries: q.kvs[first:len(q.kvs):len(q.kvs)], More: more}
	return r, q.fail(err)
}

// Prefix is Range over the view keys starting with prefix.
func (q *Query) Prefix(prefix []byte, limit int, reverse bool) (Range, error) {
	return q.Range(prefix, PrefixEnd(prefix), limit, reverse)
}

// PrefixEnd is the smallest key after every key starting with prefix:
// trailing 0xff bytes dropped, the last other byte incremented; nil (no
// upper bound) when none is left.
func PrefixEnd(prefix []byte) []byte {
	end := append([]byte(nil), prefix...)
	for len(end) > 0 && end[len(end)-1] == 0xff {
		end = end[:len(end)-1]
	}
	if len(end) == 0 {
		return nil
	}
	end[len(end)-1]++
	return end
}

// After is the smallest key greater than key (key followed by a 0 byte):
// where the next page of a forward range starts.
func After(key []byte) []byte {
	return append(append(make([]byte, 0, len(key)+1), key...), 0)
}

// call sends one read (rng false) or range request.
func (q *Query) call(rng bool, space uint32, req []byte) ([]byte, bool) {
	if rng && q.rng != nil {
		return q.rng(req)
	}
	if !rng && q.read != nil {
		return q.read(space, req)
	}
	var n int32
	if rng {
		n = hostRange(int32(space), ptrOf(req), uint32(len(req)))
	} else {
		n = hostRead(int32(space), ptrOf(req), uint32(len(req)))
	}
	if n < 0 {
		return nil, false
	}
	if cap(q.resp) < int(n) {
		q.resp = make([]byte, n)
	}
	q.resp = q.resp[:n]
	if n > 0 {
		hostReadResult(ptrOf(q.resp))
	}
	return q.resp, true
}

// runQuery runs the query named name (the host only calls declared names)
// and returns its output record (valid until the next call).
func runQuery(name, input []byte) []byte {
	q := &theQuery
	q.reset()
	for i := range queryDefs {
		d := &queryDefs[i]
		if d.Name != unsafeString(name) {
			continue
		}
		err := d.Run(q, input)
		if q.failed != nil {
			err = q.failed
		}
		if err != nil {
			q.out = abi.AppendQueryError(q.out[:0], err.Error())
		} else {
			q.out = abi.AppendQueryOutput(q.out[:0], q.answer)
		}
		return q.out
	}
	q.out = abi.AppendQueryError(q.out[:0], "foldhost: no such query")
	return q.out
}
