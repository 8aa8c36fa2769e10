package meter

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/tetratelabs/wazero"
	"github.com/tetratelabs/wazero/api"
)

// newRuntime is a wazero runtime with the yield import: each yield adds one
// to *yields and grants allowance more checks; once *yields reaches stopAt
// (if > 0) the yield traps with errStop.
func newRuntime(t testing.TB, allowance uint32, yields *atomic.Int64, stopAt int64) wazero.Runtime {
	t.Helper()
	ctx := context.Background()
	rt := wazero.NewRuntimeWithConfig(ctx, wazero.NewRuntimeConfig().WithCoreFeatures(api.CoreFeaturesV2))
	t.Cleanup(func() { rt.Close(ctx) })
	_, err := rt.NewHostModuleBuilder(ImportModule).NewFunctionBuilder().
		WithGoModuleFunction(api.GoModuleFunc(func(ctx context.Context, m api.Module, stack []uint64) {
			n := yields.Add(1)
			if stopAt > 0 && n >= stopAt {
				panic(errStop)
			}
			stack[0] = uint64(allowance)
		}), nil, []api.ValueType{api.ValueTypeI32}).Export(ImportName).Instantiate(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return rt
}

var errStop = errors.New("stopped by the test's yield")

// Hand-assembled modules. mod builds a module from a type section, a
// function section, an export section and a code section.
func mod(sections ...[]byte) []byte {
	out := append([]byte{}, header...)
	for _, s := range sections {
		out = append(out, s...)
	}
	return out
}

func sec(id byte, payload ...byte) []byte {
	return appendName([]byte{id}, payload)
}

func body(locals []byte, code ...byte) []byte {
	return appendName(nil, append(append([]byte{}, locals...), code...))
}

// spinModule exports "spin": () -> (), an empty infinite loop.
func spinModule() []byte {
	return mod(
		sec(secType, 1, 0x60, 0, 0),
		sec(secFunction, 1, 0),
		sec(secExport, append(appendName([]byte{1}, []byte("spin")), 0, 0)...),
		sec(secCode, append([]byte{1}, body([]byte{0},
			opLoop, blockEmpty, 0x0c, 0, opEnd, // loop br 0 end
			opEnd)...)...),
	)
}

// fibModule exports "fib": (i32) -> i32, naive recursion without a loop:
// exponential work, bounded stack depth.
func fibModule() []byte {
	code := []byte{
		opLocalGet, 0, opI32Const, 2, 0x48, // local.get 0; i32.const 2; i32.lt_s
		opIf, 0x7f, // if (result i32)
		opLocalGet, 0,
		0x05, // else
		opLocalGet, 0, opI32Const, 1, opI32Sub, opCall, 0,
		opLocalGet, 0, opI32Const, 2, opI32Sub, opCall, 0,
		0x6a, // i32.add
		opEnd,
		opEnd,
	}
	return mod(
		sec(secType, 1, 0x60, 1, 0x7f, 1, 0x7f),
		sec(secFunction, 1, 0),
		sec(secExport, append(appendName([]byte{1}, []byte("fib")), 0, 0)...),
		sec(secCode, append([]byte{1}, body([]byte{0}, code...)...)...),
	)
}

func instantiate(t *testing.T, rt wazero.Runtime, wasm []byte) api.Module {
	t.Helper()
	ctx := context.Background()
	m, err := rt.InstantiateWithConfig(ctx, wasm, wazero.NewModuleConfig().WithName(""))
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// A spinning loop calls yield, and a trapping yield ends the call: the
// property the host's containment rests on.
func TestSpinYields(t *testing.T) {
	var yields atomic.Int64
	rt := newRuntime(t, 1000, &yields, 50)
	in, err := Instrument(spinModule())
	if err != nil {
		t.Fatal(err)
	}
	_, err = instantiate(t, rt, in).ExportedFunction("spin").Call(context.Background())
	if !errors.Is(err, errStop) {
		t.Fatalf("spin returned %v, want the yield's trap", err)
	}
	if got := yields.Load(); got != 50 {
		t.Fatalf("%d yields, want 50", got)
	}
}

// Recursion without a loop is metered at function entry.
func TestRecursionYields(t *testing.T) {
	var yields atomic.Int64
	rt := newRuntime(t, 100, &yields, 0)
	in, err := Instrument(fibModule())
	if err != nil {
		t.Fatal(err)
	}
	fib := instantiate(t, rt, in).ExportedFunction("fib")
	res, err := fib.Call(context.Background(), 20)
	if err != nil {
		t.Fatal(err)
	}
	if res[0] != 6765 {
		t.Fatalf("fib(20) = %d", res[0])
	}
	// fib(20) makes 21,891 calls: one check each, a yield per 100.
	if got := yields.Load(); got < 21891/100 || got > 21891/100+2 {
		t.Fatalf("%d yields for 21,891 calls at 100 per yield", got)
	}
	yields.Store(0)
	rt2 := newRuntime(t, 100, &yields, 10)
	_, err = instantiate(t, rt2, in).ExportedFunction("fib").Call(context.Background(), 40)
	if !errors.Is(err, errStop) {
		t.Fatalf("fib(40) returned %v, want the yield's trap", err)
	}
}

// Without the instrumentation the same modules never yield: the tests
// above would fail, not pass vacuously.
func TestUninstrumentedDoesNotYield(t *testing.T) {
	var yields atomic.Int64
	rt := newRuntime(t, 100, &yields, 0)
	fib := instantiate(t, rt, fibModule()).ExportedFunction("fib")
	if _, err := fib.Call(context.Background(), 20); err != nil {
		t.Fatal(err)
	}
	if yields.Load() != 0 {
		t.Fatal("an uninstrumented module yielded")
	}
}

func TestRefusals(t *testing.T) {
	reserved := mod(
		sec(secType, 1, 0x60, 0, 1, 0x7f),
		sec(secImport, append(append(appendName([]byte{1}, []byte(ImportModule)), appendName(nil, []byte("x"))...), 0, 0)...),
	)
	tailCall := mod(
		sec(secType, 1, 0x60, 0, 0),
		sec(secFunction, 1, 0),
		sec(secCode, append([]byte{1}, body([]byte{0}, 0x12, 0, opEnd)...)...), // return_call 0
	)
	for name, wasm := range map[string][]byte{
		"empty":            nil,
		"bad magic":        []byte("\x00asn\x01\x00\x00\x00"),
		"truncated":        spinModule()[:20],
		"reserved import":  reserved,
		"tail call":        tailCall,
		"section overflow": append(append([]byte{}, header...), secType, 0xff, 0xff, 0xff, 0xff, 0x0f),
	} {
		if _, err := Instrument(wasm); !errors.Is(err, ErrUnsupported) {
			t.Errorf("%s: got %v, want ErrUnsupported", name, err)
		}
	}
}

// wazeroDir is the module cache directory of the wazero version in go.mod:
// its spec test suite (WebAssembly 2.0) is the corpus of the tests below.
func wazeroDir(t testing.TB) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/tetratelabs/wazero").Output()
	if err != nil {
		t.Fatalf("locating wazero's module (its spec tests are this test's corpus): %v", err)
	}
	return strings.TrimSpace(string(out))
}

type specCommand struct {
	Type     string `json:"type"`
	Line     int    `json:"line"`
	Filename string `json:"filename"`
	Action   struct {
		Type  string      `json:"type"`
		Field string      `json:"field"`
		Args  []specValue `json:"args"`
	} `json:"action"`
}

type specValue struct {
	Type  string          `json:"type"`
	Value json.RawMessage `json:"value"`
}

// scalar returns the value's bits, or false for a type this test does not
// pass (vectors, references).
func (v specValue) scalar() (uint64, bool) {
	var s string
	if json.Unmarshal(v.Value, &s) != nil {
		return 0, false
	}
	switch v.Type {
	case "i32", "f32", "i64", "f64":
	default:
		return 0, false
	}
	if strings.HasPrefix(s, "nan:") {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// TestSpecSuite runs every module of the WebAssembly 2.0 spec tests that
// wazero compiles through Instrument: the output must compile too, and
// every invocation of the script (in order: state carries over) must give
// the same results, or trap alike, on the original and the instrumented
// module.
func TestSpecSuite(t *testing.T) {
	dir := filepath.Join(wazeroDir(t), "internal", "integration_test", "spectest", "v2", "testdata")
	scripts, err := filepath.Glob(filepath.Join(dir, "*.json"))
	if err != nil || len(scripts) < 100 {
		t.Fatalf("spec scripts in %s: %d (%v)", dir, len(scripts), err)
	}
	var yields atomic.Int64
	rt := newRuntime(t, 1<<20, &yields, 0)
	ctx := context.Background()
	var modules, compared, invocations int
	for _, script := range scripts {
		var s struct{ Commands []specCommand }
		b, err := os.ReadFile(script)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &s); err != nil {
			t.Fatalf("%s: %v", script, err)
		}
		var orig, inst api.Module
		closeBoth := func() {
			if orig != nil {
				orig.Close(ctx)
				inst.Close(ctx)
			}
			orig, inst = nil, nil
		}
		for _, c := range s.Commands {
			where := fmt.Sprintf("%s:%d", filepath.Base(script), c.Line)
			switch c.Type {
			case "module":
				closeBoth()
				wasm, err := os.ReadFile(filepath.Join(dir, c.Filename))
				if err != nil {
					t.Fatal(err)
				}
				cm, err := rt.CompileModule(ctx, wasm)
				if err != nil {
					continue // not for wazero's V2 engine; nothing to compare
				}
				modules++
				metered, err := Instrument(wasm)
				if err != nil {
					t.Errorf("%s: Instrument refused a module wazero compiles: %v", where, err)
					cm.Close(ctx)
					continue
				}
				mcm, err := rt.CompileModule(ctx, metered)
				if err != nil {
					t.Errorf("%s: the instrumented module does not compile: %v", where, err)
					cm.Close(ctx)
					continue
				}
				if len(cm.ImportedFunctions())+len(cm.ImportedMemories()) > 0 {
					cm.Close(ctx)
					mcm.Close(ctx)
					continue // imports the spectest module: compiled, not run
				}
				o, err1 := rt.InstantiateModule(ctx, cm, wazero.NewModuleConfig().WithName(""))
				i, err2 := rt.InstantiateModule(ctx, mcm, wazero.NewModuleConfig().WithName(""))
				if (err1 == nil) != (err2 == nil) {
					t.Errorf("%s: instantiation: original %v, instrumented %v", where, err1, err2)
				}
				if err1 == nil && err2 == nil {
					orig, inst = o, i
					compared++
				}
			case "assert_return", "assert_trap", "assert_exhaustion", "action":
				if orig == nil || c.Action.Type != "invoke" {
					continue
				}
				args := make([]uint64, 0, len(c.Action.Args))
				ok := true
				for _, a := range c.Action.Args {
					v, good := a.scalar()
					ok = ok && good
					args = append(args, v)
				}
				fo, fi := orig.ExportedFunction(c.Action.Field), inst.ExportedFunction(c.Action.Field)
				if !ok || fo == nil || fi == nil || returnsRef(fo) {
					continue
				}
				invocations++
				ro, err1 := fo.Call(ctx, args...)
				ri, err2 := fi.Call(ctx, args...)
				if (err1 == nil) != (err2 == nil) {
					t.Errorf("%s: %s: original %v, instrumented %v", where, c.Action.Field, err1, err2)
					continue
				}
				if fmt.Sprint(ro) != fmt.Sprint(ri) {
					t.Errorf("%s: %s: original %v, instrumented %v", where, c.Action.Field, ro, ri)
				}
			}
		}
		closeBoth()
	}
	t.Logf("%d modules instrumented and compiled, %d run side by side, %d invocations compared, %d yields",
		modules, compared, invocations, yields.Load())
	if modules < 1000 || invocations < 20000 {
		t.Fatalf("too little of the spec suite ran (%d modules, %d invocations): the corpus is not what this test expects", modules, invocations)
	}
}

// returnsRef: a reference result is an address, different per instance.
func returnsRef(f api.Function) bool {
	for _, t := range f.Definition().ResultTypes() {
		if t == 0x70 || t == api.ValueTypeExternref { // funcref, externref
			return true
		}
	}
	return false
}

// FuzzInstrument: Instrument never panics; what it accepts compiles
// without exhausting the host (wazero sizes allocations from declared
// counts: the corpus holds a 200-byte module that made it allocate 120 GB
// before Instrument walked every vector); and instrumenting never turns a
// module wazero compiles into one it refuses.
func FuzzInstrument(f *testing.F) {
	f.Add(spinModule())
	f.Add(fibModule())
	for _, p := range []string{"plugins/testdata/build/spin.wasm", "plugins/testdata/build/probe-as.wasm"} {
		if b, err := os.ReadFile(filepath.Join("..", "..", "..", "..", p)); err == nil {
			f.Add(b)
		}
	}
	var yields atomic.Int64
	rt := newRuntime(f, math.MaxInt32, &yields, 0)
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, wasm []byte) {
		out, err := Instrument(wasm)
		if err != nil {
			return // refused: never reaches the engine
		}
		mcm, err := rt.CompileModule(ctx, out)
		if err == nil {
			mcm.Close(ctx)
			return
		}
		// The input without its custom sections is what the engine would
		// have seen; Instrument walked every one of its vectors, so it is
		// safe to compile.
		if cm, cerr := rt.CompileModule(ctx, withoutCustom(t, wasm)); cerr == nil {
			cm.Close(ctx)
			t.Fatalf("the module compiles, its instrumented copy does not: %v", err)
		}
	})
}

func withoutCustom(t *testing.T, wasm []byte) []byte {
	r := &reader{b: wasm, off: len(header)}
	out := append([]byte{}, header...)
	for !r.done() {
		id := r.byte()
		p := r.name()
		if id != secCustom {
			out = appendName(append(out, id), p)
		}
	}
	if r.err != nil {
		t.Fatalf("Instrument accepted a module whose sections do not parse: %v", r.err)
	}
	return out
}

// BenchmarkInstrument: the meter's cost at load time, on the example
// router's Go build (2.7 MB, the largest plugin here).
func BenchmarkInstrument(b *testing.B) {
	wasm, err := os.ReadFile(filepath.Join("..", "..", "..", "..", "plugins", "example-router", "build", "router-go.wasm"))
	if err != nil {
		b.Fatalf("%v (run scripts/build-plugins)", err)
	}
	b.SetBytes(int64(len(wasm)))
	for range b.N {
		if _, err := Instrument(wasm); err != nil {
			b.Fatal(err)
		}
	}
}
