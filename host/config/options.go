package config

import (
	"errors"
	"fmt"
	"path/filepath"

	"log/slog"
	"net"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host/artifact"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact/dirstore"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
)

// HostOptions is the host's configuration; log is its logger. It opens the
// artifact store (a local one's directory is created).
func (c *Config) HostOptions(log *slog.Logger) (host.Options, error) {
	o := host.Options{
		PluginCacheDir:   c.wasmCacheDir(),
		HeadPollInterval: c.NATS.HeadPollInterval,
		ProgressInterval: c.Log.ProgressInterval,
		Logger:           log,
		Admin:            host.AdminOptions{NATS: c.Admin.NATS, Subject: c.Admin.Subject, Node: c.Admin.Node, AllowAnonymous: c.Admin.AllowAnonymous},
		NATS: host.NATSOptions{
			Conn:            c.NATS.ConnOptions(c.NATS.URL),
			RequestTimeout:  c.NATS.RequestTimeout,
			DisconnectGrace: c.NATS.DisconnectGrace,
		},
	}
	if c.NATS.Embedded {
		h, p, _ := net.SplitHostPort(c.NATS.EmbeddedListen) // validated
		port, _ := strconv.Atoi(p)
		o.NATS.Embedded = &host.EmbeddedNATS{Host: h, Port: port, Dir: c.NATS.EmbeddedDir, Logs: c.NATS.EmbeddedLogs}
	}
	store, where, err := c.artifactStore()
	if err != nil {
		return host.Options{}, fmt.Errorf("artifacts: %w", err)
	}
	a := c.Artifacts
	o.Artifacts = host.ArtifactOptions{Store: store, Where: where, LeaseBucket: a.LeaseBucket, LeaseTTL: a.LeaseTTL, Holder: a.Holder}
	if fl := c.Fleet; fl.Name != "" {
		o.Fleet = host.FleetOptions{Name: fl.Name, Advertise: fl.Advertise, Heartbeat: fl.Heartbeat, NodeTTL: fl.NodeTTL, Replicas: fl.Replicas}
	}
	for _, f := range c.Folds {
		timeout, retries := f.PluginCallTimeout, f.PluginRetries
		if timeout == 0 {
			timeout = wasm.NoCallTimeout // the file's "0s": none
		}
		if retries == 0 {
			retries = wasm.NoRetries // the file's 0: none
		}
		o.Folds = append(o.Folds, host.FoldOptions{
			Name: f.Name, Bucket: f.Bucket, Scope: f.Scope,
			Plugin: f.Plugin, PluginCallTimeout: timeout, PluginMemoryMB: f.PluginMemoryMB,
			PluginMaxBytes: int64(f.PluginMaxMB) << 20, PluginRetries: retries, PluginLimits: f.PluginLimits,
			PluginQueryInstances: f.PluginQueryInstances,
			OnPluginError:        f.OnPluginError, DeadLetterMax: f.DeadLetterMax, DeadLetterMaxAge: f.DeadLetterMaxAge,
			DataDir: f.DataDir, BatchWindow: f.BatchWindow, BatchSize: f.BatchSize, Buffer: f.Buffer,
			ExportInterval: f.ExportInterval, ArtifactKey: f.ArtifactKey,
			Repair: f.Repair, Sync: f.Sync, DiskReserve: diskReserve(f.DiskReserveMB), MemTableSize: uint64(f.MemTableMB) << 20,
			CreateBucket: f.CreateBucket, NoCreateBucket: f.NoCreateBucket,
			EffectsStream: f.EffectsStream, EffectsSubjects: f.EffectsSubjects, EffectsFence: f.EffectsFence,
			EffectsMaxWait: effectsMaxWait(f.EffectsMaxWait), CreateEffectsStream: createEffectsStream(f),
			Standbys: standbys(f.Standbys), Partitions: f.Partitions,
		})
	}
	return o, nil
}

// artifactStore opens the configured artifact store and describes it.
func (c *Config) artifactStore() (artifact.Store, string, error) {
	a := c.Artifacts
	if a.Store == "s3" {
		st, err := s3store.New(s3store.Options{
			Endpoint: a.S3.Endpoint, Region: a.S3.Region, Bucket: a.S3.Bucket, Prefix: a.S3.Prefix,
			AccessKey: a.S3.AccessKey, SecretKey: a.S3.SecretKey, SessionToken: a.S3.SessionToken, UsePathStyle: a.S3.PathStyle,
			PartSize: int64(a.S3.PartSizeMB) << 20, Concurrency: a.S3.Concurrency, OpTimeout: a.S3.RequestTimeout,
		})
		if err != nil {
			return nil, "", err
		}
		where := "s3://" + a.S3.Bucket
		if a.S3.Prefix != "" {
			where += "/" + a.S3.Prefix
		}
		if a.S3.Endpoint != "" {
			where += " at " + a.S3.Endpoint
		}
		return st, where, nil
	}
	st, err := dirstore.New(a.Dir)
	if err != nil {
		return nil, "", err
	}
	return st, a.Dir, nil
}

// wasmCacheDir holds compiled plugins, shared by every fold.
func (c *Config) wasmCacheDir() string { return filepath.Join(c.DataDir, "wasm-cache") }

// ConnOptions is how the host and the kv command dial a configured
// (non-embedded) server.
func (n NATSConfig) ConnOptions(url string) natskv.ConnOptions {
	return natskv.ConnOptions{
		URL: url, Creds: n.Creds, CredsFile: n.CredsFile,
		CAFile: n.TLSCAFile, CertFile: n.TLSCertFile, KeyFile: n.TLSKeyFile,
		Name: "foldhost", Timeout: n.ConnectTimeout,
	}
}

// ClientConn says how a client of the NATS server cfg names connects (cfg
// may be nil: then FOLDHOST_NATS_URL and the credential variables, else the
// default embedded address), with url, when set, overriding the address.
// embedded reports that the address is the embedded server's, which runs
// only inside a running host.
func ClientConn(cfg *Config, url string, getenv Getenv) (o natskv.ConnOptions, embedded bool, err error) {
	if cfg != nil {
		n := cfg.NATS
		if url != "" {
			return n.ConnOptions(url), n.Embedded, nil
		}
		if !n.Embedded {
			return n.ConnOptions(n.URL), false, nil
		}
		if _, port, _ := net.SplitHostPort(n.EmbeddedListen); port == "0" {
			return natskv.ConnOptions{}, true, errors.New("nats.embedded_listen uses port 0 (a random port): pass the URL 'foldhost run' printed")
		}
		return natskv.ConnOptions{URL: "nats://" + n.EmbeddedListen, Name: "foldhost"}, true, nil
	}
	get := func(k string) string {
		if getenv == nil {
			return ""
		}
		v, _ := getenv(k)
		return v
	}
	if url == "" {
		url = get(EnvNATSURL)
	}
	if url == "" {
		url, embedded = "nats://"+DefaultEmbeddedListen, true
	}
	o = natskv.ConnOptions{URL: url, Name: "foldhost", Creds: get(EnvNATSCreds), CredsFile: get(EnvNATSCredsFile)}
	if o.Creds != "" && o.CredsFile != "" {
		return o, embedded, fmt.Errorf("%s and %s are both set: set at most one", EnvNATSCreds, EnvNATSCredsFile)
	}
	return o, embedded, nil
}

// diskReserve is a fold's disk_reserve_mb in bytes for host.FoldOptions.
func diskReserve(mb int64) int64 {
	if mb < 0 {
		return -1
	}
	return mb << 20
}

// createEffectsStream maps create_effects_stream to
// FoldOptions.CreateEffectsStream (nil: never create).
func createEffectsStream(f FoldConfig) *host.EffectsStreamConfig {
	if !f.CreateEffectsStream {
		return nil
	}
	c := f.EffectsStreamSettings
	return &c
}

// effectsMaxWait maps effects_max_wait to FoldOptions.EffectsMaxWait,
// whose 0 is the default: the file's "0s" (never) is negative there.
func effectsMaxWait(d time.Duration) time.Duration {
	if d == 0 {
		return -1
	}
	return d
}

// standbys is the file's standbys as host.FoldOptions takes it: 0 there
// means none, which the options spell negative.
func standbys(n int) int {
	if n == 0 {
		return -1
	}
	return n
}
