package httpapi_test

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

type page[T any] struct {
	rangeResp[T]
	Next    string
	Expired bool `json:"snapshot_expired"`
}

// pages reads every page of path (a range URL) and returns the keys in the
// order served and the cursor of each page; between pages it calls between.
func pages[T any](t *testing.T, srv *httptest.Server, path string, key func(T) string, between func(int)) ([]string, []uint64) {
	keys, cursors, _ := pagesExpired(t, srv, path, key, between)
	return keys, cursors
}

// pagesExpired is pages, with how many pages said snapshot_expired.
func pagesExpired[T any](t *testing.T, srv *httptest.Server, path string, key func(T) string, between func(int)) ([]string, []uint64, int) {
	t.Helper()
	var keys []string
	var cursors []uint64
	expired := 0
	next := ""
	for i := 0; ; i++ {
		p := path
		if next != "" {
			p += "&next=" + url.QueryEscape(next)
		}
		var r page[T]
		getJSON(t, srv, p, 200, &r)
		for _, it := range r.Items {
			keys = append(keys, key(it))
		}
		cursors = append(cursors, r.Cursor)
		if r.Expired {
			expired++
		}
		if !r.Truncated {
			if r.Next != "" {
				t.Errorf("page %d: not truncated, next %q", i, r.Next)
			}
			return keys, cursors, expired
		}
		if r.Next == "" || r.Count != r.Limit {
			t.Fatalf("page %d: truncated with next %q, %d of %d items", i, r.Next, r.Count, r.Limit)
		}
		next = r.Next
		between(i)
	}
}

// TestRangePaging: a range read page by page with ?next= returns every key
// of the prefix once, in order, also binary view keys, all from the first
// page's snapshot: keys written between pages are not served, and every
// page states the first page's cursor. Once the snapshot expired
// (PageSnapshotTTL), a page is read from a fresh snapshot and says so: the
// keys written meanwhile after the page come too, at the new cursor.
// Mutations caught: next starting at the last key (it repeats); a fresh
// snapshot per page (the late keys served, the cursors advance).
func TestRangePaging(t *testing.T) {
	f := openFold(t, "f")
	var raw []fold.Update
	var views []fold.ViewMutation
	for i := range 2500 {
		raw = append(raw, rawPut(fmt.Sprintf("k%05d", i*2), protocol.Revision(i+1), "v"))
		views = append(views, viewPut(fmt.Sprintf("v/%05d", i), "x"))
	}
	views = append(views, fold.ViewMutation{Key: []byte("v/\xff\x00"), Op: fold.ViewPut, Value: []byte("bin")},
		fold.ViewMutation{Key: []byte("v/\xff"), Op: fold.ViewPut, Value: []byte("bin")}, viewPut("w/outside", "x"))
	commit(t, f, 2500, raw, views)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	t.Cleanup(srv.Close)

	rev := protocol.Revision(2500)
	keys, cursors := pages(t, srv, "/v1/folds/f/raw?prefix=k&limit=1000", func(it rawItem) string { return it.Key }, func(i int) {
		// Between pages: a key after everything served so far.
		rev++
		commit(t, f, rev, []fold.Update{rawPut(fmt.Sprintf("k%05d", 9000+i), rev, "late")}, nil)
	})
	if len(keys) != 2500 || !slices.IsSorted(keys) || len(slices.Compact(slices.Clone(keys))) != len(keys) {
		t.Errorf("raw pages: %d keys (want 2500: not the two written between pages), sorted %v", len(keys), slices.IsSorted(keys))
	}
	if want := []uint64{2500, 2500, 2500}; !slices.Equal(cursors, want) {
		t.Errorf("page cursors %v, want %v", cursors, want)
	}

	// Snapshots that expire at once: every next page is fresh, and says so.
	quick := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}, PageSnapshotTTL: time.Nanosecond}))
	t.Cleanup(quick.Close)
	keys, cursors, expired := pagesExpired(t, quick, "/v1/folds/f/raw?prefix=k&limit=1000", func(it rawItem) string { return it.Key }, func(i int) {
		rev++
		commit(t, f, rev, []fold.Update{rawPut(fmt.Sprintf("k%05d", 9100+i), rev, "late")}, nil)
	})
	if len(keys) != 2504 || expired != 2 || !slices.Equal(cursors, []uint64{2502, 2503, 2504}) {
		t.Errorf("expiring pages: %d keys (want 2504), %d said expired (want 2), cursors %v", len(keys), expired, cursors)
	}

	vkeys, _ := pages(t, srv, "/v1/folds/f/view?prefix=v/&limit=700", func(it viewItem) string { return it.KeyB64 }, func(int) {})
	if len(vkeys) != 2502 || len(slices.Compact(slices.Clone(vkeys))) != len(vkeys) {
		t.Errorf("view pages: %d keys, want 2502 (binary keys included, w/ excluded)", len(vkeys))
	}
	for _, bad := range []string{"!!", ""} {
		if code, body := get(t, srv, "/v1/folds/f/raw?next="+url.QueryEscape(bad)); code != 400 {
			t.Errorf("next=%q: %d %s", bad, code, body)
		}
	}
}

// TestRangeNDJSON: format=ndjson streams every entry of the prefix (past
// MaxLimit) from one snapshot, one item per line, and ends with a line
// saying the stream is complete, with the count and the cursor (also in
// X-Foldhost-Cursor). Limit and next do not combine with it.
func TestRangeNDJSON(t *testing.T) {
	f := openFold(t, "f")
	var raw []fold.Update
	n := httpapi.MaxLimit + 500
	for i := range n {
		raw = append(raw, rawPut(fmt.Sprintf("k%05d", i), protocol.Revision(i+1), "v"))
	}
	raw = append(raw, rawPut("other", protocol.Revision(n+1), "x"))
	commit(t, f, protocol.Revision(n+1), raw, []fold.ViewMutation{viewPut("v/1", "a"), viewPut("v/2", "b")})
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	t.Cleanup(srv.Close)

	resp, err := http.Get(srv.URL + "/v1/folds/f/raw?prefix=k&format=ndjson")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct, c := resp.Header.Get("Content-Type"), resp.Header.Get("X-Foldhost-Cursor"); ct != "application/x-ndjson" || c != fmt.Sprint(n+1) {
		t.Errorf("headers: %q, cursor %q", ct, c)
	}
	sc := bufio.NewScanner(resp.Body)
	var lines []string
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	if len(lines) != n+1 {
		t.Fatalf("%d lines, want %d items and the end line", len(lines), n)
	}
	var it rawItem
	if err := json.Unmarshal([]byte(lines[7]), &it); err != nil || it.Key != "k00007" || it.Revision != 8 {
		t.Errorf("line 7: %s (%v)", lines[7], err)
	}
	if want := fmt.Sprintf(`{"end":true,"count":%d,"cursor":%d}`, n, n+1); lines[n] != want {
		t.Errorf("last line %s, want %s", lines[n], want)
	}
	if code, body := get(t, srv, "/v1/folds/f/view?format=ndjson"); code != 200 || strings.Count(body, "\n") != 3 {
		t.Errorf("view ndjson: %d %q", code, body)
	}
	for _, q := range []string{"format=ndjson&limit=5", "format=ndjson&next=abc", "format=csv", "key=k1&format=ndjson"} {
		if code, _ := get(t, srv, "/v1/folds/f/raw?"+q); code != 400 {
			t.Errorf("%s: %d, want 400", q, code)
		}
	}
}

// TestViewScan: ?start=&end=&reverse=1 answers the view keys in
// [start, end) from one snapshot, in key order or from the end down, at
// most limit with truncated set when more follow, an empty end meaning
// no bound and _b64 forms for bytes, no entry after max_bytes of keys and
// values; mixed with a prefix, key, next,
// format or pin, on raw entries, or with a bad reverse, it is refused
// with 400. Mutations caught: the reverse flag ignored; end taken as
// inclusive.
func TestViewScan(t *testing.T) {
	f := openFold(t, "f")
	var views []fold.ViewMutation
	for _, k := range []string{"a", "b", "c", "d", "e"} {
		views = append(views, viewPut(k, "v"+k))
	}
	views = append(views, viewPut("\xff\x00", "bin"))
	commit(t, f, 3, nil, views)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}}))
	t.Cleanup(srv.Close)
	keys := func(path string) (string, bool) {
		t.Helper()
		var r rangeResp[viewItem]
		getJSON(t, srv, path, 200, &r)
		var out []string
		for _, it := range r.Items {
			k, _ := httpapi.DecodeB64(it.KeyB64)
			out = append(out, string(k))
		}
		return strings.Join(out, ","), r.Truncated
	}
	for _, c := range []struct {
		q         string
		want      string
		truncated bool
	}{
		{"start=b&end=d", "b,c", false},
		{"start=b&end=d&reverse=1", "c,b", false},
		{"start=&end=c&reverse=1", "b,a", false},
		{"start=c", "c,d,e,\xff\x00", false},
		{"start=a&limit=2", "a,b", true},
		{"start=a&reverse=1&limit=2", "\xff\x00,e", true},
		{"start_b64=/w==&end_b64=", "\xff\x00", false},
		{"start=a&end=a", "", false},
		{"start=a&max_bytes=5", "a,b", true}, // 3 bytes an entry: the second passes 5
		{"start=a&max_bytes=1", "a", true},
	} {
		if got, tr := keys("/v1/folds/f/view?" + c.q); got != c.want || tr != c.truncated {
			t.Errorf("view?%s: %q truncated %v, want %q %v", c.q, got, tr, c.want, c.truncated)
		}
	}
	for _, q := range []string{"start=a&max_bytes=0", "max_bytes=x", "start=a&prefix=b", "start=a&key=b", "start=a&next=x", "start=a&format=ndjson", "start=a&pin=1", "reverse=2", "start=a&start_b64=YQ=="} {
		if code, body := get(t, srv, "/v1/folds/f/view?"+q); code != http.StatusBadRequest {
			t.Errorf("view?%s: %d %s, want 400", q, code, body)
		}
	}
	if code, body := get(t, srv, "/v1/folds/f/raw?start=a"); code != http.StatusBadRequest || !strings.Contains(body, "view range") {
		t.Errorf("raw?start=a: %d %s, want 400", code, body)
	}
}
