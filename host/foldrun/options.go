package foldrun

import (
	"fmt"
	"time"

	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/effects"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/host/wasm"
	"github.com/foldhost/foldhost/protocol"
)

// OnPluginError policies.
const (
	PluginErrorStop = "stop"
	PluginErrorSkip = "skip"
)

// Dead letter bounds' defaults.
const (
	DefaultDeadLetterMax    = 10000
	DefaultDeadLetterMaxAge = 7 * 24 * time.Hour
	// DefaultEffectsMaxWait is Options.EffectsMaxWait's default.
	DefaultEffectsMaxWait = 5 * time.Minute
)

// Options configure one fold. Every zero field takes its default
// (Defaults, named below).
type Options struct {
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
	// published to (docs/effects.md); it must exist at the start.
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
	// CreateEffectsStream, when set, creates EffectsStream at the start
	// when it does not exist, fit for the effects: capturing
	// EffectsSubjects (required then) and the fence (in a fleet, the
	// claim subject too), atomic batches allowed, limits retention. The
	// creation is logged at WARN, as a created bucket's is. Unset, a
	// missing stream fails the start, with the command that makes it.
	CreateEffectsStream *EffectsStreamConfig
	// Standbys is how many other nodes of a fleet keep a warm copy of
	// the fold to take it over (Options.Fleet of the host); default 1,
	// negative: none. Without a fleet it is not used.
	Standbys int
	// Partitions is the fold's count of partitions, fixed for its life;
	// default 1 (the whole fold is one unit). A host runs a fold of
	// Partitions > 1 as that many units, each a Fold of one Partition
	// (0-based) named FoldName.Partition (host.Options' expansion sets
	// Name, FoldName, Partition and the per-unit DataDir, ArtifactKey and
	// EffectsFence). RATIONALE.md, "Partitions".
	Partitions int
	Partition  int
	// FoldName is the configured fold's name when this is one partition
	// of it; default Name.
	FoldName string
	// Refold marks the fresh fold of a reset (host.ResetStopped): it
	// folds history again, so the plugin's effects are dropped. Never set
	// by a config.
	Refold bool
}

// DefaultStandbys is Options.Standbys' default.
const DefaultStandbys = 1

// DefaultBuffer is Options.Buffer's default.
const DefaultBuffer = 256

// Defaults applies o's defaults and reports what is wrong with it alone
// (every problem, none when it is right); what depends on the host's other
// options (names taken, data dirs nested, an artifact store for repair =
// restore) is the host's to check.
func (o *Options) Defaults() []error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if o.FoldName == "" {
		o.FoldName = o.Name
	}
	if o.Bucket == "" {
		o.Bucket = o.FoldName
	}
	if o.ArtifactKey == "" {
		o.ArtifactKey = o.Name
	}
	if o.BatchWindow <= 0 {
		o.BatchWindow = fold.DefaultWindow
	}
	if o.BatchSize <= 0 {
		o.BatchSize = fold.DefaultMaxBatch
	}
	if o.Buffer <= 0 {
		o.Buffer = DefaultBuffer
	}
	if o.Standbys == 0 {
		o.Standbys = DefaultStandbys
	} else if o.Standbys < 0 {
		o.Standbys = 0
	}
	if o.Partitions == 0 {
		o.Partitions = 1
	}
	if err := o.PartitionOf().Validate(); err != nil {
		bad("%v", err)
	}
	if o.EffectsMaxWait == 0 {
		o.EffectsMaxWait = DefaultEffectsMaxWait
	}
	eo := o.effects()
	if err := eo.Validate(o.Name); err != nil {
		bad("%v", err)
	}
	o.EffectsFence = eo.Fence
	if c := o.CreateEffectsStream; c != nil {
		if o.EffectsStream == "" || len(o.EffectsSubjects) == 0 {
			bad("CreateEffectsStream needs EffectsStream and EffectsSubjects (the subjects the stream captures, besides the fence)")
		}
		if c.Replicas == 0 {
			c.Replicas = 1
		}
	}
	switch o.OnPluginError {
	case "":
		o.OnPluginError = PluginErrorStop
	case PluginErrorStop, PluginErrorSkip:
	default:
		bad("OnPluginError %q: want %q or %q", o.OnPluginError, PluginErrorStop, PluginErrorSkip)
	}
	if o.DeadLetterMax <= 0 {
		o.DeadLetterMax = DefaultDeadLetterMax
	}
	if o.DeadLetterMaxAge <= 0 {
		o.DeadLetterMaxAge = DefaultDeadLetterMaxAge
	}
	if err := o.scope().Validate(); err != nil {
		bad("%v", err)
	}
	if pluginobj.IsRef(o.Plugin) {
		if _, err := pluginobj.ParseRef(o.Plugin); err != nil {
			bad("%v", err)
		}
	}
	o.CreateBucket.Name = o.Bucket
	if o.CreateBucket.History == 0 {
		o.CreateBucket.History = 1
	}
	if o.CreateBucket.Replicas == 0 {
		o.CreateBucket.Replicas = 1
	}
	return errs
}

// effects are the fold's effects settings.
func (o Options) effects() effects.Options {
	return effects.Options{Stream: o.EffectsStream, Subjects: o.EffectsSubjects, Fence: o.EffectsFence, MaxWait: o.EffectsMaxWait}
}

// Exportee names the fold to an export round.
func (o Options) Exportee() round.Fold {
	return round.Fold{Name: o.Name, ArtifactKey: o.ArtifactKey, DataDir: o.DataDir}
}

// Origin is the origin the fold's config names, on the stream created at
// created (zero: not known here, e.g. offline).
func (o Options) Origin(created time.Time) fold.Origin {
	or := fold.NewOrigin(o.Bucket, o.Scope, created)
	or.Partition = o.PartitionOf().String()
	return or
}

// PartitionOf is the partition of the bucket's keys the fold folds.
func (o Options) PartitionOf() protocol.Partition {
	return protocol.Partition{Index: o.Partition, Count: o.Partitions}
}

// Unit is the fold's unit in a fleet.
func (o Options) Unit() protocol.Unit {
	name := o.FoldName
	if name == "" {
		name = o.Name
	}
	return protocol.Unit{Fold: name, Partition: o.Partition}
}

// scope is what the fold's watch covers.
func (o Options) scope() natskv.Scope {
	return natskv.Scope{Prefixes: o.Scope, Partition: o.PartitionOf()}
}
