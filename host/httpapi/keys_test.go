package httpapi_test

import (
	"bufio"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// keyItem is a listed or read entry's key fields.
type keyItem struct {
	Key    *string `json:"key"`
	KeyB64 string  `json:"key_b64"`
}

// exact is the key's bytes as the answer states them.
func (it keyItem) exact(t *testing.T) string {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(it.KeyB64)
	if err != nil {
		t.Fatalf("key_b64 %q: %v", it.KeyB64, err)
	}
	if utf8.Valid(b) != (it.Key != nil) || (it.Key != nil && *it.Key != string(b)) {
		t.Fatalf("key %v beside key_b64 %q: want the text exactly when the bytes are UTF-8", it.Key, it.KeyB64)
	}
	return string(b)
}

// oneByteKeys is "k" followed by every byte but NUL: 255 keys, 128 of
// them not UTF-8.
func oneByteKeys() []string {
	var keys []string
	for b := 1; b < 256; b++ {
		keys = append(keys, "k"+string([]byte{byte(b)}))
	}
	return keys
}

// TestEveryKeyRoundTrips: raw and view keys of any bytes are told apart in
// every answer (key_b64), and every listed key reads back through every
// read path: ?key_b64=, ?key= and the path, and a prefix through
// ?prefix_b64=; a missing key's 404 states it too. (Raw listings had no
// key_b64: the 128 keys with a byte >= 0x80 all read "k\uFFFD", and could
// not be read back.)
func TestEveryKeyRoundTrips(t *testing.T) {
	routes := openFold(t, "routes")
	keys := oneByteKeys()
	var raw []fold.Update
	var views []fold.ViewMutation
	for i, k := range keys {
		raw = append(raw, rawPut(k, protocol.Revision(i+1), fmt.Sprint(i)))
		views = append(views, viewPut(k, fmt.Sprint(i)))
	}
	commit(t, routes, protocol.Revision(len(keys)), raw, views)
	srv := httptest.NewServer(httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{routes}}))
	t.Cleanup(srv.Close)
	for _, space := range []string{"raw", "view"} {
		var page struct {
			Count int
			Items []keyItem
		}
		getJSON(t, srv, "/v1/folds/routes/"+space+"?prefix=k&limit=1000", 200, &page)
		seen := map[string]bool{}
		for _, it := range page.Items {
			seen[it.exact(t)] = true
		}
		if page.Count != len(keys) || len(seen) != len(keys) {
			t.Fatalf("%s: %d listed, %d distinct, want %d", space, page.Count, len(seen), len(keys))
		}
		unread := 0
		for _, it := range page.Items {
			k := it.exact(t)
			for _, path := range []string{
				"?key_b64=" + url.QueryEscape(it.KeyB64),
				"?key_b64=" + base64.RawURLEncoding.EncodeToString([]byte(k)), // the URL-safe alphabet, unpadded
				"?key_b64=" + it.KeyB64,                                       // unescaped: a "+" arrives as a space
				"?key=" + url.QueryEscape(k),
				"/" + url.PathEscape(k),
			} {
				var got keyItem
				code, body := get(t, srv, "/v1/folds/routes/"+space+path)
				if code != 200 || json.Unmarshal([]byte(body), &got) != nil || got.exact(t) != k {
					unread++
					if unread <= 5 {
						t.Errorf("%s%s: %d %s, want %q", space, path, code, body, k)
					}
				}
			}
			var pre struct{ Items []keyItem }
			getJSON(t, srv, "/v1/folds/routes/"+space+"?prefix_b64="+url.QueryEscape(it.KeyB64), 200, &pre)
			if len(pre.Items) != 1 || pre.Items[0].exact(t) != k {
				t.Errorf("%s ?prefix_b64= of %q: %d items", space, k, len(pre.Items))
			}
		}
		if unread > 0 {
			t.Errorf("%s: %d reads of %d listed keys failed", space, unread, len(keys))
		}
		// The NDJSON stream carries key_b64 too.
		resp, err := http.Get(srv.URL + "/v1/folds/routes/" + space + "?prefix=k&format=ndjson")
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(resp.Body)
		streamed := map[string]bool{}
		for sc.Scan() {
			var it keyItem
			if err := json.Unmarshal(sc.Bytes(), &it); err == nil && it.KeyB64 != "" {
				streamed[it.exact(t)] = true
			}
		}
		resp.Body.Close()
		if len(streamed) != len(keys) {
			t.Errorf("%s: %d distinct keys streamed, want %d", space, len(streamed), len(keys))
		}
		// A missing key's answer states it.
		var miss keyItem
		getJSON(t, srv, "/v1/folds/routes/"+space+"?key_b64="+url.QueryEscape(base64.StdEncoding.EncodeToString([]byte("nope\xff"))), 404, &miss)
		if miss.exact(t) != "nope\xff" {
			t.Errorf("%s: a missing key's 404 states %+v", space, miss)
		}
	}
	for q, want := range map[string]string{
		"key=a&key_b64=YQ==":       "give key or key_b64, not both",
		"prefix=a&prefix_b64=YQ==": "give prefix or prefix_b64, not both",
		"key_b64=%25%25":           "key_b64 is not base64",
		"key_b64=YQ==&limit=3":     "does not combine",
		"prefix_b64=!":             "prefix_b64 is not base64",
	} {
		var e struct{ Error string }
		getJSON(t, srv, "/v1/folds/routes/raw?"+q, 400, &e)
		if !strings.Contains(e.Error, want) {
			t.Errorf("?%s: %q, want %q", q, e.Error, want)
		}
	}
}
