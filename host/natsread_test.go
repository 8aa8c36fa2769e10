package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// natsRead sends one read to the admin service and returns the reply's
// body, its micro error code ("" for success) and its cursor header.
func natsRead(t *testing.T, c *nats.Conn, endpoint, body string) (string, string, string) {
	t.Helper()
	resp, err := c.Request("foldhost.admin.n1."+endpoint, []byte(body), time.Minute)
	if err != nil {
		t.Fatalf("request %s %s: %v", endpoint, body, err)
	}
	return string(resp.Data), resp.Header.Get(micro.ErrorCodeHeader), resp.Header.Get("Foldhost-Cursor")
}

// TestReadsOverNATS: the admin service's get and range answer what the
// same reads over HTTP answer (the same body, the cursor in a header),
// with the HTTP API's rules: a missing key 404 with the cursor it was
// absent at, key_b64 for a key that is not UTF-8, pages with a
// continuation token, and read-your-writes: with the fold's loop held, a
// get of a key just put with min_revision answers 504 past its wait,
// with the cursor reached, and once released, the value. Bad requests
// are 400. Mutations caught: min_revision not passed on (the held get
// answers 404 at once, not 504); the cursor header dropped.
func TestReadsOverNATS(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Admin: host.AdminOptions{NATS: true, Node: "n1"},
		Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "routes")}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	web := httptest.NewServer(r.H.Handler())
	defer web.Close()
	c := hosttest.Conn(t, url)

	hosttest.Put(t, b, "k.a", "1")
	hosttest.Put(t, b, "k.b", "2")
	odd := "k.\xff"
	js, err := jetstream.New(c)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := js.Publish(context.Background(), "$KV.routes."+odd, []byte("3")); err != nil { // the KV client refuses such keys
		t.Fatal(err)
	}
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k.c", "4"))

	// The same answers as over HTTP.
	for _, c2 := range []struct{ endpoint, body, path string }{
		{"get", `{"fold":"routes","space":"raw","key":"k.a"}`, "/v1/folds/routes/raw?key=k.a"},
		{"get", `{"fold":"routes","space":"raw","key_b64":"` + base64.URLEncoding.EncodeToString([]byte(odd)) + `"}`,
			"/v1/folds/routes/raw?key_b64=" + base64.URLEncoding.EncodeToString([]byte(odd))},
		{"range", `{"fold":"routes","space":"raw","prefix":"k."}`, "/v1/folds/routes/raw?prefix=k."},
	} {
		got, code, cursor := natsRead(t, c, c2.endpoint, c2.body)
		resp, err := http.Get(web.URL + c2.path)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if code != "" || got != string(want) || cursor == "" || cursor != resp.Header.Get(httpapi.CursorHeader) {
			t.Errorf("%s %s: code %q cursor %q body %s; over HTTP (%d, cursor %q): %s", c2.endpoint, c2.body, code, cursor, got,
				resp.StatusCode, resp.Header.Get(httpapi.CursorHeader), want)
		}
	}

	// Pages: two keys, then the rest through the token.
	page, code, _ := natsRead(t, c, "range", `{"fold":"routes","space":"raw","prefix":"k.","limit":2}`)
	var p struct {
		Items []struct {
			Key string `json:"key"`
		} `json:"items"`
		Next string `json:"next"`
	}
	if err := json.Unmarshal([]byte(page), &p); code != "" || err != nil || len(p.Items) != 2 || p.Next == "" {
		t.Fatalf("first page: %q %v %s", code, err, page)
	}
	page, code, _ = natsRead(t, c, "range", fmt.Sprintf(`{"fold":"routes","space":"raw","prefix":"k.","limit":2,"next":%q}`, p.Next))
	p.Items, p.Next = nil, ""
	if err := json.Unmarshal([]byte(page), &p); code != "" || err != nil || len(p.Items) != 2 || p.Next != "" {
		t.Fatalf("second page: %q %v %s", code, err, page)
	}

	// A missing key: 404 with the cursor it was absent at.
	if body, code, cursor := natsRead(t, c, "get", `{"fold":"routes","space":"raw","key":"k.none"}`); code != "404" || cursor == "" {
		t.Errorf("missing key: %q cursor %q %s", code, cursor, body)
	}
	// Bad requests.
	for _, bad := range []string{`not json`, `{"space":"raw","key":"k.a"}`, `{"fold":"routes","space":"other","key":"k.a"}`,
		`{"fold":"routes","key":"a","key_b64":"YQ=="}`, `{"fold":"routes"}`, `{"fold":"routes","key":"a","wait":"1s"}`} {
		if body, code, _ := natsRead(t, c, "get", bad); code != "400" {
			t.Errorf("get %s: %q %s, want 400", bad, code, body)
		}
	}
	if body, code, _ := natsRead(t, c, "get", `{"fold":"nope","key":"a"}`); code != "404" {
		t.Errorf("unknown fold: %q %s", code, body)
	}

	// Read your writes, with the loop held.
	release := holdLoop(t, f)
	rev := hosttest.Put(t, b, "k.new", "5")
	if body, code, _ := natsRead(t, c, "get", `{"fold":"routes","space":"raw","key":"k.new"}`); code != "404" {
		t.Fatalf("plain get while held: %q %s", code, body)
	}
	body, code, cursor := natsRead(t, c, "get", fmt.Sprintf(`{"fold":"routes","space":"raw","key":"k.new","min_revision":%d,"wait":"100ms"}`, rev))
	if n, err := strconv.ParseUint(cursor, 10, 64); code != "504" || err != nil || n >= rev {
		t.Fatalf("held get with min_revision %d: %q cursor %q %s", rev, code, cursor, body)
	}
	release()
	body, code, cursor = natsRead(t, c, "get", fmt.Sprintf(`{"fold":"routes","space":"raw","key":"k.new","min_revision":%d,"wait":"1m"}`, rev))
	if n, err := strconv.ParseUint(cursor, 10, 64); code != "" || err != nil || n < rev {
		t.Fatalf("get with min_revision %d after the release: %q cursor %q %s", rev, code, cursor, body)
	}
	var e struct {
		Value string `json:"value"`
	}
	if err := json.Unmarshal([]byte(body), &e); err != nil || e.Value != "5" {
		t.Fatalf("get after the release: %v %s", err, body)
	}
}
