package main

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/command"
)

// proc is foldhost running in a child process (the test binary, through
// runMainEnv), with its stderr collected line by line.
type proc struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	stderr []string
	lines  chan string
	exited chan struct{}
	err    error
}

func startProc(t *testing.T, args ...string) *proc {
	t.Helper()
	p := &proc{cmd: exec.Command(os.Args[0], args...), lines: make(chan string, 1024), exited: make(chan struct{})}
	p.cmd.Env = append(os.Environ(), runMainEnv+"=1")
	errPipe, err := p.cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(errPipe)
		for sc.Scan() {
			p.mu.Lock()
			p.stderr = append(p.stderr, sc.Text())
			p.mu.Unlock()
			select {
			case p.lines <- sc.Text():
			default:
			}
		}
	}()
	go func() {
		<-read
		p.err = p.cmd.Wait()
		close(p.exited)
	}()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		<-p.exited
	})
	return p
}

func (p *proc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return strings.Join(p.stderr, "\n")
}

// waitLine waits for a stderr line containing s.
func (p *proc) waitLine(t *testing.T, s string) {
	t.Helper()
	timeout := time.After(2 * time.Minute)
	for {
		select {
		case l := <-p.lines:
			if strings.Contains(l, s) {
				return
			}
		case <-p.exited:
			t.Fatalf("exited (%v) before logging %q:\n%s", p.err, s, p.log())
		case <-timeout:
			t.Fatalf("no %q logged within 2m:\n%s", s, p.log())
		}
	}
}

// waitExit waits for the process to end within limit and returns its exit
// code; since returns how long after since it took.
func (p *proc) waitExit(t *testing.T, limit time.Duration) int {
	t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		t.Fatalf("still running %v after the signal:\n%s", limit, p.log())
	}
	if p.err == nil {
		return 0
	}
	if ee, ok := p.err.(*exec.ExitError); ok {
		return ee.ExitCode()
	}
	t.Fatal(p.err)
	return -1
}

func (p *proc) signal(t *testing.T, sig os.Signal) {
	t.Helper()
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// blackholeNATS accepts connections and never answers: a NATS client
// connecting to it waits for its connect timeout.
func blackholeNATS(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	var mu sync.Mutex
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return "nats://" + ln.Addr().String()
}

// TestSignalDuringPluginLoad: SIGTERM while a plugin's start function spins
// (no call deadline configured) ends the start at once and cleanly: the
// trial run is cancellable (it used to ignore SIGTERM and SIGINT).
func TestSignalDuringPluginLoad(t *testing.T) {
	cfg := writeConfig(t, t.TempDir(), fmt.Sprintf(`
[http]
addr = "127.0.0.1:0"
[nats]
embedded_listen = "127.0.0.1:0"
[[fold]]
name = "spin"
plugin = %q
plugin_call_timeout = "0s"
`, builtPlugin(t, "testdata", "spin-init")))
	p := startProc(t, "run", "--config", cfg)
	p.waitLine(t, "loading plugin")
	p.signal(t, syscall.SIGTERM)
	if code := p.waitExit(t, 2*time.Minute); code != command.ExitOK {
		t.Fatalf("exit %d after SIGTERM during the plugin load, want 0:\n%s", code, p.log())
	}
	if !strings.Contains(p.log(), "start interrupted by a signal") {
		t.Fatalf("no word of the interrupted start:\n%s", p.log())
	}
}

// TestSecondSignalExitsAtOnce: a shutdown stuck in something that does not
// honour cancellation (here, connecting to a server that never answers,
// with a one-hour connect timeout) ends at the second signal, or when
// shutdown_grace runs out.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	config := func(grace string) string {
		return writeConfig(t, t.TempDir(), fmt.Sprintf(`
shutdown_grace = %q
[http]
addr = "127.0.0.1:0"
[nats]
url = %q
connect_timeout = "1h"
[[fold]]
name = "a"
`, grace, blackholeNATS(t)))
	}
	t.Run("second signal", func(t *testing.T) {
		p := startProc(t, "run", "--config", config("1h"))
		p.waitLine(t, "connecting to NATS")
		p.signal(t, syscall.SIGTERM)
		p.waitLine(t, "shutting down")
		p.signal(t, syscall.SIGINT)
		if code := p.waitExit(t, 2*time.Minute); code != command.ExitFailure {
			t.Fatalf("exit %d, want %d:\n%s", code, command.ExitFailure, p.log())
		}
		if !strings.Contains(p.log(), "again: exiting now") {
			t.Fatalf("no word of the forced exit:\n%s", p.log())
		}
	})
	t.Run("grace", func(t *testing.T) {
		p := startProc(t, "run", "--config", config("1s"))
		p.waitLine(t, "connecting to NATS")
		p.signal(t, syscall.SIGTERM)
		if code := p.waitExit(t, 2*time.Minute); code != command.ExitFailure {
			t.Fatalf("exit %d, want %d:\n%s", code, command.ExitFailure, p.log())
		}
		if !strings.Contains(p.log(), "did not finish within 1s") {
			t.Fatalf("no word of the grace:\n%s", p.log())
		}
	})
}
