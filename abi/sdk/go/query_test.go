package foldhost

import (
	"bytes"
	"errors"
	"testing"

	"github.com/foldhost/foldhost/abi"
)

// TestIndexKeyAndRangeBounds: the index key layout, the end of a prefix
// range (trailing 0xff dropped, the last other byte incremented, none left:
// no bound), and where the next page starts.
func TestIndexKeyAndRangeBounds(t *testing.T) {
	if got := IndexKey(nil, []byte("upstream"), []byte("10.0.0.1:80"), []byte("a/b")); string(got) != "upstream/10.0.0.1:80/a/b" {
		t.Errorf("IndexKey = %q", got)
	}
	for _, c := range []struct{ prefix, want []byte }{
		{[]byte("upstream/u/"), []byte("upstream/u0")},
		{[]byte("a\xff\xff"), []byte("b")},
		{[]byte("\xff\xff"), nil},
		{nil, nil},
	} {
		if got := PrefixEnd(c.prefix); !bytes.Equal(got, c.want) {
			t.Errorf("PrefixEnd(%q) = %q, want %q", c.prefix, got, c.want)
		}
	}
	if got := After([]byte("k")); !bytes.Equal(got, []byte("k\x00")) {
		t.Errorf("After = %q", got)
	}
}

// TestARefusedRangeFailsTheQuery: a range the host refuses fails the
// query even when the plugin ignores the error and answers (the host is a
// fault-injecting fake that refuses every range).
func TestARefusedRangeFailsTheQuery(t *testing.T) {
	defer func(d []QueryDef, b []byte, q Query) { queryDefs, queriesBuf, theQuery = d, b, q }(queryDefs, queriesBuf, theQuery)
	RegisterQueries(QueryDef{Name: "careless", Run: func(q *Query, _ []byte) error {
		q.Range([]byte("a"), nil, 10, false) // the error ignored
		q.AnswerString("all fine")
		return nil
	}})
	theQuery = Query{rng: func([]byte) ([]byte, bool) { return nil, false }} // fake: refuses every range
	out := runQuery([]byte("careless"), nil)
	ans, err := abi.DecodeQueryOutput(out, -1)
	var ge *abi.GuestError
	if !errors.As(err, &ge) || ge.Message != ErrRange.Error() {
		t.Fatalf("answer %q, error %v; want the query failed with %q", ans, err, ErrRange)
	}
}
