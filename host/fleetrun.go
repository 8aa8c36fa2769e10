package host

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/protocol"
)

// A host in a fleet (Options.Fleet) runs only the folds placed on it: the
// fleet (package fleet) tells it each fold's role, and one controller per
// fold starts the fold's run when it has one and stops it when it has
// none. A fold keeps its store and plugin open either way (only its watch
// stops): a unit that comes back is warm.

// unitOf is the fleet's unit a fold runs (the fold, or one partition of
// it).
func unitOf(f *Fold) protocol.Unit { return f.Options().Unit() }

// foldSlot is one fold as the fleet drives it.
type foldSlot struct {
	f    *Fold
	wake chan struct{} // cap 1: the wanted role changed

	mu   sync.Mutex
	role protocol.Role
}

// roleNow is the fold's role on this node.
func (s *foldSlot) roleNow() protocol.Role {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.role
}

// fleetRunner is the fleet's Runner over the host's folds.
type fleetRunner struct {
	slots map[protocol.Unit]*foldSlot
}

var _ fleet.Runner = (*fleetRunner)(nil)

func newFleetRunner(folds []*Fold) *fleetRunner {
	r := &fleetRunner{slots: map[protocol.Unit]*foldSlot{}}
	for _, f := range folds {
		r.slots[unitOf(f)] = &foldSlot{f: f, wake: make(chan struct{}, 1)}
	}
	return r
}

// SetRole implements fleet.Runner: the fold takes the role at once (a
// standby's publisher stops publishing, an owner's starts), and its
// controller starts or stops its run.
func (r *fleetRunner) SetRole(u protocol.Unit, role protocol.Role, epoch protocol.Revision) {
	s := r.slots[u]
	if s == nil {
		return
	}
	if role != protocol.RoleNone {
		s.f.SetRole(role, epoch)
	} else {
		s.f.SetRole(protocol.RoleStandby, 0) // stopping: nothing more is published meanwhile
	}
	s.mu.Lock()
	s.role = role
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// Progress implements fleet.Runner.
func (r *fleetRunner) Progress(u protocol.Unit) (uint64, bool, string) {
	if s := r.slots[u]; s != nil {
		return s.f.Progress()
	}
	return 0, false, ""
}

// control runs the fold while it has a role, until ctx ends; it returns
// the failure the fold's last run ended in, if any.
func (s *foldSlot) control(ctx context.Context) error {
	var cancel context.CancelFunc
	var done chan error
	var last error
	stop := func() {
		cancel()
		if err := <-done; err != nil {
			last = err
		}
		cancel, done = nil, nil
	}
	for {
		s.mu.Lock()
		role := s.role
		s.mu.Unlock()
		switch {
		case role != protocol.RoleNone && cancel == nil:
			var rctx context.Context
			rctx, cancel = context.WithCancel(ctx)
			done = make(chan error, 1)
			go func() { done <- s.f.Run(rctx) }()
		case role == protocol.RoleNone && cancel != nil:
			stop()
			s.f.MarkElsewhere()
		}
		select {
		case <-ctx.Done():
			if cancel != nil {
				stop()
			}
			return last
		case <-s.wake:
		}
	}
}

// runFleet is Run for a host in a fleet: the fleet's loop and a
// controller per fold, until ctx ends; then the host hands its folds over
// (bounded by LeaveTimeout) and stops them.
func (h *Host) runFleet(ctx context.Context) error {
	cctx, stopControllers := context.WithCancel(context.Background())
	defer stopControllers()
	var wg sync.WaitGroup
	errs := make([]error, 0, len(h.runner.slots))
	var mu sync.Mutex
	for u, s := range h.runner.slots {
		wg.Go(func() {
			if err := s.control(cctx); err != nil {
				mu.Lock()
				errs = append(errs, fmt.Errorf("fold %s stopped on an error: %w", u.Fold, err))
				mu.Unlock()
			}
		})
	}
	fctx, stopFleet := context.WithCancel(context.Background())
	defer stopFleet()
	fleetDone := make(chan error, 1)
	go func() { fleetDone <- h.fleet.Run(fctx) }()
	var fleetErr error
	select {
	case <-ctx.Done():
		lctx, cancel := context.WithTimeout(context.Background(), h.o.Fleet.LeaveTimeout)
		if err := h.fleet.Leave(lctx); err != nil {
			h.log.Warn("leaving the fleet did not complete", "err", err)
		}
		cancel()
		stopFleet()
		fleetErr = <-fleetDone
	case fleetErr = <-fleetDone:
		if fleetErr != nil {
			fleetErr = fmt.Errorf("fleet %s: %w", h.o.Fleet.Name, fleetErr)
		}
	}
	stopControllers()
	wg.Wait()
	return errors.Join(append(errs, fleetErr)...)
}

// Fleet is the host's fleet membership, nil without a fleet (or before
// Start).
func (h *Host) Fleet() *fleet.Fleet { return h.fleet }

// joinFleet takes this node's place in its fleet (the last step of
// Start): every fold waits, placed elsewhere, until the fleet gives it a
// role.
func (h *Host) joinFleet(ctx context.Context) error {
	fl := h.o.Fleet
	h.runner = newFleetRunner(h.folds)
	var units []fleet.UnitSpec
	for _, f := range h.folds {
		f.MarkElsewhere()
		units = append(units, fleet.UnitSpec{Unit: unitOf(f), Standbys: f.Options().Standbys})
	}
	var err error
	h.fleet, err = fleet.Join(ctx, h.nc, fleet.Options{Name: fl.Name, Node: h.o.Admin.Node, Advertise: fl.Advertise, Units: units,
		Heartbeat: fl.Heartbeat, NodeTTL: fl.NodeTTL, Replicas: fl.Replicas, RequestTimeout: h.o.NATS.RequestTimeout,
		Runner: h.runner, Logger: h.log, Floor: h.epochFloor})
	if err != nil {
		return err
	}
	h.reads = &fleetReads{h: h, local: h.apiHandler()}
	if err := h.reads.serve(context.Background()); err != nil {
		return err
	}
	return h.metrics.Registry().Register(fleetCollector{h.fleet, h.reads})
}

// epochFloor is the highest epoch any fold's owner left in its effects
// stream (claim mark) or artifact pointer: a fleet bucket this node makes
// numbers its epochs above it (fleet.Options.Floor).
func (h *Host) epochFloor(ctx context.Context) (protocol.Revision, error) {
	var floor protocol.Revision
	for _, f := range h.folds {
		e, err := f.EpochFloor(ctx)
		if err != nil {
			return 0, err
		}
		floor = max(floor, e)
	}
	return floor, nil
}

// placement is where a fold's partitions run (httpapi.Options.Placement):
// this node's, without a fleet; else the fleet's view of them.
func (h *Host) placement(hf httpapi.Fold) []httpapi.PartitionStatus {
	unit, _ := h.unitNamed(hf.Name())
	if h.fleet == nil {
		st := hf.Status()
		return []httpapi.PartitionStatus{{Partition: unit.Partition, Owner: h.o.Admin.Node, Standbys: []string{}, State: string(st.State), Cursor: st.Cursor}}
	}
	snap := h.fleet.Snapshot()
	var out []httpapi.PartitionStatus
	for _, u := range snap.Units {
		if u.Unit != unit {
			continue
		}
		standbys := u.Standbys
		if standbys == nil {
			standbys = []string{}
		}
		out = append(out, httpapi.PartitionStatus{Partition: u.Unit.Partition, Owner: u.Owner, Epoch: uint64(u.Epoch), Standbys: standbys,
			State: u.State, Cursor: u.Cursor, To: u.To, Advertise: snap.Advertise[u.Owner]})
	}
	return out
}

// The fleet's own series (one set per node): claims won, takeovers among
// them, and the nodes this node holds alive.
var (
	fleetClaimsDesc = prometheus.NewDesc("foldhost_fleet_claims_total",
		"Claims of a unit this node won (its own first claims, hand-overs to it and takeovers).", nil, nil)
	fleetTakeoversDesc = prometheus.NewDesc("foldhost_fleet_takeovers_total",
		"Claims this node won over an owner taken for dead (it stopped beating for node_ttl) or an earlier process of a node's name.", nil, nil)
	fleetLiveDesc = prometheus.NewDesc("foldhost_fleet_live_nodes",
		"The nodes of the fleet this node holds alive (itself included), units are placed on.", nil, nil)
)

// The fleet's reads, and its units by this node's role.
var (
	fleetReadsForwardedDesc = prometheus.NewDesc("foldhost_fleet_reads_forwarded_total",
		"Reads of a fold this node does not fold, forwarded to the fold's owner, by outcome: answered (by the owner, whatever its status), no_owner (503: the unit had none), failed (the owner did not answer, or broke off).", []string{"outcome"}, nil)
	fleetReadsAnsweredDesc = prometheus.NewDesc("foldhost_fleet_reads_answered_for_others_total",
		"Reads other nodes forwarded to this one that it answered.", nil, nil)
	fleetUnitsDesc = prometheus.NewDesc("foldhost_fleet_units",
		"The fleet's units this node holds, by role (owner, standby).", []string{"role"}, nil)
)

// fleetCollector exports the fleet's series from its snapshot.
type fleetCollector struct {
	f     *fleet.Fleet
	reads *fleetReads
}

func (c fleetCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- fleetClaimsDesc
	ch <- fleetTakeoversDesc
	ch <- fleetLiveDesc
	ch <- fleetReadsForwardedDesc
	ch <- fleetReadsAnsweredDesc
	ch <- fleetUnitsDesc
}

func (c fleetCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.f.Snapshot()
	ch <- prometheus.MustNewConstMetric(fleetClaimsDesc, prometheus.CounterValue, float64(s.Claims))
	ch <- prometheus.MustNewConstMetric(fleetTakeoversDesc, prometheus.CounterValue, float64(s.Takeovers))
	ch <- prometheus.MustNewConstMetric(fleetLiveDesc, prometheus.GaugeValue, float64(len(s.Live)))
	for outcome, n := range map[string]uint64{"answered": c.reads.forwarded.Load(), "no_owner": c.reads.noOwner.Load(), "failed": c.reads.failed.Load()} {
		ch <- prometheus.MustNewConstMetric(fleetReadsForwardedDesc, prometheus.CounterValue, float64(n), outcome)
	}
	ch <- prometheus.MustNewConstMetric(fleetReadsAnsweredDesc, prometheus.CounterValue, float64(c.reads.answered.Load()))
	roles := map[protocol.Role]int{protocol.RoleOwner: 0, protocol.RoleStandby: 0}
	for _, u := range s.Units {
		if _, ok := roles[u.Role]; ok {
			roles[u.Role]++
		}
	}
	for role, n := range roles {
		ch <- prometheus.MustNewConstMetric(fleetUnitsDesc, prometheus.GaugeValue, float64(n), role.String())
	}
}
