package fold

import (
	"math"
	"testing"

	"github.com/foldhost/foldhost/protocol"
)

// TestEffectsHoldWith: the hold that waits for two is syncing when either
// is (its point still to come follows any set one), else at the later
// point, and tentative only when both are. Each case fails when its rule
// is turned round (the earlier point, tentative when either is, a syncing
// hold left pointed).
func TestEffectsHoldWith(t *testing.T) {
	at := func(rev uint64, index uint32) EffectsHold {
		return EffectsHold{Rev: protocol.Revision(rev), Index: index}
	}
	tent := func(h EffectsHold) EffectsHold { h.Tentative = true; return h }
	for _, c := range []struct {
		name    string
		a, b    EffectsHold
		want    EffectsHold
		wantStr string
	}{
		{"later revision", at(5, 3), at(7, 0), at(7, 0), "7/0"},
		{"later index", at(7, 2), at(7, 1), at(7, 2), "7/2"},
		{"whole revision", at(7, 9), at(7, math.MaxUint32), at(7, math.MaxUint32), "7/*"},
		{"syncing wins", at(9, 0), EffectsHold{Syncing: true}, EffectsHold{Syncing: true}, "syncing"},
		{"sure wins", tent(at(3, 0)), at(2, 0), at(3, 0), "3/0"},
		{"both tentative", tent(at(3, 0)), tent(EffectsHold{Syncing: true}), EffectsHold{Syncing: true, Tentative: true}, "syncing (tentative)"},
	} {
		for _, got := range []EffectsHold{c.a.With(c.b), c.b.With(c.a)} {
			if got != c.want || got.String() != c.wantStr {
				t.Errorf("%s: %+v with %+v = %+v (%s), want %+v (%s)", c.name, c.a, c.b, got, got, c.want, c.wantStr)
			}
		}
	}
}
