package httpapi

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/internal/textfmt"
)

// Options configures NewHandler.
type Options struct {
	// Folds served, in the order /v1/folds lists them. Names must be
	// unique.
	Folds []Fold
	// Metrics behind /metrics; nil creates one that tracks Folds. A
	// caller-supplied Metrics must already Track the folds.
	Metrics *Metrics
	// Logger for request errors and the audit of admin actions; default
	// slog.Default().
	Logger *slog.Logger
	// AdminToken, if set, is the bearer token every POST (an admin
	// action) must carry; unset, POSTs are served only on a loopback-only
	// listener: the *http.Server's Addr is a loopback address (as
	// ListenAndServe sets it; a caller of Serve sets Addr to its
	// listener's address) and so is the connection's local address. A
	// listener on 0.0.0.0 or :: is not loopback-only, though a connection
	// to 127.0.0.1 through it has a loopback local address.
	AdminToken string
	// PageSnapshotTTL is how long the pages of a range keep reading the
	// first page's snapshot; default DefaultPageSnapshotTTL.
	PageSnapshotTTL time.Duration
	// Placement says where a fold's partitions run (GET
	// /v1/folds/{name}/partitions); nil: one partition, this node's, at
	// the fold's state and cursor.
	Placement func(Fold) []PartitionStatus
	// Groups are the partitioned folds whose queries are asked by the
	// fold's own name (Group).
	Groups []Group
}

// NewHandler returns the API's handler:
//
//	GET /                                 the status page: an HTML table of the folds (no script)
//	GET /healthz                          200 "ok" while the process serves
//	GET /readyz                           200 "ok" once every fold is ready, else 503 with the reasons
//	GET /metrics                          Prometheus exposition
//	GET /v1/folds                         {"folds": [Status...]}
//	GET /v1/folds/{name}                  Status
//	GET /v1/folds/{name}/partitions       where its partitions run (Partitions)
//	GET /v1/folds/{name}/view/{key...}    one view entry
//	GET /v1/folds/{name}/view?prefix=P&limit=N[&next=T]   view entries by prefix, a page at a time (or ?key=K: one entry)
//	GET /v1/folds/{name}/raw/{key...}     one raw entry
//	GET /v1/folds/{name}/raw?prefix=P&limit=N[&next=T]    raw entries by prefix, a page at a time (or ?key=K: one entry)
//	GET /v1/folds/{name}/raw?prefix=P&format=ndjson  every raw entry of the prefix, streamed (also view)
//	GET /v1/folds/{name}/query/{query}?input=I   a plugin query's answer ([Querier]; or ?input_b64=)
//	POST /v1/folds/{name}/query/{query}   the same, the body as the input (a read, not an admin action)
//	POST /v1/folds/{name}/export[?force=true]    run an export round now ([Exporter]); its result
//	POST /v1/folds/{name}/pause           stop the watch at a batch boundary ([Controller])
//	POST /v1/folds/{name}/resume          restart a paused or failed fold from its cursor
//	POST /v1/folds/{name}/reload          validate the plugin file again; retry a failed fold
//	POST /v1/folds/{name}/rebuild         rebuild the views through the plugin file's module
//	GET /v1/folds/{name}/deadletter       the updates the plugin failed on and the fold skipped ([DeadLetterer])
//	POST /v1/folds/{name}/deadletter/replay[?key=K]  fold them again through the plugin
//
// Every read above takes ?min_revision=R[&wait=D] (read your writes:
// answered once the fold's cursor reached R, 504 past D) and answers its
// cursor in the X-Foldhost-Cursor header (CursorHeader).
//
// Every key and prefix parameter has a base64 twin (key_b64, prefix_b64:
// DecodeB64) for bytes a URL cannot carry as text; every key an answer
// holds is in key_b64, so a listed key always reads back.
//
// Every POST but a query's is an admin action: refused (403) unless it bears the
// configured admin token, or, with none configured, came in on a
// loopback-only listener (Options.AdminToken); each one is logged with its
// caller, and each refusal with its reason.
//
// Unknown folds and keys are 404, bad parameters 400, a store that is
// closing 503; error bodies are {"error": "..."} (plus the key and the
// "cursor" for a missing key: the position at which it was absent).
func NewHandler(o Options) http.Handler {
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics()
		o.Metrics.Track(o.Folds)
	}
	s := &server{folds: map[string]Fold{}, order: o.Folds, log: o.Logger, adminToken: o.AdminToken, metrics: o.Metrics, placement: o.Placement}
	if s.placement == nil {
		s.placement = func(f Fold) []PartitionStatus {
			st := f.Status()
			return []PartitionStatus{{State: string(st.State), Cursor: st.Cursor, Standbys: []string{}}}
		}
	}
	s.pages.ttl = o.PageSnapshotTTL
	if s.pages.ttl <= 0 {
		s.pages.ttl = DefaultPageSnapshotTTL
	}
	for _, f := range o.Folds {
		s.folds[f.Name()] = f
	}
	s.groups = map[string]Group{}
	for _, g := range o.Groups {
		s.groups[g.Name] = g
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /{$}", s.page) // exactly "/": other unknown paths stay 404
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", s.readyz)
	mux.Handle("GET /metrics", o.Metrics.Handler())
	mux.HandleFunc("GET /v1/folds", s.list)
	mux.HandleFunc("GET /v1/folds/{name}", s.status)
	mux.HandleFunc("GET /v1/folds/{name}/partitions", s.partitions)
	mux.HandleFunc("GET /v1/folds/{name}/view/{key...}", s.getOne(viewSpace))
	mux.HandleFunc("GET /v1/folds/{name}/raw/{key...}", s.getOne(rawSpace))
	mux.HandleFunc("GET /v1/folds/{name}/view", s.collection(viewSpace))
	mux.HandleFunc("GET /v1/folds/{name}/raw", s.collection(rawSpace))
	mux.HandleFunc("GET /v1/folds/{name}/query/{query}", s.query)
	mux.HandleFunc("POST /v1/folds/{name}/query/{query}", s.query)
	mux.HandleFunc("POST /v1/folds/{name}/export", s.export)
	mux.HandleFunc("GET /v1/folds/{name}/deadletter", s.deadLetters)
	mux.HandleFunc("POST /v1/folds/{name}/deadletter/replay", s.replay)
	for _, a := range []string{"pause", "resume", "reload", "rebuild", "release-effects"} {
		mux.HandleFunc("POST /v1/folds/{name}/"+a, s.control(a))
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		// The catch-all matches every method, so the mux's own 405 never
		// fires: answer it here for a path another method serves.
		var allow []string
		for _, m := range []string{http.MethodGet, http.MethodPost} {
			r2 := r.Clone(r.Context())
			r2.Method = m
			if _, pattern := mux.Handler(r2); m != r.Method && pattern != "/" {
				allow = append(allow, m)
			}
		}
		if len(allow) > 0 {
			if slices.Contains(allow, http.MethodGet) {
				allow = append(allow, http.MethodHead)
			}
			w.Header().Set("Allow", strings.Join(allow, ", "))
			writeError(w, http.StatusMethodNotAllowed, "method %s not allowed on %s (allowed: %s)", r.Method, r.URL.Path, strings.Join(allow, ", "))
			return
		}
		writeError(w, http.StatusNotFound, "no such endpoint: %s %s", r.Method, r.URL.Path)
	})
	// The mux would answer an unclean path ("//", "/./", "/../") with a
	// redirect to its cleaned form: for a key read, another key.
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			// A reader too slow to take its answer must not hold a store
			// snapshot (and its pinned files) for ever. Ignored where the
			// writer has no deadlines (tests' recorders).
			_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(ReadWriteTimeout))
		}
		if p := r.URL.Path; p != "" && path.Clean(p) != strings.TrimSuffix(p, "/") && p != "/" {
			writeError(w, http.StatusBadRequest, "path %q is not clean: read keys holding \"//\", \".\" or \"..\" segments with ?key= or ?key_b64=", p)
			return
		}
		mux.ServeHTTP(w, r)
	})
}

type server struct {
	folds      map[string]Fold
	order      []Fold
	log        *slog.Logger
	adminToken string
	metrics    *Metrics
	pages      pageSnaps
	rates      pageRates // the status page's rates
	placement  func(Fold) []PartitionStatus
	groups     map[string]Group
}

type space int

const (
	rawSpace space = iota
	viewSpace
)

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	var reasons []string
	for _, f := range s.order {
		if st := f.Status(); !st.Ready && st.State != StateElsewhere {
			reasons = append(reasons, "fold "+f.Name()+": "+st.Reason)
		}
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if len(reasons) == 0 {
		fmt.Fprintln(w, "ok")
		return
	}
	w.WriteHeader(http.StatusServiceUnavailable)
	fmt.Fprintln(w, "not ready:")
	for _, r := range reasons {
		fmt.Fprintln(w, "- "+r)
	}
}

// ReadWriteTimeout bounds writing the answer of every request but an
// export (whose round runs as long as it must).
const ReadWriteTimeout = time.Minute

func (s *server) list(w http.ResponseWriter, _ *http.Request) {
	out := struct {
		Folds []Status `json:"folds"`
	}{Folds: make([]Status, 0, len(s.order))}
	for _, f := range s.order {
		out.Folds = append(out.Folds, f.Status())
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *server) status(w http.ResponseWriter, r *http.Request) {
	if f := s.fold(w, r); f != nil {
		writeJSON(w, http.StatusOK, f.Status())
	}
}

// fold resolves {name}, answering 404 itself when unknown.
func (s *server) fold(w http.ResponseWriter, r *http.Request) Fold {
	name := r.PathValue("name")
	f, ok := s.folds[name]
	if !ok {
		names := make([]string, len(s.order))
		for i, f := range s.order {
			names[i] = f.Name()
		}
		writeError(w, http.StatusNotFound, "unknown fold %q: %s", name, textfmt.NoSuch("the folds here", name, names))
		return nil
	}
	return f
}

// snapshot opens a snapshot of f, answering the error itself.
func (s *server) snapshot(w http.ResponseWriter, f Fold) *fold.Snapshot {
	sn, err := f.Snapshot()
	if err != nil {
		s.storeError(w, f, err)
		return nil
	}
	return sn
}

func (s *server) storeError(w http.ResponseWriter, f Fold, err error) {
	if errors.Is(err, fold.ErrClosed) {
		writeError(w, http.StatusServiceUnavailable, "fold %s: store closed (shutting down)", f.Name())
		return
	}
	s.log.Error("http: read failed", "fold", f.Name(), "err", err)
	writeError(w, http.StatusInternalServerError, "fold %s: read failed: %v", f.Name(), err)
}

// KeyParam is the key a ?key= or ?key_b64= read names.
func KeyParam(q url.Values) (key string, has bool, err error) { return bytesParam(q, "key") }

// bytesParam reads the byte-string parameter name of q, given as text
// (?name=) or in base64 (?name_b64=), not both.
func bytesParam(q url.Values, name string) (v string, has bool, err error) {
	b64 := name + "_b64"
	switch {
	case q.Has(name) && q.Has(b64):
		return "", false, fmt.Errorf("give %s or %s, not both", name, b64)
	case q.Has(b64):
		b, err := DecodeB64(q.Get(b64))
		if err != nil {
			return "", false, fmt.Errorf("%s is not base64: %q", b64, q.Get(b64))
		}
		return string(b), true, nil
	}
	return q.Get(name), q.Has(name), nil
}

// WriteJSON answers v as JSON with code, as every endpoint does.
func WriteJSON(w http.ResponseWriter, code int, v any) { writeJSON(w, code, v) }

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteError answers {"error": ...} with code, as every endpoint's
// failures do.
func WriteError(w http.ResponseWriter, code int, format string, args ...any) {
	writeError(w, code, format, args...)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{strings.TrimSpace(msg)})
}
