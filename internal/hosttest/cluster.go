package hosttest

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/embeddednats"
)

// NATSCluster is a JetStream cluster of embedded servers joined by routes,
// each on fixed ports so a node can be stopped and started again.
type NATSCluster struct {
	t     testing.TB
	nodes []*clusterNode
}

type clusterNode struct {
	name, dir       string
	port, routePort int
	srv             *embeddednats.Server
}

// pickedPorts are the ports FreePort gave, never given twice.
var pickedPorts sync.Map

// FreePort is a loopback TCP port free a moment ago, below the kernel's
// ephemeral range, never given twice in a test process: a port that :0
// gave could be taken meanwhile by an outgoing connection of a server or
// node started before the one that listens on it (routes, clients), as
// ports from :0 are the ones connections get.
func FreePort(t testing.TB) int {
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

// StartCluster starts a cluster of n nodes, named n0, n1, ..., stopped at
// the test's end.
func StartCluster(t testing.TB, n int) *NATSCluster {
	c := &NATSCluster{t: t}
	for i := range n {
		c.nodes = append(c.nodes, &clusterNode{name: fmt.Sprintf("n%d", i), dir: t.TempDir(), port: FreePort(t), routePort: FreePort(t)})
	}
	for i := range c.nodes {
		c.Start(i)
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	return c
}

// Start starts node i (again).
func (c *NATSCluster) Start(i int) {
	c.t.Helper()
	n := c.nodes[i]
	var routes []string
	for j, o := range c.nodes {
		if j != i {
			routes = append(routes, fmt.Sprintf("nats-route://127.0.0.1:%d", o.routePort))
		}
	}
	srv, err := embeddednats.Start(embeddednats.Options{Dir: n.dir, Port: n.port, StartTimeout: time.Minute,
		Cluster: &embeddednats.ClusterOptions{Name: "fh", ServerName: n.name, Port: n.routePort, Routes: routes}})
	if err != nil {
		c.t.Fatalf("node %s: %v", n.name, err)
	}
	n.srv = srv
}

// Stop shuts node i down (a clean shutdown, not a crash).
func (c *NATSCluster) Stop(i int) {
	if n := c.nodes[i]; n.srv != nil {
		n.srv.Shutdown()
		n.srv = nil
	}
}

// URLs is every node's client URL, as a client's server list.
func (c *NATSCluster) URLs() string {
	var us []string
	for _, n := range c.nodes {
		us = append(us, fmt.Sprintf("nats://127.0.0.1:%d", n.port))
	}
	return strings.Join(us, ",")
}

// Index is the index of the node named name.
func (c *NATSCluster) Index(name string) int {
	for i, n := range c.nodes {
		if n.name == name {
			return i
		}
	}
	c.t.Fatalf("no node %q", name)
	return -1
}
