package bench

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/plugins/example-router/workload"
)

// fleetReadsWarmup: pairs of reads before the measured ones (the first
// forwarded read's connections and subscriptions are set up).
const fleetReadsWarmup = 50

// fleetReads measures FleetReads over n pairs of reads: a fleet of
// FleetNodes nodes folding one fold (one standby), caught up; each node's
// HTTP API on a loopback listener.
func (b *bench) fleetReads(ctx context.Context, plugin string, n int) (fr *FleetReads, err error) {
	fl := b.newFleet(fleetSpec{nodes: FleetNodes, folds: 1, plugin: plugin, standbys: 1,
		ttl: FleetTTL{NodeTTL: fleet.DefaultNodeTTL, Heartbeat: fleet.DefaultHeartbeat}})
	defer func() { err = errors.Join(err, fl.close()) }()
	owners, err := fl.startPlaced(ctx, b.head)
	if err != nil {
		return nil, err
	}
	const fold = "f0"
	owner := owners[fold]
	var other *fleetNode
	for _, nd := range fl.nodes {
		if role, _, _, _ := nd.copyOf(fold); role == roleNone {
			other = nd
		}
	}
	if other == nil {
		return nil, fmt.Errorf("every node of the fleet folds %s: none forwards its reads", fold)
	}
	local, forwarded := httptest.NewServer(owner.h.Handler()), httptest.NewServer(other.h.Handler())
	defer local.Close()
	defer forwarded.Close()
	fr = &FleetReads{Fold: fold, Reads: n}
	var ls, fs []float64
	for i := range fleetReadsWarmup + n {
		key := workload.Key(b.rng.IntN(b.keys))
		path := "/v1/folds/" + fold + "/raw/" + key
		var codes [2]int
		var bodies [2][]byte
		var took [2]time.Duration
		// Alternately one side first, then the other: neither always
		// reads right after the other's request.
		for j := range 2 {
			side := (i + j) % 2
			base := []string{local.URL, forwarded.URL}[side]
			var node string
			codes[side], bodies[side], node, took[side], err = fleetGet(ctx, base+path)
			if err != nil {
				return nil, err
			}
			if node != owner.name {
				return nil, fmt.Errorf("GET %s on %s was answered by %q, not by the fold's owner %s", path, []string{owner.name, other.name}[side], node, owner.name)
			}
		}
		// At rest, the owner answers both alike: a forwarded answer that
		// differs lost or changed something on the way.
		if codes[0] != codes[1] || (codes[0] != http.StatusOK && codes[0] != http.StatusNotFound) || !bytes.Equal(bodies[0], bodies[1]) {
			return nil, fmt.Errorf("GET %s: %d %q on the owner, %d %q forwarded", path, codes[0], bodies[0], codes[1], bodies[1])
		}
		if i < fleetReadsWarmup {
			continue
		}
		if codes[0] == http.StatusOK {
			fr.Found++
		}
		ls, fs = append(ls, took[0].Seconds()), append(fs, took[1].Seconds())
	}
	if fr.Found == 0 {
		return nil, fmt.Errorf("none of %d reads found its key", n)
	}
	fr.LocalP50Seconds, fr.LocalP99Seconds = quantile(ls, 0.5), quantile(ls, 0.99)
	fr.ForwardedP50Seconds, fr.ForwardedP99Seconds = quantile(fs, 0.5), quantile(fs, 0.99)
	fr.P50Ratio, fr.P99Ratio = fr.ForwardedP50Seconds/fr.LocalP50Seconds, fr.ForwardedP99Seconds/fr.LocalP99Seconds
	return fr, nil
}

// fleetGet does one GET: its status and body, the node that answered,
// its time (the body read included).
func fleetGet(ctx context.Context, u string) (int, []byte, string, time.Duration, error) {
	t0 := time.Now()
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return 0, nil, "", 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, "", 0, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp.StatusCode, body, resp.Header.Get(host.NodeHeader), time.Since(t0), err
}
