package natskv

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/foldhost/foldhost/internal/files"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nkeys"
)

// ConnOptions says how to reach NATS. Credentials priority: Creds, then
// CredsFile, then user:pass embedded in URL, then none.
type ConnOptions struct {
	// URL of the server(s), comma-separated; nats:// or tls://, optionally
	// with user:pass@ for legacy authentication.
	URL string
	// Creds is the content of a .creds file (JWT + seed), for deployments
	// that pass secrets as values rather than mounted files.
	Creds string
	// CredsFile is the path of a .creds file.
	CredsFile string
	// TLS client settings; all optional. CAFile adds a root CA; CertFile and
	// KeyFile present a client certificate (both or neither).
	CAFile, CertFile, KeyFile string
	// Name identifies this client in the server's monitoring.
	Name string
	// Timeout bounds the initial dial; default 5s.
	Timeout time.Duration
	// Health, if set, tracks the connection's state (and logs its drops
	// and reconnects).
	Health *Health
}

// CheckURL checks a NATS server URL, or a comma-separated list of them:
// each one is host:port or has a scheme the client dials (nats, tls, ws,
// wss). The client takes any other scheme for nats:// and dials its host
// and port, so an http:// URL (often foldhost's own HTTP API) would be
// dialled as a NATS server and fail obscurely, or hang.
func CheckURL(urls string) error {
	n := 0
	for _, u := range strings.Split(urls, ",") {
		u = strings.TrimSpace(u)
		if u == "" {
			continue
		}
		n++
		scheme, _, ok := strings.Cut(u, "://")
		if !ok {
			continue // host:port: the client adds nats://
		}
		switch strings.ToLower(scheme) {
		case "nats", "tls", "ws", "wss":
			continue
		}
		return fmt.Errorf("URL %q: %q is not a NATS scheme (want nats://, tls://, ws:// or wss://): "+
			"the NATS URL is a NATS server's client port, e.g. nats://127.0.0.1:4222, not an HTTP address", u, scheme+"://")
	}
	if n == 0 {
		return errors.New("no URL")
	}
	return nil
}

// MaxSecretFileSize bounds a creds or TLS file.
const MaxSecretFileSize = 1 << 20

// Connect dials NATS. The connection reconnects forever (a fold outlives
// server restarts); every later request is bounded by its own timeout.
func Connect(o ConnOptions) (*nats.Conn, error) {
	if err := CheckURL(o.URL); err != nil {
		return nil, fmt.Errorf("natskv: connect: %w", err)
	}
	if (o.CertFile == "") != (o.KeyFile == "") {
		return nil, errors.New("natskv: connect: TLS client certificate needs both CertFile and KeyFile")
	}
	if o.Timeout == 0 {
		o.Timeout = 5 * time.Second
	}
	// The client reads these files itself, with no type or size check: a
	// FIFO would block the connect forever. Check each before it does.
	for _, f := range []struct{ what, path string }{
		{"creds file", o.CredsFile}, {"TLS CA file", o.CAFile}, {"TLS cert file", o.CertFile}, {"TLS key file", o.KeyFile},
	} {
		if f.path == "" {
			continue
		}
		fh, _, err := files.OpenRegular(f.path, MaxSecretFileSize)
		if err != nil {
			return nil, fmt.Errorf("natskv: connect: %s: %w", f.what, err)
		}
		fh.Close()
	}
	opts := []nats.Option{
		nats.Timeout(o.Timeout),
		nats.MaxReconnects(-1),
		nats.ReconnectWait(250 * time.Millisecond),
		// A dead peer is noticed within ~PingInterval*MaxPingsOutstanding.
		nats.PingInterval(10 * time.Second),
		nats.MaxPingsOutstanding(3),
		nats.RetryOnFailedConnect(false),
	}
	if o.Name != "" {
		opts = append(opts, nats.Name(o.Name))
	}
	switch {
	case o.Creds != "":
		jwt, err := nkeys.ParseDecoratedJWT([]byte(o.Creds))
		if err != nil {
			return nil, fmt.Errorf("natskv: connect: creds: %w", err)
		}
		kp, err := nkeys.ParseDecoratedNKey([]byte(o.Creds))
		if err != nil {
			return nil, fmt.Errorf("natskv: connect: creds: %w", err)
		}
		seed, err := kp.Seed()
		if err != nil {
			return nil, fmt.Errorf("natskv: connect: creds: %w", err)
		}
		opts = append(opts, nats.UserJWTAndSeed(jwt, string(seed)))
	case o.CredsFile != "":
		opts = append(opts, nats.UserCredentials(o.CredsFile))
	}
	if o.CAFile != "" {
		opts = append(opts, nats.RootCAs(o.CAFile))
	}
	if o.CertFile != "" {
		opts = append(opts, nats.ClientCert(o.CertFile, o.KeyFile))
	}
	if o.Health != nil {
		opts = append(opts, o.Health.options()...)
	}
	nc, err := nats.Connect(o.URL, opts...)
	if err != nil {
		return nil, fmt.Errorf("natskv: connect %s: %w", Redact(o.URL), err)
	}
	if o.Health != nil {
		o.Health.connected(nc)
	}
	return nc, nil
}

// Redact hides credentials embedded in a URL before it reaches a log.
func Redact(u string) string {
	at := strings.LastIndex(u, "@")
	if at < 0 {
		return u
	}
	start := 0
	if i := strings.Index(u, "://"); i >= 0 && i < at {
		start = i + 3
	}
	return u[:start] + "***" + u[at:]
}
