package host

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync/atomic"

	"github.com/foldhost/foldhost/host/forward"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// Reads in a fleet find their owner: a read of a fold (a value, a range,
// a query) on a node that folds the fold's unit (its owner or a standby)
// is answered there; on any other node it is forwarded to the unit's
// owner over NATS (package forward) and answered as the owner answers it,
// min_revision and wait included. Every such read says where it was
// answered: X-Foldhost-Partition, X-Foldhost-Epoch (the owner's epoch as
// the answering node knows it) and X-Foldhost-Node.

// Response headers of a fleet's reads.
const (
	PartitionHeader = "X-Foldhost-Partition"
	EpochHeader     = "X-Foldhost-Epoch"
	NodeHeader      = "X-Foldhost-Node"
)

// readsSubject is where node answers the reads forwarded to it.
func readsSubject(fleetName, node string) string {
	return "foldhost.fleet." + fleetName + ".read." + node
}

// maxForwardedInFlight bounds the forwarded reads a node answers at once.
const maxForwardedInFlight = 64

// fleetReads routes a fleet's reads (Host.Handler).
type fleetReads struct {
	h      *Host
	local  http.Handler    // this node's own answers
	client *forward.Client // forwards the reads it does not answer (set by serve)

	forwarded, noOwner, failed atomic.Uint64 // reads this node forwarded, by outcome
	answered                   atomic.Uint64 // reads forwarded to this node it answered
}

// readPatterns are the read endpoints a fleet routes (httpapi's).
var readPatterns = []string{
	"GET /v1/folds/{name}/view/{key...}", "GET /v1/folds/{name}/raw/{key...}",
	"GET /v1/folds/{name}/view", "GET /v1/folds/{name}/raw",
	"GET /v1/folds/{name}/query/{query}", "POST /v1/folds/{name}/query/{query}",
}

// handler is local with the fleet's read endpoints routed.
func (fr *fleetReads) handler() http.Handler {
	mux := http.NewServeMux()
	for _, p := range readPatterns {
		mux.HandleFunc(p, fr.read)
	}
	mux.Handle("/", fr.local)
	return mux
}

// serve answers the reads other nodes forward to this one, until Close.
func (fr *fleetReads) serve(ctx context.Context) error {
	h := fr.h
	counted := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, _ := h.unitNamed(r.PathValue("name"))
		if s := h.runner.slots[u]; s != nil && s.roleNow() == protocol.RoleNone {
			// The forwarding node's placement is behind this one's.
			w.Header().Set("Retry-After", "1")
			httpapi.WriteError(w, http.StatusServiceUnavailable, "node %s does not fold %s now (the fold moved): retry", h.o.Admin.Node, r.PathValue("name"))
			return
		}
		fr.answered.Add(1)
		fr.answerLocally(w, r)
	})
	mux := http.NewServeMux()
	for _, p := range readPatterns {
		mux.Handle(p, counted)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		httpapi.WriteError(w, http.StatusNotFound, "not a read a fleet forwards: %s %s", r.Method, r.URL.Path)
	})
	srv, err := forward.Serve(ctx, h.nc, readsSubject(h.o.Fleet.Name, h.o.Admin.Node), mux, maxForwardedInFlight)
	if err != nil {
		return fmt.Errorf("fleet %s: serving forwarded reads: %w", h.o.Fleet.Name, err)
	}
	h.closers = append(h.closers, srv.Stop)
	if fr.client, err = forward.NewClient(h.nc); err != nil {
		return fmt.Errorf("fleet %s: forwarding reads: %w", h.o.Fleet.Name, err)
	}
	h.closers = append(h.closers, fr.client.Close)
	return nil
}

// answerLocally answers a read from this node's fold, with the fleet's
// headers.
func (fr *fleetReads) answerLocally(w http.ResponseWriter, r *http.Request) {
	u, _ := fr.h.unitNamed(r.PathValue("name"))
	if st, ok := fr.h.fleet.Unit(u); ok {
		w.Header().Set(PartitionHeader, strconv.Itoa(int(st.Unit.Partition)))
		w.Header().Set(EpochHeader, strconv.FormatUint(uint64(st.Epoch), 10))
	}
	w.Header().Set(NodeHeader, fr.h.o.Admin.Node)
	fr.local.ServeHTTP(w, r)
}

// read answers a read here when this node folds the fold's unit, else
// forwards it to the unit's owner.
func (fr *fleetReads) read(w http.ResponseWriter, r *http.Request) {
	h := fr.h
	u, _ := h.unitNamed(r.PathValue("name"))
	s := h.runner.slots[u]
	if s == nil {
		fr.local.ServeHTTP(w, r) // not a fold: httpapi's 404
		return
	}
	if s.roleNow() != protocol.RoleNone {
		fr.answerLocally(w, r)
		return
	}
	st, _ := h.fleet.Unit(u)
	if st.Owner == "" || st.Owner == h.o.Admin.Node {
		fr.noOwner.Add(1)
		w.Header().Set("Retry-After", "1")
		httpapi.WriteError(w, http.StatusServiceUnavailable, "fold %s has no owner in the fleet now (a takeover or hand-over is under way, or no node can run it): GET /v1/folds/%s/partitions says", u.Fold, u.Fold)
		return
	}
	fr.forwardTo(w, r, st.Owner, u.Fold)
}

// forwardTo forwards r to node, which folds the fold named fold.
func (fr *fleetReads) forwardTo(w http.ResponseWriter, r *http.Request, node, fold string) {
	h := fr.h
	wait := h.o.NATS.RequestTimeout
	err := fr.client.Do(r.Context(), readsSubject(h.o.Fleet.Name, node), w, r, forward.Options{From: h.o.Admin.Node,
		FirstWait: wait + httpapi.MaxReadWait, ChunkWait: wait})
	switch {
	case err == nil:
		fr.forwarded.Add(1)
	case errors.Is(err, forward.ErrTruncated):
		fr.failed.Add(1)
		h.log.Warn("a forwarded read broke off midway", "fold", fold, "node", node, "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler) // the client sees a broken answer, not a short one
	case errors.Is(err, forward.ErrNoResponder):
		fr.failed.Add(1)
		w.Header().Set("Retry-After", "1")
		httpapi.WriteError(w, http.StatusServiceUnavailable, "fold %s: node %s does not answer (it left, or is down: the fleet moves its folds within node_ttl %v)", fold, node, h.o.Fleet.NodeTTL)
	default:
		fr.failed.Add(1)
		w.Header().Set("Retry-After", "1")
		httpapi.WriteError(w, http.StatusBadGateway, "fold %s: forwarding the read to node %s: %v", fold, node, err)
	}
}
