package textfmt

import (
	"fmt"
	"strconv"
	"strings"
)

// Nearest is the candidate nearest to name by edit distance (insertions,
// deletions, substitutions and swaps of neighbours, case ignored), when it
// is near enough to be a typo of it: at most a third of name's length
// away, and at least 1 (name itself is never its own nearest); ok false
// otherwise. Ties go to the first candidate.
func Nearest(name string, candidates []string) (best string, ok bool) {
	limit := max(1, len(name)/3)
	bestD := limit + 1
	for _, c := range candidates {
		if c == name {
			continue
		}
		if d := distance(strings.ToLower(name), strings.ToLower(c)); d < bestD {
			best, bestD = c, d
		}
	}
	return best, bestD <= limit
}

// distance is the optimal string alignment distance of a and b, in bytes.
func distance(a, b string) int {
	if len(a) > 256 || len(b) > 256 { // a name, not a text: no table for it
		return max(len(a), len(b))
	}
	d := make([][]int, len(a)+1)
	for i := range d {
		d[i] = make([]int, len(b)+1)
		d[i][0] = i
	}
	for j := range d[0] {
		d[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d[i][j] = min(d[i-1][j]+1, d[i][j-1]+1, d[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d[i][j] = min(d[i][j], d[i-2][j-2]+1)
			}
		}
	}
	return d[len(a)][len(b)]
}

// QuotedList is names quoted and joined with ", ", at most max of them
// (then "and N more").
func QuotedList(names []string, max int) string {
	var b strings.Builder
	for i, n := range names {
		if i == max {
			b.WriteString(", and " + strconv.Itoa(len(names)-max) + " more")
			break
		}
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(strconv.Quote(n))
	}
	return b.String()
}

// NoSuch says which names there are, for a name not among them: "what
// are "a", "b" (did you mean "b"?)", or "what: none".
func NoSuch(what, name string, names []string) string {
	if len(names) == 0 {
		return what + ": none"
	}
	s := what + " are " + QuotedList(names, 20)
	if near, ok := Nearest(name, names); ok {
		s += fmt.Sprintf(" (did you mean %q?)", near)
	}
	return s
}
