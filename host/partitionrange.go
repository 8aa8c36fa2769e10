package host

import (
	"bytes"
	"cmp"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strconv"

	"github.com/foldhost/foldhost/host/httpapi"
)

// A range of a partitioned fold by its name (raw or view, ?prefix= and
// ?limit=, paged by ?next=) merges its units' pages in key order. Each
// unit is asked for a page of the limit from its own snapshot, pinned
// (?pin=1: a token even on its last page); the merged page takes the
// first limit entries in key order, never past the last key of a unit's
// page cut short, and the merged token carries each unit's token, moved
// to continue after the merged page's last key
// (httpapi.PageTokenAfter). So the
// pages, together, are every entry once, in key order, each unit's from
// one snapshot (for httpapi.PinnedSnapshotTTL between pages), as one
// fold's pages are; a view key several units hold comes once per unit,
// in partition order.

// mergedRangeBudget bounds the entries one merged page asks its units
// for together (httpapi.MaxLimit, what one fold's page may hold): with
// many units, each is asked for its share, and a page may then hold
// fewer than its limit (still truncated, its token going on).
var mergedRangeBudget = httpapi.MaxLimit

// mergedToken is a merged range's next token: a token per unit ("" not
// asked yet, "-" done).
type mergedToken struct {
	Units []string `json:"u"`
}

// mergedRange is the merged page's body.
type mergedRange struct {
	Fold string `json:"fold"`
	// Cursors are each unit's snapshot's cursor (a unit done: 0).
	Cursors         []uint64          `json:"cursors"`
	Limit           int               `json:"limit"`
	Count           int               `json:"count"`
	Truncated       bool              `json:"truncated"`
	Next            string            `json:"next,omitempty"`
	SnapshotExpired bool              `json:"snapshot_expired,omitempty"`
	Items           []json.RawMessage `json:"items"`
}

// unitPage is what a unit answered.
type unitPage struct {
	Cursor          uint64            `json:"cursor"`
	Truncated       bool              `json:"truncated"`
	Next            string            `json:"next"`
	SnapshotExpired bool              `json:"snapshot_expired"`
	Items           []json.RawMessage `json:"items"`
	keys            [][]byte
}

// parseUnitPage reads a unit's answer: its page, with each entry's key
// decoded; an error for an answer other than 200, or one that does not
// parse.
func parseUnitPage(a *httptest.ResponseRecorder) (*unitPage, error) {
	if a.Code != http.StatusOK {
		return nil, errors.New(http.StatusText(a.Code))
	}
	var pg unitPage
	if err := json.Unmarshal(a.Body.Bytes(), &pg); err != nil {
		return nil, fmt.Errorf("its page does not parse: %w", err)
	}
	for _, it := range pg.Items {
		var k struct {
			KeyB64 *string `json:"key_b64"`
		}
		if err := json.Unmarshal(it, &k); err != nil || k.KeyB64 == nil {
			return nil, fmt.Errorf("an entry of its page has no key: %s", it)
		}
		kb, err := httpapi.DecodeB64(*k.KeyB64)
		if err != nil {
			return nil, fmt.Errorf("an entry of its page has no key: %s", it)
		}
		pg.keys = append(pg.keys, kb)
	}
	return &pg, nil
}

// rangeOfPartitions answers a range of the partitioned fold pf.
func (h *Host) rangeOfPartitions(w http.ResponseWriter, r *http.Request, next http.Handler, pf partitionedFold) {
	q := r.URL.Query()
	limit, err := httpapi.LimitParam(q)
	if err != nil {
		httpapi.WriteError(w, http.StatusBadRequest, "%v", err)
		return
	}
	tok := mergedToken{Units: make([]string, pf.n)}
	if q.Has("next") {
		b, err := base64.RawURLEncoding.DecodeString(q.Get("next"))
		if err != nil || json.Unmarshal(b, &tok) != nil || len(tok.Units) != pf.n {
			httpapi.WriteError(w, http.StatusBadRequest, "next must be the token a truncated range of fold %s answered, got %q", pf.name, q.Get("next"))
			return
		}
	}
	// Each unit is asked for the limit, or for its share of
	// mergedRangeBudget when the limit over every unit would pass it.
	perUnit := limit
	if perUnit*pf.n > mergedRangeBudget {
		perUnit = max(1, mergedRangeBudget/pf.n)
	}
	reqs := make([]*http.Request, pf.n)
	for p := range pf.n {
		if tok.Units[p] == "-" {
			continue
		}
		uq := url.Values{}
		for k, vs := range q {
			if k != "next" {
				uq[k] = vs
			}
		}
		uq.Set("pin", "1")
		uq.Set("limit", strconv.Itoa(perUnit))
		if tok.Units[p] != "" {
			uq.Set("next", tok.Units[p])
		}
		reqs[p] = toUnit(r, pf, p)
		reqs[p].URL.RawQuery = uq.Encode()
		reqs[p].RequestURI = reqs[p].URL.RequestURI()
	}
	pages := make([]*unitPage, pf.n)
	for p, a := range h.askUnits(next, pf, reqs) {
		if a == nil {
			continue
		}
		pg, err := parseUnitPage(a)
		if err != nil {
			if a.Code == http.StatusOK {
				a = httptest.NewRecorder()
				httpapi.WriteError(a, http.StatusBadGateway, "partition %d of fold %s: %v", p, pf.name, err)
			}
			replay(w, a, p)
			return
		}
		pages[p] = pg
	}
	// The bound: no entry past the last key of a page cut short (that
	// unit may hold keys before the next entry of another). A unit asked
	// for the whole limit never binds (its page alone holds limit
	// entries up to its last key); one asked for its share may.
	var bound []byte
	for _, pg := range pages {
		if pg != nil && pg.Truncated && len(pg.keys) > 0 {
			if last := pg.keys[len(pg.keys)-1]; bound == nil || bytes.Compare(last, bound) < 0 {
				bound = last
			}
		}
	}
	type entry struct {
		p   int
		key []byte
		it  json.RawMessage
	}
	var all []entry
	for p, pg := range pages {
		if pg == nil {
			continue
		}
		for i, k := range pg.keys {
			if bound == nil || bytes.Compare(k, bound) <= 0 {
				all = append(all, entry{p, k, pg.Items[i]})
			}
		}
	}
	slices.SortFunc(all, func(a, b entry) int { return cmp.Or(bytes.Compare(a.key, b.key), cmp.Compare(a.p, b.p)) })
	if len(all) > limit {
		// A view key several units hold is one entry per unit: the page
		// takes all of them or none.
		n := limit
		for n < len(all) && bytes.Equal(all[n].key, all[limit-1].key) {
			n++
		}
		all = all[:n]
	}
	resp := mergedRange{Fold: pf.name, Cursors: make([]uint64, pf.n), Limit: limit, Count: len(all), Items: make([]json.RawMessage, len(all))}
	for i, e := range all {
		resp.Items[i] = e.it
	}
	var last []byte
	if len(all) > 0 {
		last = all[len(all)-1].key
	}
	more := false
	for p, pg := range pages {
		switch {
		case pg == nil: // done before this page
			tok.Units[p] = "-"
			continue
		case pg.SnapshotExpired:
			resp.SnapshotExpired = true
		}
		resp.Cursors[p] = pg.Cursor
		// Taken whole (every entry it answered is at or before the
		// page's last key, and it was not cut short): done.
		if !pg.Truncated && (len(pg.keys) == 0 || (last != nil && bytes.Compare(pg.keys[len(pg.keys)-1], last) <= 0)) {
			tok.Units[p] = "-"
			continue
		}
		more = true
		if last == nil || pg.Next == "" {
			continue // nothing taken: asked again as it was
		}
		t, err := httpapi.PageTokenAfter(pg.Next, last)
		if err != nil {
			httpapi.WriteError(w, http.StatusBadGateway, "partition %d of fold %s: its page token %q: %v", p, pf.name, pg.Next, err)
			return
		}
		tok.Units[p] = t
	}
	if more {
		b, _ := json.Marshal(tok)
		resp.Truncated, resp.Next = true, base64.RawURLEncoding.EncodeToString(b)
	}
	httpapi.WriteJSON(w, http.StatusOK, resp)
}
