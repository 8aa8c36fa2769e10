package pluginobj

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Scheme is the plugin setting's prefix for a module in an object store.
const Scheme = "nats-object://"

// Ref names a module in an object store: nats-object://BUCKET/NAME, with
// an optional pin ?sha256=HEX (the only content the fold accepts).
type Ref struct {
	Bucket, Name string
	// Pin, if set, is the lower-case hex SHA-256 the module must have.
	Pin string
}

func (r Ref) String() string {
	s := Scheme + r.Bucket + "/" + r.Name
	if r.Pin != "" {
		s += "?sha256=" + r.Pin
	}
	return s
}

// IsRef reports whether a plugin setting names an object-store module
// (and not a file).
func IsRef(s string) bool { return strings.HasPrefix(s, Scheme) }

var bucketRE = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ParseRef parses a nats-object:// reference.
func ParseRef(s string) (Ref, error) {
	if !IsRef(s) {
		return Ref{}, fmt.Errorf("plugin %q: not a %sBUCKET/NAME reference", s, Scheme)
	}
	rest, query, _ := strings.Cut(strings.TrimPrefix(s, Scheme), "?")
	bucket, name, ok := strings.Cut(rest, "/")
	var r Ref
	switch {
	case !ok || bucket == "" || name == "":
		return r, fmt.Errorf("plugin %q: want %sBUCKET/NAME", s, Scheme)
	case !bucketRE.MatchString(bucket):
		return r, fmt.Errorf("plugin %q: %q is not a valid object store bucket name (A-Z a-z 0-9 _ -)", s, bucket)
	}
	r.Bucket, r.Name = bucket, name
	if query == "" {
		return r, nil
	}
	q, err := url.ParseQuery(query)
	if err != nil {
		return r, fmt.Errorf("plugin %q: %w", s, err)
	}
	for k, vs := range q {
		if k != "sha256" || len(vs) != 1 {
			return r, fmt.Errorf("plugin %q: unknown parameter %q (only sha256=HEX, once)", s, k)
		}
		pin := strings.ToLower(vs[0])
		if b, err := hex.DecodeString(pin); err != nil || len(b) != 32 {
			return r, fmt.Errorf("plugin %q: sha256 %q is not 64 hex digits", s, vs[0])
		}
		r.Pin = pin
	}
	return r, nil
}

// Module is a fetched module.
type Module struct {
	Bytes []byte
	Info  *jetstream.ObjectInfo
}

// ErrTooLarge: the object is larger than the caller's bound.
var ErrTooLarge = errors.New("pluginobj: module too large")

// ErrPinMismatch: the object is not the content the reference pins.
var ErrPinMismatch = errors.New("pluginobj: module is not the pinned one")

// ErrLink: the object is a link to another object, which a plugin
// reference does not follow (its size would not be known before the
// download).
var ErrLink = errors.New("pluginobj: the object is a link")

// Verdict reports whether err, from Fetch, is a verdict on the object
// itself (too large, not the pinned content, a link, bytes that do not
// match its digest), not a failure to read it (a timeout, a lost
// connection, a missing object), which a later look may not meet.
func Verdict(err error) bool {
	return errors.Is(err, ErrTooLarge) || errors.Is(err, ErrPinMismatch) || errors.Is(err, ErrLink) ||
		errors.Is(err, jetstream.ErrDigestMismatch)
}

// A download gets fetchBase plus a second per fetchRate bytes of the
// object, at most fetchMax: a download whose chunks stop coming (the
// object replaced meanwhile deletes them) ends after seconds, not minutes.
const (
	fetchBase = 10 * time.Second
	fetchRate = 4 << 20
	fetchMax  = 2 * time.Minute
)

// Fetch reads the module r names, refusing one over max bytes: the
// object's recorded size is checked before the download and the bytes
// read are bounded by max too (a size that lies reads no more). The client
// checks the bytes against the object's digest; hash is the caller's
// module hash (hex SHA-256) for the pin check. Fetch returns when ctx
// ends; a download in flight then ends by its own deadline.
func Fetch(ctx context.Context, js jetstream.JetStream, r Ref, max int64, hash func([]byte) string) (Module, error) {
	obs, err := js.ObjectStore(ctx, r.Bucket)
	if err != nil {
		return Module{}, fmt.Errorf("plugin %s: object store %s: %w", r, r.Bucket, err)
	}
	name := r.Name
	if r.Pin != "" {
		// The pinned version as pushed beside the latest (Push), so a
		// pinned node keeps loading it after newer pushes.
		if _, err := obs.GetInfo(ctx, VersionName(r.Name, r.Pin)); err == nil {
			name = VersionName(r.Name, r.Pin)
		}
	}
	info, err := obs.GetInfo(ctx, name)
	if err != nil {
		return Module{}, fmt.Errorf("plugin %s: %w", r, err)
	}
	if info.Opts != nil && info.Opts.Link != nil {
		return Module{}, fmt.Errorf("plugin %s: %w (to %s/%s): push the module itself", r, ErrLink, info.Opts.Link.Bucket, info.Opts.Link.Name)
	}
	if max > 0 && int64(info.Size) > max {
		return Module{}, fmt.Errorf("plugin %s: %w: %d bytes, the limit is %d", r, ErrTooLarge, info.Size, max)
	}
	budget := min(fetchBase+time.Duration(info.Size/fetchRate)*time.Second, fetchMax)
	type result struct {
		b   []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		// Detached from ctx: the client's read only honours a deadline, so
		// a cancelled Fetch returns at once and this ends by its own.
		gctx, cancel := context.WithTimeout(context.Background(), budget)
		defer cancel()
		res, err := obs.Get(gctx, name)
		if err != nil {
			done <- result{nil, err}
			return
		}
		defer res.Close()
		limit := int64(math.MaxInt64)
		if max > 0 {
			limit = max + 1
		}
		b, err := io.ReadAll(io.LimitReader(res, limit))
		done <- result{b, err}
	}()
	var got result
	select {
	case <-ctx.Done():
		return Module{}, fmt.Errorf("plugin %s: %w", r, ctx.Err())
	case got = <-done:
	}
	switch {
	case got.err != nil && errors.Is(got.err, nats.ErrTimeout):
		return Module{}, fmt.Errorf("plugin %s: the download stalled (no data for %v; the object was probably replaced meanwhile): %w", r, budget, got.err)
	case got.err != nil:
		return Module{}, fmt.Errorf("plugin %s: %w", r, got.err)
	case max > 0 && int64(len(got.b)) > max:
		return Module{}, fmt.Errorf("plugin %s: %w: over %d bytes (its recorded size said %d)", r, ErrTooLarge, max, info.Size)
	}
	if r.Pin != "" {
		if sum := hash(got.b); sum != r.Pin {
			return Module{}, fmt.Errorf("plugin %s: %w: the object holds sha256 %s", r, ErrPinMismatch, sum)
		}
	}
	return Module{Bytes: got.b, Info: info}, nil
}

// VersionName is the object a push also writes for the version of name
// whose module hash is sha (hex SHA-256): NAME@SHA.
func VersionName(name, sha string) string { return name + "@" + sha }

// Push stores b as r's object, and as its version object (VersionName, for
// pinned references), creating the bucket when it is missing.
func Push(ctx context.Context, js jetstream.JetStream, r Ref, b []byte, description string) (*jetstream.ObjectInfo, error) {
	obs, err := js.ObjectStore(ctx, r.Bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		obs, err = js.CreateObjectStore(ctx, jetstream.ObjectStoreConfig{Bucket: r.Bucket,
			Description: "foldhost plugin modules"})
		if errors.Is(err, jetstream.ErrBucketExists) { // created meanwhile
			obs, err = js.ObjectStore(ctx, r.Bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("object store %s: %w", r.Bucket, err)
	}
	sum := sha256.Sum256(b)
	version := VersionName(r.Name, hex.EncodeToString(sum[:]))
	if _, err := obs.Put(ctx, jetstream.ObjectMeta{Name: version, Description: description}, bytes.NewReader(b)); err != nil {
		return nil, fmt.Errorf("push %s: %w", version, err)
	}
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: r.Name, Description: description}, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("push %s: %w", r, err)
	}
	return info, nil
}
