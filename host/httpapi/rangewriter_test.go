package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
)

func TestRangeWriterStreamsValidJSONAndStopsAtTheLimit(t *testing.T) {
	for _, tc := range []struct {
		limit, items, wantCount int
		wantTruncated           bool
	}{
		{0, 0, 0, false}, {0, 3, 3, false}, {2, 2, 2, false}, {2, 5, 2, true},
	} {
		var buf bytes.Buffer
		rw := NewRangeWriter(&buf, tc.limit, 7, "p<&>")
		for i := range tc.items {
			err := rw.Item(NewViewItem([]byte{byte('a' + i)}, []byte("v")))
			if errors.Is(err, ErrRangeLimit) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := rw.End(); err != nil {
			t.Fatal(err)
		}
		var got struct {
			Cursor    uint64     `json:"cursor"`
			Prefix    string     `json:"prefix"`
			Items     []ViewItem `json:"items"`
			Count     int        `json:"count"`
			Truncated bool       `json:"truncated"`
		}
		if err := json.Unmarshal(buf.Bytes(), &got); err != nil {
			t.Fatalf("limit %d, %d items: not JSON: %v\n%s", tc.limit, tc.items, err, buf.Bytes())
		}
		if got.Cursor != 7 || got.Prefix != "p<&>" || got.Count != tc.wantCount || len(got.Items) != tc.wantCount || got.Truncated != tc.wantTruncated {
			t.Errorf("limit %d, %d items: got %+v", tc.limit, tc.items, got)
		}
		if bytes.Contains(buf.Bytes(), []byte(`\u003c`)) {
			t.Errorf("prefix was HTML-escaped: %s", buf.Bytes())
		}
	}
	var buf bytes.Buffer
	if err := NewRangeWriter(&buf, 0, 1, "\xff").End(); err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(buf.Bytes(), &got); err != nil || got["prefix_b64"] != "/w==" || got["prefix"] != nil {
		t.Errorf("binary prefix: %s (%v)", buf.Bytes(), err)
	}
}
