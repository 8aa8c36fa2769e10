package protocol

import (
	"fmt"
	"math/bits"
	"strings"
	"testing"
	"time"
)

// Model: the artifact-pointer fleet.
//
// What is modelled: a fleet of exporters sharing one artifact slot in an
// object store: write-once, content-addressed payloads and one pointer object
// (the manifest) that names the published payload. Each exporter's fold only
// moves forward, so an exporter runs export rounds at strictly increasing
// ranks (cursor revisions) chosen from 1..maxRank; it may skip ranks (its fold
// advanced several revisions between rounds) or stop for good at any moment
// it is idle. A round is a sequence of atomic steps, each one object-store
// call, freely interleaved with every other exporter's steps:
//
//  1. upload: write the payload (content-addressed: keyed by exporter and rank,
//     or by rank alone under sharedKeys, when exporters at one cursor write
//     byte-identical manifests and the upload is an idempotent overwrite);
//  2. observe: read the pointer (absent / at a rank / corrupt) and decide with
//     the real PointerPublishAllowed; false is the normal "superseded by
//     newer" exit;
//  3. swap: a conditional put (If-Match on the observed ETag). The ETag is the
//     pointer's content, as S3's is for a single-part put: a pointer that
//     changed since the observe fails the swap, and the exporter retries from
//     the observe, giving up after maxRetries failed swaps;
//  4. after Published: prune. One step reads the pointer and lists the
//     payloads, judging each with the real PayloadPrunable under zero grace
//     (AgedOut always true); later steps delete the doomed payloads one at a
//     time, so other exporters run between the listing and every delete.
//
// An environment step overwrites the pointer with garbage at most once: while
// the slot is still empty (fleetCorruptEmptySlot: a crashed legacy writer),
// or at any moment (fleetCorruptAnytime: an operator's bad edit). The main
// model uses the former; the latter is TestModelFleetMidRunCorruption's.
//
// Properties:
//   - invariant "regression": a parseable pointer is never below the highest
//     rank published since the last corruption (the state keeps that
//     high-water mark). A corruption resets it: the old rank is unreadable,
//     and the kernel deliberately lets any candidate replace a corrupt
//     pointer, trading that rank for liveness;
//   - invariant "dangling": a parseable pointer names a payload that exists
//     (a reader can always fetch the pointer's target);
//   - final "final rank": a run ends with the pointer at or above every rank
//     published since the last corruption (implied by "regression"; kept as
//     the terminal statement);
//   - final "liveness": a corrupt pointer never wedges the fleet: if any
//     exporter observed the corrupt pointer (it wanted to publish after the
//     corruption), the run does not end with the pointer corrupt. A round
//     whose last allowed swap fails because of the corruption itself, before
//     it observed it, gives up like any round out of retries and leaves the
//     repair to the next round: that is the retry bound, not a wedge.
//
// Mutations (fleetConfig fields), each forging a kernel input or the
// transport's precondition, never re-implementing a decision; each is caught
// with a counterexample (TestModelFleetMutations):
//   - lastWriterWins: the publish guard is shown PointerAbsent() instead of
//     the observed pointer -> "regression";
//   - blindSwap: the swap ignores the ETag precondition (observe, then an
//     unconditional put) -> "regression";
//   - pruneAtOrBelow: the pruner presents a payload's rank as rank-1, which
//     turns the kernel's "<" into "<=" -> "dangling" (a second exporter's
//     payload at the pointer's rank is deleted, then published);
//   - pruneIgnoresTarget: IsPointerTarget forged false. Harmless on its own:
//     the target has the pointer's rank, never a rank strictly below it, so
//     the rank rule already spares it. Caught together with pruneAtOrBelow
//     under sharedKeys (where "<=" alone is harmless too: the only payload at
//     the pointer's rank is the target) -> "dangling";
//   - corruptWedges: a corrupt pointer is shown to the publish guard as
//     PointerAt(MaxRevision), i.e. treated as the newest -> "liveness".
//
// TestModelFleetHarmlessMutations pins the mutations no run can expose, and
// why. Notably, a grace period that outlasts every round masks "<=": the
// strict rank rule is what protects a round that outlives the grace period,
// so the main model runs with zero grace, where the rule alone must hold.
//
// Known limits, pinned by TestModelFleetMidRunCorruption: a corruption after
// something was published voids "dangling" under zero grace. A pruner that
// read rank 2 lists a slow exporter's payload at rank 1; the pointer is
// corrupted; the slow exporter, seeing a corrupt pointer, publishes its
// payload, and the pruner then deletes it. graceCoversRounds models the
// production grace period (4x the lease TTL) as "a payload is not aged out
// while the round that uploaded it is before its publish outcome" (the grace
// outlasts every upload-to-swap window); with it all four properties hold
// across a mid-run corruption, as long as payload keys are distinct per
// exporter. Under sharedKeys they do not: age is judged at listing time, and
// an idempotent re-upload of the same key by a new round between the listing
// and the delete goes unseen.
//
// Bounds: 2 exporters x ranks 1..4 and 3 exporters x ranks 1..2, both with 2
// swap retries (fewer than the swaps the others can make during one round, so
// giving up is reachable). Every step strictly increases the rank vector (per
// exporter: round rank, then position in the round, counting retries and
// deletions; then the corruption flag), so every run terminates. Coverage
// counters fail a variant whose runs never exercise a supersede, a swap
// retry, a give-up, a corrupt-pointer replacement or a delete.
//
// Abstracted away: the lease (it is work dedup, not a correctness gate, so
// the model lets every exporter export whenever it likes: strictly more
// interleavings), payload contents and verification (a payload is one bit),
// multipart upload internals (an upload is atomic; a torn upload never
// becomes a payload key), crashes (a crash abandons a round, leaving an
// orphan payload, as superseded and given-up rounds do here, or an unfinished
// prune, which deletes less; a crashed exporter counts as stopped for
// "liveness"), wall-clock ages (zero grace, or the round-bounded grace above),
// and slow readers (a reader that reads the pointer and fetches the payload
// much later relies on the grace period: "dangling" is about the pointer's
// target at every instant).

const fleetMaxExporters = 3

// fleetCorruption says when the environment may corrupt the pointer.
type fleetCorruption uint8

const (
	fleetCorruptNever     fleetCorruption = iota
	fleetCorruptEmptySlot                 // at most once, while the slot is still absent
	fleetCorruptAnytime                   // at most once, at any moment
)

func (c fleetCorruption) String() string {
	switch c {
	case fleetCorruptEmptySlot:
		return "corrupt-empty-slot"
	case fleetCorruptAnytime:
		return "corrupt-anytime"
	}
	return "no-corruption"
}

type fleetConfig struct {
	exporters  int // 1..fleetMaxExporters
	maxRank    int // rounds export at ranks 1..maxRank
	maxRetries int // failed swaps a round tolerates before giving up
	sharedKeys bool
	corruption fleetCorruption
	// graceCoversRounds: AgedOut is false for a payload whose round is still
	// before its publish outcome (else AgedOut is always true: zero grace).
	graceCoversRounds bool

	// Mutations (see the file comment).
	lastWriterWins     bool
	blindSwap          bool
	pruneAtOrBelow     bool
	pruneIgnoresTarget bool
	corruptWedges      bool
}

func (c fleetConfig) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%d exporters, ranks 1..%d, %d retries, %v", c.exporters, c.maxRank, c.maxRetries, c.corruption)
	for _, f := range []struct {
		on   bool
		name string
	}{
		{c.sharedKeys, "shared keys"}, {c.graceCoversRounds, "round-bounded grace"},
		{c.lastWriterWins, "MUTATION lastWriterWins"}, {c.blindSwap, "MUTATION blindSwap"},
		{c.pruneAtOrBelow, "MUTATION pruneAtOrBelow"}, {c.pruneIgnoresTarget, "MUTATION pruneIgnoresTarget"},
		{c.corruptWedges, "MUTATION corruptWedges"},
	} {
		if f.on {
			b.WriteString(", " + f.name)
		}
	}
	return b.String()
}

func (c fleetConfig) slots() int {
	if c.sharedKeys {
		return c.maxRank
	}
	return c.exporters * c.maxRank
}

// slot is the bit of the payload exporter e uploads at rank r.
func (c fleetConfig) slot(e, r uint8) uint16 {
	if c.sharedKeys {
		return 1 << (r - 1)
	}
	return 1 << (int(e)*c.maxRank + int(r) - 1)
}

func (c fleetConfig) slotRank(i int) uint8 { return uint8(i%c.maxRank) + 1 }

func (c fleetConfig) slotName(i int) string {
	if c.sharedKeys {
		return fmt.Sprintf("payload@%d", c.slotRank(i))
	}
	return fmt.Sprintf("e%d@%d", i/c.maxRank, c.slotRank(i))
}

func (c fleetConfig) slotNames(set uint16) string {
	var names []string
	for i := 0; i < c.slots(); i++ {
		if set&(1<<i) != 0 {
			names = append(names, c.slotName(i))
		}
	}
	return "[" + strings.Join(names, " ") + "]"
}

// fleetPtr is the pointer object's content, which is also its ETag.
type fleetPtr struct {
	kind uint8 // fleetAbsent, fleetAt, fleetCorrupt
	rank uint8
	exp  uint8 // the exporter whose payload it names (0 under sharedKeys)
}

const (
	fleetAbsent uint8 = iota
	fleetAt
	fleetCorrupt
)

// state is what a reader of the pointer object parses.
func (p fleetPtr) state() PointerState {
	switch p.kind {
	case fleetAt:
		return PointerAt(Revision(p.rank))
	case fleetCorrupt:
		return PointerCorrupt()
	}
	return PointerAbsent()
}

func (c fleetConfig) ptrName(p fleetPtr) string {
	if p.kind != fleetAt || c.sharedKeys {
		return p.state().String()
	}
	return fmt.Sprintf("%v(e%d)", p.state(), p.exp)
}

// Exporter phases.
const (
	fleetIdle      uint8 = iota // between rounds (or stopped: rank == maxRank)
	fleetUploaded               // payload written; next: observe the pointer
	fleetObserved               // the guard allowed the publish; next: the swap
	fleetPublished              // swapped; next: the prune listing
	fleetPruning                // listing judged; next: delete doomed payloads
)

type fleetExporter struct {
	phase   uint8
	rank    uint8    // the round's rank; when idle, the last round's (maxRank once stopped)
	retries uint8    // failed swaps in this round
	seen    fleetPtr // fleetObserved: the pointer as observed (the swap's If-Match)
	doomed  uint16   // fleetPruning: payloads judged prunable, not yet deleted
}

type fleetState struct {
	ex         [fleetMaxExporters]fleetExporter
	ptr        fleetPtr
	payloads   uint16 // bit per payload key (fleetConfig.slot): set while stored
	hw         uint8  // highest rank published since the last corruption
	corrupted  bool   // the corruption happened
	sawCorrupt bool   // an exporter observed the corrupt pointer
}

// fleetCoverage counts interesting transitions, so a model that silently
// stops exercising a race fails instead of passing vacuously.
type fleetCoverage struct {
	superseded, casRetry, gaveUp, replacedCorrupt, deleted, terminals int
}

func (c fleetConfig) model() (model[fleetState], *fleetCoverage) {
	if c.exporters < 1 || c.exporters > fleetMaxExporters || c.maxRank < 1 || c.slots() > 16 {
		panic(fmt.Sprintf("fleet model: bad bounds %v", c))
	}
	cov := &fleetCoverage{}
	maxRank := uint8(c.maxRank)
	nSlots := c.slots()
	// Per-exporter progress = rank*stride + stage; every step raises one
	// exporter's progress (or sets the corruption flag), so the rank vector
	// [progress(e0), progress(e1), ..., corrupted] strictly increases.
	stride := 2*c.maxRetries + nSlots + 5
	stage := func(x fleetExporter) int {
		switch x.phase {
		case fleetUploaded:
			return 2 * int(x.retries)
		case fleetObserved:
			return 2*int(x.retries) + 1
		case fleetPublished:
			return 2*c.maxRetries + 2
		case fleetPruning:
			return 2*c.maxRetries + 3 + nSlots - bits.OnesCount16(x.doomed)
		}
		return stride - 1 // idle: after every stage of its round
	}

	// agedOut is the pruner's AgedOut for the payload at bit.
	agedOut := func(s fleetState, bit uint16) bool {
		if !c.graceCoversRounds {
			return true // zero grace
		}
		for e := 0; e < c.exporters; e++ {
			x := s.ex[e]
			if (x.phase == fleetUploaded || x.phase == fleetObserved) && c.slot(uint8(e), x.rank) == bit {
				return false
			}
		}
		return true
	}
	owner := func(e int) uint8 {
		if c.sharedKeys {
			return 0
		}
		return uint8(e)
	}

	next := func(s fleetState) []step[fleetState] {
		var out []step[fleetState]
		add := func(n fleetState, format string, args ...any) {
			out = append(out, step[fleetState]{label: fmt.Sprintf(format, args...), to: n})
		}

		canCorrupt := c.corruption == fleetCorruptAnytime ||
			c.corruption == fleetCorruptEmptySlot && s.ptr.kind == fleetAbsent
		if !s.corrupted && canCorrupt {
			n := s
			n.ptr = fleetPtr{kind: fleetCorrupt}
			n.corrupted = true
			n.hw = 0 // the old rank is unreadable from now on
			add(n, "environment corrupts the pointer (was %s)", c.ptrName(s.ptr))
		}

		for e := 0; e < c.exporters; e++ {
			x := s.ex[e]
			switch x.phase {
			case fleetIdle:
				for r := x.rank + 1; r <= maxRank; r++ {
					n := s
					n.ex[e] = fleetExporter{phase: fleetUploaded, rank: r}
					n.payloads |= c.slot(owner(e), r)
					add(n, "e%d uploads its rank-%d payload %s", e, r, c.slotNames(c.slot(owner(e), r)))
				}
				if x.rank < maxRank {
					n := s
					n.ex[e].rank = maxRank
					add(n, "e%d stops exporting", e)
				}

			case fleetUploaded:
				n := s
				if s.ptr.kind == fleetCorrupt {
					n.sawCorrupt = true
				}
				in := s.ptr.state()
				if c.lastWriterWins {
					in = PointerAbsent() // mutation: the guard never sees the pointer
				}
				if c.corruptWedges && s.ptr.kind == fleetCorrupt {
					in = PointerAt(MaxRevision) // mutation: corrupt treated as newest
				}
				if PointerPublishAllowed(in, Revision(x.rank)) {
					n.ex[e].phase = fleetObserved
					n.ex[e].seen = s.ptr
					add(n, "e%d observes %s: publishing rank %d is allowed", e, c.ptrName(s.ptr), x.rank)
				} else {
					cov.superseded++
					n.ex[e] = fleetExporter{rank: x.rank}
					add(n, "e%d observes %s: rank %d superseded by newer", e, c.ptrName(s.ptr), x.rank)
				}

			case fleetObserved:
				n := s
				if s.ptr == x.seen || c.blindSwap {
					if s.ptr.kind == fleetCorrupt {
						cov.replacedCorrupt++
					}
					n.ptr = fleetPtr{kind: fleetAt, rank: x.rank, exp: owner(e)}
					n.hw = max(n.hw, x.rank)
					n.ex[e] = fleetExporter{phase: fleetPublished, rank: x.rank}
					add(n, "e%d swaps %s -> %s: published", e, c.ptrName(s.ptr), c.ptrName(n.ptr))
				} else if int(x.retries) < c.maxRetries {
					cov.casRetry++
					n.ex[e] = fleetExporter{phase: fleetUploaded, rank: x.rank, retries: x.retries + 1}
					add(n, "e%d swap fails: pointer is %s, not %s (retry %d)",
						e, c.ptrName(s.ptr), c.ptrName(x.seen), x.retries+1)
				} else {
					cov.gaveUp++
					n.ex[e] = fleetExporter{rank: x.rank}
					add(n, "e%d swap fails: pointer is %s, not %s; retries exhausted, round abandoned",
						e, c.ptrName(s.ptr), c.ptrName(x.seen))
				}

			case fleetPublished:
				view := s.ptr.state()
				var target uint16
				if s.ptr.kind == fleetAt {
					target = c.slot(s.ptr.exp, s.ptr.rank)
				}
				var doomed uint16
				for i := 0; i < nSlots; i++ {
					bit := uint16(1) << i
					if s.payloads&bit == 0 {
						continue
					}
					p := Payload{
						Rank:            Revision(c.slotRank(i)),
						RankKnown:       true,
						IsPointerTarget: bit == target,
						AgedOut:         agedOut(s, bit),
					}
					if c.pruneAtOrBelow {
						p.Rank-- // mutation: "<" becomes "<="
					}
					if c.pruneIgnoresTarget {
						p.IsPointerTarget = false // mutation
					}
					if PayloadPrunable(p, view) {
						doomed |= bit
					}
				}
				n := s
				if doomed == 0 {
					n.ex[e] = fleetExporter{rank: x.rank}
				} else {
					n.ex[e] = fleetExporter{phase: fleetPruning, rank: x.rank, doomed: doomed}
				}
				add(n, "e%d prune lists %s under pointer %s: prunable %s",
					e, c.slotNames(s.payloads), c.ptrName(s.ptr), c.slotNames(doomed))

			case fleetPruning:
				bit := x.doomed & -x.doomed // lowest first
				n := s
				n.payloads &^= bit
				n.ex[e].doomed &^= bit
				if n.ex[e].doomed == 0 {
					n.ex[e] = fleetExporter{rank: x.rank}
				}
				if s.payloads&bit != 0 {
					cov.deleted++
				}
				add(n, "e%d deletes %s", e, c.slotNames(bit))
			}
		}
		return out
	}

	rank := func(s fleetState) []int {
		r := make([]int, c.exporters+1)
		for e := 0; e < c.exporters; e++ {
			r[e] = int(s.ex[e].rank)*stride + stage(s.ex[e])
		}
		if s.corrupted {
			r[c.exporters] = 1
		}
		return r
	}

	invariant := func(s fleetState) error {
		if s.ptr.kind != fleetAt {
			return nil
		}
		if s.ptr.rank < s.hw {
			return fmt.Errorf("regression: pointer %s is below rank %d, published earlier", c.ptrName(s.ptr), s.hw)
		}
		if bit := c.slot(s.ptr.exp, s.ptr.rank); s.payloads&bit == 0 {
			return fmt.Errorf("dangling: pointer %s names %s, which is not stored", c.ptrName(s.ptr), c.slotNames(bit))
		}
		return nil
	}

	final := func(s fleetState) error {
		cov.terminals++
		switch s.ptr.kind {
		case fleetAbsent:
			if s.hw > 0 {
				return fmt.Errorf("final rank: pointer absent after rank %d was published", s.hw)
			}
		case fleetAt:
			if s.ptr.rank < s.hw {
				return fmt.Errorf("final rank: pointer %s below rank %d, published earlier", c.ptrName(s.ptr), s.hw)
			}
		case fleetCorrupt:
			if s.sawCorrupt {
				return fmt.Errorf("liveness: the pointer is left corrupt although an exporter observed it and wanted to publish")
			}
		}
		return nil
	}

	return model[fleetState]{
		init:      []fleetState{{}}, // empty slot, every exporter idle at rank 0
		next:      next,
		rank:      rank,
		invariant: invariant,
		final:     final,
		maxStates: 3_000_000,
	}, cov
}

// runFleet explores cfg and logs its size and wall time.
func runFleet(t *testing.T, cfg fleetConfig) (exploration, *fleetCoverage) {
	t.Helper()
	m, cov := cfg.model()
	start := time.Now()
	res := explore(t, m)
	t.Logf("%v: %d states, %d edges in %v", cfg, res.states, res.edges, time.Since(start).Round(time.Millisecond))
	return res, cov
}

// The base configurations. maxRetries is below the number of swaps the
// other exporters can make during one round, so giving up is reachable.
var (
	fleetTwo   = fleetConfig{exporters: 2, maxRank: 4, maxRetries: 2, corruption: fleetCorruptEmptySlot}
	fleetThree = fleetConfig{exporters: 3, maxRank: 2, maxRetries: 2, corruption: fleetCorruptEmptySlot}
)

type fleetVariant struct {
	name string
	base fleetConfig
	set  func(*fleetConfig) // nil: the base as is
}

func (v fleetVariant) config() fleetConfig {
	c := v.base
	if v.set != nil {
		v.set(&c)
	}
	return c
}

func TestModelFleetPointerSafety(t *testing.T) {
	shared := func(c *fleetConfig) { c.sharedKeys = true }
	for _, v := range []fleetVariant{
		{"two exporters", fleetTwo, nil},
		{"three exporters", fleetThree, nil},
		{"two exporters, shared keys", fleetTwo, shared},
		{"three exporters, shared keys", fleetThree, shared},
	} {
		t.Run(v.name, func(t *testing.T) {
			res, cov := runFleet(t, v.config())
			mustHold(t, v.name, res)
			t.Logf("coverage: %+v", *cov)
			if cov.superseded == 0 || cov.casRetry == 0 || cov.gaveUp == 0 || cov.replacedCorrupt == 0 || cov.deleted == 0 {
				t.Fatalf("model is vacuous: a race is never exercised: %+v", *cov)
			}
		})
	}
}

func TestModelFleetMutations(t *testing.T) {
	for _, tc := range []struct {
		name string
		set  func(*fleetConfig)
		want string
	}{
		{"lastWriterWins", func(c *fleetConfig) { c.lastWriterWins = true }, "regression"},
		{"blindSwap", func(c *fleetConfig) { c.blindSwap = true }, "regression"},
		{"pruneAtOrBelow", func(c *fleetConfig) { c.pruneAtOrBelow = true }, "dangling"},
		{"pruneAtOrBelow+pruneIgnoresTarget, shared keys", func(c *fleetConfig) {
			c.pruneAtOrBelow, c.pruneIgnoresTarget, c.sharedKeys = true, true, true
		}, "dangling"},
		{"corruptWedges", func(c *fleetConfig) { c.corruptWedges = true }, "liveness"},
	} {
		for _, base := range []fleetVariant{{"2 exporters", fleetTwo, nil}, {"3 exporters", fleetThree, nil}} {
			t.Run(tc.name+"/"+base.name, func(t *testing.T) {
				res, _ := runFleet(t, fleetVariant{base: base.base, set: tc.set}.config())
				mustBreak(t, "mutation "+tc.name, res, tc.want)
			})
		}
	}
}

// TestModelFleetHarmlessMutations pins mutations that no run can expose in a
// given setting, and why; if one starts failing, a kernel or the model
// changed so that the guard it removes became load-bearing there: turn it
// into a caught mutation.
//
//   - pruneIgnoresTarget: IsPointerTarget is implied by the strict rank rule
//     (the target has the pointer's rank, never a rank strictly below it),
//     with distinct or shared keys.
//   - pruneAtOrBelow under shared keys: the only payload at the pointer's
//     rank is then the target, which IsPointerTarget spares.
//   - pruneAtOrBelow under round-bounded grace: a payload at the pointer's
//     rank that can still be published belongs to a round in flight, which
//     the grace spares. The strict rank rule is what protects a round that
//     outlives the grace period, which is why the main model uses zero grace.
func TestModelFleetHarmlessMutations(t *testing.T) {
	for _, v := range []fleetVariant{
		{"pruneIgnoresTarget", fleetTwo, func(c *fleetConfig) { c.pruneIgnoresTarget = true }},
		{"pruneIgnoresTarget, shared keys", fleetTwo, func(c *fleetConfig) {
			c.pruneIgnoresTarget, c.sharedKeys = true, true
		}},
		{"pruneAtOrBelow, shared keys", fleetTwo, func(c *fleetConfig) {
			c.pruneAtOrBelow, c.sharedKeys = true, true
		}},
		{"pruneAtOrBelow, round-bounded grace", fleetTwo, func(c *fleetConfig) {
			c.pruneAtOrBelow, c.graceCoversRounds = true, true
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			res, _ := runFleet(t, v.config())
			mustHold(t, v.name, res)
		})
	}
}

// TestModelFleetMidRunCorruption pins the known limits in the file comment:
// a corruption after a publish voids the zero-grace "dangling" theorem (a
// pruner acted on a rank nobody can read any more); a grace period that
// outlasts every upload-to-swap window restores it, with regression (since
// the corruption) and liveness intact, as long as payload keys are distinct
// per exporter.
func TestModelFleetMidRunCorruption(t *testing.T) {
	anytime := func(c *fleetConfig) { c.corruption = fleetCorruptAnytime }
	grace := func(c *fleetConfig) { anytime(c); c.graceCoversRounds = true }
	for _, tc := range []struct {
		v    fleetVariant
		want string // "": must hold
	}{
		{fleetVariant{"zero grace", fleetTwo, anytime}, "dangling"},
		{fleetVariant{"round-bounded grace", fleetTwo, grace}, ""},
		{fleetVariant{"round-bounded grace, three exporters", fleetThree, grace}, ""},
		// The grace is judged at listing time; an idempotent re-upload of
		// the same key between the listing and the delete is not seen.
		{fleetVariant{"round-bounded grace, shared keys", fleetTwo, func(c *fleetConfig) {
			grace(c)
			c.sharedKeys = true
		}}, "dangling"},
		{fleetVariant{"round-bounded grace, corruptWedges", fleetTwo, func(c *fleetConfig) {
			grace(c)
			c.corruptWedges = true
		}}, "liveness"},
	} {
		t.Run(tc.v.name, func(t *testing.T) {
			res, cov := runFleet(t, tc.v.config())
			if tc.want != "" {
				mustBreak(t, tc.v.name, res, tc.want)
				return
			}
			mustHold(t, tc.v.name, res)
			if cov.replacedCorrupt == 0 || cov.deleted == 0 || cov.superseded == 0 {
				t.Fatalf("model is vacuous: %+v", *cov)
			}
		})
	}
}
