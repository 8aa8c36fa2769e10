package forward_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/forward"
	"github.com/foldhost/foldhost/internal/leakcheck"
	"github.com/foldhost/foldhost/internal/natstest"
)

func TestMain(m *testing.M) { os.Exit(leakcheck.Run(m)) }

var opts = forward.Options{From: "a", FirstWait: time.Minute, ChunkWait: time.Minute}

// do forwards a request for path (body: POST) to subject and returns the
// recorded answer and Do's error.
func do(t *testing.T, ctx context.Context, url, subject, path, body string) (*httptest.ResponseRecorder, error) {
	t.Helper()
	nc, err := nats.Connect(url)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	method := http.MethodGet
	var r *http.Request
	if body != "" {
		method = http.MethodPost
	}
	r = httptest.NewRequestWithContext(ctx, method, path, strings.NewReader(body))
	r.Header.Set("Accept", "application/json")
	w := httptest.NewRecorder()
	c, err := forward.NewClient(nc)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return w, c.Do(ctx, subject, w, r, opts)
}

// TestForwardCarriesTheAnswer: the answer of the answering node's handler
// arrives whole: its status, its headers, a body of several chunks (1.5
// MiB), the request's method, URI, body and Accept header on the way.
// Mutation caught: chunks of one answer not all read (a body cut at a
// chunk).
func TestForwardCarriesTheAnswer(t *testing.T) {
	srv, nc := natstest.Start(t)
	big := strings.Repeat("0123456789abcdef", 96<<10) // 1.5 MiB
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		w.Header().Set("X-Seen", r.Method+" "+r.URL.RequestURI()+" "+string(b)+" "+r.Header.Get("Accept"))
		w.WriteHeader(http.StatusTeapot)
		_, _ = io.WriteString(w, big)
	})
	s, err := forward.Serve(context.Background(), nc, "fwd.b", h, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	w, err := do(t, context.Background(), srv.ClientURL(), "fwd.b", "/v1/x?y=1", "in")
	if err != nil {
		t.Fatal(err)
	}
	if w.Code != http.StatusTeapot || w.Header().Get("X-Seen") != "POST /v1/x?y=1 in application/json" || w.Body.String() != big {
		t.Fatalf("%d %q, %d bytes", w.Code, w.Header().Get("X-Seen"), w.Body.Len())
	}
}

// TestForwardFailures: no node on the subject is ErrNoResponder at once;
// a handler that panics midway ends in ErrTruncated (its answer's status
// was written: the caller must abort, not pass a short body on); a node
// answering as many as it may answers the next 503 at once; a silent
// node is a timeout of the caller's context.
func TestForwardFailures(t *testing.T) {
	srv, nc := natstest.Start(t)
	if _, err := do(t, context.Background(), srv.ClientURL(), "fwd.none", "/", ""); !errors.Is(err, forward.ErrNoResponder) {
		t.Fatalf("no node: %v", err)
	}

	panicky := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, "half")
		w.(http.Flusher).Flush()
		panic("broken")
	})
	s, err := forward.Serve(context.Background(), nc, "fwd.panic", panicky, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	if w, err := do(t, context.Background(), srv.ClientURL(), "fwd.panic", "/", ""); !errors.Is(err, forward.ErrTruncated) || !strings.Contains(err.Error(), "broken") || w.Body.String() != "half" {
		t.Fatalf("a handler that panicked: %v (body %q)", err, w.Body.String())
	}

	release := make(chan struct{})
	var entered sync.WaitGroup
	entered.Add(1)
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		entered.Done()
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	s2, err := forward.Serve(context.Background(), nc, "fwd.slow", slow, 1)
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Stop()
	first := make(chan error, 1)
	go func() {
		_, err := do(t, context.Background(), srv.ClientURL(), "fwd.slow", "/", "")
		first <- err
	}()
	entered.Wait()
	if w, err := do(t, context.Background(), srv.ClientURL(), "fwd.slow", "/", ""); err != nil || w.Code != http.StatusServiceUnavailable {
		t.Fatalf("a second request to a node answering its one: %v %d", err, w.Code)
	}
	silent, err := nc.Subscribe("fwd.silent", func(*nats.Msg) {}) // a paused node: listening, never answering
	if err != nil {
		t.Fatal(err)
	}
	defer silent.Unsubscribe()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	if _, err := do(t, ctx, srv.ClientURL(), "fwd.silent", "/", ""); err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a silent node: %v", err)
	}
	close(release)
	if err := <-first; err != nil {
		t.Fatalf("the first request: %v", err)
	}
}

// TestForwardAnswersFindTheirRequests: one client's 40 requests at once,
// answered out of order (each after a random pause) and in several chunks
// each, each get their own answer whole: the answers share the client's
// one inbox subscription and are routed by their inbox. Mutation caught:
// a chunk routed to another waiting request.
func TestForwardAnswersFindTheirRequests(t *testing.T) {
	seed := time.Now().UnixNano()
	t.Logf("seed %d", seed)
	srv, nc := natstest.Start(t)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.URL.Query().Get("id")
		n, _ := strconv.Atoi(id)
		time.Sleep(time.Duration((int64(n)*7919+seed)%20) * time.Millisecond) // answers out of order
		_, _ = io.WriteString(w, strings.Repeat(id+",", 100<<10))             // several chunks
	})
	s, err := forward.Serve(context.Background(), nc, "fwd.many", h, 64)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	nc2, err := nats.Connect(srv.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc2.Close()
	c, err := forward.NewClient(nc2)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	var wg sync.WaitGroup
	errs := make([]error, 40)
	for i := range errs {
		wg.Go(func() {
			w := httptest.NewRecorder()
			r := httptest.NewRequest(http.MethodGet, "/x?id="+strconv.Itoa(i), nil)
			if err := c.Do(context.Background(), "fwd.many", w, r, opts); err != nil {
				errs[i] = err
			} else if want := strings.Repeat(strconv.Itoa(i)+",", 100<<10); w.Body.String() != want {
				errs[i] = fmt.Errorf("request %d: %d bytes, not its own answer (starts %.20q)", i, w.Body.Len(), w.Body.String())
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		t.Fatal(err)
	}
}
