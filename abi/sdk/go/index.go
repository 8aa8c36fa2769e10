package foldhost

// Secondary indexes: an index entry is the view key
// <index>/<value>/<primary> with an empty value (the example router's
// upstream/<addr>/<host>). Apply writes and deletes entries with IndexPut
// and IndexDelete; a query lists the primaries of one value with IndexScan,
// one prefix range over <index>/<value>/, paged. value must not contain
// '/' (a value "a/b" would list among value "a"'s primaries); primary may.

// IndexKey appends <index>/<value>/<primary> to dst.
func IndexKey(dst []byte, index, value, primary []byte) []byte {
	dst = append(append(dst, index...), '/')
	dst = append(append(dst, value...), '/')
	return append(dst, primary...)
}

// IndexPut writes the index entry <index>/<value>/<primary>.
func (b *Batch) IndexPut(index, value, primary []byte) {
	b.idx = IndexKey(b.idx[:0], index, value, primary)
	b.Put(b.idx, nil)
}

// IndexDelete deletes the index entry <index>/<value>/<primary>.
func (b *Batch) IndexDelete(index, value, primary []byte) {
	b.idx = IndexKey(b.idx[:0], index, value, primary)
	b.Delete(b.idx)
}

// IndexPage is how many entries one range of IndexScan asks for.
const IndexPage = 1024

// IndexScan lists the primaries of value in index, in key order, at the
// query's snapshot: every entry <index>/<value>/<primary>, from one prefix
// range paged IndexPage keys at a time. The primaries are valid until the
// query returns.
func (q *Query) IndexScan(index, value []byte) ([][]byte, error) {
	prefix := IndexKey(nil, index, value, nil)
	end := PrefixEnd(prefix)
	start := prefix
	var out [][]byte
	for {
		r, err := q.Range(start, end, IndexPage, false)
		if err != nil {
			return nil, err
		}
		for _, e := range r.Entries {
			out = append(out, e.Key[len(prefix):])
		}
		if !r.More || len(r.Entries) == 0 {
			return out, nil
		}
		start = After(r.Entries[len(r.Entries)-1].Key)
	}
}
