package httpapi_test

import (
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// FuzzReadRequests: any path under a fold and any raw query is answered
// 200, 400 or 404 with a JSON body, never a server error; a 200 range
// answer never holds more items than its limit.
func FuzzReadRequests(f *testing.F) {
	routes := openFold(f, "routes")
	commit(f, routes, 3, []fold.Update{rawPut("route.a", 1, "alpha"), rawPut("route.b", 2, "\xff"), rawPut("x", 3, "x")},
		[]fold.ViewMutation{viewPut("table/a", "v"), viewPut("\xfe\xff", "bin")})
	h := httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{routes}})
	for _, s := range [][2]string{
		{"raw", "prefix=route.&limit=1"}, {"view", "key=table%2Fa"}, {"raw/route.a", ""}, {"view/table/a", "limit=2"},
		{"raw", "prefix=a&prefix=b"}, {"raw", "limit=99999999999999999999"}, {"view", "prefix=%FF%00"}, {"raw", "%zz"},
		{"view", "key_b64=_v8"}, {"raw", "prefix_b64=cm91dGUu&limit=1"}, {"raw", "key_b64=cm91dGUuYQ==&key=x"}, {"view", "prefix_b64=%25"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, query string) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL = &url.URL{Path: "/v1/folds/routes/" + path, RawQuery: query}
		req.RequestURI = req.URL.RequestURI()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		switch w.Code {
		case http.StatusOK, http.StatusBadRequest, http.StatusNotFound:
		default:
			t.Fatalf("GET %s?%s = %d: %s", path, query, w.Code, w.Body)
		}
		var body map[string]any
		if err := json.Unmarshal(w.Body.Bytes(), &body); err != nil {
			t.Fatalf("GET %s?%s = %d, body not JSON: %v: %q", path, query, w.Code, err, w.Body)
		}
		if items, ok := body["items"].([]any); ok && w.Code == http.StatusOK {
			if limit, _ := body["limit"].(float64); len(items) > int(limit) {
				t.Fatalf("GET %s?%s: %d items over limit %v", path, query, len(items), limit)
			}
		}
	})
}

// FuzzKeyRoundTrip: a raw and a view entry under any key are listed with
// that key's exact bytes (key_b64), and read back through ?key_b64= (the
// listed form) and the path.
func FuzzKeyRoundTrip(f *testing.F) {
	routes := openFold(f, "routes")
	h := httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{routes}})
	for _, k := range []string{"a", "k\xff", "\xfe\xff", "a/b", "..", "a b+c", "\x00", "é", "%2F", "?x=1#y"} {
		f.Add([]byte(k))
	}
	rev := protocol.Revision(0)
	serve := func(t *testing.T, path, query string) (int, []byte) {
		req := httptest.NewRequest(http.MethodGet, "/", nil)
		req.URL = &url.URL{Path: "/v1/folds/routes/" + path, RawQuery: query}
		req.RequestURI = req.URL.RequestURI()
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		return w.Code, w.Body.Bytes()
	}
	f.Fuzz(func(t *testing.T, key []byte) {
		if len(key) == 0 {
			return
		}
		rev++
		commit(t, routes, rev, []fold.Update{{Key: string(key), Op: fold.OpPut, Rev: rev, Value: []byte("v")}},
			[]fold.ViewMutation{{Key: key, Op: fold.ViewPut, Value: []byte("v")}})
		b64 := base64.StdEncoding.EncodeToString(key)
		for _, space := range []string{"raw", "view"} {
			code, body := serve(t, space, "limit=1&prefix_b64="+url.QueryEscape(b64))
			var page struct {
				Items []struct {
					KeyB64 string `json:"key_b64"`
				}
			}
			if code != http.StatusOK || json.Unmarshal(body, &page) != nil || len(page.Items) != 1 || page.Items[0].KeyB64 != b64 {
				t.Fatalf("%s: listing %q: %d %s", space, key, code, body)
			}
			for _, q := range [][2]string{{space, "key_b64=" + url.QueryEscape(page.Items[0].KeyB64)}, {space + "/" + string(key), ""}} {
				code, body := serve(t, q[0], q[1])
				var it struct {
					KeyB64 string `json:"key_b64"`
				}
				if json.Unmarshal(body, &it) != nil {
					t.Fatalf("%s?%s: %d, not JSON: %q", q[0], q[1], code, body)
				}
				if q[1] == "" && code == http.StatusBadRequest {
					continue // a path the URL cannot carry ("..", "//"): ?key_b64= reads it
				}
				if code != http.StatusOK || it.KeyB64 != b64 {
					t.Fatalf("%s?%s: %d %s, want the key %q", q[0], q[1], code, body, key)
				}
			}
		}
	})
}
