package foldhost

import (
	"bytes"
	"testing"
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
