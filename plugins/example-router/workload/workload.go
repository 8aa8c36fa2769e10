// Package workload writes the example router's synthetic input to a NATS
// KV bucket: route.<host> keys whose values list upstreams, one in twenty
// malformed on purpose, and deltas that change and delete existing hosts.
// The demo and the benchmarks fold it, in one of two shapes (Shape).
package workload

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Writer writes the workload of one bucket. Not safe for concurrent use.
type Writer struct {
	JS     jetstream.JetStream
	Bucket string
	// Hosts is the key space: route.h00000 .. route.h<Hosts-1>.
	Hosts int
	// Rand drives the values and the deltas' choice of hosts; seed it for
	// a reproducible workload.
	Rand *rand.Rand
	// Shape is the initial write's: Ordered (the zero value) or Random.
	Shape Shape
	// Progress, if set, is called with the number of Initial's updates
	// written and acknowledged so far, every 1000 of them and at the end.
	Progress func(done int)
}

// Shape is how the initial write lays out the keys and upstreams.
type Shape uint8

const (
	// Ordered writes the hosts in ascending key order (route.h00000,
	// route.h00001, …), each with two upstreams: one of 250 × 250
	// addresses and one of 20. The best case for a store's inserts: the
	// raw keys arrive sorted and the reverse index's keys cluster under a
	// few addresses.
	Ordered Shape = iota
	// Random writes the hosts in a random order, each with 1 to 3
	// upstreams drawn from about 16 million addresses and 1000 ports: what
	// a real bucket's replay looks like to the store (every insert lands
	// somewhere new).
	Random
)

func (s Shape) String() string {
	if s == Random {
		return "random"
	}
	return "ordered"
}

// Key is the key of host i.
func Key(i int) string { return fmt.Sprintf("route.h%05d", i) }

// Initial puts every host once (n = Hosts updates), in the order and with
// the upstreams of w.Shape.
func (w *Writer) Initial(ctx context.Context) error {
	if w.Shape == Random {
		return w.write(ctx, w.Hosts, w.Rand.Perm(w.Hosts), false, w.Progress)
	}
	return w.write(ctx, w.Hosts, nil, false, w.Progress)
}

// Delta touches n distinct existing hosts (a key written twice keeps only
// its last message in a history-1 bucket) and deletes one in five of them.
func (w *Writer) Delta(ctx context.Context, n int) error {
	return w.write(ctx, n, w.Rand.Perm(w.Hosts)[:n], true, nil)
}

func (w *Writer) write(ctx context.Context, n int, hosts []int, deletes bool, progress func(int)) error {
	for i := 0; i < n; i++ {
		host := i
		if hosts != nil {
			host = hosts[i]
		}
		subj := fmt.Sprintf("$KV.%s.%s", w.Bucket, Key(host))
		var err error
		switch {
		case deletes && i%5 == 0:
			// A KV delete is a message with the KV-Operation header.
			msg := &nats.Msg{Subject: subj, Header: nats.Header{"KV-Operation": []string{"DEL"}}}
			_, err = w.JS.PublishMsgAsync(msg)
		case i%20 == 7:
			_, err = w.JS.PublishAsync(subj, []byte(`{"upstreams":[{"addr":"broken`))
		case w.Shape == Random:
			_, err = w.JS.PublishAsync(subj, w.randomValue())
		default:
			v := fmt.Sprintf(`{"upstreams":[{"addr":"10.%d.%d.1:8080","weight":%d},{"addr":"10.0.0.%d:8080"}]}`,
				host%250, w.Rand.IntN(250), 1+w.Rand.IntN(9), 1+host%20)
			_, err = w.JS.PublishAsync(subj, []byte(v))
		}
		if err != nil {
			return err
		}
		if i%1000 == 999 || i == n-1 { // bounded in-flight acks; every write acknowledged
			select {
			case <-w.JS.PublishAsyncComplete():
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(time.Minute):
				return errors.New("workload: NATS did not acknowledge writes within a minute")
			}
			if progress != nil {
				progress(i + 1)
			}
		}
	}
	return nil
}

// randomValue is a Random shape's value: 1 to 3 upstreams, each a random
// address and port with a weight.
func (w *Writer) randomValue() []byte {
	b := []byte(`{"upstreams":[`)
	for j := range 1 + w.Rand.IntN(3) {
		if j > 0 {
			b = append(b, ',')
		}
		b = fmt.Appendf(b, `{"addr":"10.%d.%d.%d:%d","weight":%d}`,
			w.Rand.IntN(256), w.Rand.IntN(256), w.Rand.IntN(256), 8000+w.Rand.IntN(1000), 1+w.Rand.IntN(9))
	}
	return append(b, "]}"...)
}
