package term

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"
)

// The ioctls, with the standard library (no terminal package).

func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn() // not f.Fd(): that would make f blocking
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}

// Size is the terminal's columns and rows; ok false when f is not a
// terminal.
func Size(f *os.File) (cols, rows int, ok bool) {
	var ws struct{ Row, Col, Xpixel, Ypixel uint16 }
	if ioctl(f, syscall.TIOCGWINSZ, unsafe.Pointer(&ws)) != nil {
		return 0, 0, false
	}
	return int(ws.Col), int(ws.Row), true
}

// Raw is a terminal whose input is read a key at a time, without echo.
type Raw struct {
	f     *os.File
	saved syscall.Termios
	// pollable: f is in the runtime's poller, so a read deadline ends a
	// blocked read; else reads time out by themselves (VMIN 0, VTIME).
	pollable bool
}

// EnterRaw turns off line editing and echo on the terminal f (signals
// stay: Ctrl-C still interrupts); an error when f is not a terminal.
func EnterRaw(f *os.File) (*Raw, error) {
	t := &Raw{f: f, pollable: f.SetReadDeadline(time.Time{}) == nil}
	if err := ioctl(f, syscall.TCGETS, unsafe.Pointer(&t.saved)); err != nil {
		return nil, err
	}
	raw := t.saved
	raw.Lflag &^= syscall.ICANON | syscall.ECHO
	raw.Cc[syscall.VMIN], raw.Cc[syscall.VTIME] = 1, 0
	if !t.pollable {
		raw.Cc[syscall.VMIN], raw.Cc[syscall.VTIME] = 0, 2 // a read returns after 0.2 s
	}
	if err := ioctl(f, syscall.TCSETS, unsafe.Pointer(&raw)); err != nil {
		return nil, err
	}
	return t, nil
}

// Restore puts the terminal back as EnterRaw found it.
func (t *Raw) Restore() error {
	return ioctl(t.f, syscall.TCSETS, unsafe.Pointer(&t.saved))
}

// ReadKeys sends the bytes typed to keys until done is closed; the
// returned channel is closed when the reader has returned.
func (t *Raw) ReadKeys(keys chan<- byte, done <-chan struct{}) <-chan struct{} {
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		if t.pollable {
			defer t.f.SetReadDeadline(time.Time{})
		}
		buf := make([]byte, 16)
		for {
			if t.pollable {
				_ = t.f.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
			}
			start := time.Now()
			n, err := t.f.Read(buf)
			for _, b := range buf[:n] {
				select {
				case keys <- b:
				case <-done:
					return
				}
			}
			select {
			case <-done:
				return
			default:
			}
			switch {
			case err == nil:
			case t.pollable && errors.Is(err, os.ErrDeadlineExceeded):
			case !t.pollable && errors.Is(err, io.EOF) && time.Since(start) >= 100*time.Millisecond:
				// VTIME ran out with nothing typed. (An immediate end of
				// input is a hung-up terminal.)
			default:
				return // the terminal is gone: Ctrl-C still quits
			}
		}
	}()
	return stopped
}
