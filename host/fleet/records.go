package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/foldhost/foldhost/protocol"
)

// The bucket's keys: node.<name> (a node's record), claim.<fold>.<p> (a
// unit's claim register), fold.<fold> (the fold's count of partitions,
// written once by the first node that runs it). Names and folds are
// single KV key tokens (checked by the config: A-Z a-z 0-9 - _).
const (
	nodePrefix  = "node."
	claimPrefix = "claim."
	foldPrefix  = "fold."
)

// foldRecord is what every node of a fleet must agree on about a fold.
type foldRecord struct {
	Partitions int `json:"partitions"`
}

func nodeKey(name string) string { return nodePrefix + name }

func claimKey(u protocol.Unit) string {
	return claimPrefix + u.Fold + "." + strconv.Itoa(u.Partition)
}

// unitOfClaimKey is the unit a claim key names.
func unitOfClaimKey(key string) (protocol.Unit, bool) {
	rest, ok := strings.CutPrefix(key, claimPrefix)
	if !ok {
		return protocol.Unit{}, false
	}
	i := strings.LastIndexByte(rest, '.')
	if i <= 0 {
		return protocol.Unit{}, false
	}
	p, err := strconv.Atoi(rest[i+1:])
	if err != nil || p < 0 {
		return protocol.Unit{}, false
	}
	return protocol.Unit{Fold: rest[:i], Partition: p}, true
}

// nodeRecord is a node's record: written at every heartbeat (its
// revision's change is the heartbeat), and deleted when the node leaves.
type nodeRecord struct {
	Node        string `json:"node"`
	Incarnation string `json:"incarnation"`
	// Advertise is the HTTP address other nodes reach this one at.
	Advertise string `json:"advertise,omitempty"`
	// Leaving: the node is handing its units over before it exits.
	Leaving bool `json:"leaving,omitempty"`
	// Units are the units the node folds, by unit ("fold/p").
	Units map[string]unitReport `json:"units,omitempty"`
}

// unitReport is how far a node's copy of a unit is.
type unitReport struct {
	Role   string            `json:"role"`
	Epoch  protocol.Revision `json:"epoch,omitempty"`
	Cursor uint64            `json:"cursor"`
	// Ready: the copy has caught up (a hand-over to this node may go).
	Ready bool   `json:"ready"`
	State string `json:"state,omitempty"`
}

// claimValue is a claim register's value (its revision, the epoch, is
// the entry's).
type claimValue struct {
	Owner       string `json:"owner,omitempty"`
	Incarnation string `json:"incarnation,omitempty"`
	To          string `json:"to,omitempty"`
}

func decodeClaim(b []byte, rev uint64) (protocol.Claim, error) {
	var v claimValue
	if err := json.Unmarshal(b, &v); err != nil {
		return protocol.Claim{Epoch: protocol.Revision(rev)}, fmt.Errorf("claim register at revision %d: %w", rev, err)
	}
	return protocol.Claim{Owner: v.Owner, Incarnation: v.Incarnation, To: v.To, Epoch: protocol.Revision(rev)}, nil
}

func encodeClaim(c protocol.Claim) []byte {
	b, _ := json.Marshal(claimValue{Owner: c.Owner, Incarnation: c.Incarnation, To: c.To})
	return b
}

// Members are the nodes a fleet's bucket holds a record of, written
// within nodeTTL of the server's clock and not leaving: the fleet's live
// nodes as a node about to join can tell them, with no watch of its own
// (a guess: a record's age is read on this node's clock against the
// server's write time). A fleet with no bucket yet has none.
func Members(ctx context.Context, nc *nats.Conn, fleetName string, nodeTTL time.Duration) ([]string, error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	kv, err := js.KeyValue(ctx, BucketPrefix+fleetName)
	if errors.Is(err, jetstream.ErrBucketNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	keys, err := kv.ListKeysFiltered(ctx, nodePrefix+"*")
	if err != nil {
		return nil, err
	}
	defer keys.Stop()
	var names []string
	for k := range keys.Keys() {
		e, err := kv.Get(ctx, k)
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			continue // left meanwhile
		}
		if err != nil {
			return nil, err
		}
		var rec nodeRecord
		if json.Unmarshal(e.Value(), &rec) != nil || rec.Leaving || time.Since(e.Created()) >= nodeTTL {
			continue
		}
		names = append(names, strings.TrimPrefix(k, nodePrefix))
	}
	return names, nil
}
