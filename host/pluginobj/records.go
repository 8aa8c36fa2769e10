package pluginobj

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// DefaultRecordBucket is the KV bucket where each node records the module
// each of its object-store folds runs.
const DefaultRecordBucket = "foldhost_plugins"

// RecordMaxAge is the record bucket's entry lifetime when foldhost creates
// it: a node rewrites its records every poll, so those of a node gone for a
// day disappear.
const RecordMaxAge = 24 * time.Hour

// A Record is what one node's fold runs, as the node last wrote it.
type Record struct {
	Fold   string `json:"fold"`
	Node   string `json:"node"`
	Source string `json:"source"` // the nats-object:// reference
	// Module is the sha256 of the module the fold folds with (from its
	// next batch on, when just accepted); Name, Version and ViewSchema are
	// what it declares.
	Module     string  `json:"module"`
	Name       string  `json:"name"`
	Version    string  `json:"version"`
	ViewSchema uint32  `json:"view_schema"`
	LastReload *Reload `json:"last_reload,omitempty"`
	// LastRebuild is the fold's last view rebuild: an accepted module of
	// another view schema runs only once its rebuild is done.
	LastRebuild *Rebuild  `json:"last_rebuild,omitempty"`
	At          time.Time `json:"at"` // when the node wrote this record
}

// Reload is a record's last reload verdict.
type Reload struct {
	At      time.Time `json:"at"`
	Outcome string    `json:"outcome"` // "accepted" or "refused"
	Module  string    `json:"module,omitempty"`
	Reason  string    `json:"reason,omitempty"`
}

// Rebuild is a record's last view rebuild.
type Rebuild struct {
	StartedAt time.Time `json:"started_at"`
	Module    string    `json:"module"`
	Outcome   string    `json:"outcome"` // done, failed, cancelled, deferred
	Error     string    `json:"error,omitempty"`
}

// RecordKey is the record's key: FOLD.NODE (both single subject tokens).
func RecordKey(fold, node string) string { return fold + "." + node }

// Records is the record bucket.
type Records struct{ kv jetstream.KeyValue }

// OpenRecords opens the record bucket, creating it when missing.
func OpenRecords(ctx context.Context, js jetstream.JetStream, bucket string) (*Records, error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		kv, err = js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucket, History: 1, TTL: RecordMaxAge,
			Description: "foldhost: the plugin module each node's folds run"})
		if errors.Is(err, jetstream.ErrBucketExists) {
			kv, err = js.KeyValue(ctx, bucket)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("plugin record bucket %s: %w", bucket, err)
	}
	return &Records{kv: kv}, nil
}

// Put writes rec (its At set to now).
func (r *Records) Put(ctx context.Context, rec Record) error {
	rec.At = time.Now().UTC()
	b, err := json.Marshal(rec)
	if err != nil {
		return err
	}
	if _, err := r.kv.Put(ctx, RecordKey(rec.Fold, rec.Node), b); err != nil {
		return fmt.Errorf("plugin record %s: %w", RecordKey(rec.Fold, rec.Node), err)
	}
	return nil
}

// List reads every record of bucket, by fold then node. A missing bucket
// is no record. Entries that do not parse are skipped and counted.
func List(ctx context.Context, js jetstream.JetStream, bucket string) (recs []Record, unreadable int, err error) {
	kv, err := js.KeyValue(ctx, bucket)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, fmt.Errorf("plugin record bucket %s: %w", bucket, err)
	}
	w, err := kv.WatchAll(ctx, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, 0, fmt.Errorf("plugin record bucket %s: %w", bucket, err)
	}
	defer w.Stop()
	for done := false; !done; {
		select {
		case <-ctx.Done():
			return nil, 0, fmt.Errorf("plugin record bucket %s: %w", bucket, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, 0, fmt.Errorf("plugin record bucket %s: the listing ended early", bucket)
			}
			if e == nil { // every current entry delivered
				done = true
				break
			}
			var rec Record
			if err := json.Unmarshal(e.Value(), &rec); err != nil || rec.Fold == "" {
				unreadable++
				continue
			}
			recs = append(recs, rec)
		}
	}
	slices.SortFunc(recs, func(a, b Record) int {
		if c := strings.Compare(a.Fold, b.Fold); c != 0 {
			return c
		}
		return strings.Compare(a.Node, b.Node)
	})
	return recs, unreadable, nil
}
