// Package httpserve serves foldhost's HTTP API for `foldhost run`: bound
// before anything is printed, its URL printed, warnings when it listens
// beyond loopback, and a shutdown bounded in time.
package httpserve

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/foldhost/foldhost/host"
)

// Serve binds addr, prints the URL, and serves h until the returned
// function is called. The server's Addr is the listener's bound address:
// the HTTP API admits admin actions without a token only when it is
// loopback (a wildcard listener accepts loopback connections too).
func Serve(addr string, h http.Handler, withToken bool, log *slog.Logger, stdout io.Writer) (func(), error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("http: %w", err)
	}
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
	}, nil
}

func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}
