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
	"github.com/foldhost/foldhost/protocol"
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
	// Cursor, when not 0, is the least cursor the query read elsewhere
	// (a group's units on other nodes): the answer's cursor header is
	// not above it.
	Cursor uint64
}

// Errors of a Querier.
var (
	ErrNoQueries          = errors.New("the fold serves no queries")
	ErrUnknownQuery       = errors.New("no such query")
	ErrQueryInputTooLarge = errors.New("query input too large")
	ErrQueryRefused       = errors.New("the query failed on its input")
	ErrQueryStale         = errors.New("the views and the plugin's view schema differ")
	// ErrQueryConflict: the query read a view key several partitions
	// hold (a partitioned fold's query, by its name).
	ErrQueryConflict = errors.New("the query read a view key several partitions hold")
	// ErrQueryUnitUnavailable: a partition the query read on another
	// node did not answer (moving, down, or behind min_revision).
	ErrQueryUnitUnavailable = errors.New("a partition of the fold could not be read")
	// ErrQueryUnitBehind: a partition read on another node did not reach
	// min_revision within the wait (504, as a local fold's read).
	ErrQueryUnitBehind = errors.New("a partition of the fold did not reach min_revision")
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
	var t queryTarget
	if g, ok := s.groups[r.PathValue("name")]; ok {
		t = s.groupTarget(g)
	} else {
		f := s.fold(w, r)
		if f == nil {
			return // an unknown fold: no series for a name the caller chose
		}
		t = s.foldTarget(f)
	}
	start := time.Now()
	sw := &statusWriter{ResponseWriter: w}
	s.answerQuery(sw, r, t)
	name, label := r.PathValue("query"), UnknownQueryLabel
	if t.lookup != nil {
		if _, err := t.lookup(name); err == nil {
			label = name
		}
	}
	s.metrics.observeQuery(t.name, label, sw.code, time.Since(start))
}

// queryTarget is what a query asks: one fold, or a group's units read as
// one fold.
type queryTarget struct {
	name   string
	lookup func(query string) (QueryInfo, error) // nil: the fold serves no queries
	// snapshots takes the read's snapshots (answering the error itself,
	// and returning nil, when it cannot).
	snapshots func(w http.ResponseWriter, r *http.Request, at readAt) []*fold.Snapshot
	run       func(ctx context.Context, sns []*fold.Snapshot, at readAt, query string, input []byte) (QueryAnswer, error)
}

func (s *server) foldTarget(f Fold) queryTarget {
	t := queryTarget{name: f.Name(), snapshots: func(w http.ResponseWriter, r *http.Request, at readAt) []*fold.Snapshot {
		if sn := s.snapshotAt(w, r, f, at); sn != nil {
			return []*fold.Snapshot{sn}
		}
		return nil
	}}
	if qr, ok := f.(Querier); ok {
		t.lookup = qr.QueryLookup
		t.run = func(ctx context.Context, sns []*fold.Snapshot, _ readAt, query string, input []byte) (QueryAnswer, error) {
			return qr.Query(ctx, sns[0], query, input)
		}
	}
	return t
}

// Group is a fold of several partitions, queried by its own name: its
// units are folds of this server (Units, by partition), and a query reads
// all of them as one fold: the units Query says are local from their
// snapshots here, each taken once its cursor reached min_revision, the
// others through Query itself. Only queries are served by a group's name
// here; its other reads are the caller's to route.
type Group struct {
	Name  string
	Units []string
	Query GroupQuerier
}

// GroupQuerier runs a group's queries.
type GroupQuerier interface {
	// QueryLookup is Querier's.
	QueryLookup(name string) (QueryInfo, error)
	// Local reports whether partition p's unit is read from its snapshot
	// here (else QueryUnits reads it elsewhere).
	Local(p int) bool
	// QueryUnits runs the query q. Errors are Querier.Query's,
	// ErrQueryConflict, ErrQueryUnitUnavailable and ErrQueryUnitBehind.
	QueryUnits(ctx context.Context, q GroupQuery) (QueryAnswer, error)
}

// GroupQuery is one query of a group.
type GroupQuery struct {
	Name  string
	Input []byte
	// Snapshots are the local units', by partition (the caller's, to
	// close); nil for a unit read elsewhere.
	Snapshots []*fold.Snapshot
	// MinRevision is the read's min_revision (0: none), which a unit
	// read elsewhere must reach by Deadline.
	MinRevision protocol.Revision
	Deadline    time.Time
}

// groupTarget asks g's units: the local ones' snapshots are taken one
// after the other within one wait; the answer's cursor header is the
// least of theirs and of what the others answered (every unit had folded
// at least that far).
func (s *server) groupTarget(g Group) queryTarget {
	return queryTarget{name: g.Name, lookup: g.Query.QueryLookup,
		run: func(ctx context.Context, sns []*fold.Snapshot, at readAt, query string, input []byte) (QueryAnswer, error) {
			return g.Query.QueryUnits(ctx, GroupQuery{Name: query, Input: input, Snapshots: sns, MinRevision: at.min, Deadline: at.deadline})
		},
		snapshots: func(w http.ResponseWriter, r *http.Request, at readAt) []*fold.Snapshot {
			sns := make([]*fold.Snapshot, len(g.Units))
			least, anyLocal := protocol.Revision(0), false
			for i, name := range g.Units {
				if !g.Query.Local(i) {
					continue
				}
				f, ok := s.folds[name]
				if !ok {
					closeAll(sns)
					writeError(w, http.StatusInternalServerError, "fold %s: its partition %d (fold %s) is not served here", g.Name, i, name)
					return nil
				}
				unitAt := at
				unitAt.wait = max(time.Until(at.deadline), 0)
				sn := s.snapshotAt(w, r, f, unitAt)
				if sn == nil {
					closeAll(sns)
					return nil
				}
				if cur := sn.Cursor().Rev; !anyLocal || cur < least {
					least, anyLocal = cur, true
				}
				sns[i] = sn
			}
			if anyLocal {
				w.Header().Set(CursorHeader, strconv.FormatUint(uint64(least), 10))
			} else {
				w.Header().Del(CursorHeader)
			}
			return sns
		}}
}

func closeAll(sns []*fold.Snapshot) {
	for _, sn := range sns {
		if sn != nil {
			sn.Close()
		}
	}
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

// answerQuery answers a query of t.
func (s *server) answerQuery(w http.ResponseWriter, r *http.Request, t queryTarget) {
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
	if t.lookup == nil {
		writeError(w, http.StatusNotFound, "fold %s: %v", t.name, ErrNoQueries)
		return
	}
	info, err := t.lookup(name)
	if err != nil {
		s.queryError(w, t.name, name, err)
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
		writeError(w, http.StatusRequestEntityTooLarge, "fold %s: query %s: the input is over its limit of %d bytes (plugin_max_query_input_kb)", t.name, name, info.MaxInput)
		return
	}
	sns := t.snapshots(w, r, at)
	if sns == nil {
		return
	}
	defer closeAll(sns)
	ans, err := t.run(r.Context(), sns, at, name, input)
	if err != nil {
		if r.Context().Err() != nil {
			return // the client is gone
		}
		s.queryError(w, t.name, name, err)
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
	for _, sn := range sns {
		if sn == nil {
			continue
		}
		if p, _ := sn.RepairPending(); p {
			h.Set(RepairPendingHeader, "true")
		}
	}
	if ans.Cursor > 0 {
		if cur, err := strconv.ParseUint(h.Get(CursorHeader), 10, 64); err != nil || ans.Cursor < cur {
			h.Set(CursorHeader, strconv.FormatUint(ans.Cursor, 10))
		}
	}
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(ans.Body)
}

// queryError answers a Querier's error.
func (s *server) queryError(w http.ResponseWriter, foldName, name string, err error) {
	msg := fmt.Sprintf("fold %s: query %s: %v", foldName, name, err)
	switch {
	case errors.Is(err, ErrNoQueries), errors.Is(err, ErrUnknownQuery):
		writeError(w, http.StatusNotFound, "%s", msg)
	case errors.Is(err, ErrQueryInputTooLarge):
		writeError(w, http.StatusRequestEntityTooLarge, "%s", msg)
	case errors.Is(err, ErrQueryRefused):
		writeError(w, http.StatusUnprocessableEntity, "%s", msg)
	case errors.Is(err, ErrQueryConflict):
		writeError(w, http.StatusConflict, "%s", msg)
	case errors.Is(err, ErrQueryUnitBehind):
		writeError(w, http.StatusGatewayTimeout, "%s", msg)
	case errors.Is(err, ErrQueryUnitUnavailable):
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "%s", msg)
	case errors.Is(err, ErrQueryStale):
		writeError(w, http.StatusServiceUnavailable, "%s", msg)
	case errors.Is(err, fold.ErrClosed):
		writeError(w, http.StatusServiceUnavailable, "fold %s: store closed (shutting down)", foldName)
	default:
		s.log.Warn("http: query failed", "fold", foldName, "query", name, "err", err)
		writeError(w, http.StatusInternalServerError, "%s", msg)
	}
}
