package httpapi

import (
	"encoding/base64"
	"unicode/utf8"

	"github.com/foldhost/foldhost/internal/kvwrite"
	"github.com/foldhost/foldhost/protocol"
)

// Bytes encodes b by the API's rule for byte strings: text is b as a
// string when b is valid UTF-8 (nil otherwise, so the field is omitted),
// and b64 is always b in standard base64. A client that needs exact bytes
// reads the _b64 field; one that knows its data is text reads the plain one.
func Bytes(b []byte) (text *string, b64 string) {
	if utf8.Valid(b) {
		s := string(b)
		text = &s
	}
	return text, base64.StdEncoding.EncodeToString(b)
}

// RawItem is one raw fold entry: its key (a NATS key: printable ASCII when
// written through a KV client, but any bytes a publisher put in a subject),
// the revision that wrote it, and its value. The key follows the
// byte-string rule ([Bytes]) too, so every key round-trips: key_b64 is the
// exact key, which every read path takes back (?key_b64=).
type RawItem struct {
	Key      *string `json:"key,omitempty"`
	KeyB64   string  `json:"key_b64"`
	Revision uint64  `json:"revision"`
	Value    *string `json:"value,omitempty"`
	ValueB64 string  `json:"value_b64"`
}

// NewRawItem copies a raw entry into a RawItem.
func NewRawItem(key []byte, rev protocol.Revision, value []byte) RawItem {
	it := RawItem{Revision: uint64(rev)}
	it.Key, it.KeyB64 = Bytes(key)
	it.Value, it.ValueB64 = Bytes(value)
	return it
}

// ViewItem is one plugin view entry; view keys are arbitrary bytes, so the
// key follows the byte-string rule too.
type ViewItem struct {
	Key      *string `json:"key,omitempty"`
	KeyB64   string  `json:"key_b64"`
	Value    *string `json:"value,omitempty"`
	ValueB64 string  `json:"value_b64"`
}

// NewViewItem copies a view entry into a ViewItem.
func NewViewItem(key, value []byte) ViewItem {
	var it ViewItem
	it.Key, it.KeyB64 = Bytes(key)
	it.Value, it.ValueB64 = Bytes(value)
	return it
}

// DecodeB64 decodes a base64 parameter (?key_b64=, ?prefix_b64=): the
// standard alphabet that answers use, or the URL-safe one, padded or not
// (kvwrite.DecodeB64).
func DecodeB64(s string) ([]byte, error) { return kvwrite.DecodeB64(s) }
