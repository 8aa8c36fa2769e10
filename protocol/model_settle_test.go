package protocol

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// Model: a prefix-scoped watch settles what it delivered (RATIONALE.md,
// "Filtered consumers and the settle probe").
//
// What is modelled. A bucket is a log of up to stWrites messages, each of a
// key in the fold's scope (a; b too when configured) or outside it (o). Retention evicts the
// oldest retained message at any moment (a discard-old limit: current values
// go too). The fold's consumer is a filtered one on the server: it scans
// revisions in order from its position and sends the messages of the scope
// into the client's buffer (one message), silently skipping whatever is no
// longer retained, as NATS clamps a consumer that lags behind retention. The
// watcher hands buffered messages on; the fold applies each as it arrives
// and commits it with its cursor, unsettled ([Settle] with the watcher's
// settled point).
//
// The settle probe runs on the watcher, in three steps any other step may
// interleave with (except a hand-on: the watcher is busy): (A) a retention
// reading judged by [SettleDelivered] against the highest revision handed on
// (the consumer keeps scanning); an expired verdict ends the watch
// (detected); (B) the lookup of the scope's first retained message at or
// above settled+1, when the reading's head is above the settled point; (C) a
// second reading, and [SettleQuiet] with the head of (A). The settled point
// goes to the fold with each step, as the settle mark does.
//
// A crash may strike at any moment: the buffer and the probe are lost, the
// fold and its cursor stay. The restart checks the cursor with
// [CheckCursorResume] (an expired verdict is detected) and resumes after its
// position with the settled point there (the resume check settled it).
//
// Properties.
//
//   - Invariant: every message of the scope at or below the committed
//     cursor's settled point ([Cursor.SettledRev]) was applied. A settled
//     point past a message the fold never saw is the silent divergence: the
//     next resume check passes, and nothing ever brings the message back.
//   - Terminal: the fold holds every key of the scope at its last written
//     revision, or the divergence is detected (the watch ended expired), or
//     the next check would detect it (a resume check of the cursor, or the
//     next probe's reading, refuses).
//
// Abstractions. Supersession (a per-key history limit, a purge) is not
// modelled: it removes only messages whose key has a later message the
// consumer still delivers, which a settled point may pass without harm (the
// lookup finds the later message, so the settled point stays below it). Age
// expiry behaves like the discard-old eviction modelled here, the settle
// probe's [GapHoldsNoEviction] excepted, which is the whole-bucket guard's
// kernel and model_live_watch_test.go's subject. The loop's batching is not
// modelled (each delivery is its own batch): a settle mark follows the
// deliveries it covers on the same channel, so every batch it reaches is
// complete.
//
// Variants. Guarded (must hold), asserting that clamps, mid-watch and
// restart detections, quiet settles and crashes all occur. Must break, each
// by forging a kernel's input: the deliveries settled without a reading,
// the quiet settle without its second reading, the quiet settle with a head
// read after the lookup, the resume checked at the position instead of the
// settled point, and a commit that drops the unsettled flag.
//
// Bounds: 4 writes of a or o, a one-message buffer, 2 probes (6 steps), one
// crash: 0.6M states, a few seconds.

const stWrites = 4

type stMutation uint8

const (
	stGuarded          stMutation = iota
	stNoReading                   // SettleDelivered's reading forged to "nothing evicted"
	stNoSecondReading             // SettleQuiet's second reading forged to "nothing evicted"
	stHeadAfterLookup             // SettleQuiet given a head read after the lookup
	stResumeAtPosition            // the resume checked at the cursor's position
	stCommitSettled               // commits drop the unsettled flag
)

type stState struct {
	n     uint8           // messages written: revisions 1..n
	log   [stWrites]uint8 // the key of revision r at r-1: 0, 1 in scope, 2 outside
	first uint8           // first retained revision (eviction from the head)
	pos   uint8           // the consumer's next revision to scan
	buf   uint8           // the buffered revision, 0: empty
	front uint8           // highest revision handed on
	sett  uint8           // the watcher's settled point
	pstep uint8           // probe step done: 0 none, 1 after (A), 2 after (B)
	phead uint8           // (A)'s head
	pnext uint8           // (B)'s answer
	steps uint8           // probe steps taken
	ended bool            // the watch ended expired, or the restart refused: detected
	crash uint8           // crashes so far
	fold  [2]uint8        // the fold: last applied revision per key of the scope
	seen  uint8           // bit r-1: revision r applied
	cur   Cursor          // the committed cursor
}

// stKinds are the step labels (prefixes) a guarded run must reach: it is
// not vacuous.
var stKinds = []string{"consumer skips evicted", "probe (A): expired", "crash; the restart's resume check refuses", "probe (C): settled past", "crash; resume"}

func (s *stState) inScope(r uint8) bool { return s.log[r-1] != 2 }

func (s *stState) retention() Retention {
	return Retention{Window: Window{First: Revision(s.first), Last: Revision(s.n)}, DiscardOldLimit: true}
}

// commit is the fold's commit of its cursor with the watcher's settled point.
func (c stConfig) commit(s *stState) {
	s.cur = Settle(s.cur, Revision(s.sett), 0, true)
	if c.mutation == stCommitSettled {
		s.cur = Settle(s.cur, s.cur.Rev, 0, true)
	}
}

type stConfig struct {
	mutation  stMutation
	scopeKeys uint8 // keys of the scope written to: 1 (a) or 2 (a, b)
	probes    uint8 // probe steps allowed: 3 per probe
	crashes   uint8
}

func (c stConfig) next(s stState) []step[stState] {
	var out []step[stState]
	add := func(label string, to stState) { out = append(out, step[stState]{label, to}) }
	if s.n < stWrites {
		for k := uint8(0); k < 3; k++ {
			if k < 2 && k >= c.scopeKeys {
				continue
			}
			t := s
			t.log[t.n] = k
			t.n++
			add(fmt.Sprintf("write %c at %d", "abo"[k], t.n), t)
		}
	}
	if s.first <= s.n {
		t := s
		t.first++
		add(fmt.Sprintf("evict %d", s.first), t)
	}
	if s.ended {
		return out
	}
	if s.pos <= s.n && s.buf == 0 {
		t := s
		switch r := t.pos; {
		case r < t.first:
			add(fmt.Sprintf("consumer skips evicted %d", r), stAdvance(t))
		case t.inScope(r):
			t.buf = r
			add(fmt.Sprintf("consumer sends %d", r), stAdvance(t))
		default:
			add(fmt.Sprintf("consumer filters out %d", r), stAdvance(t))
		}
	}
	if s.buf != 0 && s.pstep == 0 {
		t := s
		r := t.buf
		t.buf = 0
		t.fold[t.log[r-1]] = r
		t.seen |= 1 << (r - 1)
		t.front = max(t.front, r)
		t.cur = CursorAfterBatch(t.cur, []Revision{Revision(r)}, 0)
		c.commit(&t)
		add(fmt.Sprintf("hand on %d", r), t)
	}
	if s.steps < c.probes {
		t := s
		t.steps++
		switch s.pstep {
		case 0: // (A)
			r := t.retention()
			if c.mutation == stNoReading {
				r.First = Revision(t.sett) + 1
			}
			settled, ok := SettleDelivered(Revision(t.sett), Revision(t.front), r, 0, 0)
			if !ok {
				t.ended = true
				add("probe (A): expired", t)
				break
			}
			t.sett = uint8(settled)
			c.commit(&t)
			if t.n > t.sett {
				t.pstep, t.phead = 1, t.n
			}
			add(fmt.Sprintf("probe (A): settled %d", t.sett), t)
		case 1: // (B)
			t.pnext = 0
			for r := max(t.sett+1, t.first); r <= t.n; r++ {
				if t.inScope(r) {
					t.pnext = r
					break
				}
			}
			t.pstep = 2
			add(fmt.Sprintf("probe (B): next of the scope %d", t.pnext), t)
		case 2: // (C)
			after, head := Revision(t.first), Revision(t.phead)
			if c.mutation == stNoSecondReading {
				after = Revision(t.sett) + 1
			}
			if c.mutation == stHeadAfterLookup {
				head = Revision(t.n)
			}
			q := uint8(SettleQuiet(Revision(t.sett), head, Revision(t.pnext), after))
			label := fmt.Sprintf("probe (C): settled %d", q)
			if q > t.sett {
				label = fmt.Sprintf("probe (C): settled past %d to %d", t.sett, q)
			}
			t.sett, t.pstep = q, 0
			c.commit(&t)
			add(label, t)
		}
	}
	if s.crash < c.crashes {
		t := s
		t.crash++
		t.buf, t.pstep = 0, 0
		v := CheckCursorResume(t.cur, t.retention().Window)
		if c.mutation == stResumeAtPosition {
			v = CheckResume(t.cur.Rev, t.retention().Window)
		}
		if v == ResumeExpired {
			t.ended = true
			add("crash; the restart's resume check refuses", t)
		} else {
			t.pos = uint8(t.cur.Rev) + 1
			t.front, t.sett = uint8(t.cur.Rev), uint8(t.cur.Rev)
			add(fmt.Sprintf("crash; resume after %d", t.cur.Rev), t)
		}
	}
	return out
}

func stAdvance(s stState) stState { s.pos++; return s }

func (c stConfig) invariant(s stState) error {
	for r := uint8(1); r <= uint8(s.cur.SettledRev()) && r <= s.n; r++ {
		if s.inScope(r) && s.seen&(1<<(r-1)) == 0 {
			return fmt.Errorf("silent divergence: the cursor %v is settled past revision %d of the scope, which the fold never applied", s.cur, r)
		}
	}
	return nil
}

func (c stConfig) final(s stState) error {
	if s.ended {
		return nil
	}
	var want [2]uint8
	for r := uint8(1); r <= s.n; r++ {
		if s.inScope(r) {
			want[s.log[r-1]] = r
		}
	}
	if s.fold == want {
		return nil
	}
	if CheckCursorResume(s.cur, s.retention().Window) == ResumeExpired {
		return nil // the next start detects it
	}
	if _, ok := SettleDelivered(Revision(s.sett), Revision(s.front), s.retention(), 0, 0); !ok {
		return nil // the next probe detects it
	}
	return fmt.Errorf("silent divergence: the fold holds %v, the bucket %v, and nothing will tell", s.fold, want)
}

func (c stConfig) model() model[stState] {
	return model[stState]{
		init: []stState{{first: 1, pos: 1}},
		next: c.next,
		rank: func(s stState) []int {
			return []int{int(s.crash), int(s.n), int(s.first), int(s.steps), int(s.pos), int(s.front), btoi(s.buf == 0), btoi(s.ended)}
		},
		invariant: c.invariant,
		final:     c.final,
		maxStates: 20_000_000,
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func stRun(t *testing.T, c stConfig) (exploration, map[string]int) {
	t.Helper()
	kinds := map[string]int{}
	m := c.model()
	next := m.next
	m.next = func(s stState) []step[stState] {
		succ := next(s)
		for _, st := range succ {
			for _, k := range stKinds {
				if strings.HasPrefix(st.label, k) {
					kinds[k]++
				}
			}
		}
		return succ
	}
	start := time.Now()
	res := explore(t, m)
	t.Logf("%d states, %d edges in %v", res.states, res.edges, time.Since(start).Round(time.Millisecond))
	return res, kinds
}

func stDefault() stConfig { return stConfig{scopeKeys: 1, probes: 6, crashes: 1} }

func TestModelSettleGuarded(t *testing.T) {
	res, kinds := stRun(t, stDefault())
	mustHold(t, "settle probe", res)
	t.Logf("edges by kind: %v", kinds)
	for _, k := range stKinds {
		if kinds[k] == 0 {
			t.Errorf("vacuous: no %q step in the explored space", k)
		}
	}
}

func TestModelSettleBreaks(t *testing.T) {
	for _, tc := range []struct {
		name string
		m    stMutation
	}{
		{"deliveries settled without a reading", stNoReading},
		{"quiet settle without its second reading", stNoSecondReading},
		{"quiet settle with a head read after the lookup", stHeadAfterLookup},
		{"resume checked at the position", stResumeAtPosition},
		{"commits drop the unsettled flag", stCommitSettled},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			c := stDefault()
			c.mutation = tc.m
			res, _ := stRun(t, c)
			mustBreak(t, tc.name, res, "silent divergence")
		})
	}
}
