package natskv

import (
	"reflect"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestBucketFirstRevision: a bucket created with FirstRevision numbers its
// first write there (a recreated fleet bucket keeps its epochs above the
// old one's), and its stream is configured as nats.go's own KV creation
// configures one (a field for field comparison with a bucket created the
// usual way), so every KV operation behaves as on any bucket. Mutation
// caught: FirstSeq not set (the first write is revision 1).
func TestBucketFirstRevision(t *testing.T) {
	s := startServer(t, t.TempDir(), -1)
	nc := connect(t, s.ClientURL())
	b := openBucket(t, nc, BucketConfig{Name: "floor", History: 1, Replicas: 1, FirstRevision: 1000})
	if !b.Created() {
		t.Fatal("the bucket was not created")
	}
	if rev := put(t, b, "k", "v"); rev != 1000 {
		t.Fatalf("the first write's revision %d, want 1000", rev)
	}
	if _, err := b.KV().Update(t.Context(), "k", []byte("w"), 1000); err != nil {
		t.Fatalf("a compare-and-set on the bucket: %v", err)
	}
	openBucket(t, nc, BucketConfig{Name: "plain", History: 1, Replicas: 1})
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	cfgOf := func(name string) jetstream.StreamConfig {
		st, err := js.Stream(t.Context(), name)
		if err != nil {
			t.Fatal(err)
		}
		c := st.CachedInfo().Config
		c.Name, c.Subjects, c.FirstSeq = "", nil, 0
		return c
	}
	if a, b := cfgOf("KV_floor"), cfgOf("KV_plain"); !reflect.DeepEqual(a, b) {
		t.Fatalf("a bucket created with FirstRevision is configured\n%+v\nnot as nats.go configures one\n%+v", a, b)
	}
}
