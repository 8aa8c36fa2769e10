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
	"io/fs"
	"path/filepath"
	"regexp"
	"time"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/foldhost/foldhost/internal/textfmt"
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
	Fleet         FleetConfig
	Folds         []FoldConfig
}

// FleetConfig is [fleet]: the nodes with the same name place the folds
// among them (host.FleetOptions). No name: no fleet.
type FleetConfig struct {
	Name string
	// Advertise is the HTTP address the other nodes reach this one at;
	// default http.addr.
	Advertise string
	// Heartbeat and NodeTTL: how often this node beats, and how long a
	// silent node keeps its folds; defaults fleet's (1s, 3s).
	Heartbeat, NodeTTL time.Duration
	// Replicas of the fleet's bucket when created; default 1.
	Replicas int
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
	// Standbys: how many other nodes of a fleet keep a warm copy (default
	// 1); Partitions: the fold's partitions, fixed for its life (each
	// runs as a unit of its own: host.UnitName).
	Standbys, Partitions int
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
	// CreateEffectsStream (create_effects_stream = true, or a
	// [fold.create_effects_stream] table) creates EffectsStream at the
	// start when it does not exist, with EffectsStreamSettings
	// (host.FoldOptions.CreateEffectsStream).
	CreateEffectsStream   bool
	EffectsStreamSettings host.EffectsStreamConfig
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
	names := make([]string, len(c.Folds))
	for i, f := range c.Folds {
		if f.Name == name {
			return f, nil
		}
		names[i] = f.Name
	}
	// A partition of a fold of several: FOLD.P, with its own data dir.
	if fold, p, ok := host.SplitUnitName(name); ok {
		for _, f := range c.Folds {
			if f.Name == fold && f.Partitions > 1 && p < f.Partitions {
				f.Name, f.DataDir = name, host.UnitDataDir(f.DataDir, p)
				return f, nil
			}
		}
	}
	return FoldConfig{}, fmt.Errorf("no fold named %q in the config: %s", name, textfmt.NoSuch("its folds", name, names))
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
	if errors.Is(err, fs.ErrNotExist) {
		return nil, &Error{File: path, Problems: []Problem{{Msg: err.Error() + NoConfigHint}}}
	}
	if err != nil {
		return nil, &Error{File: path, Problems: []Problem{{Msg: err.Error()}}}
	}
	return Parse(data, path, getenv)
}

// NoConfigHint is what Load adds to a config file that does not exist:
// how to get one.
const NoConfigHint = ": start from the example, which documents every key (cp config.toml.example config.toml, " +
	"in a foldhost checkout; docs/configuration.md), or name another file with --config FILE"

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
