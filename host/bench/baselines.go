package bench

import (
	"context"
	"errors"
	"os"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host/fold"
)

// watchAll reads every current entry of the bucket.
func (b *bench) watchAll(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	err := b.consume(ctx, func(jetstream.KeyValueEntry) error { return nil })
	return time.Since(t0), err
}

// consume calls fn for every entry of the bucket's initial state.
func (b *bench) consume(ctx context.Context, fn func(jetstream.KeyValueEntry) error) error {
	kv, err := b.js.KeyValue(ctx, b.bucket)
	if err != nil {
		return err
	}
	w, err := kv.WatchAll(ctx)
	if err != nil {
		return err
	}
	defer w.Stop()
	for e := range w.Updates() {
		if e == nil {
			return nil
		}
		if err := fn(e); err != nil {
			return err
		}
	}
	return errors.New("the watch ended early")
}

// handRolled is the consumer a user could write in an afternoon.
func (b *bench) handRolled(ctx context.Context) (time.Duration, error) {
	t0 := time.Now()
	dir := b.nextDir()
	db, err := pebble.Open(dir, &pebble.Options{Logger: fold.PebbleLogger(b.quietLog)})
	if err != nil {
		return 0, err
	}
	err = b.consume(ctx, func(e jetstream.KeyValueEntry) error {
		return db.Set([]byte(e.Key()), e.Value(), pebble.NoSync)
	})
	took := time.Since(t0)
	return took, errors.Join(err, db.Close(), os.RemoveAll(dir))
}
