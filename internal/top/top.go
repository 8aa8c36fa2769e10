// Package top is `foldhost top`'s model and rendering: samples of a
// running foldhost's HTTP API (/v1/folds and the batch duration
// histograms of /metrics), the rows made from two samples (rates, p99),
// their sorts, the table and frames fitted to a terminal's width, and the
// loop that redraws them (View). The CLI keeps the terminal's raw mode.
package top

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/internal/textfmt"
)

// Sorts are the sort keys, in the order the s key cycles them.
var Sorts = []string{"name", "lag", "rate", "state"}

// Sample is one reading of the API.
type Sample struct {
	at    time.Time
	folds []httpapi.Status
	// hist is each fold's batch duration histogram; nil when /metrics
	// could not be read (the p99 column shows "-").
	hist map[string]batchHist
}

// Fetch reads /v1/folds and /metrics of the API at base, within 5 s plus
// interval. Only the first is required.
func Fetch(ctx context.Context, base string, interval time.Duration) (*Sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second+interval)
	defer cancel()
	s := &Sample{}
	var list struct {
		Folds []httpapi.Status `json:"folds"`
	}
	err := httpGetBody(ctx, base+"/v1/folds", func(r io.Reader) error { return json.NewDecoder(r).Decode(&list) })
	if err != nil {
		return nil, err
	}
	s.at, s.folds = time.Now(), list.Folds
	_ = httpGetBody(ctx, base+"/metrics", func(r io.Reader) error {
		s.hist = parseBatchHists(r)
		return nil
	})
	return s, nil
}

func httpGetBody(ctx context.Context, url string, read func(io.Reader) error) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if err := read(io.LimitReader(resp.Body, 64<<20)); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
}

// Table is the table of cur, sorted by key (one of Sorts), in at most
// width columns; rates and p99 come from the difference with prev (nil:
// none yet).
func Table(prev, cur *Sample, key string, width int) []string {
	rows := topRows(prev, cur)
	sortTopRows(rows, key)
	return renderTop(rows, width)
}

// Frame is one frame of the interactive view, head its first line: drawn
// over the last (home, each line erased to its end, then the rest of the
// screen erased; no full clear: no flicker over ssh), in at most width
// columns and height lines (0: no limit).
func Frame(head string, prev, cur *Sample, fetchErr error, key string, width, height int) string {
	lines := []string{head}
	if fetchErr != nil {
		lines = append(lines, "error: "+textfmt.OneLine(fetchErr.Error(), 1<<20))
	}
	if cur != nil {
		lines = append(lines, "updated "+cur.at.Format("15:04:05"))
		table := Table(prev, cur, key, width)
		if height > 0 && len(lines)+len(table) > height {
			keep := max(height-len(lines)-1, 1)
			table = append(table[:keep], fmt.Sprintf("... %d more folds", len(table)-keep))
		}
		lines = append(lines, table...)
	}
	var b strings.Builder
	b.WriteString("\x1b[H")
	for _, l := range lines {
		b.WriteString(truncate(l, width))
		b.WriteString("\x1b[K\r\n")
	}
	b.WriteString("\x1b[J")
	return b.String()
}

// topRow is one fold's row.
type topRow struct {
	name, state   string
	cursor, lag   uint64
	rate          float64 // updates delivered per second; NaN: unknown
	p99           string  // "-" when unknown
	plugin, error string
}

// topRows makes the rows of cur; rates and p99 come from the difference
// with prev (nil: none yet).
func topRows(prev, cur *Sample) []topRow {
	before := map[string]httpapi.Status{}
	if prev != nil {
		for _, s := range prev.folds {
			before[s.Name] = s
		}
	}
	rows := make([]topRow, 0, len(cur.folds))
	for _, s := range cur.folds {
		r := topRow{name: s.Name, state: string(s.State), cursor: s.Cursor, lag: s.Lag, rate: math.NaN(), p99: "-", plugin: "-", error: s.LastError}
		if s.Plugin.Name != "" {
			r.plugin = s.Plugin.Name + "@" + s.Plugin.Version
		}
		p, ok := before[s.Name]
		if ok {
			d, n := cur.at.Sub(prev.at).Seconds(), s.Counters.DeliveredSinceStart
			// A counter that went down is a restarted fold: no rate.
			if d > 0 && n >= p.Counters.DeliveredSinceStart {
				r.rate = float64(n-p.Counters.DeliveredSinceStart) / d
			}
		}
		if h, ok := cur.hist[s.Name]; ok {
			if prev != nil {
				h = h.since(prev.hist[s.Name])
			}
			r.p99 = h.quantileText(0.99)
		}
		rows = append(rows, r)
	}
	return rows
}

// stateRanks orders --sort state: the states that want attention first.
var stateRanks = map[string]int{
	"failed": 0, "waiting": 1, "paused": 2, "repairing": 3, "rebuilding": 4,
	"hydrating": 5, "starting": 6, "draining": 7, "stopped": 8, "following": 9,
}

func stateRank(s string) int {
	if r, ok := stateRanks[s]; ok {
		return r
	}
	return 1 // an unknown state wants attention too
}

// sortTopRows sorts by key: name ascending; lag and rate descending (an
// unknown rate last); state by stateRanks. Ties go by name.
func sortTopRows(rows []topRow, key string) {
	slices.SortStableFunc(rows, func(a, b topRow) int {
		var c int
		switch key {
		case "lag":
			c = -cmpNum(a.lag, b.lag)
		case "rate":
			ar, br := a.rate, b.rate
			if math.IsNaN(ar) {
				ar = -1
			}
			if math.IsNaN(br) {
				br = -1
			}
			c = -cmpNum(ar, br)
		case "state":
			c = cmpNum(stateRank(a.state), stateRank(b.state))
		}
		if c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
}

func cmpNum[T int | uint64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// topCol is a table column.
type topCol struct {
	head  string
	right bool
	cell  func(topRow) string
}

// The columns, and the indexes fitTop's steps name.
const (
	colName = iota
	colState
	colCursor
	colLag
	colRate
	colP99
	colPlugin
	colError
)

var topCols = []topCol{
	colName:   {head: "NAME", cell: func(r topRow) string { return r.name }},
	colState:  {head: "STATE", cell: func(r topRow) string { return r.state }},
	colCursor: {head: "CURSOR", right: true, cell: func(r topRow) string { return strconv.FormatUint(r.cursor, 10) }},
	colLag:    {head: "LAG", right: true, cell: func(r topRow) string { return compactNum(float64(r.lag)) }},
	colRate:   {head: "RATE/s", right: true, cell: func(r topRow) string { return rateText(r.rate) }},
	colP99:    {head: "P99", right: true, cell: func(r topRow) string { return r.p99 }},
	colPlugin: {head: "PLUGIN", cell: func(r topRow) string { return r.plugin }},
	colError:  {head: "LAST ERROR", cell: func(r topRow) string { return r.error }},
}

// fitStep is one way to narrow the table: truncate a column down to min
// runes (no further than needed), or drop it (min < 0).
type fitStep struct{ col, min int }

// fitSteps narrow a table too wide for the terminal, in this order: an
// error matters more than the plugin's name, name, state and cursor most.
var fitSteps = []fitStep{
	{colError, 24}, {colPlugin, 12}, {colError, 16}, {colPlugin, -1},
	{colName, 12}, {colP99, -1}, {colError, -1}, {colRate, -1}, {colLag, -1},
	{colName, 6},
}

// renderTop renders the header and rows in at most width columns (runes).
func renderTop(rows []topRow, width int) []string {
	cells := make([][]string, len(rows))
	natural := make([]int, len(topCols))
	for i, col := range topCols {
		natural[i] = utf8.RuneCountInString(col.head)
	}
	for r, row := range rows {
		cells[r] = make([]string, len(topCols))
		for i, col := range topCols {
			// One line of printable text: a plugin's name or an error
			// could hold escape codes.
			cells[r][i] = strings.Map(func(r rune) rune {
				if unicode.IsPrint(r) {
					return r
				}
				return ' '
			}, textfmt.OneLine(col.cell(row), 1<<20))
			natural[i] = max(natural[i], utf8.RuneCountInString(cells[r][i]))
		}
	}
	shown := make([]bool, len(topCols))
	for i := range shown {
		shown[i] = true
	}
	// The last error is most often empty: a column of nothing is not shown.
	shown[colError] = slices.ContainsFunc(rows, func(r topRow) bool { return r.error != "" })
	widths := fitTop(natural, shown, width)
	var out []string
	line := func(get func(i int) string) {
		var parts []string
		for i, col := range topCols {
			if shown[i] {
				parts = append(parts, pad(truncate(get(i), widths[i]), widths[i], col.right))
			}
		}
		out = append(out, truncate(strings.TrimRight(strings.Join(parts, "  "), " "), width))
	}
	line(func(i int) string { return topCols[i].head })
	for r := range rows {
		line(func(i int) string { return cells[r][i] })
	}
	return out
}

// fitTop chooses the columns' widths: the natural ones when they fit, else
// those of the fewest fitSteps that make the table fit (their drops
// first, so that a drop gives its room back to the columns truncated
// before it), else all of them (the lines are then cut at the width).
// shown is updated with the drops.
func fitTop(natural []int, shown []bool, width int) []int {
	var w []int
	var vis []bool
	total := func() int {
		n, cols := 0, 0
		for i := range w {
			if vis[i] {
				n, cols = n+w[i], cols+1
			}
		}
		return n + 2*max(cols-1, 0)
	}
	for k := 0; k <= len(fitSteps); k++ {
		w, vis = slices.Clone(natural), slices.Clone(shown)
		for _, st := range fitSteps[:k] {
			if st.min < 0 {
				vis[st.col] = false
			}
		}
		for _, st := range fitSteps[:k] {
			if st.min >= 0 && vis[st.col] && total() > width {
				w[st.col] = max(min(st.min, w[st.col]), w[st.col]-(total()-width))
			}
		}
		if total() <= width {
			break
		}
	}
	copy(shown, vis)
	return w
}

func pad(s string, w int, right bool) string {
	n := w - utf8.RuneCountInString(s)
	if n <= 0 {
		return s
	}
	if right {
		return strings.Repeat(" ", n) + s
	}
	return s + strings.Repeat(" ", n)
}

// truncate cuts s to w runes, marking a cut with "…".
func truncate(s string, w int) string {
	if utf8.RuneCountInString(s) <= w {
		return s
	}
	if w <= 0 {
		return ""
	}
	r := []rune(s)
	return string(r[:w-1]) + "…"
}

// compactNum prints n exactly below 100000, else with a k, M or G suffix.
func compactNum(n float64) string {
	switch {
	case n < 1e5:
		return strconv.FormatFloat(n, 'f', 0, 64)
	case n < 1e6:
		return strconv.FormatFloat(n/1e3, 'f', 0, 64) + "k"
	case n < 1e9:
		return strconv.FormatFloat(n/1e6, 'f', 1, 64) + "M"
	}
	return strconv.FormatFloat(n/1e9, 'f', 1, 64) + "G"
}

func rateText(r float64) string {
	switch {
	case math.IsNaN(r):
		return "-"
	case r < 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return compactNum(math.Round(r))
}

// batchHist is a cumulative Prometheus histogram: counts[i] observations
// were <= les[i] (the last bound is +Inf).
type batchHist struct {
	les    []float64
	counts []float64
}

// since is the histogram of the observations made after prev (a reset
// counter, or a different layout: h as it is).
func (h batchHist) since(prev batchHist) batchHist {
	if !slices.Equal(h.les, prev.les) {
		return h
	}
	d := batchHist{les: h.les, counts: make([]float64, len(h.counts))}
	for i := range h.counts {
		d.counts[i] = h.counts[i] - prev.counts[i]
		if d.counts[i] < 0 {
			return h
		}
	}
	return d
}

// quantileText estimates the q-quantile as Prometheus' histogram_quantile
// does (linear within the bucket it falls in); "-" with no observations,
// ">BOUND" when it falls beyond the last finite bound.
func (h batchHist) quantileText(q float64) string {
	n := len(h.counts)
	if n == 0 || h.counts[n-1] == 0 {
		return "-"
	}
	rank := q * h.counts[n-1]
	i := slices.IndexFunc(h.counts, func(c float64) bool { return c >= rank })
	if math.IsInf(h.les[i], 1) {
		if i == 0 {
			return "-"
		}
		return ">" + durText(h.les[i-1])
	}
	lo, below := 0.0, 0.0
	if i > 0 {
		lo, below = h.les[i-1], h.counts[i-1]
	}
	v := h.les[i]
	if h.counts[i] > below {
		v = lo + (h.les[i]-lo)*(rank-below)/(h.counts[i]-below)
	}
	return durText(v)
}

// durText prints seconds with two or three significant digits.
func durText(sec float64) string {
	d := time.Duration(sec * float64(time.Second))
	switch {
	case d < time.Millisecond:
		return strconv.FormatFloat(sec*1e6, 'f', 0, 64) + "us"
	case d < 10*time.Millisecond:
		return strconv.FormatFloat(sec*1e3, 'f', 1, 64) + "ms"
	case d < time.Second:
		return strconv.FormatFloat(sec*1e3, 'f', 0, 64) + "ms"
	}
	return strconv.FormatFloat(sec, 'f', 1, 64) + "s"
}

const batchBucketMetric = "foldhost_fold_batch_duration_seconds_bucket{"

// parseBatchHists reads the batch duration histograms, per fold, from the
// Prometheus text exposition format (the lines of one metric, whose
// label values are fold names and bounds: no escapes to undo).
func parseBatchHists(r io.Reader) map[string]batchHist {
	out := map[string]batchHist{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), batchBucketMetric)
		if !ok {
			continue
		}
		labels, rest, ok := strings.Cut(line, "}")
		fields := strings.Fields(rest)
		if !ok || len(fields) == 0 {
			continue
		}
		count, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		var fold, le string
		for _, l := range strings.Split(labels, ",") {
			k, v, _ := strings.Cut(l, "=")
			v = strings.Trim(v, `"`)
			switch k {
			case "fold":
				fold = v
			case "le":
				le = v
			}
		}
		bound, err := strconv.ParseFloat(le, 64) // "+Inf" parses
		if fold == "" || err != nil {
			continue
		}
		h := out[fold]
		h.les, h.counts = append(h.les, bound), append(h.counts, count)
		out[fold] = h
	}
	return out
}
