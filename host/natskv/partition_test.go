package natskv

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/protocol"
)

// TestPartitionOfMatchesTheServer: foldhost's partition of a key
// (protocol.PartitionOf) is the one a real NATS server's subject
// transform `{{partition(n)}}` gives it: streams sourcing two buckets'
// streams through `$KV.<bucket>.>` -> `p.{{partition(n)}}.>` (n = 4 and 7)
// hold each key under the partition PartitionOf computes, for keys with
// dots, dashes, slashes and '=' (every key a KV bucket admits has its
// shape here). It prints the values TestPartitionOfGolden pins. Mutation
// caught: PartitionOf hashing the subject without its "$KV." (every
// partition of n = 7 moves).
func TestPartitionOfMatchesTheServer(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	nc := connect(t, s.ClientURL())
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	keys := []string{"route.h1", "route.h2", "route.h3", "a", "x-y_z", "a/b=c", "deep.er.key.1"}
	for i := range 300 {
		keys = append(keys, fmt.Sprintf("k.%d", i))
	}
	for _, bucket := range []string{"routes", "other"} {
		b := openBucket(t, nc, BucketConfig{Name: bucket, History: 1, Replicas: 1})
		for _, k := range keys {
			put(t, b, k, "v")
		}
		for _, n := range []int{4, 7} {
			name := fmt.Sprintf("P_%s_%d", bucket, n)
			st, err := js.CreateStream(t.Context(), jetstream.StreamConfig{Name: name, Sources: []*jetstream.StreamSource{{
				Name:              "KV_" + bucket,
				SubjectTransforms: []jetstream.SubjectTransformConfig{{Source: "$KV." + bucket + ".>", Destination: fmt.Sprintf("p.{{partition(%d)}}.>", n)}},
			}}})
			if err != nil {
				t.Fatal(err)
			}
			got := sourced(t, st, len(keys))
			for _, k := range keys {
				p, ok := got[k]
				switch {
				case !ok:
					t.Errorf("%s: key %q not sourced", name, k)
				case p != protocol.PartitionOf(bucket, k, n):
					t.Errorf("%s: the server put key %q in partition %d, PartitionOf says %d", name, k, p, protocol.PartitionOf(bucket, k, n))
				}
			}
			for _, k := range keys[:4] {
				t.Logf("server: bucket %s key %q n %d -> partition %d", bucket, k, n, got[k])
			}
		}
	}
}

// sourced reads the want messages of st, subjects p.<partition>.<key>,
// into key -> partition (waiting, with a deadline, for the sourcing).
func sourced(t *testing.T, st jetstream.Stream, want int) map[string]int {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for {
		info, err := st.Info(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		if int(info.State.Msgs) >= want {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s holds %d messages after 1m, want %d", info.Config.Name, info.State.Msgs, want)
		}
		time.Sleep(10 * time.Millisecond)
	}
	got := map[string]int{}
	for seq := uint64(1); len(got) < want; seq++ {
		m, err := st.GetMsg(t.Context(), seq)
		if err != nil {
			t.Fatalf("message %d: %v", seq, err)
		}
		tok := strings.SplitN(m.Subject, ".", 3)
		p, err := strconv.Atoi(tok[1])
		if len(tok) != 3 || tok[0] != "p" || err != nil {
			t.Fatalf("message %d: subject %q, want p.<partition>.<key>", seq, m.Subject)
		}
		got[tok[2]] = p
	}
	return got
}
