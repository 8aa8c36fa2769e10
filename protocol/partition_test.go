package protocol

import (
	"fmt"
	"testing"
)

// TestPartitionOfGolden pins PartitionOf: its values are what a NATS
// server's `{{partition(n)}}` transform gives these subjects (checked
// against a real server by host/natskv's TestPartitionOfMatchesTheServer;
// these values were read from it). A change of the hash, of what it
// hashes, or of the modulo fails here first.
func TestPartitionOfGolden(t *testing.T) {
	for _, c := range []struct {
		bucket, key string
		n, want     int
	}{
		{"routes", "route.h1", 4, 2},
		{"routes", "route.h2", 4, 3},
		{"routes", "route.h3", 4, 0},
		{"routes", "a", 7, 5},
		{"routes", "route.h1", 7, 2},
		{"other", "route.h1", 7, 5}, // the bucket's name is hashed too
		{"routes", "route.h1", 1, 0},
		{"routes", "route.h1", 0, 0},
	} {
		if got := PartitionOf(c.bucket, c.key, c.n); got != c.want {
			t.Errorf("PartitionOf(%q, %q, %d) = %d, want %d", c.bucket, c.key, c.n, got, c.want)
		}
	}
}

// TestPartitionOfSpreads: 10,000 keys over 4 partitions, each within 10%
// of a quarter (a hash that ignored the key, or the modulo's operand,
// would not be).
func TestPartitionOfSpreads(t *testing.T) {
	counts := make([]int, 4)
	for i := range 10000 {
		counts[PartitionOf("routes", fmt.Sprintf("route.h%d", i), 4)]++
	}
	for p, c := range counts {
		if c < 2250 || c > 2750 {
			t.Errorf("partition %d holds %d of 10000 keys: %v", p, c, counts)
		}
	}
}

// TestPartitionStringRoundTrip: what stores and artifacts record of a
// partition reads back as the same partition, and nonsense is refused.
func TestPartitionStringRoundTrip(t *testing.T) {
	for _, p := range []Partition{{}, {Index: 0, Count: 2}, {Index: 3, Count: 4}, {Index: 1023, Count: MaxPartitions}} {
		got, err := ParsePartition(p.String())
		if err != nil || got.String() != p.String() || got.Whole() != p.Whole() {
			t.Errorf("ParsePartition(%q) = %v, %v; want %v", p.String(), got, err, p)
		}
	}
	for _, s := range []string{"1", "4/4", "-1/4", "0/1", "0/0", "a/b", "1/2000", "1/2/3"} {
		if p, err := ParsePartition(s); err == nil {
			t.Errorf("ParsePartition(%q) = %v, want an error", s, p)
		}
	}
	if (Partition{Index: 1, Count: 1}).Validate() == nil || (Partition{Index: 4, Count: 4}).Validate() == nil {
		t.Error("Validate accepts a partition out of range")
	}
	var keys [4]int
	for i := range 1000 {
		k := fmt.Sprintf("k%d", i)
		for p := range 4 {
			if (Partition{Index: p, Count: 4}).Holds("b", k) {
				keys[p]++
			}
		}
		if !(Partition{}).Holds("b", k) {
			t.Fatalf("the whole bucket does not hold %q", k)
		}
	}
	if keys[0]+keys[1]+keys[2]+keys[3] != 1000 {
		t.Errorf("the 4 partitions hold %v of 1000 keys: each key must be in exactly one", keys)
	}
}
