package main

import (
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/host/bench"
	"github.com/foldhost/foldhost/internal/progress"
	"github.com/foldhost/foldhost/internal/textfmt"
)

func cmdBench(c *cli, args []string) error {
	fs := c.flagSet("bench", "bench [--keys N] [--rounds N] [--nats URL] [--plugins DIR] [--json]", about("bench"))
	keys := fs.Int("keys", 100_000, "route keys in the bucket")
	rounds := fs.Int("rounds", 3, "rounds of every variant, alternating")
	delta := fs.Int("delta", 1000, "updates written before the restart's resume")
	natsURL := fs.String("nats", "", "a NATS server `url` instead of the embedded one")
	pluginDir := fs.String("plugins", bench.DefaultPlugins, "`dir`ectory of the example-router builds (router-<lang>.wasm); when the default holds none, the C, Rust and AssemblyScript builds the binary carries")
	asJSON := fs.Bool("json", false, "print the results as JSON")
	seed := fs.Uint64("seed", 1, "the workload's seed")
	only := fs.String("only", "", "measure only the variants whose name matches this `regexp` (the WatchAll read and the raw-only fold always run: the ratios need them)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the rounds to `file`")
	probes := fs.Int("effects-probes", 200, "probes of the effects' steady-state drain latency")
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
	if *probes < 1 || *probes > 100_000 {
		return usagef("--effects-probes must be between 1 and 100000, got %d", *probes)
	}
	prog := progress.New(c.stderr, "bench: ", 2*time.Second)
	res, err := bench.Run(c.ctx, bench.Config{Dir: scratch, Keys: *keys, Rounds: *rounds, Delta: *delta, Probes: *probes, Seed: *seed,
		NATSURL: *natsURL, PluginDir: *pluginDir, Only: onlyRE, CPUProfile: *cpuProfile, Progress: prog, Warn: c.stderr})
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
		perr = printBenchTable(w, res)
	}
	if err == nil {
		err = perr
	}
	if err == nil && len(res.Checks) > 0 {
		err = fmt.Errorf("bench: %d check(s) failed: %s", len(res.Checks), strings.Join(res.Checks, "; "))
	}
	return err
}

// printBenchTable prints r as a table.
func printBenchTable(w io.Writer, r *bench.Result) error {
	fmt.Fprintf(w, "foldhost bench: %d keys, %d rounds, %s NATS server (median of the rounds; rates vary with the machine's load, ratios hold)\n\n", r.Keys, r.Rounds, r.Server)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIANT\tUPDATES/S\tVS WATCHALL\tVS RAW FOLD")
	for _, v := range r.Variants {
		vsRaw := ""
		if v.VsRawFold > 0 {
			vsRaw = fmt.Sprintf("%.2f×", v.VsRawFold)
		}
		fmt.Fprintf(tw, "%s\t%s\t%.2f×\t%s\n", v.Name, humanRate(v.Rate), v.VsWatchAll, vsRaw)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if rs := r.Restart; rs != nil {
		fmt.Fprintf(w, "\nrestart, raw-only fold: resume after a delta of %d updates %s; full replay of the bucket %s; resume / replay = %.1f%%\n",
			rs.Delta, fmtSeconds(rs.ResumeSeconds), fmtSeconds(rs.ReplaySeconds), 100*rs.Ratio)
		fmt.Fprintf(w, "new node, raw-only fold: bootstrap from an artifact (%s, local directory) and resume %s; bootstrap / replay = %.1f%%\n",
			textfmt.HumanBytes(rs.ArtifactBytes), fmtSeconds(rs.BootstrapSeconds), 100*rs.BootstrapRatio)
	}
	if sw := r.Swap; sw != nil {
		fmt.Fprintf(w, "hot swap under %.0f writes/s (%s, %d swaps): write-to-fold latency p50 %s p99 %s with a swap in flight, p50 %s p99 %s without\n",
			sw.LoadRate, sw.Modules, sw.Swaps, fmtSeconds(sw.SwapP50Seconds), fmtSeconds(sw.SwapP99Seconds), fmtSeconds(sw.BaselineP50Seconds), fmtSeconds(sw.BaselineP99Seconds))
	}
	if ef := r.Effects; ef != nil {
		fmt.Fprintf(w, "effects (%s, %.2f effects per update): fold to the head and the outbox drained %s (to the head %s); time vs the fold without effects %.2f× (%+.0f%%)\n",
			ef.Module, ef.EffectsPerUpdate, fmtSeconds(bench.Median(ef.Seconds)), fmtSeconds(bench.Median(ef.HeadSeconds)), ef.TimeRatio, 100*(ef.TimeRatio-1))
		if ef.EffectsPerUpdate < 0.5 {
			fmt.Fprintf(w, "note: far fewer effects than updates (%.2f per update): the ratio is not that of one effect per update\n", ef.EffectsPerUpdate)
		}
		if ef.Probes > 0 {
			fmt.Fprintf(w, "effects under %.0f writes/s (one effect each): write-to-effect-in-stream latency p50 %s p99 %s (%d probes)\n",
				ef.LoadRate, fmtSeconds(ef.DrainP50Seconds), fmtSeconds(ef.DrainP99Seconds), ef.Probes)
		}
	}
	for _, c := range r.Checks {
		fmt.Fprintf(w, "\nCHECK FAILED: %s\n", c)
	}
	return nil
}

func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

func fmtSeconds(s float64) string {
	return time.Duration(s * float64(time.Second)).Round(time.Millisecond).String()
}
