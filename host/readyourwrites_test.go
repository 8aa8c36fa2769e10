package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestReadYourWrites: with the fold's loop held, a read of a key just put
// with ?min_revision=<its revision> does not answer; released, it answers
// the put value, at a cursor at or past the revision, in the cursor
// header too. A read with a short wait answers 504 with the cursor
// reached; one without min_revision answers at once from the old cursor.
// Paging and the ndjson stream take it too. Mutation caught: a read that
// ignores min_revision (it answers while the loop is held: a 404).
func TestReadYourWrites(t *testing.T) {
	url, b := hosttest.NATSServer(t)
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(t.TempDir(), "routes")}},
	})
	f := r.H.Fold("routes")
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	web := httptest.NewServer(r.H.Handler())
	defer web.Close()
	hosttest.WaitCursor(t, f, hosttest.Put(t, b, "k.old", "1"))

	release := holdLoop(t, f)
	rev := hosttest.Put(t, b, "k.new", "2")

	// Without min_revision: at once, from the cursor before the put.
	if code, body := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/raw/k.new"); code != http.StatusNotFound {
		t.Fatalf("plain read while held: %d %s", code, body)
	}
	// A short wait: 504 with the cursor reached.
	resp, err := http.Get(fmt.Sprintf("%s/v1/folds/routes/raw/k.new?min_revision=%d&wait=100ms", web.URL, rev))
	if err != nil {
		t.Fatal(err)
	}
	var late struct {
		Cursor      uint64 `json:"cursor"`
		MinRevision uint64 `json:"min_revision"`
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err := json.Unmarshal(body, &late); resp.StatusCode != http.StatusGatewayTimeout || err != nil || late.Cursor >= rev || late.MinRevision != rev || resp.Header.Get(httpapi.CursorHeader) == "" {
		t.Fatalf("short wait: %d %s (header %q)", resp.StatusCode, body, resp.Header.Get(httpapi.CursorHeader))
	}

	// Long waits, one per read path, answered once the loop goes on.
	type answer struct {
		path string
		code int
		body string
		hdr  string
	}
	paths := []string{
		fmt.Sprintf("/v1/folds/routes/raw/k.new?min_revision=%d&wait=1m", rev),
		fmt.Sprintf("/v1/folds/routes/raw?key=k.new&min_revision=%d", rev),
		fmt.Sprintf("/v1/folds/routes/raw?prefix=k.&min_revision=%d&wait=1m", rev),
		fmt.Sprintf("/v1/folds/routes/raw?prefix=k.&format=ndjson&min_revision=%d&wait=1m", rev),
	}
	answers := make(chan answer, len(paths))
	for _, p := range paths {
		go func() {
			resp, err := http.Get(web.URL + p)
			if err != nil {
				answers <- answer{path: p, body: err.Error()}
				return
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			answers <- answer{p, resp.StatusCode, string(b), resp.Header.Get(httpapi.CursorHeader)}
		}()
	}
	select {
	case a := <-answers:
		t.Fatalf("%s answered while the fold was held: %d %s", a.path, a.code, a.body)
	case <-time.After(300 * time.Millisecond): // a wrong answer would come at once; a right one never while held
	}
	release()
	var got []string
	for range paths {
		a := <-answers
		var cur uint64
		if _, err := fmt.Sscan(a.hdr, &cur); err != nil || a.code != http.StatusOK || cur < rev {
			t.Errorf("%s: %d %s (cursor header %q, want >= %d)", a.path, a.code, a.body, a.hdr, rev)
		}
		got = append(got, a.path)
	}
	slices.Sort(got)
	if len(got) != len(paths) {
		t.Fatalf("answers for %q", got)
	}
	if code, body := hosttest.HTTPGet(t, fmt.Sprintf("%s/v1/folds/routes/raw/k.new?min_revision=%d", web.URL, rev)); code != http.StatusOK {
		t.Fatalf("after the release: %d %s", code, body)
	}
	for _, bad := range []string{"?min_revision=0", "?min_revision=x", "?wait=1s", "?min_revision=1&wait=2h", "?min_revision=1&wait=-1s"} {
		if code, body := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/raw/k.new"+bad); code != http.StatusBadRequest {
			t.Errorf("%s: %d %s, want 400", bad, code, body)
		}
	}
}

// BenchmarkReadYourWrites: under a load of about 5,000 writes/s, each
// iteration puts a key and reads it back over HTTP with ?min_revision=
// its revision; reports the put-to-answer latency's p50 and p99 (ms).
// Run: go test ./host -run '^$' -bench ReadYourWrites -benchtime 2000x
func BenchmarkReadYourWrites(b *testing.B) {
	url, bk := hosttest.NATSServer(b)
	r := hosttest.StartHost(b, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(b.TempDir(), "routes")}},
	})
	hosttest.WaitState(b, r.H.Fold("routes"), httpapi.StateFollowing)
	web := httptest.NewServer(r.H.Handler())
	defer web.Close()
	js, err := jetstream.New(hosttest.Conn(b, url))
	if err != nil {
		b.Fatal(err)
	}
	stop, stopped := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(stopped)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			for j := range 50 {
				_, _ = js.PublishAsync(fmt.Sprintf("$KV.routes.load.%d", (i*50+j)%10000), []byte("x"))
			}
		}
	}()
	defer func() { close(stop); <-stopped }()
	lat := make([]float64, 0, b.N)
	b.ResetTimer()
	for i := range b.N {
		t0 := time.Now()
		rev, err := bk.KV().Put(context.Background(), fmt.Sprintf("probe.%d", i%100), []byte("v"))
		if err != nil {
			b.Fatal(err)
		}
		resp, err := http.Get(fmt.Sprintf("%s/v1/folds/routes/raw/probe.%d?min_revision=%d&wait=1m", web.URL, i%100, rev))
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatalf("read %d: %d", i, resp.StatusCode)
		}
		lat = append(lat, float64(time.Since(t0).Microseconds())/1000)
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(lat[len(lat)/2], "p50_ms")
	b.ReportMetric(lat[min(len(lat)-1, len(lat)*99/100)], "p99_ms")
}
