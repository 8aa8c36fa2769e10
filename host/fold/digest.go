package fold

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/foldhost/foldhost/protocol"
)

// Digest is a hash of everything r holds in its raw fold and views (keys,
// revisions, values): two stores with equal digests hold the same fold.
// The cursor is not part of it.
func Digest(r Reader) (string, error) {
	h := sha256.New()
	err := r.RawRange("", func(k []byte, rev protocol.Revision, v []byte) error {
		fmt.Fprintf(h, "r %q %d %q\n", k, rev, v)
		return nil
	})
	if err == nil {
		err = r.ViewRange(nil, func(k, v []byte) error {
			fmt.Fprintf(h, "v %q %q\n", k, v)
			return nil
		})
	}
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// DigestDir is [Digest] of the stopped fold in dir.
func DigestDir(dir string) (string, error) {
	st, _, err := Open(dir, Options{})
	if err != nil {
		return "", err
	}
	d, err := Digest(st)
	if cerr := st.Close(); err == nil {
		err = cerr
	}
	return d, err
}
