package protocol

import (
	"fmt"
	"testing"
)

// Model 4: repair planning.
//
// Part A, the eviction memo. A bucket of two keys receives a bounded number of
// writes (put or delete, either key). It keeps one message per key (a KV
// bucket's history), and while eviction is in force (max_age or a discard-old
// limit) the head message can age out, current value or not. Eviction can be
// turned on and off. The fold under test consumes the stream in order, can
// crash and restart, reads retention at every start and while eviction is
// unobserved, and repairs an expired cursor as production does: CheckResume,
// then PlanRepair(RepairAuto, ListingTruth(retention, memo)), then either the
// key-listing diff (synthetic deletes + re-list) or a restore from the newest
// artifact, exported by a reference fold that never stops (its fold is the
// truth), gated by RestoreAllowed and decided per key by RestoreKey.
//
// Axiom (the original design's, made explicit): a fold reads retention while eviction is
// in force. Eviction is only turned off after the fold has read retention
// since the last age-out. Without it, eviction that starts, drops a key and
// stops while the fold is down is invisible to every check.
//
// Properties: terminal states have the fold equal to the truth (every write
// minus every real delete, aged-out keys included), or the fold stopped
// visibly with its data untouched because no artifact passes RestoreAllowed.
// Mutation noEvictionMemo (forge EvictionSeen=false into ListingTruth) must
// reach a fold that silently lost an aged-out key.
//
// Part B, the per-key restore. Exhaustive over every situation the artifact
// contract allows for up to four writes on two keys: a local fold at applied
// cursor L and an artifact at cursor C > L, each "complete together with the
// log after its cursor" (a key whose latest write is after the cursor may be
// older or missing in it: exported mid catch-up, or left by a restore that
// crashed after committing some chunks under the old cursor). The restore
// decides every key with RestoreKey, then the resume from C delivers the log
// after C. Properties: no key moves backward, no key the bucket lists live is
// deleted (not even transiently), and the fold ends equal to the truth.
// Mutations forging RestoreKey's inputs (local revision hidden; listing
// ignored) are each caught.

const repairKeys = 2

// repairLog is a bounded write history: entry i is revision i+1.
type repairLog struct {
	n     int
	key   [4]uint8 // which key
	isDel [4]bool  // delete marker, else a put
}

// keyAt returns key k's latest write with revision <= upTo.
func (l repairLog) keyAt(k uint8, upTo Revision) KeyState {
	var ks KeyState
	for i := 0; i < l.n && Revision(i+1) <= upTo; i++ {
		if l.key[i] == k {
			ks = KeyState{Present: !l.isDel[i], Rev: Revision(i + 1)}
		}
	}
	return ks
}

// latestRev returns the revision of key k's latest message (put or delete).
func (l repairLog) latestRev(k uint8) Revision {
	var r Revision
	for i := 0; i < l.n; i++ {
		if l.key[i] == k {
			r = Revision(i + 1)
		}
	}
	return r
}

// ---- Part A ----

type memoConfig struct {
	writes, evictions, toggles, crashes, exports int
	noEvictionMemo                               bool
}

type memoState struct {
	log      repairLog
	retained uint8 // bit r: revision r still in the stream
	evicting bool  // eviction in force
	unseen   bool  // an age-out happened that the fold has not read yet

	up       bool
	stopped  bool // visible fail-stop, fold untouched
	fold     [repairKeys]KeyState
	cursor   Cursor
	artifact Revision // newest exported artifact's cursor; 0: none
	artMemo  bool     // the artifact's cursor carries the eviction memo
	everAged bool     // an age-out happened (the always-watching reference saw it)

	writes, evictions, toggles, crashes, exports, repairs int
}

func (s memoState) window() Window {
	first := Revision(s.log.n + 1)
	for r := s.log.n; r >= 1; r-- {
		if s.retained&(1<<r) != 0 {
			first = Revision(r)
		}
	}
	return Window{First: first, Last: Revision(s.log.n)}
}

func (s memoState) retention() Retention {
	r := Retention{Window: s.window()}
	if s.evicting {
		r.MaxAge = 1 // any age limit: what matters is that current values can go
	}
	return r
}

// listedLive: the bucket lists key k now (its latest retained message is a put).
func (s memoState) listedLive(k uint8) bool {
	r := s.log.latestRev(k)
	return r != 0 && s.retained&(1<<r) != 0 && !s.log.isDel[r-1]
}

func (c memoConfig) model() (model[memoState], *memoCoverage) {
	cov := &memoCoverage{}
	readRetention := func(s memoState) memoState {
		if s.retention().HasEvicted() {
			s.cursor.EvictionSeen = true
		}
		s.unseen = false
		return s
	}
	memo := func(s memoState) bool {
		if c.noEvictionMemo {
			return false // mutation: the memo is forgotten
		}
		return s.cursor.EvictionSeen
	}
	// repair runs the planned repair of an expired cursor; ok=false is a
	// visible stop with the fold untouched.
	repair := func(s memoState) (memoState, string) {
		ret := s.retention()
		plan := PlanRepair(RepairAuto, ListingTruth(&ret, memo(s)))
		s.repairs++
		switch plan {
		case PlanKeyListingDiff:
			for k := uint8(0); k < repairKeys; k++ {
				if s.fold[k].Present && !s.listedLive(k) {
					s.fold[k] = KeyState{} // synthetic delete
				}
			}
			// re-list: the latest retained message of every key, in order
			var revs []Revision
			for k := uint8(0); k < repairKeys; k++ {
				if r := s.log.latestRev(k); r != 0 && s.retained&(1<<r) != 0 {
					s.fold[k] = s.log.keyAt(k, r)
					revs = append(revs, r)
				}
			}
			s.cursor = CursorAfterBatch(s.cursor, revs, 0)
			cov.relist++
			return s, "key-listing diff + re-list"
		case PlanRestore:
			w := s.window()
			if s.artifact == 0 || !RestoreAllowed(s.artifact, s.cursor.Rev, w) {
				s.stopped = true
				return s, fmt.Sprintf("restore refused (artifact %d, window %d..%d): fold stops untouched", s.artifact, w.First, w.Last)
			}
			for k := uint8(0); k < repairKeys; k++ {
				art := s.log.keyAt(k, s.artifact)
				identical := s.fold[k] == art
				switch RestoreKey(s.fold[k], art, identical, s.listedLive(k)) {
				case TakeArtifact:
					s.fold[k] = art
				case DeleteLocal:
					s.fold[k] = KeyState{}
				}
			}
			s.cursor.Rev = s.artifact
			s.cursor.EvictionSeen = s.cursor.EvictionSeen || s.artMemo // inherited
			cov.restore++
			return s, fmt.Sprintf("restore from artifact %d", s.artifact)
		}
		s.stopped = true
		return s, "repair " + plan.String() + ": fold stops untouched"
	}
	start := func(s memoState) (memoState, string) {
		s = readRetention(s)
		s.up = true
		if s.cursor.Rev == 0 && s.fold == [repairKeys]KeyState{} {
			// cursor-less empty start: state-sync, or seed from an artifact
			ret := s.retention()
			if CursorlessStartNeedsRepair(RepairAuto, false, ListingTruth(&ret, memo(s))) {
				return repair(s)
			}
			return s, "state-sync start"
		}
		if CheckResume(s.cursor.Rev, s.window()) == ResumeExpired {
			return repair(s)
		}
		return s, fmt.Sprintf("resume from %d", s.cursor.Rev)
	}

	m := model[memoState]{
		rank: func(s memoState) []int {
			return []int{s.writes, s.evictions, s.toggles, s.exports, s.crashes, s.repairs, int(s.cursor.Rev), b2i(s.cursor.EvictionSeen), b2i(!s.unseen), b2i(s.up)}
		},
		next: func(s memoState) []step[memoState] {
			if s.stopped {
				return nil
			}
			var out []step[memoState]
			add := func(label string, n memoState) { out = append(out, step[memoState]{label, n}) }
			if s.writes < c.writes {
				for k := uint8(0); k < repairKeys; k++ {
					for _, del := range []bool{false, true} {
						n := s
						i := n.log.n
						n.log.key[i], n.log.isDel[i] = k, del
						n.log.n++
						n.writes++
						if old := s.log.latestRev(k); old != 0 {
							n.retained &^= 1 << old // history 1: superseded
						}
						n.retained |= 1 << (i + 1)
						op := "put"
						if del {
							op = "delete"
						}
						add(fmt.Sprintf("write %d: %s key %d", i+1, op, k), n)
					}
				}
			}
			if s.evicting && s.evictions < c.evictions && s.retained != 0 {
				n := s
				w := s.window()
				n.retained &^= 1 << w.First
				n.evictions++
				n.unseen = true
				n.everAged = true
				add(fmt.Sprintf("revision %d ages out", w.First), n)
			}
			if s.toggles < c.toggles && !(s.evicting && s.unseen) {
				n := s
				n.evicting = !s.evicting
				n.toggles++
				add(fmt.Sprintf("operator sets eviction %v", n.evicting), n)
			}
			if s.exports < c.exports && s.log.n > 0 && Revision(s.log.n) > s.artifact {
				n := s
				n.artifact = Revision(s.log.n) // the reference fold is the truth
				n.artMemo = s.everAged
				n.exports++
				add(fmt.Sprintf("reference exports artifact at %d", n.artifact), n)
			}
			if !s.up {
				n, label := start(s)
				add("start: "+label, n)
				return out
			}
			if s.unseen {
				add("fold reads retention", readRetention(s))
			}
			if s.crashes < c.crashes {
				n := s
				n.up = false
				n.crashes++
				add("fold crashes", n)
			}
			// The floor guard's backstop probe: no delivery is needed to
			// notice that retention overran the cursor.
			if !ResumeWindowOK(s.cursor.Rev, s.window().First) {
				n, label := repair(s)
				add("floor guard probe trips: "+label, n)
				return out
			}
			// next delivery: the first retained revision above the cursor
			// (NATS silently skips what aged out), behind the floor guard.
			for r := s.cursor.Rev + 1; int(r) <= s.log.n; r++ {
				if s.retained&(1<<r) == 0 {
					continue
				}
				if r > s.cursor.Rev+1 && !ResumeWindowOK(s.cursor.Rev, s.window().First) {
					n, label := repair(s)
					add("floor guard trips: "+label, n)
					break
				}
				n := s
				k := s.log.key[r-1]
				n.fold[k] = s.log.keyAt(k, r)
				n.cursor = CursorAfterBatch(s.cursor, []Revision{r}, 0)
				add(fmt.Sprintf("fold applies %d", r), n)
				break
			}
			return out
		},
		final: func(s memoState) error {
			if s.stopped {
				cov.stopped++
				return nil
			}
			for k := uint8(0); k < repairKeys; k++ {
				if truth := s.log.keyAt(k, MaxRevision); s.fold[k].Present != truth.Present || (truth.Present && s.fold[k].Rev != truth.Rev) {
					return fmt.Errorf("convergence: key %d is %+v in the fold, truth %+v (every write minus every real delete)", k, s.fold[k], truth)
				}
			}
			cov.converged++
			return nil
		},
		maxStates: 3_000_000,
	}
	for _, on := range []bool{false, true} {
		m.init = append(m.init, memoState{evicting: on})
	}
	return m, cov
}

type memoCoverage struct{ relist, restore, stopped, converged int }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func TestModelRepairEvictionMemo(t *testing.T) {
	cfg := memoConfig{writes: 3, evictions: 2, toggles: 2, crashes: 1, exports: 1}
	m, cov := cfg.model()
	mustHold(t, "eviction memo", explore(t, m))
	t.Logf("coverage: %d key-listing repairs, %d restores, %d converged and %d stopped terminal states",
		cov.relist, cov.restore, cov.converged, cov.stopped)
	if cov.relist == 0 || cov.restore == 0 || cov.converged == 0 {
		t.Fatalf("model is vacuous: %+v", *cov)
	}

	cfg.noEvictionMemo = true
	m, _ = cfg.model()
	mustBreak(t, "mutation noEvictionMemo", explore(t, m), "convergence")
}

// ---- Part B ----

type restoreMutation uint8

const (
	restoreCorrect    restoreMutation = iota
	restoreHideLocal                  // forge: RestoreKey never sees the local revision
	restoreIgnoreList                 // forge: RestoreKey never sees the listing
)

// restoreSituation is one key's situation at a restore, from one write log.
type restoreSituation struct {
	log       repairLog
	local     Revision             // local applied cursor L
	art       Revision             // artifact cursor C > L
	localKeys [repairKeys]KeyState // local fold
	artKeys   [repairKeys]KeyState // artifact fold
}

// behindOptions lists what a fold at cursor cur may hold for key k under the
// contract "complete together with the log after its cursor": exactly the
// latest write <= cur, or, when k is written again after cur, any earlier
// state of k (missing, or any of its writes).
func behindOptions(l repairLog, k uint8, cur Revision) []KeyState {
	exact := l.keyAt(k, cur)
	if l.latestRev(k) <= cur {
		return []KeyState{exact}
	}
	opts := []KeyState{{}}
	for i := 0; i < l.n; i++ {
		if l.key[i] == k {
			opts = append(opts, KeyState{Present: !l.isDel[i], Rev: Revision(i + 1)})
		}
	}
	return opts
}

func restoreSituations(maxWrites int) []restoreSituation {
	var out []restoreSituation
	var logs []repairLog
	var gen func(l repairLog)
	gen = func(l repairLog) {
		if l.n > 0 {
			logs = append(logs, l)
		}
		if l.n == maxWrites {
			return
		}
		for k := uint8(0); k < repairKeys; k++ {
			for _, del := range []bool{false, true} {
				n := l
				n.key[n.n], n.isDel[n.n] = k, del
				n.n++
				gen(n)
			}
		}
	}
	gen(repairLog{})
	for _, l := range logs {
		for local := Revision(0); int(local) <= l.n; local++ {
			for art := local + 1; int(art) <= l.n; art++ {
				la0, la1 := behindOptions(l, 0, local), behindOptions(l, 1, local)
				aa0, aa1 := behindOptions(l, 0, art), behindOptions(l, 1, art)
				for _, x0 := range la0 {
					for _, x1 := range la1 {
						for _, y0 := range aa0 {
							for _, y1 := range aa1 {
								out = append(out, restoreSituation{l, local, art,
									[repairKeys]KeyState{x0, x1}, [repairKeys]KeyState{y0, y1}})
							}
						}
					}
				}
			}
		}
	}
	return out
}

type restoreState struct {
	sit   restoreSituation
	fold  [repairKeys]KeyState
	phase uint8 // 0 before the restore, 1 restored, 2 resumed
	bad   string
}

func restoreModel(maxWrites int, mut restoreMutation) model[restoreState] {
	var init []restoreState
	for _, s := range restoreSituations(maxWrites) {
		init = append(init, restoreState{sit: s, fold: s.localKeys})
	}
	listedLive := func(l repairLog, k uint8) bool { return l.keyAt(k, MaxRevision).Present }
	return model[restoreState]{
		init: init,
		rank: func(s restoreState) []int { return []int{int(s.phase)} },
		next: func(s restoreState) []step[restoreState] {
			switch s.phase {
			case 0:
				n := s
				n.phase = 1
				for k := uint8(0); k < repairKeys; k++ {
					local, art, live := s.fold[k], s.sit.artKeys[k], listedLive(s.sit.log, k)
					switch mut {
					case restoreHideLocal:
						local.Rev = 0
					case restoreIgnoreList:
						live = false
					}
					before := s.fold[k]
					switch RestoreKey(local, art, s.fold[k] == art, live) {
					case TakeArtifact:
						n.fold[k] = art
					case DeleteLocal:
						n.fold[k] = KeyState{}
					}
					after := n.fold[k]
					switch {
					case before.Present && after.Present && after.Rev < before.Rev:
						n.bad = fmt.Sprintf("no backward move: key %d went from revision %d to %d", k, before.Rev, after.Rev)
					case before.Present && !after.Present && listedLive(s.sit.log, k):
						n.bad = fmt.Sprintf("no phantom delete: key %d deleted while the bucket lists it live", k)
					}
				}
				return []step[restoreState]{{fmt.Sprintf("restore local@%d from artifact@%d", s.sit.local, s.sit.art), n}}
			case 1:
				n := s
				n.phase = 2
				for r := s.sit.art + 1; int(r) <= s.sit.log.n; r++ {
					k := s.sit.log.key[r-1]
					n.fold[k] = s.sit.log.keyAt(k, r)
				}
				return []step[restoreState]{{"resume from the artifact's cursor", n}}
			}
			return nil
		},
		invariant: func(s restoreState) error {
			if s.bad != "" {
				return fmt.Errorf("%s (log %+v, local %+v, artifact %+v)", s.bad, s.sit.log, s.sit.localKeys, s.sit.artKeys)
			}
			return nil
		},
		final: func(s restoreState) error {
			for k := uint8(0); k < repairKeys; k++ {
				truth := s.sit.log.keyAt(k, MaxRevision)
				if s.fold[k].Present != truth.Present || (truth.Present && s.fold[k].Rev != truth.Rev) {
					return fmt.Errorf("convergence: key %d is %+v after the resume, truth %+v", k, s.fold[k], truth)
				}
			}
			return nil
		},
	}
}

func TestModelRepairRestoreKey(t *testing.T) {
	mustHold(t, "per-key restore", explore(t, restoreModel(4, restoreCorrect)))
	mustBreak(t, "mutation hide local revision", explore(t, restoreModel(4, restoreHideLocal)), "no backward move")
	mustBreak(t, "mutation ignore listing", explore(t, restoreModel(4, restoreIgnoreList)), "no phantom delete")
}
