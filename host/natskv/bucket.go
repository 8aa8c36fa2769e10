package natskv

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/foldhost/foldhost/internal/textfmt"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// DefaultRequestTimeout bounds every request to the server unless Options
// says otherwise. Without a bound, a half-dead TCP connection (CLOSE_WAIT)
// parks the caller forever: the client does not fail in-flight requests when
// the socket dies silently.
const DefaultRequestTimeout = 10 * time.Second

// BucketConfig describes a bucket to create when it does not exist. It
// applies only at creation: an existing bucket is used as it is, and its
// retention is always read live from the stream (Bucket.Retention), never
// from this config.
type BucketConfig struct {
	Name string
	// History is the number of revisions kept per key; default 1.
	History uint8
	// MaxAge evicts messages older than this, current values included;
	// 0 (default) keeps them forever.
	MaxAge time.Duration
	// MaxBytes caps the bucket's size; 0 (default) means unlimited. KV
	// buckets refuse writes at the cap (discard new).
	MaxBytes int64
	// Replicas in a cluster; default 1.
	Replicas int
	// Memory storage instead of file storage.
	Memory bool
	// LimitMarkerTTL > 0 makes age expiry visible to watchers as purge
	// markers (NATS 2.11+), kept for this long.
	LimitMarkerTTL time.Duration
	// FirstRevision > 1 makes a created bucket's revisions start there
	// (its stream's first sequence): a bucket recreated after a deletion
	// whose revisions must stay above the old one's (a fleet's epochs).
	// Without LimitMarkerTTL only.
	FirstRevision uint64
}

// Options tunes a Bucket.
type Options struct {
	// RequestTimeout bounds each request; default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// ProbeInterval is the floor guard's backstop period on a whole-bucket
	// watch with no deliveries; default 30s.
	ProbeInterval time.Duration
	// SettleInterval is how often a prefix watch settles what it delivered
	// (a retention reading, and while the scope is quiet a lookup of its
	// next message and a second reading): default DefaultSettleInterval.
	// A clamp of a lagging prefix consumer is detected within about this;
	// meanwhile its deliveries are committed unsettled
	// (protocol.Cursor.Unsettled), so a crash in between is caught at the
	// next start.
	SettleInterval time.Duration
	// NoCreate makes OpenBucket refuse a bucket that does not exist
	// (ErrNoBucket) instead of creating it.
	NoCreate bool
}

// DefaultSettleInterval is Options.SettleInterval's default: three requests
// a second at most per prefix watch, against a retention window that must
// outlast it anyway.
const DefaultSettleInterval = time.Second

// Bucket is an open KV bucket.
type Bucket struct {
	nc      *nats.Conn
	js      jetstream.JetStream
	kv      jetstream.KeyValue
	name    string
	stream  string
	opts    Options
	connURL string
	created bool   // OpenBucket created it
	near    string // then, the existing bucket nearest its name ("": none near)
}

// ErrBucketConfig is returned for an invalid BucketConfig.
var ErrBucketConfig = errors.New("natskv: invalid bucket config")

// OpenBucket opens the bucket named by cfg, creating it from cfg if it does
// not exist (Created says so), or refusing it (ErrNoBucket) with
// o.NoCreate.
func OpenBucket(ctx context.Context, nc *nats.Conn, cfg BucketConfig, o Options) (*Bucket, error) {
	if cfg.Name == "" {
		return nil, fmt.Errorf("%w: no name", ErrBucketConfig)
	}
	if o.RequestTimeout == 0 {
		o.RequestTimeout = DefaultRequestTimeout
	}
	if o.ProbeInterval == 0 {
		o.ProbeInterval = 30 * time.Second
	}
	if o.SettleInterval <= 0 {
		o.SettleInterval = DefaultSettleInterval
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natskv: jetstream: %w", err)
	}
	b := &Bucket{nc: nc, js: js, name: cfg.Name, stream: "KV_" + cfg.Name, opts: o, connURL: Redact(nc.ConnectedUrl())}
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	kv, err := js.KeyValue(rctx, cfg.Name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		if o.NoCreate {
			return nil, missingBucket(rctx, js, cfg.Name)
		}
		b.near, _ = nearestBucket(rctx, js, cfg.Name)
		if cfg.FirstRevision > 1 {
			kv, err = createFrom(rctx, js, cfg)
		} else {
			kv, err = js.CreateKeyValue(rctx, toKVConfig(cfg))
		}
		b.created = err == nil
		if errors.Is(err, jetstream.ErrBucketExists) || errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			kv, err = js.KeyValue(rctx, cfg.Name) // lost a creation race: use the winner's
		}
	}
	if err != nil {
		return nil, fmt.Errorf("natskv: open bucket %q: %w", cfg.Name, err)
	}
	b.kv = kv
	return b, nil
}

// ErrNoBucket is returned by OpenExisting for a bucket that does not exist.
var ErrNoBucket = errors.New("natskv: bucket does not exist")

// OpenExisting opens the bucket named name without creating it; timeout
// bounds the lookup.
func OpenExisting(ctx context.Context, nc *nats.Conn, name string, timeout time.Duration) (jetstream.KeyValue, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, fmt.Errorf("natskv: jetstream: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	kv, err := js.KeyValue(rctx, name)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, missingBucket(rctx, js, name)
	}
	if err != nil {
		return nil, fmt.Errorf("natskv: open bucket %q: %w", name, err)
	}
	return kv, nil
}

// missingBucket is a *NoBucketError for the bucket name, naming the
// server's bucket nearest to it when one is near enough to be what was
// meant (a typo; the listing is best effort: without it, no suggestion).
func missingBucket(ctx context.Context, js jetstream.JetStream, name string) error {
	near, _ := nearestBucket(ctx, js, name)
	return &NoBucketError{Name: name, Near: near}
}

// NoBucketError is a bucket that does not exist (it matches ErrNoBucket),
// with the server's bucket whose name is near enough to its to be what was
// meant ("": none is).
type NoBucketError struct{ Name, Near string }

func (e *NoBucketError) Error() string { return fmt.Sprintf("%v: %q%s", ErrNoBucket, e.Name, e.Hint()) }

// Is makes a *NoBucketError match ErrNoBucket.
func (e *NoBucketError) Is(target error) bool { return target == ErrNoBucket }

// Hint is the suggestion, for a message: ` (the server has a bucket
// "routes": did you mean it?)`, or "".
func (e *NoBucketError) Hint() string {
	if e.Near == "" {
		return ""
	}
	return fmt.Sprintf(" (the server has a bucket %q: did you mean it?)", e.Near)
}

// nearestBucket is the server's bucket nearest to name, when one is near
// enough to be a typo of it (textfmt.Nearest).
func nearestBucket(ctx context.Context, js jetstream.JetStream, name string) (string, bool) {
	var names []string
	for n := range js.KeyValueStoreNames(ctx).Name() {
		names = append(names, n)
	}
	return textfmt.Nearest(name, names)
}

// createFrom creates the bucket's stream as nats.go's CreateKeyValue
// does (its configuration field for field), with the first sequence
// cfg.FirstRevision, which KeyValueConfig cannot set.
func createFrom(ctx context.Context, js jetstream.JetStream, cfg BucketConfig) (jetstream.KeyValue, error) {
	if cfg.LimitMarkerTTL != 0 {
		return nil, fmt.Errorf("%w: FirstRevision with LimitMarkerTTL", ErrBucketConfig)
	}
	kc := toKVConfig(cfg)
	dup := 2 * time.Minute
	if kc.TTL > 0 && kc.TTL < dup {
		dup = kc.TTL
	}
	replicas := kc.Replicas
	if replicas == 0 {
		replicas = 1
	}
	_, err := js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "KV_" + cfg.Name, Subjects: []string{"$KV." + cfg.Name + ".>"},
		MaxMsgsPerSubject: int64(kc.History), MaxBytes: kc.MaxBytes, MaxAge: kc.TTL, MaxMsgSize: -1,
		Storage: kc.Storage, Replicas: replicas, AllowRollup: true, DenyDelete: true, Duplicates: dup,
		MaxMsgs: -1, MaxConsumers: -1, AllowDirect: true, Discard: jetstream.DiscardNew,
		FirstSeq: cfg.FirstRevision,
	})
	if errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
		return nil, fmt.Errorf("%w: %w", jetstream.ErrBucketExists, err)
	}
	if err != nil {
		return nil, err
	}
	return js.KeyValue(ctx, cfg.Name)
}

func toKVConfig(c BucketConfig) jetstream.KeyValueConfig {
	kc := jetstream.KeyValueConfig{
		Bucket:         c.Name,
		History:        c.History,
		TTL:            c.MaxAge,
		MaxBytes:       c.MaxBytes,
		Replicas:       c.Replicas,
		LimitMarkerTTL: c.LimitMarkerTTL,
	}
	if kc.History == 0 {
		kc.History = 1
	}
	if kc.MaxBytes == 0 {
		kc.MaxBytes = -1
	}
	if c.Memory {
		kc.Storage = jetstream.MemoryStorage
	}
	return kc
}

func (b *Bucket) reqCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, b.opts.RequestTimeout)
}

// Name is the bucket's name.
func (b *Bucket) Name() string { return b.name }

// Created reports whether OpenBucket created the bucket (it did not exist).
func (b *Bucket) Created() bool { return b.created }

// NearBucket is, when OpenBucket created the bucket, the existing bucket
// whose name is near enough to the new one's to be what was meant (a
// misspelled bucket name); "" when none is.
func (b *Bucket) NearBucket() string { return b.near }

// KV exposes the underlying bucket for plain reads and writes (CLI helpers,
// tests). Callers bound their own requests.
func (b *Bucket) KV() jetstream.KeyValue { return b.kv }

// Retention reads the stream's live retention and the server's clock.
func (b *Bucket) Retention(ctx context.Context) (protocol.Retention, time.Time, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return protocol.Retention{}, time.Time{}, err
	}
	return retentionOf(info), info.TimeStamp, nil
}

func (b *Bucket) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	s, err := b.js.Stream(rctx, b.stream)
	if err != nil {
		return nil, fmt.Errorf("natskv: stream info %s: %w", b.stream, err)
	}
	return s.CachedInfo(), nil
}

// StreamCreated returns the creation time of the bucket's stream: its
// identity (a bucket deleted and made again has a new one).
func (b *Bucket) StreamCreated(ctx context.Context) (time.Time, error) {
	info, err := b.streamInfo(ctx)
	if err != nil {
		return time.Time{}, err
	}
	return info.Created.UTC(), nil
}

func retentionOf(info *jetstream.StreamInfo) protocol.Retention {
	c := info.Config
	return protocol.Retention{
		Window: protocol.Window{
			First: protocol.Revision(info.State.FirstSeq),
			Last:  protocol.Revision(info.State.LastSeq),
		},
		MaxAge:        c.MaxAge,
		PerMessageTTL: c.AllowMsgTTL,
		// The per-subject limit (KV history) only evicts superseded
		// revisions; a stream-wide limit under discard-old evicts current
		// values.
		DiscardOldLimit: c.Discard == jetstream.DiscardOld && (c.MaxBytes > 0 || c.MaxMsgs > 0),
	}
}

// Consumers returns how many consumers the bucket's stream has (watches are
// consumers: a number that keeps growing means leaked watches).
func (b *Bucket) Consumers(ctx context.Context) (int, error) {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	s, err := b.js.Stream(rctx, b.stream)
	if err != nil {
		return 0, fmt.Errorf("natskv: stream info %s: %w", b.stream, err)
	}
	return s.CachedInfo().State.Consumers, nil
}

// Listed reports whether the bucket lists key live now: its latest entry is
// a put (a delete or purge marker, or no entry at all, is not live). The
// artifact restore asks it for each delete candidate.
func (b *Bucket) Listed(ctx context.Context, key string) (bool, error) {
	rctx, cancel := b.reqCtx(ctx)
	defer cancel()
	_, err := b.kv.Get(rctx, key)
	switch {
	case err == nil:
		return true, nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return false, nil
	}
	return false, fmt.Errorf("natskv: get %q: %w", key, err)
}
