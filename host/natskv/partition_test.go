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

// TestPartitionedWatchHandsOnItsKeysAndSettlesTheRest: a watch of one
// partition of 4 hands on exactly the partition's keys (every one of them,
// none of another), and settles the fold's cursor over the other
// partitions' updates: after its Synced marker the highest revision it
// vouched for is the head, although the head's update is another
// partition's, and a live update of another partition is settled at once.
// Its settle marks are coalesced (at most one per settleEvery skipped
// updates, plus one at the head). Mutations caught: no partition filter
// (a foreign key handed on); no settle mark at the head (the cursor stays
// below it, and a caught-up fold would never look caught up); a settle
// mark per skipped update (too many marks).
func TestPartitionedWatchHandsOnItsKeysAndSettlesTheRest(t *testing.T) {
	s := startServer(t, t.TempDir(), 0)
	b := openBucket(t, connect(t, s.ClientURL()), BucketConfig{Name: "parts", History: 1, Replicas: 1})
	const n, keys, p = 4, 5000, 1
	part := protocol.Partition{Index: p, Count: n}
	want := map[string]bool{}
	var head protocol.Revision
	var foreign string
	for i := range keys {
		k := "k." + strconv.Itoa(i)
		head = put(t, b, k, "v")
		if part.Holds("parts", k) {
			want[k] = true
		} else {
			foreign = k
		}
	}
	if part.Holds("parts", "k."+strconv.Itoa(keys-1)) {
		head = put(t, b, foreign, "again") // the head must be another partition's
	}
	w, err := b.Watch(t.Context(), Scope{Partition: part}, protocol.Cursor{}, WatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	got := map[string]bool{}
	var reached protocol.Revision
	marks := 0
	for {
		ev, ok := next(t, w)
		if !ok {
			t.Fatalf("watch ended: %v", w.Err())
		}
		reached = max(reached, ev.Settle)
		if ev.Synced {
			break
		}
		if ev.SettleOnly() {
			marks++
			continue
		}
		if !part.Holds("parts", ev.Key) {
			t.Fatalf("the watch of partition %v handed on key %q of partition %d", part, ev.Key, protocol.PartitionOf("parts", ev.Key, n))
		}
		got[ev.Key] = true
		reached = max(reached, ev.Rev)
	}
	if len(got) != len(want) {
		t.Errorf("the watch handed on %d keys of the partition, it holds %d", len(got), len(want))
	}
	if reached != head {
		t.Errorf("after the state-sync the watch vouched up to revision %d, the head is %d (another partition's)", reached, head)
	}
	if foreignN := keys - len(want); marks > foreignN/settleEvery+2 {
		t.Errorf("%d settle marks for %d skipped updates: want at most %d (coalesced)", marks, foreignN, foreignN/settleEvery+2)
	}
	t.Logf("partition %v: %d keys of %d, %d settle marks", part, len(got), keys, marks)

	rev := put(t, b, foreign, "live")
	if ev, _ := next(t, w); !ev.SettleOnly() || ev.Settle != rev {
		t.Errorf("a live update of another partition at %d gave %+v, want a settle mark at %d", rev, ev, rev)
	}
	var mine string
	for k := range want {
		mine = k
		break
	}
	rev = put(t, b, mine, "live")
	if ev, _ := next(t, w); ev.Key != mine || ev.Rev != rev {
		t.Errorf("a live update of the partition (%q at %d) gave %+v", mine, rev, ev)
	}
}
