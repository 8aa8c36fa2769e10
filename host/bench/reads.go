package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// The read path's measures (Reads): how many of each, and their sizes.
const (
	readPoints    = 2000
	readRanges    = 50
	readQueries   = 1000
	readRangeKeys = httpapi.MaxLimit // one page of the largest size
	readQueryKeys = 100              // the hosts the measured query answers
	// readQueryAddr is the upstream the bench's own readQueryKeys hosts
	// share (the workload never draws it: its addresses end in :8080).
	readQueryAddr = "10.7.7.7:80"
)

// Reads is the read path's latency on the C router's fold, caught up with
// the bucket and with no writes coming: a point read of one host's view
// entry, a page of 10,000 view entries (following the pages' next tokens
// through the bucket), and a query (hosts_of_upstream) whose answer lists
// 100 hosts, each a request over the HTTP API on loopback, p50 and p99.
// Issue the bench with --keys 10000000 for the latencies at that size.
type Reads struct {
	Module string `json:"module"`
	Points int    `json:"points"`
	// PointsFound: the point reads that found their host (the rest
	// answered 404: a host whose value was malformed, or deleted).
	PointsFound int `json:"points_found"`
	Ranges      int `json:"ranges"`
	RangeKeys   int `json:"range_keys"`
	Queries     int `json:"queries"`
	QueryKeys   int `json:"query_keys"`

	PointP50Seconds float64 `json:"point_p50_seconds"`
	PointP99Seconds float64 `json:"point_p99_seconds"`
	RangeP50Seconds float64 `json:"range_p50_seconds"`
	RangeP99Seconds float64 `json:"range_p99_seconds"`
	QueryP50Seconds float64 `json:"query_p50_seconds"`
	QueryP99Seconds float64 `json:"query_p99_seconds"`
}

// reads measures Reads on f (the router's fold, caught up), served by
// base (the host's HTTP API). It first writes readQueryKeys hosts on
// readQueryAddr, and waits for them to be folded.
func (b *bench) reads(ctx context.Context, f *host.Fold, base, module string) (*Reads, error) {
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return nil, err
	}
	var rev uint64
	for i := range readQueryKeys {
		if rev, err = kv.Put(ctx, fmt.Sprintf("route.reads%03d", i), []byte(`{"upstreams":[{"addr":"`+readQueryAddr+`"}]}`)); err != nil {
			return nil, err
		}
	}
	if err := waitFolded(ctx, f, rev); err != nil {
		return nil, err
	}
	r := &Reads{Module: module, Points: readPoints, Ranges: readRanges, RangeKeys: readRangeKeys,
		Queries: readQueries, QueryKeys: readQueryKeys}
	fold := base + "/v1/folds/" + f.Name()

	var points []float64
	for range readPoints {
		// A host the workload wrote a malformed value for (one in
		// twenty), or deleted, has no entry: its read answers 404, as
		// fast a read as any.
		key := "host/" + strings.TrimPrefix(workload.Key(b.rng.IntN(b.keys)), "route.")
		t0 := time.Now()
		code, _, err := do(ctx, "GET", fold+"/view?key="+url.QueryEscape(key), "")
		switch {
		case err != nil:
			return nil, err
		case code == http.StatusOK:
			r.PointsFound++
		case code != http.StatusNotFound:
			return nil, fmt.Errorf("GET the view's %s: %d", key, code)
		}
		points = append(points, time.Since(t0).Seconds())
	}
	if r.PointsFound == 0 {
		return nil, fmt.Errorf("none of %d point reads found its host", readPoints)
	}

	var ranges []float64
	next := ""
	for range readRanges {
		u := fmt.Sprintf("%s/view?prefix=host/&limit=%d", fold, readRangeKeys)
		if next != "" {
			u += "&next=" + url.QueryEscape(next)
		}
		t0 := time.Now()
		body, err := get(ctx, "GET", u, "")
		if err != nil {
			return nil, err
		}
		ranges = append(ranges, time.Since(t0).Seconds())
		var page struct {
			Items []json.RawMessage `json:"items"`
			Next  string            `json:"next"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return nil, fmt.Errorf("a page of the view: %w", err)
		}
		if page.Next != "" && len(page.Items) != readRangeKeys { // only the last page is short
			return nil, fmt.Errorf("a page of the view holds %d entries and names a next one, want %d", len(page.Items), readRangeKeys)
		}
		next = page.Next // "" after the last page: the next starts over
	}

	var queries []float64
	for range readQueries {
		t0 := time.Now()
		body, err := get(ctx, "POST", fold+"/query/hosts_of_upstream", readQueryAddr)
		if err != nil {
			return nil, err
		}
		queries = append(queries, time.Since(t0).Seconds())
		var ans struct {
			Hosts []string `json:"hosts"`
		}
		if err := json.Unmarshal(body, &ans); err != nil || len(ans.Hosts) != readQueryKeys {
			return nil, fmt.Errorf("hosts_of_upstream %s answered %.200q, want %d hosts", readQueryAddr, body, readQueryKeys)
		}
	}
	r.PointP50Seconds, r.PointP99Seconds = quantile(points, 0.5), quantile(points, 0.99)
	r.RangeP50Seconds, r.RangeP99Seconds = quantile(ranges, 0.5), quantile(ranges, 0.99)
	r.QueryP50Seconds, r.QueryP99Seconds = quantile(queries, 0.5), quantile(queries, 0.99)
	return r, nil
}

// get does one request and returns its body, or an error for a status
// other than 200.
func get(ctx context.Context, method, u, body string) ([]byte, error) {
	code, b, err := do(ctx, method, u, body)
	if err == nil && code != http.StatusOK {
		err = fmt.Errorf("%s %s: %d: %.200s", method, u, code, b)
	}
	return b, err
}

// do does one request and returns its status and body.
func do(ctx context.Context, method, u, body string) (int, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, method, u, strings.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}
