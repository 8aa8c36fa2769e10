package fleet

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// entryFake is a KV entry as a watch delivers it, made here to deliver
// one the server showed in a run: a record of this node's name from an
// earlier process, after this process's own.
type entryFake struct {
	key string
	val []byte
	rev uint64
}

func (e entryFake) Bucket() string                  { return BucketPrefix + "t" }
func (e entryFake) Key() string                     { return e.key }
func (e entryFake) Value() []byte                   { return e.val }
func (e entryFake) Revision() uint64                { return e.rev }
func (e entryFake) Created() time.Time              { return time.Time{} }
func (e entryFake) Delta() uint64                   { return 0 }
func (e entryFake) Operation() jetstream.KeyValueOp { return jetstream.KeyValuePut }

// TestFleetIgnoresAnEarlierProcessesRecord: a watch that shows a record
// of this node's name written by another process before this one's own
// (an earlier process of the node, delivered late by a consumer on a
// replica catching up after a server restart: seen in
// TestFleetStreamLeaderKilledMidClaim) is history; one written after
// this process's record is a second process under the name
// (ErrSuperseded). Mutation caught: the revision not compared (the
// restarted node took its own old record for a usurper and stopped
// folding anything).
func TestFleetIgnoresAnEarlierProcessesRecord(t *testing.T) {
	f := &Fleet{o: Options{Node: "n1"}, log: testLogger, inc: "new", myRev: 50, nodes: map[string]*seenNode{}}
	old, _ := json.Marshal(nodeRecord{Node: "n1", Incarnation: "old"})
	if err := f.apply(entryFake{key: nodeKey("n1"), val: old, rev: 40}); err != nil {
		t.Fatalf("an earlier process's record (revision 40, this one's 50): %v, want it ignored", err)
	}
	if err := f.apply(entryFake{key: nodeKey("n1"), val: old, rev: 60}); !errors.Is(err, ErrSuperseded) {
		t.Fatalf("another process's record after this one's (revision 60): %v, want ErrSuperseded", err)
	}
}
