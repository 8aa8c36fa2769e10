package host_test

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http/httptest"
	"net/url"
	"path/filepath"
	"testing"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
)

// TestBinaryKeysThroughTheAPI: keys a publisher put in a KV subject with
// bytes a KV client refuses (>= 0x80) are folded as they are, listed apart
// (key_b64) and read back through ?key_b64=, from NATS to the HTTP answer.
// 128 such keys listed as one "k\uFFFD" before.
func TestBinaryKeysThroughTheAPI(t *testing.T) {
	url0, _ := hosttest.NATSServer(t)
	dir := t.TempDir()
	r := hosttest.StartHost(t, host.Options{
		NATS:  host.NATSOptions{Conn: natskv.ConnOptions{URL: url0}},
		Folds: []host.FoldOptions{{Name: "routes", DataDir: filepath.Join(dir, "a")}},
	})
	f := r.H.Fold("routes")
	nc, err := nats.Connect(url0)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	var last uint64
	var keys []string
	for b := 0x80; b < 0x100; b++ {
		k := "k" + string([]byte{byte(b)})
		ack, err := js.Publish(context.Background(), "$KV.routes."+k, []byte{byte(b)})
		if err != nil {
			t.Fatal(err)
		}
		last, keys = ack.Sequence, append(keys, k)
	}
	hosttest.WaitCursor(t, f, last)
	web := httptest.NewServer(r.H.Handler())
	defer web.Close()
	code, body := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/raw?prefix=k&limit=1000")
	var page struct {
		Items []struct {
			Key    *string `json:"key"`
			KeyB64 string  `json:"key_b64"`
		}
	}
	if err := json.Unmarshal([]byte(body), &page); code != 200 || err != nil {
		t.Fatalf("listing: %d %v %.200s", code, err, body)
	}
	distinct := map[string]bool{}
	for _, it := range page.Items {
		distinct[it.KeyB64] = true
		if it.Key != nil {
			t.Errorf("key %q of key_b64 %s: a non-UTF-8 key given as text", *it.Key, it.KeyB64)
		}
		if code, body := hosttest.HTTPGet(t, web.URL+"/v1/folds/routes/raw?key_b64="+url.QueryEscape(it.KeyB64)); code != 200 {
			t.Errorf("read back %s: %d %s", it.KeyB64, code, body)
		}
	}
	if len(page.Items) != len(keys) || len(distinct) != len(keys) {
		t.Fatalf("%d keys published, %d listed, %d distinct", len(keys), len(page.Items), len(distinct))
	}
	for _, k := range keys {
		if !distinct[base64.StdEncoding.EncodeToString([]byte(k))] {
			t.Errorf("key %q not listed", k)
		}
	}
}
