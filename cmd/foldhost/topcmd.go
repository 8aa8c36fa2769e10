package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/foldhost/foldhost/host/httpapi"
)

const topAbout = `A terminal view of a running foldhost, read from its HTTP API (GETs
only: no admin token needed), refreshed every --interval: one row per fold
with its state, cursor, lag, rate (updates delivered per second between two
samples), p99 (the batch apply+commit time's 99th percentile over the
interval, estimated from the foldhost_fold_batch_duration_seconds
histogram of /metrics), plugin (name@version) and last error.

Columns are truncated, then dropped (last error, plugin, p99, rate, lag)
to fit the terminal's width ($COLUMNS, else 80, when the output is not a
terminal). Keys: s cycles the sort (name, lag, rate, state), q quits, as
does Ctrl-C; the terminal is restored on exit.

--once prints one frame without escape codes and exits: it samples twice,
--interval apart, so that rates and p99 are shown. Exit 1 when the API
cannot be read.`

// topSorts are the --sort keys, in the order the s key cycles them.
var topSorts = []string{"name", "lag", "rate", "state"}

func cmdTop(c *cli, args []string) error {
	fs := c.flagSet("top", "top [--url URL | --config FILE] [--interval D] [--sort KEY] [--once]", topAbout)
	base := fs.String("url", "http://127.0.0.1:8080", "the daemon's HTTP API `URL` (the default http.addr)")
	configPath := fs.String("config", "", "take the URL from this config `file`'s http.addr")
	interval := fs.Duration("interval", time.Second, "refresh `interval` (and, with --once, the time between the two samples)")
	sortKey := fs.String("sort", "name", "sort rows by `key`: "+strings.Join(topSorts, ", "))
	once := fs.Bool("once", false, "print one frame, without escape codes, and exit")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	if len(pos) > 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if !slices.Contains(topSorts, *sortKey) {
		return usagef("--sort %q: want one of %s", *sortKey, strings.Join(topSorts, ", "))
	}
	if *interval <= 0 {
		return usagef("--interval %v: want a positive duration", *interval)
	}
	var urlSet bool
	fs.Visit(func(f *flag.Flag) { urlSet = urlSet || f.Name == "url" })
	if *configPath != "" {
		if urlSet {
			return usagef("--url and --config: give one")
		}
		cfg, err := c.loadConfig(*configPath)
		if err != nil {
			return err
		}
		if *base, err = daemonURL(cfg); err != nil {
			return fmt.Errorf("foldhost's HTTP API: %w", err)
		}
	}
	t := &top{c: c, base: strings.TrimRight(*base, "/"), interval: *interval, sort: *sortKey}
	if *once {
		return t.once()
	}
	return t.interactive()
}

// top is one `foldhost top` session.
type top struct {
	c        *cli
	base     string
	interval time.Duration
	sort     string
}

// topSample is one reading of the API.
type topSample struct {
	at    time.Time
	folds []httpapi.Status
	// hist is each fold's batch duration histogram; nil when /metrics
	// could not be read (the p99 column shows "-").
	hist map[string]batchHist
}

// fetch reads /v1/folds and /metrics. Only the first is required.
func (t *top) fetch(ctx context.Context) (*topSample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second+t.interval)
	defer cancel()
	s := &topSample{}
	var list struct {
		Folds []httpapi.Status `json:"folds"`
	}
	err := httpGetBody(ctx, t.base+"/v1/folds", func(r io.Reader) error { return json.NewDecoder(r).Decode(&list) })
	if err != nil {
		return nil, err
	}
	s.at, s.folds = time.Now(), list.Folds
	_ = httpGetBody(ctx, t.base+"/metrics", func(r io.Reader) error {
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

// once samples twice, an interval apart, and prints one plain frame.
func (t *top) once() error {
	prev, err := t.fetch(t.c.ctx)
	if err != nil {
		return err
	}
	select {
	case <-time.After(t.interval):
	case <-t.c.ctx.Done():
		return nil
	}
	cur, err := t.fetch(t.c.ctx)
	if err != nil {
		return err
	}
	width, _ := t.size()
	rows := topRows(prev, cur)
	sortTopRows(rows, t.sort)
	for _, l := range renderTop(rows, width) {
		fmt.Fprintln(t.c.stdout, l)
	}
	return nil
}

// interactive redraws a frame every interval until q, Ctrl-C or a
// cancelled context; the terminal is restored on the way out.
func (t *top) interactive() error {
	ctx := t.c.ctx
	var keys <-chan byte
	if in, ok := t.c.stdin.(*os.File); ok {
		if raw, err := enterRaw(in); err == nil {
			defer raw.restore()
			done := make(chan struct{})
			k := make(chan byte)
			stopped := raw.readKeys(k, done)
			defer func() { close(done); <-stopped }()
			keys = k
		}
	}
	// The alternate screen keeps the shell's screen as it was; the
	// cursor is hidden while frames are drawn.
	fmt.Fprint(t.c.stdout, "\x1b[?1049h\x1b[?25l\x1b[H\x1b[2J")
	defer fmt.Fprint(t.c.stdout, "\x1b[?25h\x1b[?1049l")

	var prev, cur *topSample
	var fetchErr error
	sample := func() {
		s, err := t.fetch(ctx)
		if err != nil {
			fetchErr = err
			return
		}
		prev, cur, fetchErr = cur, s, nil
	}
	sample()
	ticker := time.NewTicker(t.interval)
	defer ticker.Stop()
	for {
		if ctx.Err() != nil {
			return nil
		}
		t.draw(prev, cur, fetchErr, keys != nil)
		select {
		case <-ctx.Done():
			return nil
		case <-ticker.C:
			sample()
		case k := <-keys:
			switch k {
			case 'q', 'Q':
				return nil
			case 's', 'S':
				t.sort = topSorts[(slices.Index(topSorts, t.sort)+1)%len(topSorts)]
			}
		}
	}
}

// draw writes one frame over the last: home, each line erased to its end,
// then the rest of the screen erased (no full clear: no flicker over ssh).
func (t *top) draw(prev, cur *topSample, fetchErr error, keys bool) {
	width, height := t.size()
	head := fmt.Sprintf("foldhost top  %s  every %v  sort: %s", t.base, t.interval, t.sort)
	if keys {
		head += "  (s: sort, q: quit)"
	}
	lines := []string{head}
	if fetchErr != nil {
		lines = append(lines, "error: "+oneLine(fetchErr.Error(), 1<<20))
	}
	if cur != nil {
		lines = append(lines, "updated "+cur.at.Format("15:04:05"))
		rows := topRows(prev, cur)
		sortTopRows(rows, t.sort)
		table := renderTop(rows, width)
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
	io.WriteString(t.c.stdout, b.String())
}

// size is the output's width and height: the terminal's when the output
// is one, else $COLUMNS (default 80) and $LINES (default 0: no limit).
func (t *top) size() (width, height int) {
	if f, ok := t.c.stdout.(*os.File); ok {
		if w, h, ok := termSize(f); ok && w > 0 {
			return w, h
		}
	}
	width, height = 80, 0
	if v, ok := t.c.getenv("COLUMNS"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			width = n
		}
	}
	if v, ok := t.c.getenv("LINES"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			height = n
		}
	}
	return width, height
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
func topRows(prev, cur *topSample) []topRow {
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
			}, oneLine(col.cell(row), 1<<20))
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
