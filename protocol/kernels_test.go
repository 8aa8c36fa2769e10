package protocol_test

import (
	"fmt"
	"math"
	"slices"
	"testing"
	"time"

	"github.com/foldhost/foldhost/protocol"
)

// Table tests for every decision kernel. Each row's name says what it pins.
// Boundaries: 0 (NoRevision), 1 (the first real revision), MaxRevision,
// equal values, the empty stream (First == Last+1) and the never-written
// stream (First == Last == 0).

const maxRev = protocol.MaxRevision

func TestResumeWindowOK(t *testing.T) {
	tests := []struct {
		name          string
		cursor, first protocol.Revision
		want          bool
	}{
		{"cursor 0, never-written stream (first 0)", 0, 0, true},
		{"cursor 0, first 1: nothing evicted yet", 0, 1, true},
		{"cursor 0, first 2: revision 1 evicted", 0, 2, false},
		{"cursor 1, first 1: cursor's own message retained", 1, 1, true},
		{"cursor 1, first 2: next revision is the first", 1, 2, true},
		{"cursor 1, first 3: revision 2 evicted", 1, 3, false},
		{"first == cursor", 5, 5, true},
		{"first == cursor+1: exact boundary, gap-free", 5, 6, true},
		{"first == cursor+2: one revision evicted", 5, 7, false},
		{"first far below cursor", 5, 1, true},
		{"first 0 with a known cursor", 5, 0, true},
		{"cursor 1, first max", 1, maxRev, false},
		{"cursor max-2, first max: one revision evicted", maxRev - 2, maxRev, false},
		{"cursor max-1, first max: cursor+1 == max", maxRev - 1, maxRev, true},
		{"cursor max, first max: saturating cursor+1, no wrap", maxRev, maxRev, true},
		{"cursor max, first 0: saturating, no wrap to 0", maxRev, 0, true},
		{"cursor max, first 1", maxRev, 1, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.ResumeWindowOK(tt.cursor, tt.first); got != tt.want {
				t.Errorf("ResumeWindowOK(%d, %d) = %v, want %v", tt.cursor, tt.first, got, tt.want)
			}
		})
	}
}

func TestCheckResume(t *testing.T) {
	var (
		neverWritten = protocol.Window{First: 0, Last: 0}
		emptyNew     = protocol.Window{First: 1, Last: 0}  // empty, nothing ever evicted
		emptyPurged  = protocol.Window{First: 6, Last: 5}  // empty after 5 messages
		single       = protocol.Window{First: 1, Last: 1}  // one message, nothing evicted
		normal       = protocol.Window{First: 3, Last: 10} // revisions 1 and 2 evicted
		atTop        = protocol.Window{First: maxRev, Last: maxRev}
		inconsistent = protocol.Window{First: 30, Last: 10} // First > Last+1: not a NATS reading
	)
	tests := []struct {
		name   string
		cursor protocol.Revision
		w      protocol.Window
		want   protocol.ResumeVerdict
	}{
		{"never-written stream, cursor 0: ok (no position, nothing to miss)", 0, neverWritten, protocol.ResumeOK},
		{"never-written stream, cursor 1: beyond head (bucket recreated)", 1, neverWritten, protocol.ResumeBeyondHead},
		{"never-written stream, cursor max: at max wins", maxRev, neverWritten, protocol.ResumeAtMax},
		{"empty new stream (1,0), cursor 0: ok", 0, emptyNew, protocol.ResumeOK},
		{"empty new stream (1,0), cursor 1: beyond head", 1, emptyNew, protocol.ResumeBeyondHead},
		{"empty purged stream, cursor == last: ok", 5, emptyPurged, protocol.ResumeOK},
		{"empty purged stream, cursor == last-1: expired", 4, emptyPurged, protocol.ResumeExpired},
		{"empty purged stream, cursor 0: expired", 0, emptyPurged, protocol.ResumeExpired},
		{"empty purged stream, cursor == first (last+1): beyond head", 6, emptyPurged, protocol.ResumeBeyondHead},
		{"single message, cursor 0: ok", 0, single, protocol.ResumeOK},
		{"single message, cursor 1 == last: ok", 1, single, protocol.ResumeOK},
		{"single message, cursor 2: beyond head", 2, single, protocol.ResumeBeyondHead},
		{"cursor 0 below evicted window: expired", 0, normal, protocol.ResumeExpired},
		{"cursor first-2: expired (one revision evicted)", 1, normal, protocol.ResumeExpired},
		{"cursor first-1: ok (exact boundary)", 2, normal, protocol.ResumeOK},
		{"cursor == first: ok", 3, normal, protocol.ResumeOK},
		{"cursor inside window: ok", 7, normal, protocol.ResumeOK},
		{"cursor == last: ok (caught up)", 10, normal, protocol.ResumeOK},
		{"cursor last+1: beyond head", 11, normal, protocol.ResumeBeyondHead},
		{"cursor max: at max, never a wrap to 0", maxRev, normal, protocol.ResumeAtMax},
		{"cursor max-1 at top window: ok", maxRev - 1, atTop, protocol.ResumeOK},
		{"cursor max-2 at top window: expired", maxRev - 2, atTop, protocol.ResumeExpired},
		{"cursor max at top window: at max wins over ok", maxRev, atTop, protocol.ResumeAtMax},
		{"inconsistent window (first > last+1): beyond head checked first", 20, inconsistent, protocol.ResumeBeyondHead},
		{"inconsistent window, cursor below last: expired", 5, inconsistent, protocol.ResumeExpired},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.CheckResume(tt.cursor, tt.w); got != tt.want {
				t.Errorf("CheckResume(%d, %+v) = %v, want %v", tt.cursor, tt.w, got, tt.want)
			}
		})
	}
}

// TestCheckResumeAgreesWithWindowCheck checks, over every small consistent
// window (First <= Last+1) and cursor, that CheckResume refines ResumeWindowOK
// and never reports ok for a cursor that cannot resume.
func TestCheckResumeAgreesWithWindowCheck(t *testing.T) {
	revs := []protocol.Revision{0, 1, 2, 3, 4, 5, maxRev - 2, maxRev - 1, maxRev}
	n := 0
	for _, first := range revs {
		for _, last := range revs {
			if first > last && first-last > 1 {
				continue // not a NATS reading
			}
			w := protocol.Window{First: first, Last: last}
			for _, c := range revs {
				n++
				got := protocol.CheckResume(c, w)
				var want protocol.ResumeVerdict
				switch {
				case c == maxRev:
					want = protocol.ResumeAtMax
				case c > last:
					want = protocol.ResumeBeyondHead
				case !protocol.ResumeWindowOK(c, first):
					want = protocol.ResumeExpired
				default:
					want = protocol.ResumeOK
				}
				if got != want {
					t.Errorf("CheckResume(%d, %+v) = %v, want %v", c, w, got, want)
				}
				if got == protocol.ResumeOK && (c >= maxRev || c > last || first > c+1) {
					t.Errorf("CheckResume(%d, %+v) = ok for a cursor that cannot resume gap-free", c, w)
				}
			}
		}
	}
	t.Logf("%d (cursor, window) pairs", n)
}

func TestAdvance(t *testing.T) {
	tests := []struct {
		name      string
		high, rev protocol.Revision
		want      protocol.Revision
	}{
		{"unknown on nothing-applied stays nothing", 0, 0, 0},
		{"first real revision mints a position", 0, 1, 1},
		{"unknown never lowers the mark", 5, 0, 5},
		{"older revision never lowers the mark", 5, 3, 5},
		{"equal revision keeps the mark", 5, 5, 5},
		{"next revision raises the mark", 5, 6, 6},
		{"jump raises the mark", 5, 1000, 1000},
		{"max from nothing", 0, maxRev, maxRev},
		{"max stays max on unknown", maxRev, 0, maxRev},
		{"max stays max on older", maxRev, 1, maxRev},
		{"max-1 to max", maxRev - 1, maxRev, maxRev},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.Advance(tt.high, tt.rev); got != tt.want {
				t.Errorf("Advance(%d, %d) = %d, want %d", tt.high, tt.rev, got, tt.want)
			}
		})
	}
}

func TestCursorAfterBatch(t *testing.T) {
	const t1, t2 int64 = 1_700_000_000_000_000_000, 1_700_000_001_000_000_000
	tests := []struct {
		name  string
		prev  protocol.Cursor
		revs  []protocol.Revision
		msgNS int64
		want  protocol.Cursor
	}{
		{"nil batch keeps the cursor, time and memo",
			protocol.Cursor{Rev: 5, EvictionSeen: true, MsgUnixNano: t1}, nil, t2,
			protocol.Cursor{Rev: 5, EvictionSeen: true, MsgUnixNano: t1}},
		{"empty batch keeps the cursor",
			protocol.Cursor{Rev: 5, MsgUnixNano: t1}, []protocol.Revision{}, t2,
			protocol.Cursor{Rev: 5}},
		{"all-unknown batch (synthetic deletes) never mints a position",
			protocol.Cursor{}, []protocol.Revision{0, 0, 0}, t2,
			protocol.Cursor{}},
		{"all-unknown batch keeps a known cursor (no memo: no time kept)",
			protocol.Cursor{Rev: 7, MsgUnixNano: t1}, []protocol.Revision{0}, t2,
			protocol.Cursor{Rev: 7}},
		{"first batch from nothing applied",
			protocol.Cursor{}, []protocol.Revision{1}, t1,
			protocol.Cursor{Rev: 1}},
		{"single next revision advances and takes the time",
			protocol.Cursor{Rev: 5, MsgUnixNano: t1}, []protocol.Revision{6}, t2,
			protocol.Cursor{Rev: 6}},
		{"out-of-order batch takes the highest revision",
			protocol.Cursor{Rev: 5}, []protocol.Revision{9, 6, 8, 7}, t2,
			protocol.Cursor{Rev: 9}},
		{"unknown revisions interleaved never clobber the batch high",
			protocol.Cursor{Rev: 5}, []protocol.Revision{0, 7, 0, 6, 0}, t2,
			protocol.Cursor{Rev: 7}},
		{"replayed batch below the cursor never moves it backward",
			protocol.Cursor{Rev: 10, MsgUnixNano: t1}, []protocol.Revision{3, 4, 5}, t2,
			protocol.Cursor{Rev: 10}},
		{"batch high equal to the cursor keeps the cursor",
			protocol.Cursor{Rev: 10, MsgUnixNano: t1}, []protocol.Revision{9, 10}, t2,
			protocol.Cursor{Rev: 10}},
		{"memo survives an advance",
			protocol.Cursor{Rev: 5, EvictionSeen: true, MsgUnixNano: t1}, []protocol.Revision{6}, t2,
			protocol.Cursor{Rev: 6, EvictionSeen: true, MsgUnixNano: t2}},
		{"memo is never set by a batch",
			protocol.Cursor{Rev: 5}, []protocol.Revision{6}, 0,
			protocol.Cursor{Rev: 6}},
		{"advance with unknown time clears the old message's time",
			protocol.Cursor{Rev: 5, MsgUnixNano: t1}, []protocol.Revision{6}, 0,
			protocol.Cursor{Rev: 6}},
		{"batch reaching MaxRevision",
			protocol.Cursor{Rev: maxRev - 1}, []protocol.Revision{maxRev}, t2,
			protocol.Cursor{Rev: maxRev}},
		{"cursor at MaxRevision never moves",
			protocol.Cursor{Rev: maxRev, MsgUnixNano: t1}, []protocol.Revision{1, maxRev}, t2,
			protocol.Cursor{Rev: maxRev}},
		{"memo cursor keeps its time when the position does not move",
			protocol.Cursor{Rev: 10, EvictionSeen: true, MsgUnixNano: t1}, []protocol.Revision{9, 10}, t2,
			protocol.Cursor{Rev: 10, EvictionSeen: true, MsgUnixNano: t1}},
		{"mixed: some below, some above, some unknown",
			protocol.Cursor{Rev: 5, MsgUnixNano: t1}, []protocol.Revision{2, 0, 12, 5, 11}, t2,
			protocol.Cursor{Rev: 12}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := slices.Clone(tt.revs)
			got := protocol.CursorAfterBatch(tt.prev, tt.revs, tt.msgNS)
			if got != tt.want {
				t.Errorf("CursorAfterBatch(%+v, %v, %d) = %+v, want %+v", tt.prev, tt.revs, tt.msgNS, got, tt.want)
			}
			if !slices.Equal(in, tt.revs) {
				t.Errorf("CursorAfterBatch modified its revs: %v -> %v", in, tt.revs)
			}
			if got.Rev < tt.prev.Rev {
				t.Errorf("cursor moved backward: %d -> %d", tt.prev.Rev, got.Rev)
			}
		})
	}
}

func TestPointerStateAccessors(t *testing.T) {
	tests := []struct {
		name        string
		p           protocol.PointerState
		wantPresent bool
		wantRank    protocol.Revision
		wantOK      bool
		wantString  string
	}{
		{"zero value is absent", protocol.PointerState{}, false, 0, false, "absent"},
		{"absent", protocol.PointerAbsent(), false, 0, false, "absent"},
		{"corrupt is present but has no rank", protocol.PointerCorrupt(), true, 0, false, "corrupt"},
		{"rank 0 is present and parseable", protocol.PointerAt(0), true, 0, true, "rank:0"},
		{"rank 1", protocol.PointerAt(1), true, 1, true, "rank:1"},
		{"rank max", protocol.PointerAt(maxRev), true, maxRev, true, "rank:18446744073709551615"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.p.Present(); got != tt.wantPresent {
				t.Errorf("Present() = %v, want %v", got, tt.wantPresent)
			}
			r, ok := tt.p.Rank()
			if r != tt.wantRank || ok != tt.wantOK {
				t.Errorf("Rank() = (%d, %v), want (%d, %v)", r, ok, tt.wantRank, tt.wantOK)
			}
			if got := tt.p.String(); got != tt.wantString {
				t.Errorf("String() = %q, want %q", got, tt.wantString)
			}
		})
	}
	if (protocol.PointerState{}) != protocol.PointerAbsent() {
		t.Error("zero PointerState != PointerAbsent()")
	}
	if protocol.PointerAt(3) != protocol.PointerAt(3) || protocol.PointerAt(3) == protocol.PointerAt(4) {
		t.Error("PointerAt equality is not by rank")
	}
	if protocol.PointerAt(0) == protocol.PointerAbsent() || protocol.PointerAt(0) == protocol.PointerCorrupt() {
		t.Error("PointerAt(0) must differ from absent and corrupt")
	}
}

func TestPointerPublishAllowed(t *testing.T) {
	tests := []struct {
		name      string
		current   protocol.PointerState
		candidate protocol.Revision
		want      bool
	}{
		{"absent slot, candidate 0: open slot", protocol.PointerAbsent(), 0, true},
		{"absent slot, candidate 1", protocol.PointerAbsent(), 1, true},
		{"absent slot, candidate max", protocol.PointerAbsent(), maxRev, true},
		{"corrupt pointer, candidate 0: replaceable, never a wedge", protocol.PointerCorrupt(), 0, true},
		{"corrupt pointer, candidate max", protocol.PointerCorrupt(), maxRev, true},
		{"rank 0, candidate 0: equal allowed", protocol.PointerAt(0), 0, true},
		{"rank 0, candidate 1: newer allowed", protocol.PointerAt(0), 1, true},
		{"rank 1, candidate 0: stale refused", protocol.PointerAt(1), 0, false},
		{"rank 5, candidate 4: one below refused", protocol.PointerAt(5), 4, false},
		{"rank 5, candidate 5: equal allowed (two exporters, same cursor)", protocol.PointerAt(5), 5, true},
		{"rank 5, candidate 6: one above allowed", protocol.PointerAt(5), 6, true},
		{"rank max, candidate max: equal allowed", protocol.PointerAt(maxRev), maxRev, true},
		{"rank max, candidate max-1: refused", protocol.PointerAt(maxRev), maxRev - 1, false},
		{"rank max, candidate 0: refused", protocol.PointerAt(maxRev), 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.PointerPublishAllowed(tt.current, tt.candidate); got != tt.want {
				t.Errorf("PointerPublishAllowed(%v, %d) = %v, want %v", tt.current, tt.candidate, got, tt.want)
			}
		})
	}
}

// TestPointerSwapAllowed: the rank rule and the fleet's fence, each row
// flipping one. Mutations caught: the fence dropped (a stale owner's swap
// allowed over a newer owner's pointer), the rank rule dropped, epoch 0
// fenced (an exporter outside a fleet refused).
func TestPointerSwapAllowed(t *testing.T) {
	tests := []struct {
		name        string
		current     protocol.PointerState
		rank, epoch protocol.Revision
		want        bool
	}{
		{"absent slot: any owner", protocol.PointerAbsent(), 1, 4, true},
		{"corrupt: replaceable by any owner", protocol.PointerCorrupt(), 1, 1, true},
		{"same owner, newer rank", protocol.PointerAtEpoch(5, 4), 6, 4, true},
		{"same owner, older rank: superseded", protocol.PointerAtEpoch(5, 4), 4, 4, false},
		{"newer owner over an older one's pointer", protocol.PointerAtEpoch(5, 4), 5, 9, true},
		{"older owner over a newer one's pointer: fenced", protocol.PointerAtEpoch(5, 9), 6, 4, false},
		{"older owner, even far ahead in rank: fenced", protocol.PointerAtEpoch(5, 9), maxRev, 4, false},
		{"an owner over a pointer from outside a fleet", protocol.PointerAt(5), 5, 1, true},
		{"outside a fleet over a fleet's pointer: rank rule only", protocol.PointerAtEpoch(5, 9), 6, 0, true},
		{"outside a fleet, older rank: superseded", protocol.PointerAtEpoch(5, 9), 4, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.PointerSwapAllowed(tt.current, tt.rank, tt.epoch); got != tt.want {
				t.Errorf("PointerSwapAllowed(%v, %d, %d) = %v, want %v", tt.current, tt.rank, tt.epoch, got, tt.want)
			}
		})
	}
}

func TestPayloadPrunable(t *testing.T) {
	// prunable is every condition at once; rows flip one at a time.
	prunable := protocol.Payload{Rank: 4, RankKnown: true, IsPointerTarget: false, AgedOut: true}
	with := func(f func(*protocol.Payload)) protocol.Payload { p := prunable; f(&p); return p }
	tests := []struct {
		name    string
		p       protocol.Payload
		pointer protocol.PointerState
		want    bool
	}{
		{"all conditions hold: rank strictly below pointer", prunable, protocol.PointerAt(5), true},
		{"rank equal to pointer: may still be published, kept", prunable, protocol.PointerAt(4), false},
		{"rank above pointer: kept", prunable, protocol.PointerAt(3), false},
		{"pointer target: kept", with(func(p *protocol.Payload) { p.IsPointerTarget = true }), protocol.PointerAt(5), false},
		{"not aged out (grace period): kept", with(func(p *protocol.Payload) { p.AgedOut = false }), protocol.PointerAt(5), false},
		{"rank unknown: kept", with(func(p *protocol.Payload) { p.RankKnown = false }), protocol.PointerAt(5), false},
		{"rank unknown with rank field 0: kept", with(func(p *protocol.Payload) { p.RankKnown = false; p.Rank = 0 }), protocol.PointerAt(5), false},
		{"absent pointer prunes nothing", prunable, protocol.PointerAbsent(), false},
		{"corrupt pointer prunes nothing", prunable, protocol.PointerCorrupt(), false},
		{"pointer rank 0 prunes nothing, not even rank 0", with(func(p *protocol.Payload) { p.Rank = 0 }), protocol.PointerAt(0), false},
		{"rank 0 below pointer 1", with(func(p *protocol.Payload) { p.Rank = 0 }), protocol.PointerAt(1), true},
		{"rank max-1 below pointer max", with(func(p *protocol.Payload) { p.Rank = maxRev - 1 }), protocol.PointerAt(maxRev), true},
		{"rank max at pointer max: kept", with(func(p *protocol.Payload) { p.Rank = maxRev }), protocol.PointerAt(maxRev), false},
		{"zero payload: kept", protocol.Payload{}, protocol.PointerAt(maxRev), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.PayloadPrunable(tt.p, tt.pointer); got != tt.want {
				t.Errorf("PayloadPrunable(%+v, %v) = %v, want %v", tt.p, tt.pointer, got, tt.want)
			}
		})
	}
}

// TestPayloadPrunableExhaustive checks the original design's formula
// (!is_pointer_target && aged_out && rank.is_some_and(|r| r < pointer_rank))
// over every small input, and the structural property it exists for: a
// pruned payload can never be published afterwards.
func TestPayloadPrunableExhaustive(t *testing.T) {
	ranks := []protocol.Revision{0, 1, 2, maxRev - 1, maxRev}
	pointers := []protocol.PointerState{protocol.PointerAbsent(), protocol.PointerCorrupt()}
	for _, r := range ranks {
		pointers = append(pointers, protocol.PointerAt(r))
	}
	n := 0
	for _, ptr := range pointers {
		for _, rank := range ranks {
			for bits := range 8 {
				p := protocol.Payload{Rank: rank, RankKnown: bits&1 != 0, IsPointerTarget: bits&2 != 0, AgedOut: bits&4 != 0}
				n++
				prank, ok := ptr.Rank()
				want := ok && !p.IsPointerTarget && p.AgedOut && p.RankKnown && p.Rank < prank
				got := protocol.PayloadPrunable(p, ptr)
				if got != want {
					t.Errorf("PayloadPrunable(%+v, %v) = %v, want %v", p, ptr, got, want)
				}
				if got && protocol.PointerPublishAllowed(ptr, p.Rank) {
					t.Errorf("pruned payload %+v could still be published over %v (dangling pointer)", p, ptr)
				}
			}
		}
	}
	t.Logf("%d (payload, pointer) pairs", n)
}

func TestRetentionEvictsCurrentValues(t *testing.T) {
	tests := []struct {
		name string
		r    protocol.Retention
		want bool
	}{
		{"zero retention keeps current values", protocol.Retention{}, false},
		{"MaxAge 1ns evicts", protocol.Retention{MaxAge: 1}, true},
		{"MaxAge 1h evicts", protocol.Retention{MaxAge: time.Hour}, true},
		{"MaxAge negative counts as no limit", protocol.Retention{MaxAge: -time.Second}, false},
		{"per-message TTL evicts", protocol.Retention{PerMessageTTL: true}, true},
		{"discard-old limit evicts", protocol.Retention{DiscardOldLimit: true}, true},
		{"everything at once evicts", protocol.Retention{MaxAge: time.Hour, PerMessageTTL: true, DiscardOldLimit: true}, true},
		{"a window past 1 alone is not eviction (history limit)", protocol.Retention{Window: protocol.Window{First: 100, Last: 200}}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.EvictsCurrentValues(); got != tt.want {
				t.Errorf("%+v.EvictsCurrentValues() = %v, want %v", tt.r, got, tt.want)
			}
		})
	}
}

func TestRetentionHasEvicted(t *testing.T) {
	w := func(first, last protocol.Revision) protocol.Window { return protocol.Window{First: first, Last: last} }
	tests := []struct {
		name string
		r    protocol.Retention
		want bool
	}{
		{"no eviction, first 1", protocol.Retention{Window: w(1, 10)}, false},
		{"no eviction, first past 1 (superseded history only)", protocol.Retention{Window: w(50, 100)}, false},
		{"MaxAge, never-written stream (0,0)", protocol.Retention{Window: w(0, 0), MaxAge: time.Hour}, false},
		{"MaxAge, empty new stream (1,0)", protocol.Retention{Window: w(1, 0), MaxAge: time.Hour}, false},
		{"MaxAge, first 1: nothing evicted yet", protocol.Retention{Window: w(1, 10), MaxAge: time.Hour}, false},
		{"MaxAge, first 2: evicted", protocol.Retention{Window: w(2, 10), MaxAge: time.Hour}, true},
		{"MaxAge, empty after eviction (6,5)", protocol.Retention{Window: w(6, 5), MaxAge: time.Hour}, true},
		{"per-message TTL, first 2", protocol.Retention{Window: w(2, 10), PerMessageTTL: true}, true},
		{"discard-old, first max", protocol.Retention{Window: w(maxRev, maxRev), DiscardOldLimit: true}, true},
		{"negative MaxAge, first 2: not eviction", protocol.Retention{Window: w(2, 10), MaxAge: -1}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.HasEvicted(); got != tt.want {
				t.Errorf("%+v.HasEvicted() = %v, want %v", tt.r, got, tt.want)
			}
		})
	}
}

func TestListingIsTruth(t *testing.T) {
	tests := []struct {
		name         string
		evicts       bool
		first        protocol.Revision
		evictionSeen bool
		want         bool
	}{
		{"keeps values, never-written (first 0)", false, 0, false, true},
		{"keeps values, first 1", false, 1, false, true},
		{"keeps values, first 2 (superseded history gone)", false, 2, false, true},
		{"keeps values, first max", false, maxRev, false, true},
		{"evicts, first 0: nothing evicted yet", true, 0, false, true},
		{"evicts, first 1: nothing evicted yet", true, 1, false, true},
		{"evicts, first 2: not the truth", true, 2, false, false},
		{"evicts, first max: not the truth", true, maxRev, false, false},
		{"memo, keeps values, first 0: never the truth again", false, 0, true, false},
		{"memo, keeps values, first 1: eviction turned off later", false, 1, true, false},
		{"memo, keeps values, first 2", false, 2, true, false},
		{"memo, keeps values, first max", false, maxRev, true, false},
		{"memo, evicts, first 0", true, 0, true, false},
		{"memo, evicts, first 1 (bucket recreated)", true, 1, true, false},
		{"memo, evicts, first 2", true, 2, true, false},
		{"memo, evicts, first max", true, maxRev, true, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.ListingIsTruth(tt.evicts, tt.first, tt.evictionSeen); got != tt.want {
				t.Errorf("ListingIsTruth(%v, %d, %v) = %v, want %v", tt.evicts, tt.first, tt.evictionSeen, got, tt.want)
			}
		})
	}
}

func TestListingTruth(t *testing.T) {
	keeps := &protocol.Retention{Window: protocol.Window{First: 40, Last: 90}}
	evictsFresh := &protocol.Retention{Window: protocol.Window{First: 1, Last: 90}, MaxAge: time.Hour}
	evicted := &protocol.Retention{Window: protocol.Window{First: 40, Last: 90}, MaxAge: time.Hour}
	ttlEvicted := &protocol.Retention{Window: protocol.Window{First: 2, Last: 3}, PerMessageTTL: true}
	neverWritten := &protocol.Retention{MaxAge: time.Hour}
	tests := []struct {
		name         string
		r            *protocol.Retention
		evictionSeen bool
		want         protocol.Truth
	}{
		{"unreadable retention, no memo: unknown", nil, false, protocol.TruthUnknown},
		{"unreadable retention, memo: no (memo answers without a reading)", nil, true, protocol.TruthNo},
		{"keeps values: yes", keeps, false, protocol.TruthYes},
		{"keeps values but memo: no", keeps, true, protocol.TruthNo},
		{"evicting, nothing evicted yet: yes", evictsFresh, false, protocol.TruthYes},
		{"evicting, nothing evicted yet, memo: no", evictsFresh, true, protocol.TruthNo},
		{"evicting, evicted: no", evicted, false, protocol.TruthNo},
		{"per-message TTL, evicted: no", ttlEvicted, false, protocol.TruthNo},
		{"evicting, never-written stream: yes", neverWritten, false, protocol.TruthYes},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.ListingTruth(tt.r, tt.evictionSeen); got != tt.want {
				t.Errorf("ListingTruth(%+v, %v) = %v, want %v", tt.r, tt.evictionSeen, got, tt.want)
			}
		})
	}
}

func TestGapHoldsNoEviction(t *testing.T) {
	const now int64 = 1_700_000_000_000_000_000
	hour := time.Hour
	ageOnly := protocol.Retention{Window: protocol.Window{First: 50, Last: 60}, MaxAge: hour}
	half := int64(hour / 2)
	tests := []struct {
		name      string
		r         protocol.Retention
		msg, srvr int64
		want      bool
	}{
		{"age-only, message just written", ageOnly, now, now, true},
		{"age-only, 1ns old", ageOnly, now - 1, now, true},
		{"age-only, exactly MaxAge/2 old: boundary holds", ageOnly, now - half, now, true},
		{"age-only, MaxAge/2 + 1ns old: headroom exhausted", ageOnly, now - half - 1, now, false},
		{"age-only, MaxAge old", ageOnly, now - int64(hour), now, false},
		{"age-only, message slightly from the future: clock step, headroom covers", ageOnly, now + int64(time.Second), now, true},
		{"age-only, message MaxAge/2 from the future", ageOnly, now + half, now, true},
		{"unknown message time (0) never qualifies", ageOnly, 0, now, false},
		{"unknown message time (0) never qualifies, even at server time 0", ageOnly, 0, 0, false},
		{"no MaxAge: nothing says the gap is supersession only", protocol.Retention{}, now, now, false},
		{"negative MaxAge: no age limit", protocol.Retention{MaxAge: -hour}, now, now, false},
		{"per-message TTL can evict young values", protocol.Retention{MaxAge: hour, PerMessageTTL: true}, now, now, false},
		{"discard-old limit can evict young values", protocol.Retention{MaxAge: hour, DiscardOldLimit: true}, now, now, false},
		{"MaxAge 1ns: half is 0, only age 0 qualifies", protocol.Retention{MaxAge: 1}, now, now, true},
		{"MaxAge 1ns: 1ns old fails", protocol.Retention{MaxAge: 1}, now - 1, now, false},
		{"MaxAge 3ns (odd): half truncates to 1, 1ns old holds", protocol.Retention{MaxAge: 3}, now - 1, now, true},
		{"MaxAge 3ns (odd): 2ns old fails", protocol.Retention{MaxAge: 3}, now - 2, now, false},
		{"max Duration MaxAge, very old but under half", protocol.Retention{MaxAge: math.MaxInt64}, 1, now, true},
		{"negative message time (pre-1970) never qualifies", ageOnly, -1, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.GapHoldsNoEviction(tt.r, tt.msg, tt.srvr); got != tt.want {
				t.Errorf("GapHoldsNoEviction(%+v, %d, %d) = %v, want %v", tt.r, tt.msg, tt.srvr, got, tt.want)
			}
		})
	}
}

func TestPlanRepairExhaustive(t *testing.T) {
	tests := []struct {
		name  string
		mode  protocol.RepairMode
		truth protocol.Truth
		want  protocol.RepairPlan
	}{
		{"none, unknown: relist only", protocol.RepairNone, protocol.TruthUnknown, protocol.PlanRelistOnly},
		{"none, yes: relist only (nothing armed)", protocol.RepairNone, protocol.TruthYes, protocol.PlanRelistOnly},
		{"none, no: relist only (nothing armed)", protocol.RepairNone, protocol.TruthNo, protocol.PlanRelistOnly},
		{"relist, unknown: operator's choice honoured", protocol.RepairRelist, protocol.TruthUnknown, protocol.PlanKeyListingDiff},
		{"relist, yes: diff", protocol.RepairRelist, protocol.TruthYes, protocol.PlanKeyListingDiff},
		{"relist, no: refused (would delete aged-out keys)", protocol.RepairRelist, protocol.TruthNo, protocol.PlanRefuse},
		{"restore, unknown: restore", protocol.RepairRestore, protocol.TruthUnknown, protocol.PlanRestore},
		{"restore, yes: restore (armed mode wins)", protocol.RepairRestore, protocol.TruthYes, protocol.PlanRestore},
		{"restore, no: restore", protocol.RepairRestore, protocol.TruthNo, protocol.PlanRestore},
		{"auto, unknown: restore (diff only on yes)", protocol.RepairAuto, protocol.TruthUnknown, protocol.PlanRestore},
		{"auto, yes: diff", protocol.RepairAuto, protocol.TruthYes, protocol.PlanKeyListingDiff},
		{"auto, no: restore", protocol.RepairAuto, protocol.TruthNo, protocol.PlanRestore},
	}
	seen := map[[2]uint8]bool{}
	for _, tt := range tests {
		seen[[2]uint8{uint8(tt.mode), uint8(tt.truth)}] = true
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.PlanRepair(tt.mode, tt.truth); got != tt.want {
				t.Errorf("PlanRepair(%v, %v) = %v, want %v", tt.mode, tt.truth, got, tt.want)
			}
		})
	}
	if len(seen) != 4*3 {
		t.Fatalf("table covers %d of 12 (mode, truth) pairs", len(seen))
	}
	// Safety over the whole domain: a key-listing diff is never planned where
	// the listing is known not to be the truth.
	for m := range 4 {
		for tr := range 3 {
			if protocol.PlanRepair(protocol.RepairMode(m), protocol.Truth(tr)) == protocol.PlanKeyListingDiff && protocol.Truth(tr) == protocol.TruthNo {
				t.Errorf("PlanRepair(%v, no) plans a key-listing diff", protocol.RepairMode(m))
			}
		}
	}
}

// TestPlanRepairOutOfRange pins what the kernel does with values no decoder
// produces (RepairMode.UnmarshalText refuses them). See the report: an
// out-of-range mode silently plans relist-only.
// Out-of-range enums are broken invariants (no decoder produces them): the
// planning kernels panic rather than guess.
func TestPlanRepairOutOfRangePanics(t *testing.T) {
	tests := []struct {
		name  string
		mode  protocol.RepairMode
		truth protocol.Truth
	}{
		{"mode 4", protocol.RepairMode(4), protocol.TruthNo},
		{"mode 255", protocol.RepairMode(255), protocol.TruthYes},
		{"relist with truth 9", protocol.RepairRelist, protocol.Truth(9)},
		{"auto with truth 3", protocol.RepairAuto, protocol.Truth(3)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for name, call := range map[string]func(){
				"PlanRepair":                 func() { protocol.PlanRepair(tt.mode, tt.truth) },
				"CursorlessStartNeedsRepair": func() { protocol.CursorlessStartNeedsRepair(tt.mode, true, tt.truth) },
			} {
				func() {
					defer func() {
						if recover() == nil {
							t.Errorf("%s(%d, %d) did not panic", name, tt.mode, tt.truth)
						}
					}()
					call()
				}()
			}
		})
	}
}

func TestCursorlessStartNeedsRepairExhaustive(t *testing.T) {
	const (
		u = protocol.TruthUnknown
		y = protocol.TruthYes
		n = protocol.TruthNo
	)
	tests := []struct {
		name        string
		mode        protocol.RepairMode
		foldHasData bool
		truth       protocol.Truth
		want        bool
	}{
		{"none, empty, unknown: nothing can run", protocol.RepairNone, false, u, false},
		{"none, empty, yes", protocol.RepairNone, false, y, false},
		{"none, empty, no", protocol.RepairNone, false, n, false},
		{"none, data, unknown: nothing can run even with data", protocol.RepairNone, true, u, false},
		{"none, data, yes", protocol.RepairNone, true, y, false},
		{"none, data, no", protocol.RepairNone, true, n, false},
		{"relist, empty, unknown: plain state-sync", protocol.RepairRelist, false, u, false},
		{"relist, empty, yes: plain state-sync", protocol.RepairRelist, false, y, false},
		{"relist, empty, no: no restore armed, state-sync", protocol.RepairRelist, false, n, false},
		{"relist, data, unknown: torn first commit repairs", protocol.RepairRelist, true, u, true},
		{"relist, data, yes: torn first commit repairs", protocol.RepairRelist, true, y, true},
		{"relist, data, no: repairs (the plan then refuses)", protocol.RepairRelist, true, n, true},
		{"restore, empty, unknown: seed from artifact", protocol.RepairRestore, false, u, true},
		{"restore, empty, yes: re-list is complete", protocol.RepairRestore, false, y, false},
		{"restore, empty, no: seed from artifact", protocol.RepairRestore, false, n, true},
		{"restore, data, unknown", protocol.RepairRestore, true, u, true},
		{"restore, data, yes: data forces repair", protocol.RepairRestore, true, y, true},
		{"restore, data, no", protocol.RepairRestore, true, n, true},
		{"auto, empty, unknown: seed from artifact", protocol.RepairAuto, false, u, true},
		{"auto, empty, yes: re-list is complete", protocol.RepairAuto, false, y, false},
		{"auto, empty, no: seed from artifact", protocol.RepairAuto, false, n, true},
		{"auto, data, unknown", protocol.RepairAuto, true, u, true},
		{"auto, data, yes: data forces repair", protocol.RepairAuto, true, y, true},
		{"auto, data, no", protocol.RepairAuto, true, n, true},
	}
	seen := map[[3]uint8]bool{}
	for _, tt := range tests {
		d := uint8(0)
		if tt.foldHasData {
			d = 1
		}
		seen[[3]uint8{uint8(tt.mode), d, uint8(tt.truth)}] = true
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.CursorlessStartNeedsRepair(tt.mode, tt.foldHasData, tt.truth); got != tt.want {
				t.Errorf("CursorlessStartNeedsRepair(%v, %v, %v) = %v, want %v", tt.mode, tt.foldHasData, tt.truth, got, tt.want)
			}
		})
	}
	if len(seen) != 4*2*3 {
		t.Fatalf("table covers %d of 24 (mode, data, truth) triples", len(seen))
	}
}

func TestRestoreAhead(t *testing.T) {
	tests := []struct {
		name              string
		artifact, applied protocol.Revision
		want              bool
	}{
		{"both 0: not ahead", 0, 0, false},
		{"artifact 1 over nothing applied", 1, 0, true},
		{"equal: not ahead (no-op restore refused)", 5, 5, false},
		{"artifact one behind", 4, 5, false},
		{"artifact one ahead", 6, 5, true},
		{"artifact 0 behind anything", 0, 1, false},
		{"max over max-1", maxRev, maxRev - 1, true},
		{"max equal max", maxRev, maxRev, false},
		{"nothing is ahead of max", maxRev - 1, maxRev, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.RestoreAhead(tt.artifact, tt.applied); got != tt.want {
				t.Errorf("RestoreAhead(%d, %d) = %v, want %v", tt.artifact, tt.applied, got, tt.want)
			}
		})
	}
}

func TestRestoreAllowed(t *testing.T) {
	normal := protocol.Window{First: 3, Last: 10}
	tests := []struct {
		name            string
		artifact, local protocol.Revision
		w               protocol.Window
		want            bool
	}{
		{"ahead and inside retention", 8, 5, normal, true},
		{"ahead of an empty fold, at first-1 (boundary)", 2, 0, normal, true},
		{"ahead, at first", 3, 0, normal, true},
		{"ahead, at last (caught up)", 10, 5, normal, true},
		{"equal to local: never a no-op restore", 5, 5, normal, false},
		{"behind local: never backward", 4, 5, normal, false},
		{"ahead but expired (first-2)", 1, 0, normal, false},
		{"ahead but beyond head (another stream's history)", 11, 5, normal, false},
		{"ahead but at max (resume would wrap)", maxRev, 5, protocol.Window{First: 1, Last: maxRev}, false},
		{"local at max: nothing is ahead", maxRev, maxRev, protocol.Window{First: 1, Last: maxRev}, false},
		{"empty purged stream, artifact == last", 5, 4, protocol.Window{First: 6, Last: 5}, true},
		{"empty purged stream, artifact last-1: expired", 4, 3, protocol.Window{First: 6, Last: 5}, false},
		{"empty purged stream, artifact last+1: beyond head", 6, 4, protocol.Window{First: 6, Last: 5}, false},
		{"never-written stream, artifact 1: beyond head", 1, 0, protocol.Window{}, false},
		{"never-written stream, artifact 0 over local 0: not ahead", 0, 0, protocol.Window{}, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.RestoreAllowed(tt.artifact, tt.local, tt.w); got != tt.want {
				t.Errorf("RestoreAllowed(%d, %d, %+v) = %v, want %v", tt.artifact, tt.local, tt.w, got, tt.want)
			}
		})
	}
}

// TestRestoreAllowedImpliesTheOriginalGuard checks over small inputs that the Go
// guard is at least as strict as the original design's
// (artifact > local && resume_window_ok(artifact, first)).
func TestRestoreAllowedImpliesTheOriginalGuard(t *testing.T) {
	revs := []protocol.Revision{0, 1, 2, 3, 4, maxRev - 1, maxRev}
	for _, first := range revs {
		for _, last := range revs {
			w := protocol.Window{First: first, Last: last}
			for _, a := range revs {
				for _, l := range revs {
					if protocol.RestoreAllowed(a, l, w) && !(a > l && protocol.ResumeWindowOK(a, first)) {
						t.Errorf("RestoreAllowed(%d, %d, %+v) = true, seed guard refuses", a, l, w)
					}
				}
			}
		}
	}
}

func TestRestoreKey(t *testing.T) {
	absent := protocol.KeyState{}
	at := func(r protocol.Revision) protocol.KeyState { return protocol.KeyState{Present: true, Rev: r} }
	tests := []struct {
		name                  string
		local, artifact       protocol.KeyState
		identical, listedLive bool
		want                  protocol.KeyRestore
	}{
		{"both absent: keep", absent, absent, false, false, protocol.KeepLocal},
		{"both absent, listed live: keep (resume delivers it)", absent, absent, false, true, protocol.KeepLocal},
		{"local absent, artifact present: take", absent, at(5), false, false, protocol.TakeArtifact},
		{"local absent, artifact present, listed live: take", absent, at(5), false, true, protocol.TakeArtifact},
		{"artifact newer: take", at(3), at(5), false, false, protocol.TakeArtifact},
		{"artifact newer but identical bytes: keep (no-op)", at(3), at(5), true, false, protocol.KeepLocal},
		{"local newer: keep (never backward)", at(7), at(5), false, false, protocol.KeepLocal},
		{"local newer, listed live: keep", at(7), at(5), false, true, protocol.KeepLocal},
		{"same revision, identical: keep", at(5), at(5), true, false, protocol.KeepLocal},
		{"same revision, bytes differ: take (pinned; see report)", at(5), at(5), false, false, protocol.TakeArtifact},
		{"local revision unknown (0), artifact known: take", at(0), at(5), false, false, protocol.TakeArtifact},
		{"artifact revision unknown (0), local known: keep", at(5), at(0), false, false, protocol.KeepLocal},
		{"local max vs artifact max-1: keep", at(maxRev), at(maxRev - 1), false, false, protocol.KeepLocal},
		{"artifact lacks key, not listed live: delete", at(5), absent, false, false, protocol.DeleteLocal},
		{"artifact lacks key, listed live: keep (never a phantom delete)", at(5), absent, false, true, protocol.KeepLocal},
		{"artifact lacks key, identical flag ignored", at(5), absent, true, false, protocol.DeleteLocal},
		{"absent state's Rev field is ignored", protocol.KeyState{Present: false, Rev: 99}, at(5), false, false, protocol.TakeArtifact},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.RestoreKey(tt.local, tt.artifact, tt.identical, tt.listedLive); got != tt.want {
				t.Errorf("RestoreKey(%+v, %+v, identical=%v, listedLive=%v) = %v, want %v",
					tt.local, tt.artifact, tt.identical, tt.listedLive, got, tt.want)
			}
		})
	}
}

// TestRestoreKeyExhaustive checks the per-key restore decision over every
// small input against its stated properties, which together determine it.
func TestRestoreKeyExhaustive(t *testing.T) {
	var states []protocol.KeyState
	for _, r := range []protocol.Revision{0, 1, 2, 3, maxRev} {
		states = append(states, protocol.KeyState{Present: false, Rev: r}, protocol.KeyState{Present: true, Rev: r})
	}
	n := 0
	for _, local := range states {
		for _, art := range states {
			for bits := range 4 {
				identical, listed := bits&1 != 0, bits&2 != 0
				n++
				got := protocol.RestoreKey(local, art, identical, listed)
				fail := func(why string) {
					t.Errorf("RestoreKey(%+v, %+v, identical=%v, listedLive=%v) = %v: %s", local, art, identical, listed, got, why)
				}
				switch got {
				case protocol.TakeArtifact:
					if !art.Present {
						fail("takes an artifact entry that does not exist")
					}
					if local.Present && local.Rev > art.Rev {
						fail("moves the key backward")
					}
					if local.Present && identical {
						fail("rewrites an identical entry")
					}
				case protocol.DeleteLocal:
					if !local.Present {
						fail("deletes an absent key")
					}
					if art.Present {
						fail("deletes a key the artifact holds")
					}
					if listed {
						fail("phantom delete of a key the bucket lists live")
					}
				case protocol.KeepLocal:
					if art.Present && !local.Present {
						fail("misses an artifact entry the fold lacks")
					}
					if art.Present && local.Present && !identical && local.Rev <= art.Rev {
						fail("keeps a local entry that is not newer and not identical")
					}
					if !art.Present && local.Present && !listed {
						fail("keeps a key deleted before the artifact's cursor")
					}
				default:
					fail("unknown decision")
				}
			}
		}
	}
	t.Logf("%d inputs", n)
}

func TestEnumStrings(t *testing.T) {
	tests := []struct {
		name string
		v    fmt.Stringer
		want string
	}{
		{"ResumeOK", protocol.ResumeOK, "ok"},
		{"ResumeExpired", protocol.ResumeExpired, "expired"},
		{"ResumeBeyondHead", protocol.ResumeBeyondHead, "beyond-head"},
		{"ResumeAtMax", protocol.ResumeAtMax, "at-max"},
		{"ResumeVerdict out of range", protocol.ResumeVerdict(4), "ResumeVerdict(4)"},
		{"TruthUnknown", protocol.TruthUnknown, "unknown"},
		{"TruthYes", protocol.TruthYes, "yes"},
		{"TruthNo", protocol.TruthNo, "no"},
		{"Truth out of range prints its number", protocol.Truth(3), "Truth(3)"},
		{"RepairNone", protocol.RepairNone, "none"},
		{"RepairRelist", protocol.RepairRelist, "relist"},
		{"RepairRestore", protocol.RepairRestore, "restore"},
		{"RepairAuto", protocol.RepairAuto, "auto"},
		{"RepairMode out of range", protocol.RepairMode(4), "RepairMode(4)"},
		{"PlanRelistOnly", protocol.PlanRelistOnly, "relist-only"},
		{"PlanKeyListingDiff", protocol.PlanKeyListingDiff, "key-listing-diff"},
		{"PlanRefuse", protocol.PlanRefuse, "refuse"},
		{"PlanRestore", protocol.PlanRestore, "restore"},
		{"RepairPlan out of range", protocol.RepairPlan(4), "RepairPlan(4)"},
		{"KeepLocal", protocol.KeepLocal, "keep"},
		{"TakeArtifact", protocol.TakeArtifact, "take"},
		{"DeleteLocal", protocol.DeleteLocal, "delete"},
		{"KeyRestore out of range", protocol.KeyRestore(3), "KeyRestore(3)"},
		{"Revision 0", protocol.NoRevision, "0"},
		{"Revision max", maxRev, "18446744073709551615"},
		{"Cursor plain", protocol.Cursor{Rev: 5}, "5"},
		{"Cursor with memo", protocol.Cursor{Rev: 5, EvictionSeen: true}, "5+evicted"},
		{"Cursor time not shown", protocol.Cursor{Rev: 5, MsgUnixNano: 7}, "5"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.v.String(); got != tt.want {
				t.Errorf("String() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestRevisionKnown(t *testing.T) {
	tests := []struct {
		name string
		r    protocol.Revision
		want bool
	}{
		{"NoRevision is unknown", protocol.NoRevision, false},
		{"1 is the first real revision", 1, true},
		{"max is known", maxRev, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.r.Known(); got != tt.want {
				t.Errorf("Revision(%d).Known() = %v, want %v", tt.r, got, tt.want)
			}
		})
	}
}

// TestGapHoldsNoEvictionClockFaults pins the clock faults that must never
// turn an expired cursor into a silent resume over evicted messages: a server
// time of 0 (an older server without `ts` in the stream-info reply) or a zero
// time.Time, a corrupt message time whose age would overflow, and a message
// stamped further in the future than the headroom the rule reserves.
func TestGapHoldsNoEvictionClockFaults(t *testing.T) {
	const now int64 = 1_700_000_000_000_000_000
	ageOnly := protocol.Retention{Window: protocol.Window{First: 50, Last: 60}, MaxAge: time.Hour}
	tests := []struct {
		name      string
		msg, srvr int64
		want      bool
	}{
		{"server time 0 (no ts) must not qualify", now, 0, false},
		{"zero time.Time server clock must not qualify", now, time.Time{}.UnixNano(), false},
		{"ancient message time overflowing the age must not qualify", math.MinInt64 + 1, now, false},
		{"message more than MaxAge/2 in the future exceeds the headroom", now + int64(time.Hour), now, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := protocol.GapHoldsNoEviction(ageOnly, tt.msg, tt.srvr); got != tt.want {
				t.Errorf("GapHoldsNoEviction(age-only 1h, msg=%d, server=%d) = %v, want %v", tt.msg, tt.srvr, got, tt.want)
			}
		})
	}
}
