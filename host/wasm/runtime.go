package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/foldhost/foldhost/host/fold"
	"github.com/foldhost/foldhost/host/wasm/internal/meter"
	"github.com/foldhost/foldhost/internal/files"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/experimental"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Options configures a Runtime. The zero value takes the defaults.
type Options struct {
	// CacheDir holds compiled modules across restarts; "" keeps them in
	// memory only.
	CacheDir string
	// MemoryLimitPages caps a plugin's linear memory in 64 KiB pages;
	// default DefaultMemoryLimitMB (256 MiB).
	MemoryLimitPages uint32
	// CallTimeout bounds each call into a plugin: the trial run of Load
	// (instantiation with its start function, and the info export), every
	// apply and every gc. Default DefaultCallTimeout; NoCallTimeout
	// disables it (a spinning plugin then stalls its own fold until
	// shutdown, and nothing else: containment does not depend on it).
	CallTimeout time.Duration
	// MaxModuleBytes caps a module file's size; default
	// DefaultMaxModuleBytes. Only regular files are read.
	MaxModuleBytes int64
	// GCEvery runs the guest's foldhost_gc export after every GCEvery
	// batches; default 16. Go guests need it (they run with GOGC=off):
	// their garbage accumulates between collections, so a larger value
	// trades guest memory for throughput (RATIONALE.md).
	GCEvery int
	// Retries is how many times a failed batch is retried on a fresh
	// instance before Apply returns the error; default DefaultRetries,
	// NoRetries for none.
	Retries int
	// Limits bound what one call into a plugin can make the host hold.
	Limits
	// QueryInstances is how many queries of one Plugin run at once (ABI
	// minor 2), each on an instance of its own, never the one apply runs
	// on; more wait for one. Default DefaultQueryInstances.
	QueryInstances int
	// Logger receives the plugin's log lines and stdout/stderr; default
	// slog.Default().
	Logger *slog.Logger
	// OnReload, if set, is called with the outcome of every reload that
	// was a verdict on a file (accepted or refused; an unchanged file or
	// a reload cut short by its context is not), on the reloading
	// goroutine. It must not block.
	OnReload func(Reload)
	// Adopt, if set, is offered every module a reload accepted (validated,
	// and not the running one), on the reloading goroutine, before it is
	// swapped in. Returning true takes the module over: the caller owns it
	// (swaps it in later, runs it as another Plugin, or closes it). False
	// lets the Plugin swap it in at its next batch.
	Adopt func(*Module) bool

	// containment selects how guests are contained; only the package's
	// benchmarks set it, to compare the alternatives in one process.
	containment containment
}

// Limits bound what one call into a plugin can make the host hold, each
// zero taking its default (RATIONALE.md, "What a plugin can make the host
// hold"). Crossing one is a plugin failure of KindLimit whose error is a
// *LimitError naming the limit and its configuration key: the instance is
// discarded and the batch retried on a fresh one, as after a trap.
type Limits struct {
	// MaxOutputBytes caps one ok output record (an apply's view
	// mutations, encoded); default DefaultMaxOutputBytes.
	MaxOutputBytes int
	// MaxViewMutations caps the view mutations of one apply; default
	// DefaultMaxViewMutations.
	MaxViewMutations int
	// MaxViewKeyBytes and MaxViewValueBytes cap one view key and one view
	// value; defaults DefaultMaxViewKeyBytes, DefaultMaxViewValueBytes.
	MaxViewKeyBytes, MaxViewValueBytes int
	// MaxReadBytes caps the answer to one read; MaxCallReadBytes the
	// answers to all reads of one call (an apply); defaults
	// DefaultMaxReadBytes, DefaultMaxCallReadBytes. An answer is also
	// never larger than the plugin's memory, where it is copied.
	MaxReadBytes, MaxCallReadBytes int
	// MaxErrorBytes: a plugin's own error message (a status-1 output) is
	// cut to this many bytes as it is copied out of guest memory, so the
	// host never holds more of it. Not a failure of its own: the batch
	// fails with the plugin's error, cut. Default DefaultMaxErrorBytes.
	MaxErrorBytes int
	// MaxEffects caps the effects of one apply; MaxEffectBytes one
	// effect's subject, header names and values and payload together
	// (abi.Effect.Size); defaults DefaultMaxEffects, DefaultMaxEffectBytes.
	MaxEffects, MaxEffectBytes int
	// MaxQueryInputBytes caps a query's input (ABI minor 2); default
	// DefaultMaxQueryInputBytes. A query's answer is held to
	// MaxOutputBytes, its reads to the read bounds, as an apply's.
	MaxQueryInputBytes int
}

func (o *Options) notifyReload(rl Reload) {
	if o.OnReload != nil {
		o.OnReload(rl)
	}
}

type containment int

const (
	containMetered     containment = iota // the meter (production)
	containNone                           // nothing: a spinning guest freezes the process
	containCloseOnDone                    // wazero's WithCloseOnContextDone and a context deadline
)

// Defaults and sentinels of Options: the zero value of a field means its
// default, so "none" needs a value of its own.
const (
	DefaultCallTimeout    = 10 * time.Second
	NoCallTimeout         = time.Duration(-1)
	DefaultMaxModuleBytes = 64 << 20
	DefaultMemoryLimitMB  = 256
	DefaultRetries        = 2
	NoRetries             = -1
	DefaultGCEvery        = 16

	DefaultMaxOutputBytes    = 16 << 20
	DefaultMaxViewMutations  = 100_000
	DefaultMaxViewKeyBytes   = 4 << 10
	DefaultMaxViewValueBytes = 1 << 20
	DefaultMaxReadBytes      = 16 << 20
	DefaultMaxCallReadBytes  = 256 << 20
	DefaultMaxErrorBytes     = 4 << 10
	DefaultMaxEffects        = 10_000
	// DefaultMaxEffectBytes is NATS's default max_payload (headers and
	// payload count against it).
	DefaultMaxEffectBytes = 1 << 20
	// DefaultMaxQueryInputBytes bounds a query's input.
	DefaultMaxQueryInputBytes = 1 << 20
	// DefaultQueryInstances is how many queries of one plugin run at once,
	// each on an instance of its own (kept between queries).
	DefaultQueryInstances = 2
)

func (o Options) withDefaults() Options {
	if o.CallTimeout == 0 {
		o.CallTimeout = DefaultCallTimeout
	} else if o.CallTimeout < 0 {
		o.CallTimeout = 0 // internally: none
	}
	if o.MaxModuleBytes <= 0 {
		o.MaxModuleBytes = DefaultMaxModuleBytes
	}
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = DefaultMemoryLimitMB * 16 // 64 KiB pages
	}
	if o.GCEvery <= 0 {
		o.GCEvery = DefaultGCEvery
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = DefaultRetries
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	for _, l := range []struct {
		v   *int
		def int
	}{
		{&o.MaxOutputBytes, DefaultMaxOutputBytes}, {&o.MaxViewMutations, DefaultMaxViewMutations},
		{&o.MaxViewKeyBytes, DefaultMaxViewKeyBytes}, {&o.MaxViewValueBytes, DefaultMaxViewValueBytes},
		{&o.MaxReadBytes, DefaultMaxReadBytes}, {&o.MaxCallReadBytes, DefaultMaxCallReadBytes},
		{&o.MaxErrorBytes, DefaultMaxErrorBytes},
		{&o.MaxEffects, DefaultMaxEffects}, {&o.MaxEffectBytes, DefaultMaxEffectBytes},
		{&o.MaxQueryInputBytes, DefaultMaxQueryInputBytes},
		{&o.QueryInstances, DefaultQueryInstances},
	} {
		if *l.v <= 0 {
			*l.v = l.def
		}
	}
	return o
}

// Runtime compiles and validates modules and runs their instances. One
// Runtime serves any number of plugins; it is safe for concurrent use.
type Runtime struct {
	rt   wazero.Runtime
	opts Options
	// compileMu serializes compiles: wazero v1.12.0 publishes a module
	// read from its file cache to other compiles of the same bytes before
	// its entry preambles exist, and instantiating that half-built module
	// panics (TestConcurrentLoadsOfOneModule).
	compileMu sync.Mutex
	logs      *logLimiter
	memory    experimental.MemoryAllocator // guests' linear memories: guestMemory
}

// NewRuntime starts a runtime with the host imports installed.
//
// Every module is instrumented before it is compiled (package meter): the
// guest calls back into the host at bounded intervals, where the deadline
// and cancellation are checked and the Go scheduler gets the preemption
// point compiled guest code otherwise lacks. wazero's own
// WithCloseOnContextDone is not used: it leaves to Go on every loop
// iteration (RATIONALE.md, "Guest containment").
func NewRuntime(ctx context.Context, o Options) (*Runtime, error) {
	o = o.withDefaults()
	cfg := wazero.NewRuntimeConfig().
		WithCoreFeatures(api.CoreFeaturesV2). // what the meter understands
		WithMemoryLimitPages(o.MemoryLimitPages).
		WithCloseOnContextDone(o.containment == containCloseOnDone)
	if o.CacheDir != "" {
		cache, err := wazero.NewCompilationCacheWithDir(o.CacheDir)
		if err != nil {
			return nil, fmt.Errorf("wasm: compilation cache %s: %w", o.CacheDir, err)
		}
		cfg = cfg.WithCompilationCache(cache)
	}
	rt := wazero.NewRuntimeWithConfig(ctx, cfg)
	if _, err := wasi_snapshot_preview1.Instantiate(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, fmt.Errorf("wasm: wasi: %w", err)
	}
	if err := installHost(ctx, rt); err != nil {
		rt.Close(ctx)
		return nil, err
	}
	return &Runtime{rt: rt, opts: o, logs: newLogLimiter(), memory: guestMemory}, nil
}

// Close releases the runtime and every instance it made.
func (r *Runtime) Close(ctx context.Context) error { return r.rt.Close(ctx) }

// Module is a compiled, validated plugin module.
type Module struct {
	compiled wazero.CompiledModule
	SHA256   string   // hex of the module bytes
	Info     abi.Info // what the plugin says about itself
	ABIMinor uint32
	Path     string
	// Queries are the read-only queries the module declares (ABI minor
	// 2, its foldhost_queries export); none without the export.
	Queries  []abi.Query
	id       fold.PluginIdentity
	identity []byte // id encoded, once: every commit carries it

	// Query instances are made off the Plugin's lock, so a module swapped
	// out meanwhile may be closed while one is being instantiated: a
	// query holds a reference (acquire) while it instantiates, and Close
	// then leaves the compiled code to the last release.
	refMu  sync.Mutex
	refs   int
	closed bool
}

// Short is the module's short identity for logs.
func (m *Module) Short() string { return m.SHA256[:12] }

// Identity is the module's identity.
func (m *Module) Identity() fold.PluginIdentity { return m.id }

// LoadFile reads and validates the module at path: a regular file of at
// most Options.MaxModuleBytes (a FIFO, a device or a directory is refused
// without being read).
func (r *Runtime) LoadFile(ctx context.Context, path string) (*Module, error) {
	b, err := files.ReadRegular(path, r.opts.MaxModuleBytes)
	if err != nil {
		return nil, fmt.Errorf("wasm: read plugin: %w", err)
	}
	m, err := r.Load(ctx, b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	m.Path = path
	return m, nil
}

var allowedImports = map[string]bool{
	wasi_snapshot_preview1.ModuleName: true,
	abi.ImportModule:                  true,
}

// Load instruments, compiles and validates a module: every check in the
// package doc, each failure an error wrapping ErrInvalidModule that names
// the problem. The trial run is bounded by Options.CallTimeout and by ctx.
// The Module holds no reference to wasm; Close releases its compiled code.
func (r *Runtime) Load(ctx context.Context, wasm []byte) (*Module, error) {
	if int64(len(wasm)) > r.opts.MaxModuleBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the limit of %d", ErrInvalidModule, len(wasm), r.opts.MaxModuleBytes)
	}
	m := &Module{SHA256: ModuleHash(wasm)}
	metered, err := meter.Instrument(wasm)
	if r.opts.containment != containMetered {
		metered = wasm
	}
	if err != nil {
		return nil, fmt.Errorf("%w: does not compile as WebAssembly: %v", ErrInvalidModule, err)
	}
	r.compileMu.Lock()
	compiled, err := r.rt.CompileModule(ctx, metered)
	r.compileMu.Unlock()
	if err != nil {
		if strings.Contains(err.Error(), "over limit") {
			return nil, fmt.Errorf("%w: memory over the limit of %d pages: %v", ErrInvalidModule, r.opts.MemoryLimitPages, err)
		}
		return nil, fmt.Errorf("%w: does not compile as WebAssembly: %v", ErrInvalidModule, err)
	}
	fail := func(format string, args ...any) (*Module, error) {
		compiled.Close(ctx)
		if err := ctx.Err(); err != nil { // not the module's fault: a shutdown
			return nil, fmt.Errorf("wasm: load cancelled: %w", err)
		}
		return nil, fmt.Errorf("%w: %s", ErrInvalidModule, fmt.Sprintf(format, args...))
	}
	exports := compiled.ExportedFunctions()
	if _, ok := exports[abi.Marker]; !ok {
		var other []string
		for name := range exports {
			if strings.HasPrefix(name, abi.MarkerPrefix) {
				other = append(other, strings.TrimPrefix(name, "foldhost_abi_"))
			}
		}
		if len(other) > 0 {
			return fail("module speaks ABI %s; this host speaks v%d", strings.Join(other, ", "), abi.Major)
		}
		return fail("no %s export: not a foldhost plugin (or built without the SDK)", abi.Marker)
	}
	if _, start := exports["_start"]; start {
		if _, init := exports[abi.ExportInitialize]; !init {
			// A command runs its main at _start and is done; a plugin is a
			// reactor. Go's default build mode makes a command whose exports
			// trap until _start ran ("call _start first"): say the fix.
			return fail("exports _start and no %s: a WASI command module, but a plugin must be a reactor "+
				"(a Go plugin built without -buildmode=c-shared: build it with "+
				"GOOS=wasip1 GOARCH=wasm go build -buildmode=c-shared; C: clang -mexec-model=reactor)", abi.ExportInitialize)
		}
	}
	for _, want := range []struct {
		name    string
		params  []api.ValueType
		results []api.ValueType
	}{
		{abi.Marker, nil, []api.ValueType{api.ValueTypeI32}},
		{abi.ExportAlloc, []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI32}},
		{abi.ExportInfo, nil, []api.ValueType{api.ValueTypeI64}},
		{abi.ExportApply, []api.ValueType{api.ValueTypeI32}, []api.ValueType{api.ValueTypeI64}},
	} {
		fn, ok := exports[want.name]
		if !ok {
			return fail("required export %s is missing", want.name)
		}
		if !sameTypes(fn.ParamTypes(), want.params) || !sameTypes(fn.ResultTypes(), want.results) {
			return fail("export %s has signature %v -> %v, want %v -> %v",
				want.name, fn.ParamTypes(), fn.ResultTypes(), want.params, want.results)
		}
	}
	if fn, ok := exports[abi.ExportGC]; ok && (len(fn.ParamTypes()) != 0 || len(fn.ResultTypes()) != 0) {
		return fail("export %s must be () -> ()", abi.ExportGC)
	}
	// Queries (minor 2): both exports or neither.
	qlist, hasList := exports[abi.ExportQueries]
	qcall, hasCall := exports[abi.ExportQuery]
	switch {
	case hasList != hasCall:
		return fail("exports one of %s and %s without the other (queries need both)", abi.ExportQueries, abi.ExportQuery)
	case hasList && (len(qlist.ParamTypes()) != 0 || !sameTypes(qlist.ResultTypes(), []api.ValueType{api.ValueTypeI64})):
		return fail("export %s must be () -> i64", abi.ExportQueries)
	case hasCall && (!sameTypes(qcall.ParamTypes(), []api.ValueType{api.ValueTypeI32, api.ValueTypeI32}) ||
		!sameTypes(qcall.ResultTypes(), []api.ValueType{api.ValueTypeI64})):
		return fail("export %s must be (i32, i32) -> i64", abi.ExportQuery)
	}
	mems := compiled.ExportedMemories()
	mem, ok := mems[abi.ExportMemory]
	if !ok {
		return fail("no exported memory named %q", abi.ExportMemory)
	}
	if mem.Min() > r.opts.MemoryLimitPages {
		return fail("memory needs at least %d pages, the limit is %d", mem.Min(), r.opts.MemoryLimitPages)
	}
	for _, imp := range compiled.ImportedFunctions() {
		mod, name, _ := imp.Import()
		if mod == meter.ImportModule && name == meter.ImportName {
			continue // the meter's own
		}
		if !allowedImports[mod] && !(mod == "env" && name == "abort") {
			return fail("imports %s.%s, which the host does not provide (allowed: WASI, foldhost.*, env.abort)", mod, name)
		}
	}
	m.compiled = compiled
	// Trial run: instantiate, read the version and the info, all under
	// one deadline.
	st := r.newCallState("")
	st.start(r.opts.CallTimeout)
	cctx := withCallState(ctx, st)
	in, err := r.instantiate(cctx, m)
	if err != nil {
		return fail("instantiation failed: %v", err)
	}
	defer in.close(ctx)
	minor, info, err := in.describe(cctx)
	if err != nil {
		return fail("%v", err)
	}
	if hasList {
		if m.Queries, err = in.queries(cctx); err != nil {
			return fail("%v", err)
		}
	}
	openModules.Add(1)
	m.ABIMinor, m.Info = minor, info
	m.id = fold.PluginIdentity{SHA256: m.SHA256, Name: info.Name, Version: info.Version, ViewSchema: info.ViewSchema,
		ABI: fmt.Sprintf("v%d.%d", abi.Major, minor)}
	m.identity = m.id.Encode()
	return m, nil
}

// Close releases the module's compiled code. Instances already made keep
// running; the Module must not be loaded into a Plugin afterwards.
//
// A query instantiating from m at that moment keeps its compiled code
// until it is done (acquire, release).
func (m *Module) Close(ctx context.Context) {
	if m == nil {
		return
	}
	m.refMu.Lock()
	if m.closed || m.compiled == nil {
		m.refMu.Unlock()
		return
	}
	m.closed = true
	if m.refs > 0 {
		m.refMu.Unlock()
		return // the last release closes it
	}
	m.refMu.Unlock()
	m.closeCompiled(ctx)
}

func (m *Module) closeCompiled(ctx context.Context) {
	m.refMu.Lock()
	c := m.compiled
	m.compiled = nil
	m.refMu.Unlock()
	if c != nil {
		_ = c.Close(ctx)
		openModules.Add(-1)
	}
}

// acquire keeps m's compiled code from being released until release; it
// reports false when m is closed already.
func (m *Module) acquire() bool {
	m.refMu.Lock()
	defer m.refMu.Unlock()
	if m.closed || m.compiled == nil {
		return false
	}
	m.refs++
	return true
}

// release ends an acquire; the last one of a closed module releases its
// compiled code.
func (m *Module) release(ctx context.Context) {
	m.refMu.Lock()
	m.refs--
	last := m.refs == 0 && m.closed
	m.refMu.Unlock()
	if last {
		m.closeCompiled(ctx)
	}
}

// openModules counts Modules loaded and not yet closed, process-wide: the
// compiled code each holds lives outside the Go heap, so this is how tests
// see a leak.
var openModules atomic.Int64

// OpenModules is how many Modules are loaded and not yet closed in this
// process (compiled code outside the Go heap): a leak shows here.
func OpenModules() int64 { return openModules.Load() }

// ModuleHash is the identity of a module's bytes: their SHA-256, in hex.
func ModuleHash(wasm []byte) string {
	sum := sha256.Sum256(wasm)
	return hex.EncodeToString(sum[:])
}

func sameTypes(a, b []api.ValueType) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
