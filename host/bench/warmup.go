package bench

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"time"

	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/protocol"
)

// GoalWarmUp is the bound on a joining node's time to own its
// share from artifacts, over a full hydration of that share.
const GoalWarmUp = 0.2

// WarmUp is a node joining a fleet: the time from its start to owning
// its share of the folds, caught up, once warmed up from the folds'
// artifacts (a local directory store), against a node that joins with no
// artifact store and hydrates its share from NATS. Both joiners get the
// same number of folds (their names are picked so that the placement
// gives them as many), each joining a fleet of WarmUpNodes nodes that
// folds every fold, exported once; the joiner's start is timed (its
// store opening, the warm-up of every fold it has fresh, the fleet's
// hand-over to it), the fleet's is not.
type WarmUp struct {
	Share                int     `json:"share"`
	FromArtifactsSeconds float64 `json:"from_artifacts_seconds"`
	HydrationSeconds     float64 `json:"hydration_seconds"`
	Ratio                float64 `json:"ratio"`
	// ArtifactFolds: the folds the warm joiner installed an artifact for
	// (its share as it guessed it from the fleet's members before it
	// joined; a fold it holds no role for keeps the cursor it installed).
	ArtifactFolds int `json:"artifact_folds"`
}

// WarmUpNodes is the fleet a node joins in the warm-up run.
const WarmUpNodes = 2

// warmUp measures WarmUp.
func (b *bench) warmUp(ctx context.Context, plugin string) (w *WarmUp, err error) {
	dir := b.nextDir()
	store, err := dirstore.New(filepath.Join(dir, "artifacts"))
	if err != nil {
		return nil, err
	}
	fl := b.newFleet(fleetSpec{nodes: WarmUpNodes, folds: FleetFolds, plugin: plugin, standbys: 0, ttl: b.warmUpTTL(), store: store})
	defer func() { err = errors.Join(err, fl.close()) }()
	b.prog.Status("fleet: a node joining, warmed up from artifacts or hydrating")
	owners, err := fl.startPlaced(ctx, b.head)
	if err != nil {
		return nil, err
	}
	for _, f := range fl.folds() {
		rep, err := owners[f].h.Fold(f).Export(ctx, true)
		if err != nil {
			return nil, fmt.Errorf("exporting fold %s on %s: %w", f, owners[f].name, err)
		}
		if r, ok := rep.(round.Report); !ok || r.Outcome != round.Published {
			return nil, fmt.Errorf("exporting fold %s on %s: %+v, not published", f, owners[f].name, rep)
		}
	}
	warm, bare, share := fl.joiners()
	if share == 0 {
		return nil, errors.New("no joiner's name gets a fold from the placement")
	}
	w = &WarmUp{Share: share}
	// join times node name's join, and checks how it got its share:
	// from the artifacts (NATS delivered none of the updates they hold,
	// exported at the head) or, bare, by folding every update.
	join := func(name string) (took time.Duration, installed int, err error) {
		t0 := time.Now()
		n, err := fl.start(ctx, name)
		if err != nil {
			return 0, 0, err
		}
		fl.nodes = append(fl.nodes, n)
		n.run(ctx)
		owners, err := fl.waitPlaced(ctx, b.head)
		if err != nil {
			return 0, 0, fmt.Errorf("%s joining: %w", name, err)
		}
		took = time.Since(t0)
		for _, f := range fl.folds() {
			st := n.h.Fold(f).Status()
			if owners[f] != n {
				if st.Cursor > 0 {
					installed++ // no role: its cursor is the artifact's
				}
				continue
			}
			installed++
			switch got := st.Counters.DeliveredSinceStart; {
			case !fl.bare[name] && got >= b.head:
				return 0, 0, fmt.Errorf("%s joining with the artifact store: fold %s folded %d updates from NATS, the whole bucket: it did not warm up from its artifact", name, f, got)
			case fl.bare[name] && got < b.head:
				return 0, 0, fmt.Errorf("%s joining with no artifact store: fold %s folded %d updates from NATS, fewer than the bucket's %d", name, f, got, b.head)
			}
		}
		// It leaves (handing its share back), and the fleet settles.
		fl.nodes = fl.nodes[:len(fl.nodes)-1]
		if err := n.stop(); err != nil {
			return 0, 0, fmt.Errorf("%s leaving: %w", name, err)
		}
		if _, err := fl.waitPlaced(ctx, b.head); err != nil {
			return 0, 0, fmt.Errorf("after %s left: %w", name, err)
		}
		return took, installed, nil
	}
	var took time.Duration
	pprof.Do(ctx, pprof.Labels("variant", "fleet warm-up"), func(ctx context.Context) { took, w.ArtifactFolds, err = join(warm) })
	if err != nil {
		return nil, err
	}
	w.FromArtifactsSeconds = took.Seconds()
	fl.bare[bare] = true
	pprof.Do(ctx, pprof.Labels("variant", "fleet hydration"), func(ctx context.Context) { took, _, err = join(bare) })
	if err != nil {
		return nil, err
	}
	w.HydrationSeconds = took.Seconds()
	w.Ratio = w.FromArtifactsSeconds / w.HydrationSeconds
	return w, nil
}

// warmUpTTL is the fleet's liveness in the warm-up run: its first TTL
// when --fleet-ttl names some, else the defaults'.
func (b *bench) warmUpTTL() FleetTTL {
	if len(b.fleet.TTLs) > 0 {
		return b.fleet.TTLs[0]
	}
	return FleetTTL{NodeTTL: fleet.DefaultNodeTTL, Heartbeat: fleet.DefaultHeartbeat}
}

// joiners are two names for a node joining fl (warm, then bare) that the
// placement gives as many of fl's folds, and that count.
func (fl *benchFleet) joiners() (warm, bare string, share int) {
	names := fl.nodeNames()
	count := func(x string) int {
		k := 0
		for _, f := range fl.folds() {
			if protocol.Place(protocol.Unit{Fold: f}, append(slices.Clone(names), x), 0).Owner == x {
				k++
			}
		}
		return k
	}
	byShare := map[int]string{}
	for i := len(names) + 1; i < len(names)+200; i++ {
		x := fmt.Sprintf("n%d", i)
		k := count(x)
		if k == 0 {
			continue
		}
		if first, ok := byShare[k]; ok {
			return first, x, k
		}
		byShare[k] = x
	}
	return "", "", 0
}
