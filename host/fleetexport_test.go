package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/protocol"
)

// exportOn asks node n for an export round of fold routes and returns its
// report (a client without a timeout: the round may wait on a stopped
// process).
func exportOn(t *testing.T, n *fleetNode) (round.Report, error) {
	// Forced: a round holds the export lease for its TTL after it ends.
	resp, err := http.Post(n.base+"/v1/folds/routes/export?force=true", "application/json", nil)
	if err != nil {
		return round.Report{}, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return round.Report{}, err
	}
	var rep round.Report
	if resp.StatusCode != http.StatusOK || json.Unmarshal(body, &rep) != nil {
		return rep, fmt.Errorf("export on %s: %d %s", n.name, resp.StatusCode, body)
	}
	return rep, nil
}

// TestFleetPausedOwnersExportIsRefused: the owner of a fold exports an
// artifact (its pointer carries the owner's epoch), then is stopped
// (SIGSTOP) in its next export round, staged but not uploaded, past its
// lease. Its standby takes the fold over and writes its own epoch into the
// pointer at once, before any export of its own. The old owner resumed
// uploads an artifact newer than the pointer's, and the store refuses its
// swap: the round ends "fenced", counted, and the pointer still names the
// artifact it named, under the new owner's epoch. Mutation caught: no
// raise at the claim (fencePointer off: the stale owner's newer artifact
// is published over the new owner's fence).
func TestFleetPausedOwnersExportIsRefused(t *testing.T) {
	b, _, nodes := fleetSetup(t, hosttest.BuiltPlugin(t, "example-router", "router-c"), "n1", "n2")
	arts := filepath.Join(t.TempDir(), "artifacts")
	first := protocol.Place(protocol.Unit{Fold: "routes"}, []string{"n1", "n2"}, 1).Owner
	var o, s *fleetNode
	for _, n := range nodes {
		if n.name == first {
			o = n
		} else {
			s = n
		}
	}
	o.start(t, host.FleetChildStopAt+"=before-upload-2", host.FleetChildArtifacts+"="+arts)
	s.start(t, host.FleetChildArtifacts+"="+arts)
	hosttest.WaitFor(t, func() bool { n, _ := owner(t, nodes); return n == o })
	_, oldEpoch := owner(t, nodes)
	store, err := dirstore.New(arts)
	if err != nil {
		t.Fatal(err)
	}
	pointer := func() protocol.PointerState {
		b, err := store.Pointer(context.Background(), "routes")
		if err != nil {
			t.Fatal(err)
		}
		return artifact.PointerState(b)
	}

	last := hosttest.Put(t, b, "route.a", hosttest.Route("10.0.0.1:80"))
	hosttest.WaitFor(t, func() bool { st, ok := o.status(t); return ok && st.Cursor >= last })
	if rep, err := exportOn(t, o); err != nil || rep.Outcome != round.Published {
		t.Fatalf("the owner's first export: %+v %v", rep, err)
	}
	exported := pointer()
	if exported.Epoch() != protocol.Revision(oldEpoch) {
		t.Fatalf("the owner's pointer: %v, want epoch %d", exported, oldEpoch)
	}

	// The owner's second round stops it before its upload.
	last = hosttest.Put(t, b, "route.b", hosttest.Route("10.0.0.2:80"))
	hosttest.WaitFor(t, func() bool { st, ok := o.status(t); return ok && st.Cursor >= last })
	type result struct {
		rep round.Report
		err error
	}
	second := make(chan result, 1)
	go func() {
		rep, err := exportOn(t, o)
		second <- result{rep, err}
	}()
	defer func() { o.kill(); <-second }() // joined on every path: a killed node ends the request
	o.waitStopped(t, "its second export's upload")

	// Past its lease the standby owns the fold, and its epoch is on the
	// pointer, which names the same artifact.
	var newEpoch uint64
	hosttest.WaitFor(t, func() bool { n, e := owner(t, nodes); newEpoch = e; return n == s && e > oldEpoch })
	hosttest.WaitFor(t, func() bool { return pointer().Epoch() == protocol.Revision(newEpoch) })
	if r, _ := pointer().Rank(); r != mustRank(t, exported) {
		t.Fatalf("the raised pointer is at rank %d, want the exported %d", r, mustRank(t, exported))
	}

	// The old owner resumes: its upload of a newer artifact is refused.
	if err := o.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	var res result
	select {
	case res = <-second:
		second <- res // for the deferred join
	case <-time.After(2 * time.Minute):
		t.Fatal("the resumed owner's export round did not end")
	}
	if res.err != nil || res.rep.Outcome != round.Fenced {
		t.Fatalf("the resumed owner's round: %+v %v, want fenced", res.rep, res.err)
	}
	// (The resumed node, the placement's owner, may be handed the fold
	// back since, under a newer epoch still.)
	if p := pointer(); p.Epoch() < protocol.Revision(newEpoch) || mustRank(t, p) != mustRank(t, exported) {
		t.Fatalf("the pointer after the stale owner's round: %v, want rank %d at epoch %d or above", p, mustRank(t, exported), newEpoch)
	}
	hosttest.WaitFor(t, func() bool {
		st, ok := o.status(t)
		return ok && st.Export != nil && st.Export.Rounds.Fenced == 1
	})
}

func mustRank(t *testing.T, p protocol.PointerState) protocol.Revision {
	t.Helper()
	r, ok := p.Rank()
	if !ok {
		t.Fatalf("pointer %v has no rank", p)
	}
	return r
}
