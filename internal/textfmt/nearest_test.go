package textfmt

import "testing"

// TestNearest: a typo finds its name (a letter off, two swapped, case); a
// name too far finds none, and so does the name itself.
func TestNearest(t *testing.T) {
	names := []string{"routes", "inventory", "orders"}
	for name, want := range map[string]string{
		"route": "routes", "rotues": "routes", "Routes": "routes", "inventroy": "inventory", "order": "orders",
		"users": "", "routes": "", "": "", "x": "",
	} {
		got, ok := Nearest(name, names)
		if ok != (want != "") || (ok && got != want) {
			t.Errorf("Nearest(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
	if got := QuotedList([]string{"a", "b", "c"}, 2); got != `"a", "b", and 1 more` {
		t.Errorf("QuotedList = %s", got)
	}
}
