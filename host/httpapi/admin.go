package httpapi

import (
	"context"
	"crypto/subtle"
	"errors"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/foldhost/foldhost/host/fold"
)

// Controller is implemented by folds an operator can act on.
type Controller interface {
	// Pause ends the fold's watch at a batch boundary until Resume.
	Pause() error
	// Resume restarts a paused or failed fold from its cursor.
	Resume() error
	// Reload validates the fold's plugin file again (swapped in at the
	// next batch if it changed; an error: refused) and retries a failed
	// fold.
	Reload(ctx context.Context) error
	// Rebuild starts a rebuild of the fold's views through its plugin
	// file's module beside the live fold.
	Rebuild(ctx context.Context) error
	// ReleaseEffects ends the hold on the fold's effects publisher (it
	// joined another publisher's history midway) without waiting for the
	// fence to pass the point it joined at.
	ReleaseEffects() error
}

// DeadLetterer is implemented by folds that keep dead letters.
type DeadLetterer interface {
	// DeadLetters are the stored dead letters, oldest first.
	DeadLetters() ([]fold.DeadLetter, error)
	// ReplayDeadLetters folds the dead letters (of key, if not "") again
	// through the plugin.
	ReplayDeadLetters(ctx context.Context, key string) (ReplayResult, error)
}

// deadLetters serves GET /v1/folds/{name}/deadletter.
func (s *server) deadLetters(w http.ResponseWriter, r *http.Request) {
	f := s.fold(w, r)
	if f == nil {
		return
	}
	if len(r.URL.Query()) > 0 {
		writeError(w, http.StatusBadRequest, "this endpoint takes no query parameters")
		return
	}
	d, ok := f.(DeadLetterer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "fold %q keeps no dead letters", f.Name())
		return
	}
	items, err := d.DeadLetters()
	if err != nil {
		s.storeError(w, f, err)
		return
	}
	writeJSON(w, http.StatusOK, struct {
		Fold  string            `json:"fold"`
		Count int               `json:"count"`
		Items []fold.DeadLetter `json:"items"`
	}{f.Name(), len(items), items})
}

// replay serves POST /v1/folds/{name}/deadletter/replay[?key=K|?key_b64=B].
func (s *server) replay(w http.ResponseWriter, r *http.Request) {
	f, q, how, ok := s.adminFold(w, r, "key", "key_b64")
	if !ok {
		return
	}
	key, hasKey, err := bytesParam(q, "key")
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	if hasKey && key == "" {
		writeError(w, http.StatusBadRequest, "empty key")
		return
	}
	d, ok := f.(DeadLetterer)
	if !ok {
		writeError(w, http.StatusNotImplemented, "fold %q keeps no dead letters", f.Name())
		return
	}
	res, err := d.ReplayDeadLetters(r.Context(), key)
	s.audit(r, how, "deadletter replay", f.Name(), err)
	if !writeAdminError(w, err, false) {
		writeJSON(w, http.StatusOK, res)
	}
}

// AdminStatus is the HTTP status of an admin action's error, for every
// transport: a state conflict is 409, no artifact store 501, a refused
// plugin file (refusal: the action read it) 422, anything else 500.
func AdminStatus(err error, refusal bool) int {
	switch {
	case errors.Is(err, ErrNotRunning), errors.Is(err, ErrNothingToResume), errors.Is(err, ErrNotFollowing), errors.Is(err, ErrNoViews), errors.Is(err, ErrNothingHeld):
		return http.StatusConflict
	case errors.Is(err, ErrExportNotConfigured):
		return http.StatusNotImplemented
	case refusal:
		return http.StatusUnprocessableEntity
	}
	return http.StatusInternalServerError
}

// writeAdminError answers an admin action's error (AdminStatus), if any,
// and says so.
func writeAdminError(w http.ResponseWriter, err error, refusal bool) bool {
	if err == nil {
		return false
	}
	writeError(w, AdminStatus(err, refusal), "%v", err)
	return true
}

// Errors a Controller returns for an action its fold's state rules out
// (answered 409).
var (
	// ErrNotRunning: the fold is not running (not started, or shutting
	// down).
	ErrNotRunning = errors.New("the fold is not running")
	// ErrNothingToResume: the fold is neither paused nor failed.
	ErrNothingToResume = errors.New("the fold is neither paused nor failed: nothing to resume")
	// ErrNotFollowing: the action needs a following fold.
	ErrNotFollowing = errors.New("the fold is not following")
	// ErrNoViews: the fold has no plugin, so no views to rebuild.
	ErrNoViews = errors.New("the fold has no plugin views")
	// ErrNothingHeld: the fold's effects publisher is not held.
	ErrNothingHeld = errors.New("the fold's effects are not held: nothing to release")
)

// adminFold resolves an admin request's fold, checks that its query holds
// only params (each once), and admits the caller, answering itself (404,
// 400, 403) when any of it fails.
func (s *server) adminFold(w http.ResponseWriter, r *http.Request, params ...string) (Fold, url.Values, string, bool) {
	f := s.fold(w, r)
	if f == nil {
		return nil, nil, "", false
	}
	q := r.URL.Query()
	for k, vals := range q {
		if !slices.Contains(params, k) {
			if len(params) == 0 {
				writeError(w, http.StatusBadRequest, "this endpoint takes no query parameters")
			} else {
				writeError(w, http.StatusBadRequest, "unknown parameter %q (want %s)", k, strings.Join(params, " or "))
			}
			return nil, nil, "", false
		}
		if len(vals) > 1 {
			writeError(w, http.StatusBadRequest, "query parameter %q given %d times", k, len(vals))
			return nil, nil, "", false
		}
	}
	how, ok := s.admitted(w, r)
	return f, q, how, ok
}

// admitted reports whether r may run a mutating action, answering 403
// itself when not, and how the caller was admitted ("token" or
// "loopback") for the audit log. With an admin token configured only a
// request bearing it is admitted; without one, only a request that came in
// on a loopback-only listener (an operator on the machine).
func (s *server) admitted(w http.ResponseWriter, r *http.Request) (string, bool) {
	if s.adminToken != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.adminToken)) == 1 {
			return "token", true
		}
		s.log.Warn("admin action refused: missing or wrong admin token", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		writeError(w, http.StatusForbidden, "this action needs the admin token: send 'Authorization: Bearer <token>'")
		return "", false
	}
	why := notLoopback(r)
	if why == "" {
		return "loopback", true
	}
	s.log.Warn("admin action refused: no admin token is configured and "+why, "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
	writeError(w, http.StatusForbidden, "admin actions are served on a loopback-only listener, unless an admin token is configured (FOLDHOST_ADMIN_TOKEN): %s", why)
	return "", false
}

// notLoopback says why r did not come in on a loopback-only listener, ""
// when it did. The connection's local address alone cannot tell: a
// listener on 0.0.0.0 or :: also accepts connections to 127.0.0.1, whose
// local address is then loopback. So the listener's bound address decides
// (the *http.Server's Addr: ListenAndServe sets it; a caller of Serve sets
// it to the listener's address, or admin actions need the token), and the
// connection's local address must be loopback too (an Addr that claims
// loopback for a wider listener still admits no remote peer). Neither is
// ever taken from a client-supplied header.
func notLoopback(r *http.Request) string {
	srv, _ := r.Context().Value(http.ServerContextKey).(*http.Server)
	if srv == nil || srv.Addr == "" {
		return "the listener's address is unknown (http.Server.Addr is empty: set it to the listener's address)"
	}
	if !loopbackHostPort(srv.Addr) {
		return "the listener binds " + srv.Addr + ", beyond loopback"
	}
	a, _ := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if a == nil || !loopbackHostPort(a.String()) {
		return "the connection did not arrive on a loopback address"
	}
	return ""
}

// loopbackHostPort: hostport's host is a loopback IP or "localhost" (an
// empty or unspecified host binds every interface).
func loopbackHostPort(hostport string) bool {
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// control serves POST /v1/folds/{name}/{action} for pause, resume,
// reload, rebuild and release-effects.
func (s *server) control(action string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f, _, how, ok := s.adminFold(w, r)
		if !ok {
			return
		}
		c, ok := f.(Controller)
		if !ok {
			writeError(w, http.StatusNotImplemented, "fold %q cannot be controlled", f.Name())
			return
		}
		var err error
		switch action {
		case "pause":
			err = c.Pause()
		case "resume":
			err = c.Resume()
		case "reload":
			err = c.Reload(r.Context())
		case "rebuild":
			err = c.Rebuild(r.Context())
		case "release-effects":
			err = c.ReleaseEffects()
		}
		s.audit(r, how, action, f.Name(), err)
		if !writeAdminError(w, err, action == "reload" || action == "rebuild") { // those read the plugin file
			st := f.Status()
			writeJSON(w, http.StatusOK, struct {
				Fold   string `json:"fold"`
				Action string `json:"action"`
				State  State  `json:"state"`
				Cursor uint64 `json:"cursor"`
			}{f.Name(), action, st.State, st.Cursor})
		}
	}
}

// audit logs a mutating action with the caller as the transport knows it.
func (s *server) audit(r *http.Request, how, action, fold string, err error) {
	args := []any{"action", action, "fold", fold, "remote", r.RemoteAddr, "admitted_by", how}
	if err != nil {
		s.log.Warn("admin action failed", append(args, "err", err)...)
		return
	}
	s.log.Info("admin action", args...)
}
