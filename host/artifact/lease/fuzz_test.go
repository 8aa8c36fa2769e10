package lease

import (
	"encoding/json"
	"testing"
)

// FuzzParseRecord: any lease value is refused or parses to a record whose
// times and completion fields are consistent, and that survives a JSON
// round trip.
func FuzzParseRecord(f *testing.F) {
	f.Add([]byte(`{"holder_id":"a","acquired_at_unix":1,"expires_at_unix":2,"completed_cursor_hex":null,"completed_at_unix":null}`))
	f.Add([]byte(`{"holder_id":"a","acquired_at_unix":1,"expires_at_unix":2,"completed_cursor_hex":"01","completed_at_unix":3}`))
	f.Add([]byte(`{}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := ParseRecord(b)
		if err != nil {
			return
		}
		if r.HolderID == "" || (r.CompletedCursorHex == nil) != (r.CompletedAtUnix == nil) {
			t.Fatalf("accepted an inconsistent record: %+v", r)
		}
		if r.CompletedCursorHex != nil {
			if _, ok, err := r.CompletedCursor(); !ok || err != nil {
				t.Fatalf("accepted a record whose cursor does not decode: %+v (%v)", r, err)
			}
		}
		enc, err := json.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ParseRecord(enc); err != nil {
			t.Fatalf("re-encoded record refused: %v\n%s", err, enc)
		}
	})
}
