package host

import (
	"bufio"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/httpapi"
)

// ndjsonOfPartitions streams a range of a partitioned fold by its name
// (?format=ndjson): the merged range's pages (rangeOfPartitions), asked
// back to back at the largest limit, one item a line, then
// {"end":true,"count":N,"cursors":[...]} (each unit's snapshot's
// cursor). Every entry comes once, in key order, each unit's from one
// snapshot, as the merged pages promise; should a unit's pinned snapshot
// expire between two pages (a reader slower than
// httpapi.PinnedSnapshotTTL over one page's items), the stream ends with
// an error line rather than going on from a newer snapshot. A refusal
// before the first item is the merged range's answer, as is.
func (h *Host) ndjsonOfPartitions(w http.ResponseWriter, r *http.Request, next http.Handler, pf partitionedFold) {
	q := r.URL.Query()
	q.Del("format")
	q.Set("limit", strconv.Itoa(httpapi.MaxLimit))
	var (
		bw      *bufio.Writer
		rc      = http.NewResponseController(w)
		cursors []uint64
		n       int
		token   string
	)
	fail := func(msg string) {
		h.log.Warn("http: ndjson stream cut", "fold", pf.name, "items_sent", n, "err", msg)
		b, _ := json.Marshal(struct {
			Error string `json:"error"`
			Count int    `json:"count"`
		}{msg, n})
		_, _ = bw.Write(append(b, '\n'))
		_ = bw.Flush()
	}
	for {
		r2 := r.Clone(r.Context())
		if token != "" {
			q.Set("next", token)
		}
		r2.URL.RawQuery = q.Encode()
		rec := httptest.NewRecorder()
		h.rangeOfPartitions(rec, r2, next, pf)
		var pg mergedRange
		err := json.Unmarshal(rec.Body.Bytes(), &pg)
		if bw == nil { // the first page
			if rec.Code != http.StatusOK || err != nil {
				for k, vs := range rec.Header() {
					w.Header()[k] = vs
				}
				w.WriteHeader(rec.Code)
				_, _ = w.Write(rec.Body.Bytes())
				return
			}
			cursors = pg.Cursors
			w.Header().Set("Content-Type", "application/x-ndjson")
			w.WriteHeader(http.StatusOK)
			bw = bufio.NewWriterSize(w, 64<<10)
		}
		switch {
		case rec.Code != http.StatusOK || err != nil:
			fail("a page of the merged range failed: " + http.StatusText(rec.Code) + ": " + rec.Body.String())
			return
		case pg.SnapshotExpired:
			fail("a partition's snapshot expired between two pages of the merged range (a page's items took the reader longer than " +
				httpapi.PinnedSnapshotTTL.String() + "): ask again")
			return
		}
		for _, it := range pg.Items {
			if _, err := bw.Write(append(it, '\n')); err != nil {
				return // the reader is gone
			}
			n++
		}
		// Renewed a page at a time: only a reader stalled for
		// ReadWriteTimeout is cut, however long the stream.
		_ = rc.SetWriteDeadline(time.Now().Add(httpapi.ReadWriteTimeout))
		if !pg.Truncated {
			b, _ := json.Marshal(struct {
				End     bool     `json:"end"`
				Count   int      `json:"count"`
				Cursors []uint64 `json:"cursors"`
			}{true, n, cursors})
			_, _ = bw.Write(append(b, '\n'))
			_ = bw.Flush()
			return
		}
		token = pg.Next
	}
}
