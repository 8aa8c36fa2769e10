package httpapi

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// Range limits: ?limit defaults to DefaultLimit and must be in 1..MaxLimit.
const (
	DefaultLimit = 100
	MaxLimit     = 10000
)

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
	// ViewSchema is the view schema of the plugin that wrote the views,
	// in a view scan's answer (a query reading the fold from another node
	// checks it against its module's).
	ViewSchema *uint32 `json:"view_schema,omitempty"`
	Items      any     `json:"items"`
}

var errLimit = errors.New("limit reached")

// LimitParam is a range's ?limit: DefaultLimit when absent, else an
// integer from 1 to MaxLimit.
func LimitParam(q url.Values) (int, error) {
	if !q.Has("limit") {
		return DefaultLimit, nil
	}
	n, err := strconv.Atoi(q.Get("limit"))
	if err != nil || n < 1 || n > MaxLimit {
		return 0, fmt.Errorf("limit must be an integer between 1 and %d, got %q", MaxLimit, q.Get("limit"))
	}
	return n, nil
}

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
			case "prefix", "prefix_b64", "limit", "key", "key_b64", "next", "format", "min_revision", "wait", "pin",
				"start", "start_b64", "end", "end_b64", "reverse", "max_bytes":
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
		if q.Has("start") || q.Has("start_b64") || q.Has("end") || q.Has("end_b64") || q.Has("reverse") || q.Has("max_bytes") {
			if sp != viewSpace || hasKey || hasPrefix || q.Has("next") || q.Has("format") || q.Has("pin") {
				writeError(w, http.StatusBadRequest, "start, end, reverse and max_bytes read a view range (a plugin query's range): they do not combine with key, prefix, next, format or pin, nor read raw entries")
				return
			}
			s.viewScan(w, r, f, at)
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
		limit, err := LimitParam(q)
		if err != nil {
			writeError(w, http.StatusBadRequest, "%v", err)
			return
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
		// ?pin=1 (a partitioned fold's merged range, asking each unit)
		// keeps the snapshot and answers a token even for a last page:
		// the merge may take fewer of its entries than it answered, and
		// continues after the last one it took (PageTokenAfter).
		if pin := q.Get("pin") == "1"; resp.Truncated || (pin && len(last) > 0) {
			if id == 0 {
				id = s.pages.keep(sn, f.Name(), sp, time.Now(), pin)
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

// viewScan serves a view range as a plugin query reads it:
// ?start=S&end=E (text or _b64; an empty or absent end: no bound) and
// ?reverse=1, at most ?limit entries from one snapshot, in key order or
// from the end down, and with ?max_bytes=N no entry after the page's
// keys and values reached N bytes; a truncated page names no token: the
// next page is asked from just past its last key (a partitioned fold's
// query reads the units of other nodes so).
func (s *server) viewScan(w http.ResponseWriter, r *http.Request, f Fold, at readAt) {
	q := r.URL.Query()
	start, _, err := bytesParam(q, "start")
	var end string
	if err == nil {
		end, _, err = bytesParam(q, "end")
	}
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	reverse := false
	switch q.Get("reverse") {
	case "", "0":
	case "1":
		reverse = true
	default:
		writeError(w, http.StatusBadRequest, "reverse must be 1 or 0, got %q", q.Get("reverse"))
		return
	}
	limit, err := LimitParam(q)
	if err != nil {
		writeError(w, http.StatusBadRequest, "%v", err)
		return
	}
	maxBytes := math.MaxInt
	if q.Has("max_bytes") {
		if maxBytes, err = strconv.Atoi(q.Get("max_bytes")); err != nil || maxBytes < 1 {
			writeError(w, http.StatusBadRequest, "max_bytes must be a positive integer, got %q", q.Get("max_bytes"))
			return
		}
	}
	sn := s.snapshotAt(w, r, f, at)
	if sn == nil {
		return
	}
	defer sn.Close()
	resp := rangeResponse{Fold: f.Name(), Cursor: uint64(sn.Cursor().Rev), Staleness: stalenessOf(sn), Limit: limit}
	if b, ok, err := sn.PluginIdentity(); err == nil && ok {
		if id, err := fold.ParsePluginIdentity(b); err == nil {
			resp.ViewSchema = &id.ViewSchema
		}
	}
	items := make([]ViewItem, 0, min(limit, 64))
	size := 0
	err = sn.ViewScan([]byte(start), []byte(end), reverse, func(k, v []byte) error {
		if len(items) == limit || size >= maxBytes {
			resp.Truncated = true
			return errLimit
		}
		items = append(items, NewViewItem(k, v))
		size += len(k) + len(v)
		return nil
	})
	if err != nil && !errors.Is(err, errLimit) {
		s.storeError(w, f, err)
		return
	}
	resp.Items, resp.Count = items, len(items)
	writeJSON(w, http.StatusOK, resp)
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
