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
	"github.com/foldhost/foldhost/host/fleet"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/foldrun"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/host/pluginobj"
	"github.com/foldhost/foldhost/internal/textfmt"
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
	// Admin.Node is this node's name: in the admin subjects, the plugin
	// records, and a fleet.
	Admin AdminOptions
	// Fleet places the folds over the nodes that share its Name; a zero
	// FleetOptions: no fleet, this host runs every fold.
	Fleet FleetOptions
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
const AdminTokenEnv = "FOLDHOST_ADMIN_TOKEN"

// FoldOptions configure one fold (package foldrun runs it).
type FoldOptions = foldrun.Options

// EffectsStreamConfig is how a fold creates its effects stream when it
// does not exist (FoldOptions.CreateEffectsStream).
type EffectsStreamConfig = foldrun.EffectsStreamConfig

// OriginError: a fold's store records that it folds another source than
// the fold's config and the live bucket say (foldrun.OriginError).
type OriginError = foldrun.OriginError

// ErrOriginMismatch matches every *OriginError, and a bootstrap's refusal
// of an artifact of another bucket or scope.
var ErrOriginMismatch = foldrun.ErrOriginMismatch

// A fold's settings' values and defaults, under the names the host's API
// has always given them (package foldrun's).
const (
	PluginErrorStop         = foldrun.PluginErrorStop
	PluginErrorSkip         = foldrun.PluginErrorSkip
	DefaultDeadLetterMax    = foldrun.DefaultDeadLetterMax
	DefaultDeadLetterMaxAge = foldrun.DefaultDeadLetterMaxAge
	DefaultEffectsMaxWait   = foldrun.DefaultEffectsMaxWait
	DefaultBuffer           = foldrun.DefaultBuffer
)

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

// FleetOptions make the host a node of a fleet (RATIONALE.md, "The
// fleet"): it runs only the folds placed on it, as their owner or a
// standby, and hands its own over when it leaves.
type FleetOptions struct {
	// Name is the fleet's: nodes with the same name cooperate, through the
	// NATS KV bucket foldhost_fleet_<Name>. "": no fleet.
	Name string
	// Advertise is the HTTP address the other nodes reach this one at.
	Advertise string
	// Heartbeat and NodeTTL: how often this node rewrites its record, and
	// how long a node's record may stay unchanged before the others take
	// its folds over; defaults fleet.DefaultHeartbeat, fleet.DefaultNodeTTL.
	Heartbeat, NodeTTL time.Duration
	// Replicas of the fleet's bucket when this node creates it (default
	// 1; 3 on a three-server NATS cluster).
	Replicas int
	// LeaveTimeout bounds the hand-over of this node's folds when it stops
	// (Run's context ended); default twice NodeTTL. A fold not handed over
	// by then is taken over after NodeTTL, as a killed node's.
	LeaveTimeout time.Duration
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
	if fl := &o.Fleet; fl.Name != "" {
		if !recordToken.MatchString(fl.Name) {
			bad("fleet: Name %q: A-Z a-z 0-9 - _ = only (it names the fleet's KV bucket)", fl.Name)
		}
		if !recordToken.MatchString(o.Admin.Node) {
			bad("fleet: the node's name %q (Admin.Node): A-Z a-z 0-9 - _ = only (a key of the fleet's bucket)", o.Admin.Node)
		}
		if fl.Heartbeat <= 0 {
			fl.Heartbeat = fleet.DefaultHeartbeat
		}
		if fl.NodeTTL <= 0 {
			fl.NodeTTL = fleet.DefaultNodeTTL
		}
		if fl.NodeTTL <= 2*fl.Heartbeat {
			bad("fleet: NodeTTL %v must be more than twice Heartbeat %v", fl.NodeTTL, fl.Heartbeat)
		}
		if fl.LeaveTimeout <= 0 {
			fl.LeaveTimeout = 2 * fl.NodeTTL
		}
	}
	names := map[string]bool{}
	o.Folds = expandPartitions(o.Folds)
	for i := range o.Folds {
		f := &o.Folds[i]
		switch {
		case f.Name == "":
			bad("fold %d: Name is required", i)
		case names[f.Name]:
			bad("fold %q: the name is taken", f.Name)
		}
		names[f.Name] = true
		if !filepath.IsAbs(f.DataDir) {
			bad("fold %q: DataDir %q is not an absolute path", f.Name, f.DataDir)
		}
		for _, err := range f.Defaults() {
			bad("fold %q: %v", f.Name, err)
		}
		if pluginobj.IsRef(f.Plugin) {
			// Its record's key is FOLD.NODE: both must be KV key tokens.
			if !recordToken.MatchString(f.Unit().Fold) {
				bad("fold %q: a fold whose plugin comes from a NATS object store needs a name of A-Z a-z 0-9 - _ = only (its record's key)", f.Name)
			}
			if !recordToken.MatchString(o.Admin.Node) {
				bad("admin: Node %q: a host with a fold whose plugin comes from a NATS object store needs a node name of A-Z a-z 0-9 - _ = only (its records' keys)", o.Admin.Node)
			}
		}
		if f.Repair == protocol.RepairRestore && o.Artifacts.Store == nil {
			bad("fold %q: repair %q needs an artifact store to restore from (Artifacts.Store)", f.Name, f.Repair)
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
		if f.Name == name && f.Partitions > 1 && f.FoldName == "" {
			return FoldOptions{}, fmt.Errorf("fold %q has %d partitions, each a fold of its own: name one of them (%s to %s)",
				name, f.Partitions, UnitName(name, 0), UnitName(name, f.Partitions-1))
		}
	}
	folds := expandPartitions(o.Folds)
	names := make([]string, len(folds))
	for i, f := range folds {
		if f.Name == name {
			return f, nil
		}
		names[i] = f.Name
	}
	return FoldOptions{}, fmt.Errorf("no fold named %q: %s", name, textfmt.NoSuch("the folds", name, names))
}
