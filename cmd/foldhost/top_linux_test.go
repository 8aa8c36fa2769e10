package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"
	"unsafe"

	"github.com/foldhost/foldhost/internal/syncbuf"
)

const (
	ptyICANON = syscall.ICANON
	ptyECHO   = syscall.ECHO
)

// ioctl is internal/term's, for the test's own terminal setup.
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

// openPTY opens a pseudo-terminal of cols x rows with the standard
// library (/dev/ptmx, unlocked, its slave named by TIOCGPTN). The slave is
// opened blocking (as a shell hands stdin over: not in the runtime's
// poller) or pollable. Both are closed at cleanup.
func openPTY(t *testing.T, pollable bool, cols, rows int) (master, slave *os.File) {
	t.Helper()
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { master.Close() })
	var unlock int32
	if err := ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock)); err != nil {
		t.Fatalf("unlockpt: %v", err)
	}
	var n uint32
	if err := ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n)); err != nil {
		t.Fatalf("ptsname: %v", err)
	}
	ws := struct{ Row, Col, X, Y uint16 }{Row: uint16(rows), Col: uint16(cols)}
	if err := ioctl(master, syscall.TIOCSWINSZ, unsafe.Pointer(&ws)); err != nil {
		t.Fatalf("window size: %v", err)
	}
	name := fmt.Sprintf("/dev/pts/%d", n)
	if pollable {
		slave, err = os.OpenFile(name, os.O_RDWR|syscall.O_NOCTTY, 0)
	} else {
		var fd int
		fd, err = syscall.Open(name, syscall.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
		slave = os.NewFile(uintptr(fd), name)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { slave.Close() })
	if pollable != (slave.SetReadDeadline(time.Time{}) == nil) {
		t.Fatalf("the slave is not opened as wanted (pollable %v)", pollable)
	}
	return master, slave
}

// ptyLflag is the terminal's local modes (ICANON, ECHO, ...).
func ptyLflag(t *testing.T, f *os.File) uint32 {
	t.Helper()
	var tio syscall.Termios
	if err := ioctl(f, syscall.TCGETS, unsafe.Pointer(&tio)); err != nil {
		t.Fatal(err)
	}
	return tio.Lflag
}

// readPTY copies what the master reads into a buffer until the master is
// closed (the reader is joined at cleanup).
func readPTY(t *testing.T, master *os.File) *syncbuf.Buffer {
	var out syncbuf.Buffer
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		buf := make([]byte, 4096)
		for {
			n, err := master.Read(buf)
			out.Write(buf[:n])
			if err != nil {
				return
			}
		}
	}()
	t.Cleanup(func() { master.Close(); wg.Wait() })
	return &out
}

// TestTopInteractive drives `foldhost top` in a pseudo-terminal, its
// slave as stdin and stdout (opened blocking, as a shell's stdin is, and
// pollable): frames are redrawn in place, two successive frames show a
// rate while keys are written, s cycles the sort, q quits, and the
// terminal's modes are as they were. Mutations caught: the terminal not
// restored (echo and line mode left off); raw mode not entered (q waits
// for a newline: no exit); the rate not computed; s ignored.
func TestTopInteractive(t *testing.T) {
	d, kv := topTestDaemon(t)
	// Writes all along: 2 per 5 ms, in the scope of both folds.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			for j := range 2 {
				if _, err := kv.Put(context.Background(), fmt.Sprintf("route.%d", (2*i+j)%50), []byte(`{"to":"10.0.0.1"}`)); err != nil {
					t.Error(err)
					return
				}
			}
		}
	}()
	defer func() { close(stop); wg.Wait() }()

	for _, pollable := range []bool{false, true} {
		t.Run(fmt.Sprintf("pollable=%v", pollable), func(t *testing.T) {
			master, slave := openPTY(t, pollable, 80, 24)
			before := ptyLflag(t, slave)
			if before&(ptyICANON|ptyECHO) != ptyICANON|ptyECHO {
				t.Fatalf("a fresh pty without line mode and echo: %#x", before)
			}
			out := readPTY(t, master)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			c := &cli{ctx: ctx, stdout: slave, stderr: slave, stdin: slave, getenv: envOf(nil)}
			exit := make(chan int, 1)
			go func() { exit <- c.main([]string{"top", "--url", d.base, "--interval", "150ms"}) }()
			defer func() {
				cancel()
				select {
				case <-exit:
				case <-time.After(10 * time.Second):
					// A key reader left in line mode waits for a newline.
					t.Error("top did not return when cancelled")
					_, _ = master.Write([]byte("\n"))
					<-exit
				}
			}()

			// Two successive frames with a rate for both folds.
			var last []string
			waitFor(t, time.Minute, "two successive frames with rates", func() (bool, string) {
				frames := ptyFrames(out.String())
				for i := 1; i < len(frames); i++ {
					if topRate(frames[i-1], "routes") > 0 && topRate(frames[i], "routes") > 0 && topRate(frames[i], "views") > 0 {
						return true, ""
					}
				}
				if len(frames) > 0 {
					last = frames[len(frames)-1]
				}
				return false, strings.Join(last, "\n")
			})
			if l := ptyLflag(t, slave); l&(ptyICANON|ptyECHO) != 0 {
				t.Errorf("running: line mode or echo still on: %#x", l)
			}
			for _, f := range ptyFrames(out.String()) {
				for _, l := range f {
					if n := utf8.RuneCountInString(l); n > 80 {
						t.Errorf("a line of %d columns: %q", n, l)
					}
				}
			}
			if !strings.HasPrefix(out.String(), "\x1b[?1049h") {
				t.Errorf("the alternate screen not entered: %q", out.String()[:min(40, len(out.String()))])
			}

			if _, err := master.Write([]byte("s")); err != nil {
				t.Fatal(err)
			}
			waitFor(t, 20*time.Second, "a frame sorted by lag", func() (bool, string) {
				frames := ptyFrames(out.String())
				return len(frames) > 0 && strings.Contains(frames[len(frames)-1][0], "sort: lag"), out.String()
			})
			if _, err := master.Write([]byte("q")); err != nil {
				t.Fatal(err)
			}
			select {
			case code := <-exit:
				exit <- code // for the deferred join
				if code != 0 {
					t.Errorf("exit %d", code)
				}
			case <-time.After(20 * time.Second):
				t.Fatal("q did not quit")
			}
			waitFor(t, 10*time.Second, "the screen restored", func() (bool, string) {
				s := out.String()
				return strings.HasSuffix(s, "\x1b[?25h\x1b[?1049l"), s[max(0, len(s)-80):]
			})
			if after := ptyLflag(t, slave); after != before {
				t.Errorf("local modes after exit %#x, before %#x", after, before)
			}
		})
	}
}
