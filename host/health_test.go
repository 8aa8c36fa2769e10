package host_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// TestNATSOutageIsVisible: while NATS is down, every fold's status says
// so (state reconnecting, since when, drops counted), the drop is logged at
// WARN and the reconnect at INFO; /readyz answers 503 once the outage
// outlasts the disconnect grace, and a host with a longer grace stays
// ready. After the reconnect the folds are ready again and keep folding.
func TestNATSOutageIsVisible(t *testing.T) {
	natsDir := t.TempDir()
	srv, err := embeddednats.Start(embeddednats.Options{Dir: natsDir})
	if err != nil {
		t.Fatal(err)
	}
	port := srv.Port()
	t.Cleanup(func() { srv.Shutdown() })
	url := srv.ClientURL()
	b, err := natskv.OpenBucket(context.Background(), hosttest.Conn(t, url), natskv.BucketConfig{Name: "routes"}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	first := hosttest.Put(t, b, "k", "1")

	start := func(name string, grace time.Duration, logs io.Writer) *hosttest.Running {
		return hosttest.StartHost(t, host.Options{
			NATS:   host.NATSOptions{Conn: natskv.ConnOptions{URL: url}, DisconnectGrace: grace},
			Logger: slog.New(slog.NewTextHandler(logs, nil)),
			Folds:  []host.FoldOptions{{Name: "routes", Bucket: "routes", DataDir: filepath.Join(t.TempDir(), name)}},
		})
	}
	logs := &syncbuf.Buffer{}
	strict := start("strict", 300*time.Millisecond, logs)
	patient := start("patient", time.Hour, io.Discard)
	fs, fp := strict.H.Fold("routes"), patient.H.Fold("routes")
	hosttest.WaitCursor(t, fs, first)
	hosttest.WaitCursor(t, fp, first)
	if st := fs.Status(); st.NATS.State != natskv.ConnConnected || !st.Ready || st.NATS.Disconnects != 0 {
		t.Fatalf("before the outage: %+v", st)
	}
	web := httptest.NewServer(strict.H.Handler())
	defer web.Close()
	readyz := func() (int, string) {
		code, body, err := hosttest.HTTPGetBody(web.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		return code, body
	}
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz before the outage: %d %s", code, body)
	}

	down := time.Now()
	srv.Shutdown()
	hosttest.WaitFor(t, func() bool { return fs.Status().NATS.State == natskv.ConnReconnecting })
	if st := fs.Status(); st.NATS.Disconnects != 1 || st.NATS.Since.Before(down) {
		t.Fatalf("during the outage: %+v", st.NATS)
	}
	hosttest.WaitFor(t, func() bool { return strings.Contains(logs.String(), "level=WARN msg=\"NATS connection lost") })
	hosttest.WaitFor(t, func() bool { return !fs.Status().Ready })
	if st := fs.Status(); !strings.Contains(st.Reason, "NATS unreachable") {
		t.Fatalf("not-ready reason: %q", st.Reason)
	}
	if code, body := readyz(); code != http.StatusServiceUnavailable || !strings.Contains(body, "NATS unreachable") {
		t.Fatalf("readyz during the outage: %d %s", code, body)
	}
	if _, body, _ := hosttest.HTTPGetBody(web.URL + "/metrics"); !strings.Contains(body, `foldhost_fold_nats_connected{fold="routes"} 0`) {
		t.Fatalf("metrics during the outage lack nats_connected 0")
	}
	if st := fp.Status(); st.NATS.State != natskv.ConnReconnecting || !st.Ready {
		t.Fatalf("a host whose grace is not over must stay ready: %+v", st)
	}

	srv, err = embeddednats.Start(embeddednats.Options{Dir: natsDir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	hosttest.WaitFor(t, func() bool { return fs.Status().NATS.State == natskv.ConnConnected && fs.Status().Ready })
	hosttest.WaitFor(t, func() bool { return strings.Contains(logs.String(), "level=INFO msg=\"NATS connection restored") })
	if code, body := readyz(); code != http.StatusOK {
		t.Fatalf("readyz after the reconnect: %d %s", code, body)
	}
	// Writes may fail until JetStream is back on the restarted server.
	var next uint64
	hosttest.WaitFor(t, func() bool {
		rev, err := b.KV().Put(context.Background(), "k", []byte("2"))
		next = rev
		return err == nil
	})
	hosttest.WaitCursor(t, fs, next)
	hosttest.WaitCursor(t, fp, next)
}
