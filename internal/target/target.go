// Package target resolves what a foldhost command acts on from its flags
// and the config: the fold, the store directory, the NATS connection, the
// KV bucket, the plugin object a push writes and the running daemon's API
// URL (and an export asked of that daemon). What the flags get wrong is a
// usage error (package command).
package target

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/config"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/command"
)

// StoreDir is the store directory --data or --config and --fold name, and
// the fold when named through a config.
func StoreDir(dataDir, configPath, foldName string, getenv config.Getenv) (string, *config.FoldConfig, error) {
	switch {
	case dataDir != "" && (configPath != "" || foldName != ""):
		return "", nil, command.Usagef("--data and --config/--fold are exclusive")
	case dataDir != "":
		return dataDir, nil, nil
	case configPath == "":
		return "", nil, command.Usagef("name the store with --data DIR or --config FILE")
	}
	cfg, err := config.Load(configPath, getenv)
	if err != nil {
		return "", nil, err
	}
	f, err := Fold(cfg, foldName)
	if err != nil {
		return "", nil, err
	}
	return f.DataDir, &f, nil
}

// Fold is the named fold, or the only one when name is empty.
func Fold(cfg *config.Config, name string) (config.FoldConfig, error) {
	f, err := cfg.Fold(name)
	if err != nil {
		return f, command.Usagef("%v", err)
	}
	return f, nil
}

// Bucket is the bucket --bucket or --fold names (with the config's fold
// of that bucket's settings), or the config's only fold's: how to create
// it, and whether its fold's create_bucket = false forbids that.
func Bucket(cfg *config.Config, bucket, foldName string) (natskv.BucketConfig, bool, error) {
	switch {
	case bucket != "" && foldName != "":
		return natskv.BucketConfig{}, false, command.Usagef("--bucket and --fold are exclusive")
	case bucket != "":
		if !config.ValidBucket(bucket) {
			return natskv.BucketConfig{}, false, command.Usagef("%q is not a valid bucket name (A-Z a-z 0-9 _ -)", bucket)
		}
		if cfg != nil {
			for _, f := range cfg.Folds {
				if f.Bucket == bucket {
					return f.CreateBucket, f.NoCreateBucket, nil
				}
			}
		}
		return natskv.BucketConfig{Name: bucket, History: 1, Replicas: 1}, false, nil
	case cfg == nil:
		return natskv.BucketConfig{}, false, command.Usagef("name the bucket with --bucket NAME (or --config FILE [--fold NAME])")
	}
	f, err := Fold(cfg, foldName)
	if err != nil {
		return natskv.BucketConfig{}, false, err
	}
	return f.CreateBucket, f.NoCreateBucket, nil
}

// PluginObject is the object a plugin push writes (--to, or the fold's
// plugin setting) and the limits a node running the fold validates with.
func PluginObject(cfg *config.Config, foldName, to string) (pluginobj.Ref, wasm.Options, error) {
	limits := wasm.Options{MaxModuleBytes: wasm.DefaultMaxModuleBytes}
	switch {
	case to != "" && foldName != "":
		return pluginobj.Ref{}, limits, command.Usagef("--to and --fold are exclusive")
	case to != "":
		ref, err := pluginobj.ParseRef(to)
		if err != nil {
			return ref, limits, command.Usagef("--to: %v", err)
		}
		return ref, limits, nil
	case cfg == nil:
		return pluginobj.Ref{}, limits, command.Usagef("want --fold NAME with --config FILE, or --to nats-object://BUCKET/NAME")
	}
	f, err := Fold(cfg, foldName)
	if err != nil {
		return pluginobj.Ref{}, limits, err
	}
	if !pluginobj.IsRef(f.Plugin) {
		return pluginobj.Ref{}, limits, command.Usagef("fold %s's plugin is %q, not a nats-object://BUCKET/NAME reference: copy the file in place instead (the fold reloads it)", f.Name, f.Plugin)
	}
	if f.PluginMaxMB > 0 {
		limits.MaxModuleBytes = int64(f.PluginMaxMB) << 20
	}
	limits.MemoryLimitPages = uint32(f.PluginMemoryMB) * 16
	ref, err := pluginobj.ParseRef(f.Plugin)
	return ref, limits, err
}

// JetStream is Conn with a JetStream client of the connection.
func JetStream(cfg *config.Config, natsURL string, getenv config.Getenv, timeout time.Duration) (*nats.Conn, jetstream.JetStream, error) {
	nc, err := Conn(cfg, natsURL, getenv, timeout)
	if err != nil {
		return nil, nil, err
	}
	js, err := jetstream.New(nc)
	if err != nil {
		nc.Close()
		return nil, nil, err
	}
	return nc, js, nil
}

// Conn connects to the NATS server of --nats, else of cfg (nil: the
// environment's), saying what to do when cfg's embedded server is not up.
func Conn(cfg *config.Config, natsURL string, getenv config.Getenv, timeout time.Duration) (*nats.Conn, error) {
	conn, embedded, err := config.ClientConn(cfg, natsURL, getenv)
	if err != nil {
		return nil, command.Usagef("%v", err)
	}
	conn.Timeout = timeout
	nc, err := natskv.Connect(conn)
	if err != nil && embedded {
		return nil, fmt.Errorf("%w\n(is 'foldhost run' running? The embedded NATS server lives only while it runs; pass the URL it printed with --nats)", err)
	}
	return nc, err
}

// DaemonURL is the base URL of the running daemon's HTTP API, from the
// config's http.addr (an unspecified host is asked on loopback).
func DaemonURL(cfg *config.Config) (string, error) {
	h, port, _ := net.SplitHostPort(cfg.HTTP.Addr) // validated
	if port == "0" {
		return "", fmt.Errorf("its HTTP port is not configured (http.addr %s): POST to the address it printed", cfg.HTTP.Addr)
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) {
		h = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(h, port), nil
}

// ExportViaDaemon asks the running foldhost that holds the fold's store to
// run the round on its live fold, through its HTTP API.
func ExportViaDaemon(ctx context.Context, cfg *config.Config, f config.FoldConfig, force bool, token string, log *slog.Logger) (host.ExportResult, error) {
	base, err := DaemonURL(cfg)
	if err != nil {
		return host.ExportResult{}, fmt.Errorf("the fold's store is held by a running foldhost: %w", err)
	}
	log.Info("the fold is running: exporting through the daemon's HTTP API", "url", base)
	var res host.ExportResult
	if err := httpapi.Export(ctx, base, f.Name, force, token, &res); err != nil {
		return host.ExportResult{}, fmt.Errorf("the fold's store is held by a running foldhost, whose API answered: %w", err)
	}
	return res, nil
}
