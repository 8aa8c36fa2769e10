// Package pluginrecords makes the rows `foldhost plugins` prints of the
// plugin records nodes keep in NATS: the module each node runs, the age of
// its record, its last reload and an unfinished view rebuild. Records are
// written by any client of the server: every field is escaped.
package pluginrecords

import (
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/internal/textfmt"
)

// Header is the table's header row.
var Header = []string{"FOLD", "NODE", "MODULE", "NAME", "VERSION", "SCHEMA", "SEEN", "LAST RELOAD"}

// Rows are the table's rows of recs, their ages as of now.
func Rows(recs []pluginobj.Record, now time.Time) [][]string {
	rows := make([][]string, 0, len(recs))
	for _, r := range recs {
		last := "-"
		if rl := r.LastReload; rl != nil {
			last = rl.Outcome + " " + rl.At.Local().Format(time.DateTime)
			if rl.Module != "" {
				last += " " + shortSHA(rl.Module)
			}
			if rl.Reason != "" {
				last += ": " + textfmt.OneLine(rl.Reason, 80)
			}
		}
		if rb := r.LastRebuild; rb != nil && rb.Outcome != "done" {
			last += fmt.Sprintf("; view rebuild for %s %s", shortSHA(rb.Module), rb.Outcome)
			if rb.Error != "" {
				last += ": " + textfmt.OneLine(rb.Error, 60)
			}
		}
		seen := "-"
		if !r.At.IsZero() {
			seen = max(now.Sub(r.At), 0).Round(time.Second).String() + " ago"
		}
		p := textfmt.Printable
		rows = append(rows, []string{p(r.Fold), p(r.Node), fmt.Sprintf("%.12s", p(r.Module)), p(r.Name), p(r.Version),
			fmt.Sprint(r.ViewSchema), seen, p(last)})
	}
	return rows
}

func shortSHA(s string) string { return s[:min(len(s), 12)] }
