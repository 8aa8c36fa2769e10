package wasm

import (
	"context"
	"math"

	foldhost "github.com/foldhost/foldhost/abi/sdk/go"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
)

// NativePlugin is a Go SDK plugin run as ordinary Go code of the host's
// process (foldhost.Native) behind the fold.Plugin interface: the same
// work as its WASM build, the same encodings at the boundary (the batch
// record in, view and raw reads through the host's read protocol, the output
// record out), without the module. It is the baseline of the benchmarks
// (the example router's), never a way to run a user's plugin: nothing
// contains it.
type NativePlugin[R any] struct {
	n     *foldhost.Native[R]
	enc   abi.BatchEncoder
	fold  fold.Reader
	resp  []byte
	views []fold.ViewMutation
	effs  []fold.Effect
}

// NewNative runs pl natively.
func NewNative[R any](pl foldhost.Plugin[R]) *NativePlugin[R] {
	p := &NativePlugin[R]{}
	p.n = foldhost.NewNative[R](pl, func(space uint32, req []byte) ([]byte, bool) {
		var err error
		p.resp, err = answerRead(p.fold, space, req, p.resp[:0], math.MaxInt, func() {})
		return p.resp, err == nil
	})
	return p
}

// Apply folds batch as the module would.
func (p *NativePlugin[R]) Apply(_ context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	p.enc.Reset()
	for i := range batch {
		u := &batch[i]
		p.enc.Add(opOf(u.Op), uint64(u.Rev), u.Time, u.Key, u.Value)
	}
	p.fold = r
	out := p.n.Apply(p.enc.Bytes())
	p.fold = nil
	p.views, p.effs = p.views[:0], p.effs[:0]
	rejected, err := abi.DecodeOutputEffects(out, -1, func(op byte, key, value []byte) error {
		m := fold.ViewMutation{Op: fold.ViewPut, Key: key, Value: value} // out stays valid until the next Apply
		if op == abi.MutDelete {
			m.Op = fold.ViewDelete
		}
		p.views = append(p.views, m)
		return nil
	}, func(e *abi.Effect) error {
		rev, err := updateRevOf(batch, e)
		if err != nil {
			return err
		}
		fe := fold.Effect{UpdateRev: rev, Subject: string(e.Subject), Payload: e.Payload} // the payload aliases out too
		for _, h := range e.Headers {
			fe.Headers = append(fe.Headers, fold.EffectHeader{Name: string(h.Name), Value: string(h.Value)})
		}
		p.effs = append(p.effs, fe)
		return nil
	})
	if err != nil {
		return fold.Output{}, err
	}
	return fold.Output{Views: p.views, Rejected: rejected, Effects: p.effs}, nil
}
