package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/plugins/example-router/embedded"
)

// The fleet (--fleet, instead of every other section): nodes of one
// fleet run in this process, each with its own stores, on the bench's
// NATS server, and fold its bucket through the example router. Each
// figure stands beside a baseline measured in the same run: the fleet's
// folding rate beside one node's (no fleet) folding the same folds, a
// read forwarded to a fold's owner beside the same read on the owner, and
// a takeover beside node_ttl. On one machine the nodes share its cores:
// the fleet's rate says what coordinating costs, not what more machines
// would add. The goals (Fleet.Goals) are judged on these figures.

// The fleet's size, and the folds it places over its nodes (each folds
// the whole bucket).
const (
	FleetNodes = 3
	FleetFolds = 6
	// DefaultFleetReads is FleetConfig.Reads' default: pairs of reads,
	// one on a fold's owner and one through a node that forwards it.
	DefaultFleetReads = 2000
	// DefaultFleetKills is how many times the takeover's fleet loses a
	// fold's owner at each node_ttl (--fleet-kills).
	DefaultFleetKills = 20
)

// The fleet's goals (Fleet.Goals), each judged on a figure of the run.
const (
	// GoalVsOneNode: the fleet with no standby (the same folds as one
	// node, so the same work) folds at least this fraction of one node's
	// rate.
	GoalVsOneNode = 0.9
	// GoalTakeoverP99: a takeover's p99 at the fleet's default node_ttl
	// and heartbeat.
	GoalTakeoverP99 = 5 * time.Second
	// GoalForwardedP99: a forwarded read's p99 over a local read's.
	GoalForwardedP99 = 2.0
)

// DefaultFleetTTLs are the node_ttl/heartbeat pairs the takeover is
// measured at (--fleet-ttl): the fleet's defaults, and a short one.
var DefaultFleetTTLs = fleet.DefaultNodeTTL.String() + "/" + fleet.DefaultHeartbeat.String() + ",1s/100ms"

// The names of the fleet's folding runs.
const (
	FleetOneNode   = "one node, no fleet"
	FleetStandbys0 = "fleet of 3, standbys 0"
	FleetStandbys1 = "fleet of 3, standbys 1"
)

// FleetConfig is what --fleet measures.
type FleetConfig struct {
	// Kills: the takeovers measured at each of TTLs (0: none).
	Kills int
	TTLs  []FleetTTL
	// Reads: pairs of reads (on the owner, forwarded); 0:
	// DefaultFleetReads.
	Reads int
}

// FleetTTL is a fleet's liveness setting: a node is taken for dead once
// its record stayed unchanged for NodeTTL; it rewrites it every
// Heartbeat.
type FleetTTL struct{ NodeTTL, Heartbeat time.Duration }

// NewFleetConfig is the config of --fleet-kills kills and --fleet-ttl
// ttls ("NODE_TTL/HEARTBEAT,…", e.g. DefaultFleetTTLs).
func NewFleetConfig(kills int, ttls string) (*FleetConfig, error) {
	if kills < 0 || kills > 1000 {
		return nil, fmt.Errorf("--fleet-kills must be between 0 and 1000, got %d", kills)
	}
	c := &FleetConfig{Kills: kills}
	for _, p := range strings.Split(ttls, ",") {
		a, h, ok := strings.Cut(strings.TrimSpace(p), "/")
		ttl, err1 := time.ParseDuration(a)
		hb, err2 := time.ParseDuration(h)
		if !ok || err1 != nil || err2 != nil || hb <= 0 || ttl <= 2*hb || ttl > 10*time.Minute {
			return nil, fmt.Errorf("--fleet-ttl: %q is not NODE_TTL/HEARTBEAT with node_ttl more than twice the heartbeat (e.g. 3s/1s)", p)
		}
		c.TTLs = append(c.TTLs, FleetTTL{NodeTTL: ttl, Heartbeat: hb})
	}
	return c, nil
}

// Fleet is the fleet's figures (--fleet).
type Fleet struct {
	Nodes  int    `json:"nodes"`
	Folds  int    `json:"folds"`
	Module string `json:"module"`
	// Updates is what a folding run folds: Folds times the bucket's
	// updates (every fold folds the whole bucket).
	Updates    uint64            `json:"updates"`
	Throughput []FleetThroughput `json:"throughput"`
	Reads      *FleetReads       `json:"reads,omitempty"`
	WarmUp     *WarmUp           `json:"warm_up,omitempty"`
	Takeovers  []Takeover        `json:"takeovers,omitempty"`
	// Goals are the goals whose figure the run measured.
	Goals []FleetGoal `json:"goals,omitempty"`
}

// FleetGoal is a goal, the figure it is judged on, and whether the run
// met it. A goal missed is reported, not a failed check: the figures move
// with the machine's load, and the fleet's nodes share its cores.
type FleetGoal struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
	// Op is ">=" or "<=": Value against Bound, in Unit ("x": a ratio,
	// "s": seconds).
	Op    string  `json:"op"`
	Bound float64 `json:"bound"`
	Unit  string  `json:"unit"`
	Met   bool    `json:"met"`
}

// goal is the FleetGoal of value against bound.
func goal(name string, value float64, op string, bound float64, unit string) FleetGoal {
	met := value >= bound
	if op == "<=" {
		met = value <= bound
	}
	return FleetGoal{Name: name, Value: value, Op: op, Bound: bound, Unit: unit, Met: met}
}

// judge sets fr.Goals from the figures measured.
func (fr *Fleet) judge() {
	fr.Goals = nil
	for _, t := range fr.Throughput {
		if t.Name == FleetStandbys0 {
			fr.Goals = append(fr.Goals, goal(t.Name+": rate / one node's", t.VsOneNode, ">=", GoalVsOneNode, "x"))
		}
	}
	for _, t := range fr.Takeovers {
		if t.NodeTTLSeconds == fleet.DefaultNodeTTL.Seconds() && t.HeartbeatSeconds == fleet.DefaultHeartbeat.Seconds() {
			fr.Goals = append(fr.Goals, goal(fmt.Sprintf("takeover p99 at node_ttl %s, heartbeat %s (%d kills)",
				fmtSeconds(t.NodeTTLSeconds), fmtSeconds(t.HeartbeatSeconds), t.Kills), t.P99Seconds, "<=", GoalTakeoverP99.Seconds(), "s"))
		}
	}
	if rd := fr.Reads; rd != nil {
		fr.Goals = append(fr.Goals, goal("read p99: forwarded / local", rd.P99Ratio, "<=", GoalForwardedP99, "x"))
	}
	if w := fr.WarmUp; w != nil {
		fr.Goals = append(fr.Goals, goal("a joining node's share: from artifacts / hydrating", w.Ratio, "<=", GoalWarmUp, "x"))
	}
}

// FleetThroughput is one folding run's figures: FleetOneNode (one host,
// no fleet: the baseline), FleetStandbys0 and FleetStandbys1 (a fleet of
// FleetNodes; with a standby each fold is folded twice, by its owner and
// its warm copy). Each round starts every node (not timed), then times
// from their Run to every fold's owner at the bucket's head (Seconds),
// and to every copy there (CopiesSeconds); then, not timed, a fleet must
// settle with each fold owned by its placement's owner alone, or the run
// fails.
type FleetThroughput struct {
	Name     string `json:"name"`
	Nodes    int    `json:"nodes"`
	Standbys int    `json:"standbys"`
	// Copies are the folds' copies the run folds: Folds × (1 + Standbys).
	Copies        int       `json:"copies"`
	Seconds       []float64 `json:"seconds"`
	CopiesSeconds []float64 `json:"copies_seconds"`
	// Rate is Updates over the median of Seconds; VsOneNode the paired
	// rounds' median of one node's time over this run's (its rate's ratio:
	// 1 is as fast as one node).
	Rate      float64 `json:"rate"`
	VsOneNode float64 `json:"vs_one_node"`
	// Owned: the folds each node owned (the last round).
	Owned map[string]int `json:"owned"`
}

// FleetReads is a read's latency in a fleet: a fold (one owner, one
// standby, FleetNodes nodes) caught up, no writes coming, GET
// /v1/folds/f0/raw/<key> over the HTTP API on loopback, alternately on
// the fold's owner (answered there) and on the node that does not fold it
// (forwarded to the owner over NATS), p50 and p99 of each and their
// ratios (forwarded over local). Both are answered by the owner, with the
// same bytes, or the run fails.
type FleetReads struct {
	Fold  string `json:"fold"`
	Reads int    `json:"reads"` // of each
	// Found: the reads answered 200 (the rest 404: a host the workload
	// deleted), the same on both sides.
	Found               int     `json:"found"`
	LocalP50Seconds     float64 `json:"local_p50_seconds"`
	LocalP99Seconds     float64 `json:"local_p99_seconds"`
	ForwardedP50Seconds float64 `json:"forwarded_p50_seconds"`
	ForwardedP99Seconds float64 `json:"forwarded_p99_seconds"`
	P50Ratio            float64 `json:"p50_ratio"`
	P99Ratio            float64 `json:"p99_ratio"`
}

// Takeover is the time a fleet takes to move a fold off an owner that
// was killed: FleetNodes nodes, one fold with one standby; its owner's
// NATS connection is cut for good (a TCP proxy between it and the server
// closed, as a SIGKILL closes a process's sockets: the server drops its
// subscriptions, its record stops beating, it never reconnects), and the
// time runs from the cut until another node owns the fold under a newer
// epoch and follows (its copy was warm: it folded all along). A new node
// (its own name and store) then takes the stopped one's place, and the
// fleet settles before the next kill: a node restarted under its name
// would first wait a node_ttl to take the name over.
type Takeover struct {
	NodeTTLSeconds   float64   `json:"node_ttl_seconds"`
	HeartbeatSeconds float64   `json:"heartbeat_seconds"`
	Kills            int       `json:"kills"`
	Seconds          []float64 `json:"seconds"`
	P50Seconds       float64   `json:"p50_seconds"`
	P99Seconds       float64   `json:"p99_seconds"`
	MaxSeconds       float64   `json:"max_seconds"`
	// P50VsNodeTTL is P50Seconds over node_ttl. A node is taken for dead
	// once its record stayed unchanged that long, on the others' clocks,
	// checked at their heartbeats: its last beat came up to a heartbeat
	// before the kill, so a takeover takes from node_ttl less a heartbeat
	// to node_ttl plus one, and the claim's round trip.
	P50VsNodeTTL float64 `json:"p50_vs_node_ttl"`
}

// fleetRun is one of the folding runs: nodes hosts (1: no fleet), each
// fold with standbys standbys.
type fleetRun struct {
	name            string
	nodes, standbys int
}

var fleetRuns = []fleetRun{{FleetOneNode, 1, 0}, {FleetStandbys0, FleetNodes, 0}, {FleetStandbys1, FleetNodes, 1}}

// runFleet measures the fleet on a bucket of the last shape: the folding
// runs' rounds, the reads, a node joining (warm-up), then the takeovers at
// each node_ttl.
func (b *bench) runFleet(ctx context.Context, res *Result, pluginDir string, rounds int) error {
	_, done, err := b.makeBucket(ctx, b.shapes[len(b.shapes)-1])
	if err != nil {
		return err
	}
	defer done()
	plugin, module := b.fleetPlugin(pluginDir)
	fr := &Fleet{Nodes: FleetNodes, Folds: FleetFolds, Module: module, Updates: FleetFolds * b.head}
	res.Fleet = fr
	defer fr.judge() // what was measured, even when a later phase failed
	if b.cpuProfile != "" {
		f, err := os.Create(b.cpuProfile + ".fleet")
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	if err := b.fleetThroughput(ctx, fr, plugin, rounds); err != nil {
		return fmt.Errorf("bench: fleet, folding: %w", err)
	}
	n := b.fleet.Reads
	if n <= 0 {
		n = DefaultFleetReads
	}
	b.prog.Status("fleet: reads on a fold's owner and forwarded to it")
	pprof.Do(ctx, pprof.Labels("variant", "fleet reads"), func(ctx context.Context) { fr.Reads, err = b.fleetReads(ctx, plugin, n) })
	if err != nil {
		return fmt.Errorf("bench: fleet, reads: %w", err)
	}
	if fr.WarmUp, err = b.warmUp(ctx, plugin); err != nil {
		return fmt.Errorf("bench: fleet, warm-up: %w", err)
	}
	for _, ttl := range b.fleet.TTLs {
		if b.fleet.Kills == 0 {
			break
		}
		t, err := b.takeovers(ctx, plugin, ttl, b.fleet.Kills)
		if err != nil {
			return fmt.Errorf("bench: fleet, takeover at node_ttl %v: %w", ttl.NodeTTL, err)
		}
		fr.Takeovers = append(fr.Takeovers, *t)
	}
	return nil
}

// fleetPlugin is the router's C build (from pluginDir, else the one the
// binary carries), or, with none, no plugin (a raw-only fold); and its
// name for the figures.
func (b *bench) fleetPlugin(pluginDir string) (string, string) {
	p := filepath.Join(pluginDir, "router-c.wasm")
	if _, err := os.Stat(p); err == nil {
		return p, filepath.Base(p)
	}
	if pluginDir == DefaultPlugins {
		if p, err := embedded.WriteFile(b.dir, "c"); err == nil {
			return p, filepath.Base(p)
		}
	}
	fmt.Fprintf(b.warn, "foldhost: bench: no router-c.wasm in %s: the fleet folds raw-only\n", pluginDir)
	return "", "raw-only"
}

// fleetThroughput runs the folding runs' rounds, alternating.
func (b *bench) fleetThroughput(ctx context.Context, fr *Fleet, plugin string, rounds int) error {
	secs, copies := make([][]float64, len(fleetRuns)), make([][]float64, len(fleetRuns))
	owned := make([]map[string]int, len(fleetRuns))
	total := int64(rounds * len(fleetRuns))
	for r := range rounds {
		for i, run := range fleetRuns {
			b.round.done, b.round.total = int64(r*len(fleetRuns)+i), total
			b.round.what = fmt.Sprintf("fleet, round %d/%d: %s", r+1, rounds, run.name)
			b.prog.Update(b.round.done, total, b.round.what)
			var m fleetMeasure
			var err error
			pprof.Do(ctx, pprof.Labels("variant", run.name), func(ctx context.Context) { m, err = b.fleetFold(ctx, plugin, run) })
			if err != nil {
				return fmt.Errorf("%s: %w", run.name, err)
			}
			secs[i], copies[i], owned[i] = append(secs[i], m.owners.Seconds()), append(copies[i], m.copies.Seconds()), m.owned
		}
	}
	b.round.what = ""
	b.prog.Update(total, total, "fleet rounds done")
	b.prog.End()
	for i, run := range fleetRuns {
		fr.Throughput = append(fr.Throughput, FleetThroughput{Name: run.name, Nodes: run.nodes, Standbys: run.standbys,
			Copies: FleetFolds * (1 + run.standbys), Seconds: secs[i], CopiesSeconds: copies[i],
			Rate: float64(fr.Updates) / Median(secs[i]), VsOneNode: pairedRatio(secs[0], secs[i]), Owned: owned[i]})
	}
	return nil
}

// fleetMeasure is one folding run's times, from the nodes' Run.
type fleetMeasure struct {
	owners, copies time.Duration
	owned          map[string]int
}

// fleetFold starts run's nodes on fresh stores (not timed), runs them,
// and times them to the bucket's head.
func (b *bench) fleetFold(ctx context.Context, plugin string, run fleetRun) (m fleetMeasure, err error) {
	fl := b.newFleet(fleetSpec{nodes: run.nodes, folds: FleetFolds, plugin: plugin, standbys: run.standbys,
		ttl: FleetTTL{NodeTTL: fleet.DefaultNodeTTL, Heartbeat: fleet.DefaultHeartbeat}})
	defer func() { err = errors.Join(err, fl.close()) }()
	if err := fl.startAll(ctx); err != nil {
		return m, err
	}
	t0 := time.Now()
	fl.runAll(ctx)
	if m.owners, m.copies, err = fl.waitHead(ctx, t0, b.head); err != nil {
		return m, err
	}
	m.owned = map[string]int{}
	if fl.name == "" {
		m.owned[fl.nodes[0].name] = len(fl.folds())
		return m, nil
	}
	// Not timed: the fleet is as placed, one owner a fold (a second one
	// would be a split brain the rate must not hide).
	owners, err := fl.waitPlaced(ctx, b.head)
	for _, n := range owners {
		m.owned[n.name]++
	}
	return m, err
}

// writeTable writes the fleet's figures as `foldhost bench --fleet`
// prints them.
func (fr *Fleet) writeTable(w io.Writer) error {
	med := 0
	if len(fr.Throughput) > 0 {
		med = len(fr.Throughput[0].Seconds)
	}
	fmt.Fprintf(w, "\nfleet: %d nodes in this process on one NATS server, %d folds of %s, each folding the whole bucket (%d updates a run); "+
		"timed from the nodes' Run to every fold's owner at the head (median of %d rounds; one machine's cores shared by every node)\n\n",
		fr.Nodes, fr.Folds, fr.Module, fr.Updates, med)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tNODES\tSTANDBYS\tCOPIES\tUPDATES/S\tVS ONE NODE\tEVERY COPY AT THE HEAD\tOWNED")
	for _, t := range fr.Throughput {
		var owned []string
		for _, n := range slices.Sorted(maps.Keys(t.Owned)) {
			owned = append(owned, fmt.Sprintf("%s=%d", n, t.Owned[n]))
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%s\t%.2f×\t%s\t%s\n", t.Name, t.Nodes, t.Standbys, t.Copies, humanRate(t.Rate), t.VsOneNode,
			fmtSeconds(Median(t.CopiesSeconds)), strings.Join(owned, " "))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rd := fr.Reads; rd != nil {
		fmt.Fprintf(w, "\nfleet reads (fold %s: an owner and a standby of %d nodes, caught up; GET raw/<key> over HTTP on loopback, %d of each, %d found): "+
			"on the owner p50 %s p99 %s; through the node that does not fold it (forwarded to the owner over NATS) p50 %s p99 %s; forwarded / local p50 %.2f×, p99 %.2f×\n",
			rd.Fold, fr.Nodes, rd.Reads, rd.Found, fmtLatency(rd.LocalP50Seconds), fmtLatency(rd.LocalP99Seconds),
			fmtLatency(rd.ForwardedP50Seconds), fmtLatency(rd.ForwardedP99Seconds), rd.P50Ratio, rd.P99Ratio)
	}
	if wu := fr.WarmUp; wu != nil {
		fmt.Fprintf(w, "fleet warm-up (a node joining %d nodes that fold the %d folds, to owning its share of %d, caught up): from the folds' artifacts (a local directory; %d installed) %s; hydrating from NATS %s; from artifacts / hydrating %.2f×\n",
			WarmUpNodes, fr.Folds, wu.Share, wu.ArtifactFolds, fmtSeconds(wu.FromArtifactsSeconds), fmtSeconds(wu.HydrationSeconds), wu.Ratio)
	}
	for _, t := range fr.Takeovers {
		fmt.Fprintf(w, "fleet takeover at node_ttl %s, heartbeat %s (the owner killed, %d times: its NATS connection cut for good; to another node owning and following): p50 %s p99 %s max %s; p50 / node_ttl %.2f×\n",
			fmtSeconds(t.NodeTTLSeconds), fmtSeconds(t.HeartbeatSeconds), t.Kills, fmtSeconds(t.P50Seconds), fmtSeconds(t.P99Seconds), fmtSeconds(t.MaxSeconds), t.P50VsNodeTTL)
	}
	if len(fr.Goals) == 0 {
		return nil
	}
	fmt.Fprintf(w, "\nfleet goals (reported, not failed: the figures move with the machine's load)\n\n")
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "GOAL\tMEASURED\tWANTED\tMET")
	for _, g := range fr.Goals {
		val, bound := fmt.Sprintf("%.2f×", g.Value), fmt.Sprintf("%.2f×", g.Bound)
		if g.Unit == "s" {
			val, bound = fmtSeconds(g.Value), fmtSeconds(g.Bound)
		}
		met := "no"
		if g.Met {
			met = "yes"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s %s\t%s\n", g.Name, val, strings.NewReplacer(">=", "≥", "<=", "≤").Replace(g.Op), bound, met)
	}
	return tw.Flush()
}
