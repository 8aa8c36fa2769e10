package protocol

import (
	"fmt"
	"math/bits"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Model: the live floor guard of an All-scope watch (RATIONALE.md, "What the live floor guard assumes").
//
// What is modelled. A NATS KV bucket of two keys (a, b) is a log of messages,
// revision i+1 at index i, each a put (its value is its revision) or a delete
// marker. A writer appends up to `writes` messages (a delete only of a live
// key). Retention evicts messages nondeterministically, in one of two bucket
// kinds, each a configuration from which the model derives the [Retention]
// value it hands the kernels:
//
//   - keeps current values (no MaxAge, TTL or discard-old limit): any
//     superseded message can go, interior ones included (the per-key history
//     limit), and at most once an admin purge of delete markers removes a key
//     whose latest message is a marker, together with all its messages;
//   - evicts current values (MaxAge > 0; discard-old behaves the same here):
//     superseded messages as above, plus AgeOut of the head (oldest retained)
//     message, current value or not.
//
// A reference fold folds every write as it is made, so its fold at revision C
// is the truth at C; an exporter publishes it as the newest artifact at up to
// `exports` nondeterministic moments (the pointer names only the newest).
//
// The node under test starts on the empty bucket with an empty fold and
// consumes the stream in revision order from frontier+1, silently skipping
// whatever is no longer retained (as NATS does when retention overruns a
// consumer). Each delivery is one batch: the fold applies it, the cursor
// moves by [CursorAfterBatch], the watch frontier by [Advance]. The floor
// guard runs in-band before a delivery that jumps the frontier by more than
// 1, and as a backstop probe that may fire at any time; both read the first
// retained revision and call [ResumeWindowOK] with the frontier. A false
// answer ends the watch with the cursor expired, before the entry is applied.
// The repair reads retention (setting the cursor's eviction memo on
// [Retention.HasEvicted]), plans with [ListingTruth] and [PlanRepair] (mode
// Auto; one variant arms Restore), and then either
//
//   - key-listing diff: a synthetic delete (unknown revision) for every fold
//     key the bucket does not list live, then the state-sync re-list of every
//     key's last retained message (markers included, as a watch delivers
//     them), the cursor moved by CursorAfterBatch over the re-listed
//     revisions; the live watch continues after the stream head, so its
//     frontier is the head even when the cursor is lower (trailing messages
//     purged or aged out: nothing re-lists them); or
//   - artifact restore: only if an artifact is published and
//     [RestoreAllowed](artifact, cursor, window) holds; every key decided by
//     [RestoreKey] (identical = same revision, listedLive = the bucket's last
//     retained message of the key is a put); cursor and frontier := the
//     artifact's; the watch resumes from there. Refused (or no artifact): the
//     watch fail-stops with fold and cursor untouched. A supervisor restarts a
//     fail-stopped node whenever that would change anything (a newer
//     artifact): the restart runs [CheckResume], then the same repair.
//
// Truth is every write minus every real delete, read off the whole log (an
// aged-out key is still in the truth; the listing is not the truth).
//
// Properties.
//
//   - Invariant, on every transition (through ghost state): the fold's cursor
//     never moves backward; no key takes a revision older than one the fold
//     already reflected for it (an older value, or a resurrection after a
//     delete); a repair never deletes a key the truth holds (phantom delete);
//     a fail-stop leaves fold and cursor untouched.
//   - Terminal states (the environment has stopped and the node has settled):
//     the fold equals the truth, or the node is fail-stopped legitimately.
//     Legitimate means exactly: a restore was the plan on a bucket that evicts
//     current values, or mode Restore was armed (on a bucket that keeps them,
//     Auto always has the key-listing diff, so a fail-stop there is a bug);
//     the fold cannot resume (its next revision is gone: first > cursor+1);
//     and the newest artifact cannot stand in for it (none published, none
//     ahead of the cursor, or its own next revision is gone: first >
//     artifact+1). With the exporter as the only other node, that is the
//     original design's "a write aged out before any node folded it"; it also covers the
//     original design's supersession-only gap without an artifact ahead (safe,
//     unavailable): the guard cannot tell a superseded head from an evicted
//     current value.
//
// Variants. Guarded (must hold): both bucket kinds with Auto, and mode
// Restore on the bucket that keeps current values; each also asserts that
// every step kind it relies on (in-band and backstop trips, benign gaps, both
// repairs, fail-stops, restarts, purges, age-outs) occurs. Must break, each
// by forging a kernel's input or output: unguarded (ResumeWindowOK forged
// true everywhere, both bucket kinds), periodic-only (in-band forged true,
// the design the original rejected) and in-band-only (backstop forged true) reach
// silent divergence; relist on an evicting bucket (PlanRepair given TruthYes)
// reaches a phantom delete of an aged-out key; restore without RestoreAllowed
// (forged true) moves the fold backward; restore ignoring retention (the
// window forged to "nothing evicted") reaches a phantom delete; restore
// always refused (forged false) reaches an illegitimate fail-stop, so the
// fail-stop clause is not vacuous. A mutation run checks only the property it
// is meant to break where BFS would otherwise report a shorter, different
// violation first (see lwProps). An environment variant drops the purge
// axiom (below) and reaches silent divergence under the guard.
//
// Abstractions and axioms. Every repair is one atomic step: the drain before
// it is trivial (a delivery is applied as it is received); the listing, the
// synthetic deletes and the re-list see one stream state; the main loop's
// RestoreAhead re-check coincides with the watch task's RestoreAllowed.
// Interleavings inside a repair are model_repair_test.go's subject. The
// guard's read of the first revision is atomic with the delivery it judges;
// a later read only sees a higher first revision, which trips at least as
// often. The purge axiom: a marker purge removes a marker only when it is at
// the head of the stream (everything retained before it belongs to the same
// key) or the watch has already passed it. That is NATS's purge_deletes
// keeping markers younger than 30 minutes, read as "no watch lags a live
// marker by that much": an interior purge of a marker the watch has not
// reached leaves no evidence at the floor. Artifacts are complete (exported
// by a caught-up fold); mid-catch-up artifacts are model_repair_test.go's.
// Retention configuration never changes, so the memo is set but never
// decisive here. No crashes: cursor-after-apply is model_cursor_test.go's.
//
// Bounds: 2 keys, 5 writes, 3 exports: 0.55M-1.05M states per guarded run,
// one to three seconds each. States are fixed-size arrays, a bitmask and
// small integers, so they are comparable.

const (
	lwKeys      = 2
	lwMaxWrites = 5
)

// lwMsg is one stream message; its revision is its index + 1.
type lwMsg struct {
	key uint8
	del bool
}

// lwEntry is one key of a fold: present with the revision (= value) of its
// last put, or absent.
type lwEntry struct {
	present bool
	rev     uint8
}

type lwPhase uint8

const (
	lwWatching lwPhase = iota // live watch running
	lwExpired                 // the floor guard ended the watch: repair next
	lwStopped                 // the repair refused: visible fail-stop
)

// lwBad names the transition property a step broke (ghost state).
type lwBad uint8

const (
	lwGood lwBad = iota
	lwCursorBack
	lwKeyBack
	lwPhantom
	lwStopTouched
)

func (b lwBad) prop() lwProps {
	switch b {
	case lwCursorBack, lwKeyBack:
		return lwPropBackward
	case lwPhantom:
		return lwPropPhantom
	}
	return lwPropStop
}

type lwState struct {
	// The stream.
	n      uint8              // messages written: revisions 1..n
	log    [lwMaxWrites]lwMsg // log[r-1] is revision r; zero past n
	gone   uint8              // bit r-1 set: revision r evicted
	purged bool               // the one marker purge has happened

	// The exporter, and the environment as a whole.
	art  uint8 // newest artifact's cursor, 0: none published
	exp  uint8 // exports so far
	done bool  // environment stopped: no more writes, evictions, exports

	// The node under test.
	fold   [lwKeys]lwEntry
	cursor uint8   // the fold's cursor (cursor-after-apply)
	memo   bool    // the cursor's EvictionSeen memo
	front  uint8   // the watch frontier: the next read is front+1
	phase  lwPhase // watching, expired or fail-stopped
	fixes  uint8   // completed repairs and restarts (the rank needs it)

	// Ghosts: what the transition properties need, never read by the node.
	hw     [lwKeys]uint8 // newest revision the fold has reflected, per key
	bad    lwBad         // the property the step into this state broke
	badKey uint8         // details for the message
	badA   uint8
	badB   uint8
}

type lwMutation uint8

const (
	lwNoMutation       lwMutation = iota
	lwUnguarded                   // ResumeWindowOK forged true at every guard call
	lwPeriodicOnly                // ResumeWindowOK forged true for the in-band check only
	lwInBandOnly                  // ResumeWindowOK forged true for the backstop probe only
	lwRelistOnEvicting            // PlanRepair given TruthYes whatever retention says
	lwRestoreUnguarded            // RestoreAllowed forged true
	lwRestoreRefused              // RestoreAllowed forged false
	lwRestoreNoWindow             // RestoreAllowed given a window with nothing evicted
	lwInteriorPurge               // environment: drop the purge axiom
)

// lwProps selects the properties a run checks; zero means all of them. A
// mutation run checks only the property it is meant to break, so the
// counterexample shown is the one that names its guard (BFS would otherwise
// report whichever violation is shortest).
type lwProps uint8

const (
	lwPropBackward lwProps = 1 << iota // cursor or key moved backward
	lwPropPhantom                      // a repair deleted a key the truth holds
	lwPropStop                         // a fail-stop touched the fold; a terminal fail-stop is legitimate
	lwPropConverge                     // a terminal running node holds the truth
	lwPropAll      lwProps = 0
)

type lwConfig struct {
	evicting bool // the bucket evicts current values
	mode     RepairMode
	writes   int
	exports  int
	mutation lwMutation
	props    lwProps
}

func (c lwConfig) checks(p lwProps) bool { return c.props == lwPropAll || c.props&p != 0 }

func (s *lwState) isGone(r uint8) bool { return s.gone&(1<<(r-1)) != 0 }

// first is the first retained revision (n+1 when everything is evicted).
func (s *lwState) first() uint8 {
	for r := uint8(1); r <= s.n; r++ {
		if !s.isGone(r) {
			return r
		}
	}
	return s.n + 1
}

// window is what stream info reports: both 0 on a stream never written.
func (s *lwState) window() Window {
	if s.n == 0 {
		return Window{}
	}
	return Window{First: Revision(s.first()), Last: Revision(s.n)}
}

func (c lwConfig) retention(s *lwState) Retention {
	r := Retention{Window: s.window()}
	if c.evicting {
		r.MaxAge = time.Hour
	}
	return r
}

// truthAt is the reference fold at revision rev: every write up to rev minus
// every real delete up to rev, evicted messages included.
func (s *lwState) truthAt(rev uint8) (t [lwKeys]lwEntry) {
	for r := uint8(1); r <= rev; r++ {
		m := s.log[r-1]
		if m.del {
			t[m.key] = lwEntry{}
		} else {
			t[m.key] = lwEntry{present: true, rev: r}
		}
	}
	return t
}

// latest is key k's latest message revision, 0 if never written.
func (s *lwState) latest(k uint8) uint8 {
	var last uint8
	for r := uint8(1); r <= s.n; r++ {
		if s.log[r-1].key == k {
			last = r
		}
	}
	return last
}

func (s *lwState) superseded(r uint8) bool { return s.latest(s.log[r-1].key) != r }

// lastRetained is key k's last retained message, 0 if none. Evictions never
// expose an older message of a key (the history limit never takes a key's
// latest message, age-out takes the head, when everything older is gone
// already, and a purge removes the whole key), so this is the key's latest
// message or nothing.
func (s *lwState) lastRetained(k uint8) uint8 {
	var last uint8
	for r := uint8(1); r <= s.n; r++ {
		if s.log[r-1].key == k && !s.isGone(r) {
			last = r
		}
	}
	return last
}

// listedLive: the bucket's key listing holds k.
func (s *lwState) listedLive(k uint8) bool {
	r := s.lastRetained(k)
	return r != 0 && !s.log[r-1].del
}

// nextRetained is the delivery a consumer at the frontier receives next: the
// lowest retained revision after it, 0 if none.
func (s *lwState) nextRetained() uint8 {
	for r := s.front + 1; r <= s.n; r++ {
		if !s.isGone(r) {
			return r
		}
	}
	return 0
}

var lwKeyNames = [lwKeys]string{"a", "b"}

func lwRev(r uint8) string { return strconv.Itoa(int(r)) }

func (s *lwState) msgString(r uint8) string {
	m := s.log[r-1]
	op := "put "
	if m.del {
		op = "del "
	}
	return "rev" + lwRev(r) + " " + op + lwKeyNames[m.key]
}

func lwFoldString(f [lwKeys]lwEntry) string {
	var b strings.Builder
	b.WriteByte('{')
	sep := ""
	for k, e := range f {
		if e.present {
			b.WriteString(sep + lwKeyNames[k] + "@" + lwRev(e.rev))
			sep = " "
		}
	}
	b.WriteByte('}')
	return b.String()
}

// floorOK is the floor guard's kernel call, with the mutations' forgeries.
func (c lwConfig) floorOK(s *lwState, inBand bool) bool {
	ok := ResumeWindowOK(Revision(s.front), s.window().First)
	switch {
	case c.mutation == lwUnguarded:
		return true
	case c.mutation == lwPeriodicOnly && inBand, c.mutation == lwInBandOnly && !inBand:
		return true
	}
	return ok
}

// cursorAfter is the loop's cursor rule applied to the node's cursor.
func (s *lwState) cursorAfter(revs ...Revision) uint8 {
	return uint8(CursorAfterBatch(Cursor{Rev: Revision(s.cursor), EvictionSeen: s.memo}, revs, 0).Rev)
}

func (c lwConfig) next(s lwState) []step[lwState] {
	if s.bad != lwGood {
		return nil // a violation: the invariant reports it
	}
	var out []step[lwState]
	add := func(label string, to lwState, repair bool) {
		c.audit(&s, &to, repair)
		out = append(out, step[lwState]{label: label, to: to})
	}

	// The environment: writer, retention, exporter.
	if !s.done {
		if int(s.n) < c.writes {
			truth := s.truthAt(s.n)
			for k := uint8(0); k < lwKeys; k++ {
				for _, del := range [2]bool{false, true} {
					if del && !truth[k].present {
						continue // delete only a live key
					}
					to := s
					to.log[s.n] = lwMsg{key: k, del: del}
					to.n++
					add("write "+to.msgString(to.n), to, false)
				}
			}
		}
		for r := uint8(1); r <= s.n; r++ {
			if !s.isGone(r) && s.superseded(r) {
				to := s
				to.gone |= 1 << (r - 1)
				add("history limit evicts superseded "+s.msgString(r), to, false)
			}
		}
		if c.evicting {
			if h := s.first(); h <= s.n && !s.superseded(h) {
				to := s
				to.gone |= 1 << (h - 1)
				add("age out head "+s.msgString(h)+" (current value)", to, false)
			}
		} else if !s.purged {
			for k := uint8(0); k < lwKeys; k++ {
				m := s.latest(k)
				if m == 0 || !s.log[m-1].del || s.isGone(m) {
					continue
				}
				head := true // everything retained before m is key k's
				for r := uint8(1); r < m; r++ {
					if !s.isGone(r) && s.log[r-1].key != k {
						head = false
					}
				}
				if !head && m > s.front && c.mutation != lwInteriorPurge {
					continue // the purge axiom
				}
				to := s
				to.purged = true
				for r := uint8(1); r <= m; r++ {
					if s.log[r-1].key == k {
						to.gone |= 1 << (r - 1)
					}
				}
				add("purge delete markers: key "+lwKeyNames[k]+" up to "+s.msgString(m), to, false)
			}
		}
		if int(s.exp) < c.exports && s.n > s.art {
			to := s
			to.art = s.n
			to.exp++
			add("export artifact @"+lwRev(s.n)+" "+lwFoldString(s.truthAt(s.n)), to, false)
		}
		to := s
		to.done = true
		add("environment stops", to, false)
	}

	// The node.
	switch s.phase {
	case lwWatching:
		if r := s.nextRetained(); r != 0 {
			if r > s.front+1 && !c.floorOK(&s, true) {
				to := s
				to.phase = lwExpired
				add("floor guard (in-band): "+s.msgString(r)+" jumps frontier "+lwRev(s.front)+
					", first="+lwRev(s.first())+": cursor expired, entry not applied", to, false)
			} else {
				to := s
				m := s.log[r-1]
				if m.del {
					to.fold[m.key] = lwEntry{}
				} else {
					to.fold[m.key] = lwEntry{present: true, rev: r}
				}
				to.hw[m.key] = max(to.hw[m.key], r)
				to.cursor = s.cursorAfter(Revision(r))
				to.front = uint8(Advance(Revision(s.front), Revision(r)))
				label := "deliver " + s.msgString(r) + " -> fold " + lwFoldString(to.fold) + " cursor " + lwRev(to.cursor)
				if r > s.front+1 {
					label = "benign gap passed: " + label
				}
				add(label, to, false)
			}
		}
		if !c.floorOK(&s, false) {
			to := s
			to.phase = lwExpired
			add("floor guard (backstop probe): first="+lwRev(s.first())+" > frontier "+lwRev(s.front)+
				"+1: cursor expired", to, false)
		}
	case lwExpired:
		to, label := c.repair(s)
		add(label, to, true)
	case lwStopped:
		// A supervisor restarts a fail-stopped node; a restart that ends
		// exactly where it began is a stutter, not a step.
		var to lwState
		var label string
		if v := CheckResume(Revision(s.cursor), s.window()); v == ResumeOK {
			to = s
			to.front = s.cursor
			to.phase = lwWatching
			to.fixes++
			label = "restart: resume from cursor " + lwRev(s.cursor)
		} else {
			to, label = c.repair(s)
			label = "restart (" + v.String() + "): " + label
		}
		if to.phase != lwStopped || to.fold != s.fold || to.cursor != s.cursor {
			add(label, to, true)
		}
	}
	return out
}

// repair is the cursor-expiry repair, from an expired or fail-stopped node.
func (c lwConfig) repair(s lwState) (lwState, string) {
	ret := c.retention(&s)
	to := s
	to.memo = s.memo || ret.HasEvicted()
	truth := ListingTruth(&ret, to.memo)
	if c.mutation == lwRelistOnEvicting {
		truth = TruthYes // forged: as if the listing were the truth
	}
	plan := PlanRepair(c.mode, truth)
	w := "window [" + ret.First.String() + "," + ret.Last.String() + "]"
	switch plan {
	case PlanKeyListingDiff, PlanRelistOnly:
		var synth []string
		if plan == PlanKeyListingDiff {
			for k := uint8(0); k < lwKeys; k++ {
				if to.fold[k].present && !s.listedLive(k) {
					to.fold[k] = lwEntry{} // synthetic delete, unknown revision
					synth = append(synth, lwKeyNames[k])
				}
			}
		}
		var revs []Revision
		for k := uint8(0); k < lwKeys; k++ {
			r := s.lastRetained(k)
			if r == 0 {
				continue
			}
			if s.log[r-1].del {
				to.fold[k] = lwEntry{}
			} else {
				to.fold[k] = lwEntry{present: true, rev: r}
			}
			to.hw[k] = max(to.hw[k], r)
			revs = append(revs, Revision(r))
		}
		to.cursor = s.cursorAfter(revs...)
		to.front = s.n // the state-sync consumer continues after the head
		to.phase = lwWatching
		to.fixes++
		return to, fmt.Sprintf("repair (%s, listing truth %s): synthetic deletes %v, re-list -> fold %s cursor %d, watch from %d",
			plan, truth, synth, lwFoldString(to.fold), to.cursor, to.front+1)
	case PlanRestore:
		if s.art == 0 {
			to.phase = lwStopped
			return to, "fail-stop: restore planned, no artifact published (" + w + ")"
		}
		win := ret.Window
		if c.mutation == lwRestoreNoWindow {
			win.First = 1 // forged: as if retention had evicted nothing
		}
		allowed := RestoreAllowed(Revision(s.art), Revision(s.cursor), win)
		switch c.mutation {
		case lwRestoreUnguarded:
			allowed = true
		case lwRestoreRefused:
			allowed = false
		}
		if !allowed {
			to.phase = lwStopped
			return to, "fail-stop: RestoreAllowed(artifact " + lwRev(s.art) + ", cursor " + lwRev(s.cursor) + ", " + w + ") refused"
		}
		artFold := s.truthAt(s.art)
		for k := uint8(0); k < lwKeys; k++ {
			local := KeyState{Present: s.fold[k].present, Rev: Revision(s.fold[k].rev)}
			art := KeyState{Present: artFold[k].present, Rev: Revision(artFold[k].rev)}
			identical := local.Present && art.Present && local.Rev == art.Rev
			switch RestoreKey(local, art, identical, s.listedLive(k)) {
			case TakeArtifact:
				to.fold[k] = artFold[k]
				to.hw[k] = max(to.hw[k], artFold[k].rev)
			case DeleteLocal:
				to.fold[k] = lwEntry{}
			}
		}
		to.cursor = s.art // the final commit moves the cursor to the artifact's
		to.front = s.art
		to.phase = lwWatching
		to.fixes++
		return to, "repair (restore, listing truth " + truth.String() + "): artifact @" + lwRev(s.art) + " " +
			lwFoldString(artFold) + " -> fold " + lwFoldString(to.fold) + " cursor " + lwRev(to.cursor)
	}
	to.phase = lwStopped
	return to, "fail-stop: repair " + plan.String() + " (" + w + ")"
}

// audit records in the successor's ghost state the first checked transition
// property the step broke.
func (c lwConfig) audit(from, to *lwState, repair bool) {
	set := func(b lwBad, k, x, y uint8) {
		if to.bad == lwGood && c.checks(b.prop()) {
			to.bad, to.badKey, to.badA, to.badB = b, k, x, y
		}
	}
	if to.cursor < from.cursor {
		set(lwCursorBack, 0, from.cursor, to.cursor)
	}
	for k := uint8(0); k < lwKeys; k++ {
		e := to.fold[k]
		if e != from.fold[k] && e.present && e.rev < from.hw[k] {
			set(lwKeyBack, k, from.hw[k], e.rev)
		}
	}
	if repair {
		truth := to.truthAt(to.n)
		for k := uint8(0); k < lwKeys; k++ {
			if from.fold[k].present && !to.fold[k].present && truth[k].present {
				set(lwPhantom, k, from.fold[k].rev, truth[k].rev)
			}
		}
	}
	if to.phase == lwStopped && from.phase != lwStopped && (to.fold != from.fold || to.cursor != from.cursor) {
		set(lwStopTouched, 0, 0, 0)
	}
}

func lwInvariant(s lwState) error {
	k := lwKeyNames[s.badKey]
	switch s.bad {
	case lwCursorBack:
		return fmt.Errorf("fold moved backward: cursor %d -> %d", s.badA, s.badB)
	case lwKeyBack:
		return fmt.Errorf("fold moved backward: key %s had reflected rev %d, now holds rev %d", k, s.badA, s.badB)
	case lwPhantom:
		return fmt.Errorf("phantom delete: a repair deleted key %s (fold had rev %d) though the truth holds it at rev %d", k, s.badA, s.badB)
	case lwStopTouched:
		return fmt.Errorf("fail-stop touched the fold or its cursor")
	}
	return nil
}

// lwOutcomes counts terminal states by outcome.
type lwOutcomes struct{ converged, failStopped int }

func (c lwConfig) final(out *lwOutcomes) func(lwState) error {
	return func(s lwState) error {
		truth := s.truthAt(s.n)
		switch s.phase {
		case lwExpired:
			return fmt.Errorf("model bug: node stuck with an expired cursor")
		case lwStopped:
			if !c.checks(lwPropStop) {
				return nil
			}
			first := s.first()
			switch {
			case !c.evicting && c.mode != RepairRestore:
				return fmt.Errorf("illegitimate fail-stop on a bucket that keeps current values, mode %s (fold %s cursor %d, truth %s)",
					c.mode, lwFoldString(s.fold), s.cursor, lwFoldString(truth))
			case first <= s.cursor+1:
				return fmt.Errorf("illegitimate fail-stop: the stream still holds every revision after cursor %d (first %d)",
					s.cursor, first)
			case s.art > s.cursor && first <= s.art+1:
				return fmt.Errorf("illegitimate fail-stop: artifact @%d is ahead of cursor %d and inside retention (first %d)",
					s.art, s.cursor, first)
			}
			out.failStopped++
			return nil
		}
		if s.fold != truth && c.checks(lwPropConverge) {
			return fmt.Errorf("silent divergence: fold %s (cursor %d), truth %s, stream first %d last %d",
				lwFoldString(s.fold), s.cursor, lwFoldString(truth), s.first(), s.n)
		}
		out.converged++
		return nil
	}
}

func (c lwConfig) rank(s lwState) []int {
	done := 0
	if s.done {
		done = 1
	}
	return []int{done, int(s.n), bits.OnesCount8(s.gone), int(s.exp), int(s.fixes), int(s.front), int(s.phase)}
}

func (c lwConfig) model(out *lwOutcomes) model[lwState] {
	if c.writes > lwMaxWrites {
		panic("lwConfig: too many writes")
	}
	return model[lwState]{
		init:      []lwState{{}},
		next:      c.next,
		rank:      c.rank,
		invariant: lwInvariant,
		final:     c.final(out),
	}
}

// lwKinds are the step kinds, by label prefix, that coverage counts.
var lwKinds = []string{
	"write", "history limit", "age out", "purge", "export", "environment stops",
	"deliver", "benign gap passed", "floor guard (in-band)", "floor guard (backstop probe)",
	"repair (key-listing-diff", "repair (restore", "fail-stop", "restart",
}

// lwRun explores c, counting the edges of each step kind (lwKinds).
func lwRun(t *testing.T, c lwConfig) (exploration, lwOutcomes, map[string]int) {
	t.Helper()
	var out lwOutcomes
	kinds := map[string]int{}
	m := c.model(&out)
	next := m.next
	m.next = func(s lwState) []step[lwState] {
		succ := next(s)
		for _, st := range succ {
			for _, k := range lwKinds {
				if strings.HasPrefix(st.label, k) {
					kinds[k]++
					break
				}
			}
		}
		return succ
	}
	start := time.Now()
	res := explore(t, m)
	t.Logf("%d states, %d edges in %v", res.states, res.edges, time.Since(start).Round(time.Millisecond))
	return res, out, kinds
}

func lwDefault(evicting bool) lwConfig {
	return lwConfig{evicting: evicting, mode: RepairAuto, writes: 5, exports: 3}
}

func TestModelLiveWatchGuarded(t *testing.T) {
	for _, tc := range []struct {
		name string
		c    lwConfig
		need []string // step kinds that must occur: the run is not vacuous
	}{
		{"keeps current values, auto", lwDefault(false), []string{"purge", "benign gap passed",
			"floor guard (in-band)", "floor guard (backstop probe)", "repair (key-listing-diff"}},
		{"evicts current values, auto", lwDefault(true), []string{"age out", "benign gap passed",
			"floor guard (in-band)", "floor guard (backstop probe)", "repair (restore", "fail-stop", "restart"}},
		{"keeps current values, restore", lwConfig{mode: RepairRestore, writes: 5, exports: 3},
			[]string{"purge", "repair (restore", "fail-stop", "restart"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, out, kinds := lwRun(t, tc.c)
			mustHold(t, tc.name, res)
			t.Logf("terminal outcomes: %d converged, %d fail-stopped legitimately", out.converged, out.failStopped)
			t.Logf("edges by kind: %v", kinds)
			if out.converged == 0 {
				t.Fatalf("vacuous: no terminal state converged")
			}
			for _, k := range tc.need {
				if kinds[k] == 0 {
					t.Errorf("vacuous: no %q step in the explored space", k)
				}
			}
		})
	}
}

func TestModelLiveWatchBreaks(t *testing.T) {
	with := func(c lwConfig, m lwMutation, p lwProps) lwConfig { c.mutation, c.props = m, p; return c }
	for _, tc := range []struct {
		name string
		c    lwConfig
		want string
	}{
		{"unguarded, keeps current values", with(lwDefault(false), lwUnguarded, lwPropAll), "silent divergence"},
		{"unguarded, evicts current values", with(lwDefault(true), lwUnguarded, lwPropAll), "silent divergence"},
		{"periodic-only guard", with(lwDefault(true), lwPeriodicOnly, lwPropAll), "silent divergence"},
		// With every property checked, BFS first reports a silent
		// divergence (a key aged out before the fold folded it, which no
		// re-list brings back); the phantom delete is the original design's bug.
		{"relist on an evicting bucket", with(lwDefault(true), lwRelistOnEvicting, lwPropPhantom), "phantom delete"},
		// With every property checked, BFS first reports a phantom delete
		// (an artifact outside retention, whose resume lost a later put).
		{"restore without RestoreAllowed", with(lwDefault(true), lwRestoreUnguarded, lwPropBackward), "fold moved backward"},
		{"restore ignoring retention", with(lwDefault(true), lwRestoreNoWindow, lwPropAll), "phantom delete"},
		{"in-band only, no backstop", with(lwDefault(true), lwInBandOnly, lwPropAll), "silent divergence"},
		{"restore always refused", with(lwDefault(true), lwRestoreRefused, lwPropAll), "illegitimate fail-stop"},
		{"purge axiom dropped", with(lwDefault(false), lwInteriorPurge, lwPropAll), "silent divergence"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			res, _, _ := lwRun(t, tc.c)
			mustBreak(t, tc.name, res, tc.want)
		})
	}
}
