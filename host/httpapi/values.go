package httpapi

import (
	"encoding/base64"
	"unicode/utf8"

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

// RawItem is one raw fold entry: a NATS key (always text: NATS restricts
// keys to printable ASCII), the revision that wrote it, and its value.
type RawItem struct {
	Key      string  `json:"key"`
	Revision uint64  `json:"revision"`
	Value    *string `json:"value,omitempty"`
	ValueB64 string  `json:"value_b64"`
}

// NewRawItem copies a raw entry into a RawItem.
func NewRawItem(key []byte, rev protocol.Revision, value []byte) RawItem {
	it := RawItem{Key: string(key), Revision: uint64(rev)}
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
