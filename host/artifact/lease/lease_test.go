package lease

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"sync"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natstest"
	"github.com/foldhost/foldhost/protocol"
	"github.com/nats-io/nats.go/jetstream"
)

const leaseKey = "export.lease.fold1"

// leaseT0 is a fixed clock: Lease never reads the wall clock, so neither do
// these tests.
var leaseT0 = time.Unix(1718000000, 0)

// leaseKV starts a real embedded NATS and returns a Lease and its bucket.
func leaseKV(t *testing.T) (*Lease, jetstream.KeyValue) {
	t.Helper()
	_, nc := natstest.Start(t)
	b, err := natskv.OpenBucket(t.Context(), nc, natskv.BucketConfig{Name: "leases"}, natskv.Options{RequestTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	return New(b.KV(), Options{RequestTimeout: 5 * time.Second}), b.KV()
}

func mustAcquire(t *testing.T, l *Lease, holder string, ttl time.Duration, now time.Time) *Guard {
	t.Helper()
	g, err := l.TryAcquire(t.Context(), leaseKey, holder, ttl, now)
	if err != nil {
		t.Fatalf("TryAcquire(%s): %v", holder, err)
	}
	if g == nil {
		t.Fatalf("TryAcquire(%s): not acquired", holder)
	}
	return g
}

func mustNotAcquire(t *testing.T, l *Lease, holder string, ttl time.Duration, now time.Time) {
	t.Helper()
	g, err := l.TryAcquire(t.Context(), leaseKey, holder, ttl, now)
	if err != nil {
		t.Fatalf("TryAcquire(%s): %v", holder, err)
	}
	if g != nil {
		t.Fatalf("TryAcquire(%s) took a live lease: %+v", holder, g.Record())
	}
}

func readLease(t *testing.T, l *Lease) Record {
	t.Helper()
	r, err := l.Read(t.Context(), leaseKey)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestLeaseConcurrentAcquireOneWinner(t *testing.T) {
	l, _ := leaseKV(t)
	const n = 8
	var (
		wg      sync.WaitGroup
		start   = make(chan struct{})
		mu      sync.Mutex
		winners []string
		errs    []error
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			holder := fmt.Sprintf("node-%d", i)
			<-start
			g, err := l.TryAcquire(context.Background(), leaseKey, holder, time.Minute, leaseT0)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				errs = append(errs, err)
			}
			if g != nil {
				winners = append(winners, holder)
			}
		}()
	}
	close(start)
	wg.Wait()
	if len(errs) != 0 {
		t.Fatalf("errors: %v", errs)
	}
	if len(winners) != 1 {
		t.Fatalf("want exactly one winner of %d, got %v", n, winners)
	}
	if got := readLease(t, l).HolderID; got != winners[0] {
		t.Fatalf("stored holder %q, winner %q", got, winners[0])
	}
}

func TestLeaseLiveIsNotTaken(t *testing.T) {
	l, _ := leaseKV(t)
	g := mustAcquire(t, l, "a", 10*time.Second, leaseT0)
	want := g.Record()
	if want.HolderID != "a" || want.AcquiredAtUnix != leaseT0.Unix() || want.ExpiresAtUnix != leaseT0.Unix()+10 {
		t.Fatalf("record %+v", want)
	}
	// Up to the last second before expiry, a live lease is not taken, not
	// even by its own holder.
	for _, dt := range []time.Duration{0, 5 * time.Second, 9*time.Second + 999*time.Millisecond} {
		mustNotAcquire(t, l, "b", 10*time.Second, leaseT0.Add(dt))
	}
	mustNotAcquire(t, l, "a", 10*time.Second, leaseT0.Add(time.Second))
	if got := readLease(t, l); !reflect.DeepEqual(got, want) {
		t.Fatalf("live record changed: %+v, want %+v", got, want)
	}
}

func TestLeaseExpiredIsStolen(t *testing.T) {
	l, _ := leaseKV(t)
	a := mustAcquire(t, l, "a", 10*time.Second, leaseT0)
	cur := protocol.Cursor{Rev: 41}
	if err := a.Complete(t.Context(), cur, leaseT0.Add(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	// expires_at <= now: expired exactly at expires_at.
	now := leaseT0.Add(10 * time.Second)
	b := mustAcquire(t, l, "b", 20*time.Second, now)
	got := readLease(t, l)
	if got.HolderID != "b" || got.AcquiredAtUnix != now.Unix() || got.ExpiresAtUnix != now.Unix()+20 {
		t.Fatalf("stolen record %+v", got)
	}
	// The last-export record survives the steal.
	c, ok, err := got.CompletedCursor()
	if err != nil || !ok || c != cur || got.CompletedAtUnix == nil || *got.CompletedAtUnix != leaseT0.Unix()+3 {
		t.Fatalf("completion not carried: %v %v %v %+v", c, ok, err, got)
	}
	if !reflect.DeepEqual(b.Record(), got) {
		t.Fatalf("guard record %+v, stored %+v", b.Record(), got)
	}
	mustNotAcquire(t, l, "c", 10*time.Second, now.Add(19*time.Second))
}

func TestLeaseCorruptIsStolen(t *testing.T) {
	for name, val := range map[string][]byte{
		"garbage":       {0xff, 0x00, 'x', 0x13},
		"empty":         {},
		"no holder":     []byte(`{"acquired_at_unix":1,"expires_at_unix":99999999999}`),
		"no expiry":     []byte(`{"holder_id":"x","acquired_at_unix":1}`),
		"bad cursor":    []byte(`{"holder_id":"x","acquired_at_unix":1,"expires_at_unix":99999999999,"completed_cursor_hex":"zz","completed_at_unix":1}`),
		"trailing data": []byte(`{"holder_id":"x","acquired_at_unix":1,"expires_at_unix":99999999999} {}`),
	} {
		t.Run(name, func(t *testing.T) {
			l, kv := leaseKV(t)
			if _, err := kv.Put(t.Context(), leaseKey, val); err != nil {
				t.Fatal(err)
			}
			if _, err := ParseRecord(val); !errors.Is(err, ErrRecord) {
				t.Fatalf("ParseRecord(%q) = %v, want ErrRecord", val, err)
			}
			mustAcquire(t, l, "thief", 10*time.Second, leaseT0)
			if got := readLease(t, l); got.HolderID != "thief" || got.CompletedCursorHex != nil {
				t.Fatalf("record after steal %+v", got)
			}
		})
	}
}

func TestLeaseDeletedKeyIsRecreated(t *testing.T) {
	for name, del := range map[string]func(context.Context, jetstream.KeyValue) error{
		"delete": func(ctx context.Context, kv jetstream.KeyValue) error { return kv.Delete(ctx, leaseKey) },
		"purge":  func(ctx context.Context, kv jetstream.KeyValue) error { return kv.Purge(ctx, leaseKey) },
	} {
		t.Run(name, func(t *testing.T) {
			l, kv := leaseKV(t)
			a := mustAcquire(t, l, "a", time.Hour, leaseT0)
			if err := del(t.Context(), kv); err != nil {
				t.Fatal(err)
			}
			// Well before a's expiry: the marker holds no lease.
			mustAcquire(t, l, "b", time.Hour, leaseT0.Add(time.Second))
			if got := readLease(t, l).HolderID; got != "b" {
				t.Fatalf("holder %q", got)
			}
			if err := a.Abandon(t.Context()); !errors.Is(err, ErrLost) {
				t.Fatalf("old guard Abandon = %v, want ErrLost", err)
			}
			if got := readLease(t, l).HolderID; got != "b" {
				t.Fatalf("old guard's abandon touched the new lease: holder %q", got)
			}
		})
	}
}

func TestLeaseCompleteWritesCursor(t *testing.T) {
	l, _ := leaseKV(t)
	g := mustAcquire(t, l, "a", time.Minute, leaseT0)
	cur := protocol.Cursor{Rev: 1 << 40, EvictionSeen: true, MsgUnixNano: 1718000000123456789}
	done := leaseT0.Add(42 * time.Second)
	if err := g.Complete(t.Context(), cur, done); err != nil {
		t.Fatal(err)
	}
	got := readLease(t, l)
	c, ok, err := got.CompletedCursor()
	if err != nil || !ok {
		t.Fatalf("CompletedCursor: %v %v (%+v)", ok, err, got)
	}
	if c != cur {
		t.Fatalf("cursor %+v, want %+v", c, cur)
	}
	raw, _ := cur.MarshalBinary()
	if *got.CompletedCursorHex != fmt.Sprintf("%x", raw) {
		t.Fatalf("cursor hex %q", *got.CompletedCursorHex)
	}
	if *got.CompletedAtUnix != done.Unix() || got.HolderID != "a" || got.ExpiresAtUnix != leaseT0.Unix()+60 {
		t.Fatalf("record %+v", got)
	}
	// The completed round still holds the lease until it expires.
	mustNotAcquire(t, l, "b", time.Minute, leaseT0.Add(59*time.Second))
	// Spent.
	if err := g.Complete(t.Context(), cur, done); !errors.Is(err, ErrSpent) {
		t.Fatalf("second Complete = %v, want ErrSpent", err)
	}
	if err := g.Abandon(t.Context()); !errors.Is(err, ErrSpent) {
		t.Fatalf("Abandon after Complete = %v, want ErrSpent", err)
	}
	if got2 := readLease(t, l); *got2.CompletedCursorHex != *got.CompletedCursorHex {
		t.Fatalf("spent guard wrote: %+v", got2)
	}
}

func TestLeaseAbandonFreesImmediately(t *testing.T) {
	l, kv := leaseKV(t)
	g := mustAcquire(t, l, "a", time.Hour, leaseT0)
	if err := g.Abandon(t.Context()); err != nil {
		t.Fatal(err)
	}
	if _, err := kv.Get(t.Context(), leaseKey); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("after Abandon Get = %v, want ErrKeyNotFound", err)
	}
	if err := g.Abandon(t.Context()); !errors.Is(err, ErrSpent) {
		t.Fatalf("second Abandon = %v, want ErrSpent", err)
	}
	if err := g.Complete(t.Context(), protocol.Cursor{Rev: 1}, leaseT0); !errors.Is(err, ErrSpent) {
		t.Fatalf("Complete after Abandon = %v, want ErrSpent", err)
	}
	// Same instant, long before a's expiry: the next trigger wins.
	mustAcquire(t, l, "b", time.Hour, leaseT0)
}

func TestLeaseStolenGuardGetsLeaseLost(t *testing.T) {
	l, _ := leaseKV(t)
	a := mustAcquire(t, l, "a", 10*time.Second, leaseT0)
	a2 := mustAcquire(t, l, "a", 10*time.Second, leaseT0.Add(20*time.Second)) // a's own lease expired, re-taken
	b := mustAcquire(t, l, "b", 10*time.Second, leaseT0.Add(40*time.Second))
	want := b.Record()

	if err := a.Complete(t.Context(), protocol.Cursor{Rev: 7}, leaseT0.Add(41*time.Second)); !errors.Is(err, ErrLost) {
		t.Fatalf("stolen Complete = %v, want ErrLost", err)
	}
	if err := a2.Abandon(t.Context()); !errors.Is(err, ErrLost) {
		t.Fatalf("stolen Abandon = %v, want ErrLost", err)
	}
	// The thief's record is untouched and its guard still works.
	if got := readLease(t, l); !reflect.DeepEqual(got, want) {
		t.Fatalf("record %+v, want %+v", got, want)
	}
	if err := b.Complete(t.Context(), protocol.Cursor{Rev: 8}, leaseT0.Add(42*time.Second)); err != nil {
		t.Fatal(err)
	}
	if err := a.Complete(t.Context(), protocol.Cursor{Rev: 7}, leaseT0); !errors.Is(err, ErrSpent) {
		t.Fatalf("Complete after lost = %v, want ErrSpent", err)
	}
}

func TestLeaseArgsAndRecordRoundTrip(t *testing.T) {
	l, _ := leaseKV(t)
	if _, err := l.TryAcquire(t.Context(), leaseKey, "", time.Minute, leaseT0); err == nil {
		t.Fatal("empty holder accepted")
	}
	if _, err := l.TryAcquire(t.Context(), leaseKey, "a", 500*time.Millisecond, leaseT0); err == nil {
		t.Fatal("sub-second ttl accepted")
	}
	// ttl rounds up to whole seconds.
	g := mustAcquire(t, l, "a", 1500*time.Millisecond, leaseT0)
	if got := g.Record().ExpiresAtUnix; got != leaseT0.Unix()+2 {
		t.Fatalf("expires_at %d, want %d", got, leaseT0.Unix()+2)
	}
	// The wire example of the package doc parses; unknown fields are tolerated.
	r, err := ParseRecord([]byte(`{ "holder_id": "node-42", "acquired_at_unix": 1718000000, "expires_at_unix": 1718000300,
"completed_cursor_hex": null, "completed_at_unix": null, "future": 1 }`))
	if err != nil {
		t.Fatal(err)
	}
	if r.HolderID != "node-42" || r.AcquiredAtUnix != 1718000000 || r.ExpiresAtUnix != 1718000300 || r.CompletedCursorHex != nil {
		t.Fatalf("parsed %+v", r)
	}
	if !r.Expired(time.Unix(1718000300, 0)) || r.Expired(time.Unix(1718000299, 0)) {
		t.Fatal("expiry boundary wrong")
	}
}
