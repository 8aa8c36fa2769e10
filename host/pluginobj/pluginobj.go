// Package pluginobj holds plugin modules in a NATS object store: the
// nats-object:// reference a fold's config names, fetching a module (its
// bytes checked against the store's digest, and against the reference's
// pin), watching for new versions, pushing one, and the fleet's record of
// which module each node runs (a KV bucket, one entry per fold and node).
//
// Validating a module (is it a plugin this host can run?) is not done here:
// the caller's WASM runtime does it, before anything is swapped in.
package pluginobj

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"

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

// Fetch reads the module r names, refusing one over max bytes before
// downloading it. The client checks the bytes against the object's digest;
// hash is the caller's module hash (hex SHA-256) for the pin check.
func Fetch(ctx context.Context, js jetstream.JetStream, r Ref, max int64, hash func([]byte) string) (Module, error) {
	obs, err := js.ObjectStore(ctx, r.Bucket)
	if err != nil {
		return Module{}, fmt.Errorf("plugin %s: object store %s: %w", r, r.Bucket, err)
	}
	info, err := obs.GetInfo(ctx, r.Name)
	if err != nil {
		return Module{}, fmt.Errorf("plugin %s: %w", r, err)
	}
	if max > 0 && int64(info.Size) > max {
		return Module{}, fmt.Errorf("plugin %s: %w: %d bytes, the limit is %d", r, ErrTooLarge, info.Size, max)
	}
	b, err := obs.GetBytes(ctx, r.Name)
	if err != nil {
		return Module{}, fmt.Errorf("plugin %s: %w", r, err)
	}
	if max > 0 && int64(len(b)) > max { // replaced between the two reads
		return Module{}, fmt.Errorf("plugin %s: %w: %d bytes, the limit is %d", r, ErrTooLarge, len(b), max)
	}
	if r.Pin != "" {
		if got := hash(b); got != r.Pin {
			return Module{}, fmt.Errorf("plugin %s: %w: the object holds sha256 %s", r, ErrPinMismatch, got)
		}
	}
	return Module{Bytes: b, Info: info}, nil
}

// Push stores b as r's object, creating the bucket when it is missing.
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
	info, err := obs.Put(ctx, jetstream.ObjectMeta{Name: r.Name, Description: description}, bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("push %s: %w", r, err)
	}
	return info, nil
}
