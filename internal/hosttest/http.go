package hosttest

import (
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
)

// HTTPGet is url's status and body; a failed request fails the test.
func HTTPGet(t testing.TB, url string) (int, string) {
	t.Helper()
	code, body, err := HTTPGetBody(url)
	if err != nil {
		t.Fatal(err)
	}
	return code, body
}

// HTTPGetBody is url's status and body (for a goroutine: no test to fail).
func HTTPGetBody(url string) (int, string, error) {
	resp, err := http.Get(url)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// GrepLines is the lines of s that hold one of subs, trimmed.
func GrepLines(s string, subs ...string) string {
	var out []string
	for l := range strings.Lines(s) {
		for _, sub := range subs {
			if strings.Contains(l, sub) {
				out = append(out, strings.TrimSpace(l))
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// PlaceFile puts data at path atomically (a file watch never sees half of
// it).
func PlaceFile(t testing.TB, path string, data []byte) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// ReadFile is path's content; an error fails the test.
func ReadFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
