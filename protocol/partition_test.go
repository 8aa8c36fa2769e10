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
