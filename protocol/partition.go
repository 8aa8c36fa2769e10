package protocol

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxPartitions bounds a fold's partitions: each is a unit with its own
// store, loop and claim, and a partition number is one subject token.
const MaxPartitions = 1024

// PartitionOf is the partition, of n, of key in KV bucket bucket: the one
// a NATS server's subject transform `{{partition(n)}}` computes for the
// key's subject `$KV.<bucket>.<key>` (FNV-1a 32 over the whole subject,
// modulo n), so a stream sourcing the bucket through that transform puts
// the key where foldhost looks for it, and a read finds the unit that
// folds it. It depends on the bucket's name: the same key falls in other
// partitions of another bucket. n < 2 is one partition, 0.
//
// A change of it is a change of protocol: every node of a fleet, and the
// server, must agree (pinned by TestPartitionOfGolden, and checked against
// a real server's transform in host/natskv).
func PartitionOf(bucket, key string, n int) int {
	if n < 2 {
		return 0
	}
	// FNV-1a 32 inline: a partitioned watch hashes every key of the
	// bucket, and hash/fnv allocates.
	const offset, prime = 2166136261, 16777619
	h := uint32(offset)
	for _, s := range [...]string{"$KV.", bucket, ".", key} {
		for i := 0; i < len(s); i++ {
			h ^= uint32(s[i])
			h *= prime
		}
	}
	return int(h % uint32(n))
}

// Partition names one partition of a bucket's keys: Index of Count. The
// zero value, and any Count below 2, is the whole bucket.
type Partition struct {
	Index, Count int
}

// Whole reports whether p is the whole bucket.
func (p Partition) Whole() bool { return p.Count < 2 }

// Holds reports whether key of bucket is in p.
func (p Partition) Holds(bucket, key string) bool {
	return p.Whole() || PartitionOf(bucket, key, p.Count) == p.Index
}

// Validate reports what is wrong with p, if anything.
func (p Partition) Validate() error {
	switch {
	case p.Count < 0 || p.Count > MaxPartitions:
		return fmt.Errorf("partitions %d: want 1 to %d", p.Count, MaxPartitions)
	case p.Whole() && p.Index != 0:
		return fmt.Errorf("partition %d of a whole bucket: want 0", p.Index)
	case !p.Whole() && (p.Index < 0 || p.Index >= p.Count):
		return fmt.Errorf("partition %d: want 0 to %d", p.Index, p.Count-1)
	}
	return nil
}

// String is "I/N", or "" for the whole bucket: the form stores and
// artifacts record (ParsePartition reads it back).
func (p Partition) String() string {
	if p.Whole() {
		return ""
	}
	return strconv.Itoa(p.Index) + "/" + strconv.Itoa(p.Count)
}

// ParsePartition reads what Partition.String wrote.
func ParsePartition(s string) (Partition, error) {
	if s == "" {
		return Partition{}, nil
	}
	i, n, ok := strings.Cut(s, "/")
	pi, err1 := strconv.Atoi(i)
	pn, err2 := strconv.Atoi(n)
	p := Partition{Index: pi, Count: pn}
	if !ok || err1 != nil || err2 != nil || p.Whole() || p.Validate() != nil {
		return Partition{}, fmt.Errorf("partition %q: want I/N with 0 <= I < N, 2 <= N <= %d", s, MaxPartitions)
	}
	return p, nil
}
