package wasm

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"

	"github.com/foldhost/foldhost/abi"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/sys"
)

// instance is one running copy of a module.
type instance struct {
	mod              api.Module
	m                *Module
	alloc, apply, gc api.Function
	query, queryList api.Function // nil without queries (ABI minor 2)
	stack            [2]uint64
	stderr           *tail // stdout and stderr's last bytes, for errors
	outputs          [2]*guestOutput
	batches          int
	memLimit         uint32
	marker, info     api.Function
}

// tail keeps the last bytes written to it.
type tail struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 2048

func (t *tail) Write(p []byte) (int, error) {
	n := len(p)
	if n > tailMax {
		p = p[n-tailMax:] // what a guest writes at once is never copied whole
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, p...)
	if len(t.buf) > tailMax {
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-tailMax:]...)
	}
	return n, nil
}

func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(string(t.buf))
}

func (r *Runtime) instantiate(ctx context.Context, m *Module) (*instance, error) {
	if m.compiled == nil {
		return nil, errors.New("the module was closed (a Plugin owns its Module: load one per Plugin)")
	}
	errTail := &tail{}
	out := &guestOutput{tail: errTail, logger: r.opts.Logger, logs: r.logs, module: m.Short(), stream: "stdout", level: slog.LevelInfo}
	errOut := &guestOutput{tail: errTail, logger: r.opts.Logger, logs: r.logs, module: m.Short(), stream: "stderr", level: slog.LevelWarn}
	cfg := wazero.NewModuleConfig().
		WithName(""). // anonymous: any number of instances
		WithStderr(errOut).
		WithStdout(out)
	if _, ok := m.compiled.ExportedFunctions()[abi.ExportInitialize]; ok {
		cfg = cfg.WithStartFunctions(abi.ExportInitialize)
	} else {
		cfg = cfg.WithStartFunctions()
	}
	mod, err := r.rt.InstantiateModule(experimental.WithMemoryAllocator(ctx, r.memory), m.compiled, cfg)
	if err != nil {
		out.flush()
		errOut.flush()
		if s := errTail.String(); s != "" {
			err = fmt.Errorf("%w; stderr: %s", err, s)
		}
		return nil, err
	}
	return &instance{
		mod:       mod,
		m:         m,
		alloc:     mod.ExportedFunction(abi.ExportAlloc),
		apply:     mod.ExportedFunction(abi.ExportApply),
		gc:        mod.ExportedFunction(abi.ExportGC),
		query:     mod.ExportedFunction(abi.ExportQuery),
		queryList: mod.ExportedFunction(abi.ExportQueries),
		marker:    mod.ExportedFunction(abi.Marker),
		info:      mod.ExportedFunction(abi.ExportInfo),
		stderr:    errTail,
		outputs:   [2]*guestOutput{out, errOut},
		memLimit:  r.opts.MemoryLimitPages,
	}, nil
}

func (in *instance) close(ctx context.Context) {
	_ = in.mod.Close(ctx)
	for _, o := range in.outputs {
		o.flush()
	}
}

// call runs fn with the instance's reusable stack; the result is stack[0].
func (in *instance) call(ctx context.Context, fn api.Function, arg uint64) (uint64, error) {
	in.stack[0] = arg
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return 0, in.classify(err)
	}
	return in.stack[0], nil
}

// call2 runs fn with two arguments; the result is stack[0].
func (in *instance) call2(ctx context.Context, fn api.Function, a, b uint64) (uint64, error) {
	in.stack[0], in.stack[1] = a, b
	if err := fn.CallWithStack(ctx, in.stack[:]); err != nil {
		return 0, in.classify(err)
	}
	return in.stack[0], nil
}

// queries calls the foldhost_queries export and decodes its list.
func (in *instance) queries(ctx context.Context) ([]abi.Query, error) {
	packed, err := in.call(ctx, in.queryList, 0)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abi.ExportQueries, err)
	}
	b, err := in.read(packed)
	if err != nil {
		return nil, err
	}
	qs, err := abi.DecodeQueries(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", abi.ExportQueries, err)
	}
	return qs, nil
}

// describe calls the marker and info exports.
func (in *instance) describe(ctx context.Context) (uint32, abi.Info, error) {
	minor, err := in.call(ctx, in.marker, 0)
	if err != nil {
		return 0, abi.Info{}, fmt.Errorf("%s: %w", abi.Marker, err)
	}
	packed, err := in.call(ctx, in.info, 0)
	if err != nil {
		return 0, abi.Info{}, fmt.Errorf("%s: %w", abi.ExportInfo, err)
	}
	b, err := in.read(packed)
	if err != nil {
		return 0, abi.Info{}, err
	}
	info, err := abi.DecodeInfo(b)
	if err != nil {
		return 0, abi.Info{}, fmt.Errorf("%s: %w", abi.ExportInfo, err)
	}
	return uint32(minor), info, nil
}

// read returns the guest bytes a packed pointer/length names (aliasing
// guest memory: valid until the next call into the guest).
func (in *instance) read(packed uint64) ([]byte, error) {
	ptr, n := abi.Unpack(packed)
	b, ok := in.mod.Memory().Read(ptr, n)
	if !ok {
		return nil, &PluginError{Kind: KindMalformed, Module: in.m.Short(),
			Err: fmt.Errorf("output at %d+%d is outside memory (%d bytes)", ptr, n, in.mod.Memory().Size())}
	}
	return b, nil
}

// write copies the batch into the guest's input buffer.
func (in *instance) write(ctx context.Context, batch []byte) error {
	ptr, err := in.call(ctx, in.alloc, uint64(len(batch)))
	if err != nil {
		return err
	}
	if uint32(ptr) == 0 || !in.mod.Memory().Write(uint32(ptr), batch) {
		return &PluginError{Kind: KindOOM, Module: in.m.Short(),
			Err: fmt.Errorf("%s(%d) returned no usable buffer (%#x)", abi.ExportAlloc, len(batch), uint32(ptr)), Stderr: in.stderr.String()}
	}
	return nil
}

// classify turns a wazero call error into a *PluginError.
func (in *instance) classify(err error) error {
	pe := &PluginError{Kind: KindTrap, Module: in.m.Short(), Err: err, Stderr: in.stderr.String()}
	var exit *sys.ExitError
	var le *LimitError
	var rr *ReadRefusal
	switch {
	case errors.Is(err, errDeadline), errors.As(err, &exit) && exit.ExitCode() == sys.ExitCodeDeadlineExceeded:
		pe.Kind = KindTimeout
	case errors.As(err, &le):
		pe.Kind, pe.Err = KindLimit, le // the limit, not wazero's stack trace of the read
	case errors.As(err, &rr):
		pe.Kind, pe.Err = KindRefused, rr
	case in.outOfMemory():
		pe.Kind = KindOOM
	}
	return pe
}

// outOfMemory: the guest used (nearly) all memory it may have.
func (in *instance) outOfMemory() bool {
	const page = 65536
	mem := in.mod.Memory()
	if mem == nil {
		return false
	}
	size := uint64(mem.Size())
	return size+4*page > uint64(in.memLimit)*page || strings.Contains(in.stderr.String(), "out of memory")
}
