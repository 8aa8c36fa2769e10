package pluginobj

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Watch calls changed with the object's info whenever r's object gets a
// new digest (a new version pushed), until ctx is done. The first call
// comes for the object as it is when the watch starts (the caller compares
// it with what it runs). changed returns retry true when it could not act
// on the version (its download failed): the next look offers it again. A deleted object is reported to deleted, if set,
// and otherwise ignored: the running module stays.
//
// Two sources, so that a version is never missed: the object store's
// watch (immediate), and a look at the object's info every poll (covers a
// watch lost to a reconnect or a bucket created after the start). changed
// runs on Watch's goroutine; a slow one delays the next look, never
// overlaps it.
func Watch(ctx context.Context, js jetstream.JetStream, r Ref, poll time.Duration, changed func(*jetstream.ObjectInfo) (retry bool), deleted func()) {
	if poll <= 0 {
		poll = 30 * time.Second
	}
	var last string // the digest last reported
	var wasDeleted bool
	see := func(info *jetstream.ObjectInfo) {
		if info == nil || info.Name != r.Name {
			return
		}
		if info.Deleted {
			if !wasDeleted && deleted != nil {
				deleted()
			}
			wasDeleted, last = true, ""
			return
		}
		wasDeleted = false
		if info.Digest != last {
			last = info.Digest
			if changed(info) {
				last = ""
			}
		}
	}
	var w jetstream.ObjectWatcher
	defer func() {
		if w != nil {
			_ = w.Stop()
		}
	}()
	tick := time.NewTicker(poll)
	defer tick.Stop()
	for {
		obs, err := js.ObjectStore(ctx, r.Bucket)
		if err == nil {
			if info, err := obs.GetInfo(ctx, r.Name, jetstream.GetObjectInfoShowDeleted()); err == nil {
				see(info)
			}
			if w == nil {
				if w, err = obs.Watch(ctx); err != nil {
					w = nil
				}
			}
		}
		var updates <-chan *jetstream.ObjectInfo
		if w != nil {
			updates = w.Updates()
		}
	wait:
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				break wait
			case info, ok := <-updates:
				if !ok { // the watch ended: a new one at the next look
					_ = w.Stop()
					w, updates = nil, nil
					continue
				}
				see(info)
			}
		}
	}
}

// Missing reports whether err says r's object (or its bucket) does not
// exist.
func Missing(err error) bool {
	return errors.Is(err, jetstream.ErrObjectNotFound) || errors.Is(err, jetstream.ErrBucketNotFound) ||
		errors.Is(err, jetstream.ErrStreamNotFound)
}
