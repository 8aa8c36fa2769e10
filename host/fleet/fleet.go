package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
)

// Defaults of Options.
const (
	DefaultHeartbeat = time.Second
	DefaultNodeTTL   = 3 * time.Second
	// BucketPrefix names a fleet's bucket: BucketPrefix + the fleet's name.
	BucketPrefix = "foldhost_fleet_"
)

// UnitSpec is a unit this node may run, with its fold's standbys.
type UnitSpec struct {
	Unit     protocol.Unit
	Standbys int
}

// Runner is what the fleet drives: the host's folds. Its methods are
// called from the fleet's goroutine only, and must not block long.
type Runner interface {
	// SetRole moves this node's copy of u to role: none (stop folding
	// it), standby (fold it read-only), owner (fold it, publish its
	// effects and export it, under epoch). It is called at every change
	// of role or epoch, and once per unit at the start.
	SetRole(u protocol.Unit, role protocol.Role, epoch protocol.Revision)
	// Progress is how far this node's copy of u is: its cursor, whether
	// it has caught up (a hand-over to this node may go), and its state.
	Progress(u protocol.Unit) (cursor uint64, ready bool, state string)
}

// Options configure a Fleet.
type Options struct {
	// Name is the fleet's: nodes with the same name share a bucket
	// (BucketPrefix + Name) and place their units together.
	Name string
	// Node is this node's name; Advertise its HTTP address for the
	// others.
	Node, Advertise string
	// Units are the units this node may run (every node of a fleet has
	// the same folds).
	Units []UnitSpec
	// Heartbeat is how often the node rewrites its record; NodeTTL how
	// long a node's record may stay unchanged before the others take it
	// for dead (their own clocks measure it). Defaults DefaultHeartbeat,
	// DefaultNodeTTL; NodeTTL must be more than twice Heartbeat.
	Heartbeat, NodeTTL time.Duration
	// Replicas of the fleet's bucket when it is created (default 1; 3 on
	// a three-server NATS cluster).
	Replicas int
	// RequestTimeout bounds each request; default natskv.DefaultRequestTimeout.
	RequestTimeout time.Duration
	Runner         Runner
	Logger         *slog.Logger
	// Clock reads the time liveness is measured with; default time.Now.
	Clock func() time.Time
	// Floor reads the highest epoch an owner of the fleet's units left
	// where a server or store fences by it (claim marks in effects
	// streams, artifact pointers); nil: none. A bucket this node creates
	// (the first, or one made again after a deletion) numbers its
	// revisions, the epochs, above it: an epoch never goes back, even
	// across the bucket's deletion. A Floor that fails refuses the
	// creation (retried).
	Floor func(ctx context.Context) (protocol.Revision, error)
}

// ErrNameInUse: another process runs as this node in the fleet (its
// record changed while this one waited a NodeTTL to take the name over).
var ErrNameInUse = errors.New("fleet: the node's name is in use by another process")

// ErrSuperseded: this node's record was rewritten by another process
// (one started under the same name): this process stops acting in the
// fleet.
var ErrSuperseded = errors.New("fleet: another process took over this node's name")

// ErrPartitionsMismatch: this node's count of partitions of a fold
// differs from the one the fleet recorded (its first node's): a fold's
// partitions are fixed for its life, and every node must split its keys
// alike.
var ErrPartitionsMismatch = errors.New("fleet: a fold's count of partitions differs from the fleet's")

// errRecordGone: the node's record was gone from the bucket (written
// anew): the bucket may have been made again, and what the node's watch
// showed of the old one must be forgotten (Run watches it again).
var errRecordGone = errors.New("fleet: this node's record was gone from the bucket")

// Fleet is this node's membership of a fleet.
type Fleet struct {
	o   Options
	nc  *nats.Conn
	kv  jetstream.KeyValue
	inc string
	log *slog.Logger

	// Owned by the Run goroutine.
	myRev   uint64
	nodes   map[string]*seenNode
	claims  map[protocol.Unit]protocol.Claim
	roles   map[protocol.Unit]placed
	leaving bool

	leaveReq chan struct{} // Leave asks Run to leave
	left     chan struct{} // closed once this node left
	done     chan struct{} // closed when Run returned
	doneOnce sync.Once

	claimsWon, takeovers atomic.Uint64

	mu      sync.Mutex // guards snap and snapIdx
	snap    Snapshot
	snapIdx map[protocol.Unit]int // snap.Units' index of each unit
}

// seenNode is another node's record as this node saw it.
type seenNode struct {
	rec     nodeRecord
	rev     uint64
	changed time.Time // this node's clock when rev last changed
}

type placed struct {
	role  protocol.Role
	epoch protocol.Revision
}

// Join opens the fleet's bucket (made when missing) and takes this
// node's name in it: a record of another incarnation is taken over only
// once it stayed unchanged for a NodeTTL (its process is gone), else
// ErrNameInUse.
func Join(ctx context.Context, nc *nats.Conn, o Options) (*Fleet, error) {
	if o.Heartbeat <= 0 {
		o.Heartbeat = DefaultHeartbeat
	}
	if o.NodeTTL <= 0 {
		o.NodeTTL = DefaultNodeTTL
	}
	if o.NodeTTL <= 2*o.Heartbeat {
		return nil, fmt.Errorf("fleet: node_ttl %v must be more than twice the heartbeat %v", o.NodeTTL, o.Heartbeat)
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = natskv.DefaultRequestTimeout
	}
	if o.Replicas <= 0 {
		o.Replicas = 1
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	var rnd [8]byte
	_, _ = rand.Read(rnd[:])
	f := &Fleet{o: o, nc: nc, inc: hex.EncodeToString(rnd[:]), log: o.Logger.With("fleet", o.Name, "node", o.Node),
		nodes: map[string]*seenNode{}, claims: map[protocol.Unit]protocol.Claim{}, roles: map[protocol.Unit]placed{},
		leaveReq: make(chan struct{}), left: make(chan struct{}), done: make(chan struct{})}
	var err error
	if f.kv, err = f.openBucket(ctx); err != nil {
		return nil, err
	}
	if err := f.checkPartitions(ctx); err != nil {
		return nil, err
	}
	if err := f.takeName(ctx); err != nil {
		return nil, err
	}
	f.log.Info("joined the fleet", "incarnation", f.inc, "bucket", BucketPrefix+o.Name)
	return f, nil
}

// openBucket opens the fleet's bucket, making it when it does not exist
// with its revisions above Options.Floor.
func (f *Fleet) openBucket(ctx context.Context) (jetstream.KeyValue, error) {
	name := BucketPrefix + f.o.Name
	kv, err := natskv.OpenExisting(ctx, f.nc, name, f.o.RequestTimeout)
	if err == nil || !errors.Is(err, natskv.ErrNoBucket) {
		if err != nil {
			return nil, fmt.Errorf("fleet %s: %w", f.o.Name, err)
		}
		return kv, nil
	}
	var floor protocol.Revision
	if f.o.Floor != nil {
		if floor, err = f.o.Floor(ctx); err != nil {
			return nil, fmt.Errorf("fleet %s: its bucket %s does not exist, and the epochs it must start above cannot be read: %w", f.o.Name, name, err)
		}
	}
	b, err := natskv.OpenBucket(ctx, f.nc, natskv.BucketConfig{Name: name, History: 1, Replicas: f.o.Replicas, FirstRevision: uint64(floor) + 1},
		natskv.Options{RequestTimeout: f.o.RequestTimeout})
	if err != nil {
		return nil, fmt.Errorf("fleet %s: %w", f.o.Name, err)
	}
	if b.Created() {
		f.log.Warn("the fleet's bucket did not exist: made it (a new fleet, or its bucket was deleted)", "bucket", name,
			"epochs_above", uint64(floor), "replicas", f.o.Replicas)
	}
	return b.KV(), nil
}

// checkPartitions records each of this node's folds' count of partitions
// in the fleet's bucket (fold.<name>), or, when one is recorded, refuses
// another (ErrPartitionsMismatch).
func (f *Fleet) checkPartitions(ctx context.Context) error {
	counts := map[string]int{}
	for _, us := range f.o.Units {
		counts[us.Unit.Fold] = max(counts[us.Unit.Fold], us.Unit.Partition+1)
	}
	for fold, n := range counts {
		b, _ := json.Marshal(foldRecord{Partitions: n})
		rctx, cancel := f.rctx(ctx)
		_, err := f.kv.Create(rctx, foldPrefix+fold, b)
		if errors.Is(err, jetstream.ErrKeyExists) {
			var e jetstream.KeyValueEntry
			if e, err = f.kv.Get(rctx, foldPrefix+fold); err == nil {
				var rec foldRecord
				if json.Unmarshal(e.Value(), &rec) == nil && rec.Partitions != n {
					err = fmt.Errorf("%w: fold %s has %d partitions in fleet %s, %d on this node: partitions are fixed for a fold's life; "+
						"to re-partition, fold the bucket into a new fold (or stop every node, delete the key %s%s of bucket %s%s, and move every node's data dir of the fold aside)",
						ErrPartitionsMismatch, fold, rec.Partitions, f.o.Name, n, foldPrefix, fold, BucketPrefix, f.o.Name)
				}
			}
		}
		cancel()
		if err != nil {
			return fmt.Errorf("fleet %s: fold %s: %w", f.o.Name, fold, err)
		}
	}
	return nil
}

// Incarnation is this process's in the fleet.
func (f *Fleet) Incarnation() string { return f.inc }

func (f *Fleet) rctx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, f.o.RequestTimeout)
}

// takeName writes this node's first record: over nothing, over a deleted
// one, or over another incarnation's that stayed unchanged for a NodeTTL.
func (f *Fleet) takeName(ctx context.Context) error {
	key := nodeKey(f.o.Node)
	rctx, cancel := f.rctx(ctx)
	e, err := f.kv.Get(rctx, key)
	cancel()
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		rctx, cancel := f.rctx(ctx)
		defer cancel()
		f.myRev, err = f.kv.Create(rctx, key, f.record())
		if errors.Is(err, jetstream.ErrKeyExists) {
			return fmt.Errorf("%w: %s (a record appeared as this one started)", ErrNameInUse, f.o.Node)
		}
		return err
	case err != nil:
		return fmt.Errorf("fleet %s: reading node %s: %w", f.o.Name, f.o.Node, err)
	}
	var other nodeRecord
	_ = json.Unmarshal(e.Value(), &other)
	f.log.Info("a record of this node's name exists: waiting a node_ttl to see whether its process lives", "incarnation", other.Incarnation, "ttl", f.o.NodeTTL.String())
	rev := e.Revision()
	t := time.NewTimer(f.o.NodeTTL)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
			rctx, cancel := f.rctx(ctx)
			defer cancel()
			f.myRev, err = f.kv.Update(rctx, key, f.record(), rev)
			if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
				return fmt.Errorf("%w: %s (its record changed as this one took it over)", ErrNameInUse, f.o.Node)
			}
			return err
		case <-time.After(f.o.Heartbeat / 2):
			rctx, cancel := f.rctx(ctx)
			e, err := f.kv.Get(rctx, key)
			cancel()
			if err == nil && e.Revision() != rev {
				return fmt.Errorf("%w: %s (incarnation %s beats; a second process with this node's name? give each node its own name)", ErrNameInUse, f.o.Node, other.Incarnation)
			}
		}
	}
}

// record is this node's record now.
func (f *Fleet) record() []byte {
	rec := nodeRecord{Node: f.o.Node, Incarnation: f.inc, Advertise: f.o.Advertise, Leaving: f.leaving, Units: map[string]unitReport{}}
	for u, p := range f.roles {
		if p.role == protocol.RoleNone {
			continue
		}
		cur, ready, state := f.o.Runner.Progress(u)
		rec.Units[u.String()] = unitReport{Role: p.role.String(), Epoch: p.epoch, Cursor: cur, Ready: ready, State: state}
	}
	b, _ := json.Marshal(rec)
	return b
}

// beat rewrites this node's record, conditioned on its last revision: a
// rewrite by anyone else is ErrSuperseded.
func (f *Fleet) beat(ctx context.Context) error {
	rctx, cancel := f.rctx(ctx)
	defer cancel()
	rev, err := f.kv.Update(rctx, nodeKey(f.o.Node), f.record(), f.myRev)
	if errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		// Ours, whose answer was lost (a timeout after the server stored
		// it), or another process's; or none any more (the bucket was
		// made again after a deletion): written anew.
		e, gerr := f.kv.Get(rctx, nodeKey(f.o.Node))
		var rec nodeRecord
		switch {
		case errors.Is(gerr, jetstream.ErrKeyNotFound) || errors.Is(gerr, jetstream.ErrKeyDeleted):
			if f.myRev, err = f.kv.Create(rctx, nodeKey(f.o.Node), f.record()); err != nil {
				return err
			}
			f.log.Warn("this node's record was gone from the fleet's bucket (deleted, or the bucket made again): wrote it anew")
			return errRecordGone
		case gerr == nil && json.Unmarshal(e.Value(), &rec) == nil && rec.Incarnation == f.inc:
			f.myRev = e.Revision()
			return nil
		}
		return fmt.Errorf("%w (%s)", ErrSuperseded, f.o.Node)
	}
	if err != nil {
		return err
	}
	f.myRev = rev
	return nil
}
