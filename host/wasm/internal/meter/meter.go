package meter

import (
	"bytes"
	"errors"
	"fmt"
)

// The import a metered module calls to yield: () -> i32, returning the next
// allowance of checks (a positive number) or trapping to end the call.
const (
	ImportModule = "foldhost_meter"
	ImportName   = "yield"
)

// ErrUnsupported wraps every refusal: malformed input, or a construct
// beyond WebAssembly 2.0.
var ErrUnsupported = errors.New("not a WebAssembly 2.0 module the host can run")

// Section ids.
const (
	secCustom    = 0
	secType      = 1
	secImport    = 2
	secFunction  = 3
	secTable     = 4
	secMemory    = 5
	secGlobal    = 6
	secExport    = 7
	secStart     = 8
	secElement   = 9
	secCode      = 10
	secData      = 11
	secDataCount = 12
)

// order ranks the non-custom sections as the binary format requires them.
var order = map[byte]int{secType: 1, secImport: 2, secFunction: 3, secTable: 4, secMemory: 5,
	secGlobal: 6, secExport: 7, secStart: 8, secElement: 9, secDataCount: 10, secCode: 11, secData: 12}

type section struct {
	id      byte
	payload []byte
}

var header = []byte{0x00, 'a', 's', 'm', 0x01, 0x00, 0x00, 0x00}

// Instrument returns an instrumented copy of the module (see the package
// doc). The input is not modified.
func Instrument(wasm []byte) ([]byte, error) {
	out, err := instrument(wasm)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnsupported, err)
	}
	return out, nil
}

func instrument(wasm []byte) ([]byte, error) {
	if len(wasm) < len(header) || !bytes.Equal(wasm[:len(header)], header) {
		return nil, errors.New("not a WebAssembly 1.0 binary (bad magic or version)")
	}
	r := &reader{b: wasm, off: len(header)}
	var secs []section
	last := 0
	for !r.done() {
		id := r.byte()
		payload := r.bytes(int(r.u32()))
		if r.err != nil {
			break
		}
		if id != secCustom {
			rank, ok := order[id]
			if !ok {
				return nil, fmt.Errorf("section id %d is not supported", id)
			}
			if rank <= last {
				return nil, fmt.Errorf("section id %d out of order", id)
			}
			last = rank
		}
		secs = append(secs, section{id, payload})
	}
	if r.err != nil {
		return nil, r.err
	}
	m, err := scan(secs)
	if err != nil {
		return nil, err
	}
	return m.rewrite(secs)
}

// module is what the rewrite needs to know before it rewrites.
type module struct {
	types         [][2]int // params, results count per type
	yieldType     int      // index of a () -> i32 type, or -1
	importedFuncs uint32
	globals       uint32   // imported + defined
	funcTypes     []uint32 // type index per defined function
}

// scan reads the sections the rewrite depends on; rewrite walks the rest.
func scan(secs []section) (*module, error) {
	m := &module{yieldType: -1}
	for _, s := range secs {
		r := &reader{b: s.payload}
		switch s.id {
		case secType:
			r.vec(func() {
				if f := r.byte(); f != 0x60 {
					r.failf("type form 0x%02x is not a function type", f)
					return
				}
				params := r.u32()
				r.bytes(int(params))
				results := r.u32()
				rt := r.bytes(int(results))
				if params == 0 && results == 1 && len(rt) == 1 && rt[0] == 0x7f && m.yieldType < 0 {
					m.yieldType = len(m.types)
				}
				m.types = append(m.types, [2]int{int(params), int(results)})
			})
		case secImport:
			r.vec(func() {
				if mod := r.name(); string(mod) == ImportModule {
					r.failf("the module imports from %q, which is reserved for the host", ImportModule)
				}
				r.name()
				switch kind := r.byte(); kind {
				case 0: // func typeidx
					r.u32()
					m.importedFuncs++
				case 1: // table reftype limits
					r.byte()
					r.limits()
				case 2: // memory limits
					r.limits()
				case 3: // global valtype mut
					r.bytes(2)
					m.globals++
				default:
					r.failf("import kind %d is not supported", kind)
				}
			})
		case secFunction:
			r.vec(func() {
				t := r.u32()
				if int(t) >= len(m.types) {
					r.failf("function %d has type %d, which does not exist", len(m.funcTypes), t)
				}
				m.funcTypes = append(m.funcTypes, t)
			})
		case secGlobal:
			m.globals += r.u32()
			r.off = len(r.b) // walked by rewrite
		case secDataCount:
			r.u32()
		default:
			continue
		}
		if r.err == nil && r.off != len(s.payload) {
			r.failf("%d bytes after the section's content", len(s.payload)-r.off)
		}
		if r.err != nil {
			return nil, fmt.Errorf("section %d: %w", s.id, r.err)
		}
	}
	return m, nil
}

// limits skips table or memory limits (min, or min and max).
func (r *reader) limits() {
	switch f := r.byte(); f {
	case 0:
		r.u32()
	case 1:
		r.u32()
		r.u32()
	default:
		r.failf("limits flag 0x%02x is not supported (shared or 64-bit memory)", f)
	}
}

// Limits the rewrite imposes. wazero allocates host memory for these from
// the declared sizes, outside the guest's memory limit, so a module of a
// few bytes could otherwise take the host down.
const (
	// MaxLocals caps a function's locals (parameters included).
	MaxLocals = 50_000
	// MaxTableElements caps the elements of all tables together, grown or
	// not (8 bytes each in the host); a table's maximum is lowered to fit,
	// so table.grow beyond it fails (returns -1) as the spec allows.
	MaxTableElements = 1 << 22
)

// rewrite produces the instrumented module.
func (m *module) rewrite(secs []section) ([]byte, error) {
	yieldType := uint32(m.yieldType)
	addType := m.yieldType < 0
	if addType {
		yieldType = uint32(len(m.types))
	}
	w := &rewriter{types: m.types, importedFuncs: m.importedFuncs, yield: m.importedFuncs, fuel: m.globals}

	// Make sure the sections the rewrite extends exist.
	secs = ensure(secs, secType)
	secs = ensure(secs, secImport)
	secs = ensure(secs, secGlobal)

	out := append([]byte{}, header...)
	for _, s := range secs {
		r := &reader{b: s.payload}
		var p []byte
		switch s.id {
		case secCustom:
			name := r.name()
			if r.err != nil || string(name) != "name" {
				continue // dropped (see the package doc)
			}
			var err error
			if p, err = w.names(s.payload, r.off); err != nil {
				continue // a malformed name section is dropped, like any other custom section
			}
			out = appendName(append(out, secCustom), p)
			continue
		case secType:
			p = vecAppend(r, s.payload, addType, []byte{0x60, 0x00, 0x01, 0x7f})
			r.off = len(s.payload) // walked by scan
		case secImport:
			entry := appendName(nil, []byte(ImportModule))
			entry = appendName(entry, []byte(ImportName))
			entry = appendU32(append(entry, 0x00), yieldType)
			p = vecAppend(r, s.payload, true, entry)
			r.off = len(s.payload) // walked by scan
		case secFunction, secDataCount:
			p = s.payload // walked by scan
			r.off = len(s.payload)
		case secTable:
			p = r.tables()
		case secMemory:
			p = s.payload
			r.vec(func() { r.limits() })
		case secGlobal:
			p = w.globals(r)
		case secExport:
			p = w.exports(r)
		case secStart:
			p = appendU32(nil, w.fn(r.u32()))
		case secElement:
			p = w.elements(r)
		case secCode:
			p = w.code(r, m)
		case secData:
			p = s.payload
			r.data(w)
		}
		if r.err == nil && r.off != len(s.payload) {
			r.failf("%d bytes after the section's content", len(s.payload)-r.off)
		}
		if r.err != nil {
			return nil, fmt.Errorf("section %d: %w", s.id, r.err)
		}
		out = appendName(append(out, s.id), p)
	}
	return out, nil
}

// vec reads a vector's count and calls elem once per element, stopping at
// the first error. Every element takes at least one byte, so a count the
// payload cannot hold fails at its end instead of being believed.
func (r *reader) vec(elem func()) uint32 {
	n := r.u32()
	if r.err == nil && int64(n) > int64(len(r.b)-r.off) {
		r.failf("vector of %d elements in %d bytes", n, len(r.b)-r.off)
	}
	for i := uint32(0); i < n && r.err == nil; i++ {
		elem()
	}
	return n
}

// tables copies a table section with every table's maximum lowered so that
// all of them together stay within MaxTableElements.
func (r *reader) tables() []byte {
	type table struct {
		ref      byte
		min, max uint32
		hasMax   bool
	}
	var ts []table
	var mins uint64
	r.vec(func() {
		t := table{ref: r.byte()}
		switch f := r.byte(); f {
		case 0:
			t.min = r.u32()
		case 1:
			t.min, t.max, t.hasMax = r.u32(), r.u32(), true
		default:
			r.failf("table limits flag 0x%02x is not supported", f)
		}
		mins += uint64(t.min)
		ts = append(ts, t)
	})
	if r.err != nil {
		return nil
	}
	if mins > MaxTableElements {
		r.failf("tables declare %d elements at least; the limit is %d", mins, MaxTableElements)
		return nil
	}
	slack := uint32(0)
	if len(ts) > 0 {
		slack = uint32((MaxTableElements - mins) / uint64(len(ts)))
	}
	out := appendU32(nil, uint32(len(ts)))
	for _, t := range ts {
		max := t.min + slack
		if t.hasMax && t.max < max {
			max = t.max
		}
		out = appendU32(appendU32(append(out, t.ref, 1), t.min), max)
	}
	return out
}

// data walks a data section: every segment's size is checked against the
// bytes that hold it.
func (r *reader) data(w *rewriter) {
	r.vec(func() {
		switch flags := r.u32(); flags {
		case 0:
			w.expr(r, nil, false, 0)
		case 1:
		case 2:
			r.u32()
			w.expr(r, nil, false, 0)
		default:
			r.failf("data segment flags %d", flags)
		}
		r.name()
	})
}

// ensure adds an empty section with id where the binary format places it,
// unless secs has one.
func ensure(secs []section, id byte) []section {
	at := 0
	for i, s := range secs {
		if s.id == id {
			return secs
		}
		if s.id != secCustom && order[s.id] < order[id] {
			at = i + 1
		}
	}
	empty := section{id: id, payload: []byte{0x00}}
	return append(secs[:at:at], append([]section{empty}, secs[at:]...)...)
}

// vecAppend returns a vector section's payload with extra appended as one
// more element when add is set; r is positioned at the payload's start.
func vecAppend(r *reader, payload []byte, add bool, extra []byte) []byte {
	n := r.u32()
	if r.err != nil || !add {
		return payload
	}
	p := appendU32(nil, n+1)
	p = append(p, payload[r.off:]...)
	return append(p, extra...)
}

// globals copies a global section with the ref.func initialisers
// renumbered and the fuel global appended: i32, mutable, initialised to 1
// (the first check yields).
func (w *rewriter) globals(r *reader) []byte {
	var out []byte
	n := r.vec(func() {
		out = append(out, r.bytes(2)...) // valtype, mutability
		out, _ = w.expr(r, out, false, 0)
	})
	out = append(out, 0x7f, 0x01, opI32Const, 0x01, opEnd)
	return append(appendU32(nil, n+1), out...)
}

func (w *rewriter) exports(r *reader) []byte {
	var out []byte
	n := r.vec(func() {
		out = appendName(out, r.name())
		kind := r.byte()
		idx := r.u32()
		if kind == 0 {
			idx = w.fn(idx)
		}
		out = appendU32(append(out, kind), idx)
	})
	return append(appendU32(nil, n), out...)
}

func (w *rewriter) elements(r *reader) []byte {
	var out []byte
	n := r.vec(func() {
		flags := r.u32()
		if flags > 7 {
			r.failf("element segment flags %d", flags)
			return
		}
		out = appendU32(out, flags)
		if flags&2 != 0 && flags&1 == 0 { // active with a table index
			out = appendU32(out, r.u32())
		}
		if flags&1 == 0 { // active: offset
			out, _ = w.expr(r, out, false, 0)
		}
		if flags&3 != 0 { // passive, declarative or explicit table: elemkind or reftype
			out = append(out, r.byte())
		}
		var elems []byte
		count := r.vec(func() {
			if flags&4 != 0 {
				elems, _ = w.expr(r, elems, false, 0)
			} else {
				elems = appendU32(elems, w.fn(r.u32()))
			}
		})
		out = append(appendU32(out, count), elems...)
	})
	return append(appendU32(nil, n), out...)
}

// code rewrites every function body.
func (w *rewriter) code(r *reader, m *module) []byte {
	var out, body []byte
	i := 0
	n := r.vec(func() {
		if i >= len(m.funcTypes) {
			r.failf("more function bodies than functions (%d)", len(m.funcTypes))
			return
		}
		br := &reader{b: r.name()}
		if r.err != nil {
			return
		}
		// Locals: the scratch local goes after the declared ones, so no
		// existing index moves.
		locals := uint64(m.types[m.funcTypes[i]][0])
		start := br.off
		groups := br.vec(func() {
			locals += uint64(br.u32())
			br.byte()
		})
		if locals >= MaxLocals {
			br.failf("%d locals; the limit is %d", locals, MaxLocals)
		}
		decl := br.b[start:br.off]
		cr := &reader{b: decl}
		cr.u32()
		decl = decl[cr.off:] // the groups, without their count
		c := uint32(locals)
		// Scan first: a function with neither loops nor calls runs in
		// bounded time and is copied without checks.
		codeStart := br.off
		var sh shape
		body, sh = w.expr(br, body[:0], false, 0)
		metered := sh.loops || sh.calls
		if metered && br.err == nil {
			br.off = codeStart
			body = w.entry(body[:0], c, sh.calls)
			body, _ = w.expr(br, body, true, c)
		}
		if br.err == nil && br.off != len(br.b) {
			br.failf("%d bytes after the function's end", len(br.b)-br.off)
		}
		if br.err != nil {
			r.err = fmt.Errorf("function %d: %w", i, br.err)
			return
		}
		var fn []byte
		if metered {
			fn = appendU32(nil, groups+1)
			fn = append(fn, decl...)
			fn = append(fn, 0x01, 0x7f) // one i32: the scratch local
		} else {
			fn = appendU32(nil, groups)
			fn = append(fn, decl...)
		}
		fn = append(fn, body...)
		out = appendName(out, fn)
		i++
	})
	if r.err == nil && int(n) != len(m.funcTypes) {
		r.failf("%d function bodies for %d functions", n, len(m.funcTypes))
	}
	return append(appendU32(nil, n), out...)
}

// names rewrites a name section's function and local names (subsections 1
// and 2) for the moved indices, keeps the module name (0), and drops the
// rest. body starts at the section's name.
func (w *rewriter) names(payload []byte, off int) ([]byte, error) {
	r := &reader{b: payload, off: off}
	out := appendName(nil, []byte("name"))
	for !r.done() {
		id := r.byte()
		sub := r.bytes(int(r.u32()))
		if r.err != nil {
			break
		}
		sr := &reader{b: sub}
		var p []byte
		switch id {
		case 0:
			p = sub
		case 1: // namemap
			n := sr.u32()
			p = appendU32(nil, n)
			for i := uint32(0); i < n && sr.err == nil; i++ {
				p = appendU32(p, w.fn(sr.u32()))
				p = appendName(p, sr.name())
			}
		case 2: // indirect namemap: function -> local names
			n := sr.u32()
			p = appendU32(nil, n)
			for i := uint32(0); i < n && sr.err == nil; i++ {
				p = appendU32(p, w.fn(sr.u32()))
				start := sr.off
				k := sr.u32()
				for j := uint32(0); j < k && sr.err == nil; j++ {
					sr.u32()
					sr.name()
				}
				p = append(p, sub[start:sr.off]...)
			}
		default:
			continue
		}
		if sr.err != nil {
			return nil, sr.err
		}
		out = appendName(append(out, id), p)
	}
	return out, r.err
}
