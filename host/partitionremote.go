package host

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// A query by a partitioned fold's name on a node of a fleet that does not
// fold every unit reads the others through their owners: each read of
// such a unit is a read forwarded as any client's (fleetReads.read), at
// min_revision, so a unit's reads in one query may come from several of
// its owner's snapshots, each at least that new. A range is read in pages
// (a view scan: ?start=&end=&reverse=), from 256 entries up to 4,096 and
// 1 MiB of keys and values, as the merge pulls them, and never more
// entries than the plugin's range takes. A unit that cannot be read ends the query with
// 503 (httpapi.ErrQueryUnitUnavailable): never an answer missing a
// partition.

// callBudget bounds a query's remote reads: by the request before the
// plugin's call (the barriers, within the query's wait), by the call's
// deadline in it, so that an owner paused mid-read holds a query instance
// no longer than its call may run (the wait for an instance is not
// counted).
type callBudget struct {
	base   context.Context
	ctx    context.Context // the call's; nil before it started
	cancel context.CancelFunc
}

func (b *callBudget) start(deadline time.Time) {
	b.release()
	if deadline.IsZero() {
		b.ctx = b.base
		return
	}
	b.ctx, b.cancel = context.WithDeadline(b.base, deadline)
}

func (b *callBudget) context() context.Context {
	if b.ctx != nil {
		return b.ctx
	}
	return b.base
}

func (b *callBudget) release() {
	if b.cancel != nil {
		b.cancel()
		b.cancel = nil
	}
}

// remoteUnit is a unit read through its owner.
type remoteUnit struct {
	call      *callBudget
	fr        *fleetReads
	fold      string // the partitioned fold's name; the unit's is FOLD.P
	partition int
	min       protocol.Revision
	deadline  time.Time
	cursor    uint64 // the least cursor its answers carried (0: none yet)
	// viewSchema is the view schema of its views, as its barrier found
	// them (nil: no plugin wrote them yet).
	viewSchema *uint32
}

// remote page sizes of a view range: small first (a query may take a
// few entries of each unit), then larger.
var firstRemotePage = 256 // a var for a test (SetFirstRemotePage)

const (
	maxRemotePage = 4096
	// maxRemotePageBytes bounds a page's keys and values (large views
	// come a few at a time, not 4,096 at once).
	maxRemotePageBytes = 1 << 20
)

// barrier asks the unit's owner for its cursor and its views' view schema
// (an empty view range),
// waiting within the query's wait until it reached min_revision, so that
// the call's reads need not wait; afterwards a read that finds the unit
// below it (moved to a node behind) ends the query, to be asked again.
func (ru *remoteUnit) barrier() error {
	var page struct {
		Cursor     uint64  `json:"cursor"`
		ViewSchema *uint32 `json:"view_schema"`
	}
	q := url.Values{"start_b64": {"AA=="}, "end_b64": {"AA=="}, "limit": {"1"}}
	found, err := ru.read("/view", q, &page)
	if err == nil && !found {
		err = fmt.Errorf("%w: partition %d (%s): its view range answered 404", httpapi.ErrQueryUnitUnavailable, ru.partition, ru.unit())
	}
	if err != nil {
		var rr *wasm.ReadRefusal
		if errors.As(err, &rr) {
			err = rr.Err // not in a call: the reason itself
		}
		return err
	}
	ru.saw(page.Cursor)
	ru.viewSchema = page.ViewSchema
	ru.deadline = time.Time{} // reached: later reads do not wait
	return nil
}

// read asks the unit's read endpoint (path after /v1/folds/FOLD.P) with
// q, and decodes a 200 answer into out; found is false for a 404.
func (ru *remoteUnit) read(path string, q url.Values, out any) (found bool, err error) {
	if ru.min > 0 {
		q.Set("min_revision", strconv.FormatUint(uint64(ru.min), 10))
		q.Set("wait", max(time.Until(ru.deadline), 0).Round(time.Millisecond).String())
	}
	target := "/v1/folds/" + url.PathEscape(ru.unit()) + path + "?" + q.Encode()
	req, err := http.NewRequestWithContext(ru.call.context(), http.MethodGet, target, nil)
	if err != nil {
		return false, err
	}
	req.SetPathValue("name", ru.unit())
	rec := ru.fr.h.record(http.HandlerFunc(ru.fr.read), req, ru.fold, ru.partition) // a forward broken off: 502
	switch rec.Code {
	case http.StatusOK:
	case http.StatusNotFound:
		return false, nil
	default:
		var e struct{ Error string }
		_ = json.Unmarshal(rec.Body.Bytes(), &e)
		why := httpapi.ErrQueryUnitUnavailable
		if rec.Code == http.StatusGatewayTimeout {
			why = httpapi.ErrQueryUnitBehind
		}
		where := ru.unit()
		if node := rec.Header().Get(NodeHeader); node != "" {
			where += ", read on node " + node
		}
		return false, &wasm.ReadRefusal{Err: fmt.Errorf("%w: partition %d (%s): %d %s", why, ru.partition, where, rec.Code, e.Error)}
	}
	if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
		return false, &wasm.ReadRefusal{Err: fmt.Errorf("%w: partition %d (%s): a malformed answer: %v", httpapi.ErrQueryUnitUnavailable, ru.partition, ru.unit(), err)}
	}
	return true, nil
}

// unit is the unit's name, FOLD.P.
func (ru *remoteUnit) unit() string { return UnitName(ru.fold, ru.partition) }

// saw notes an answer's cursor.
func (ru *remoteUnit) saw(cursor uint64) {
	if ru.cursor == 0 || cursor < ru.cursor {
		ru.cursor = cursor
	}
}

// remoteItem is an entry of a read's answer (httpapi.RawItem, ViewItem).
type remoteItem struct {
	Cursor   uint64 `json:"cursor"`
	KeyB64   string `json:"key_b64"`
	Revision uint64 `json:"revision"`
	ValueB64 string `json:"value_b64"`
}

func (it remoteItem) decode() (k, v []byte, err error) {
	if k, err = httpapi.DecodeB64(it.KeyB64); err == nil {
		v, err = httpapi.DecodeB64(it.ValueB64)
	}
	return k, v, err
}

func (ru *remoteUnit) Get(key string) (fold.Entry, bool, error) {
	if key == "" {
		return fold.Entry{}, false, nil // no key is empty (the API refuses to read one)
	}
	var it remoteItem
	found, err := ru.read("/raw", url.Values{"key_b64": {b64(key)}}, &it)
	if !found || err != nil {
		return fold.Entry{}, false, err
	}
	ru.saw(it.Cursor)
	_, v, err := it.decode()
	return fold.Entry{Rev: protocol.Revision(it.Revision), Value: v}, err == nil, err
}

func (ru *remoteUnit) ViewGet(key []byte) ([]byte, bool, error) {
	if len(key) == 0 {
		return nil, false, nil // no view key is empty (the API refuses to read one)
	}
	var it remoteItem
	found, err := ru.read("/view", url.Values{"key_b64": {b64(string(key))}}, &it)
	if !found || err != nil {
		return nil, false, err
	}
	ru.saw(it.Cursor)
	_, v, err := it.decode()
	return v, err == nil, err
}

func (ru *remoteUnit) ViewIter(start, end []byte, reverse bool, limit int) (viewIter, error) {
	it := &remoteIter{ru: ru, start: start, end: end, reverse: reverse, size: firstRemotePage, more: true, limit: limit}
	if limit > 0 {
		it.size = min(it.size, limit)
	}
	return it, nil
}

// remoteIter pages through a unit's view range on its owner: a page
// continues just past the last key of the one before (forward: start
// moves up to it plus a zero byte; reverse: end moves down to it).
type remoteIter struct {
	ru         *remoteUnit
	start, end []byte
	reverse    bool
	size       int
	limit      int  // the most the range takes (0: unknown)
	taken      int  // entries fetched so far
	more       bool // pages remain
	page       [][2][]byte
	err        error
}

func (it *remoteIter) Next() (key, value []byte, ok bool) {
	if len(it.page) == 0 && it.more && it.err == nil {
		it.err = it.fetch()
	}
	if len(it.page) == 0 || it.err != nil {
		return nil, nil, false
	}
	e := it.page[0]
	it.page = it.page[1:]
	return e[0], e[1], true
}

func (it *remoteIter) fetch() error {
	q := url.Values{"start_b64": {b64(string(it.start))}, "limit": {strconv.Itoa(it.size)}, "max_bytes": {strconv.Itoa(maxRemotePageBytes)}}
	if len(it.end) > 0 {
		q.Set("end_b64", b64(string(it.end)))
	}
	if it.reverse {
		q.Set("reverse", "1")
	}
	var page struct {
		Cursor    uint64       `json:"cursor"`
		Truncated bool         `json:"truncated"`
		Items     []remoteItem `json:"items"`
	}
	found, err := it.ru.read("/view", q, &page)
	if err != nil {
		return err
	}
	if !found {
		return &wasm.ReadRefusal{Err: fmt.Errorf("%w: partition %d (%s): its view range answered 404", httpapi.ErrQueryUnitUnavailable, it.ru.partition, it.ru.unit())}
	}
	it.ru.saw(page.Cursor)
	for _, item := range page.Items {
		k, v, err := item.decode()
		if err != nil {
			return err
		}
		it.page = append(it.page, [2][]byte{k, v})
	}
	it.taken += len(page.Items)
	it.more = page.Truncated && len(it.page) > 0 && (it.limit <= 0 || it.taken < it.limit)
	if it.more {
		last := it.page[len(it.page)-1][0]
		if it.reverse {
			it.end = last
		} else {
			it.start = append(append([]byte(nil), last...), 0)
		}
	}
	it.size = min(2*it.size, maxRemotePage)
	if it.limit > 0 {
		it.size = min(it.size, it.limit-it.taken)
	}
	return nil
}

func (it *remoteIter) Close() error { return it.err }

// b64 is s in standard base64.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }
