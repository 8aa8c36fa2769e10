package protocol

import (
	"errors"
	"fmt"
	"testing"
)

// Model: the ownership of one unit in a fleet (placement.go).
//
// What is modelled: three nodes (a, b, c) and one unit. Its claim register
// (KV, changed only by compare-and-set; every write's revision is one more
// than the last: the epoch) and the claim mark the owner writes in the
// effects stream before it publishes (the server refuses a batch whose
// expected mark is not the subject's last, and a mark write conditioned on
// a mark that moved; the owner writes its mark only over a lower epoch).
// Each node runs one process (an incarnation) at a time; a process reads
// the register, decides with the real Decide and RoleOf on what it read
// (liveness as the environment makes it look: a paused process looks
// dead), compare-and-sets the register, writes its mark, publishes, and
// catches up (becomes ready), in any interleaving. The environment pauses
// a process and resumes it, crashes a node and restarts it (a new
// incarnation), starts a second process under a paused node's name (the
// paused one becomes a ghost, still able to act when it resumes: two
// processes with one name), and makes a node leave (SIGTERM: it hands its
// unit over, then exits), each within a budget.
//
// Properties:
//   - invariant "fenced": the server accepts a publish only from the
//     process that wrote the current mark (a paused owner resumed, a ghost,
//     a node restarted under its name: refused once another process
//     claimed and marked), and the mark's epoch never goes back;
//   - invariant "handover": an owner that is not leaving hands the unit
//     only to a node that has caught up;
//   - invariant "leaving": a leaving process never claims;
//   - final "owned": once nothing can happen, while a node runs and is not
//     leaving, the register names a running process in its current
//     incarnation, which knows it owns the unit and holds the mark: the
//     unit is never left without an owner, nor with one fenced out;
//   - final "placed": that owner is the placement's owner over the running
//     nodes (every running node has caught up by then).
//
// Mutations, each forging an input of the kernel (Decide, RoleOf,
// FenceMark) or a step of the node around it, which the explorer must
// catch:
//   - adoptOldClaim: a restarted node takes a claim of its name by an
//     earlier incarnation as its own (Decide told the claim's incarnation is
//     its own) and publishes under the old epoch beside its ghost: "fenced";
//   - refreshOnRefusal: a process whose publish the server refused adopts
//     the current mark's epoch and publishes again: "fenced";
//   - handOverUnready: the owner is told its target is ready: "handover";
//   - leavingDecidesAsStaying: a leaving process decides as if it stayed:
//     "leaving";
//   - ownerLiveByName: the owner counts as alive when a process of its
//     name runs, whatever its incarnation: a crashed owner's claim is never
//     taken over, "owned";
//   - waitForDeadTarget: a hand-over's target counts as alive though it
//     crashed: nobody claims, "owned";
//   - markOverNewer: FenceMark is told no mark exists when a newer one
//     does, and the process writes its own over it (the newer owner is then
//     fenced out of its own unit): "fenced".

const (
	pmNodes   = 3
	pmNone    = -1
	pmRunning = 1
	pmPaused  = 2
	pmDown    = 0
)

var pmNames = [pmNodes]string{"a", "b", "c"}

var pmUnit = Unit{Fold: "routes", Partition: 0}

// pmClaim is the register's value in the model (indices, not names).
type pmClaim struct {
	owner, inc, to int8 // owner and to: a node or pmNone; inc: the owner's incarnation
	epoch          int8
}

// pmProc is one process of a node.
type pmProc struct {
	up      int8    // pmRunning, pmPaused, pmDown
	inc     int8    // its incarnation
	seen    pmClaim // the register as it last read it
	epoch   int8    // the epoch it believes it owns the unit at (0: not the owner)
	marked  bool    // it wrote (or found) its mark
	ready   bool    // it has caught up
	leaving bool
	pubs    int8 // publishes attempted
}

type pmState struct {
	reg      pmClaim
	mark     int8 // the mark's epoch in the effects stream (0: none)
	marks    int8 // mark writes so far
	markNode int8 // the process that wrote it: node and incarnation
	markInc  int8
	node     [pmNodes]pmProc
	ghost    pmProc // a paused process a second one replaced under its name
	ghostOf  int8   // its node (pmNone: no ghost)
	env      int8   // environment events so far
	fenced   int8   // beliefs dropped on a refusal
	bad      string // a violated invariant, recorded by the step that broke it
	// budgets used
	pauses, crashes, twins, leaves int8
}

type pmConfig struct {
	pauses, crashes, twins, leaves int8 // environment budgets
	maxPubs                        int8 // publishes per process

	adoptOldClaim, refreshOnRefusal, handOverUnready, leavingDecidesAsStaying bool
	ownerLiveByName, waitForDeadTarget, markOverNewer                         bool
}

func (c pmConfig) live(s pmState) []string {
	var out []string
	for i, p := range s.node {
		if p.up == pmRunning {
			out = append(out, pmNames[i])
		}
	}
	return out
}

func name(i int8) string {
	if i == pmNone {
		return ""
	}
	return pmNames[i]
}

func index(n string) int8 {
	for i, m := range pmNames {
		if m == n {
			return int8(i)
		}
	}
	return pmNone
}

// view is the UnitView process p (of node i) decides on.
func (c pmConfig) view(s pmState, i int8, p pmProc) UnitView {
	live := c.live(s)
	seen := p.seen
	v := UnitView{
		Unit: pmUnit, Me: pmNames[i], Incarnation: fmt.Sprint(p.inc), Live: live, Standbys: 1, Leaving: p.leaving,
		Claim: Claim{Owner: name(seen.owner), Incarnation: fmt.Sprint(seen.inc), To: name(seen.to), Epoch: Revision(seen.epoch)},
	}
	if seen.owner != pmNone {
		o := s.node[seen.owner]
		v.OwnerLive = o.up == pmRunning && (o.inc == seen.inc || c.ownerLiveByName)
	}
	if c.adoptOldClaim && seen.owner == i {
		v.Claim.Incarnation = v.Incarnation
	}
	if c.waitForDeadTarget && seen.owner == pmNone && seen.to != pmNone && s.node[seen.to].up != pmRunning {
		v.Live = append(v.Live, name(seen.to))
	}
	if c.leavingDecidesAsStaying {
		v.Leaving = false
	}
	if t := Place(pmUnit, live, 1).Owner; t != "" {
		v.TargetReady = s.node[index(t)].ready || c.handOverUnready
	}
	return v
}

// procSteps are what process p of node i can do (ghost: the ghost).
func (c pmConfig) procSteps(s pmState, i int8, ghost bool) []step[pmState] {
	p := s.node[i]
	who := pmNames[i]
	if ghost {
		p, who = s.ghost, pmNames[i]+"'"
	}
	if p.up != pmRunning {
		return nil
	}
	set := func(s pmState, q pmProc) pmState {
		if ghost {
			s.ghost = q
		} else {
			s.node[i] = q
		}
		return s
	}
	var out []step[pmState]
	add := func(label string, to pmState) { out = append(out, step[pmState]{label: who + " " + label, to: to}) }

	if p.seen != s.reg {
		// The process takes the role the register gives it (RoleOf), as
		// the host does: the owner's at the register's epoch, or none.
		q := p
		q.seen = s.reg
		switch owner := RoleOf(c.view(s, i, q)) == RoleOwner; {
		case owner && q.epoch != s.reg.epoch:
			q.epoch, q.marked = s.reg.epoch, false
		case !owner && q.epoch != 0:
			q.epoch, q.marked = 0, false
		}
		add(fmt.Sprintf("reads the register (epoch %d)", s.reg.epoch), set(s, q))
	}
	if p.seen.epoch < 0 {
		return out // a new process reads the register before anything else
	}
	v := c.view(s, i, p)
	switch d := Decide(v); d.Move {
	case MoveClaim:
		t, q := s, p
		if s.reg.epoch != p.seen.epoch {
			q.seen = s.reg
			add("claims, but the register moved", set(t, q))
			break
		}
		if p.leaving && t.bad == "" {
			t.bad = "leaving: a leaving process claimed"
		}
		t.reg = pmClaim{owner: i, inc: p.inc, to: pmNone, epoch: s.reg.epoch + 1}
		q.seen, q.epoch, q.marked = t.reg, t.reg.epoch, false
		add(fmt.Sprintf("claims: epoch %d", t.reg.epoch), set(t, q))
	case MoveHandOver:
		t, q := s, p
		if s.reg.epoch != p.seen.epoch {
			q.seen = s.reg
			add("hands over, but the register moved", set(t, q))
			break
		}
		to := index(d.To)
		if !p.leaving && to != pmNone && !s.node[to].ready && t.bad == "" {
			t.bad = "handover: the unit went to a node that had not caught up"
		}
		t.reg = pmClaim{owner: pmNone, inc: 0, to: to, epoch: s.reg.epoch + 1}
		q.seen, q.epoch, q.marked = t.reg, 0, false
		add(fmt.Sprintf("hands over to %q: epoch %d", d.To, t.reg.epoch), set(t, q))
	}
	if p.epoch > 0 && !p.marked {
		t, q := s, p
		current := Revision(s.mark)
		if c.markOverNewer && s.mark != p.epoch {
			current = 0
		}
		switch FenceMark(current, Revision(p.epoch)) {
		case MarkWrite:
			if p.epoch < s.mark && t.bad == "" {
				t.bad = fmt.Sprintf("fenced: %s wrote its mark at epoch %d over the mark at %d: the fence went back", who, p.epoch, s.mark)
			}
			t.mark, t.markNode, t.markInc = p.epoch, i, p.inc
			t.marks++
			q.marked = true
			add(fmt.Sprintf("writes its mark (epoch %d)", p.epoch), set(t, q))
		case MarkHeld:
			// A mark says its epoch, not which process wrote it: a
			// process that finds its epoch's mark takes it as its own.
			q.marked = true
			add("finds the mark of its epoch", set(t, q))
		case MarkFenced:
			q.epoch, q.marked = 0, false
			t.fenced++
			add(fmt.Sprintf("is fenced: the mark is at epoch %d, its claim %d", s.mark, p.epoch), set(t, q))
		}
	}
	if p.epoch > 0 && p.marked && p.pubs < c.maxPubs {
		t, q := s, p
		q.pubs++
		if s.mark == p.epoch {
			if (s.markNode != i || s.markInc != p.inc) && t.bad == "" {
				t.bad = fmt.Sprintf("fenced: the server accepted a publish of %s (incarnation %d) under the mark of %s (incarnation %d)",
					who, p.inc, pmNames[s.markNode], s.markInc)
			}
			add(fmt.Sprintf("publishes (epoch %d): accepted", p.epoch), set(t, q))
		} else {
			if c.refreshOnRefusal {
				q.epoch = s.mark
			} else {
				q.epoch, q.marked = 0, false
			}
			t.fenced++
			add(fmt.Sprintf("publishes (epoch %d): refused, the mark is at %d", p.epoch, s.mark), set(t, q))
		}
	}
	if !ghost && !p.ready {
		q := p
		q.ready = true
		add("catches up", set(s, q))
	}
	if !ghost && p.leaving && RoleOf(v) == RoleNone && p.seen == s.reg {
		t := s
		t.node[i].up = pmDown
		add("exits", t)
	}
	return out
}

func (c pmConfig) next(s pmState) []step[pmState] {
	if s.bad != "" {
		return nil
	}
	var out []step[pmState]
	for i := range int8(pmNodes) {
		out = append(out, c.procSteps(s, i, false)...)
		if s.ghostOf == i {
			out = append(out, c.procSteps(s, i, true)...)
		}
	}
	env := func(label string, to pmState) {
		to.env++
		out = append(out, step[pmState]{label: label, to: to})
	}
	for i := range int8(pmNodes) {
		p := s.node[i]
		switch {
		case p.up == pmRunning && !p.leaving && s.pauses < c.pauses:
			t := s
			t.node[i].up, t.pauses = pmPaused, s.pauses+1
			env(pmNames[i]+" is paused (SIGSTOP)", t)
		case p.up == pmPaused:
			t := s
			t.node[i].up = pmRunning
			env(pmNames[i]+" resumes (SIGCONT)", t)
		}
		if p.up == pmPaused && s.ghostOf == pmNone && s.twins < c.twins {
			t := s
			t.ghost, t.ghostOf, t.twins = p, i, s.twins+1
			t.node[i] = newProc(p.inc + 1)
			env(pmNames[i]+" starts again under its name while its paused process lives on", t)
		}
		if s.ghostOf == i && s.ghost.up == pmPaused {
			t := s
			t.ghost.up = pmRunning
			env(pmNames[i]+"' (the paused process) resumes", t)
		}
		if p.up == pmRunning && !p.leaving && s.crashes < c.crashes {
			t := s
			t.node[i] = pmProc{up: pmDown, inc: p.inc}
			t.crashes++
			env(pmNames[i]+" is killed (SIGKILL)", t)
		}
		if p.up == pmDown && !p.leaving {
			t := s
			t.node[i] = newProc(p.inc + 1)
			env(pmNames[i]+" restarts", t)
		}
		if p.up == pmRunning && !p.leaving && s.leaves < c.leaves {
			t := s
			t.node[i].leaving, t.leaves = true, s.leaves+1
			env(pmNames[i]+" is asked to leave (SIGTERM)", t)
		}
	}
	return out
}

// newProc is a process just started: it has read nothing yet.
func newProc(inc int8) pmProc {
	return pmProc{up: pmRunning, inc: inc, seen: pmClaim{owner: pmNone, to: pmNone, epoch: -1}}
}

func pmRank(s pmState) []int {
	seen, ready, leaving, exited, pubs := 0, 0, 0, 0, 0
	procs := append(s.node[:], s.ghost)
	for _, p := range procs {
		seen += int(p.seen.epoch)
		pubs += int(p.pubs)
		if p.ready {
			ready++
		}
		if p.leaving {
			leaving++
			if p.up == pmDown {
				exited++
			}
		}
	}
	marked := 0
	for _, p := range procs {
		if p.marked {
			marked++
		}
	}
	return []int{int(s.env), int(s.reg.epoch), int(s.marks), int(s.fenced), seen, marked, ready, exited, pubs}
}

func (c pmConfig) final(s pmState) error {
	if s.bad != "" {
		return errors.New(s.bad)
	}
	var staying []string
	for i, p := range s.node {
		if p.up == pmRunning && !p.leaving {
			staying = append(staying, pmNames[i])
		}
	}
	if len(staying) == 0 {
		return nil
	}
	r := s.reg
	if r.owner == pmNone {
		return fmt.Errorf("owned: nobody owns the unit while %v run (register: to %q, epoch %d)", staying, name(r.to), r.epoch)
	}
	o := s.node[r.owner]
	if o.up != pmRunning || o.inc != r.inc || o.leaving {
		return fmt.Errorf("owned: the register names %s incarnation %d, which is not a running process that stays", pmNames[r.owner], r.inc)
	}
	if o.epoch != r.epoch || !o.marked || s.mark != r.epoch {
		return fmt.Errorf("owned: %s owns the unit at epoch %d but believes %d, marked %v, the mark at %d", pmNames[r.owner], r.epoch, o.epoch, o.marked, s.mark)
	}
	if want := Place(pmUnit, staying, 1).Owner; want != pmNames[r.owner] {
		return fmt.Errorf("placed: %s owns the unit, the placement over %v says %s", pmNames[r.owner], staying, want)
	}
	return nil
}

func runPlacement(t *testing.T, c pmConfig) exploration {
	t.Helper()
	init := pmState{reg: pmClaim{owner: pmNone, to: pmNone}, markNode: pmNone, ghostOf: pmNone}
	for i := range init.node {
		init.node[i] = newProc(1)
	}
	init.ghost = pmProc{seen: init.reg}
	return explore(t, model[pmState]{
		init:      []pmState{init},
		next:      c.next,
		rank:      pmRank,
		invariant: func(s pmState) error { return errorIf(s.bad) },
		final:     c.final,
	})
}

func errorIf(s string) error {
	if s == "" {
		return nil
	}
	return errors.New(s)
}

// TestModelPlacement: with each fault, and pairs of them (a pause, a kill,
// a second process under a paused node's name, a node leaving; all four
// at once take over 5M states), the unit is always fenced to one
// publisher, handed only to caught-up nodes, never claimed by a leaving
// node, and ends owned by its placement's owner.
func TestModelPlacement(t *testing.T) {
	for _, c := range []struct {
		name string
		cfg  pmConfig
	}{
		{"no faults", pmConfig{maxPubs: 1}},
		{"a pause", pmConfig{pauses: 1, maxPubs: 2}},
		{"a kill", pmConfig{crashes: 1, maxPubs: 1}},
		{"two processes with one name", pmConfig{pauses: 1, twins: 1, maxPubs: 1}},
		{"a node leaving", pmConfig{leaves: 1, maxPubs: 1}},
		{"a pause and a kill", pmConfig{pauses: 1, crashes: 1, maxPubs: 1}},
		{"a kill and a node leaving", pmConfig{crashes: 1, leaves: 1, maxPubs: 1}},
		{"a pause and a node leaving", pmConfig{pauses: 1, leaves: 1, maxPubs: 1}},
	} {
		t.Run(c.name, func(t *testing.T) { mustHold(t, c.name, runPlacement(t, c.cfg)) })
	}
}

// TestModelPlacementMutations: each mutation in the file comment is caught
// by the property it names.
func TestModelPlacementMutations(t *testing.T) {
	twins := pmConfig{pauses: 1, twins: 1, maxPubs: 1}
	pause := pmConfig{pauses: 1, maxPubs: 2}
	kill := pmConfig{crashes: 1, maxPubs: 1}
	killLeave := pmConfig{crashes: 1, leaves: 1, maxPubs: 1}
	leave := pmConfig{leaves: 1, maxPubs: 1}
	for _, tc := range []struct {
		name string
		base pmConfig
		set  func(*pmConfig)
		want string
	}{
		{"adoptOldClaim", twins, func(c *pmConfig) { c.adoptOldClaim = true }, "fenced"},
		{"refreshOnRefusal", pause, func(c *pmConfig) { c.refreshOnRefusal = true }, "fenced"},
		{"handOverUnready", kill, func(c *pmConfig) { c.handOverUnready = true }, "handover"},
		{"leavingDecidesAsStaying", leave, func(c *pmConfig) { c.leavingDecidesAsStaying = true }, "leaving"},
		{"ownerLiveByName", kill, func(c *pmConfig) { c.ownerLiveByName = true }, "owned"},
		{"waitForDeadTarget", killLeave, func(c *pmConfig) { c.waitForDeadTarget = true }, "owned"},
		{"markOverNewer", pause, func(c *pmConfig) { c.markOverNewer = true }, "fenced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.base
			tc.set(&c)
			mustBreak(t, tc.name, runPlacement(t, c), tc.want)
		})
	}
}
