// Package foldhost is the Go guest SDK for foldhost plugins (ABI v1,
// abi/ABI.md). A plugin is a main package that registers a Plugin in init
// and is built with the standard toolchain:
//
//	GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared -o plugin.wasm .
//
// The SDK exports the ABI functions, decodes each batch in place, calls
// Parse per update and Apply once per batch, and encodes the output, without
// allocating per update on its own path once warmed up. Queries (ABI minor
// 2) are declared with RegisterQueries and read with a Query; IndexPut,
// IndexDelete and IndexScan keep secondary indexes. In a wasip1 build
// it turns the Go GC off (in reactor mode the collector stalls after ~100
// cycles because no goroutine runs between calls) and exports foldhost_gc,
// which the host calls between batches. Nothing of that is compiled into
// any other build: the host links this package for its native baseline
// (Native), and must keep its own collector.
package foldhost

import (
	"unsafe"

	"github.com/foldhost/foldhost/abi"
)

// Update is one KV update of the batch. Key and Value alias the host's input
// buffer: valid during Parse only; copy what a record keeps.
type Update struct {
	Op    byte // abi.OpPut, abi.OpDelete or abi.OpPurge
	Rev   uint64
	Time  int64 // server time, Unix nanoseconds
	Key   []byte
	Value []byte
}

// Removes reports whether the update removes its key (delete or purge).
func (u *Update) Removes() bool { return u.Op == abi.OpDelete || u.Op == abi.OpPurge }

// Plugin is a plugin's domain logic over records of type R.
type Plugin[R any] interface {
	// Info names the plugin (name, version, view schema).
	Info() abi.Info
	// Parse turns u into a record, writing *rec, which is reused across
	// batches (set every field you read later). false rejects u: it is
	// counted, never applied, and still covered by the cursor.
	Parse(u *Update, rec *R) bool
	// Apply turns the batch's records (in revision order) into view
	// mutations through b. An error fails the whole batch: nothing is
	// committed and the host reports the message.
	Apply(b *Batch, recs []R) error
}

type runner interface {
	apply(in []byte) uint64
}

var (
	active  runner
	inbuf   []byte
	infoBuf []byte
)

// Register makes p the plugin this module runs. Call it from main's init.
func Register[R any](p Plugin[R]) {
	active = &typed[R]{p: p}
	infoBuf = abi.AppendInfo(infoBuf[:0], p.Info())
}

func ptrOf(b []byte) uint32 {
	if len(b) == 0 {
		return 0
	}
	return uint32(uintptr(unsafe.Pointer(&b[0])))
}

func packed(b []byte) int64 { return int64(abi.Pack(ptrOf(b), uint32(len(b)))) }

// typed runs a Plugin[R]; its buffers are reused across batches.
type typed[R any] struct {
	p     Plugin[R]
	recs  []R
	batch Batch
	last  []byte // the last output record (for tests)
}

func (t *typed[R]) apply(in []byte) uint64 {
	out := t.run(in)
	return abi.Pack(ptrOf(out), uint32(len(out)))
}

// run decodes the batch in, parses and applies it, and returns the output
// record (valid until the next run).
func (t *typed[R]) run(in []byte) []byte {
	b := &t.batch
	b.reset()
	br := abi.NewBatchReader(in)
	t.recs = t.recs[:0]
	var u Update
	for i := uint32(0); br.Next(); i++ {
		d := br.Update()
		u = Update{Op: d.Op, Rev: d.Rev, Time: d.Time, Key: d.Key, Value: d.Value}
		if len(t.recs) < cap(t.recs) {
			t.recs = t.recs[:len(t.recs)+1]
		} else {
			var zero R
			t.recs = append(t.recs, zero)
		}
		if !t.p.Parse(&u, &t.recs[len(t.recs)-1]) {
			t.recs = t.recs[:len(t.recs)-1]
			b.out.Reject()
		} else {
			b.updates = append(b.updates, i)
		}
	}
	var out []byte
	if err := br.Err(); err != nil {
		out = b.out.Error("host sent a malformed batch: " + err.Error())
	} else if err := t.p.Apply(b, t.recs); err != nil {
		out = b.out.Error(err.Error())
	} else if b.misuse != "" {
		out = b.out.Error(b.misuse)
	} else {
		out = b.out.Bytes()
	}
	t.last = out
	return out
}
