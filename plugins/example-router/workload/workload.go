// Package workload writes the example router's synthetic input to a NATS
// KV bucket: route.<host> keys whose values list upstreams, one in twenty
// malformed on purpose, and deltas that change and delete existing hosts.
// The demo and the benchmarks fold it.
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
}

// Key is the key of host i.
func Key(i int) string { return fmt.Sprintf("route.h%05d", i) }

// Initial puts every host once, in order: n = Hosts updates.
func (w *Writer) Initial(ctx context.Context) error {
	return w.write(ctx, w.Hosts, nil)
}

// Delta touches n distinct existing hosts (a key written twice keeps only
// its last message in a history-1 bucket) and deletes one in five of them.
func (w *Writer) Delta(ctx context.Context, n int) error {
	return w.write(ctx, n, w.Rand.Perm(w.Hosts)[:n])
}

func (w *Writer) write(ctx context.Context, n int, hosts []int) error {
	for i := 0; i < n; i++ {
		host := i
		if hosts != nil {
			host = hosts[i]
		}
		subj := fmt.Sprintf("$KV.%s.%s", w.Bucket, Key(host))
		var err error
		switch {
		case hosts != nil && i%5 == 0:
			// A KV delete is a message with the KV-Operation header.
			msg := &nats.Msg{Subject: subj, Header: nats.Header{"KV-Operation": []string{"DEL"}}}
			_, err = w.JS.PublishMsgAsync(msg)
		case i%20 == 7:
			_, err = w.JS.PublishAsync(subj, []byte(`{"upstreams":[{"addr":"broken`))
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
		}
	}
	return nil
}
