package httpapi

import (
	"bytes"
	"html/template"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"
)

// The status page (GET /): a table of the folds for a person with a
// browser, rendered on the server from the same Status values /v1/folds
// serves. No script and no external asset: inline CSS, and a meta refresh
// every PageRefresh. html/template escapes every field (fold names are
// URL-safe, but errors and plugin names are anybody's text).

// PageRefresh is how often the status page reloads itself.
const PageRefresh = 5 * time.Second

// pageRateMin is the shortest interval a rate is measured over: page
// views closer together show the rate measured before.
const pageRateMin = time.Second

// pageRates turns the folds' DeliveredSinceStart counters into rates
// between successive page views (any viewer's), as foldhost top does
// between its samples: the API keeps no history of its own.
type pageRates struct {
	mu   sync.Mutex
	last map[string]rateSample
}

type rateSample struct {
	at        time.Time
	delivered uint64
	rate      float64 // NaN: unknown (first view, or the counter went down)
}

// rate records st's counter at now and returns the fold's rate, NaN when
// unknown.
func (p *pageRates) rate(st Status, now time.Time) float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.last == nil {
		p.last = map[string]rateSample{}
	}
	n := st.Counters.DeliveredSinceStart
	prev, ok := p.last[st.Name]
	switch {
	case !ok:
		p.last[st.Name] = rateSample{at: now, delivered: n, rate: math.NaN()}
		return math.NaN()
	case now.Sub(prev.at) < pageRateMin:
		return prev.rate
	}
	r := math.NaN()
	if n >= prev.delivered { // a counter that went down is a restarted fold
		r = float64(n-prev.delivered) / now.Sub(prev.at).Seconds()
	}
	p.last[st.Name] = rateSample{at: now, delivered: n, rate: r}
	return r
}

// pageRow is one fold's row: the cells as text, "-" when unknown or not
// applicable.
type pageRow struct {
	Name, State, Reason                       string
	Ready                                     bool
	Cursor, Head, Lag, LagSeconds, LastCommit string
	Rate, Plugin, Outbox, Error               string
	// ErrorCut: Error is the start of a longer text (a wasm stack trace
	// made one row twenty lines high): the row links to the fold's JSON.
	ErrorCut bool
}

// pageErrorMax bounds the last error a row shows: its first line, at most
// this many characters.
const pageErrorMax = 400

type pageData struct {
	Now       string
	Refresh   int
	Folds     int
	NotReady  int
	Rows      []pageRow
	RateEvery string
}

var pageTemplate = template.Must(template.New("page").Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta http-equiv="refresh" content="{{.Refresh}}">
<title>foldhost</title>
<style>
body { font: 14px/1.4 system-ui, sans-serif; margin: 1.5em; color: #222; }
h1 { font-size: 1.3em; margin: 0 0 .2em; }
p.meta { color: #666; margin: 0 0 1em; }
table { border-collapse: collapse; }
th, td { padding: .3em .7em; border-bottom: 1px solid #ddd; text-align: left; vertical-align: top; }
th { background: #f4f4f4; font-weight: 600; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.err { color: #a00; max-width: 40em; word-break: break-word; }
.state-following { color: #070; }
.state-failed { color: #a00; font-weight: 600; }
.state-hydrating, .state-repairing, .state-rebuilding, .state-waiting, .state-starting { color: #a60; }
.notready { color: #a60; }
</style>
</head>
<body>
<h1>foldhost</h1>
<p class="meta">{{.Folds}} folds, {{if .NotReady}}<span class="notready">{{.NotReady}} not ready</span>{{else}}all ready{{end}}; as of {{.Now}}, refreshed every {{.Refresh}}s. Rates are measured between page views (at least {{.RateEvery}} apart). JSON: <a href="/v1/folds">/v1/folds</a>, <a href="/readyz">/readyz</a>, <a href="/metrics">/metrics</a>.</p>
<table>
<thead><tr><th>fold</th><th>state</th><th>cursor</th><th>stream head</th><th>lag</th><th>lag (s)</th><th>last commit</th><th>rate/s</th><th>plugin</th><th>outbox</th><th>last error</th></tr></thead>
<tbody>
{{range .Rows}}<tr data-fold="{{.Name}}">
<td data-col="name"><a href="/v1/folds/{{.Name}}">{{.Name}}</a></td>
<td data-col="state" class="state-{{.State}}"{{if .Reason}} title="{{.Reason}}"{{end}}>{{.State}}{{if not .Ready}} (not ready){{end}}</td>
<td data-col="cursor" class="num">{{.Cursor}}</td>
<td data-col="head" class="num">{{.Head}}</td>
<td data-col="lag" class="num">{{.Lag}}</td>
<td data-col="lag_seconds" class="num">{{.LagSeconds}}</td>
<td data-col="last_commit" class="num">{{.LastCommit}}</td>
<td data-col="rate" class="num">{{.Rate}}</td>
<td data-col="plugin">{{.Plugin}}</td>
<td data-col="outbox" class="num">{{.Outbox}}</td>
<td data-col="error" class="err">{{.Error}}{{if .ErrorCut}} <a href="/v1/folds/{{.Name}}" title="the fold's status (JSON) has the whole text">(whole text)</a>{{end}}</td>
</tr>
{{else}}<tr><td colspan="11">no folds</td></tr>
{{end}}</tbody>
</table>
</body>
</html>
`))

// page serves GET / (and HEAD: the mux's GET patterns match it).
func (s *server) page(w http.ResponseWriter, _ *http.Request) {
	now := time.Now()
	d := pageData{Now: now.UTC().Format(time.RFC3339), Refresh: int(PageRefresh / time.Second), Folds: len(s.order), RateEvery: pageRateMin.String()}
	for _, f := range s.order {
		st := f.Status()
		if !st.Ready {
			d.NotReady++
		}
		d.Rows = append(d.Rows, pageRowOf(st, s.rates.rate(st, now), now))
	}
	var b bytes.Buffer
	if err := pageTemplate.Execute(&b, d); err != nil {
		writeError(w, http.StatusInternalServerError, "status page: %v", err)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	_, _ = w.Write(b.Bytes())
}

func pageRowOf(st Status, rate float64, now time.Time) pageRow {
	r := pageRow{
		Name: st.Name, State: string(st.State), Reason: st.Reason, Ready: st.Ready,
		Cursor: strconv.FormatUint(st.Cursor, 10), Head: strconv.FormatUint(st.StreamLastSeq, 10),
		Lag: strconv.FormatUint(st.Lag, 10), LagSeconds: "-", LastCommit: "-", Rate: "-",
		Plugin: "-", Outbox: "-", Error: st.LastError,
	}
	if st.LagSeconds != nil {
		r.LagSeconds = strconv.FormatFloat(*st.LagSeconds, 'f', 1, 64)
	}
	if st.LastCommitAt != nil {
		r.LastCommit = ageText(now.Sub(*st.LastCommitAt)) + " ago"
	}
	if !math.IsNaN(rate) {
		r.Rate = strconv.FormatFloat(rate, 'f', 1, 64)
	}
	if p := st.Plugin; p.Name != "" {
		r.Plugin = p.Name + " " + p.Version
	} else if p.Source != "" {
		r.Plugin = p.Source + " (not loaded)"
	}
	if e := st.Effects; e != nil {
		r.Outbox = strconv.FormatInt(e.Outbox, 10)
		if e.LastError != "" && r.Error == "" {
			r.Error = "effects: " + e.LastError
		}
	}
	if r.Error == "" {
		r.Error = "-"
	}
	if first, _, multi := strings.Cut(r.Error, "\n"); multi || utf8.RuneCountInString(first) > pageErrorMax {
		if rs := []rune(first); len(rs) > pageErrorMax {
			first = string(rs[:pageErrorMax])
		}
		r.Error, r.ErrorCut = strings.TrimSpace(first)+" …", true
	}
	return r
}

// ageText is d rounded for a person: 850ms, 12s, 4m10s, 3h05m, 2d04h.
func ageText(d time.Duration) string {
	switch d = max(d, 0); {
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatInt(int64(d/time.Second), 10) + "s"
	case d < time.Hour:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m" + pad2(int64(d%time.Minute/time.Second)) + "s"
	case d < 48*time.Hour:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h" + pad2(int64(d%time.Hour/time.Minute)) + "m"
	}
	return strconv.FormatInt(int64(d/(24*time.Hour)), 10) + "d" + pad2(int64(d%(24*time.Hour)/time.Hour)) + "h"
}

func pad2(n int64) string {
	if n < 10 {
		return "0" + strconv.FormatInt(n, 10)
	}
	return strconv.FormatInt(n, 10)
}
