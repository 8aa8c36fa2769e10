// Package textfmt formats figures and untrusted text for a terminal: byte
// sizes, one-line cuts, and strings quoted when they hold a character that
// is not printable (plugin names, errors and records written by any client
// reach the terminal only through it).
package textfmt

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// HumanBytes formats n bytes in B, KiB, MiB or GiB.
func HumanBytes(n int64) string {
	switch {
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}

// Printable is s, quoted when it holds a character that is not printable.
func Printable(s string) string {
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return strconv.Quote(s)
		}
	}
	return s
}

// OneLine is s on one line, cut to n runes.
func OneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > n {
		return string(r[:n-1]) + "…"
	}
	return s
}
