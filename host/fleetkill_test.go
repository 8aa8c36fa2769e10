package host_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/hosttest"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/internal/syncbuf"
	"github.com/foldhost/foldhost/protocol"
)

// fleetNode is a node of the fleet tests run as a child process (the
// test binary, as host.FleetChildEnv makes it), killed at the test's end.
type fleetNode struct {
	name, dir, plugin, url string
	cmd                    *exec.Cmd
	out                    *bufio.Scanner
	stderr                 *syncbuf.Buffer
	base                   string // its HTTP API
}

// start runs the node (again), with env added, and waits until it serves.
func (n *fleetNode) start(t *testing.T, env ...string) {
	t.Helper()
	env = append(env, host.FleetChildEnv+"=1", host.FleetChildURL+"="+n.url, host.FleetChildNode+"="+n.name,
		host.FleetChildDir+"="+n.dir, host.FleetChildPlugin+"="+n.plugin)
	cmd, out, stderr := hosttest.StartChild(t, env...)
	n.cmd, n.out, n.stderr = cmd, bufio.NewScanner(out), stderr
	t.Cleanup(func() { n.kill() })
	for n.out.Scan() {
		line := n.out.Text()
		if addr, ok := strings.CutPrefix(line, "http "); ok {
			n.base = "http://" + addr
		}
		if line == "started" {
			return
		}
	}
	t.Fatalf("node %s did not start: %s", n.name, n.stderr.String())
}

// kill SIGKILLs the node's process (once) and waits for it.
func (n *fleetNode) kill() {
	if n.cmd == nil {
		return
	}
	_ = n.cmd.Process.Signal(syscall.SIGCONT) // a stopped process dies too
	_ = n.cmd.Process.Kill()
	_ = n.cmd.Wait()
	n.cmd = nil
}

// statusClient gives up on a node that does not answer (one stopped).
var statusClient = &http.Client{Timeout: 2 * time.Second}

// status is the node's status of fold routes (false when it does not
// answer).
func (n *fleetNode) status(t *testing.T) (httpapi.Status, bool) {
	var st httpapi.Status
	resp, err := statusClient.Get(n.base + "/v1/folds/routes")
	if err != nil {
		return st, false
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 || json.Unmarshal(body, &st) != nil {
		return st, false
	}
	return st, true
}

// waitStopped waits until n, a child told to stop at a step, says it
// stopped there (what names the step in the failure).
func (n *fleetNode) waitStopped(t *testing.T, what string) {
	t.Helper()
	stopped := make(chan bool, 1)
	go func() { // ends with the child's output, at the latest when it is killed
		for n.out.Scan() {
			if n.out.Text() == "stopping" {
				stopped <- true
				return
			}
		}
		stopped <- false
	}()
	select {
	case ok := <-stopped:
		if !ok {
			t.Fatalf("node %s ended without stopping: %s", n.name, n.stderr.String())
		}
	case <-time.After(2 * time.Minute):
		t.Fatalf("node %s never reached %s", n.name, what)
	}
}

// owner is the node whose status says it owns fold routes, and its epoch
// ("" when none does).
func owner(t *testing.T, nodes []*fleetNode) (*fleetNode, uint64) {
	for _, n := range nodes {
		if n.cmd == nil {
			continue
		}
		if st, ok := n.status(t); ok && st.Fleet != nil && st.Fleet.Role == "owner" && st.State == httpapi.StateFollowing {
			return n, st.Fleet.Epoch
		}
	}
	return nil, 0
}

// fleetSetup is a server with the bucket routes and the effects stream
// EV, and nodes of fleet "kill" on it, not started.
func fleetSetup(t *testing.T, plugin string, names ...string) (*natskv.Bucket, jetstream.Stream, []*fleetNode) {
	t.Helper()
	srv, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(context.Background(), nc, natskv.BucketConfig{Name: "routes", History: 8}, natskv.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ev, err := hosttest.JS(t, srv.ClientURL()).CreateStream(context.Background(), hosttest.EffectsStream("EV", "route.changed"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var nodes []*fleetNode
	for _, name := range names {
		nodes = append(nodes, &fleetNode{name: name, dir: filepath.Join(dir, name), plugin: plugin, url: srv.ClientURL()})
	}
	return b, ev, nodes
}

// effectIDs are the ids of the effects stream's route.changed messages.
func effectIDs(t *testing.T, s jetstream.Stream) []string {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject == "route.changed" {
			ids = append(ids, string(m.Data))
		}
	}
	return ids
}

// onceEach fails unless ids (an effect's payload per change) hold each of
// want once.
func onceEach(t *testing.T, ids []string, want int) {
	t.Helper()
	seen := map[string]int{}
	for _, id := range ids {
		seen[id]++
	}
	var dups []string
	for id, n := range seen {
		if n > 1 {
			dups = append(dups, fmt.Sprintf("%q x%d", id, n))
		}
	}
	if len(dups) > 0 || len(seen) != want {
		slices.Sort(dups)
		t.Fatalf("the stream holds %d effects, %d distinct, for %d changes; repeated: %v", len(ids), len(seen), want, dups)
	}
}

// TestFleetPausedOwnerIsRefusedByTheServer: the owner of a fold is
// stopped (SIGSTOP) right before it publishes its second batch of
// effects, and stays stopped past its lease; its standby takes the fold
// over, marks its claim in the effects stream and publishes the effects
// of the changes since. The old owner resumed (SIGCONT) sends its batch,
// which the server refuses (its claim mark is no longer the claim
// subject's last), counted in its status. No batch conditioned on the old
// owner's mark lands after the new owner's mark (each fence message names
// the mark its batch was conditioned on), and the stream holds every
// change's effect once. Mutation caught: batches not conditioned on the
// claim mark (nothing refused as stale; the resumed owner's batch meets
// only the moved fence).
func TestFleetPausedOwnerIsRefusedByTheServer(t *testing.T) {
	b, ev, nodes := fleetSetup(t, hosttest.BuiltPlugin(t, "example-router", "router-c"), "n1", "n2")
	first := protocol.Place(protocol.Unit{Fold: "routes"}, []string{"n1", "n2"}, 1).Owner
	var o, s *fleetNode
	for _, n := range nodes {
		if n.name == first {
			o = n
		} else {
			s = n
		}
	}
	o.start(t, host.FleetChildStopAt+"=before-publish-2", host.FleetChildBatch+"=big")
	s.start(t)
	hosttest.WaitFor(t, func() bool { n, _ := owner(t, nodes); return n == o })
	_, oldEpoch := owner(t, nodes)

	changes := 0
	put := func() {
		hosttest.Put(t, b, fmt.Sprintf("route.h%d", changes), hosttest.Route("10.0.0.1:80"))
		changes++
	}
	// The first batch publishes; the second stops the owner before it goes.
	put()
	hosttest.WaitFor(t, func() bool { return len(effectIDs(t, ev)) == 1 })
	for range 3 {
		put()
	}
	o.waitStopped(t, "its second batch")

	// Past its lease the standby takes over and publishes what is new.
	var newEpoch uint64
	hosttest.WaitFor(t, func() bool { n, e := owner(t, nodes); newEpoch = e; return n == s && e > oldEpoch })
	for range 3 {
		put()
	}
	hosttest.WaitFor(t, func() bool { return len(effectIDs(t, ev)) >= changes })
	newMark := lastClaimMark(t, ev)

	// The old owner resumes: its batch is refused by the server.
	if err := o.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(10 * time.Millisecond) {
		st, ok := o.status(t)
		if ok && st.Effects != nil && st.Effects.RefusedStale > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the resumed owner's batch was not refused within 2m: its effects status %+v (read: %v); its warnings:\n%s", st.Effects, ok, o.stderr.String())
		}
	}
	// Then it stands by, or, the placement's owner again once caught up,
	// is handed the fold back under a newer epoch still.
	hosttest.WaitFor(t, func() bool {
		st, ok := o.status(t)
		return ok && st.Fleet != nil && (st.Fleet.Role == "standby" || st.Fleet.Epoch > newEpoch)
	})
	put()
	hosttest.WaitFor(t, func() bool { return len(effectIDs(t, ev)) >= changes })
	onceEach(t, effectIDs(t, ev), changes)
	for _, f := range fencesAfter(t, ev, newMark) {
		if f < newMark {
			t.Errorf("a batch conditioned on the claim mark at %d landed after the newer mark at %d", f, newMark)
		}
	}
}

// lastClaimMark is the sequence of the claim mark of fold routes now.
func lastClaimMark(t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	m, err := s.GetLastMsgForSubject(context.Background(), "foldhost.fence.routes.claim")
	if err != nil {
		t.Fatal(err)
	}
	return m.Sequence
}

// fencesAfter are the claim marks the fence messages after sequence from
// were conditioned on.
func fencesAfter(t *testing.T, s jetstream.Stream, from uint64) []uint64 {
	t.Helper()
	info, err := s.Info(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []uint64
	for seq := from + 1; seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(context.Background(), seq)
		if err != nil {
			t.Fatal(err)
		}
		if m.Subject != "foldhost.fence.routes" {
			continue
		}
		var c uint64
		if _, err := fmt.Sscan(m.Header.Get("Foldhost-Effects-Claim"), &c); err != nil {
			t.Fatalf("fence message %d names no claim mark: %v", seq, m.Header)
		}
		out = append(out, c)
	}
	return out
}

// TestFleetOwnerKilledRepeatedly: three nodes fold the router with
// effects while a writer changes routes; twenty times the fold's owner is
// SIGKILLed and started again under its name. After each kill another
// node owns the fold under a higher epoch; at the end every node that
// folds it holds every key's value as the bucket has it, and the stream
// holds each change's effect once. The time from each kill to the next
// owner's claim is logged (p50, p99).
func TestFleetOwnerKilledRepeatedly(t *testing.T) {
	kills := 20
	if raceEnabled {
		kills = 6 // the race detector slows each node tenfold; the plain run kills twenty
	}
	b, ev, nodes := fleetSetup(t, hosttest.BuiltPlugin(t, "example-router", "router-c"), "n1", "n2", "n3")
	for _, n := range nodes {
		n.start(t)
	}
	hosttest.WaitFor(t, func() bool { n, _ := owner(t, nodes); return n != nil })

	var mu sync.Mutex
	changes := 0
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var once sync.Once
	stopWriter := func() { once.Do(func() { close(stop); wg.Wait() }) }
	defer stopWriter()
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			if _, err := b.KV().Put(context.Background(), fmt.Sprintf("route.h%d", i), []byte(hosttest.Route("10.0.0.1:80"))); err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			changes++
			mu.Unlock()
		}
	})

	var took []time.Duration
	for k := range kills {
		var victim *fleetNode
		var epoch uint64
		hosttest.WaitFor(t, func() bool { victim, epoch = owner(t, nodes); return victim != nil })
		at := time.Now()
		victim.kill()
		hosttest.WaitFor(t, func() bool { n, e := owner(t, nodes); return n != nil && n != victim && e > epoch })
		took = append(took, time.Since(at))
		victim.start(t)
		t.Logf("kill %d: %s, taken over in %v", k+1, victim.name, took[len(took)-1].Round(time.Millisecond))
	}
	stopWriter()

	mu.Lock()
	want := changes
	mu.Unlock()
	truth := hosttest.TruthOf(t, b.KV())
	hosttest.WaitFor(t, func() bool { return len(effectIDs(t, ev)) >= want })
	onceEach(t, effectIDs(t, ev), want)
	for _, n := range nodes {
		st, ok := n.status(t)
		if !ok || st.Fleet == nil || st.Fleet.Role == "none" {
			continue
		}
		code, body := hosttest.HTTPGet(t, n.base+"/v1/folds/routes/raw?prefix=route.&format=ndjson&min_revision="+fmt.Sprint(maxRev(truth))+"&wait=1m")
		if code != 200 {
			t.Fatalf("node %s: %d %s", n.name, code, body)
		}
		got := map[string]string{}
		for line := range strings.Lines(body) {
			var e struct {
				Key   *string `json:"key"`
				Value *string `json:"value"`
			}
			if json.Unmarshal([]byte(line), &e) == nil && e.Key != nil && e.Value != nil {
				got[*e.Key] = *e.Value
			}
		}
		for k, v := range truth {
			if got[k] != v.Value {
				t.Errorf("node %s: %s = %q, the bucket has %q", n.name, k, got[k], v.Value)
			}
		}
		if len(got) != len(truth) {
			t.Errorf("node %s holds %d keys, the bucket %d", n.name, len(got), len(truth))
		}
	}
	slices.Sort(took)
	t.Logf("%d kills under writes (%d changes): takeover p50 %v, p99 %v (node_ttl 1s, heartbeat 100ms)",
		kills, want, took[len(took)/2].Round(time.Millisecond), took[len(took)*99/100].Round(time.Millisecond))
}

func maxRev(m map[string]hosttest.KVEntry) uint64 {
	var r uint64
	for _, e := range m {
		r = max(r, uint64(e.Rev))
	}
	return r
}
