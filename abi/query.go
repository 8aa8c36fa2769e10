package abi

import "fmt"

// Queries (minor 2): a plugin may export named, read-only queries. It lists
// them in the record its foldhost_queries export returns; the host calls
// one through foldhost_query, which answers a query output record. During a
// query the plugin reads the fold at one snapshot with read and, for key
// ranges, range (ABI.md, "Queries (minor 2)").

// Query exports and the range import.
const (
	ExportQueries = "foldhost_queries"
	ExportQuery   = "foldhost_query"
	ImportRange   = "range"
)

// Query output status codes (the query output record).
const (
	QueryOK    uint32 = 0
	QueryError uint32 = 1
)

// Range request flags.
const (
	// RangeReverse answers the range from its end down (the last keys
	// first).
	RangeReverse byte = 1
)

// Bounds of a query list.
const (
	MaxQueries          = 256
	MaxQueryName        = 64
	MaxQueryContentType = 128
)

// Query is one query a plugin declares.
type Query struct {
	Name string
	// ContentType is the media type of its answers ("" means
	// application/octet-stream).
	ContentType string
}

// AppendQueries appends a query list record.
func AppendQueries(b []byte, qs []Query) []byte {
	b = le.AppendUint32(b, uint32(len(qs)))
	for _, q := range qs {
		b = appendString(b, q.Name)
		b = appendString(b, q.ContentType)
	}
	return b
}

// ValidQueryName reports whether s may name a query: 1 to MaxQueryName
// bytes of ASCII letters, digits, '_', '-' and '.' (it goes into a URL path
// segment as is).
func ValidQueryName(s string) bool {
	if len(s) == 0 || len(s) > MaxQueryName {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '-' || c == '.') {
			return false
		}
	}
	return true
}

// validContentType: at most MaxQueryContentType printable ASCII bytes (an
// HTTP header value as is).
func validContentType(s string) bool {
	if len(s) > MaxQueryContentType {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 0x20 || s[i] > 0x7e {
			return false
		}
	}
	return true
}

// DecodeQueries decodes a query list record: at most MaxQueries queries,
// each with a valid, distinct name (ValidQueryName) and a content type of
// printable ASCII of at most MaxQueryContentType bytes.
func DecodeQueries(b []byte) ([]Query, error) {
	r := reader{b: b}
	n := r.count(8)
	if r.err == nil && n > MaxQueries {
		return nil, fmt.Errorf("%w: %d queries, more than %d", ErrMalformed, n, MaxQueries)
	}
	qs := make([]Query, 0, n)
	seen := map[string]bool{}
	for i := 0; i < n && r.err == nil; i++ {
		q := Query{Name: string(r.bytes()), ContentType: string(r.bytes())}
		if r.err != nil {
			break
		}
		switch {
		case !ValidQueryName(q.Name):
			return nil, fmt.Errorf("%w: query name %q: want 1 to %d of [A-Za-z0-9_.-]", ErrMalformed, q.Name, MaxQueryName)
		case seen[q.Name]:
			return nil, fmt.Errorf("%w: query %q declared twice", ErrMalformed, q.Name)
		case !validContentType(q.ContentType):
			return nil, fmt.Errorf("%w: query %q: content type %q: want at most %d printable ASCII bytes", ErrMalformed, q.Name, q.ContentType, MaxQueryContentType)
		}
		seen[q.Name] = true
		qs = append(qs, q)
	}
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	return qs, nil
}

// AppendQueryOutput appends an ok query output record.
func AppendQueryOutput(b, answer []byte) []byte {
	b = le.AppendUint32(b, QueryOK)
	return appendBytes(b, answer)
}

// AppendQueryError appends a failed query output record.
func AppendQueryError(b []byte, msg string) []byte {
	b = le.AppendUint32(b, QueryError)
	return appendString(b, msg)
}

// DecodeQueryOutput decodes a query output record: the answer (aliasing
// b), or a *GuestError with the plugin's message (cut to maxErr bytes) for
// a status-1 record. Any other status or trailing bytes are ErrMalformed.
func DecodeQueryOutput(b []byte, maxErr int) ([]byte, error) {
	r := reader{b: b}
	st := r.u32()
	v := r.bytes()
	r.end()
	if r.err != nil {
		return nil, r.err
	}
	switch st {
	case QueryOK:
		return v, nil
	case QueryError:
		return nil, guestError(v, maxErr)
	}
	return nil, fmt.Errorf("%w: unknown query status %d", ErrMalformed, st)
}

// AppendRangeRequest appends a range request: keys k with start <= k < end
// (an empty end: no upper bound), at most limit of them, in key order or,
// with RangeReverse, from the end down.
func AppendRangeRequest(b []byte, flags byte, limit uint32, start, end []byte) []byte {
	b = append(b, flags)
	b = le.AppendUint32(b, limit)
	b = appendBytes(b, start)
	return appendBytes(b, end)
}

// DecodeRangeRequest decodes a range request (start and end alias b). An
// unknown flag or a limit of 0 is ErrMalformed.
func DecodeRangeRequest(b []byte) (flags byte, limit uint32, start, end []byte, err error) {
	r := reader{b: b}
	flags = r.u8()
	limit = r.u32()
	start = r.bytes()
	end = r.bytes()
	r.end()
	switch {
	case r.err != nil:
		return 0, 0, nil, nil, r.err
	case flags&^RangeReverse != 0:
		return 0, 0, nil, nil, fmt.Errorf("%w: unknown range flags %#x", ErrMalformed, flags)
	case limit == 0:
		return 0, 0, nil, nil, fmt.Errorf("%w: range limit 0", ErrMalformed)
	}
	return flags, limit, start, end, nil
}

// Range answers are `u8 more, u32 count, (string key, string value)*count`:
// AppendRangeEntry appends one entry to a body, and AppendRangeAnswer the
// header and the body.

// AppendRangeEntry appends one key and value of a range answer's body.
func AppendRangeEntry(b, key, value []byte) []byte {
	return appendBytes(appendBytes(b, key), value)
}

// RangeEntrySize is the encoded size of one entry.
func RangeEntrySize(key, value []byte) int { return 8 + len(key) + len(value) }

// AppendRangeAnswer appends a range answer of count entries (body, as
// AppendRangeEntry made it); more says the range holds entries past the
// last one answered.
func AppendRangeAnswer(b []byte, more bool, count uint32, body []byte) []byte {
	m := byte(0)
	if more {
		m = 1
	}
	b = append(b, m)
	b = le.AppendUint32(b, count)
	return append(b, body...)
}

// DecodeRangeAnswer calls fn for each entry of a range answer (aliasing
// b) and returns its more flag.
func DecodeRangeAnswer(b []byte, fn func(key, value []byte) error) (bool, error) {
	r := reader{b: b}
	more := r.u8()
	n := r.count(8)
	if r.err == nil && more > 1 {
		r.fail("bad more flag")
	}
	for i := 0; i < n && r.err == nil; i++ {
		k, v := r.bytes(), r.bytes()
		if r.err == nil {
			if err := fn(k, v); err != nil {
				return false, err
			}
		}
	}
	r.end()
	return more == 1, r.err
}

// guestError is the *GuestError of a status-1 message, cut to maxMessage
// bytes (negative: whole).
func guestError(msg []byte, maxMessage int) *GuestError {
	if maxMessage >= 0 && len(msg) > maxMessage {
		return &GuestError{Message: string(cutRunes(msg[:maxMessage])), Size: len(msg)}
	}
	return &GuestError{Message: string(msg)}
}
