package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm/internal/meter"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// callState is what the host imports need during one call into a guest; it
// travels in the call's context (host functions are shared by every
// instance of the runtime).
type callState struct {
	fold    fold.Reader // the committed fold, for read
	resp    []byte      // pending read response, for read_result
	logger  *slog.Logger
	logs    *logLimiter // the runtime's, shared by its instances
	module  string
	maxResp int // a read's response must fit the guest's memory limit

	// Metering (hostYield): the call's deadline (zero: none), and the
	// allowance of checks between yields, adapted to keep yields about
	// yieldEvery apart.
	deadline  time.Time
	lastYield time.Time
	allowance uint32
}

type callKey struct{}

func stateOf(ctx context.Context) *callState {
	s, _ := ctx.Value(callKey{}).(*callState)
	return s
}

func withCallState(ctx context.Context, st *callState) context.Context {
	return context.WithValue(ctx, callKey{}, st)
}

func (r *Runtime) newCallState(module string) *callState {
	return &callState{logger: r.opts.Logger, logs: r.logs, module: module, allowance: minAllowance,
		maxResp: int(min(uint64(r.opts.MemoryLimitPages)*65536, 1<<31))}
}

// start begins a call bounded by timeout (0: none).
func (s *callState) start(timeout time.Duration) {
	now := time.Now()
	s.lastYield = now
	s.deadline = time.Time{}
	if timeout > 0 {
		s.deadline = now.Add(timeout)
	}
}

// Metering: a guest yields after every allowance of loop heads and calls
// (package meter). The allowance adapts so yields come about yieldEvery
// apart: often enough that a stop-the-world (a GC) waits at most about that
// long for a guest, and a deadline is overrun by at most about that; rarely
// enough to cost nothing measurable (RATIONALE.md, "Guest containment").
const (
	yieldEvery   = time.Millisecond
	minAllowance = 1 << 10
	maxAllowance = 1 << 26
)

// errDeadline ends a guest call that ran past Options.CallTimeout.
var errDeadline = errors.New("plugin call ran past its deadline")

// checkDeadline ends the call (a panic wazero turns into the call's error)
// when its context is done or its deadline passed; it returns the time.
func (s *callState) checkDeadline(ctx context.Context) time.Time {
	if err := ctx.Err(); err != nil {
		panic(fmt.Errorf("plugin call cancelled: %w", err))
	}
	now := time.Now()
	if !s.deadline.IsZero() && now.After(s.deadline) {
		panic(errDeadline)
	}
	return now
}

// hostYield is the meter's import: it ends the call when its deadline
// passed or its context is done, and otherwise returns the next allowance.
// Being Go code, it is also where the scheduler can preempt the guest's
// goroutine.
func hostYield(ctx context.Context, _ api.Module, stack []uint64) {
	st := stateOf(ctx)
	if st == nil { // a call the host did not prepare: yield often
		if err := ctx.Err(); err != nil {
			panic(fmt.Errorf("plugin call cancelled: %w", err))
		}
		stack[0] = minAllowance
		return
	}
	now := st.checkDeadline(ctx)
	// Scale the allowance by how far the last one was from yieldEvery,
	// at most 2x per step: a loop whose body cost changes settles quickly
	// without one odd interval swinging it far.
	elapsed := now.Sub(st.lastYield)
	st.lastYield = now
	a := uint64(st.allowance)
	switch {
	case elapsed < yieldEvery/2:
		a *= 2
	case elapsed > yieldEvery*2:
		a /= 2
	}
	st.allowance = uint32(min(max(a, minAllowance), maxAllowance))
	stack[0] = uint64(st.allowance)
}

// errAbort is how AssemblyScript's env.abort ends a call.
var errAbort = errors.New("guest called abort")

func installHost(ctx context.Context, rt wazero.Runtime) error {
	_, err := rt.NewHostModuleBuilder(meter.ImportModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(hostYield), nil, []api.ValueType{api.ValueTypeI32}).
		Export(meter.ImportName).Instantiate(ctx)
	if err != nil {
		return fmt.Errorf("wasm: meter module: %w", err)
	}
	_, err = rt.NewHostModuleBuilder(abi.ImportModule).
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
	// Long reads honour the deadline like guest code does, checked between
	// every two keys looked up: a lookup (a pebble seek, a disk read on a
	// cold cache) dwarfs the check, and a check every N keys let a read of
	// fewer than N slow keys run past the deadline by all of them
	// (TestLongReadHonoursTheCallDeadline).
	resp, err := answerRead(st.fold, space, req, st.resp[:0], st.maxResp, func() { st.checkDeadline(ctx) })
	st.resp = resp
	if err != nil {
		st.logger.Warn("wasm: plugin read failed", "module", st.module, "err", err)
		return -1
	}
	return int32(len(resp))
}

// answerRead appends to resp the answer to a batched read request of the
// fold (abi's read encodings) in space, calling each before every key. A
// request is bounded by guest memory, but its answer is not (one large
// value asked for many times): it must stay within maxResp, the guest's
// memory limit, where read_result will copy it.
func answerRead(r fold.Reader, space uint32, req, resp []byte, maxResp int, each func()) ([]byte, error) {
	if br, ok := r.(fold.ViewBatchReader); ok && space == abi.SpaceView {
		return answerViewBatch(br, req, resp, maxResp, each)
	}
	err := abi.DecodeReadRequest(req, func(key []byte) error {
		if len(resp) > maxResp {
			return fmt.Errorf("response over %d bytes, the plugin's memory limit", maxResp)
		}
		each()
		if space == abi.SpaceView {
			v, found, err := r.ViewGet(key)
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
		e, found, err := r.Get(string(key))
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
	return resp, err
}

// answerViewBatch is answerRead of view keys through one batched read.
func answerViewBatch(br fold.ViewBatchReader, req, resp []byte, maxResp int, each func()) ([]byte, error) {
	var keys [][]byte
	if err := abi.DecodeReadRequest(req, func(key []byte) error {
		keys = append(keys, key)
		return nil
	}); err != nil {
		return resp, err
	}
	vals := make([][]byte, len(keys))
	found := make([]bool, len(keys))
	size := len(resp)
	if err := br.ViewGetBatch(keys, func(i int, v []byte, ok bool) error {
		each() // as answerRead: between the lookups
		if size += len(v) + 8; size > maxResp {
			return fmt.Errorf("response over %d bytes, the plugin's memory limit", maxResp)
		}
		vals[i], found[i] = v, ok
		return nil
	}); err != nil {
		return resp, err
	}
	for i := range keys {
		if found[i] {
			resp = abi.AppendReadHit(resp, vals[i])
		} else {
			resp = abi.AppendReadMiss(resp)
		}
	}
	return resp, nil
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
	st.logGuest(ctx, slog.Level(level), msg)
}

func hostAbort(ctx context.Context, m api.Module, msg, file, line, col uint32) {
	panic(fmt.Errorf("%w at %d:%d", errAbort, line, col))
}
