//go:build !linux

package main

import (
	"errors"
	"os"
)

// Elsewhere than Linux, `foldhost top` reads no keys (Ctrl-C quits) and
// takes its width from $COLUMNS.

func termSize(*os.File) (cols, rows int, ok bool) { return 0, 0, false }

type rawTerm struct{}

func enterRaw(*os.File) (*rawTerm, error) { return nil, errors.New("not supported here") }

func (*rawTerm) restore() error { return nil }

func (*rawTerm) readKeys(chan<- byte, <-chan struct{}) <-chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}
