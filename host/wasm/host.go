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
	fold PointReader // the committed fold (an apply's) or a snapshot (a query's), for read
	// snap is the snapshot a query reads, for range; nil in an apply
	// (range is refused there: the SDKs' overlay of the batch's own
	// writes covers point reads only).
	snap     RangeReader
	rangeBuf []byte // a range answer's entries, reused
	resp     []byte // pending read response, for read_result
	logger   *slog.Logger
	logs     *logLimiter // the runtime's, shared by its instances
	module   string
	maxResp  int // a read's response must fit the guest's memory limit

	// Read bounds (Options.MaxReadBytes, MaxCallReadBytes), and the bytes
	// answered since the call started.
	maxRead, maxCallRead, callRead int

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
		maxResp: int(min(uint64(r.opts.MemoryLimitPages)*65536, 1<<31)),
		maxRead: r.opts.MaxReadBytes, maxCallRead: r.opts.MaxCallReadBytes}
}

// start begins a call bounded by timeout (0: none).
func (s *callState) start(timeout time.Duration) {
	now := time.Now()
	s.lastYield = now
	s.callRead = 0
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
	now, err := s.expired(ctx)
	if err != nil {
		panic(err)
	}
	return now
}

// expired is checkDeadline's verdict, without the panic (for a check made
// where a panic would skip cleanup: inside a store iteration).
func (s *callState) expired(ctx context.Context) (time.Time, error) {
	if err := ctx.Err(); err != nil {
		return time.Time{}, fmt.Errorf("plugin call cancelled: %w", err)
	}
	now := time.Now()
	if !s.deadline.IsZero() && now.After(s.deadline) {
		return now, errDeadline
	}
	return now, nil
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
		NewFunctionBuilder().WithFunc(hostRange).Export(abi.ImportRange).
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
// An answer over a read bound ends the call with a *LimitError (the host
// never holds more than the bound of it).
func hostRead(ctx context.Context, m api.Module, space, ptr, n uint32) int32 {
	st := stateOf(ctx)
	req, ok := m.Memory().Read(ptr, n)
	if st == nil || st.fold == nil || !ok || (space != abi.SpaceView && space != abi.SpaceRaw) {
		return -1
	}
	limit := min(st.maxRead, st.maxResp, st.maxCallRead-st.callRead)
	// Long reads honour the deadline like guest code does, checked between
	// every two keys looked up: a lookup (a pebble seek, a disk read on a
	// cold cache) dwarfs the check, and a check every N keys let a read of
	// fewer than N slow keys run past the deadline by all of them
	// (TestLongReadHonoursTheCallDeadline).
	resp, err := answerRead(st.fold, space, req, st.resp[:0], limit, func() { st.checkDeadline(ctx) })
	st.resp = resp
	var big *errAnswerTooLarge
	if errors.As(err, &big) {
		st.resp = nil // not kept: the bound applies to what stays, too
		panic(st.readLimitError(big.size))
	}
	var rr *ReadRefusal
	if errors.As(err, &rr) {
		panic(rr)
	}
	if err != nil {
		st.logger.Warn("wasm: plugin read failed", "module", st.module, "err", err)
		return -1
	}
	st.callRead += len(resp)
	return int32(len(resp))
}

// PointReader is what the read import reads: raw entries by NATS key and
// view keys ([fold.Reader] has both).
type PointReader interface {
	Get(key string) (fold.Entry, bool, error)
	ViewGet(key []byte) ([]byte, bool, error)
}

// RangeReader is what a query's range reads: a fold snapshot's views
// ([fold.Snapshot.ViewScan]).
type RangeReader interface {
	ViewScan(start, end []byte, reverse bool, fn func(key, value []byte) error) error
}

// LimitedRangeReader is a RangeReader told how many entries a range will
// take at most: the plugin's limit, and one more whose key and value are
// not used (it only says more follow). A reader whose entries cost a
// round trip (a partition read on another node) need fetch no more.
type LimitedRangeReader interface {
	ViewScanLimit(start, end []byte, reverse bool, limit int, fn func(key, value []byte) error) error
}

// CallClock is a QueryReader told when the query's call starts, with its
// deadline (zero: none): a reader whose reads wait on the network bounds
// them by it (the time spent waiting for a query instance is not the
// call's).
type CallClock interface {
	CallStarted(deadline time.Time)
}

// QueryReader is what a query reads: one fold snapshot, or several
// partitions' snapshots read as one fold.
type QueryReader interface {
	PointReader
	RangeReader
}

// ReadRefusal is a reader's error that ends the call rather than failing
// one read: the plugin could not tell a failed read from a missing key,
// and its answer would be wrong (a view key that several partitions hold,
// read as one fold). The call fails with a *PluginError of KindRefused.
type ReadRefusal struct{ Err error }

func (e *ReadRefusal) Error() string { return e.Err.Error() }
func (e *ReadRefusal) Unwrap() error { return e.Err }

// errRangeStop ends a range scan early (its limit, or its size bound).
var errRangeStop = errors.New("range answered")

// hostRange answers a range request of a query (ABI minor 2): returns the
// answer's length for read_result, or -1 (a bad request, a space other
// than the views, or a call that is not a query). The answer stops before
// an entry that would take it past the read bounds, saying more; an
// entry that does not fit alone ends the call with a *LimitError, as a
// read's answer does.
func hostRange(ctx context.Context, m api.Module, space, ptr, n uint32) int32 {
	st := stateOf(ctx)
	req, ok := m.Memory().Read(ptr, n)
	if st == nil || st.snap == nil || !ok || space != abi.SpaceView {
		return -1
	}
	flags, limit, start, end, err := abi.DecodeRangeRequest(req)
	if err != nil {
		return -1
	}
	bound := min(st.maxRead, st.maxResp, st.maxCallRead-st.callRead)
	body, count, more, tooBig := st.rangeBuf[:0], uint32(0), false, 0
	var stop error // a deadline or cancellation met inside the scan
	scan := st.snap.ViewScan
	if lr, ok := st.snap.(LimitedRangeReader); ok {
		n := int(limit) + 1 // the one past the limit says "more"
		scan = func(start, end []byte, reverse bool, fn func(k, v []byte) error) error {
			return lr.ViewScanLimit(start, end, reverse, n, fn)
		}
	}
	err = scan(start, end, flags&abi.RangeReverse != 0, func(k, v []byte) error {
		if count == limit {
			more = true
			return errRangeStop
		}
		// The deadline as a read's, but every 32 keys: a scan's next key
		// is a step of an iterator, not a seek, and the clock read cost
		// as much as the step (12% of a range-heavy query's time).
		if count%32 == 0 {
			if _, stop = st.expired(ctx); stop != nil {
				return errRangeStop
			}
		}
		if size := 5 + len(body) + abi.RangeEntrySize(k, v); size > bound {
			if count == 0 {
				tooBig = size
			}
			more = true
			return errRangeStop
		}
		body = abi.AppendRangeEntry(body, k, v)
		count++
		return nil
	})
	st.rangeBuf = body
	switch {
	case stop != nil:
		panic(stop)
	case tooBig > 0:
		st.resp = nil
		panic(st.readLimitError(tooBig))
	case errors.As(err, new(*ReadRefusal)):
		panic(err)
	case err != nil && !errors.Is(err, errRangeStop):
		st.logger.Warn("wasm: plugin range read failed", "module", st.module, "err", err)
		return -1
	}
	st.resp = abi.AppendRangeAnswer(st.resp[:0], more, count, body)
	st.callRead += len(st.resp)
	return int32(len(st.resp))
}

// readLimitError names the read bound an answer of size bytes crossed:
// the tightest of the three.
func (st *callState) readLimitError(size int) *LimitError {
	switch {
	case st.maxCallRead-st.callRead < min(st.maxRead, st.maxResp):
		return &LimitError{What: "the read answers of one call", Size: int64(st.callRead + size), Limit: int64(st.maxCallRead),
			Unit: "bytes", Key: KeyMaxCallRead}
	case st.maxResp < st.maxRead:
		return &LimitError{What: "a read's answer", Size: int64(size), Limit: int64(st.maxResp), Unit: "bytes", Key: "plugin_memory_mb"}
	}
	return &LimitError{What: "a read's answer", Size: int64(size), Limit: int64(st.maxRead), Unit: "bytes", Key: KeyMaxRead}
}

// errAnswerTooLarge: a read's answer would pass maxResp; size is what it
// had reached, at least.
type errAnswerTooLarge struct{ size int }

func (e *errAnswerTooLarge) Error() string { return fmt.Sprintf("read answer over %d bytes", e.size) }

// answerRead appends to resp the answer to a batched read request of the
// fold (abi's read encodings) in space, calling each before every key. A
// request is bounded by guest memory, but its answer is not (one large
// value asked for many times): an answer that would pass maxResp bytes
// stops at the entry that would pass it, with an *errAnswerTooLarge.
func answerRead(r PointReader, space uint32, req, resp []byte, maxResp int, each func()) ([]byte, error) {
	if br, ok := r.(fold.ViewBatchReader); ok && space == abi.SpaceView {
		return answerViewBatch(br, req, resp, maxResp, each)
	}
	err := abi.DecodeReadRequest(req, func(key []byte) error {
		each()
		if space == abi.SpaceView {
			v, found, err := r.ViewGet(key)
			if err != nil {
				return err
			}
			if !found {
				return fits(&resp, abi.AppendReadMiss, 1, maxResp)
			}
			if err := fits(&resp, nil, 5+len(v), maxResp); err != nil {
				return err
			}
			resp = abi.AppendReadHit(resp, v)
			return nil
		}
		e, found, err := r.Get(string(key))
		if err != nil {
			return err
		}
		if !found {
			return fits(&resp, abi.AppendReadMiss, 1, maxResp)
		}
		if err := fits(&resp, nil, 13+len(e.Value), maxResp); err != nil {
			return err
		}
		resp = abi.AppendReadRawHit(resp, uint64(e.Rev), e.Value)
		return nil
	})
	return resp, err
}

// fits reports an *errAnswerTooLarge when n more bytes would take resp
// past maxResp; otherwise it appends with add, if given.
func fits(resp *[]byte, add func([]byte) []byte, n, maxResp int) error {
	if len(*resp)+n > maxResp {
		return &errAnswerTooLarge{size: len(*resp) + n}
	}
	if add != nil {
		*resp = add(*resp)
	}
	return nil
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
		n := 1
		if ok {
			n = 5 + len(v)
		}
		if size += n; size > maxResp {
			return &errAnswerTooLarge{size: size}
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
