package host

import (
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/effects"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// Options configure a Host. Every zero field takes its default (named
// below); paths must be absolute.
type Options struct {
	// Folds run by the host, in the order the status lists them. At least
	// one.
	Folds []FoldOptions
	NATS  NATSOptions
	// Artifacts is where folds export and bootstrap from; a zero
	// ArtifactOptions (no Store) disables both.
	Artifacts ArtifactOptions
	// PluginCacheDir holds compiled plugins across restarts; "" keeps
	// them in memory only.
	PluginCacheDir string
	// HeadPollInterval is how often each fold reads its stream's last
	// revision (the lag); default DefaultHeadPollInterval.
	HeadPollInterval time.Duration
	// ProgressInterval is how often a hydrating fold logs its progress;
	// default DefaultProgressInterval.
	ProgressInterval time.Duration
	// Admin configures the admin service over NATS (off by default).
	Admin AdminOptions
	// AdminToken, if set, is the bearer token the HTTP API's admin
	// actions (POSTs) must carry; unset, they are served on a
	// loopback-only listener, one whose http.Server.Addr is a loopback
	// address (httpapi.Options.AdminToken). The CLI reads it from
	// the environment (AdminTokenEnv), never from the config file.
	AdminToken string
	// Logger receives the host's log; default slog.Default().
	Logger *slog.Logger
}

// AdminTokenEnv is the environment variable the CLI takes the admin token
// from.
// OnPluginError policies.
const (
	PluginErrorStop = "stop"
	PluginErrorSkip = "skip"
)

// Dead letter bounds' defaults.
const (
	DefaultDeadLetterMax    = 10000
	DefaultDeadLetterMaxAge = 7 * 24 * time.Hour
	// DefaultEffectsMaxWait is FoldOptions.EffectsMaxWait's default.
	DefaultEffectsMaxWait = 5 * time.Minute
)

const AdminTokenEnv = "FOLDHOST_ADMIN_TOKEN"

// FoldOptions configure one fold.
type FoldOptions struct {
	// Name is unique among the host's folds: it appears in URLs, metrics
	// and log lines.
	Name string
	// Bucket is the KV bucket folded; default Name.
	Bucket string
	// Scope: whole-token key prefixes ending in "."; empty folds the whole
	// bucket.
	Scope []string
	// Plugin is the path of a WASM plugin module, or a module in a NATS
	// object store: "nats-object://BUCKET/NAME[?sha256=HEX]" (the pin: the
	// only content accepted); "" folds raw entries
	// only (no views).
	Plugin string
	// PluginCallTimeout bounds every call into the plugin; default
	// wasm.DefaultCallTimeout, wasm.NoCallTimeout for none.
	PluginCallTimeout time.Duration
	// PluginMemoryMB caps the plugin's memory; default
	// wasm.DefaultMemoryLimitMB.
	PluginMemoryMB int
	// PluginMaxBytes caps the module file; default
	// wasm.DefaultMaxModuleBytes.
	PluginMaxBytes int64
	// PluginRetries: how often a failed batch is retried on a fresh
	// instance; default wasm.DefaultRetries, wasm.NoRetries for none.
	PluginRetries int
	// PluginLimits bound what one call into the plugin can make the host
	// hold (output, view keys and values, reads, its error message); zero
	// fields take wasm's defaults. Crossing one is a plugin failure like a
	// trap, retried, then handled by OnPluginError.
	PluginLimits wasm.Limits
	// PluginQueryInstances is how many of the plugin's queries run at
	// once, each on an instance of its own (never the one the fold
	// applies on); more wait for one. Default wasm.DefaultQueryInstances.
	PluginQueryInstances int
	// OnPluginError is what a batch the plugin fails (after its retries)
	// does to the fold: PluginErrorStop (the default) stops it, failed,
	// nothing of the batch committed; PluginErrorSkip isolates the
	// update(s) the plugin fails on alone, commits the rest, and records
	// each skipped one as a dead letter (its raw entry committed, its view
	// effect not; the cursor covers it).
	OnPluginError string
	// DeadLetterMax and DeadLetterMaxAge bound the dead letters kept
	// (oldest dropped first); defaults DefaultDeadLetterMax and
	// DefaultDeadLetterMaxAge.
	DeadLetterMax    int
	DeadLetterMaxAge time.Duration
	// DataDir is the fold's store (required). Nothing else may be in it.
	DataDir string
	// BatchWindow, BatchSize: a batch closes BatchWindow after its first
	// update or at BatchSize updates; defaults fold.DefaultWindow,
	// fold.DefaultMaxBatch. Buffer is the watch's channel; default
	// DefaultBuffer.
	BatchWindow time.Duration
	BatchSize   int
	Buffer      int
	// ExportInterval: run an export round this often once the fold caught
	// up; 0 only on demand.
	ExportInterval time.Duration
	// ArtifactKey names the fold's artifacts and lease; default Name.
	ArtifactKey string
	// Repair is the cursor-expiry repair mode. The zero value is
	// protocol.RepairNone (re-list, never delete); the config file's
	// default is auto. RepairRestore needs Artifacts.Store; auto without
	// one stops a fold whose planned repair is a restore
	// (fold.ErrRepairRefused).
	Repair protocol.RepairMode
	// Sync fsyncs every commit.
	Sync bool
	// DiskReserve is the free space, in bytes, every store write leaves on
	// the fold's filesystem (fold.Options.DiskReserve): a write that would
	// leave less fails the fold with a full-disk error, nothing written.
	// 0 takes the store's default (256 MiB, what pebble may still need
	// to flush its memtables); negative: none.
	DiskReserve int64
	// MemTableSize is the size in bytes of one memtable of the fold's
	// store (fold.Options.MemTableSize; 0: its default, 64 MiB). Up to
	// four may be held while flushing: most of a busy fold's memory, and
	// the default DiskReserve is four of them.
	MemTableSize uint64
	// CreateBucket applies when the bucket does not exist yet; its Name is
	// Bucket's. The creation is logged at WARN with these settings (a
	// misspelled bucket name is a new, empty bucket).
	CreateBucket natskv.BucketConfig
	// NoCreateBucket refuses a bucket that does not exist (the start
	// fails, naming it) instead of creating it.
	NoCreateBucket bool
	// Adopt accepts a store whose recorded origin (bucket, scope, stream)
	// differs from this fold's, and records this fold's in its place: a
	// deliberate, one-time step (a stream restored under a new identity, a
	// renamed bucket). Without it such a store is refused ([OriginError]).
	Adopt bool
	// EffectsStream is the JetStream stream the plugin's effects are
	// published to (README, "Plugin effects"); it must exist at the start.
	// "" drops them (one WARN when the first is dropped).
	EffectsStream string
	// EffectsSubjects are the subject filters effects may go to, each
	// captured by EffectsStream (checked at the start); an effect outside
	// them fails its batch as a plugin error. Default: the stream's
	// subjects.
	EffectsSubjects []string
	// EffectsFence is the subject of the fold's fence in EffectsStream:
	// each batch of effects is published atomically with a fence message
	// that records the last effect it holds, and only if the fence is
	// where the publisher last saw it (RATIONALE.md, "Plugin effects").
	// The stream must capture it. Default: foldhost.fence.<fold name>.
	EffectsFence string
	// EffectsMaxWait: once the outbox's first effect has waited longer
	// than this to be published, the fold is not ready (its status's
	// reason says why). 0: DefaultEffectsMaxWait; negative: never.
	EffectsMaxWait time.Duration
	// refold marks the fresh fold of a reset (ResetStopped): it folds
	// history again, so the plugin's effects are dropped.
	refold bool
}

// NATSOptions say how to reach NATS.
type NATSOptions struct {
	// Conn dials an external server. Ignored when Embedded is set.
	Conn natskv.ConnOptions
	// Embedded, when set, runs an in-process server with JetStream
	// instead, and connects to it.
	Embedded *EmbeddedNATS
	// RequestTimeout bounds each JetStream request; default
	// natskv.DefaultRequestTimeout.
	RequestTimeout time.Duration
	// DisconnectGrace is how long the connection may be down before every
	// fold reports not ready (a server restart or a short network blip
	// stays ready); default DefaultDisconnectGrace.
	DisconnectGrace time.Duration
}

// EmbeddedNATS configures the in-process server.
type EmbeddedNATS struct {
	// Host and Port to listen on (loopback: the server has no
	// authentication); Port 0 picks a free one.
	Host string
	Port int
	// Dir holds its JetStream storage (required).
	Dir string
	// Logs sends the server's own log to stderr.
	Logs bool
}

// ArtifactOptions configure export and bootstrap.
type ArtifactOptions struct {
	// Store holds the artifacts (dirstore, s3store, or any artifact.Store);
	// nil disables export and bootstrap.
	Store artifact.Store
	// Where describes Store in logs and status ("s3://bucket/prefix").
	Where string
	// LeaseBucket is the KV bucket of the fleet's export leases; default
	// DefaultLeaseBucket. LeaseTTL is a round's lease; default
	// DefaultLeaseTTL. Holder is this node's name in them (required with a
	// Store).
	LeaseBucket string
	LeaseTTL    time.Duration
	Holder      string
}

// recordToken is a name that can be a token of a plugin record's KV key.
var recordToken = regexp.MustCompile(`^[-_=A-Za-z0-9]+$`)

// Defaults of Options.
const (
	DefaultHeadPollInterval = 5 * time.Second
	DefaultDisconnectGrace  = 10 * time.Second
	DefaultProgressInterval = 5 * time.Second
	DefaultBuffer           = 256
	DefaultLeaseBucket      = "foldhost_export_leases"
	DefaultLeaseTTL         = 5 * time.Minute
)

// withDefaults returns o with its defaults applied, or what is wrong with
// it (every problem at once). A host's config layer reports problems with
// their place in a file; this is the last line for embedders.
func (o Options) withDefaults() (Options, error) {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(o.Folds) == 0 {
		bad("no folds")
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.HeadPollInterval <= 0 {
		o.HeadPollInterval = DefaultHeadPollInterval
	}
	if o.ProgressInterval <= 0 {
		o.ProgressInterval = DefaultProgressInterval
	}
	if o.NATS.DisconnectGrace <= 0 {
		o.NATS.DisconnectGrace = DefaultDisconnectGrace
	}
	if o.NATS.RequestTimeout <= 0 {
		o.NATS.RequestTimeout = natskv.DefaultRequestTimeout
	}
	if e := o.NATS.Embedded; e != nil && !filepath.IsAbs(e.Dir) {
		bad("embedded NATS: Dir %q is not an absolute path", e.Dir)
	}
	a := &o.Artifacts
	if a.LeaseBucket == "" {
		a.LeaseBucket = DefaultLeaseBucket
	}
	if a.LeaseTTL <= 0 {
		a.LeaseTTL = DefaultLeaseTTL
	}
	if a.Store != nil && a.Holder == "" {
		bad("artifacts: Holder is required with a Store")
	}
	if o.Admin.Subject == "" {
		o.Admin.Subject = DefaultAdminSubject
	}
	if o.Admin.Node == "" {
		o.Admin.Node = o.Artifacts.Holder
	}
	if o.Admin.Node == "" {
		o.Admin.Node = "node"
	}
	for _, tok := range strings.Split(o.Admin.Subject, ".") {
		if tok == "" || strings.ContainsAny(tok, " \t*>") {
			bad("admin: Subject %q is not a NATS subject of plain tokens", o.Admin.Subject)
			break
		}
	}
	if o.Admin.Node == "" || strings.ContainsAny(o.Admin.Node, " \t*>.") {
		bad("admin: Node %q must be one NATS subject token (no dots, spaces, * or >)", o.Admin.Node)
	}
	names := map[string]bool{}
	o.Folds = append([]FoldOptions(nil), o.Folds...)
	for i := range o.Folds {
		f := &o.Folds[i]
		switch {
		case f.Name == "":
			bad("fold %d: Name is required", i)
		case names[f.Name]:
			bad("fold %q: the name is taken", f.Name)
		}
		names[f.Name] = true
		if f.Bucket == "" {
			f.Bucket = f.Name
		}
		if f.ArtifactKey == "" {
			f.ArtifactKey = f.Name
		}
		if !filepath.IsAbs(f.DataDir) {
			bad("fold %q: DataDir %q is not an absolute path", f.Name, f.DataDir)
		}
		if f.BatchWindow <= 0 {
			f.BatchWindow = fold.DefaultWindow
		}
		if f.BatchSize <= 0 {
			f.BatchSize = fold.DefaultMaxBatch
		}
		if f.Buffer <= 0 {
			f.Buffer = DefaultBuffer
		}
		if f.EffectsMaxWait == 0 {
			f.EffectsMaxWait = DefaultEffectsMaxWait
		}
		eo := f.effects()
		if err := eo.Validate(f.Name); err != nil {
			bad("fold %q: %v", f.Name, err)
		}
		f.EffectsFence = eo.Fence
		switch f.OnPluginError {
		case "":
			f.OnPluginError = PluginErrorStop
		case PluginErrorStop, PluginErrorSkip:
		default:
			bad("fold %q: OnPluginError %q: want %q or %q", f.Name, f.OnPluginError, PluginErrorStop, PluginErrorSkip)
		}
		if f.DeadLetterMax <= 0 {
			f.DeadLetterMax = DefaultDeadLetterMax
		}
		if f.DeadLetterMaxAge <= 0 {
			f.DeadLetterMaxAge = DefaultDeadLetterMaxAge
		}
		if err := (natskv.Scope{Prefixes: f.Scope}).Validate(); err != nil {
			bad("fold %q: %v", f.Name, err)
		}
		if pluginobj.IsRef(f.Plugin) {
			if _, err := pluginobj.ParseRef(f.Plugin); err != nil {
				bad("fold %q: %v", f.Name, err)
			}
			// Its record's key is FOLD.NODE: both must be KV key tokens.
			if !recordToken.MatchString(f.Name) {
				bad("fold %q: a fold whose plugin comes from a NATS object store needs a name of A-Z a-z 0-9 - _ = only (its record's key)", f.Name)
			}
			if !recordToken.MatchString(o.Admin.Node) {
				bad("admin: Node %q: a host with a fold whose plugin comes from a NATS object store needs a node name of A-Z a-z 0-9 - _ = only (its records' keys)", o.Admin.Node)
			}
		}
		if f.Repair == protocol.RepairRestore && o.Artifacts.Store == nil {
			bad("fold %q: repair %q needs an artifact store to restore from (Artifacts.Store)", f.Name, f.Repair)
		}
		f.CreateBucket.Name = f.Bucket
		if f.CreateBucket.History == 0 {
			f.CreateBucket.History = 1
		}
		if f.CreateBucket.Replicas == 0 {
			f.CreateBucket.Replicas = 1
		}
	}
	for i := range o.Folds {
		for j := i + 1; j < len(o.Folds); j++ {
			if a, b := o.Folds[i].DataDir, o.Folds[j].DataDir; fold.Overlap(filepath.Clean(a), filepath.Clean(b)) {
				bad("folds %q and %q: data dirs %s and %s are one directory or nested", o.Folds[i].Name, o.Folds[j].Name, a, b)
			}
		}
	}
	return o, errors.Join(errs...)
}

// fold returns the options of the fold named name.
func (o Options) fold(name string) (FoldOptions, error) {
	for _, f := range o.Folds {
		if f.Name == name {
			return f, nil
		}
	}
	return FoldOptions{}, fmt.Errorf("no fold named %q", name)
}

// effects are the fold's effects settings.
func (o FoldOptions) effects() effects.Options {
	return effects.Options{Stream: o.EffectsStream, Subjects: o.EffectsSubjects, Fence: o.EffectsFence, MaxWait: o.EffectsMaxWait}
}
