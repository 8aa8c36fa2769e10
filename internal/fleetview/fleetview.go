// Package fleetview is `foldhost fleet status`: it reads a running node's
// HTTP API (GET /v1/folds, then each fold's /partitions) and writes where
// every partition runs, as a table or JSON.
package fleetview

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/foldhost/foldhost/host/httpapi"
)

// Fetch reads every fold's partitions from the node at base.
func Fetch(ctx context.Context, base string) ([]httpapi.Partitions, error) {
	var list struct {
		Folds []httpapi.Status `json:"folds"`
	}
	if err := get(ctx, base+"/v1/folds", &list); err != nil {
		return nil, err
	}
	out := make([]httpapi.Partitions, 0, len(list.Folds))
	for _, f := range list.Folds {
		var p httpapi.Partitions
		if err := get(ctx, base+"/v1/folds/"+url.PathEscape(f.Name)+"/partitions", &p); err != nil {
			return nil, err
		}
		out = append(out, p)
	}
	return out, nil
}

func get(ctx context.Context, u string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s: %s", u, resp.Status, strings.TrimSpace(string(body)))
	}
	return json.Unmarshal(body, v)
}

// WriteTable writes one row per partition: FOLD PART OWNER EPOCH
// STANDBYS STATE CURSOR (a partition without an owner shows "-", and the
// node a hand-over names in the STATE column).
func WriteTable(w io.Writer, folds []httpapi.Partitions) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "FOLD\tPART\tOWNER\tEPOCH\tSTANDBYS\tSTATE\tCURSOR")
	for _, f := range folds {
		for _, p := range f.Partitions {
			owner, state := p.Owner, p.State
			if owner == "" {
				owner, state = "-", "unowned"
				if p.To != "" {
					state = "handing over to " + p.To
				}
			}
			standbys := strings.Join(p.Standbys, ",")
			if standbys == "" {
				standbys = "-"
			}
			fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\t%d\n", f.Fold, p.Partition, owner, strconv.FormatUint(p.Epoch, 10), standbys, state, p.Cursor)
		}
	}
	return tw.Flush()
}
