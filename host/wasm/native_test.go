package wasm

import (
	"context"
	"math"

	foldhost "github.com/foldhost/foldhost/abi/sdk/go"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/plugins/example-router/go/router"
)

// nativeRouter is the example router's Go code run natively as a
// fold.Plugin (foldhost.Native): the same work as its WASM builds, the
// same encodings at the boundary, without the module. It is the baseline
// of the WASM benchmarks.
type nativeRouter struct {
	n     *foldhost.Native[router.Record]
	enc   abi.BatchEncoder
	fold  fold.Reader
	resp  []byte
	views []fold.ViewMutation
}

var _ fold.Plugin = (*nativeRouter)(nil)

func newNativeRouter() *nativeRouter {
	p := &nativeRouter{}
	p.n = foldhost.NewNative[router.Record](&router.Router{}, func(req []byte) ([]byte, bool) {
		var err error
		p.resp, err = answerRead(p.fold, abi.SpaceView, req, p.resp[:0], math.MaxInt, func() {})
		return p.resp, err == nil
	})
	return p
}

func (p *nativeRouter) Apply(_ context.Context, batch []fold.Update, r fold.Reader) (fold.Output, error) {
	p.enc.Reset()
	for i := range batch {
		u := &batch[i]
		p.enc.Add(opOf(u.Op), uint64(u.Rev), u.Time, u.Key, u.Value)
	}
	p.fold = r
	out := p.n.Apply(p.enc.Bytes())
	p.fold = nil
	p.views = p.views[:0]
	rejected, err := abi.DecodeOutput(out, func(op byte, key, value []byte) error {
		m := fold.ViewMutation{Op: fold.ViewPut, Key: key, Value: value} // out stays valid until the next Apply
		if op == abi.MutDelete {
			m.Op = fold.ViewDelete
		}
		p.views = append(p.views, m)
		return nil
	})
	if err != nil {
		return fold.Output{}, err
	}
	return fold.Output{Views: p.views, Rejected: rejected}, nil
}
