package host_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host/httpapi"
)

// answerWriter is a recorder that tells an answer from none.
type answerWriter struct {
	*httptest.ResponseRecorder
	answered bool
}

func (w *answerWriter) WriteHeader(code int) {
	w.answered = true
	w.ResponseRecorder.WriteHeader(code)
}

func (w *answerWriter) Write(b []byte) (int, error) {
	w.answered = true
	return w.ResponseRecorder.Write(b)
}

// queryStatuses are the statuses docs/api.md's HTTP API documents for the
// query endpoint: 405 for a method it does not serve.
var queryStatuses = map[int]bool{200: true, 400: true, 404: true, 405: true, 413: true, 422: true, 500: true, 503: true, 504: true}

// FuzzQueryRequests: any method, fold, query name, raw query string and
// body sent to the query endpoint of a real host (the C router's fold
// "routes", the query test plugin's "q", the plugin-less "raw") is
// answered with a documented status and, but for a 200, a JSON error; a
// 200 of the router is JSON (its queries' content type); a 500 comes only
// from the query that traps; the folds go on following. A request waiting
// for a revision (min_revision) may be cut by its 50ms deadline (no
// answer: the client is gone). Mutations caught: the trap answered
// 200; a refused input answered 500 (the plugin's verdict mapped as a
// failure).
func FuzzQueryRequests(f *testing.F) {
	r, b, _ := queryHost(f)
	hosttest.Put(f, b, "route.a", `{"upstreams":[{"addr":"10.0.0.1:80","weight":3},{"addr":"10.0.0.2:80"}]}`)
	rev := hosttest.Put(f, b, "route.b", `{"upstreams":[{"addr":"10.0.0.2:80"}]}`)
	folds := []string{"routes", "q", "raw"}
	for _, name := range folds {
		hosttest.WaitCursor(f, r.H.Fold(name), rev)
	}
	h := r.H.Handler()
	for _, s := range []struct {
		method, fold, query, params string
		body                        []byte
	}{
		{"GET", "routes", "hosts_of_upstream", "input=10.0.0.2:80", nil},
		{"POST", "routes", "top_upstreams", "min_revision=1", []byte("2")},
		{"POST", "routes", "top_upstreams", "", []byte("20")},
		{"GET", "routes", "top_upstreams", "input_b64=Mw==&wait=1s", nil},
		{"POST", "routes", "hosts_of_upstream", "", bytes.Repeat([]byte("x"), 1025)},
		{"GET", "routes", "top_upstreams", "input=many&input=0", nil},
		{"GET", "q", "trap", "", nil},
		{"GET", "q", "get", "input=route.a", nil},
		{"POST", "q", "write", "", []byte("x")},
		{"GET", "raw", "top_upstreams", "", nil},
		{"PUT", "routes", "top_upstreams", "", nil},
		{"GET", "routes", "../x", "%zz", nil},
		{"GET", "nofold", "a.b", "min_revision=999&wait=1m", nil},
	} {
		f.Add(s.method, s.fold, s.query, s.params, s.body)
	}
	f.Fuzz(func(t *testing.T, method, fold, query, params string, body []byte) {
		u := &url.URL{Path: "/v1/folds/" + fold + "/query/" + query, RawQuery: params}
		// A wait for a revision the fold never reaches is cut short; any
		// other request has a minute, against a hang.
		waits := u.Query().Has("min_revision")
		limit := time.Minute
		if waits {
			limit = 50 * time.Millisecond
		}
		ctx, cancel := context.WithTimeout(context.Background(), limit)
		defer cancel()
		req := (&http.Request{Method: method, URL: u, Header: http.Header{}, Body: io.NopCloser(bytes.NewReader(body))}).WithContext(ctx)
		req.RequestURI = req.URL.RequestURI()
		w := &answerWriter{ResponseRecorder: httptest.NewRecorder()}
		h.ServeHTTP(w, req)
		what := func() string {
			return method + " " + req.URL.Path + "?" + params + " (" + clip(body) + ")"
		}
		if !w.answered {
			if ctx.Err() == nil || !waits {
				t.Fatalf("%s: no answer", what())
			}
			return
		}
		code, got := w.Code, w.Body.Bytes()
		if !queryStatuses[code] {
			t.Fatalf("%s = %d, not a documented status: %s", what(), code, got)
		}
		switch {
		case code == http.StatusOK && fold == "routes":
			if !json.Valid(got) {
				t.Fatalf("%s = 200, the router's answer is not JSON: %q", what(), got)
			}
		case code != http.StatusOK:
			var e struct {
				Error string `json:"error"`
			}
			if json.Unmarshal(got, &e) != nil || e.Error == "" {
				t.Fatalf("%s = %d, not a JSON error: %q", what(), code, got)
			}
		}
		trap := fold == "q" && query == "trap"
		if code == http.StatusInternalServerError && !trap {
			t.Fatalf("%s = 500: a 500 is the trap's alone: %s", what(), got)
		}
		if trap && code == http.StatusOK {
			t.Fatalf("%s = 200: the trap answered", what())
		}
		for _, name := range folds {
			if st := r.H.Fold(name).Status(); st.State != httpapi.StateFollowing {
				t.Fatalf("%s: fold %s is %s: %s", what(), name, st.State, st.LastError)
			}
		}
	})
}

// clip shows a body cut to 64 bytes.
func clip(b []byte) string {
	if len(b) > 64 {
		return strings.TrimSpace(string(b[:64])) + "…"
	}
	return string(b)
}
