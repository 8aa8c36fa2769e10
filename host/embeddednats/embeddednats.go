package embeddednats

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// Options configures an embedded server. The zero value is not usable: Dir
// is required.
type Options struct {
	// Dir holds JetStream's storage. Streams survive a restart on the same
	// Dir.
	Dir string
	// Host to listen on; default "127.0.0.1" (loopback only).
	Host string
	// Port to listen on; 0 (default) picks a free port. Restarting on the
	// same port keeps client URLs valid across a server restart.
	Port int
	// StartTimeout bounds the wait for the server to accept connections;
	// default 10s.
	StartTimeout time.Duration
	// Logs enables the server's own log output on stderr.
	Logs bool
	// Cluster, when set, makes the server a node of a JetStream cluster.
	Cluster *ClusterOptions
	// MaxPayload is the server's max_payload (0: NATS's default, 1 MiB).
	MaxPayload int32
	// MaxBatchSize is the most messages a JetStream atomic batch may hold
	// (0: the server's default, 1000).
	MaxBatchSize int
}

// ClusterOptions make a server one node of a JetStream cluster.
type ClusterOptions struct {
	Name       string   // the cluster's name, the same on every node
	ServerName string   // this node's name, unique in the cluster
	Port       int      // the route listen port (on Host); must be fixed so peers find it
	Routes     []string // the other nodes' route URLs: nats-route://host:port
}

// Server is a running embedded nats-server.
type Server struct {
	ns *server.Server
}

// ErrNotReady is returned when the server does not accept connections in
// time.
var ErrNotReady = errors.New("embeddednats: server not ready")

// ErrListen is returned when the server cannot listen on its address (in
// use by another process, most often), at once: not after StartTimeout.
var ErrListen = errors.New("embeddednats: cannot listen")

// Start starts a server and waits until it accepts connections.
func Start(o Options) (*Server, error) {
	if o.Dir == "" {
		return nil, errors.New("embeddednats: Options.Dir is required")
	}
	if o.Host == "" {
		o.Host = "127.0.0.1"
	}
	if o.Port == 0 {
		o.Port = server.RANDOM_PORT
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 10 * time.Second
	}
	so := &server.Options{
		Host:      o.Host,
		Port:      o.Port,
		JetStream: true,
		StoreDir:  o.Dir,
		NoSigs:    true,
		NoLog:     !o.Logs,
		// Two cores here and in CI: keep the server's own footprint small.
		JetStreamMaxMemory: 256 << 20,
		MaxPayload:         o.MaxPayload,
	}
	so.JetStreamLimits.MaxBatchSize = o.MaxBatchSize
	if c := o.Cluster; c != nil {
		so.ServerName = c.ServerName
		so.Cluster = server.ClusterOpts{Name: c.Name, Host: o.Host, Port: c.Port}
		for _, r := range c.Routes {
			u, err := url.Parse(r)
			if err != nil {
				return nil, fmt.Errorf("embeddednats: route %q: %w", r, err)
			}
			so.Routes = append(so.Routes, u)
		}
	}
	if o.Port != server.RANDOM_PORT {
		// A port in use: say so now. The server only logs it (a fatal
		// error it does not return) and never becomes ready.
		ln, err := net.Listen("tcp", net.JoinHostPort(o.Host, strconv.Itoa(o.Port)))
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrListen, err)
		}
		ln.Close()
	}
	ns, err := server.NewServer(so)
	if err != nil {
		return nil, fmt.Errorf("embeddednats: configure: %w", err)
	}
	if o.Logs {
		ns.ConfigureLogger()
	}
	go ns.Start()
	if !ns.ReadyForConnections(o.StartTimeout) {
		ns.Shutdown()
		return nil, fmt.Errorf("%w after %v", ErrNotReady, o.StartTimeout)
	}
	return &Server{ns: ns}, nil
}

// ClientURL is the nats:// URL clients connect to.
func (s *Server) ClientURL() string { return s.ns.ClientURL() }

// Port is the port the server listens on (useful to restart on the same one).
func (s *Server) Port() int {
	if a, ok := s.ns.Addr().(*net.TCPAddr); ok {
		return a.Port
	}
	return 0
}

// Name is the server's name (its cluster node name when clustered).
func (s *Server) Name() string { return s.ns.Name() }

// Shutdown stops the server and waits until it has stopped. Safe to call
// more than once.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}
