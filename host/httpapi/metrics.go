package httpapi

import (
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Metrics is the Prometheus registry behind GET /metrics: Go runtime and
// process metrics, per-fold gauges and counters read from Fold.Status at
// scrape time, and the batch latency histogram the fold runner feeds
// through ObserveBatch. Each Metrics has its own registry (not the global
// one), so several can coexist in one process (tests).
//
// Every counter of a tracked fold is exported from the fold's start, at 0
// until something happens: a series that appears at its first event (at
// 1) shows no increase() over it, so the first repair or query of a
// process would be invisible on a dashboard. The labelled ones are created
// for each value their label can take: every repair plan with each outcome
// it can end with (RepairSeries), every query the fold's plugin declares
// (and UnknownQueryLabel) with every outcome.
type Metrics struct {
	reg          *prometheus.Registry
	latency      *prometheus.HistogramVec
	queries      *prometheus.CounterVec
	queryLatency *prometheus.HistogramVec
	folds        *foldCollector
}

// NewMetrics returns a registry with the runtime collectors and the batch
// latency histogram; Track adds the folds.
func NewMetrics() *Metrics {
	reg := prometheus.NewRegistry()
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
	)
	latency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "foldhost_fold_batch_duration_seconds",
		Help: "Time to apply and commit one batch (plugin call plus store commit).",
		// 100us .. ~6.5s
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}, []string{"fold"})
	queries := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "foldhost_fold_queries_total",
		Help: "Plugin queries answered (over HTTP and NATS), by query (" + UnknownQueryLabel + ": a name the fold's plugin does not declare) and outcome (" + strings.Join(QueryOutcomes, ", ") + ").",
	}, []string{"fold", "query", "outcome"})
	queryLatency := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "foldhost_fold_query_duration_seconds",
		Help: "Time to answer one plugin query that ran the plugin (outcomes ok, refused, error), its snapshot wait included.",
		// 100us .. ~6.5s, as the batches'
		Buckets: prometheus.ExponentialBuckets(0.0001, 4, 9),
	}, []string{"fold", "query"})
	m := &Metrics{reg: reg, latency: latency, queries: queries, queryLatency: queryLatency}
	m.folds = &foldCollector{m: m}
	// The query metrics are collected through the fold collector, which
	// first creates the series of the queries each fold's plugin declares
	// now (a reload may add some): they are in the same scrape.
	reg.MustRegister(latency, m.folds)
	return m
}

// UnknownQueryLabel is the query label of a query the fold's plugin does
// not declare (no query name has parentheses): a caller cannot grow the
// series with names of its own.
const UnknownQueryLabel = "(unknown)"

// QueryOutcomes are the outcome label's values of
// foldhost_fold_queries_total, from the answer's status: 200 ok, 400
// bad_request, 404 not_found, 413 too_large, 422 refused (the plugin's
// verdict on its input), 500 error (a trap, a timeout, a bound crossed),
// 503 unavailable, 504 timeout (min_revision not reached within wait),
// canceled (the client left before an answer).
var QueryOutcomes = []string{"ok", "bad_request", "not_found", "too_large", "refused", "error", "unavailable", "timeout", "canceled"}

// queryOutcome is the outcome label of an answer's status (0: none sent).
func queryOutcome(code int) string {
	switch code {
	case 0:
		return "canceled"
	case http.StatusOK:
		return "ok"
	case http.StatusBadRequest:
		return "bad_request"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusRequestEntityTooLarge:
		return "too_large"
	case http.StatusUnprocessableEntity:
		return "refused"
	case http.StatusServiceUnavailable:
		return "unavailable"
	case http.StatusGatewayTimeout:
		return "timeout"
	}
	return "error"
}

// observeQuery records one answered query of fold (query: its label).
func (m *Metrics) observeQuery(fold, query string, code int, took time.Duration) {
	outcome := queryOutcome(code)
	m.queries.WithLabelValues(fold, query, outcome).Inc()
	switch outcome {
	case "ok", "refused", "error":
		m.queryLatency.WithLabelValues(fold, query).Observe(took.Seconds())
	}
}

// Track adds the per-fold metrics of folds, every counter and histogram
// created at 0 (see Metrics). Call it once.
func (m *Metrics) Track(folds []Fold) {
	for _, f := range folds {
		m.latency.WithLabelValues(f.Name()) // export an empty histogram from the start
		m.declareQueries(f.Name(), f.Status().Plugin.Queries)
	}
	m.folds.mu.Lock()
	m.folds.folds = append(m.folds.folds, folds...)
	m.folds.mu.Unlock()
}

// declareQueries creates at 0 the query series of fold: each query its
// plugin declares, and UnknownQueryLabel, with every outcome; the duration
// histogram of each declared query (an undeclared name never runs the
// plugin).
func (m *Metrics) declareQueries(fold string, qs []PluginQuery) {
	for _, o := range QueryOutcomes {
		m.queries.WithLabelValues(fold, UnknownQueryLabel, o)
	}
	for _, q := range qs {
		for _, o := range QueryOutcomes {
			m.queries.WithLabelValues(fold, q.Name, o)
		}
		m.queryLatency.WithLabelValues(fold, q.Name)
	}
}

// ObserveBatch records one committed batch's apply+commit time.
func (m *Metrics) ObserveBatch(fold string, took time.Duration) {
	m.latency.WithLabelValues(fold).Observe(took.Seconds())
}

// Handler serves the registry in the Prometheus exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
}

// Registry exposes the registry, for tests and extra collectors.
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

type metricDef struct {
	desc *prometheus.Desc
	kind prometheus.ValueType
	val  func(Status) float64
}

func def(name, help string, kind prometheus.ValueType, val func(Status) float64) metricDef {
	return metricDef{prometheus.NewDesc(name, help, []string{"fold"}, nil), kind, val}
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

var foldMetrics = []metricDef{
	def("foldhost_fold_cursor_revision", "Applied cursor: every revision <= it is in the fold.",
		prometheus.GaugeValue, func(s Status) float64 { return float64(s.Cursor) }),
	def("foldhost_fold_stream_last_revision", "Last revision of the bucket's stream, as last polled.",
		prometheus.GaugeValue, func(s Status) float64 { return float64(s.StreamLastSeq) }),
	def("foldhost_fold_lag_revisions", "stream_last_revision - cursor_revision (an upper bound for prefix-scoped folds).",
		prometheus.GaugeValue, func(s Status) float64 { return float64(s.Lag) }),
	def("foldhost_fold_ready", "1 once the fold caught up with the stream head it saw at start.",
		prometheus.GaugeValue, func(s Status) float64 { return b2f(s.Ready) }),
	def("foldhost_fold_failed", "1 while the fold's watch is stopped on an error (it retries on a plugin reload or a resume).",
		prometheus.GaugeValue, func(s Status) float64 { return b2f(s.State == StateFailed) }),
	def("foldhost_fold_nats_connected", "1 while the host's NATS connection is up (0 while it reconnects).",
		prometheus.GaugeValue, func(s Status) float64 { return b2f(s.NATS.State == natskv.ConnConnected) }),
	def("foldhost_fold_nats_disconnects_total", "Times the host's NATS connection dropped since start.",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.NATS.Disconnects) }),
	def("foldhost_fold_updates_total", "Updates delivered by NATS and committed (rejected ones included).",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.Counters.DeliveredSinceStart) }),
	def("foldhost_fold_rejected_updates_total", "Updates the plugin rejected.",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.Counters.Rejected) }),
	def("foldhost_fold_batches_total", "Committed batches.",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.Counters.Batches) }),
	def("foldhost_fold_plugin_errors_total", "Plugin calls that failed (a trap, a timeout, a bound crossed): with on_plugin_error = \"stop\" the first stops the fold; with \"skip\" the fold splits the batch and goes on, each failed call counted (several per update skipped).",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.Counters.PluginErrors) }),
	def("foldhost_fold_dead_lettered_total", "Updates the plugin failed on alone that the fold skipped (on_plugin_error = \"skip\"): committed raw only.",
		prometheus.CounterValue, func(s Status) float64 {
			if s.DeadLetters == nil {
				return 0
			}
			return float64(s.DeadLetters.SkippedSinceStart)
		}),
	def("foldhost_fold_dead_letters", "Dead letters the fold's store holds (bounded by deadletter_max and deadletter_max_age).",
		prometheus.GaugeValue, func(s Status) float64 {
			if s.DeadLetters == nil {
				return 0
			}
			return float64(s.DeadLetters.Stored)
		}),
	def("foldhost_fold_effects_outbox", "Plugin effects committed and not yet published.",
		prometheus.GaugeValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return float64(s.Effects.Outbox)
		}),
	def("foldhost_fold_effects_outbox_wait_seconds", "How long the outbox's first effect has waited to be published (0: empty).",
		prometheus.GaugeValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return s.Effects.OutboxWaitSeconds
		}),
	def("foldhost_fold_effects_published_total", "Plugin effects this node published (its batches the effects stream acknowledged). Summed over a fold's replicas: every effect once.",
		prometheus.CounterValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return float64(s.Effects.PublishedByThisNode)
		}),
	def("foldhost_fold_effects_found_in_stream_total", "Plugin effects deleted from the outbox unpublished here because the fence showed them in the stream already (another replica published them, or this node's acknowledgement was lost).",
		prometheus.CounterValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return float64(s.Effects.FoundInStream)
		}),
	def("foldhost_fold_effects_refused_stale_total", "In a fleet: this node's effects batches the stream refused because a newer owner of the fold had marked its claim (this node was paused or cut off past its lease).",
		prometheus.CounterValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return float64(s.Effects.RefusedStale)
		}),
	def("foldhost_fold_effects_held", "1 while the fold's effects publisher waits for the fence to pass the point the fold joined at.",
		prometheus.GaugeValue, func(s Status) float64 {
			if s.Effects == nil || s.Effects.Held == "" {
				return 0
			}
			return 1
		}),
	def("foldhost_fold_effects_dead_lettered_total", "Plugin effects the effects stream refused for good, moved to the dead letters since start.",
		prometheus.CounterValue, func(s Status) float64 {
			if s.Effects == nil {
				return 0
			}
			return float64(s.Effects.DeadLettered)
		}),
	def("foldhost_fold_commit_failures_total", "Store commits that failed (and were retried).",
		prometheus.CounterValue, func(s Status) float64 { return float64(s.Counters.CommitFailures) }),
}

var (
	exportRoundsDesc = prometheus.NewDesc("foldhost_fold_export_rounds_total",
		"Export rounds this process ran, by outcome (published, superseded, skipped, failed, fenced: a newer owner of the fold in a fleet holds the pointer).", []string{"fold", "outcome"}, nil)
	repairsDesc = prometheus.NewDesc("foldhost_fold_repairs_total",
		"Cursor-expiry repairs this process ran, by plan (key-listing-diff, relist-only, refuse, restore) and outcome (done, failed, refused, cancelled; skipped: a restore at a first start found no artifact).", []string{"fold", "plan", "outcome"}, nil)
	stateDesc = prometheus.NewDesc("foldhost_fold_state",
		"1 for the state the fold is in (starting, waiting, hydrating, following, repairing, rebuilding, paused, draining, failed, stopped, elsewhere), 0 for the others.", []string{"fold", "state"}, nil)
	fleetRoleDesc = prometheus.NewDesc("foldhost_fold_fleet_role",
		"In a fleet: 1 for the fold's role on this node (owner: it folds the fold, publishes its effects and exports it; standby: a warm read-only copy; none: other nodes fold it), 0 for the others.", []string{"fold", "role"}, nil)
	fleetEpochDesc = prometheus.NewDesc("foldhost_fold_fleet_epoch",
		"In a fleet, while this node owns the fold: its epoch (the revision of its claim; a takeover raises it).", []string{"fold"}, nil)
	reloadsDesc = prometheus.NewDesc("foldhost_fold_plugin_reloads_total",
		"Plugin reload verdicts since start, by outcome (accepted, refused).", []string{"fold", "outcome"}, nil)
	repairingDesc = prometheus.NewDesc("foldhost_fold_repairing",
		"1 while a cursor-expiry repair runs.", []string{"fold"}, nil)
	lastPublishedDesc = prometheus.NewDesc("foldhost_fold_export_last_published_timestamp_seconds",
		"When a round of this process last published an artifact (Unix time; absent before the first).", []string{"fold"}, nil)
	exportCursorDesc = prometheus.NewDesc("foldhost_fold_export_cursor_revision",
		"The highest cursor this process' rounds published or found superseded by a newer artifact (absent before the first): an interval round is not attempted while cursor_revision is at or below it.", []string{"fold"}, nil)
	upToDateDesc = prometheus.NewDesc("foldhost_fold_export_up_to_date_timestamp_seconds",
		"When this process last knew an artifact to hold everything the fold had folded: a round that published or was superseded, or an interval tick that found the cursor at or below export_cursor_revision (Unix time; absent before the first). Its age is how long the fold has held revisions no artifact has, to about an export interval.", []string{"fold"}, nil)
	exportIntervalDesc = prometheus.NewDesc("foldhost_fold_export_interval_seconds",
		"The configured time between export rounds (0: on demand only; absent when exporting is not configured).", []string{"fold"}, nil)
	lastCommitDesc = prometheus.NewDesc("foldhost_fold_last_commit_timestamp_seconds",
		"When this process last committed a batch of updates (Unix time; absent before the first).", []string{"fold"}, nil)
	lagSecondsDesc = prometheus.NewDesc("foldhost_fold_lag_seconds",
		"How long the fold has been behind the stream head, to about a head poll (0: at the head; absent when not seen at the head since the start).", []string{"fold"}, nil)
)

// RepairSeries are the plans and outcomes a repair can end with
// (host/repair's Runner): a listing (relist-only, key-listing-diff) done,
// failed, refused or cancelled; the refuse plan refused; a restore also
// skipped (a first start that found no artifact). Each is exported at 0
// from a fold's start.
var RepairSeries = []RepairCount{
	{Plan: "relist-only", Outcome: "done"}, {Plan: "relist-only", Outcome: "failed"},
	{Plan: "relist-only", Outcome: "refused"}, {Plan: "relist-only", Outcome: "cancelled"},
	{Plan: "key-listing-diff", Outcome: "done"}, {Plan: "key-listing-diff", Outcome: "failed"},
	{Plan: "key-listing-diff", Outcome: "refused"}, {Plan: "key-listing-diff", Outcome: "cancelled"},
	{Plan: "refuse", Outcome: "refused"},
	{Plan: "restore", Outcome: "done"}, {Plan: "restore", Outcome: "failed"},
	{Plan: "restore", Outcome: "refused"}, {Plan: "restore", Outcome: "cancelled"},
	{Plan: "restore", Outcome: "skipped"},
}

// foldCollector reads every fold's Status once per scrape, and collects
// the query metrics.
type foldCollector struct {
	m     *Metrics
	mu    sync.Mutex
	folds []Fold
}

func (c *foldCollector) Describe(ch chan<- *prometheus.Desc) {
	c.m.queries.Describe(ch)
	c.m.queryLatency.Describe(ch)
	for _, d := range foldMetrics {
		ch <- d.desc
	}
	ch <- exportRoundsDesc
	ch <- lastPublishedDesc
	ch <- exportCursorDesc
	ch <- upToDateDesc
	ch <- exportIntervalDesc
	ch <- lastCommitDesc
	ch <- lagSecondsDesc
	ch <- repairsDesc
	ch <- repairingDesc
	ch <- stateDesc
	ch <- reloadsDesc
	ch <- fleetRoleDesc
	ch <- fleetEpochDesc
}

// FleetRoles are the roles of a fold on a node of a fleet.
var FleetRoles = []string{"owner", "standby", "none"}

// States lists every State, in the order of a fold's life.
var States = []State{StateStarting, StateWaiting, StateHydrating, StateFollowing, StateRepairing,
	StateRebuilding, StatePaused, StateDraining, StateFailed, StateStopped, StateElsewhere}

func (c *foldCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	folds := c.folds
	c.mu.Unlock()
	defer c.m.queryLatency.Collect(ch)
	defer c.m.queries.Collect(ch) // after the loop created the declared queries' series
	for _, f := range folds {
		st := f.Status()
		c.m.declareQueries(f.Name(), st.Plugin.Queries)
		for _, d := range foldMetrics {
			ch <- prometheus.MustNewConstMetric(d.desc, d.kind, d.val(st), f.Name())
		}
		if at := st.LastCommitAt; at != nil {
			ch <- prometheus.MustNewConstMetric(lastCommitDesc, prometheus.GaugeValue, unixSeconds(*at), f.Name())
		}
		if lag := st.LagSeconds; lag != nil {
			ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, *lag, f.Name())
		}
		ch <- prometheus.MustNewConstMetric(repairingDesc, prometheus.GaugeValue, b2f(st.Repairs.Running != nil), f.Name())
		for _, s := range States {
			ch <- prometheus.MustNewConstMetric(stateDesc, prometheus.GaugeValue, b2f(st.State == s), f.Name(), string(s))
		}
		if fl := st.Fleet; fl != nil {
			for _, r := range FleetRoles {
				ch <- prometheus.MustNewConstMetric(fleetRoleDesc, prometheus.GaugeValue, b2f(fl.Role == r), f.Name(), r)
			}
			if fl.Role == "owner" {
				ch <- prometheus.MustNewConstMetric(fleetEpochDesc, prometheus.GaugeValue, float64(fl.Epoch), f.Name())
			}
		}
		// A fold with a plugin (one waiting for its module too: its first
		// load is no reload); a raw-only fold has none to reload.
		if st.Plugin.SHA256 != "" || st.Plugin.Source != "" {
			ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(st.Plugin.Reloads.Accepted), f.Name(), "accepted")
			ch <- prometheus.MustNewConstMetric(reloadsDesc, prometheus.CounterValue, float64(st.Plugin.Reloads.Refused), f.Name(), "refused")
		}
		repairs := map[RepairCount]uint64{}
		for _, s := range RepairSeries {
			repairs[s] = 0
		}
		for _, c := range st.Repairs.Counts {
			repairs[RepairCount{Plan: c.Plan, Outcome: c.Outcome}] += c.N
		}
		for s, n := range repairs {
			ch <- prometheus.MustNewConstMetric(repairsDesc, prometheus.CounterValue, float64(n), f.Name(), s.Plan, s.Outcome)
		}
		if e := st.Export; e != nil {
			for _, o := range []struct {
				name string
				n    uint64
			}{{"published", e.Rounds.Published}, {"superseded", e.Rounds.Superseded}, {"skipped", e.Rounds.Skipped}, {"failed", e.Rounds.Failed}, {"fenced", e.Rounds.Fenced}} {
				ch <- prometheus.MustNewConstMetric(exportRoundsDesc, prometheus.CounterValue, float64(o.n), f.Name(), o.name)
			}
			if d, err := time.ParseDuration(e.Interval); err == nil {
				ch <- prometheus.MustNewConstMetric(exportIntervalDesc, prometheus.GaugeValue, d.Seconds(), f.Name())
			}
			if e.LastPublishedAt != nil {
				ch <- prometheus.MustNewConstMetric(lastPublishedDesc, prometheus.GaugeValue, float64(e.LastPublishedAt.Unix()), f.Name())
			}
			if e.ExportedCursor != nil {
				ch <- prometheus.MustNewConstMetric(exportCursorDesc, prometheus.GaugeValue, float64(*e.ExportedCursor), f.Name())
			}
			if e.UpToDateAt != nil {
				ch <- prometheus.MustNewConstMetric(upToDateDesc, prometheus.GaugeValue, float64(e.UpToDateAt.Unix()), f.Name())
			}
		}
	}
}

// unixSeconds is t as fractional Unix seconds (a commit's age can be well
// under a second).
func unixSeconds(t time.Time) float64 { return float64(t.Unix()) + float64(t.Nanosecond())/1e9 }
