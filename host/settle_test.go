package host_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/foldhost/foldhost/internal/hosttest"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/host"
	"github.com/foldhost/foldhost/host/httpapi"
	"github.com/foldhost/foldhost/host/natskv"
	"github.com/foldhost/foldhost/internal/natsload"
	"github.com/foldhost/foldhost/protocol"
)

// TestLaggingPrefixFoldDetectsTheClamp: a prefix fold of a history-1 bucket
// with a discard-old limit of 2000 messages lags behind a 20k-operation
// burst (its loop held, as a stopped process would hold it), so its
// filtered consumer is clamped past updates of its scope that retention
// evicted. The fold must not go on following as if nothing happened (it
// did: 343 keys missing, 1,847 wrong, 112 deleted keys present, status
// following, ready, lag 0): its settle probe finds the clamp, the cursor
// expires, and the repair this bucket allows is refused (the listing is not
// the truth on an evicting bucket, and there is no artifact), so the fold
// stops failed, not ready, saying why. A restart finds the same: the
// cursor it committed is unsettled, and its resume check refuses.
func TestLaggingPrefixFoldDetectsTheClamp(t *testing.T) {
	url, b := hosttest.RepairServer(t, natskv.BucketConfig{History: 1})
	hosttest.UpdateStream(t, url, "KV_rt", func(c *jetstream.StreamConfig) { c.Discard, c.MaxMsgs = jetstream.DiscardOld, 2000 })
	dir := t.TempDir() + "/fold"
	o := host.Options{NATS: host.NATSOptions{Conn: natskv.ConnOptions{URL: url}},
		Folds: []host.FoldOptions{{Name: "routes", Bucket: "rt", Scope: []string{"route."}, DataDir: dir, Repair: protocol.RepairAuto}}}
	r := hosttest.StartHost(t, o)
	f := r.H.Fold("routes")
	hosttest.WaitCursor(t, f, 0)
	hosttest.WaitState(t, f, httpapi.StateFollowing)
	last := hosttest.Put(t, b, "route.start", "1")
	hosttest.WaitCursor(t, f, last)

	release, err := hosttest.StallLoop(context.Background(), f)
	if err != nil {
		t.Fatal(err)
	}
	js, err := jetstream.New(hosttest.Conn(t, url))
	if err != nil {
		t.Fatal(err)
	}
	val := []byte(strings.Repeat("x", 2048))
	natsload.Publish(t, js, 20000, func(i int) *nats.Msg {
		key := fmt.Sprintf("route.%d", i%3000)
		if i%2 == 1 {
			key = fmt.Sprintf("other.%d", i%3000)
		}
		if i%10 == 9 { // a KV delete: a marker with the operation header
			return &nats.Msg{Subject: "$KV.rt." + key, Header: nats.Header{"KV-Operation": []string{"DEL"}}}
		}
		return &nats.Msg{Subject: "$KV.rt." + key, Data: val}
	})
	release()

	deadline := time.Now().Add(2 * time.Minute)
	for {
		st := f.Status()
		if st.State == httpapi.StateFailed {
			if st.Ready || !strings.Contains(st.LastError, "repair refused") {
				t.Fatalf("failed fold: ready %v, last error %q; want not ready, a refused repair", st.Ready, st.LastError)
			}
			t.Logf("detected: %s", st.LastError)
			break
		}
		if time.Now().After(deadline) {
			js, _ := json.MarshalIndent(st, "", "  ")
			t.Fatalf("the fold still %s 2m after the burst: a clamp of its consumer went unnoticed; status:\n%s", st.State, js)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := r.Stop(t); err == nil {
		t.Error("Run returned nil for a failed fold")
	}
	r = hosttest.StartHost(t, o)
	f = r.H.Fold("routes")
	hosttest.WaitFor(t, func() bool {
		return f.Status().State == httpapi.StateFailed || f.Status().State == httpapi.StateFollowing
	})
	if st := f.Status(); st.State != httpapi.StateFailed || !strings.Contains(st.LastError, "repair refused") {
		t.Fatalf("after a restart: %s, %q; want the refusal again", st.State, st.LastError)
	}
}
