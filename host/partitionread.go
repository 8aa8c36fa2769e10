package host

import (
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// Reads of a partitioned fold by its own name find their unit: a key's
// raw value is read from the unit of the key's partition (FOLD.P, on this
// node or, in a fleet, wherever that unit's owner is), and the fold's
// partitions endpoint lists every unit. A view key has no partition (the
// plugin names views): its read asks every unit, and answers the one that
// holds it; held by several, it needs their values merged. A range merges
// the units' pages (partitionrange.go). Merging view values, queries,
// ndjson streams and status is specified, not built: those are refused
// with the units' names, each of which answers for its own partition.

// partitionedFold is a fold of several partitions, as reads find it.
type partitionedFold struct {
	name, bucket string
	n            int
}

// partitionedFolds are the host's folds of several partitions, by name.
func (h *Host) partitionedFolds() map[string]partitionedFold {
	out := map[string]partitionedFold{}
	for _, f := range h.o.Folds {
		if f.Partitions > 1 {
			out[f.FoldName] = partitionedFold{name: f.FoldName, bucket: f.Bucket, n: f.Partitions}
		}
	}
	return out
}

// unitNamed is the unit the fold named name runs (a unit's name is
// FOLD.P, an unpartitioned fold's its own); ok false for no fold of this
// host.
func (h *Host) unitNamed(name string) (protocol.Unit, bool) {
	u, ok := h.units[name]
	return u, ok
}

// routePartitions serves the reads of partitioned folds by their names,
// and hands everything else to next.
func (h *Host) routePartitions(next http.Handler) http.Handler {
	parts := h.partitionedFolds()
	if len(parts) == 0 {
		return next
	}
	mux := http.NewServeMux()
	mux.Handle("/", next)
	of := func(w http.ResponseWriter, r *http.Request) (partitionedFold, bool) {
		pf, ok := parts[r.PathValue("name")]
		if !ok {
			next.ServeHTTP(w, r)
		}
		return pf, ok
	}
	rawKey := func(w http.ResponseWriter, r *http.Request, pf partitionedFold, key string) {
		p := protocol.PartitionOf(pf.bucket, key, pf.n)
		w.Header().Set(PartitionHeader, strconv.Itoa(p))
		next.ServeHTTP(w, toUnit(r, pf, p))
	}
	mux.HandleFunc("GET /v1/folds/{name}/raw/{key...}", func(w http.ResponseWriter, r *http.Request) {
		if pf, ok := of(w, r); ok {
			rawKey(w, r, pf, r.PathValue("key"))
		}
	})
	mux.HandleFunc("GET /v1/folds/{name}/view/{key...}", func(w http.ResponseWriter, r *http.Request) {
		if pf, ok := of(w, r); ok {
			h.viewOfPartitions(w, r, next, pf, r.PathValue("key"))
		}
	})
	for _, m := range []string{"GET", "POST"} {
		mux.HandleFunc(m+" /v1/folds/{name}/query/{query}", func(w http.ResponseWriter, r *http.Request) {
			if pf, ok := of(w, r); ok {
				h.queryOfPartitions(w, r, next, pf)
			}
		})
	}
	mux.HandleFunc("GET /v1/folds/{name}/partitions", func(w http.ResponseWriter, r *http.Request) {
		pf, ok := of(w, r)
		if !ok {
			return
		}
		ps := []httpapi.PartitionStatus{}
		for p := range pf.n {
			if f := h.Fold(UnitName(pf.name, p)); f != nil {
				ps = append(ps, h.placement(f)...)
			}
		}
		httpapi.WriteJSON(w, http.StatusOK, httpapi.Partitions{Fold: pf.name, Partitions: ps})
	})
	refuse := func(w http.ResponseWriter, r *http.Request) {
		pf, ok := of(w, r)
		if !ok {
			return
		}
		// A key read by its query form (?key=, ?key_b64=) is routed as
		// the path form is (a malformed one is the unit's to refuse); a
		// range merges the units' pages.
		isRaw, isView := r.URL.Path == "/v1/folds/"+pf.name+"/raw", r.URL.Path == "/v1/folds/"+pf.name+"/view"
		if q := r.URL.Query(); r.Method == http.MethodGet && (isRaw || isView) {
			key, has, err := httpapi.KeyParam(q)
			switch {
			case q.Has("format") && q.Get("format") == "ndjson" && !has && err == nil && !q.Has("limit") && !q.Has("next"):
				h.ndjsonOfPartitions(w, r, next, pf)
			case q.Has("format"):
				next.ServeHTTP(w, toUnit(r, pf, 0)) // the unit's refusal of the mix
			case q.Has("start") || q.Has("start_b64") || q.Has("end") || q.Has("end_b64") || q.Has("reverse") || q.Has("max_bytes"):
				httpapi.WriteError(w, http.StatusBadRequest, "start, end, reverse and max_bytes read one unit's view range: ask /v1/folds/%s.P/view (P from 0 to %d), or read a prefix by the fold's name", pf.name, pf.n-1)
			case err == nil && has && isRaw && !q.Has("prefix") && !q.Has("prefix_b64"):
				rawKey(w, r, pf, key)
			case err == nil && has && !q.Has("prefix") && !q.Has("prefix_b64"):
				h.viewOfPartitions(w, r, next, pf, key)
			case has || err != nil:
				next.ServeHTTP(w, toUnit(r, pf, 0)) // the unit's refusal of the mix
			default:
				h.rangeOfPartitions(w, r, next, pf)
			}
			return
		}
		httpapi.WriteError(w, http.StatusNotImplemented, "fold %s has %d partitions: by its name it answers a key's raw value (GET /v1/folds/%s/raw/KEY), a view key one partition holds (GET /v1/folds/%s/view/KEY), ranges and ndjson streams merged in key order (GET /v1/folds/%s/raw?prefix=P), its partitions (GET /v1/folds/%s/partitions) and "+
			"its queries (/v1/folds/%s/query/Q); status, admin actions and view keys merged over partitions are specified, not built: each partition answers for its own at /v1/folds/%s.P/... (P from 0 to %d)",
			pf.name, pf.n, pf.name, pf.name, pf.name, pf.name, pf.name, pf.name, pf.n-1)
	}
	// The endpoints without a trailing part are named too: a mux with
	// only "/raw/{key...}" would redirect "/raw" to "/raw/".
	for _, p := range []string{"/v1/folds/{name}", "/v1/folds/{name}/{rest...}", "/v1/folds/{name}/raw", "/v1/folds/{name}/view"} {
		mux.HandleFunc(p, refuse)
	}
	return mux
}

// viewOfPartitions answers a view key's read by a partitioned fold's name:
// every unit is asked (through next: locally, or forwarded to its owner,
// min_revision and wait included); the one unit that holds the key
// answers, with its partition in X-Foldhost-Partition; none: the first
// unit's 404; several: 409 (their values would need a merge); a unit that
// fails: its answer.
func (h *Host) viewOfPartitions(w http.ResponseWriter, r *http.Request, next http.Handler, pf partitionedFold, key string) {
	reqs := make([]*http.Request, pf.n)
	for p := range pf.n {
		reqs[p] = toUnit(r, pf, p)
	}
	answers := h.askUnits(next, pf, reqs)
	var found []int
	for p, a := range answers {
		switch a.Code {
		case http.StatusOK:
			found = append(found, p)
		case http.StatusNotFound:
		default:
			replay(w, a, p)
			return
		}
	}
	switch len(found) {
	case 0:
		replay(w, answers[0], 0)
	case 1:
		replay(w, answers[found[0]], found[0])
	default:
		httpapi.WriteError(w, http.StatusConflict, "view key %q is held by %d partitions of fold %s (%v): merging their values is specified, not built; read each at /v1/folds/%s.P/view/KEY",
			key, len(found), pf.name, found, pf.name)
	}
}

// maxFanOut bounds the units one read asks at once.
const maxFanOut = 16

// askUnits serves reqs[p] (nil: none) for partition p of pf through next,
// at most maxFanOut at once, and returns each answer (record's).
func (h *Host) askUnits(next http.Handler, pf partitionedFold, reqs []*http.Request) []*httptest.ResponseRecorder {
	answers := make([]*httptest.ResponseRecorder, len(reqs))
	sem := make(chan struct{}, maxFanOut)
	var wg sync.WaitGroup
	for p, r2 := range reqs {
		if r2 == nil {
			continue
		}
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			answers[p] = h.record(next, r2, pf.name, p)
		})
	}
	wg.Wait()
	return answers
}

// record serves r (a read of partition p of fold) through next and
// returns the answer. A panic (a forwarded read that broke off raises
// http.ErrAbortHandler) would end the process when r is served off
// net/http's own goroutines: it is that partition's 502 (broken off) or
// 500 (anything else, logged).
func (h *Host) record(next http.Handler, r *http.Request, fold string, p int) (rec *httptest.ResponseRecorder) {
	rec = httptest.NewRecorder()
	defer func() {
		if v := recover(); v != nil {
			rec = httptest.NewRecorder()
			if v == http.ErrAbortHandler {
				httpapi.WriteError(rec, http.StatusBadGateway, "partition %d of fold %s: its answer broke off", p, fold)
				return
			}
			h.log.Error("a read of one partition panicked", "fold", fold, "partition", p, "panic", v)
			httpapi.WriteError(rec, http.StatusInternalServerError, "partition %d of fold %s: the read failed", p, fold)
		}
	}()
	next.ServeHTTP(rec, r)
	return rec
}

// toUnit is r addressed to partition p's unit: /v1/folds/FOLD/... made
// /v1/folds/FOLD.P/..., the rest of the path and the query kept.
func toUnit(r *http.Request, pf partitionedFold, p int) *http.Request {
	r2 := r.Clone(r.Context())
	r2.Body = http.NoBody // a GET's: never shared by the fan-out's readers
	r2.URL.Path = "/v1/folds/" + UnitName(pf.name, p) + strings.TrimPrefix(r.URL.Path, "/v1/folds/"+pf.name)
	r2.URL.RawPath = "" // the path escaped anew from the decoded one
	r2.RequestURI = r2.URL.RequestURI()
	return r2
}

// replay writes a recorded answer of partition p.
func replay(w http.ResponseWriter, a *httptest.ResponseRecorder, p int) {
	for k, vs := range a.Header() {
		w.Header()[k] = vs
	}
	w.Header().Set(PartitionHeader, strconv.Itoa(p))
	w.WriteHeader(a.Code)
	_, _ = w.Write(a.Body.Bytes())
}
