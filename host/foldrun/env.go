package foldrun

import (
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/foldhost/foldhost/host/artifact"
	"github.com/foldhost/foldhost/host/artifact/round"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
)

// Env is what the folds of one host share: its services and settings.
// The host fills it while it starts (NATS once connected, Metrics and
// Exporter before any fold runs) and changes nothing once a fold runs;
// folds only read it.
type Env struct {
	Logger *slog.Logger
	// NATS is the host's connection (object-store plugins, their records).
	NATS *nats.Conn
	// Health is the connection's state, for the status and readiness.
	Health *natskv.Health
	// Metrics receives each committed batch's figures.
	Metrics *httpapi.Metrics
	// Exporter runs export rounds; nil: no artifact store (export off).
	Exporter *round.Exporter
	// Artifacts is the artifact store repairs restore from (nil: none),
	// ArtifactsWhere how logs and the status name it.
	Artifacts      artifact.Store
	ArtifactsWhere string
	// Node names this host in the plugin records (and the fleet).
	Node string
	// Fleet: the host is a node of a fleet, which sets each fold's role
	// (SetRole); the status shows it.
	Fleet bool
	// Demux reads each bucket's stream once for the partitions of it this
	// host folds (nil: each unit reads on its own).
	Demux *natskv.Demux
	// PluginCacheDir holds compiled plugins across restarts ("": memory).
	PluginCacheDir string
	// RequestTimeout bounds each NATS request; DisconnectGrace is how long
	// the connection may be down before every fold reports not ready;
	// HeadPollInterval how often a fold reads its stream's head;
	// ProgressInterval how often a hydrating fold logs its progress.
	RequestTimeout, DisconnectGrace, HeadPollInterval, ProgressInterval time.Duration
}
