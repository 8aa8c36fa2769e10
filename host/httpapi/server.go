package httpapi

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Range limits: ?limit defaults to DefaultLimit and must be in 1..MaxLimit.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
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
}

// NewHandler returns the API's handler:
//
//	GET /                                 the status page: an HTML table of the folds (no script)
//	GET /healthz                          200 "ok" while the process serves
//	GET /readyz                           200 "ok" once every fold is ready, else 503 with the reasons
//	GET /metrics                          Prometheus exposition
//	GET /v1/folds                         {"folds": [Status...]}
//	GET /v1/folds/{name}                  Status
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
	s := &server{folds: map[string]Fold{}, order: o.Folds, log: o.Logger, adminToken: o.AdminToken, metrics: o.Metrics}
	s.pages.ttl = o.PageSnapshotTTL
	if s.pages.ttl <= 0 {
		s.pages.ttl = DefaultPageSnapshotTTL
	}
	for _, f := range o.Folds {
		s.folds[f.Name()] = f
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
}

type space int

const (
	rawSpace space = iota
	viewSpace
)

func (s *server) readyz(w http.ResponseWriter, _ *http.Request) {
	var reasons []string
	for _, f := range s.order {
		if st := f.Status(); !st.Ready {
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

// Exporter is implemented by folds that can export an artifact on demand.
type Exporter interface {
	// Export runs an export round now and returns its JSON-encodable
	// result. force runs it without the fleet's lease. An error that
	// wraps ErrExportNotConfigured answers 501.
	Export(ctx context.Context, force bool) (any, error)
}

// ErrExportNotConfigured: the fold has no artifact store to export to.
var ErrExportNotConfigured = errors.New("artifact export is not configured")

func (s *server) export(w http.ResponseWriter, r *http.Request) {
	f, q, how, ok := s.adminFold(w, r, "force")
	if !ok {
		return
	}
	force, err := parseBool(q.Get("force"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "force: %v", err)
		return
	}
	ex, ok := f.(Exporter)
	if !ok {
		writeError(w, http.StatusNotImplemented, "fold %q: %v", f.Name(), ErrExportNotConfigured)
		return
	}
	res, err := ex.Export(r.Context(), force)
	action := "export"
	if force {
		action = "export --force"
	}
	s.audit(r, how, action, f.Name(), err)
	switch {
	case errors.Is(err, ErrExportNotConfigured):
		writeError(w, http.StatusNotImplemented, "fold %q: %v", f.Name(), err)
	case err != nil:
		s.log.Warn("export round failed", "fold", f.Name(), "err", err)
		writeError(w, http.StatusInternalServerError, "fold %q: export: %v", f.Name(), err)
	default:
		writeJSON(w, http.StatusOK, res)
	}
}

func parseBool(v string) (bool, error) {
	switch v {
	case "", "0", "false":
		return false, nil
	case "1", "true":
		return true, nil
	}
	return false, fmt.Errorf("%q: want true or false", v)
}

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
		writeError(w, http.StatusNotFound, "unknown fold %q", name)
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

// Read-your-writes: a read with ?min_revision=N answers from a snapshot
// whose cursor is at least N (a KV put's revision), waiting up to ?wait
// (default DefaultReadWait, at most MaxReadWait) for the fold to get
// there; past it, 504 with the cursor reached. Every read answer carries
// its snapshot's cursor in the CursorHeader header (and a "cursor" field).
const (
	DefaultReadWait = 5 * time.Second
	MaxReadWait     = time.Minute
	CursorHeader    = "X-Foldhost-Cursor"
)

// CursorWaiter is a Fold whose reads can wait for its cursor without
// polling: CursorAdvanced returns a channel closed by its next commit
// (fold.Store.CursorAdvanced). A Fold without it is polled.
type CursorWaiter interface {
	CursorAdvanced() <-chan struct{}
}

// readAt is a read's consistency request.
type readAt struct {
	min  protocol.Revision
	wait time.Duration
}

// readAtParams reads ?min_revision and ?wait.
func readAtParams(q url.Values) (readAt, error) {
	var at readAt
	if q.Has("min_revision") {
		n, err := strconv.ParseUint(q.Get("min_revision"), 10, 64)
		if err != nil || n == 0 {
			return at, fmt.Errorf("min_revision must be a revision (a positive integer, e.g. a KV put's), got %q", q.Get("min_revision"))
		}
		at.min, at.wait = protocol.Revision(n), DefaultReadWait
	}
	if q.Has("wait") {
		d, err := time.ParseDuration(q.Get("wait"))
		switch {
		case !q.Has("min_revision"):
			return at, errors.New("wait needs min_revision (the revision to wait for)")
		case err != nil || d < 0 || d > MaxReadWait:
			return at, fmt.Errorf("wait must be a duration from 0s to %v (e.g. 500ms), got %q", MaxReadWait, q.Get("wait"))
		}
		at.wait = d
	}
	return at, nil
}

// snapshotAt takes the read's snapshot once the fold's cursor reached
// at.min, and sets the cursor header. It answers (and returns nil) on a
// store error, a timeout (504) or a client gone.
func (s *server) snapshotAt(w http.ResponseWriter, r *http.Request, f Fold, at readAt) *fold.Snapshot {
	var timeout <-chan time.Time
	for {
		var adv <-chan struct{}
		cw, waits := f.(CursorWaiter)
		if at.min > 0 && waits {
			adv = cw.CursorAdvanced() // before the cursor is read: no commit missed
		}
		sn := s.snapshot(w, f)
		if sn == nil {
			return nil
		}
		cur := sn.Cursor().Rev
		if cur >= at.min {
			w.Header().Set(CursorHeader, strconv.FormatUint(uint64(cur), 10))
			return sn
		}
		sn.Close()
		if timeout == nil {
			t := time.NewTimer(at.wait)
			defer t.Stop()
			timeout = t.C
		}
		var poll <-chan time.Time
		if !waits {
			poll = time.After(10 * time.Millisecond)
		}
		select {
		case <-adv:
		case <-poll:
		case <-r.Context().Done():
			return nil
		case <-timeout:
			w.Header().Set(CursorHeader, strconv.FormatUint(uint64(cur), 10))
			writeJSON(w, http.StatusGatewayTimeout, struct {
				Error       string `json:"error"`
				Fold        string `json:"fold"`
				Cursor      uint64 `json:"cursor"`
				MinRevision uint64 `json:"min_revision"`
			}{fmt.Sprintf("fold %s: its cursor reached %d, not min_revision %d, within %v", f.Name(), cur, at.min, at.wait), f.Name(), uint64(cur), uint64(at.min)})
			return nil
		}
	}
}

func (s *server) storeError(w http.ResponseWriter, f Fold, err error) {
	if errors.Is(err, fold.ErrClosed) {
		writeError(w, http.StatusServiceUnavailable, "fold %s: store closed (shutting down)", f.Name())
		return
	}
	s.log.Error("http: read failed", "fold", f.Name(), "err", err)
	writeError(w, http.StatusInternalServerError, "fold %s: read failed: %v", f.Name(), err)
}

// getOne serves /{space}/{key...}.
func (s *server) getOne(sp space) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := s.fold(w, r)
		if f == nil {
			return
		}
		q := r.URL.Query()
		for name, vals := range q {
			if name != "min_revision" && name != "wait" {
				writeError(w, http.StatusBadRequest, "unknown query parameter %q (this endpoint takes min_revision and wait only)", name)
				return
			}
			if len(vals) > 1 {
				writeError(w, http.StatusBadRequest, "query parameter %q given %d times", name, len(vals))
				return
			}
		}
		at, err := readAtParams(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		key := r.PathValue("key")
		if key == "" {
			writeError(w, http.StatusBadRequest, "empty key")
			return
		}
		s.get(w, r, f, sp, key, at)
	}
}

// Single-key reads answer the entry plus the fold and the cursor it
// reflects.
type rawGetResponse struct {
	Fold   string `json:"fold"`
	Cursor uint64 `json:"cursor"`
	Staleness
	RawItem
}

type viewGetResponse struct {
	Fold   string `json:"fold"`
	Cursor uint64 `json:"cursor"`
	Staleness
	ViewItem
}

// Staleness qualifies the cursor an answer carries, when it needs it.
//
// RepairPending marks an answer read from a store a repair began on and
// has not finished (a repair that failed or was cut short): some of its
// data may be newer than the cursor beside it. Absent otherwise.
//
// Settled is set on a prefix-scoped fold's answer read within about a
// second of a delivery (its settle probe's interval): every update of the
// scope up to Settled is in the answer, but between Settled and the cursor
// the fold's filtered consumer may have been clamped past updates that
// retention evicted (the probe finds out, and the fold repairs). Absent
// when it equals the cursor.
type Staleness struct {
	RepairPending bool    `json:"repair_pending,omitempty"`
	Settled       *uint64 `json:"settled,omitempty"`
}

func stalenessOf(sn *fold.Snapshot) Staleness {
	p, _ := sn.RepairPending() // a read error shows in the read itself
	st := Staleness{RepairPending: p}
	if c := sn.Cursor(); c.Unsettled {
		settled := uint64(c.Settled)
		st.Settled = &settled
	}
	return st
}

func (s *server) get(w http.ResponseWriter, r *http.Request, f Fold, sp space, key string, at readAt) {
	sn := s.snapshotAt(w, r, f, at)
	if sn == nil {
		return
	}
	defer sn.Close()
	cursor := uint64(sn.Cursor().Rev)
	pending := stalenessOf(sn)
	var resp any
	var found bool
	var err error
	if sp == rawSpace {
		var e fold.Entry
		if e, found, err = sn.Get(key); found {
			resp = rawGetResponse{f.Name(), cursor, pending, NewRawItem([]byte(key), e.Rev, e.Value)}
		}
	} else {
		var v []byte
		if v, found, err = sn.ViewGet([]byte(key)); found {
			resp = viewGetResponse{f.Name(), cursor, pending, NewViewItem([]byte(key), v)}
		}
	}
	switch {
	case err != nil:
		s.storeError(w, f, err)
	case !found:
		miss := struct {
			Error  string  `json:"error"`
			Fold   string  `json:"fold"`
			Key    *string `json:"key,omitempty"`
			KeyB64 string  `json:"key_b64"`
			Cursor uint64  `json:"cursor"`
			Staleness
		}{Error: fmt.Sprintf("key %q not found", key), Fold: f.Name(), Cursor: cursor, Staleness: pending}
		miss.Key, miss.KeyB64 = Bytes([]byte(key))
		writeJSON(w, http.StatusNotFound, miss)
	default:
		writeJSON(w, http.StatusOK, resp)
	}
}

// rangeResponse is the body of a prefix read.
type rangeResponse struct {
	Fold   string `json:"fold"`
	Cursor uint64 `json:"cursor"`
	Staleness
	// Prefix follows the byte-string rule ([Bytes]): text when valid
	// UTF-8, always base64.
	Prefix    *string `json:"prefix,omitempty"`
	PrefixB64 string  `json:"prefix_b64"`
	Limit     int     `json:"limit"`
	Count     int     `json:"count"`
	// Truncated is true when more entries match than Limit; Next is then
	// the token of the next page (?next=), which starts after this page's
	// last key, read from this page's snapshot (for PageSnapshotTTL from
	// the first page).
	Truncated bool   `json:"truncated"`
	Next      string `json:"next,omitempty"`
	// SnapshotExpired: this page was asked for with a token whose
	// snapshot is gone (older than PageSnapshotTTL, or let go): it is
	// read from a fresh one, at a newer cursor than the pages before.
	SnapshotExpired bool `json:"snapshot_expired,omitempty"`
	Items           any  `json:"items"`
}

var errLimit = errors.New("limit reached")

// collection serves /{space}?prefix=P&limit=N and /{space}?key=K.
func (s *server) collection(sp space) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		f := s.fold(w, r)
		if f == nil {
			return
		}
		q := r.URL.Query()
		for name, vals := range q {
			switch name {
			case "prefix", "prefix_b64", "limit", "key", "key_b64", "next", "format", "min_revision", "wait":
			default:
				writeError(w, http.StatusBadRequest, "unknown query parameter %q (want prefix or prefix_b64, limit and next, or key or key_b64, or format; and min_revision, wait)", name)
				return
			}
			if len(vals) > 1 {
				writeError(w, http.StatusBadRequest, "query parameter %q given %d times", name, len(vals))
				return
			}
		}
		at, err := readAtParams(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		key, hasKey, err := bytesParam(q, "key")
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		prefix, hasPrefix, err := bytesParam(q, "prefix")
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		if hasKey {
			if hasPrefix || q.Has("limit") || q.Has("next") || q.Has("format") {
				writeError(w, http.StatusBadRequest, "key reads one entry: it does not combine with prefix, limit, next or format")
				return
			}
			if key == "" {
				writeError(w, http.StatusBadRequest, "empty key")
				return
			}
			s.get(w, r, f, sp, key, at)
			return
		}
		if q.Has("format") {
			if q.Get("format") != "ndjson" {
				writeError(w, http.StatusBadRequest, "format must be ndjson, got %q", q.Get("format"))
				return
			}
			if q.Has("limit") || q.Has("next") {
				writeError(w, http.StatusBadRequest, "format=ndjson streams the whole range: it does not combine with limit or next")
				return
			}
			s.streamNDJSON(w, r, f, sp, prefix, at)
			return
		}
		limit := DefaultLimit
		if q.Has("limit") {
			n, err := strconv.Atoi(q.Get("limit"))
			if err != nil || n < 1 || n > MaxLimit {
				writeError(w, http.StatusBadRequest, "limit must be an integer between 1 and %d, got %q", MaxLimit, q.Get("limit"))
				return
			}
			limit = n
		}
		var after []byte
		var id uint64
		var sn *fold.Snapshot
		expired := false
		if q.Has("next") {
			if id, after, err = parsePageToken(q.Get("next")); err != nil || len(after) == 0 {
				writeError(w, http.StatusBadRequest, "next must be the token a truncated range answered, got %q", q.Get("next"))
				return
			}
			// The first page's snapshot, unless it expired or is older
			// than the read asks for.
			if sn = s.pages.take(id, f.Name(), sp, time.Now()); sn != nil && sn.Cursor().Rev < at.min {
				sn.Close()
				sn = nil
			}
			if sn == nil {
				id, expired = 0, true
			} else {
				w.Header().Set(CursorHeader, strconv.FormatUint(uint64(sn.Cursor().Rev), 10))
			}
		}
		if sn == nil {
			if sn = s.snapshotAt(w, r, f, at); sn == nil {
				return
			}
		}
		defer sn.Close()
		resp := rangeResponse{Fold: f.Name(), Cursor: uint64(sn.Cursor().Rev), Staleness: stalenessOf(sn), Limit: limit, SnapshotExpired: expired}
		resp.Prefix, resp.PrefixB64 = Bytes([]byte(prefix))
		var last []byte // the page's last key
		if sp == rawSpace {
			items := make([]RawItem, 0, min(limit, 64))
			err = sn.RawRangeAfter(prefix, string(after), func(k []byte, rev protocol.Revision, v []byte) error {
				if len(items) == limit {
					resp.Truncated = true
					return errLimit
				}
				items = append(items, NewRawItem(k, rev, v))
				last = append(last[:0], k...)
				return nil
			})
			resp.Items, resp.Count = items, len(items)
		} else {
			items := make([]ViewItem, 0, min(limit, 64))
			err = sn.ViewRangeAfter([]byte(prefix), after, func(k, v []byte) error {
				if len(items) == limit {
					resp.Truncated = true
					return errLimit
				}
				items = append(items, NewViewItem(k, v))
				last = append(last[:0], k...)
				return nil
			})
			resp.Items, resp.Count = items, len(items)
		}
		if resp.Truncated {
			if id == 0 {
				id = s.pages.keep(sn, f.Name(), sp, time.Now())
			}
			resp.Next = pageToken(id, last)
		}
		if err != nil && !errors.Is(err, errLimit) {
			s.storeError(w, f, err)
			return
		}
		writeJSON(w, http.StatusOK, resp)
	}
}

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

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	writeJSON(w, code, struct {
		Error string `json:"error"`
	}{strings.TrimSpace(msg)})
}

// streamNDJSON streams every entry of the range from one snapshot, one JSON
// item per line (the range's items), then a last line {"end":true,"count":N,
// "cursor":C} that tells a complete stream from a cut one; a failure
// mid-stream ends it with {"error":"...","count":N} instead. The snapshot's
// cursor is also in the X-Foldhost-Cursor header. The write deadline is
// renewed as the stream goes, so only a stalled reader is cut.
func (s *server) streamNDJSON(w http.ResponseWriter, r *http.Request, f Fold, sp space, prefix string, at readAt) {
	sn := s.snapshotAt(w, r, f, at)
	if sn == nil {
		return
	}
	defer sn.Close()
	cur := uint64(sn.Cursor().Rev)
	w.Header().Set("Content-Type", "application/x-ndjson")
	w.WriteHeader(http.StatusOK)
	rc := http.NewResponseController(w)
	bw := bufio.NewWriterSize(w, 64<<10)
	enc := json.NewEncoder(bw)
	enc.SetEscapeHTML(false)
	n := 0
	renewed := time.Now()
	item := func(v any) error {
		if err := enc.Encode(v); err != nil {
			return err
		}
		n++
		// Renewed once a second while the reader keeps taking what is
		// written: only a reader stalled for ReadWriteTimeout is cut,
		// however large the items.
		if now := time.Now(); now.Sub(renewed) >= time.Second {
			renewed = now
			_ = rc.SetWriteDeadline(now.Add(ReadWriteTimeout))
		}
		return nil
	}
	var err error
	if sp == rawSpace {
		err = sn.RawRange(prefix, func(k []byte, rev protocol.Revision, v []byte) error { return item(NewRawItem(k, rev, v)) })
	} else {
		err = sn.ViewRange([]byte(prefix), func(k, v []byte) error { return item(NewViewItem(k, v)) })
	}
	if err != nil {
		s.log.Warn("http: ndjson stream cut", "fold", f.Name(), "items_sent", n, "err", err)
		_ = enc.Encode(struct {
			Error string `json:"error"`
			Count int    `json:"count"`
		}{err.Error(), n})
	} else {
		_ = enc.Encode(struct {
			End    bool   `json:"end"`
			Count  int    `json:"count"`
			Cursor uint64 `json:"cursor"`
			Staleness
		}{true, n, cur, stalenessOf(sn)})
	}
	_ = bw.Flush()
}
