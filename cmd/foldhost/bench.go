package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/bench"
	"github.com/foldhost/foldhost/internal/progress"
)

func cmdBench(c *cli, args []string) error {
	fs := c.flagSet("bench", "bench [--keys N] [--rounds N] [--shape S] [--nats URL] [--plugins DIR] [--fleet] [--json]", about("bench"))
	keys := fs.Int("keys", 100_000, "route keys in the bucket")
	rounds := fs.Int("rounds", 3, "rounds of every variant, alternating")
	delta := fs.Int("delta", 1000, "updates written before the restart's resume")
	natsURL := fs.String("nats", "", "a NATS server `url` instead of the embedded one")
	pluginDir := fs.String("plugins", bench.DefaultPlugins, "`dir`ectory of the example-router builds (router-<lang>.wasm); when the default holds none, the C, Rust and AssemblyScript builds the binary carries")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	seed := fs.Uint64("seed", 1, "the workload's seed")
	only := fs.String("only", "", "measure only the variants whose name matches this `regexp` (the WatchAll read and the raw-only fold always run: the ratios need them)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of each shape's rounds to `file`.<shape> (with --fleet, to file.fleet)")
	probes := fs.Int("probes", 200, "probes of each steady-state latency (write to fold, read your writes, effects)")
	shape := fs.String("shape", "both", "the workload's `shape`: ordered (ascending keys, clustered upstreams), random (random key order and upstreams) or both")
	fleetOn := fs.Bool("fleet", false, "measure a fleet of 3 nodes instead: its folding rate against one node's, a forwarded read against a local one, a takeover against node_ttl")
	kills := fs.Int("fleet-kills", bench.DefaultFleetKills, "with --fleet, the fold owner's kills measured at each --fleet-ttl (0: none)")
	ttls := fs.String("fleet-ttl", bench.DefaultFleetTTLs, "with --fleet, the `node_ttl/heartbeat` pairs the takeover is measured at, comma-separated")
	pos, err := parse(fs, args)
	if err != nil {
		return err
	}
	switch {
	case len(pos) > 0:
		return usagef("unexpected argument %q", pos[0])
	case *keys < 1000 || *keys > 50_000_000:
		return usagef("--keys must be between 1000 and 50000000, got %d", *keys)
	case *rounds < 1 || *rounds > 100:
		return usagef("--rounds must be between 1 and 100, got %d", *rounds)
	case *delta < 1 || *delta > *keys:
		return usagef("--delta must be between 1 and --keys, got %d", *delta)
	}
	var fleetCfg *bench.FleetConfig
	if *fleetOn {
		if fleetCfg, err = bench.NewFleetConfig(*kills, *ttls); err != nil {
			return usagef("%v", err)
		}
	} else {
		var set []string
		fs.Visit(func(f *flag.Flag) {
			if strings.HasPrefix(f.Name, "fleet-") {
				set = append(set, "--"+f.Name)
			}
		})
		if len(set) > 0 {
			return usagef("%s: only with --fleet", strings.Join(set, ", "))
		}
	}
	var onlyRE *regexp.Regexp
	if *only != "" {
		if onlyRE, err = regexp.Compile(*only); err != nil {
			return usagef("--only: %v", err)
		}
	}
	scratch, err := os.MkdirTemp("", "foldhost-bench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(scratch)
	shapes, ok := bench.Shapes[*shape]
	if *probes < 1 || *probes > 100_000 || !ok {
		return usagef("--probes must be between 1 and 100000 (got %d), --shape ordered, random or both (got %q)", *probes, *shape)
	}
	prog := progress.New(c.stderr, "bench: ", 2*time.Second)
	res, err := bench.Run(c.ctx, bench.Config{Dir: scratch, Keys: *keys, Rounds: *rounds, Delta: *delta, Probes: *probes, Seed: *seed, Shapes: shapes,
		NATSURL: *natsURL, PluginDir: *pluginDir, Only: onlyRE, CPUProfile: *cpuProfile, Fleet: fleetCfg, Progress: prog, Warn: c.stderr})
	prog.End()
	return printBench(c.stdout, res, err, *asJSON)
}

// printBench prints what the bench measured, res (nil: nothing), even when
// a later phase failed (err) or one of its checks did not hold: the figures
// stand on their own. It returns err, or an error naming the failed checks.
func printBench(w io.Writer, res *bench.Result, err error, asJSON bool) error {
	if res == nil {
		return err
	}
	var perr error
	if asJSON {
		perr = printJSON(w, res)
	} else {
		perr = res.WriteTable(w)
	}
	if err == nil {
		err = perr
	}
	if err == nil && len(res.Checks) > 0 {
		err = fmt.Errorf("bench: %d check(s) failed: %s", len(res.Checks), strings.Join(res.Checks, "; "))
	}
	return err
}
