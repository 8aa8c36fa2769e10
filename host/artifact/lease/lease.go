package lease

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go/jetstream"
)

// Lease coordinates fleet-wide export rounds: at most one live holder per
// key, over a NATS KV key used as a mutex, with the expiry embedded in the
// value (a [Record]) rather than in server TTL machinery.
//
//   - A create-only CAS (kv.Create) on an absent or deleted key wins.
//   - An existing key is parsed. A record whose expires_at is <= now, or a
//     value that does not parse (garbage bytes, an empty CAS tombstone), is
//     stolen with a CAS update against the revision that was read. A corrupt
//     value is replaceable, never a wedge: otherwise one bad write would stop
//     every export in the fleet forever.
//   - A live record means another holder is active: TryAcquire returns
//     (nil, nil).
//
// The lease is work-dedup, not a correctness gate. What keeps the published
// artifact from regressing is the pointer's monotonicity
// ([protocol.PointerPublishAllowed] at swap time), not the lease. Expiry is a
// wall-clock comparison between machines, so clock skew (or a holder that
// outlives its TTL) can let a second node steal a lease that is still in use;
// the worst outcome is a duplicate export, which the pointer rule resolves.
//
// Time is always a parameter: Lease never reads the wall clock. Callers pass
// time.Now() (or a test clock). Times on the wire are whole Unix seconds.
//
// Every request to the server is bounded by Options.RequestTimeout.
type Lease struct {
	kv      jetstream.KeyValue
	timeout time.Duration
}

// Options tunes a Lease.
type Options struct {
	// RequestTimeout bounds each request to the server; default
	// natskv.DefaultRequestTimeout (10s).
	RequestTimeout time.Duration
}

var (
	// ErrLost: a CAS on the guard's key failed because the record is no
	// longer the one this guard wrote (an expired lease was stolen, or the
	// key was deleted or overwritten). The round's work may be duplicated by
	// the new holder; nothing is corrupted.
	ErrLost = errors.New("lease: lost")

	// ErrSpent: Complete or Abandon was called on a guard that already
	// made its one attempt at either.
	ErrSpent = errors.New("lease: guard already completed or abandoned")

	// ErrRecord is wrapped by every refusal of a lease value
	// ([ParseRecord]).
	ErrRecord = errors.New("lease: invalid record")
)

// New returns a Lease over kv, normally natskv.Bucket.KV().
func New(kv jetstream.KeyValue, o Options) *Lease {
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = natskv.DefaultRequestTimeout
	}
	return &Lease{kv: kv, timeout: o.RequestTimeout}
}

// Record is the lease value, JSON on the wire:
//
//	{"holder_id":"node-42","acquired_at_unix":1718000000,"expires_at_unix":1718000300,
//	 "completed_cursor_hex":null,"completed_at_unix":null}
//
// completed_cursor_hex is the hex of the [protocol.Cursor] binary encoding of
// the last completed export, completed_at_unix when it completed; both are
// null until a round completes. They are the fleet-visible last-export
// record, so a steal of a parseable expired record carries them forward.
type Record struct {
	HolderID           string  `json:"holder_id"`
	AcquiredAtUnix     int64   `json:"acquired_at_unix"`
	ExpiresAtUnix      int64   `json:"expires_at_unix"`
	CompletedCursorHex *string `json:"completed_cursor_hex"`
	CompletedAtUnix    *int64  `json:"completed_at_unix"`
}

// wire detects missing required fields.
type wire struct {
	HolderID           string  `json:"holder_id"`
	AcquiredAtUnix     *int64  `json:"acquired_at_unix"`
	ExpiresAtUnix      *int64  `json:"expires_at_unix"`
	CompletedCursorHex *string `json:"completed_cursor_hex"`
	CompletedAtUnix    *int64  `json:"completed_at_unix"`
}

// ParseRecord decodes and validates a lease value: a JSON object with a
// non-empty holder_id, both times present, and either both completion fields
// null or a valid cursor hex with its time. Unknown fields are ignored (a
// newer writer may add some); trailing data is refused.
func ParseRecord(b []byte) (Record, error) {
	var w wire
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(&w); err != nil {
		return Record{}, fmt.Errorf("%w: %v", ErrRecord, err)
	}
	if dec.More() {
		return Record{}, fmt.Errorf("%w: trailing data", ErrRecord)
	}
	if w.HolderID == "" {
		return Record{}, fmt.Errorf("%w: no holder_id", ErrRecord)
	}
	if w.AcquiredAtUnix == nil || w.ExpiresAtUnix == nil {
		return Record{}, fmt.Errorf("%w: missing acquired_at_unix or expires_at_unix", ErrRecord)
	}
	if (w.CompletedCursorHex == nil) != (w.CompletedAtUnix == nil) {
		return Record{}, fmt.Errorf("%w: completed_cursor_hex and completed_at_unix must be set together", ErrRecord)
	}
	r := Record{
		HolderID:           w.HolderID,
		AcquiredAtUnix:     *w.AcquiredAtUnix,
		ExpiresAtUnix:      *w.ExpiresAtUnix,
		CompletedCursorHex: w.CompletedCursorHex,
		CompletedAtUnix:    w.CompletedAtUnix,
	}
	if _, _, err := r.CompletedCursor(); err != nil {
		return Record{}, err
	}
	return r, nil
}

// CompletedCursor decodes the last completed export's cursor; ok is false
// when no round has completed.
func (r Record) CompletedCursor() (c protocol.Cursor, ok bool, err error) {
	if r.CompletedCursorHex == nil {
		return protocol.Cursor{}, false, nil
	}
	raw, err := hex.DecodeString(*r.CompletedCursorHex)
	if err != nil {
		return protocol.Cursor{}, false, fmt.Errorf("%w: completed_cursor_hex: %v", ErrRecord, err)
	}
	if err := c.UnmarshalBinary(raw); err != nil {
		return protocol.Cursor{}, false, fmt.Errorf("%w: completed_cursor_hex: %w", ErrRecord, err)
	}
	return c, true, nil
}

// Expired reports whether the record is expired at now (expires_at <= now,
// in whole seconds).
func (r Record) Expired(now time.Time) bool { return r.ExpiresAtUnix <= now.Unix() }

func (l *Lease) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, l.timeout)
}

// isCASConflict reports a failed compare-and-swap: the key's last revision
// was not the expected one (or, for a create, the key exists).
func isCASConflict(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// maxAcquireAttempts bounds TryAcquire's create/read loop, which only repeats
// when the key is deleted between a failed create and the read.
const maxAcquireAttempts = 3

// TryAcquire tries to take the lease on key for holder until now+ttl (ttl is
// rounded up to whole seconds; it must be at least one second).
//
// It returns a guard on success and (nil, nil) when another holder is active:
// a live record, or a concurrent acquirer that won the same create or steal.
// An error means the state is unknown (a request failed or timed out); the
// caller treats it like "not acquired" and retries on its next trigger.
func (l *Lease) TryAcquire(ctx context.Context, key, holder string, ttl time.Duration, now time.Time) (*Guard, error) {
	if holder == "" {
		return nil, errors.New("lease:: empty holder")
	}
	if ttl < time.Second {
		return nil, fmt.Errorf("lease:: ttl %v is under one second", ttl)
	}
	secs := int64((ttl + time.Second - 1) / time.Second)
	rec := Record{HolderID: holder, AcquiredAtUnix: now.Unix(), ExpiresAtUnix: now.Unix() + secs}
	for range maxAcquireAttempts {
		val, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("lease:: %w", err)
		}
		// Create-only CAS: wins on an absent key or one whose latest
		// entry is a delete/purge marker.
		rev, err := l.create(ctx, key, val)
		if err == nil {
			return &Guard{l: l, key: key, rev: rev, rec: rec}, nil
		}
		if !isCASConflict(err) {
			return nil, fmt.Errorf("lease: %q: create: %w", key, err)
		}
		cur, err := l.get(ctx, key)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // deleted since the create: create again
		}
		if err != nil {
			return nil, fmt.Errorf("lease: %q: read: %w", key, err)
		}
		steal := rec
		if old, perr := ParseRecord(cur.Value()); perr == nil {
			if !old.Expired(now) {
				return nil, nil // live: another holder is active
			}
			// Keep the fleet-visible last-export record across rounds.
			steal.CompletedCursorHex, steal.CompletedAtUnix = old.CompletedCursorHex, old.CompletedAtUnix
		}
		// Expired or unparseable: CAS steal against the revision read.
		if val, err = json.Marshal(steal); err != nil {
			return nil, fmt.Errorf("lease:: %w", err)
		}
		rev, err = l.update(ctx, key, val, cur.Revision())
		if err == nil {
			return &Guard{l: l, key: key, rev: rev, rec: steal}, nil
		}
		if isCASConflict(err) {
			return nil, nil // another acquirer stole it first
		}
		return nil, fmt.Errorf("lease: %q: steal: %w", key, err)
	}
	return nil, nil // the key keeps being deleted and re-created by others
}

// Read returns the current record on key (the fleet-visible last-export
// record), wrapping jetstream.ErrKeyNotFound when there is none and
// [ErrRecord] when the value does not parse.
func (l *Lease) Read(ctx context.Context, key string) (Record, error) {
	e, err := l.get(ctx, key)
	if err != nil {
		return Record{}, fmt.Errorf("lease: %q: read: %w", key, err)
	}
	return ParseRecord(e.Value())
}

func (l *Lease) create(ctx context.Context, key string, val []byte) (uint64, error) {
	rctx, cancel := l.reqCtx(ctx)
	defer cancel()
	return l.kv.Create(rctx, key, val)
}

func (l *Lease) get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	rctx, cancel := l.reqCtx(ctx)
	defer cancel()
	return l.kv.Get(rctx, key)
}

func (l *Lease) update(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	rctx, cancel := l.reqCtx(ctx)
	defer cancel()
	return l.kv.Update(rctx, key, val, rev)
}

// Guard is a held lease. It is finished by exactly one Complete or
// Abandon; a guard dropped without either simply expires at its
// expires_at, after which the next TryAcquire steals it. After Complete or
// Abandon the guard is spent, whatever the outcome (a second call returns
// [ErrSpent]): a request that timed out may still have been applied, so
// a retry against the same revision would only report a false conflict.
// Safe for concurrent use.
type Guard struct {
	l   *Lease
	key string

	mu    sync.Mutex
	rev   uint64
	rec   Record
	spent bool
}

// Key is the lease's KV key.
func (g *Guard) Key() string { return g.key }

// Record is (a copy of) the record this guard last wrote.
func (g *Guard) Record() Record {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.rec
	if r.CompletedCursorHex != nil {
		h, at := *r.CompletedCursorHex, *r.CompletedAtUnix
		r.CompletedCursorHex, r.CompletedAtUnix = &h, &at
	}
	return r
}

// Complete CAS-rewrites the record with the exported cursor and now as the
// completion time, the fleet-visible last-export record. holder_id,
// acquired_at and expires_at are kept, so the completed round still dedups
// triggers until it expires. [ErrLost] if the record changed since this
// guard wrote it.
func (g *Guard) Complete(ctx context.Context, cursor protocol.Cursor, now time.Time) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spent {
		return ErrSpent
	}
	g.spent = true
	raw, err := cursor.MarshalBinary()
	if err != nil {
		return fmt.Errorf("lease: %q: complete: %w", g.key, err)
	}
	rec := g.rec
	h, at := hex.EncodeToString(raw), now.Unix()
	rec.CompletedCursorHex, rec.CompletedAtUnix = &h, &at
	val, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("lease: %q: complete: %w", g.key, err)
	}
	rev, err := g.l.update(ctx, g.key, val, g.rev)
	if isCASConflict(err) {
		return fmt.Errorf("%w: %q: complete: %w", ErrLost, g.key, err)
	}
	if err != nil {
		return fmt.Errorf("lease: %q: complete: %w", g.key, err)
	}
	g.rev, g.rec = rev, rec
	return nil
}

// Abandon frees the lease early with a CAS delete, so the next trigger
// anywhere elects a holder immediately. [ErrLost] if the record changed
// since this guard wrote it (the new holder's lease is left alone).
func (g *Guard) Abandon(ctx context.Context) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.spent {
		return ErrSpent
	}
	g.spent = true
	rctx, cancel := g.l.reqCtx(ctx)
	defer cancel()
	err := g.l.kv.Delete(rctx, g.key, jetstream.LastRevision(g.rev))
	if isCASConflict(err) {
		return fmt.Errorf("%w: %q: abandon: %w", ErrLost, g.key, err)
	}
	if err != nil {
		return fmt.Errorf("lease: %q: abandon: %w", g.key, err)
	}
	return nil
}
