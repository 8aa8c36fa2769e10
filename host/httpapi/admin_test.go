package httpapi_test

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/syncbuf"
)

// controlledFold records the admin actions it gets and answers each with
// the error set for it (the real actions are tested in package host).
type controlledFold struct {
	*testFold
	calls []string
	errs  map[string]error
}

func (f *controlledFold) act(a string) error {
	f.calls = append(f.calls, a)
	return f.errs[a]
}
func (f *controlledFold) Pause() error                  { return f.act("pause") }
func (f *controlledFold) Resume() error                 { return f.act("resume") }
func (f *controlledFold) Reload(context.Context) error  { return f.act("reload") }
func (f *controlledFold) Rebuild(context.Context) error { return f.act("rebuild") }
func (f *controlledFold) ReleaseEffects() error         { return f.act("release-effects") }

// adminPost runs POST path through h as if it arrived on a connection
// whose local address is local, accepted by a server listening on listen
// ("" for a server whose Addr is unset), with the given Authorization
// header ("" for none).
func adminPost(h http.Handler, listen, local, path, auth string) *httptest.ResponseRecorder {
	r := httptest.NewRequest(http.MethodPost, path, nil)
	addr, _ := net.ResolveTCPAddr("tcp", local)
	ctx := context.WithValue(r.Context(), http.LocalAddrContextKey, addr)
	r = r.WithContext(context.WithValue(ctx, http.ServerContextKey, &http.Server{Addr: listen}))
	r.RemoteAddr = "192.0.2.7:40000"
	if auth != "" {
		r.Header.Set("Authorization", auth)
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestAdminActionsAreGated: without an admin token, POSTs are served only
// on a loopback-only listener; with one, only a request bearing it is (on
// any listener); every action served is audited with its caller, and a
// state conflict is 409, a refused reload 422. A POST from 127.0.0.1 to a
// listener on 0.0.0.0 or :: (its connection's local address is loopback)
// needs the token, as does one to a server whose listener is unknown.
// Mutations caught: the gate removed (a non-loopback POST acts), the token
// compared on loopback only, the audit line dropped, the listener's
// address not consulted (the wildcard listener's local POSTs act).
func TestAdminActionsAreGated(t *testing.T) {
	f := &controlledFold{testFold: openFold(t, "f"), errs: map[string]error{}}
	var logs syncbuf.Buffer
	open := httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	withToken := httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{f}, AdminToken: "s3cret", Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	const lo, wide = "127.0.0.1:8080", "10.1.2.3:8080"
	for _, c := range []struct {
		h                   http.Handler
		listen, local, auth string
		path                string
		code                int
		acts                bool
	}{
		{open, lo, lo, "", "/v1/folds/f/pause", 200, true},
		{open, "[::1]:8080", "[::1]:8080", "", "/v1/folds/f/resume", 200, true},
		{open, "localhost:8080", lo, "", "/v1/folds/f/pause", 200, true},
		{open, wide, wide, "", "/v1/folds/f/pause", 403, false},
		{open, wide, wide, "Bearer s3cret", "/v1/folds/f/pause", 403, false}, // no token configured: nothing opens a wide listener
		{open, wide, wide, "", "/v1/folds/f/export", 403, false},
		// A wildcard listener: a connection to 127.0.0.1 has a loopback
		// local address, but the listener is not loopback-only.
		{open, "0.0.0.0:8080", lo, "", "/v1/folds/f/pause", 403, false},
		{open, ":8080", lo, "", "/v1/folds/f/pause", 403, false},
		{open, "[::]:8080", "[::1]:8080", "", "/v1/folds/f/pause", 403, false},
		{open, "", lo, "", "/v1/folds/f/pause", 403, false},   // the listener is unknown
		{open, lo, wide, "", "/v1/folds/f/pause", 403, false}, // an Addr that claims loopback admits no remote peer
		{withToken, "0.0.0.0:8080", lo, "Bearer s3cret", "/v1/folds/f/pause", 200, true},
		{withToken, lo, lo, "", "/v1/folds/f/pause", 403, false}, // a configured token binds loopback too
		{withToken, wide, wide, "Bearer nope", "/v1/folds/f/pause", 403, false},
		{withToken, wide, wide, "s3cret", "/v1/folds/f/pause", 403, false},
		{withToken, wide, wide, "Bearer s3cret", "/v1/folds/f/reload", 200, true},
		{open, lo, lo, "", "/v1/folds/nope/pause", 404, false},
		{open, lo, lo, "", "/v1/folds/f/pause?now=1", 400, false},
	} {
		before := len(f.calls)
		w := adminPost(c.h, c.listen, c.local, c.path, c.auth)
		if w.Code != c.code || (len(f.calls) > before) != c.acts {
			t.Errorf("POST %s on listener %q local %s auth %q: %d %s (acted: %v), want %d (acted: %v)",
				c.path, c.listen, c.local, c.auth, w.Code, w.Body, len(f.calls) > before, c.code, c.acts)
		}
	}
	if got := logs.String(); !strings.Contains(got, "admin action refused: no admin token is configured and the listener binds 0.0.0.0:8080, beyond loopback") {
		t.Errorf("the refusal does not say why:\n%s", got)
	}
	if got := logs.String(); !strings.Contains(got, `msg="admin action" action=reload fold=f remote=192.0.2.7:40000 admitted_by=token`) ||
		!strings.Contains(got, `msg="admin action" action=pause fold=f remote=192.0.2.7:40000 admitted_by=loopback`) {
		t.Errorf("audit lines missing:\n%s", got)
	}

	f.errs["resume"] = httpapi.ErrNothingToResume
	f.errs["reload"] = errors.New("fold f: not a wasm module")
	if w := adminPost(open, lo, lo, "/v1/folds/f/resume", ""); w.Code != 409 || !strings.Contains(w.Body.String(), "nothing to resume") {
		t.Errorf("resume of a following fold: %d %s", w.Code, w.Body)
	}
	if w := adminPost(open, lo, lo, "/v1/folds/f/reload", ""); w.Code != 422 || !strings.Contains(w.Body.String(), "not a wasm module") {
		t.Errorf("a refused reload: %d %s", w.Code, w.Body)
	}
	f.errs["rebuild"] = httpapi.ErrNotFollowing
	if w := adminPost(open, lo, lo, "/v1/folds/f/rebuild", ""); w.Code != 409 {
		t.Errorf("rebuild of a fold that does not follow: %d %s", w.Code, w.Body)
	}
	plain := httpapi.NewHandler(httpapi.Options{Folds: []httpapi.Fold{openFold(t, "plain")}})
	if w := adminPost(plain, lo, lo, "/v1/folds/plain/pause", ""); w.Code != 501 {
		t.Errorf("pause of a fold without controls: %d %s", w.Code, w.Body)
	}
}
