package protocol

import (
	"fmt"
	"testing"
)

// Model 1: cursor authority.
//
// What is modelled: one fold consuming a stream of N revisions in order. Any
// prefix of the undelivered revisions may be delivered into the pending batch;
// a flush may happen at any moment the batch is non-empty (covering every
// window/size/shutdown trigger); the plugin applies the batch, then the store
// commit either succeeds (data + cursor in one batch, the cursor from
// CursorAfterBatch) or fails transiently (the raw batch is re-queued in front
// of the next one; after streakLimit consecutive failures the fold stops);
// the process can crash (and restart) between any two steps, and a stopped
// fold is restarted by its supervisor. A revision the plugin rejects is
// handled exactly like an applied one here (nothing to store, but covered by
// the cursor), so the model does not distinguish them. An on-applied callback
// reports the cursor after every apply, and a careless user persists that
// value on the side.
//
// Properties:
//   - invariant: the store's cursor never names a revision that is not in the
//     store (applied and committed, or rejected by the plugin);
//   - final: every run ends (all faults are bounded) with the store holding
//     every revision and its cursor at the stream head.
//
// Mutations, each caught with a counterexample:
//   - dropFailedBatch: a failed commit discards the batch instead of
//     re-queueing it (a bug the original design shipped);
//   - resumeFromCallback: the restart resumes from the cursor the callback
//     reported instead of the one the store recovered.
//
// Abstracted away: values (a revision's presence stands for its data), keys
// (cursor authority does not depend on them), channel capacity (any delivery
// interleaving is explored), the unknown-revision update (covered by
// Advance's table tests).

type cursorModelConfig struct {
	revs        int // stream length N (revisions 1..N)
	crashes     int // crash budget
	failures    int // transient commit-failure budget
	streakLimit int // consecutive failures that stop the fold

	dropFailedBatch    bool
	resumeFromCallback bool
}

type cursorState struct {
	// durable
	storeData   uint8 // bit r: revision r committed (or covered as rejected)
	storeCursor Revision
	sideCursor  Revision // what the callback reported, persisted by the user
	// volatile
	running   bool
	delivered Revision // highest revision delivered since (re)start
	pendLo    Revision // pending batch [pendLo, pendHi]; empty when pendLo == 0
	pendHi    Revision
	streak    int
	// fault budgets used, and supervisor restarts after a fail-stop
	crashes, failures, restarts int
}

func (c cursorModelConfig) model() model[cursorState] {
	all := uint8(0)
	for r := 1; r <= c.revs; r++ {
		all |= 1 << r
	}
	restart := func(s cursorState) cursorState {
		from := s.storeCursor // the store's cursor is the authority
		if c.resumeFromCallback {
			from = s.sideCursor
		}
		s.running = true
		s.delivered = from
		s.pendLo, s.pendHi, s.streak = 0, 0, 0
		return s
	}
	return model[cursorState]{
		init: []cursorState{restart(cursorState{})},
		rank: func(s cursorState) []int {
			return []int{s.crashes, s.restarts, s.failures, int(s.storeCursor), int(s.delivered)}
		},
		next: func(s cursorState) []step[cursorState] {
			var out []step[cursorState]
			if !s.running {
				n := s
				n.restarts++
				n = restart(n)
				return append(out, step[cursorState]{fmt.Sprintf("supervisor restarts the stopped fold from cursor %d", n.delivered), n})
			}
			if s.running && int(s.delivered) < c.revs {
				n := s
				n.delivered++
				if n.pendLo == 0 {
					n.pendLo = n.delivered
				}
				n.pendHi = n.delivered
				out = append(out, step[cursorState]{fmt.Sprintf("deliver %d", n.delivered), n})
			}
			if s.running && s.pendLo != 0 {
				revs := make([]Revision, 0, 4)
				for r := s.pendLo; r <= s.pendHi; r++ {
					revs = append(revs, r)
				}
				// The plugin returned; now the commit.
				ok := s
				after := CursorAfterBatch(Cursor{Rev: s.storeCursor}, revs, 0)
				for r := s.pendLo; r <= s.pendHi; r++ {
					ok.storeData |= 1 << r // applied and stored, or rejected and covered
				}
				ok.storeCursor = after.Rev
				ok.sideCursor = after.Rev
				ok.pendLo, ok.pendHi, ok.streak = 0, 0, 0
				out = append(out, step[cursorState]{fmt.Sprintf("flush [%d..%d]: commit ok, cursor %d", s.pendLo, s.pendHi, after.Rev), ok})

				if s.failures < c.failures {
					f := s
					f.failures++
					// apply ran: the callback reports the advanced cursor
					f.sideCursor = CursorAfterBatch(Cursor{Rev: s.sideCursor}, revs, 0).Rev
					f.streak++
					label := fmt.Sprintf("flush [%d..%d]: commit fails, batch re-queued", s.pendLo, s.pendHi)
					if c.dropFailedBatch {
						f.pendLo, f.pendHi = 0, 0
						label = fmt.Sprintf("flush [%d..%d]: commit fails, batch DROPPED", s.pendLo, s.pendHi)
					}
					if f.streak >= c.streakLimit {
						f.running = false
						label += ", fold stops (failure streak)"
					}
					out = append(out, step[cursorState]{label, f})
				}
			}
			if s.crashes < c.crashes {
				n := s
				n.crashes++
				n = restart(n)
				from := "store"
				if c.resumeFromCallback {
					from = "callback"
				}
				out = append(out, step[cursorState]{fmt.Sprintf("crash (or stop) and restart from %s cursor %d", from, n.delivered), n})
			}
			return out
		},
		invariant: func(s cursorState) error {
			for r := Revision(1); r <= s.storeCursor; r++ {
				if s.storeData&(1<<r) == 0 {
					return fmt.Errorf("cursor authority: store cursor %d names revision %d, which the store does not hold", s.storeCursor, r)
				}
			}
			return nil
		},
		final: func(s cursorState) error {
			if s.storeData&all != all || int(s.storeCursor) != c.revs {
				return fmt.Errorf("convergence: run ended with store %08b cursor %d, want every revision 1..%d", s.storeData, s.storeCursor, c.revs)
			}
			return nil
		},
	}
}

func TestModelCursorAuthority(t *testing.T) {
	base := cursorModelConfig{revs: 5, crashes: 2, failures: 3, streakLimit: 2}
	mustHold(t, "cursor authority", explore(t, base.model()))

	drop := base
	drop.dropFailedBatch = true
	mustBreak(t, "mutation dropFailedBatch", explore(t, drop.model()), "cursor authority")

	side := base
	side.resumeFromCallback = true
	mustBreak(t, "mutation resumeFromCallback", explore(t, side.model()), "cursor authority")
}
