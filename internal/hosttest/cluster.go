package hosttest

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/embeddednats"
	"github.com/foldhost/foldhost/internal/freeport"
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

// FreePort is a loopback TCP port free a moment ago (freeport.Port).
func FreePort(t testing.TB) int { return freeport.Port(t) }

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
