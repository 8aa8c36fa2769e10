// Package freeport gives tests loopback TCP ports to hand to servers they
// start. It has no state at init and imports nothing of foldhost: a test
// binary that also runs as foldhost (re-executed by a test, from any
// directory) may import it.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// pickedPorts are the ports Port gave, never given twice.
var pickedPorts sync.Map

// Port is a loopback TCP port free a moment ago, below the kernel's
// ephemeral range, never given twice in a test process: a port that :0
// gave could be taken meanwhile by an outgoing connection of a server or
// node started before the one that listens on it (routes, clients), as
// ports from :0 are the ones connections get.
func Port(t testing.TB) int {
	t.Helper()
	low := 32768 // Linux's default start of the ephemeral range
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	for range 1000 {
		p := 10000 + rand.IntN(low-10000)
		if _, taken := pickedPorts.LoadOrStore(p, true); taken {
			continue
		}
		if l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", p)); err == nil {
			_ = l.Close()
			return p
		}
	}
	t.Fatalf("no free loopback port between 10000 and %d", low)
	return 0
}
