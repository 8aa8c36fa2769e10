package host

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/http"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// A query of a partitioned fold by its own name runs once, on one unit's
// plugin, over every unit read as one fold (unitsReader): a raw key is
// read from its partition's unit, a view key from the unit that holds it,
// and a view range merges the units' ranges in key order. The answer is
// the one a single fold of the same updates gives, for any plugin whose
// view keys each come from one partition's updates (the example router's
// do: host/H and upstream/A/H both come from route.H); a view key that
// several units hold fails the query with 409, never a silent pick. A
// unit this node folds is read from its snapshot; in a fleet, a unit
// folded elsewhere is read through its owner's answers
// (partitionremote.go). RATIONALE.md, "Partitions".

// groupQuerier runs the queries of a partitioned fold by its name
// (httpapi.GroupQuerier).
type groupQuerier struct {
	h  *Host
	pf partitionedFold
}

// runner is the unit whose plugin runs the fold's queries: the first
// one this node folds.
func (g groupQuerier) runner() (*Fold, error) {
	for p := range g.pf.n {
		if f := g.h.Fold(UnitName(g.pf.name, p)); f != nil && g.h.holds(f) {
			return f, nil
		}
	}
	return nil, fmt.Errorf("%w: node %s folds none of its partitions now (the fold moved): retry", httpapi.ErrQueryUnitUnavailable, g.h.o.Admin.Node)
}

func (g groupQuerier) QueryLookup(name string) (httpapi.QueryInfo, error) {
	f, err := g.runner()
	if err != nil {
		return httpapi.QueryInfo{}, err
	}
	return f.QueryLookup(name)
}

// Local: the unit of partition p is read here when this node folds it.
func (g groupQuerier) Local(p int) bool {
	f := g.h.Fold(UnitName(g.pf.name, p))
	return f != nil && g.h.holds(f)
}

func (g groupQuerier) QueryUnits(ctx context.Context, q httpapi.GroupQuery) (httpapi.QueryAnswer, error) {
	f, err := g.runner()
	if err != nil {
		return httpapi.QueryAnswer{}, err
	}
	rd := &unitsReader{bucket: g.pf.bucket, units: make([]unitReads, g.pf.n), call: &callBudget{base: ctx}}
	defer rd.call.release()
	var local []*fold.Snapshot
	var remote []*remoteUnit
	for p, sn := range q.Snapshots {
		if sn != nil {
			rd.units[p] = localUnit{sn}
			local = append(local, sn)
			continue
		}
		if g.h.reads == nil { // not a fleet: every unit is local
			return httpapi.QueryAnswer{}, fmt.Errorf("%w: partition %d is not folded here", httpapi.ErrQueryUnitUnavailable, p)
		}
		ru := &remoteUnit{call: rd.call, fr: g.h.reads, fold: g.pf.name, partition: p, min: q.MinRevision, deadline: q.Deadline}
		rd.units[p], remote = ru, append(remote, ru)
	}
	// Each remote unit is asked before the call for its cursor, once it
	// reached min_revision, as a local unit's snapshot is taken: the
	// answer's cursor covers it, and the call's reads wait for nothing.
	// A unit read elsewhere whose views another view schema wrote (a
	// rolling upgrade under way) would be misread, as a local one would
	// (QueryOver checks those).
	schema, hasSchema := f.QueryViewSchema()
	for _, ru := range remote {
		if err := ru.barrier(); err != nil {
			return httpapi.QueryAnswer{}, err
		}
		if vs := ru.viewSchema; hasSchema && vs != nil && *vs != schema {
			return httpapi.QueryAnswer{}, fmt.Errorf("%w: partition %d's views on its owner are view schema %d, the plugin's here is %d (a rolling upgrade is under way; ask again)",
				httpapi.ErrQueryStale, ru.partition, *vs, schema)
		}
	}
	ans, err := f.QueryOver(ctx, local, rd, q.Name, q.Input)
	for _, ru := range remote {
		if c := ru.cursor; c > 0 && (ans.Cursor == 0 || c < ans.Cursor) {
			ans.Cursor = c
		}
	}
	return ans, err
}

// holds reports whether this node folds f now: always outside a fleet,
// as its owner or a standby in one.
func (h *Host) holds(f *Fold) bool {
	if h.runner == nil {
		return true
	}
	s := h.runner.slots[unitOf(f)]
	return s != nil && s.roleNow() != protocol.RoleNone
}

// groups are the partitioned folds' query groups (httpapi.Group).
func (h *Host) groups() []httpapi.Group {
	var out []httpapi.Group
	for _, pf := range h.partitionedFolds() {
		g := httpapi.Group{Name: pf.name, Query: groupQuerier{h: h, pf: pf}}
		for p := range pf.n {
			g.Units = append(g.Units, UnitName(pf.name, p))
		}
		out = append(out, g)
	}
	return out
}

// unitsReader reads a fold's units, by partition, as one fold
// (wasm.QueryReader).
type unitsReader struct {
	bucket string
	units  []unitReads
	call   *callBudget // bounds the remote units' reads (nil: none)
}

// CallStarted bounds the remote reads by the plugin's call
// (wasm.CallClock).
func (u *unitsReader) CallStarted(deadline time.Time) {
	if u.call != nil {
		u.call.start(deadline)
	}
}

// unitReads are one unit's reads in a query: its snapshot here
// (localUnit), or its owner's answers (remoteUnit).
type unitReads interface {
	Get(key string) (fold.Entry, bool, error)
	ViewGet(key []byte) ([]byte, bool, error)
	// ViewIter opens a range; a unit read elsewhere fetches at most
	// limit entries at a time (<= 0: no limit known).
	ViewIter(start, end []byte, reverse bool, limit int) (viewIter, error)
}

// viewIter is a range pulled one entry at a time (fold.ViewIter's
// contract).
type viewIter interface {
	Next() (key, value []byte, ok bool)
	Close() error
}

// localUnit is a unit read from its snapshot on this node.
type localUnit struct{ *fold.Snapshot }

func (l localUnit) ViewIter(start, end []byte, reverse bool, _ int) (viewIter, error) {
	it, err := l.Snapshot.ViewIter(start, end, reverse)
	if err != nil {
		return nil, err
	}
	return it, nil
}

// heldTwice refuses a view key several units hold: merging their values
// is the plugin's business, which no ABI export states yet.
func heldTwice(key []byte, p, q int) error {
	return &wasm.ReadRefusal{Err: fmt.Errorf("%w: view key %q is held by partitions %d and %d (merging their values is specified, not built)",
		httpapi.ErrQueryConflict, key, p, q)}
}

// Get reads a raw entry from its key's partition.
func (u *unitsReader) Get(key string) (fold.Entry, bool, error) {
	return u.units[protocol.PartitionOf(u.bucket, key, len(u.units))].Get(key)
}

// ViewGet reads a view key from the unit that holds it.
func (u *unitsReader) ViewGet(key []byte) ([]byte, bool, error) {
	var out []byte
	held := -1
	for p, un := range u.units {
		v, ok, err := un.ViewGet(key)
		switch {
		case err != nil:
			return nil, false, err
		case ok && held >= 0:
			return nil, false, heldTwice(key, held, p)
		case ok:
			out, held = v, p
		}
	}
	return out, held >= 0, nil
}

// ViewScan merges the units' ranges [start, end) in key order (reversed:
// from the end down). Each unit's range is an iterator one entry ahead;
// an entry is passed on before its iterator steps again, so the key and
// value it lends stay valid for fn. The next entry is the least of the
// heads, found by a scan of them: a fold has few partitions on one node,
// and a scan of 4 costs less than a heap's upkeep; another head on the
// same key is a key held twice.
func (u *unitsReader) ViewScan(start, end []byte, reverse bool, fn func(key, value []byte) error) error {
	return u.ViewScanLimit(start, end, reverse, 0, fn)
}

// ViewScanLimit is ViewScan for a caller that takes at most limit entries,
// the last only to learn that more follow (wasm.LimitedRangeReader): no
// unit is asked for more, and a key several units hold is refused only
// when the caller would take its value.
func (u *unitsReader) ViewScanLimit(start, end []byte, reverse bool, limit int, fn func(key, value []byte) error) (err error) {
	type head struct {
		it        viewIter
		k, v      []byte
		ok        bool
		partition int
	}
	heads := make([]head, 0, len(u.units))
	defer func() {
		for _, h := range heads {
			if cerr := h.it.Close(); err == nil {
				err = cerr
			}
		}
	}()
	for p, un := range u.units {
		it, err := un.ViewIter(start, end, reverse, limit)
		if err != nil {
			return err
		}
		heads = append(heads, head{it: it, partition: p})
		h := &heads[len(heads)-1]
		if h.k, h.v, h.ok = it.Next(); !h.ok {
			if err := it.Close(); err != nil { // a failed range, not an ended one
				return err
			}
		}
	}
	taken := 0 // entries handed to fn
	cmp := bytes.Compare
	if reverse {
		cmp = func(a, b []byte) int { return bytes.Compare(b, a) }
	}
	for {
		first := -1
		for i := range heads {
			if heads[i].ok && (first < 0 || cmp(heads[i].k, heads[first].k) < 0) {
				first = i
			}
		}
		if first < 0 {
			return nil
		}
		h := &heads[first]
		// Held twice: another unit's next key is this one (checked
		// against the least key only: a key further on may never be
		// read; and not for the last entry a limited caller takes, which
		// only tells it more follow).
		for i := range heads {
			if i != first && heads[i].ok && bytes.Equal(heads[i].k, h.k) && (limit <= 0 || taken < limit-1) {
				return heldTwice(h.k, min(h.partition, heads[i].partition), max(h.partition, heads[i].partition))
			}
		}
		taken++
		if err := fn(h.k, h.v); err != nil {
			return err
		}
		if h.k, h.v, h.ok = h.it.Next(); !h.ok {
			if err := h.it.Close(); err != nil {
				return err
			}
		}
	}
}

// queryOfPartitions serves a query by a partitioned fold's name. Outside
// a fleet every unit is here. In a fleet the query runs where most of its
// reads are local: here when this node folds every unit (as owner or
// standby), else on a node that does, else here when this node folds
// some (the rest read from their owners), else on the owner of a unit.
func (h *Host) queryOfPartitions(w http.ResponseWriter, r *http.Request, next http.Handler, pf partitionedFold) {
	if h.runner == nil || h.reads == nil {
		next.ServeHTTP(w, r)
		return
	}
	var holders map[string]bool // the nodes that fold every unit so far
	owner, some := "", false
	for p := range pf.n {
		st, _ := h.fleet.Unit(protocol.Unit{Fold: pf.name, Partition: p})
		these := map[string]bool{}
		for _, n := range append([]string{st.Owner}, st.Standbys...) {
			if n != "" && (holders == nil || holders[n]) {
				these[n] = true
			}
		}
		holders = these
		if owner == "" {
			owner = st.Owner
		}
		if f := h.Fold(UnitName(pf.name, p)); f != nil && h.holds(f) {
			some = true
		}
	}
	switch {
	case holders[h.o.Admin.Node]:
		next.ServeHTTP(w, r)
	case len(holders) > 0:
		nodes := slices.Sorted(maps.Keys(holders))
		h.reads.forwardTo(w, r, nodes[rand.IntN(len(nodes))], pf.name) // spread over them
	case some:
		next.ServeHTTP(w, r)
	case owner != "" && owner != h.o.Admin.Node:
		h.reads.forwardTo(w, r, owner, pf.name)
	default:
		w.Header().Set("Retry-After", "1")
		httpapi.WriteError(w, http.StatusServiceUnavailable, "fold %s: none of its %d partitions has an owner in fleet %s now (a takeover or hand-over is under way, or no node can run it): GET /v1/folds/%s/partitions says",
			pf.name, pf.n, h.o.Fleet.Name, pf.name)
	}
}
