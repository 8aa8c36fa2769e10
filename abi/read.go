package abi

// Batched reads: the guest sends a request of keys, the host answers with
// one entry per key, in order.

// AppendReadRequest appends a request for keys.
func AppendReadRequest(b []byte, keys [][]byte) []byte {
	b = le.AppendUint32(b, uint32(len(keys)))
	for _, k := range keys {
		b = appendBytes(b, k)
	}
	return b
}

// DecodeReadRequest calls fn for each requested key (aliasing b).
func DecodeReadRequest(b []byte, fn func(key []byte) error) error {
	r := reader{b: b}
	n := r.count(4)
	for i := 0; i < n && r.err == nil; i++ {
		k := r.bytes()
		if r.err == nil {
			if err := fn(k); err != nil {
				return err
			}
		}
	}
	r.end()
	return r.err
}

// AppendReadMiss appends "not found" for one key.
func AppendReadMiss(b []byte) []byte { return append(b, 0) }

// AppendReadHit appends a found view value.
func AppendReadHit(b []byte, value []byte) []byte {
	return appendBytes(append(b, 1), value)
}

// AppendReadRawHit appends a found raw entry: the value is the entry's
// revision followed by its bytes.
func AppendReadRawHit(b []byte, rev uint64, value []byte) []byte {
	b = append(b, 1)
	b = le.AppendUint32(b, uint32(8+len(value)))
	b = le.AppendUint64(b, rev)
	return append(b, value...)
}

// DecodeReadResponse calls fn for each of n answers, in request order; value
// aliases b. For the raw space, value starts with the u64 revision.
func DecodeReadResponse(b []byte, n int, fn func(i int, found bool, value []byte) error) error {
	r := reader{b: b}
	for i := 0; i < n && r.err == nil; i++ {
		found := r.u8()
		var v []byte
		switch {
		case r.err != nil:
			continue
		case found == 1:
			v = r.bytes()
		case found != 0:
			r.fail("bad found flag")
		}
		if r.err == nil {
			if err := fn(i, found == 1, v); err != nil {
				return err
			}
		}
	}
	r.end()
	return r.err
}
