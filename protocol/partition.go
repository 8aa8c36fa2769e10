package protocol

import "hash/fnv"

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
	h := fnv.New32a()
	h.Write([]byte("$KV."))
	h.Write([]byte(bucket))
	h.Write([]byte("."))
	h.Write([]byte(key))
	return int(h.Sum32() % uint32(n))
}
