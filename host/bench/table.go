package bench

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/foldhost/foldhost/internal/textfmt"
)

// WriteTable writes r as the table `foldhost bench` prints: the variants'
// rates and ratios, then a line for the restart, the hot swap and the
// effects, and the checks that failed.
func (r *Result) WriteTable(w io.Writer) error {
	fmt.Fprintf(w, "foldhost bench: %d keys, %d rounds, %s NATS server (median of the rounds; rates vary with the machine's load, ratios hold)\n", r.Keys, r.Rounds, r.Server)
	if len(r.Variants) > 0 {
		fmt.Fprintln(w)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHAPE\tVARIANT\tUPDATES/S\tVS WATCHALL\tVS RAW FOLD")
		for _, v := range r.Variants {
			vsRaw := ""
			if v.VsRawFold > 0 {
				vsRaw = fmt.Sprintf("%.2f×", v.VsRawFold)
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%.2f×\t%s\n", v.Shape, v.Name, humanRate(v.Rate), v.VsWatchAll, vsRaw)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if r.Fleet != nil {
		if err := r.Fleet.writeTable(w); err != nil {
			return err
		}
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
	for _, st := range r.Steady {
		fmt.Fprintf(w, "steady state, %s, under %.0f writes/s: write-to-fold latency p50 %s p99 %s; read your writes (HTTP, ?min_revision) p50 %s p99 %s (%d probes",
			st.Variant, st.LoadRate, fmtSeconds(st.FoldP50Seconds), fmtSeconds(st.FoldP99Seconds), fmtSeconds(st.ReadP50Seconds), fmtSeconds(st.ReadP99Seconds), st.Probes)
		if st.ReadTimeouts > 0 {
			fmt.Fprintf(w, ", %d reads timed out", st.ReadTimeouts)
		}
		fmt.Fprintln(w, ")")
	}
	if ef := r.Effects; ef != nil {
		fmt.Fprintf(w, "effects (%s, %.2f effects per update): fold to the head %s, %.2f× the fold without effects (%+.0f%%; the publisher waiting for the catch-up); to the head and the outbox drained %s, %.2f× (paired rounds' median)\n",
			ef.Module, ef.EffectsPerUpdate, fmtSeconds(Median(ef.HeadSeconds)), ef.HeadRatio, 100*(ef.HeadRatio-1), fmtSeconds(Median(ef.Seconds)), ef.TimeRatio)
		if ef.EffectsPerUpdate < 0.5 {
			fmt.Fprintf(w, "note: far fewer effects than updates (%.2f per update): the ratio is not that of one effect per update\n", ef.EffectsPerUpdate)
		}
		if ef.Probes > 0 {
			fmt.Fprintf(w, "effects under %.0f writes/s (one effect each): write-to-effect-in-stream latency p50 %s p99 %s (%d probes)\n",
				ef.LoadRate, fmtSeconds(ef.DrainP50Seconds), fmtSeconds(ef.DrainP99Seconds), ef.Probes)
		}
	}
	if q := r.Queries; q != nil {
		fmt.Fprintf(w, "queries (%s, %d clients back to back, hosts_of_upstream): fold to the head %s, throughput %.2f× the fold without queries (paired rounds' median); %d answered, %.0f/s, p50 %s p99 %s\n",
			q.Module, q.Clients, fmtSeconds(Median(q.Seconds)), q.ThroughputRatio, q.Answered, q.PerSecond, fmtSeconds(q.P50Seconds), fmtSeconds(q.P99Seconds))
	}
	if rd := r.Reads; rd != nil {
		fmt.Fprintf(w, "reads (%s, caught up, no writes; HTTP on loopback): a point read p50 %s p99 %s (%d, %d found); a page of %d view entries p50 %s p99 %s (%d); a query answering %d hosts p50 %s p99 %s (%d)\n",
			rd.Module, fmtLatency(rd.PointP50Seconds), fmtLatency(rd.PointP99Seconds), rd.Points, rd.PointsFound,
			rd.RangeKeys, fmtLatency(rd.RangeP50Seconds), fmtLatency(rd.RangeP99Seconds), rd.Ranges,
			rd.QueryKeys, fmtLatency(rd.QueryP50Seconds), fmtLatency(rd.QueryP99Seconds), rd.Queries)
	}
	for _, c := range r.Checks {
		fmt.Fprintf(w, "\nCHECK FAILED: %s\n", c)
	}
	return nil
}

// humanRate is r with a k or M suffix.
func humanRate(r float64) string {
	switch {
	case r >= 1e6:
		return fmt.Sprintf("%.2fM", r/1e6)
	case r >= 1e3:
		return fmt.Sprintf("%.1fk", r/1e3)
	}
	return fmt.Sprintf("%.0f", r)
}

// fmtSeconds is s seconds as a duration, to the millisecond; fmtLatency
// to the microsecond.
func fmtSeconds(s float64) string { return fmtDuration(s, time.Millisecond) }
func fmtLatency(s float64) string { return fmtDuration(s, time.Microsecond) }

func fmtDuration(s float64, to time.Duration) string {
	return time.Duration(s * float64(time.Second)).Round(to).String()
}
