package fleet

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
)

// TestFleetOutlivesItsBucket: the fleet's bucket is made with its epochs
// above the floor (the highest epoch its owners left in effects streams
// and artifact pointers); deleted while the nodes run, it is made again,
// above the floor as it is then, and every unit is owned again, by one
// node, under an epoch above every epoch before: the servers that fence
// by epoch (the claim marks, the pointers) never see one go back. No
// node stops. Mutations caught: no floor (the remade bucket's epochs
// start at 1), the old claims kept after the remake (their epochs shadow
// the new claims), a record found gone taken for another process's
// (ErrSuperseded: the node drops its units).
func TestFleetOutlivesItsBucket(t *testing.T) {
	_, nc := natstest.Start(t)
	var floor atomic.Uint64
	floor.Store(1000)
	readFloor := func(context.Context) (protocol.Revision, error) { return protocol.Revision(floor.Load()), nil }
	ms := map[string]*member{}
	for _, n := range []string{"n1", "n2"} {
		m, err := join(t, nc, n, readFloor)
		if err != nil {
			t.Fatal(err)
		}
		ms[n] = m
	}
	owners := waitSettled(t, ms)
	var highest protocol.Revision
	for u, o := range owners {
		e := ms[o].r.role(u).epoch
		if e <= 1000 {
			t.Fatalf("unit %s claimed at epoch %d, not above the floor 1000", u, e)
		}
		highest = max(highest, e)
	}

	// The bucket deleted, while the owners' marks went up to 5000.
	floor.Store(5000)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), BucketPrefix+"t"); err != nil {
		t.Fatal(err)
	}
	waitOwnedAbove(t, ms, 5000)
	for name, m := range ms {
		select {
		case err := <-m.done:
			t.Fatalf("node %s stopped: %v", name, err)
		default:
		}
	}
	if _, err := js.KeyValue(context.Background(), BucketPrefix+"t"); err != nil {
		t.Fatalf("the bucket was not made again: %v", err)
	}
	t.Logf("epochs before the deletion up to %d; after, above 5000", highest)
}

// waitOwnedAbove waits until the fleet settles with every unit's epoch
// above floor.
func waitOwnedAbove(t *testing.T, ms map[string]*member, floor protocol.Revision) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for ; ; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the fleet did not settle above epoch %d within a minute", floor)
		}
		owners := waitSettled(t, ms)
		above := true
		for u, o := range owners {
			if ms[o].r.role(u).epoch <= floor {
				above = false
			}
		}
		if above {
			return
		}
	}
}

// TestFleetRunEndsDuringARewatch: a node whose Run ends (SIGTERM, a
// leave past its time) while it watches its deleted bucket again returns
// nil, without a panic. Mutation caught: the deferred stop of the watcher
// called on the nil one the ended rewatch left (a nil-pointer panic that
// killed the process at shutdown).
func TestFleetRunEndsDuringARewatch(t *testing.T) {
	_, nc := natstest.Start(t)
	var block atomic.Bool
	entered := make(chan struct{})
	var once sync.Once
	floor := func(ctx context.Context) (protocol.Revision, error) {
		if !block.Load() {
			return 0, nil
		}
		once.Do(func() { close(entered) })
		<-ctx.Done() // the remade bucket's floor is being read as Run ends
		return 0, ctx.Err()
	}
	m, err := join(t, nc, "n1", floor)
	if err != nil {
		t.Fatal(err)
	}
	waitSettled(t, map[string]*member{"n1": m})
	block.Store(true)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	if err := js.DeleteKeyValue(context.Background(), BucketPrefix+"t"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-entered:
	case <-time.After(time.Minute):
		t.Fatal("the node did not remake its deleted bucket within 1m")
	}
	if err := m.stop(); err != nil {
		t.Fatalf("Run: %v, want nil (its ctx ended)", err)
	}
}
