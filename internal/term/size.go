package term

import (
	"io"
	"os"
	"strconv"
	"strings"
)

// SizeOf is the width and height of output w: the terminal's when w is
// one, else $COLUMNS (default 80) and $LINES (default 0: no limit), as
// getenv gives them.
func SizeOf(w io.Writer, getenv func(string) (string, bool)) (width, height int) {
	if f, ok := w.(*os.File); ok {
		if w, h, ok := Size(f); ok && w > 0 {
			return w, h
		}
	}
	width, height = 80, 0
	if v, ok := getenv("COLUMNS"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			width = n
		}
	}
	if v, ok := getenv("LINES"); ok {
		if n, err := strconv.Atoi(strings.TrimSpace(v)); err == nil && n > 0 {
			height = n
		}
	}
	return width, height
}
