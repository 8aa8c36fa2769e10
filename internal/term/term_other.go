//go:build !linux

package term

import (
	"errors"
	"os"
)

// Elsewhere than Linux, `foldhost top` reads no keys (Ctrl-C quits) and
// takes its width from $COLUMNS.

func Size(*os.File) (cols, rows int, ok bool) { return 0, 0, false }

type Raw struct{}

func EnterRaw(*os.File) (*Raw, error) { return nil, errors.New("not supported here") }

func (*Raw) Restore() error { return nil }

func (*Raw) ReadKeys(chan<- byte, <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
