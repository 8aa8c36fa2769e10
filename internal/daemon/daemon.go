// Package daemon is what `foldhost run` adds around a host: the logger of
// the config's [log] section, the HTTP API served (bound before anything
// is printed, its URL printed, warnings when it listens beyond loopback,
// a shutdown bounded in time), and plugin reloads on SIGHUP.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"syscall"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/config"
)

// Listen binds the HTTP API's address, before anything else starts: an
// address in use fails the start before buckets are opened or created and
// before an embedded NATS server starts, saying which key moves it.
func Listen(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if errors.Is(err, syscall.EADDRINUSE) {
		return nil, fmt.Errorf("http: the HTTP API's address %s is in use (another 'foldhost run'?): stop what holds it, "+
			"or set [http] addr in the config to another (port 0 picks a free one): %w", addr, err)
	}
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
	return ln, nil
}

// Serve prints the URL of ln (Listen's, for the address addr) and serves
// h on it until the returned function is called. The server's Addr is the
// listener's bound address: the HTTP API admits admin actions without a
// token only when it is loopback (a wildcard listener accepts loopback
// connections too).
func Serve(ln net.Listener, addr string, h http.Handler, withToken bool, log *slog.Logger, stdout io.Writer) func() {
	if lh, _, _ := net.SplitHostPort(addr); !isLoopbackHost(lh) {
		if !withToken {
			log.Warn("the HTTP API listens beyond loopback: its reads are open to every client, its admin actions (POST) refused until "+host.AdminTokenEnv+" is set", "addr", addr)
		} else {
			log.Warn("the HTTP API listens beyond loopback: its reads are open to every client, its admin actions (POST) need the admin token", "addr", addr)
		}
	}
	// No Read or WriteTimeout: an export through POST runs as long as its
	// round (a ReadTimeout would also cancel its request's context), and
	// no endpoint reads a body; httpapi bounds the writes of reads itself.
	srv := &http.Server{Addr: ln.Addr().String(), Handler: h, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 2 * time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server failed", "err", err)
		}
	}()
	url := "http://" + ln.Addr().String()
	fmt.Fprintf(stdout, "foldhost: HTTP API listening on %s\n", url)
	log.Info("HTTP API listening", "url", url)
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := srv.Shutdown(ctx); err != nil {
			log.Warn("http shutdown", "err", err)
			_ = srv.Close()
		}
		<-done
	}
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// Logger is the logger of the config's [log] section, writing to w.
func Logger(lc config.LogConfig, w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(lc.Level))
	opts := &slog.HandlerOptions{Level: level}
	if lc.Format == "json" {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}

// ReloadOnHUP reloads every plugin on SIGHUP until ctx ends: each module is
// validated off the hot path and swapped in at its fold's next batch
// boundary; one that fails validation leaves the running module in place.
func ReloadOnHUP(ctx context.Context, h *host.Host, hup <-chan os.Signal, log *slog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if err := h.ReloadPlugins(ctx); err != nil {
			log.Error("plugin reload refused (SIGHUP); the running modules stay", "err", err)
		} else {
			log.Info("plugins reloaded (SIGHUP)")
		}
	}
}
