package natskv

import (
	"fmt"
	"strings"

	"github.com/foldhost/foldhost/protocol"
)

// Scope is what a watch covers: the whole bucket (no prefixes), or the union
// of one or more key prefixes, all on ONE consumer.
//
// A prefix is a whole-token subject prefix ending in "." ("route.",
// "tenant.a."): NATS filters by subject tokens, so "rou" cannot be a filter.
// Prefixes must not overlap (NATS refuses overlapping consumer filters).
//
// Partition, when not whole, narrows a whole-bucket scope to one partition
// of its keys (protocol.PartitionOf): the watch reads the bucket's whole
// stream and hands on only the partition's updates, settling the fold's
// cursor over the others (RATIONALE.md, "Partitions"). A partition of a
// prefix scope is specified, not built: Validate refuses it.
type Scope struct {
	Prefixes  []string
	Partition protocol.Partition
}

// WholeBucket reports whether s covers every key.
func (s Scope) WholeBucket() bool { return len(s.Prefixes) == 0 }

// Contains reports whether key is in scope.
func (s Scope) Contains(key string) bool {
	if s.WholeBucket() {
		return true
	}
	for _, p := range s.Prefixes {
		if strings.HasPrefix(key, p) {
			return true
		}
	}
	return false
}

// Holds reports whether key of bucket is in scope, partition included.
func (s Scope) Holds(bucket, key string) bool {
	return s.Contains(key) && s.Partition.Holds(bucket, key)
}

// Validate reports the first problem with s.
func (s Scope) Validate() error {
	if err := s.Partition.Validate(); err != nil {
		return fmt.Errorf("natskv: scope %w", err)
	}
	if !s.Partition.Whole() && !s.WholeBucket() {
		return fmt.Errorf("natskv: scope prefixes %q with partitions: a partitioned fold covers the whole bucket (prefixes and partitions together are specified, not built)", s.Prefixes)
	}
	for i, p := range s.Prefixes {
		switch {
		case p == "":
			return fmt.Errorf("natskv: scope prefix %d is empty (omit prefixes to watch the whole bucket)", i)
		case !strings.HasSuffix(p, "."):
			return fmt.Errorf("natskv: scope prefix %q must end with \".\" (NATS filters whole subject tokens)", p)
		case strings.ContainsAny(p, "*> \t\r\n"):
			return fmt.Errorf("natskv: scope prefix %q contains a wildcard or whitespace", p)
		case strings.HasPrefix(p, ".") || strings.Contains(p, ".."):
			return fmt.Errorf("natskv: scope prefix %q has an empty token", p)
		}
		for _, q := range s.Prefixes[:i] {
			if strings.HasPrefix(p, q) || strings.HasPrefix(q, p) {
				return fmt.Errorf("natskv: scope prefixes %q and %q overlap", q, p)
			}
		}
	}
	return nil
}

// filters returns fresh NATS key filters for s (the client mutates the slice
// it is given, so never hand it one we keep).
func (s Scope) filters() []string {
	if s.WholeBucket() {
		return []string{">"}
	}
	f := make([]string, len(s.Prefixes))
	for i, p := range s.Prefixes {
		f[i] = p + ">"
	}
	return f
}

func (s Scope) String() string {
	if !s.Partition.Whole() {
		return "partition " + s.Partition.String()
	}
	if s.WholeBucket() {
		return "bucket"
	}
	return strings.Join(s.Prefixes, ",")
}
