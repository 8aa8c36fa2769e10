package fold

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Defaults for [Options]. See RATIONALE.md for the measurements behind them.
const (
	DefaultMemTableSize = 64 << 20 // 64 MiB
	DefaultCacheSize    = 64 << 20 // 64 MiB block cache
)

// Options configures [Open]. The zero value is the recommended setting.
type Options struct {
	// Sync makes every Commit fsync the WAL before returning: a fixed cost
	// per commit that depends on the disk (BenchmarkCommit measured ~0.25 ms more than NoSync, 0.42x the NoSync
	// throughput at 100 updates per commit, 0.76x at 1024). The default, false, is NoSync:
	// Commit returns once the batch is in pebble's memtable and WAL buffer,
	// and pebble's WAL writer hands it to the OS asynchronously, moments
	// later. So not only a power loss but also a process crash can lose the
	// last commits (TestCrashConsistency, SIGKILL: up to ~50 small batches,
	// a few tens of milliseconds of commits). Data and cursor share one batch
	// and the WAL is replayed in order, so what is lost is always a whole
	// tail: the store reopens at an earlier cursor that still describes its
	// data exactly, and the resume from that cursor re-folds the lost tail
	// (while NATS still retains it; otherwise the cursor-expiry repair runs).
	// Sync buys a shorter replay, not correctness. Anything acknowledged to
	// the outside on the strength of a NoSync commit (an export, an ack) is
	// only as durable as that tail: export goes through [Store.Checkpoint],
	// which syncs the WAL first.
	Sync bool

	// MemTableSize is the size of one pebble memtable. Default
	// DefaultMemTableSize. Up to four may be queued while flushing, so the
	// write path can hold about 4x this in memory; commits stall (see
	// Stats.WriteStalls) only when all four are full.
	MemTableSize uint64

	// CacheSize is the pebble block cache size in bytes. Default
	// DefaultCacheSize.
	CacheSize int64

	// Logger receives pebble's log: informational messages at Debug, errors
	// at Error. Default slog.Default().
	Logger *slog.Logger

	// DiskReserve is the free space, in bytes, every write leaves on the
	// store's filesystem: a write that would leave less is refused with a
	// [*DiskFullError], nothing written (see [ErrDiskFull]). Default 0 is
	// MemTableSize times the memtables the write path may queue (4): what
	// pebble may still have to write to flush what it accepted. Negative:
	// no reserve (only the write's own size is checked).
	DiskReserve int64

	// FS is the filesystem pebble uses; nil is the operating system's.
	// Tests inject faults through it (a disk that fills up).
	FS vfs.FS

	// untuned opens with pebble's own defaults instead of the tuning below;
	// only the benchmarks use it, to measure what the tuning buys.
	untuned bool
}

// pebbleFormat pins pebble's on-disk format. It is named, not FormatNewest,
// so a pebble upgrade never ratchets existing stores (or the checkpoints
// exported from them) to a format older builds cannot read.
const pebbleFormat = pebble.FormatValueSeparation

func (o Options) withDefaults() Options {
	if o.MemTableSize == 0 {
		o.MemTableSize = DefaultMemTableSize
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	return o
}

// memTableStopWrites is how many memtables the write path may queue
// before pebble stalls commits (MemTableStopWritesThreshold).
const memTableStopWrites = 4

// pebbleOptions builds pebble's options from o (already defaulted), on the
// filesystem fs, with fatal the store's handler of pebble's fatal errors.
func (o Options) pebbleOptions(events *pebble.EventListener, fs vfs.FS, fatal func(string)) *pebble.Options {
	po := &pebble.Options{
		FormatMajorVersion: pebbleFormat,
		Logger:             slogLogger{l: o.Logger, fatal: fatal},
		EventListener:      events,
		FS:                 fs,
	}
	if o.untuned {
		po.EnsureDefaults()
		return po
	}
	// Measured (host/fold/RATIONALE.md, "Pebble tuning"): the memtable is
	// what matters. With pebble's 4 MiB memtables and 2 allowed in the
	// queue, a sustained load stalls on every flush; 64 MiB memtables with 4
	// queued absorb flushes and double sustained NoSync throughput. Bloom
	// filters, eager L0 compaction and larger L0 files measured as no gain
	// or a loss on this write path, so they keep pebble's defaults.
	po.CacheSize = o.CacheSize
	po.MemTableSize = o.MemTableSize
	po.MemTableStopWritesThreshold = memTableStopWrites
	// A second compaction may run when L0 or compaction debt builds up
	// (pebble's heuristics); the reference machine has 2 cores.
	po.CompactionConcurrencyRange = func() (int, int) { return 1, 2 }
	po.EnsureDefaults()
	return po
}

// slogLogger adapts *slog.Logger to pebble.Logger. fatal, when set, takes
// pebble's fatal errors (a store's: see Store.onFatal).
type slogLogger struct {
	l     *slog.Logger
	fatal func(string)
}

func (s slogLogger) logf(level slog.Level, format string, args []any) {
	if s.l.Enabled(context.Background(), level) {
		s.l.Log(context.Background(), level, "pebble: "+fmt.Sprintf(format, args...))
	}
}

func (s slogLogger) Infof(format string, args ...any)  { s.logf(slog.LevelDebug, format, args) }
func (s slogLogger) Errorf(format string, args ...any) { s.logf(slog.LevelError, format, args) }

// Fatalf is called by pebble on unrecoverable errors, a failed log or
// manifest write among them. A store's handler breaks the store instead of
// the process (Store.onFatal); without one, it panics.
func (s slogLogger) Fatalf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	s.l.Error("pebble fatal: " + msg)
	if s.fatal != nil {
		s.fatal(msg)
		return
	}
	panic("fold: pebble fatal: " + msg)
}

// PebbleLogger is l as a pebble.Logger, as the store logs pebble's lines
// (info at debug level), for pebble databases beside the store's.
func PebbleLogger(l *slog.Logger) pebble.Logger { return slogLogger{l: l} }
