package wasm

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/protocol"
)

// slowViewsFake is fault injection: a store whose view reads take
// readDelay per key, batched or not, and which counts the keys it served.
type slowViewsFake struct {
	*fold.Store
	served atomic.Int64
}

const readDelay = 20 * time.Millisecond

func (s *slowViewsFake) ViewGet(key []byte) ([]byte, bool, error) {
	time.Sleep(readDelay)
	s.served.Add(1)
	return s.Store.ViewGet(key)
}

func (s *slowViewsFake) ViewGetBatch(keys [][]byte, fn func(int, []byte, bool) error) error {
	return s.Store.ViewGetBatch(keys, func(i int, v []byte, ok bool) error {
		time.Sleep(readDelay)
		s.served.Add(1)
		return fn(i, v, ok)
	})
}

// TestLongReadHonoursTheCallDeadline: a plugin's single read request of
// many keys is answered by host code, where the meter's deadline checks do
// not run; the host checks the call's deadline between the keys itself, so
// a read that would take 200 × 20 ms ends at the 300 ms deadline instead of
// running for 4 s first. Counted in keys served, not time: without the
// check between the keys every key is served.
func TestLongReadHonoursTheCallDeadline(t *testing.T) {
	const keys = 200
	p, st := pluginAndStore(t, newRuntime(t, Options{CallTimeout: 300 * time.Millisecond, Retries: NoRetries}), testPlugin(t, "probe-c"))
	var batch []fold.Update
	for i := range keys {
		batch = append(batch, fold.Update{Key: fmt.Sprintf("pf/k%03d", i), Rev: protocol.Revision(i + 1), Op: fold.OpPut, Value: []byte("x")})
	}
	// The read: the prefetched keys go in one request with this one.
	batch = append(batch, fold.Update{Key: "r/k000", Rev: keys + 1, Op: fold.OpPut, Value: []byte("x")})
	for _, batched := range []bool{true, false} {
		t.Run(fmt.Sprintf("batched=%v", batched), func(t *testing.T) {
			slow := &slowViewsFake{Store: st}
			var r fold.Reader = slow
			if !batched {
				r = struct{ fold.Reader }{slow} // hides ViewGetBatch
			}
			_, err := p.Apply(context.Background(), batch, r)
			var pe *PluginError
			if !errors.As(err, &pe) || pe.Kind != KindTimeout {
				t.Fatalf("Apply = %v, want a timeout", err)
			}
			if n := slow.served.Load(); n >= keys/2 {
				t.Fatalf("%d of %d keys served before the call ended: the deadline was not checked between them", n, keys+1)
			} else {
				t.Logf("%d keys served before the deadline", n)
			}
		})
	}
}
