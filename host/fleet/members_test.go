package fleet

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/internal/natstest"
)

// TestMembersAreTheRecentRecordsNotLeaving: Members lists the nodes whose
// records were written within nodeTTL and are not leaving; a fleet with
// no bucket has none; a record too old for nodeTTL (a node dead, its
// record left behind) is not a member. Mutations caught: leaving records
// listed; the age not checked.
func TestMembersAreTheRecentRecordsNotLeaving(t *testing.T) {
	_, nc := natstest.Start(t)
	ctx := context.Background()
	if got, err := Members(ctx, nc, "none", time.Minute); err != nil || got != nil {
		t.Fatalf("a fleet with no bucket: %v, %v", got, err)
	}
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	kv, err := js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: BucketPrefix + "m"})
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range map[string]string{
		"node.a":     `{"node":"a","incarnation":"1"}`,
		"node.b":     `{"node":"b","incarnation":"2","leaving":true}`,
		"node.c":     `{"node":"c","incarnation":"3"}`,
		"node.d":     `not a record`,
		"claim.f0.0": `{"owner":"a"}`,
	} {
		if _, err := kv.PutString(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	got, err := Members(ctx, nc, "m", time.Minute)
	slices.Sort(got)
	if err != nil || !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("members: %v, %v; want [a c]", got, err)
	}
	// Records older than nodeTTL are the dead's.
	time.Sleep(10 * time.Millisecond)
	if got, err := Members(ctx, nc, "m", 5*time.Millisecond); err != nil || len(got) != 0 {
		t.Errorf("members with every record older than node_ttl: %v, %v; want none", got, err)
	}
}
