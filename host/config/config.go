// Package config reads foldhost's TOML config file into a Config and turns
// it into host.Options: every problem reported at once, each with its key
// path (fold[1].batch_size), line and, for an environment override, the
// variable. Defaults are the libraries' own (host, wasm, fold, natskv,
// s3store), imported, not repeated. config.toml.example documents every
// key. An embedder can configure a Host from TOML with Load and
// Config.HostOptions.
package config

import (
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/s3store"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/protocol"
)

// Config is a parsed and validated config.toml. Every field has its default
// applied and every path is absolute (relative paths in the file are
// resolved against the file's directory). config.toml.example documents
// each key.
type Config struct {
	// File is the absolute path of the config file.
	File string
	// DataDir is the root of everything foldhost persists; default "data"
	// next to the config file.
	DataDir string
	// ShutdownGrace bounds a graceful shutdown after SIGINT/SIGTERM; then
	// the process exits at once. Default 30s.
	ShutdownGrace time.Duration
	NATS          NATSConfig
	HTTP          HTTPConfig
	Admin         AdminConfig
	Log           LogConfig
	Artifacts     ArtifactsConfig
	Folds         []FoldConfig
}

// ArtifactsConfig is where artifacts go ([artifacts]): one store for every
// fold, each fold under its own key.
type ArtifactsConfig struct {
	// Store is "local" (default: a directory on this host) or "s3".
	Store string
	// Dir is the local store's directory; default <data_dir>/artifacts.
	Dir string
	S3  S3Config
	// LeaseBucket is the NATS KV bucket of the export leases (created when
	// missing); default foldhost_export_leases.
	LeaseBucket string
	// LeaseTTL is a round's lease: one node exports per key per TTL;
	// payloads are pruned after 4 x TTL. Default 5m.
	LeaseTTL time.Duration
	// Holder is this node's name in the leases; default the host name.
	Holder string
}

// S3Config is [artifacts.s3].
type S3Config struct {
	Endpoint, Region, Bucket, Prefix string
	PathStyle                        bool
	AccessKey, SecretKey             string
	SessionToken                     string // environment only
	PartSizeMB, Concurrency          int
	RequestTimeout                   time.Duration
}

// NATSConfig says how to reach NATS, or how to run the embedded server.
type NATSConfig struct {
	// URL of the server(s); "" or "embedded" means the embedded server.
	URL string
	// Embedded is true when foldhost runs its own in-process server.
	Embedded bool
	// EmbeddedListen is the embedded server's host:port; default
	// 127.0.0.1:4222 (loopback only: it has no authentication). Port 0
	// picks a free port.
	EmbeddedListen string
	// EmbeddedDir holds the embedded server's JetStream storage; default
	// <data_dir>/nats.
	EmbeddedDir string
	// EmbeddedLogs sends the embedded server's own log to stderr.
	EmbeddedLogs bool

	Creds, CredsFile                   string
	TLSCAFile, TLSCertFile, TLSKeyFile string

	ConnectTimeout   time.Duration // default 5s
	RequestTimeout   time.Duration // default natskv.DefaultRequestTimeout
	HeadPollInterval time.Duration // default 5s
	DisconnectGrace  time.Duration // default host.DefaultDisconnectGrace
}

// HTTPConfig configures the HTTP API.
type HTTPConfig struct {
	Addr string // default 127.0.0.1:8080
}

// AdminConfig is [admin]: the admin service over NATS (host.AdminOptions).
type AdminConfig struct {
	NATS           bool   // serve it; default false
	Subject        string // default host.DefaultAdminSubject
	Node           string // default artifacts.holder
	AllowAnonymous bool
}

// LogConfig configures log/slog output (stderr).
type LogConfig struct {
	Level            string        // debug | info | warn | error; default info
	Format           string        // text | json; default text
	ProgressInterval time.Duration // default 5s
}

// FoldConfig is one [[fold]] section.
type FoldConfig struct {
	Name   string
	Bucket string // default Name
	Scope  []string
	// Plugin is the absolute path of the plugin, a nats-object://BUCKET/NAME
	// reference (a module in a NATS object store), or "" for a raw-only
	// fold.
	Plugin string
	// PluginCallTimeout bounds each call into the plugin (default
	// wasm.DefaultCallTimeout; 0 in the file: none, the plugin is still
	// contained); PluginMemoryMB caps its memory; PluginMaxMB caps its
	// module file; PluginRetries is how often a failed batch is retried on
	// a fresh instance before the fold stops.
	PluginCallTimeout time.Duration
	PluginMemoryMB    int
	PluginMaxMB       int
	PluginRetries     int
	// PluginQueryInstances: how many of the plugin's queries run at once
	// (host.FoldOptions); 0: the host's default.
	PluginQueryInstances int
	// PluginLimits bound what one call into the plugin can make the host
	// hold (the plugin_max_* keys of wasm.LimitError; defaults wasm's).
	PluginLimits wasm.Limits
	// OnPluginError: "stop" (default) or "skip" (host.FoldOptions);
	// DeadLetterMax and DeadLetterMaxAge bound the dead letters of "skip".
	OnPluginError    string
	DeadLetterMax    int
	DeadLetterMaxAge time.Duration
	DataDir          string // default <data_dir>/folds/<name>
	// BatchWindow, BatchSize and Buffer tune the applied loop
	// (fold.LoopConfig.Window, .MaxBatch, fold.FollowConfig.Buffer).
	BatchWindow time.Duration
	BatchSize   int
	Buffer      int
	// ExportInterval: how often the daemon runs an export round for this
	// fold (0: never; `foldhost export` still can). ArtifactKey names its
	// artifacts in the store and its lease; default Name.
	ExportInterval time.Duration
	ArtifactKey    string
	// Repair is the cursor-expiry repair mode; default auto.
	Repair protocol.RepairMode
	Sync   bool
	// DiskReserveMB: free space every store write leaves (0: the store's
	// default; -1: none).
	DiskReserveMB int64
	// MemTableMB: the size of one pebble memtable of the fold's store
	// (0: the store's default, 64).
	MemTableMB int64
	// CreateBucket applies only when the bucket does not exist yet.
	CreateBucket natskv.BucketConfig
	// NoCreateBucket (create_bucket = false) refuses a bucket that does
	// not exist instead of creating it.
	NoCreateBucket bool
	// EffectsStream and EffectsSubjects: where the plugin's effects are
	// published (host.FoldOptions); "" drops them.
	EffectsStream   string
	EffectsSubjects []string
	EffectsFence    string
	// EffectsMaxWait: the outbox wait past which the fold is not ready
	// (0: never).
	EffectsMaxWait time.Duration
}

// Defaults the file's own keys have (the rest are the libraries').
const (
	DefaultShutdownGrace  = 30 * time.Second
	defaultPluginMaxMB    = wasm.DefaultMaxModuleBytes >> 20
	defaultHTTPAddr       = "127.0.0.1:8080"
	DefaultEmbeddedListen = "127.0.0.1:4222"
	defaultDataDir        = "data"
	defaultConnectTimeout = 5 * time.Second
	defaultS3Region       = "us-east-1"
)

// Environment variables that override the file (set and non-empty). They
// exist so secrets need not be written into config.toml.
const (
	EnvNATSURL        = "FOLDHOST_NATS_URL"
	EnvNATSCreds      = "FOLDHOST_NATS_CREDS"      // content of a .creds file
	EnvNATSCredsFile  = "FOLDHOST_NATS_CREDS_FILE" // path of a .creds file
	EnvS3AccessKey    = "FOLDHOST_S3_ACCESS_KEY"
	EnvS3SecretKey    = "FOLDHOST_S3_SECRET_KEY"
	EnvS3SessionToken = "FOLDHOST_S3_SESSION_TOKEN" // with temporary keys
)

// Limits checked by validation.
const (
	maxBatchSize = 1_000_000
	maxBuffer    = 1_000_000
	maxWindow    = time.Minute
)

var (
	nameRE   = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
	bucketRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)
)

// ValidName reports a valid fold name or artifact key: 1 to 64 of
// A-Z a-z 0-9 _ - (it appears in URLs, metrics, directory and object names).
func ValidName(s string) bool { return nameRE.MatchString(s) }

// ValidBucket reports a valid KV bucket name.
func ValidBucket(s string) bool { return bucketRE.MatchString(s) }

// Fold returns the fold named name, or the only fold when name is empty
// (an error names the choices when the config has several).
func (c *Config) Fold(name string) (FoldConfig, error) {
	if name == "" {
		if len(c.Folds) == 1 {
			return c.Folds[0], nil
		}
		return FoldConfig{}, fmt.Errorf("the config has %d folds: choose one with --fold NAME", len(c.Folds))
	}
	for _, f := range c.Folds {
		if f.Name == name {
			return f, nil
		}
	}
	return FoldConfig{}, fmt.Errorf("no fold named %q in the config", name)
}

// Getenv looks up an environment variable (os.LookupEnv in production).
type Getenv func(string) (string, bool)

// MaxFileSize bounds the config file.
const MaxFileSize = 1 << 20

// Load reads, parses and validates the config file at path (a regular file
// of at most MaxFileSize), applying environment overrides. A *Error lists
// every problem found.
func Load(path string, getenv Getenv) (*Config, error) {
	data, err := files.ReadRegular(path, MaxFileSize)
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Msg: err.Error()}}}
	}
	return Parse(data, path, getenv)
}

// Parse parses and validates data as the config file at path (used to
// name the file in problems and to resolve relative paths).
func Parse(data []byte, path string, getenv Getenv) (*Config, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Msg: err.Error()}}}
	}
	doc, perr := decodeTOML(data, path)
	if perr != nil {
		return nil, perr
	}
	c := &Config{File: abs}
	ps := doc.problems
	c.extract(doc.root)
	c.applyEnv(getenv, ps)
	c.validate(ps)
	if err := ps.err(); err != nil {
		return nil, err
	}
	return c, nil
}

// extract copies the document into c, recording type errors and unknown
// keys.
func (c *Config) extract(root *table) {
	root.str("data_dir", &c.DataDir)
	if root.duration("shutdown_grace", &c.ShutdownGrace) && c.ShutdownGrace < time.Second {
		root.problem("shutdown_grace", "must be at least 1s, got %v", c.ShutdownGrace)
	}

	n := root.sub("nats")
	n.str("url", &c.NATS.URL)
	n.str("embedded_listen", &c.NATS.EmbeddedListen)
	n.str("embedded_dir", &c.NATS.EmbeddedDir)
	n.boolean("embedded_logs", &c.NATS.EmbeddedLogs)
	n.str("creds", &c.NATS.Creds)
	n.str("creds_file", &c.NATS.CredsFile)
	n.str("tls_ca_file", &c.NATS.TLSCAFile)
	n.str("tls_cert_file", &c.NATS.TLSCertFile)
	n.str("tls_key_file", &c.NATS.TLSKeyFile)
	n.duration("connect_timeout", &c.NATS.ConnectTimeout)
	n.duration("request_timeout", &c.NATS.RequestTimeout)
	n.duration("head_poll_interval", &c.NATS.HeadPollInterval)
	n.duration("disconnect_grace", &c.NATS.DisconnectGrace)
	n.done()

	h := root.sub("http")
	h.str("addr", &c.HTTP.Addr)
	h.done()

	a := root.sub("admin")
	a.boolean("nats", &c.Admin.NATS)
	a.str("subject", &c.Admin.Subject)
	a.str("node", &c.Admin.Node)
	a.boolean("allow_anonymous", &c.Admin.AllowAnonymous)
	a.done()

	l := root.sub("log")
	l.str("level", &c.Log.Level)
	l.str("format", &c.Log.Format)
	l.duration("progress_interval", &c.Log.ProgressInterval)
	l.done()

	c.extractArtifacts(root.sub("artifacts"))

	for _, f := range root.array("fold") {
		c.Folds = append(c.Folds, extractFold(f))
	}
	root.done()
}

// extractFold reads one [[fold]] table, range-checking the values whose
// type was right (a wrong type is one problem, not two).
func extractFold(f *table) FoldConfig {
	var fc FoldConfig
	var repair string
	var batch, buffer int64
	f.str("name", &fc.Name)
	f.str("bucket", &fc.Bucket)
	f.strings("scope", &fc.Scope)
	f.str("plugin", &fc.Plugin)
	fc.PluginCallTimeout = wasm.DefaultCallTimeout
	if f.duration("plugin_call_timeout", &fc.PluginCallTimeout) && fc.PluginCallTimeout < 0 {
		f.problem("plugin_call_timeout", "must be >= 0 (0: no deadline), got %v", fc.PluginCallTimeout)
	}
	var memMB, maxMB, retries int64 = wasm.DefaultMemoryLimitMB, defaultPluginMaxMB, wasm.DefaultRetries
	if f.integer("plugin_memory_mb", &memMB) && (memMB < 1 || memMB > 4096) {
		f.problem("plugin_memory_mb", "must be between 1 and 4096, got %d", memMB)
	}
	if f.integer("plugin_max_mb", &maxMB) && (maxMB < 1 || maxMB > 1024) {
		f.problem("plugin_max_mb", "must be between 1 and 1024, got %d", maxMB)
	}
	fc.PluginMaxMB = clampInt(maxMB)
	if f.integer("plugin_retries", &retries) && (retries < 0 || retries > 100) {
		f.problem("plugin_retries", "must be between 0 and 100, got %d", retries)
	}
	fc.PluginMemoryMB, fc.PluginRetries = clampInt(memMB), clampInt(retries)
	var queryInstances int64
	if f.integer("plugin_query_instances", &queryInstances) && (queryInstances < 1 || queryInstances > 64) {
		f.problem("plugin_query_instances", "must be between 1 and 64, got %d", queryInstances)
		queryInstances = 0
	}
	fc.PluginQueryInstances = clampInt(queryInstances)
	fc.PluginLimits = extractLimits(f)
	fc.OnPluginError = host.PluginErrorStop
	f.str("on_plugin_error", &fc.OnPluginError)
	if fc.OnPluginError != host.PluginErrorStop && fc.OnPluginError != host.PluginErrorSkip {
		f.problem("on_plugin_error", "must be %q or %q, got %q", host.PluginErrorStop, host.PluginErrorSkip, fc.OnPluginError)
	}
	dlMax := int64(host.DefaultDeadLetterMax)
	if f.integer("deadletter_max", &dlMax) && (dlMax < 1 || dlMax > 1_000_000) {
		f.problem("deadletter_max", "must be between 1 and 1000000, got %d", dlMax)
	}
	fc.DeadLetterMax = clampInt(dlMax)
	fc.DeadLetterMaxAge = host.DefaultDeadLetterMaxAge
	if f.duration("deadletter_max_age", &fc.DeadLetterMaxAge) && fc.DeadLetterMaxAge < time.Minute {
		f.problem("deadletter_max_age", "must be at least 1m, got %v", fc.DeadLetterMaxAge)
	}
	f.str("data_dir", &fc.DataDir)
	if f.duration("export_interval", &fc.ExportInterval) && fc.ExportInterval != 0 && fc.ExportInterval < time.Second {
		f.problem("export_interval", "must be 0 (no periodic export) or at least 1s, got %v", fc.ExportInterval)
	}
	f.str("artifact_key", &fc.ArtifactKey)
	if f.duration("batch_window", &fc.BatchWindow) && (fc.BatchWindow <= 0 || fc.BatchWindow > maxWindow) {
		f.problem("batch_window", "must be > 0 and at most %v, got %v", maxWindow, fc.BatchWindow)
	}
	if f.integer("batch_size", &batch) && (batch < 1 || batch > maxBatchSize) {
		f.problem("batch_size", "must be between 1 and %d, got %d", maxBatchSize, batch)
	}
	if f.integer("buffer", &buffer) && (buffer < 1 || buffer > maxBuffer) {
		f.problem("buffer", "must be between 1 and %d, got %d", maxBuffer, buffer)
	}
	fc.BatchSize, fc.Buffer = clampInt(batch), clampInt(buffer)
	f.str("repair", &repair)
	fc.Repair = protocol.RepairAuto
	if repair != "" {
		if err := fc.Repair.UnmarshalText([]byte(repair)); err != nil {
			f.problem("repair", "%q is not a repair mode: want none, relist, restore or auto", repair)
		}
	}
	f.boolean("sync", &fc.Sync)
	f.str("effects_stream", &fc.EffectsStream)
	f.strings("effects_subjects", &fc.EffectsSubjects)
	f.str("effects_fence", &fc.EffectsFence)
	if fc.EffectsFence != "" && fc.EffectsStream == "" {
		f.problem("effects_fence", "needs effects_stream (the stream that captures it)")
	}
	if len(fc.EffectsSubjects) > 0 && fc.EffectsStream == "" {
		f.problem("effects_subjects", "needs effects_stream (the stream that captures them)")
	}
	fc.EffectsMaxWait = host.DefaultEffectsMaxWait
	if f.duration("effects_max_wait", &fc.EffectsMaxWait) && fc.EffectsMaxWait < 0 {
		f.problem("effects_max_wait", "must be 0s (readiness ignores the outbox) or a positive duration, got %v", fc.EffectsMaxWait)
	}
	if f.integer("disk_reserve_mb", &fc.DiskReserveMB) && (fc.DiskReserveMB < -1 || fc.DiskReserveMB > 1<<20) {
		f.problem("disk_reserve_mb", "must be -1 (none), 0 (the default: 256) or up to %d, got %d", 1<<20, fc.DiskReserveMB)
		fc.DiskReserveMB = 0
	}
	if f.integer("memtable_mb", &fc.MemTableMB) && fc.MemTableMB != 0 && (fc.MemTableMB < 4 || fc.MemTableMB > 1024) {
		f.problem("memtable_mb", "must be 0 (the default: 64) or from 4 to 1024, got %d", fc.MemTableMB)
		fc.MemTableMB = 0
	}

	// create_bucket is a table of settings, or false: never create.
	var cb *table
	switch v, _ := f.get("create_bucket"); v := v.(type) {
	case bool:
		fc.NoCreateBucket = !v
		cb = &table{path: f.key("create_bucket"), m: map[string]any{}, ps: f.ps}
	case nil, map[string]any:
		cb = f.sub("create_bucket")
	default:
		f.problem("create_bucket", "want false (never create the bucket), true, or a table [fold.create_bucket] of settings, got %s", tomlType(v))
		cb = &table{path: f.key("create_bucket"), m: map[string]any{}, ps: f.ps}
	}
	var history, maxBytes, replicas int64
	var storage string
	if cb.integer("history", &history) {
		if history < 1 || history > 64 {
			cb.problem("history", "must be between 1 and 64 (NATS KV limit), got %d", history)
		} else {
			fc.CreateBucket.History = uint8(history)
		}
	}
	if cb.duration("max_age", &fc.CreateBucket.MaxAge) && fc.CreateBucket.MaxAge < 0 {
		cb.problem("max_age", "must not be negative")
	}
	if cb.integer("max_bytes", &maxBytes) && maxBytes < 0 {
		cb.problem("max_bytes", "must be >= 0 (0 = unlimited), got %d", maxBytes)
	}
	fc.CreateBucket.MaxBytes = max(0, maxBytes)
	if cb.integer("replicas", &replicas) && (replicas < 1 || replicas > 5) {
		cb.problem("replicas", "must be between 1 and 5, got %d", replicas)
	}
	fc.CreateBucket.Replicas = int(max(0, min(replicas, 5)))
	cb.str("storage", &storage)
	switch storage {
	case "", "file":
	case "memory":
		fc.CreateBucket.Memory = true
	default:
		cb.problem("storage", "%q: want \"file\" or \"memory\"", storage)
	}
	if cb.duration("limit_marker_ttl", &fc.CreateBucket.LimitMarkerTTL) {
		if d := fc.CreateBucket.LimitMarkerTTL; d < 0 || (d > 0 && d < time.Second) {
			cb.problem("limit_marker_ttl", "must be 0 (off) or at least 1s, got %v", d)
		}
	}
	cb.done()
	f.done()
	return fc
}

func (c *Config) extractArtifacts(a *table) {
	ac := &c.Artifacts
	a.str("store", &ac.Store)
	a.str("dir", &ac.Dir)
	a.str("lease_bucket", &ac.LeaseBucket)
	if a.duration("lease_ttl", &ac.LeaseTTL) && ac.LeaseTTL < time.Second {
		a.problem("lease_ttl", "must be at least 1s, got %v", ac.LeaseTTL)
	}
	a.str("holder", &ac.Holder)
	s := a.sub("s3")
	s.str("endpoint", &ac.S3.Endpoint)
	s.str("region", &ac.S3.Region)
	s.str("bucket", &ac.S3.Bucket)
	s.str("prefix", &ac.S3.Prefix)
	s.boolean("path_style", &ac.S3.PathStyle)
	s.str("access_key", &ac.S3.AccessKey)
	s.str("secret_key", &ac.S3.SecretKey)
	var part, conc int64
	if s.integer("part_size_mb", &part) && (part < 5 || part > 5120) {
		s.problem("part_size_mb", "must be between 5 (S3's minimum part) and 5120, got %d", part)
	}
	if s.integer("concurrency", &conc) && (conc < 1 || conc > 64) {
		s.problem("concurrency", "must be between 1 and 64, got %d", conc)
	}
	ac.S3.PartSizeMB, ac.S3.Concurrency = clampInt(part), clampInt(conc)
	if s.duration("request_timeout", &ac.S3.RequestTimeout) && (ac.S3.RequestTimeout < 0 || ac.S3.RequestTimeout > artifact.MaxRequestTimeout) {
		s.problem("request_timeout", "must be between 0 (the default) and %v, got %v (an upload part that could take longer would look abandoned to another node's prune)",
			artifact.MaxRequestTimeout, ac.S3.RequestTimeout)
	}
	s.done()
	a.done()
}

// extractLimits reads the plugin_max_* keys of a [[fold]] table: each an
// integer in a range, scaled to bytes (or a count).
func extractLimits(f *table) wasm.Limits {
	var l wasm.Limits
	for _, k := range []struct {
		key         string
		dst         *int
		def, lo, hi int64
		unit        int64
	}{
		{wasm.KeyMaxOutput, &l.MaxOutputBytes, wasm.DefaultMaxOutputBytes >> 20, 1, 1024, 1 << 20},
		{wasm.KeyMaxViewMutations, &l.MaxViewMutations, wasm.DefaultMaxViewMutations, 1, 10_000_000, 1},
		{wasm.KeyMaxViewKey, &l.MaxViewKeyBytes, wasm.DefaultMaxViewKeyBytes, 1, 1 << 20, 1},
		{wasm.KeyMaxViewValue, &l.MaxViewValueBytes, wasm.DefaultMaxViewValueBytes >> 10, 1, 1 << 20, 1 << 10},
		{wasm.KeyMaxRead, &l.MaxReadBytes, wasm.DefaultMaxReadBytes >> 20, 1, 1024, 1 << 20},
		{wasm.KeyMaxCallRead, &l.MaxCallReadBytes, wasm.DefaultMaxCallReadBytes >> 20, 1, 2047, 1 << 20},
		{wasm.KeyMaxError, &l.MaxErrorBytes, wasm.DefaultMaxErrorBytes, 1, 1 << 20, 1},
		{wasm.KeyMaxEffects, &l.MaxEffects, wasm.DefaultMaxEffects, 1, 1_000_000, 1},
		{wasm.KeyMaxEffect, &l.MaxEffectBytes, wasm.DefaultMaxEffectBytes >> 10, 1, 64 << 10, 1 << 10},
		{wasm.KeyMaxQueryInput, &l.MaxQueryInputBytes, wasm.DefaultMaxQueryInputBytes >> 10, 1, 64 << 10, 1 << 10},
	} {
		v := k.def
		if f.integer(k.key, &v) && (v < k.lo || v > k.hi) {
			f.problem(k.key, "must be between %d and %d, got %d", k.lo, k.hi, v)
			v = k.def
		}
		*k.dst = clampInt(v * k.unit)
	}
	return l
}

func clampInt(v int64) int { return int(max(0, min(v, 1<<31-1))) }

// applyEnv applies the environment overrides. A credential from the
// environment replaces both credential keys of the file.
func (c *Config) applyEnv(getenv Getenv, ps *problems) {
	if getenv == nil {
		return
	}
	get := func(name string) (string, bool) {
		v, ok := getenv(name)
		return v, ok && v != ""
	}
	if v, ok := get(EnvNATSURL); ok {
		c.NATS.URL = v
		ps.fromEnv["nats.url"] = EnvNATSURL
	}
	creds, hasCreds := get(EnvNATSCreds)
	file, hasFile := get(EnvNATSCredsFile)
	switch {
	case hasCreds && hasFile:
		ps.add("", "%s and %s are both set: set at most one", EnvNATSCreds, EnvNATSCredsFile)
	case hasCreds:
		c.NATS.Creds, c.NATS.CredsFile = creds, ""
		ps.fromEnv["nats.creds"] = EnvNATSCreds
	case hasFile:
		c.NATS.Creds, c.NATS.CredsFile = "", file
		ps.fromEnv["nats.creds_file"] = EnvNATSCredsFile
	}
	// Without keys from the file or here, the AWS SDK's default chain
	// applies (AWS_* variables, shared files, roles).
	s3 := &c.Artifacts.S3
	ak, hasAK := get(EnvS3AccessKey)
	sk, hasSK := get(EnvS3SecretKey)
	if hasAK || hasSK {
		s3.AccessKey, s3.SecretKey = ak, sk
		ps.fromEnv["artifacts.s3.access_key"] = EnvS3AccessKey
	}
	s3.SessionToken, _ = get(EnvS3SessionToken)
}

// validate checks cross-key rules and applies defaults.
func (c *Config) validate(ps *problems) {
	base := filepath.Dir(c.File)
	resolve := func(p string) string {
		if p == "" || filepath.IsAbs(p) {
			return p
		}
		return filepath.Join(base, p)
	}
	if c.DataDir == "" {
		c.DataDir = defaultDataDir
	}
	c.DataDir = resolve(c.DataDir)
	if c.ShutdownGrace == 0 {
		c.ShutdownGrace = DefaultShutdownGrace
	}

	// NATS.
	n := &c.NATS
	n.Embedded = n.URL == "" || n.URL == "embedded"
	if n.Embedded {
		n.URL = ""
		if n.EmbeddedListen == "" {
			n.EmbeddedListen = DefaultEmbeddedListen
		}
		if err := checkLoopback(n.EmbeddedListen); err != nil {
			ps.add("nats.embedded_listen", "%v (the embedded server has no authentication, so it listens on loopback only)", err)
		}
		if n.EmbeddedDir == "" {
			n.EmbeddedDir = filepath.Join(c.DataDir, "nats")
		}
		n.EmbeddedDir = resolve(n.EmbeddedDir)
		for _, kv := range [][2]string{
			{"nats.creds", n.Creds}, {"nats.creds_file", n.CredsFile},
			{"nats.tls_ca_file", n.TLSCAFile}, {"nats.tls_cert_file", n.TLSCertFile}, {"nats.tls_key_file", n.TLSKeyFile},
		} {
			if kv[1] != "" {
				ps.add(kv[0], "is set, but nats.url selects the embedded server, which takes no credentials or TLS")
			}
		}
	} else {
		if err := natskv.CheckURL(n.URL); err != nil {
			ps.add("nats.url", "%v", err)
		}
		if n.Creds != "" && n.CredsFile != "" {
			ps.add("nats.creds_file", "nats.creds and nats.creds_file are both set: set at most one")
		}
		if (n.TLSCertFile == "") != (n.TLSKeyFile == "") {
			ps.add("nats.tls_cert_file", "nats.tls_cert_file and nats.tls_key_file go together: set both or neither")
		}
		n.CredsFile = resolve(n.CredsFile)
		n.TLSCAFile = resolve(n.TLSCAFile)
		n.TLSCertFile = resolve(n.TLSCertFile)
		n.TLSKeyFile = resolve(n.TLSKeyFile)
		for _, f := range []struct{ key, path string }{
			{"nats.creds_file", n.CredsFile}, {"nats.tls_ca_file", n.TLSCAFile},
			{"nats.tls_cert_file", n.TLSCertFile}, {"nats.tls_key_file", n.TLSKeyFile},
		} {
			if f.path != "" {
				if _, err := os.Stat(f.path); err != nil {
					ps.add(f.key, "%v", errors.Unwrap(err))
				}
			}
		}
	}
	for _, d := range []struct {
		key string
		v   *time.Duration
		def time.Duration
	}{
		{"nats.connect_timeout", &n.ConnectTimeout, defaultConnectTimeout},
		{"nats.request_timeout", &n.RequestTimeout, natskv.DefaultRequestTimeout},
		{"nats.head_poll_interval", &n.HeadPollInterval, host.DefaultHeadPollInterval},
		{"nats.disconnect_grace", &n.DisconnectGrace, host.DefaultDisconnectGrace},
		{"log.progress_interval", &c.Log.ProgressInterval, host.DefaultProgressInterval},
	} {
		if *d.v < 0 {
			ps.add(d.key, "must not be negative")
		}
		if *d.v == 0 {
			*d.v = d.def
		}
	}

	// HTTP.
	if c.HTTP.Addr == "" {
		c.HTTP.Addr = defaultHTTPAddr
	}
	if err := checkHostPort(c.HTTP.Addr); err != nil {
		ps.add("http.addr", "%v", err)
	}

	// Log.
	switch c.Log.Level {
	case "":
		c.Log.Level = "info"
	case "debug", "info", "warn", "error":
	default:
		ps.add("log.level", "%q: want debug, info, warn or error", c.Log.Level)
	}
	switch c.Log.Format {
	case "":
		c.Log.Format = "text"
	case "text", "json":
	default:
		ps.add("log.format", "%q: want text or json", c.Log.Format)
	}

	c.validateArtifacts(ps, resolve)

	// Folds.
	if len(c.Folds) == 0 {
		ps.add("fold", "no [[fold]] section: configure at least one fold")
	}
	names := map[string]int{}
	dirs := map[string]int{}
	keys := map[string]int{}
	for i := range c.Folds {
		f := &c.Folds[i]
		key := func(k string) string { return "fold[" + strconv.Itoa(i) + "]." + k }
		nameDup := false
		switch {
		case f.Name == "":
			ps.add(key("name"), "is required")
		case !nameRE.MatchString(f.Name):
			ps.add(key("name"), "%q: use 1 to 64 of A-Z a-z 0-9 _ - (it appears in URLs, metrics and directory names)", f.Name)
		default:
			if j, dup := names[f.Name]; dup {
				ps.add(key("name"), "%q is also the name of fold[%d]", f.Name, j)
				nameDup = true
			}
			names[f.Name] = i
		}
		if f.Bucket == "" && nameRE.MatchString(f.Name) {
			f.Bucket = f.Name // a valid name is a valid bucket name
		} else if f.Bucket != "" && !bucketRE.MatchString(f.Bucket) {
			ps.add(key("bucket"), "%q is not a valid KV bucket name (A-Z a-z 0-9 _ -)", f.Bucket)
		}
		if err := (natskv.Scope{Prefixes: f.Scope}).Validate(); err != nil {
			ps.add(key("scope"), "%v", err)
		}
		if pluginobj.IsRef(f.Plugin) {
			if _, err := pluginobj.ParseRef(f.Plugin); err != nil {
				ps.add(key("plugin"), "%v", err)
			}
		} else if f.Plugin != "" {
			f.Plugin = resolve(f.Plugin)
			if pf, _, err := files.OpenRegular(f.Plugin, int64(f.PluginMaxMB)<<20); err != nil {
				ps.add(key("plugin"), "%v", err)
			} else {
				pf.Close()
			}
		}
		defaultDir := f.DataDir == ""
		if defaultDir && f.Name != "" {
			f.DataDir = filepath.Join(c.DataDir, "folds", f.Name)
		}
		f.DataDir = filepath.Clean(resolve(f.DataDir))
		if j, dup := dirs[f.DataDir]; dup && f.DataDir != "." && !(defaultDir && nameDup) {
			ps.add(key("data_dir"), "%s is also the data dir of fold[%d]", f.DataDir, j)
		}
		dirs[f.DataDir] = i
		if f.ArtifactKey == "" {
			f.ArtifactKey = f.Name
		} else if !nameRE.MatchString(f.ArtifactKey) {
			ps.add(key("artifact_key"), "%q: use 1 to 64 of A-Z a-z 0-9 _ - (it names objects and a NATS KV key)", f.ArtifactKey)
		}
		if j, dup := keys[f.ArtifactKey]; dup && f.ArtifactKey != "" && !nameDup {
			ps.add(key("artifact_key"), "%q is also the artifact key of fold[%d]: their artifacts would replace each other", f.ArtifactKey, j)
		}
		keys[f.ArtifactKey] = i
		if f.BatchWindow == 0 {
			f.BatchWindow = fold.DefaultWindow
		}
		if f.BatchSize == 0 {
			f.BatchSize = fold.DefaultMaxBatch
		}
		if f.Buffer == 0 {
			f.Buffer = host.DefaultBuffer
		}
		f.CreateBucket.Name = f.Bucket
		if f.CreateBucket.History == 0 {
			f.CreateBucket.History = 1
		}
		if f.CreateBucket.Replicas == 0 {
			f.CreateBucket.Replicas = 1
		}
	}
	c.checkDirs(ps)
	// Folds sharing a bucket must agree on how to create it.
	first := map[string]int{}
	for i, f := range c.Folds {
		if j, ok := first[f.Bucket]; ok {
			if c.Folds[j].CreateBucket != f.CreateBucket || c.Folds[j].NoCreateBucket != f.NoCreateBucket {
				ps.add("fold["+strconv.Itoa(i)+"].create_bucket", "differs from fold[%d], which uses the same bucket %q", j, f.Bucket)
			}
			continue
		}
		first[f.Bucket] = i
	}
}

// checkDirs refuses directories that are one, or lie inside one another,
// once symlinks are resolved: two stores in one directory wipe each other,
// and foreign files inside a store's directory are not the store's. Fold
// data dirs are checked against each other, the local artifact store, the
// embedded NATS server's directory and the compiled-plugin cache. (A
// literal duplicate data_dir is reported where it is found.)
func (c *Config) checkDirs(ps *problems) {
	type owned struct{ key, path, real string }
	var ds []owned
	add := func(key, path string) {
		if path != "" {
			ds = append(ds, owned{key, path, realPath(path)})
		}
	}
	for i, f := range c.Folds {
		add("fold["+strconv.Itoa(i)+"].data_dir", f.DataDir)
	}
	folds := len(ds)
	if c.Artifacts.Store == "local" {
		add("artifacts.dir", c.Artifacts.Dir)
	}
	if c.NATS.Embedded {
		add("nats.embedded_dir", c.NATS.EmbeddedDir)
	}
	add("data_dir (its wasm-cache)", c.wasmCacheDir())
	for i := 0; i < folds; i++ {
		for j := i + 1; j < len(ds); j++ {
			a, b := ds[i], ds[j]
			if a.path == b.path && j < folds {
				continue // the same literal path: reported as a duplicate
			}
			if fold.Overlap(a.real, b.real) {
				how := "is the same directory as"
				if a.real != b.real {
					how = "overlaps"
				}
				ps.add(a.key, "%s %s %s (%s): a fold's store must have its directory to itself", a.path, how, b.key, b.path)
			}
		}
	}
}

// realPath resolves the symlinks of path's longest existing ancestor (the
// rest does not exist yet, so it cannot be a link).
func realPath(path string) string {
	path = filepath.Clean(path)
	rest := ""
	for {
		if r, err := filepath.EvalSymlinks(path); err == nil {
			return filepath.Join(r, rest)
		}
		parent := filepath.Dir(path)
		if parent == path {
			return filepath.Join(path, rest)
		}
		rest = filepath.Join(filepath.Base(path), rest)
		path = parent
	}
}

// validateArtifacts checks [artifacts] and applies its defaults.
func (c *Config) validateArtifacts(ps *problems, resolve func(string) string) {
	a := &c.Artifacts
	switch a.Store {
	case "", "local":
		a.Store = "local"
		if a.Dir == "" {
			a.Dir = filepath.Join(c.DataDir, "artifacts")
		}
		a.Dir = resolve(a.Dir)
	case "s3":
		if a.S3.Bucket == "" {
			ps.add("artifacts.s3.bucket", "is required with artifacts.store = \"s3\"")
		}
		if a.Dir != "" {
			ps.add("artifacts.dir", "is set, but artifacts.store is \"s3\": dir is the local store's")
		}
		if (a.S3.AccessKey == "") != (a.S3.SecretKey == "") {
			ps.add("artifacts.s3.secret_key", "access_key and secret_key go together: set both or neither (or %s and %s)", EnvS3AccessKey, EnvS3SecretKey)
		}
	default:
		ps.add("artifacts.store", "%q: want \"local\" or \"s3\"", a.Store)
	}
	if a.S3.Region == "" {
		a.S3.Region = defaultS3Region
	}
	if a.S3.PartSizeMB == 0 {
		a.S3.PartSizeMB = s3store.DefaultPartSize >> 20
	}
	if a.S3.Concurrency == 0 {
		a.S3.Concurrency = s3store.DefaultPartConcurrency
	}
	if a.S3.RequestTimeout == 0 {
		a.S3.RequestTimeout = s3store.DefaultOpTimeout
	}
	if a.LeaseBucket == "" {
		a.LeaseBucket = host.DefaultLeaseBucket
	} else if !bucketRE.MatchString(a.LeaseBucket) {
		ps.add("artifacts.lease_bucket", "%q is not a valid KV bucket name (A-Z a-z 0-9 _ -)", a.LeaseBucket)
	}
	if a.LeaseTTL == 0 {
		a.LeaseTTL = host.DefaultLeaseTTL
	}
	if a.Holder == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "foldhost"
		}
		a.Holder = h
	}
}

func checkHostPort(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("%q: want host:port: %v", addr, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p < 0 || p > 65535 {
		return fmt.Errorf("%q: port must be a number between 0 and 65535", addr)
	}
	return nil
}

func checkLoopback(addr string) error {
	if err := checkHostPort(addr); err != nil {
		return err
	}
	host, _, _ := net.SplitHostPort(addr)
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("%q is not a loopback address", addr)
	}
	return nil
}
