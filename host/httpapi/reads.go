package httpapi

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

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
	// deadline is when the wait ends (now + wait, at the request's
	// parsing).
	deadline time.Time
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
	at.deadline = time.Now().Add(at.wait)
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
