package httpapi_test

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
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
