package protocol

import (
	"fmt"
	"slices"
	"testing"
)

// TestRankNodesGolden pins rendezvous order: every node of a fleet, of
// every foldhost version in a rolling upgrade, must compute the same
// placement, so a change of the hash or its input is a change of the
// protocol. Mutation caught: any change to weight (another hash, the
// partition left out, no separators).
func TestRankNodesGolden(t *testing.T) {
	nodes := []string{"n1", "n2", "n3"}
	for _, c := range []struct {
		u    Unit
		want []string
	}{
		{Unit{"routes", 0}, []string{"n1", "n2", "n3"}},
		{Unit{"routes", 1}, []string{"n3", "n1", "n2"}},
		{Unit{"orders", 0}, []string{"n2", "n1", "n3"}},
	} {
		if got := RankNodes(c.u, nodes); !slices.Equal(got, c.want) {
			t.Errorf("RankNodes(%s) = %v, want %v", c.u, got, c.want)
		}
	}
}

// TestRankNodes: the order does not depend on the input's order or
// duplicates, and removing a node keeps the others' order (the owner's
// successor is its first standby).
func TestRankNodes(t *testing.T) {
	nodes := []string{"a", "b", "c", "d", "e"}
	for p := range 50 {
		u := Unit{"f", p}
		r := RankNodes(u, nodes)
		if got := RankNodes(u, []string{"e", "d", "c", "b", "a", "a"}); !slices.Equal(got, r) {
			t.Fatalf("%s: %v for a shuffled input with a duplicate, %v for the sorted one", u, got, r)
		}
		for _, gone := range nodes {
			want := slices.DeleteFunc(slices.Clone(r), func(n string) bool { return n == gone })
			if got := RankNodes(u, without(nodes, gone)); !slices.Equal(got, want) {
				t.Fatalf("%s without %s: %v, want %v", u, gone, got, want)
			}
		}
	}
}

// TestPlaceSpreadsFolds: fifty folds over three nodes give each node its
// share within a few, and one standby each on another node; a fourth node
// takes about a quarter and moves nothing between the first three.
func TestPlaceSpreadsFolds(t *testing.T) {
	three := []string{"n1", "n2", "n3"}
	owned := map[string]int{}
	before := map[Unit]string{}
	for i := range 50 {
		u := Unit{fmt.Sprintf("fold%02d", i), 0}
		p := Place(u, three, 1)
		if len(p.Standbys) != 1 || p.Standbys[0] == p.Owner {
			t.Fatalf("%s: placement %+v, want one standby on another node", u, p)
		}
		owned[p.Owner]++
		before[u] = p.Owner
	}
	for _, n := range three {
		if owned[n] < 10 || owned[n] > 24 {
			t.Errorf("%s owns %d of 50 folds: %v", n, owned[n], owned)
		}
	}
	moved := 0
	for u, was := range before {
		now := Place(u, append(three, "n4"), 1).Owner
		switch {
		case now == "n4":
			moved++
		case now != was:
			t.Errorf("%s moved from %s to %s when n4 joined", u, was, now)
		}
	}
	if moved < 6 || moved > 20 {
		t.Errorf("n4 took %d of 50 folds", moved)
	}
	if p := Place(Unit{"f", 0}, []string{"solo"}, 2); p.Owner != "solo" || len(p.Standbys) != 0 {
		t.Errorf("one node, two standbys wanted: %+v", p)
	}
	if p := Place(Unit{"f", 0}, nil, 1); p.Owner != "" {
		t.Errorf("no node: %+v", p)
	}
}

// TestDecideCases: the table of Decide's rules (the model explores their
// interleavings).
func TestDecideCases(t *testing.T) {
	u := Unit{"routes", 0}
	live := []string{"n1", "n2", "n3"}
	first := RankNodes(u, live)[0]
	second := RankNodes(u, live)[1]
	third := RankNodes(u, live)[2]
	mine := func(me string) Claim { return Claim{Owner: me, Incarnation: "1", Epoch: 5} }
	for _, c := range []struct {
		name string
		v    UnitView
		want Decision
	}{
		{"no owner: the placement's owner claims", UnitView{Me: first, Claim: Claim{Epoch: 3}}, Decision{Move: MoveClaim}},
		{"no owner: another node waits", UnitView{Me: second, Claim: Claim{Epoch: 3}}, Decision{}},
		{"a live owner: nobody moves", UnitView{Me: first, Claim: mine(second), OwnerLive: true}, Decision{}},
		{"a dead owner: the placement's owner over the live claims", UnitView{Me: second, Live: []string{second, third}, Claim: mine(first)}, Decision{Move: MoveClaim}},
		{"a dead owner: another live node waits", UnitView{Me: third, Live: []string{second, third}, Claim: mine(first)}, Decision{}},
		{"the owner hands over to a ready placement owner", UnitView{Me: second, Incarnation: "1", Claim: mine(second), TargetReady: true}, Decision{Move: MoveHandOver, To: first}},
		{"the owner keeps a unit whose placement owner is not ready", UnitView{Me: second, Incarnation: "1", Claim: mine(second)}, Decision{}},
		{"the placement's owner keeps its unit", UnitView{Me: first, Incarnation: "1", Claim: mine(first), TargetReady: true}, Decision{}},
		{"a leaving owner hands over to its first standby", UnitView{Me: first, Incarnation: "1", Claim: mine(first), Leaving: true}, Decision{Move: MoveHandOver, To: second}},
		{"a leaving last node hands over to no one", UnitView{Me: first, Incarnation: "1", Claim: mine(first), Leaving: true, Live: []string{first}}, Decision{Move: MoveHandOver}},
		{"a leaving node claims nothing", UnitView{Me: first, Leaving: true, Claim: Claim{Epoch: 3}}, Decision{}},
		{"the hand-over's target claims", UnitView{Me: third, Claim: Claim{To: third, Epoch: 6}}, Decision{Move: MoveClaim}},
		{"another node waits for a live target", UnitView{Me: first, Claim: Claim{To: third, Epoch: 6}}, Decision{}},
		{"a dead target: the placement's owner claims", UnitView{Me: first, Live: []string{first, second}, Claim: Claim{To: third, Epoch: 6}}, Decision{Move: MoveClaim}},
		{"a claim of an earlier incarnation: the node claims anew", UnitView{Me: first, Incarnation: "2", Claim: mine(first)}, Decision{Move: MoveClaim}},
	} {
		v := c.v
		v.Unit, v.Standbys = u, 1
		if v.Live == nil {
			v.Live = live
		}
		if got := Decide(v); got != c.want {
			t.Errorf("%s: Decide = %+v, want %+v", c.name, got, c.want)
		}
	}
	if r := RoleOf(UnitView{Unit: u, Me: first, Incarnation: "2", Claim: mine(first), Live: live, Standbys: 1}); r != RoleStandby {
		t.Errorf("a node whose earlier incarnation holds the claim: role %s, want standby (the placement's owner warms up)", r)
	}
	if r := RoleOf(UnitView{Unit: u, Me: third, Incarnation: "1", Claim: mine(first), OwnerLive: true, Live: live, Standbys: 1}); r != RoleNone {
		t.Errorf("a node neither owner nor standby: role %s", r)
	}
	for _, c := range []struct {
		cur, mine Revision
		want      Mark
	}{{0, 4, MarkWrite}, {3, 4, MarkWrite}, {4, 4, MarkHeld}, {5, 4, MarkFenced}} {
		if got := FenceMark(c.cur, c.mine); got != c.want {
			t.Errorf("FenceMark(%d, %d) = %d, want %d", c.cur, c.mine, got, c.want)
		}
	}
}
