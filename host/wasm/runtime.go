package wasm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/foldhost/foldhost/abi"
	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
	"github.com/tetratelabs/wazero/imports/wasi_snapshot_preview1"
)

// Options configures a Runtime. The zero value takes the defaults.
type Options struct {
	// CacheDir holds compiled modules across restarts; "" keeps them in
	// memory only.
	CacheDir string
	// MemoryLimitPages caps a plugin's linear memory in 64 KiB pages;
	// default 4096 (256 MiB).
	MemoryLimitPages uint32
	// CallTimeout bounds each call into a plugin. 0 (the default) means no
	// deadline: a spinning plugin then blocks its fold forever, but every
	// call is cheaper (wazero must check for cancellation in loops and
	// arm a timer per call; see the package benchmarks and RATIONALE.md).
	CallTimeout time.Duration
	// GCEvery runs the guest's foldhost_gc export after every GCEvery
	// batches; default 16. Go guests need it (they run with GOGC=off):
	// their garbage accumulates between collections, so a larger value
	// trades guest memory for throughput (RATIONALE.md).
	GCEvery int
	// Retries is how many times a failed batch is retried on a fresh
	// instance before Apply returns the error; default 2.
	Retries int
	// Logger receives the plugin's log lines and stdout/stderr; default
	// slog.Default().
	Logger *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.MemoryLimitPages == 0 {
		o.MemoryLimitPages = 4096
	}
	if o.GCEvery <= 0 {
		o.GCEvery = 16
	}
	if o.Retries < 0 {
		o.Retries = 0
	} else if o.Retries == 0 {
		o.Retries = 2
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	return o
}

// Runtime compiles and validates modules and runs their instances. One
// Runtime serves any number of plugins; it is safe for concurrent use.
type Runtime struct {
	rt   wazero.Runtime
	opts Options
}

// NewRuntime starts a runtime with the host imports installed.
func NewRuntime(ctx context.Context, o Options) (*Runtime, error) {
	o = o.withDefaults()
	cfg := wazero.NewRuntimeConfig().
		WithMemoryLimitPages(o.MemoryLimitPages).
		WithCloseOnContextDone(o.CallTimeout > 0)
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
	return &Runtime{rt: rt, opts: o}, nil
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
	identity []byte
}

// Short is the module's short identity for logs.
func (m *Module) Short() string { return m.SHA256[:12] }

// Identity is the record stored in the fold's metadata with every commit.
func (m *Module) Identity() []byte { return m.identity }

// IdentityRecord is the JSON form of Module.Identity.
type IdentityRecord struct {
	SHA256     string `json:"sha256"`
	Name       string `json:"name"`
	Version    string `json:"version"`
	ViewSchema uint32 `json:"view_schema"`
	ABI        string `json:"abi"`
}

// LoadFile reads and validates the module at path.
func (r *Runtime) LoadFile(ctx context.Context, path string) (*Module, error) {
	b, err := os.ReadFile(path)
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

// Load compiles and validates a module: every check in the package doc,
// each failure an error wrapping ErrInvalidModule that names the problem.
func (r *Runtime) Load(ctx context.Context, wasm []byte) (*Module, error) {
	sum := sha256.Sum256(wasm)
	m := &Module{SHA256: hex.EncodeToString(sum[:])}
	compiled, err := r.rt.CompileModule(ctx, wasm)
	if err != nil {
		if strings.Contains(err.Error(), "over limit") {
			return nil, fmt.Errorf("%w: memory over the limit of %d pages: %v", ErrInvalidModule, r.opts.MemoryLimitPages, err)
		}
		return nil, fmt.Errorf("%w: does not compile as WebAssembly: %v", ErrInvalidModule, err)
	}
	fail := func(format string, args ...any) (*Module, error) {
		compiled.Close(ctx)
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
		if !allowedImports[mod] && !(mod == "env" && name == "abort") {
			return fail("imports %s.%s, which the host does not provide (allowed: WASI, foldhost.*, env.abort)", mod, name)
		}
	}
	m.compiled = compiled
	// Trial run: instantiate, read the version and the info.
	in, err := r.instantiate(ctx, m)
	if err != nil {
		return fail("instantiation failed: %v", err)
	}
	defer in.close(ctx)
	minor, info, err := in.describe(ctx)
	if err != nil {
		return fail("%v", err)
	}
	m.ABIMinor, m.Info = minor, info
	m.identity, _ = json.Marshal(IdentityRecord{
		SHA256: m.SHA256, Name: info.Name, Version: info.Version, ViewSchema: info.ViewSchema,
		ABI: fmt.Sprintf("v%d.%d", abi.Major, minor),
	})
	return m, nil
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
