package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// recordingRunner is the Runner of a node under test: it records the roles
// the fleet gives it (no fold runs) and reports every copy it folds as
// caught up unless told otherwise.
type recordingRunner struct {
	mu       sync.Mutex
	roles    map[protocol.Unit]placed
	notReady map[protocol.Unit]bool
}

func (r *recordingRunner) SetRole(u protocol.Unit, role protocol.Role, epoch protocol.Revision) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.roles[u] = placed{role, epoch}
}

func (r *recordingRunner) Progress(u protocol.Unit) (uint64, bool, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return 1, !r.notReady[u], "following"
}

func (r *recordingRunner) role(u protocol.Unit) placed {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.roles[u]
}

// testLogger is where the fleets under test log: nowhere, unless
// FOLDHOST_TEST_FLEET_LOG is set.
var testLogger = func() *slog.Logger {
	if os.Getenv("FOLDHOST_TEST_FLEET_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}()

// member is a node of the fleet under test, running until stop.
type member struct {
	f      *Fleet
	r      *recordingRunner
	cancel context.CancelFunc
	done   chan error
}

var testUnits = func() []UnitSpec {
	var out []UnitSpec
	for i := range 8 {
		out = append(out, UnitSpec{Unit: protocol.Unit{Fold: fmt.Sprintf("fold%d", i)}, Standbys: 1})
	}
	return out
}()

func join(t *testing.T, nc *nats.Conn, node string, floor ...func(context.Context) (protocol.Revision, error)) (*member, error) {
	t.Helper()
	r := &recordingRunner{roles: map[protocol.Unit]placed{}, notReady: map[protocol.Unit]bool{}}
	o := Options{Name: "t", Node: node, Advertise: node + ":8080", Units: testUnits,
		Heartbeat: 50 * time.Millisecond, NodeTTL: 400 * time.Millisecond, Runner: r,
		Logger: testLogger}
	if len(floor) > 0 {
		o.Floor = floor[0]
	}
	f, err := Join(context.Background(), nc, o)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m := &member{f: f, r: r, cancel: cancel, done: make(chan error, 1)}
	go func() { m.done <- f.Run(ctx) }()
	t.Cleanup(func() { m.stop() })
	return m, nil
}

// stop ends the member's Run without leaving (as a killed process would
// leave its record and claims behind).
func (m *member) stop() error {
	if m.cancel == nil {
		return nil
	}
	m.cancel()
	m.cancel = nil
	return <-m.done
}

func mustJoin(t *testing.T, nc *nats.Conn, node string) *member {
	t.Helper()
	m, err := join(t, nc, node)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// waitSettled waits until every unit has exactly one owner among ms, the
// one its placement over the live members names, and each owner's runner
// was told so at the register's epoch.
func waitSettled(t *testing.T, ms map[string]*member) map[protocol.Unit]string {
	t.Helper()
	live := slices.Sorted(maps.Keys(ms))
	deadline := time.Now().Add(time.Minute)
	for {
		owners, why := map[protocol.Unit]string{}, ""
		for _, spec := range testUnits {
			u := spec.Unit
			want := protocol.Place(u, live, 1).Owner
			var got []string
			for name, m := range ms {
				if m.r.role(u).role == protocol.RoleOwner {
					got = append(got, name)
				}
			}
			if len(got) != 1 || got[0] != want {
				why = fmt.Sprintf("unit %s: owners %v, want %s", u, got, want)
				break
			}
			owners[u] = want
			if st := ms[want].f.Snapshot(); !slices.ContainsFunc(st.Units, func(s UnitStatus) bool {
				return s.Unit == u && s.Owner == want && s.Epoch == ms[want].r.role(u).epoch
			}) {
				why = fmt.Sprintf("unit %s: %s's snapshot does not show it owner at its epoch", u, want)
				break
			}
		}
		if why == "" {
			return owners
		}
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not settle within a minute: %s", why)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestFleetPlacesEveryUnitOnce: three nodes place eight units, each owned
// by its placement's owner with one standby elsewhere; a node killed
// (its record left behind) loses its units to their standbys after the
// node TTL, each under a new epoch; a node leaving hands its units over
// at once and deletes its record.
func TestFleetPlacesEveryUnitOnce(t *testing.T) {
	_, nc := natstest.Start(t)
	ms := map[string]*member{}
	for _, n := range []string{"n1", "n2", "n3"} {
		ms[n] = mustJoin(t, nc, n)
	}
	owners := waitSettled(t, ms)
	for _, spec := range testUnits {
		standbys := 0
		for _, m := range ms {
			if m.r.role(spec.Unit).role == protocol.RoleStandby {
				standbys++
			}
		}
		if standbys != 1 {
			t.Errorf("unit %s: %d standbys, want 1", spec.Unit, standbys)
		}
	}

	// Kill one: its units go to their first standbys, under new epochs.
	victim := owners[testUnits[0].Unit]
	was := map[protocol.Unit]protocol.Revision{}
	for u, o := range owners {
		if o == victim {
			was[u] = ms[o].r.role(u).epoch
		}
	}
	killedAt := time.Now()
	if err := ms[victim].stop(); err != nil {
		t.Fatal(err)
	}
	delete(ms, victim)
	after := waitSettled(t, ms)
	t.Logf("units of %s taken over %v after it stopped beating (node_ttl 400ms)", victim, time.Since(killedAt).Round(time.Millisecond))
	for u, e := range was {
		if got := ms[after[u]].r.role(u).epoch; got <= e {
			t.Errorf("unit %s taken over at epoch %d, not above the dead owner's %d", u, got, e)
		}
	}
	if n := ms[after[testUnits[0].Unit]].f.Snapshot().Takeovers; n == 0 {
		t.Error("the new owner counts no takeover")
	}

	// One leaves: every unit it owns is handed over before Leave returns.
	leaver := after[testUnits[0].Unit]
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := ms[leaver].f.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	for _, spec := range testUnits {
		if r := ms[leaver].r.role(spec.Unit); r.role != protocol.RoleNone {
			t.Errorf("after leaving, %s still folds %s as %s", leaver, spec.Unit, r.role)
		}
	}
	ms[leaver].stop()
	delete(ms, leaver)
	waitSettled(t, ms)
}

// TestFleetRefusesASecondProcessWithOneName: a second process joining
// under a name whose record beats is refused; one whose record stopped
// beating takes the name over after the node TTL, and the first, resumed,
// finds it superseded and drops its units.
func TestFleetRefusesASecondProcessWithOneName(t *testing.T) {
	_, nc := natstest.Start(t)
	first := mustJoin(t, nc, "n1")
	waitSettled(t, map[string]*member{"n1": first})
	if _, err := join(t, nc, "n1"); !errors.Is(err, ErrNameInUse) {
		t.Fatalf("a second process under a beating name: %v, want ErrNameInUse", err)
	}
	if err := first.stop(); err != nil {
		t.Fatal(err)
	}
	second := mustJoin(t, nc, "n1")
	waitSettled(t, map[string]*member{"n1": second})
	for _, spec := range testUnits {
		if e1, e2 := first.r.role(spec.Unit).epoch, second.r.role(spec.Unit).epoch; e2 <= e1 {
			t.Errorf("unit %s: the second process owns it at epoch %d, not above the first's %d", spec.Unit, e2, e1)
		}
	}
	// The first process comes back (a pause ended): it must not act.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	err := first.f.Run(ctx)
	if !errors.Is(err, ErrSuperseded) {
		t.Fatalf("the first process resumed: Run = %v, want ErrSuperseded", err)
	}
	for _, spec := range testUnits {
		if r := first.r.role(spec.Unit); r.role != protocol.RoleNone {
			t.Errorf("the superseded process still folds %s as %s", spec.Unit, r.role)
		}
	}
}

// TestFleetHandsOverOnlyToACaughtUpNode: a node that joins is the
// placement's owner of some units; their owners hand them over only once
// it reports them caught up.
func TestFleetHandsOverOnlyToACaughtUpNode(t *testing.T) {
	_, nc := natstest.Start(t)
	ms := map[string]*member{"n1": mustJoin(t, nc, "n1"), "n2": mustJoin(t, nc, "n2")}
	waitSettled(t, ms)
	var takes []protocol.Unit
	for _, spec := range testUnits {
		if protocol.Place(spec.Unit, []string{"n1", "n2", "n3"}, 1).Owner == "n3" {
			takes = append(takes, spec.Unit)
		}
	}
	if len(takes) == 0 {
		t.Fatal("n3 would own no unit: pick other unit names")
	}
	// n3 joins not caught up on anything.
	r := &recordingRunner{roles: map[protocol.Unit]placed{}, notReady: map[protocol.Unit]bool{}}
	for _, spec := range testUnits {
		r.notReady[spec.Unit] = true
	}
	f, err := Join(context.Background(), nc, Options{Name: "t", Node: "n3", Units: testUnits, Heartbeat: 50 * time.Millisecond,
		NodeTTL: 400 * time.Millisecond, Runner: r, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- f.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(time.Minute)
	for r.role(takes[0]).role != protocol.RoleStandby {
		if time.Now().After(deadline) {
			t.Fatalf("n3 never warms up %s (role %s)", takes[0], r.role(takes[0]).role)
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(500 * time.Millisecond) // several beats: nothing may move to a node not caught up
	for _, u := range takes {
		if r.role(u).role == protocol.RoleOwner {
			t.Fatalf("%s was handed to n3 before it caught up", u)
		}
	}
	r.mu.Lock()
	clear(r.notReady)
	r.mu.Unlock()
	ms["n3"] = &member{f: f, r: r}
	waitSettled(t, ms)
}

// TestFleetReplacesACorruptClaim: a claim register holding bytes that do
// not parse counts as unowned: its unit's placement owner claims over it
// (a bad write never wedges a unit); a node record that does not parse
// counts its node dead.
func TestFleetReplacesACorruptClaim(t *testing.T) {
	_, nc := natstest.Start(t)
	first := mustJoin(t, nc, "n1")
	waitSettled(t, map[string]*member{"n1": first})
	u := testUnits[0].Unit
	was := first.r.role(u).epoch
	if _, err := first.f.kv.Put(context.Background(), claimKey(u), []byte("not json")); err != nil {
		t.Fatal(err)
	}
	if _, err := first.f.kv.Put(context.Background(), nodeKey("ghost"), []byte("{{{")); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for first.r.role(u).epoch <= was+1 || first.r.role(u).role != protocol.RoleOwner {
		if time.Now().After(deadline) {
			t.Fatalf("the corrupt claim of %s was never replaced: role %+v", u, first.r.role(u))
		}
		time.Sleep(10 * time.Millisecond)
	}
	if live := first.f.Snapshot().Live; !slices.Equal(live, []string{"n1"}) {
		t.Errorf("live nodes %v: a record that does not parse counts as alive", live)
	}
}
