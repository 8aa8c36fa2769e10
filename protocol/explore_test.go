package protocol

import (
	"fmt"
	"strings"
	"testing"
)

// This file is the exhaustive state-space explorer the model tests share: a
// deterministic breadth-first search over every state reachable from the
// initial ones, checking an invariant on each state and a final property on
// each terminal state (no enabled step). Because the search is breadth-first,
// a counterexample it reports is a shortest trace to the violation.
//
// Terminal checks only prove "every run ends well" if every run ends: each
// model supplies a ranking function that every step must strictly increase
// (lexicographically), which makes the reachable graph acyclic; the explorer
// verifies that on every edge, so a model that could loop forever fails
// instead of passing vacuously.

// step is one labelled transition.
type step[S comparable] struct {
	label string
	to    S
}

// model is a bounded, deterministic transition system.
type model[S comparable] struct {
	init      []S
	next      func(S) []step[S]
	rank      func(S) []int // must strictly increase on every step
	invariant func(S) error // checked on every reachable state; nil: none
	final     func(S) error // checked on every terminal state; nil: none
	maxStates int           // safety bound; exceeding it fails the test
}

type counterexample struct {
	err   error
	trace []string
}

func (c *counterexample) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v\ntrace (%d steps):", c.err, len(c.trace))
	for i, l := range c.trace {
		fmt.Fprintf(&b, "\n  %2d. %s", i+1, l)
	}
	return b.String()
}

type exploration struct {
	states, terminals, edges int
	violation                *counterexample
}

func lexLess(a, b []int) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] != b[i] {
			return a[i] < b[i]
		}
	}
	return len(a) < len(b)
}

// explore runs the search to completion or to the first violation. Model bugs
// (a step that does not increase the rank, too many states) fail t at once.
func explore[S comparable](t testing.TB, m model[S]) exploration {
	t.Helper()
	if m.maxStates == 0 {
		m.maxStates = 5_000_000
	}
	type parent struct {
		from  S
		label string
		root  bool
	}
	seen := make(map[S]parent, 1024)
	queue := make([]S, 0, 1024)
	for _, s := range m.init {
		if _, ok := seen[s]; !ok {
			seen[s] = parent{root: true}
			queue = append(queue, s)
		}
	}
	trace := func(s S, last string) []string {
		var rev []string
		if last != "" {
			rev = append(rev, last)
		}
		for p := seen[s]; !p.root; p = seen[p.from] {
			rev = append(rev, p.label)
		}
		out := make([]string, len(rev))
		for i := range rev {
			out[i] = rev[len(rev)-1-i]
		}
		return out
	}
	var res exploration
	for head := 0; head < len(queue); head++ {
		s := queue[head]
		res.states++
		if m.invariant != nil {
			if err := m.invariant(s); err != nil {
				res.violation = &counterexample{err: err, trace: trace(s, "")}
				return res
			}
		}
		succ := m.next(s)
		if len(succ) == 0 {
			res.terminals++
			if m.final != nil {
				if err := m.final(s); err != nil {
					res.violation = &counterexample{err: fmt.Errorf("terminal state: %w", err), trace: trace(s, "")}
					return res
				}
			}
			continue
		}
		r := m.rank(s)
		for _, st := range succ {
			res.edges++
			if !lexLess(r, m.rank(st.to)) {
				t.Fatalf("model bug: step %q does not increase the rank (%v -> %v)\ntrace: %v",
					st.label, r, m.rank(st.to), trace(s, st.label))
			}
			if _, ok := seen[st.to]; ok {
				continue
			}
			seen[st.to] = parent{from: s, label: st.label}
			queue = append(queue, st.to)
			if len(queue) > m.maxStates {
				t.Fatalf("model bug: more than %d states; tighten the bounds", m.maxStates)
			}
		}
	}
	if res.terminals == 0 {
		t.Fatalf("model bug: no terminal state reached in %d states", res.states)
	}
	return res
}

// mustHold fails t with the counterexample if the exploration found one.
func mustHold(t *testing.T, name string, res exploration) {
	t.Helper()
	if res.violation != nil {
		t.Fatalf("%s: property violated\n%s", name, res.violation)
	}
	t.Logf("%s: %d states, %d edges, %d terminal states, no violation", name, res.states, res.edges, res.terminals)
}

// mustBreak fails t unless the exploration found a counterexample: a mutation
// the model cannot catch means the guard it removes is not shown to be
// load-bearing (or the property is vacuous).
func mustBreak(t *testing.T, name string, res exploration, want string) {
	t.Helper()
	if res.violation == nil {
		t.Fatalf("%s: mutation not caught: %d states explored without a violation", name, res.states)
	}
	if want != "" && !strings.Contains(res.violation.err.Error(), want) {
		t.Fatalf("%s: caught, but by the wrong property (want %q)\n%s", name, want, res.violation)
	}
	t.Logf("%s: counterexample as expected\n%s", name, res.violation)
}
