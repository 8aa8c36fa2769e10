package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// callState is what the host imports need during one call into a guest; it
// travels in the call's context (host functions are shared by every
// instance of the runtime).
type callState struct {
	fold   fold.Reader // the committed fold, for read
	resp   []byte      // pending read response, for read_result
	logger *slog.Logger
	module string
}

type callKey struct{}

func stateOf(ctx context.Context) *callState {
	s, _ := ctx.Value(callKey{}).(*callState)
	return s
}

// errAbort is how AssemblyScript's env.abort ends a call.
var errAbort = errors.New("guest called abort")

func installHost(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(abi.ImportModule).
		NewFunctionBuilder().WithFunc(hostRead).Export(abi.ImportRead).
		NewFunctionBuilder().WithFunc(hostReadResult).Export(abi.ImportReadResult).
		NewFunctionBuilder().WithFunc(hostLog).Export(abi.ImportLog).
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("wasm: host module: %w", err)
	}
	_, err = rt.NewHostModuleBuilder("env").
		NewFunctionBuilder().WithFunc(hostAbort).Export("abort").
		Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("wasm: env module: %w", err)
	}
	return nil
}

// hostRead answers a batched read: returns the response length, or -1.
func hostRead(ctx context.Context, m api.Module, space, ptr, n uint32) int32 {
	st := stateOf(ctx)
	req, ok := m.Memory().Read(ptr, n)
	if st == nil || st.fold == nil || !ok || (space != abi.SpaceView && space != abi.SpaceRaw) {
		return -1
	}
	resp := st.resp[:0]
	err := abi.DecodeReadRequest(req, func(key []byte) error {
		if space == abi.SpaceView {
			v, found, err := st.fold.ViewGet(key)
			if err != nil {
				return err
			}
			if found {
				resp = abi.AppendReadHit(resp, v)
			} else {
				resp = abi.AppendReadMiss(resp)
			}
			return nil
		}
		e, found, err := st.fold.Get(string(key))
		if err != nil {
			return err
		}
		if found {
			resp = abi.AppendReadRawHit(resp, uint64(e.Rev), e.Value)
		} else {
			resp = abi.AppendReadMiss(resp)
		}
		return nil
	})
	st.resp = resp
	if err != nil {
		st.logger.Warn("wasm: plugin read failed", "module", st.module, "err", err)
		return -1
	}
	return int32(len(resp))
}

func hostReadResult(ctx context.Context, m api.Module, dst uint32) {
	st := stateOf(ctx)
	if st == nil {
		panic(errors.New("read_result outside a call"))
	}
	if !m.Memory().Write(dst, st.resp) {
		panic(fmt.Errorf("read_result: %d bytes at %d are outside memory", len(st.resp), dst))
	}
}

func hostLog(ctx context.Context, m api.Module, level int32, ptr, n uint32) {
	st := stateOf(ctx)
	msg, ok := m.Memory().Read(ptr, n)
	if st == nil || !ok {
		return
	}
	st.logger.Log(ctx, slog.Level(level), string(msg), "plugin", st.module)
}

func hostAbort(ctx context.Context, m api.Module, msg, file, line, col uint32) {
	panic(fmt.Errorf("%w at %d:%d", errAbort, line, col))
}
