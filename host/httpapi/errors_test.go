package httpapi_test

import (
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/httpapi"
)

// TestUnknownFoldNamesTheFolds: a path naming a fold that is not there
// answers 404 with the folds there are, and the nearest name when one is
// near enough to be a typo.
func TestUnknownFoldNamesTheFolds(t *testing.T) {
	srv, _, _ := fixture(t)
	code, body := get(t, srv, "/v1/folds/rotues")
	if code != 404 || !strings.Contains(body, `unknown fold \"rotues\": the folds here are \"routes\", \"empty\" (did you mean \"routes\"?)`) {
		t.Errorf("GET /v1/folds/rotues = %d %s", code, body)
	}
	if code, body := get(t, srv, "/v1/folds/zzzzzz/view/k"); code != 404 || !strings.Contains(body, `the folds here are \"routes\", \"empty\"`) ||
		strings.Contains(body, "did you mean") {
		t.Errorf("GET a fold far from every name = %d %s", code, body)
	}
}

// TestStatusPageCutsALongError: the status page shows the first line of a
// long last error (a wasm stack trace made one row twenty lines high),
// at most 400 characters, with a link to the fold's status, which has the
// whole text; a short error is shown as it is.
func TestStatusPageCutsALongError(t *testing.T) {
	srv, routes, empty := fixture(t)
	trace := "wasm plugin 5d2c: trap: wasm error: unreachable\nwasm stack trace:\n" + strings.Repeat("\tguest.func_42(i32,i32)\n", 20)
	routes.set(func(s *httpapi.Status) { s.LastError = trace })
	empty.set(func(s *httpapi.Status) { s.LastError = "short & sweet" })
	_, page := get(t, srv, "/")
	row := page[strings.Index(page, `data-fold="routes"`):]
	row = row[:strings.Index(row, "</tr>")]
	want := `<td data-col="error" class="err">wasm plugin 5d2c: trap: wasm error: unreachable … <a href="/v1/folds/routes" title="the fold's status (JSON) has the whole text">(whole text)</a></td>`
	if !strings.Contains(row, want) || strings.Contains(row, "func_42") {
		t.Errorf("the row of a long error:\n%s\nwant the cell\n%s", row, want)
	}
	if !strings.Contains(page, `<td data-col="error" class="err">short &amp; sweet</td>`) {
		t.Errorf("a short error is not shown whole:\n%s", page)
	}
	long := strings.Repeat("x", 1000)
	routes.set(func(s *httpapi.Status) { s.LastError = long })
	if _, page := get(t, srv, "/"); strings.Contains(page, long) || !strings.Contains(page, strings.Repeat("x", 400)+" … <a") {
		t.Errorf("a long one-line error is not cut at 400 characters")
	}
	if _, body := get(t, srv, "/v1/folds/routes"); !strings.Contains(body, long) {
		t.Errorf("the fold's status lacks the whole error")
	}
}
