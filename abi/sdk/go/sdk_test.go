package foldhost

import (
	"fmt"
	"testing"

	"github.com/foldhost/foldhost/abi"
)

// countPlugin is the smallest plugin: it keeps every put and writes one view
// key per update.
type countPlugin struct{}

type rec struct {
	key []byte
	del bool
}

func (countPlugin) Info() abi.Info { return abi.Info{Name: "count"} }

func (countPlugin) Parse(u *Update, r *rec) bool {
	if len(u.Key) == 0 {
		return false
	}
	r.key = append(r.key[:0], u.Key...)
	r.del = u.Removes()
	return true
}

func (countPlugin) Apply(b *Batch, recs []rec) error {
	for i := range recs {
		if recs[i].del {
			b.Delete(recs[i].key)
		} else {
			b.Put(recs[i].key, recs[i].key)
		}
	}
	return nil
}

// TestSDKPathDoesNotAllocatePerUpdate runs the SDK's decode -> Parse ->
// Apply -> encode path natively and requires at most one allocation per
// batch (the Update handed to Parse through an interface escapes), whatever
// the batch size, once its buffers are warm.
func TestSDKPathDoesNotAllocatePerUpdate(t *testing.T) {
	run := &typed[rec]{p: countPlugin{}}
	var enc abi.BatchEncoder
	enc.Reset()
	for i := range 500 {
		op := abi.OpPut
		if i%7 == 0 {
			op = abi.OpDelete
		}
		enc.Add(op, uint64(i+1), int64(i), "route.host-"+string(rune('a'+i%26)), []byte(`{"upstreams":[]}`))
	}
	enc.Add(abi.OpPut, 999, 0, "", nil) // rejected
	batch := enc.Bytes()
	run.apply(batch) // warm up
	allocs := testing.AllocsPerRun(20, func() { run.apply(batch) })
	if allocs > 1 {
		t.Fatalf("%.1f allocations per 501-update batch, want at most 1", allocs)
	}
	rejected, err := abi.DecodeOutput(run.last, func(byte, []byte, []byte) error { return nil })
	if err != nil || rejected != 1 {
		t.Fatalf("output: rejected %d err %v", rejected, err)
	}
}

func TestSDKReportsPluginErrorsAndBadBatches(t *testing.T) {
	run := &typed[rec]{p: countPlugin{}}
	run.apply([]byte{1, 0, 0, 0}) // declares one update, has none
	_, err := abi.DecodeOutput(run.last, func(byte, []byte, []byte) error { return nil })
	var ge *abi.GuestError
	if err == nil || !asGuest(err, &ge) {
		t.Fatalf("malformed batch: %v", err)
	}
}

func asGuest(err error, target **abi.GuestError) bool {
	ge, ok := err.(*abi.GuestError)
	if ok {
		*target = ge
	}
	return ok
}

// emitPlugin emits one effect per update besides countPlugin's view.
type emitPlugin struct{ countPlugin }

var emitHeader = abi.Header{Name: []byte("Op"), Value: []byte("put")}

func (p emitPlugin) Apply(b *Batch, recs []rec) error {
	for i := range recs {
		b.Put(recs[i].key, recs[i].key)
		b.Emit([]byte("changed"), recs[i].key, emitHeader)
	}
	return nil
}

// TestSDKEmitsEffects: Batch.Emit puts its effects, in order, after the
// view mutations of a status-2 record, without allocating per update once
// warm; a batch that emits none is a status-0 record again.
func TestSDKEmitsEffects(t *testing.T) {
	run := &typed[rec]{p: emitPlugin{}}
	var enc abi.BatchEncoder
	enc.Reset()
	for i := range 100 {
		enc.Add(abi.OpPut, uint64(i+1), 0, "k"+string(rune('a'+i%26)), nil)
	}
	batch := enc.Bytes()
	run.apply(batch)
	if allocs := testing.AllocsPerRun(20, func() { run.apply(batch) }); allocs > 1 {
		t.Fatalf("%.1f allocations per batch, want at most 1", allocs)
	}
	var muts, effs int
	_, err := abi.DecodeOutputEffects(run.last, -1, func(byte, []byte, []byte) error { muts++; return nil }, func(e *abi.Effect) error {
		if want := "k" + string(rune('a'+effs%26)); string(e.Subject) != "changed" || string(e.Payload) != want ||
			len(e.Headers) != 1 || string(e.Headers[0].Name) != "Op" || string(e.Headers[0].Value) != "put" {
			t.Fatalf("effect %d: %q %q %q, want payload %q", effs, e.Subject, e.Headers, e.Payload, want)
		}
		effs++
		return nil
	})
	if err != nil || muts != 100 || effs != 100 {
		t.Fatalf("err %v, %d mutations, %d effects", err, muts, effs)
	}
	enc.Reset()
	enc.Add(abi.OpPut, 1, 0, "", nil) // rejected: nothing emitted
	run.apply(enc.Bytes())            // the same writer, after a batch with effects
	if st := run.last[0]; st != byte(abi.StatusOK) {
		t.Fatalf("status %d without effects, want 0", st)
	}
}

// emitForPlugin emits, for each record, an effect naming the record whose
// index is the record's key ("0", "1", ...; "x": one past the last).
type emitForPlugin struct{ countPlugin }

func (p emitForPlugin) Apply(b *Batch, recs []rec) error {
	for i := range recs {
		n := len(recs)
		if k := string(recs[i].key); k != "x" {
			n = int(k[0] - '0')
		}
		b.EmitFor(n, []byte("changed"), recs[i].key)
	}
	return nil
}

// TestSDKEmitForNamesTheUpdate: Batch.EmitFor names the update a record
// came from, counting the rejected updates Apply never saw, in a status-3
// record; a record Apply did not receive fails the batch, and so does one
// named after a later one (the writer's check). Mutation caught: the
// record's own index sent as the update's.
func TestSDKEmitForNamesTheUpdate(t *testing.T) {
	run := &typed[rec]{p: emitForPlugin{}}
	batch := func(keys ...string) []byte {
		var enc abi.BatchEncoder
		enc.Reset()
		for i, k := range keys {
			enc.Add(abi.OpPut, uint64(i+1), 0, k, nil)
		}
		return enc.Bytes()
	}
	// Updates 0 and 2 are rejected (empty keys): records 0, 1, 2 are
	// updates 1, 3, 4.
	run.apply(batch("", "0", "", "2", "2"))
	if st := run.last[0]; st != byte(abi.StatusOKUpdateEffects) {
		t.Fatalf("status %d, want %d", st, abi.StatusOKUpdateEffects)
	}
	var named []int
	if _, err := abi.DecodeOutputEffects(run.last, -1, func(byte, []byte, []byte) error { return nil }, func(e *abi.Effect) error {
		named = append(named, e.Update)
		return nil
	}); err != nil || fmt.Sprint(named) != "[1 4 4]" {
		t.Fatalf("effects name updates %v (%v), want [1 4 4]", named, err)
	}
	for name, keys := range map[string][]string{"past the records": {"0", "x"}, "decreasing": {"1", "0"}} {
		run.apply(batch(keys...))
		var ge *abi.GuestError
		if _, err := abi.DecodeOutput(run.last, func(byte, []byte, []byte) error { return nil }); !asGuest(err, &ge) {
			t.Errorf("%s: %v, want the batch failed", name, err)
		}
	}
}
