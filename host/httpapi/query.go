package httpapi

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/fold"
)

// Querier is a Fold whose plugin may answer named, read-only queries (ABI
// minor 2), served as GET and POST /v1/folds/{name}/query/{query}.
type Querier interface {
	// QueryLookup describes the query name of the fold's plugin as it runs
	// now, or fails with an error wrapping ErrNoQueries (saying why: no
	// plugin, a plugin without queries) or ErrUnknownQuery.
	QueryLookup(name string) (QueryInfo, error)
	// Query runs the query name with input against sn (the caller's, to
	// close). Errors wrap ErrNoQueries, ErrUnknownQuery (the plugin was
	// reloaded since the lookup), ErrQueryInputTooLarge, ErrQueryRefused
	// (the plugin's own verdict: its message), ErrQueryStale (the views
	// at sn are another view schema's than the module's); any other error
	// is the plugin's failure (a trap, a timeout, a bound crossed).
	Query(ctx context.Context, sn *fold.Snapshot, name string, input []byte) (QueryAnswer, error)
}

// QueryInfo describes one query.
type QueryInfo struct {
	ContentType string // "" for application/octet-stream
	MaxInput    int    // bytes
}

// QueryAnswer is a query's answer.
type QueryAnswer struct {
	Body        []byte
	ContentType string // "" for application/octet-stream
	Module      string // sha256 of the module that answered
}

// Errors of a Querier.
var (
	ErrNoQueries          = errors.New("the fold serves no queries")
	ErrUnknownQuery       = errors.New("no such query")
	ErrQueryInputTooLarge = errors.New("query input too large")
	ErrQueryRefused       = errors.New("the query failed on its input")
	ErrQueryStale         = errors.New("the views and the plugin's view schema differ")
)

// Query answer headers: the module that answered (its sha256), and, when
// the answer was read from a store a repair began on and did not finish,
// RepairPendingHeader "true" (Staleness).
const (
	ModuleHeader        = "X-Foldhost-Module"
	RepairPendingHeader = "X-Foldhost-Repair-Pending"
)

// query serves GET and POST /v1/folds/{name}/query/{query}: the input is
// ?input= or ?input_b64= (GET) or the body (POST); ?min_revision and ?wait
// as every read. The answer is the plugin's bytes, with the content type
// the query declares and the snapshot's cursor in CursorHeader. A POST
// here is a read, not an admin action. Every answer of a known fold is
// counted in the metrics (Metrics.observeQuery).
func (s *server) query(w http.ResponseWriter, r *http.Request) {
	// A POST is not given the reads' write deadline by the handler's
	// wrapper (admin actions run long): a query is a read.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(ReadWriteTimeout))
	f := s.fold(w, r)
	if f == nil {
		return // an unknown fold: no series for a name the caller chose
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	s.answerQuery(sw, r, f)
	name, label := r.PathValue("query"), UnknownQueryLabel
	if qr, ok := f.(Querier); ok {
		if _, err := qr.QueryLookup(name); err == nil {
			label = name
		}
	}
	s.metrics.observeQuery(f.Name(), label, sw.code, time.Since(start))
}

// statusWriter notes the status a handler answered (0: none).
type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	if w.code == 0 {
		w.code = code
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.code == 0 {
		w.code = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Unwrap lets http.ResponseController reach the connection's deadlines.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// answerQuery answers a query of f.
func (s *server) answerQuery(w http.ResponseWriter, r *http.Request, f Fold) {
	name := r.PathValue("query")
	q := r.URL.Query()
	post := r.Method == http.MethodPost
	for p, vals := range q {
		switch {
		case p == "min_revision" || p == "wait":
		case (p == "input" || p == "input_b64") && !post:
		default:
			want := "input or input_b64, min_revision and wait"
			if post {
				want = "min_revision and wait; a POST's input is its body"
			}
			writeError(w, http.StatusBadRequest, "unknown query parameter %q (want %s)", p, want)
			return
		}
		if len(vals) > 1 {
			writeError(w, http.StatusBadRequest, "query parameter %q given %d times", p, len(vals))
			return
		}
	}
	at, err := readAtParams(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	qr, ok := f.(Querier)
	if !ok {
		writeError(w, http.StatusNotFound, "fold %s: %v", f.Name(), ErrNoQueries)
		return
	}
	info, err := qr.QueryLookup(name)
	if err != nil {
		s.queryError(w, f, name, err)
		return
	}
	var input []byte
	if post {
		input, err = io.ReadAll(io.LimitReader(r.Body, int64(info.MaxInput)+1))
		if err != nil {
			writeError(w, http.StatusBadRequest, "reading the body: %v", err)
			return
		}
	} else {
		in, _, err := bytesParam(q, "input")
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
		}
		input = []byte(in)
	}
	if len(input) > info.MaxInput {
		writeError(w, http.StatusRequestEntityTooLarge, "fold %s: query %s: the input is over its limit of %d bytes (plugin_max_query_input_kb)", f.Name(), name, info.MaxInput)
		return
	}
	sn := s.snapshotAt(w, r, f, at)
	if sn == nil {
		return
	}
	defer sn.Close()
	ans, err := qr.Query(r.Context(), sn, name, input)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		s.queryError(w, f, name, err)
		return
	}
	ct := ans.ContentType
	if ct == "" {
		ct = "application/octet-stream"
	}
	h := w.Header()
	h.Set("Content-Type", ct)
	h.Set("Content-Length", strconv.Itoa(len(ans.Body)))
	h.Set(ModuleHeader, ans.Module)
	if p, _ := sn.RepairPending(); p {
		h.Set(RepairPendingHeader, "true")
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(ans.Body)
}

// queryError answers a Querier's error.
func (s *server) queryError(w http.ResponseWriter, f Fold, name string, err error) {
	msg := fmt.Sprintf("fold %s: query %s: %v", f.Name(), name, err)
	switch {
	case errors.Is(err, ErrNoQueries), errors.Is(err, ErrUnknownQuery):
		writeError(w, http.StatusNotFound, "%s", msg)
	case errors.Is(err, ErrQueryInputTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "%s", msg)
	case errors.Is(err, ErrQueryRefused):
		writeError(w, http.StatusUnprocessableEntity, "%s", msg)
	case errors.Is(err, ErrQueryStale):
		writeError(w, http.StatusServiceUnavailable, "%s", msg)
	case errors.Is(err, fold.ErrClosed):
		s.storeError(w, f, err)
	default:
		s.log.Warn("http: query failed", "fold", f.Name(), "query", name, "err", err)
		writeError(w, http.StatusInternalServerError, "%s", msg)
	}
}
