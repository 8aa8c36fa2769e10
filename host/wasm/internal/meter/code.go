package meter

// Opcodes the rewriter acts on (WebAssembly core spec 2.0).
const (
	opUnreachable  = 0x00
	opBlock        = 0x02
	opLoop         = 0x03
	opIf           = 0x04
	opEnd          = 0x0b
	opBr           = 0x0c
	opBrIf         = 0x0d
	opBrTable      = 0x0e
	opReturn       = 0x0f
	opCall         = 0x10
	opCallIndirect = 0x11
	opLocalGet     = 0x20
	opLocalSet     = 0x21
	opLocalTee     = 0x22
	opGlobalGet    = 0x23
	opGlobalSet    = 0x24
	opI32Const     = 0x41
	opI32Eqz       = 0x45
	opI32Sub       = 0x6b
	opRefFunc      = 0xd2
	opPrefixMisc   = 0xfc
	opPrefixSIMD   = 0xfd
	blockEmpty     = 0x40
)

// isValType reports a value type byte of core spec 2.0.
func isValType(b byte) bool {
	switch b {
	case 0x7f, 0x7e, 0x7d, 0x7c, // i32 i64 f32 f64
		0x7b,       // v128
		0x70, 0x6f: // funcref externref
		return true
	}
	return false
}

// rewriter holds what every function body's rewrite needs.
type rewriter struct {
	types         [][2]int // params, results count per function type
	importedFuncs uint32   // function indices >= this move up by one
	yield         uint32   // the yield import's function index
	fuel          uint32   // the fuel global's index
}

// fn maps a function index of the input to the output's.
func (w *rewriter) fn(idx uint32) uint32 {
	if idx >= w.importedFuncs {
		return idx + 1
	}
	return idx
}

// The checks. A metered function keeps its fuel in a scratch local c (a
// register once compiled), so a loop head costs a decrement and a branch;
// the fuel global carries the count across calls: c is stored to it
// before every call and every way out of the function, and loaded from it
// at entry and after every call. Work between two yields is therefore
// bounded by one allowance of checks however loops and calls nest (a
// callee's iterations are charged to the caller's count).

// decrement appends c -= 1, leaving c on the stack.
func (w *rewriter) decrement(out []byte, c uint32) []byte {
	out = appendU32(append(out, opLocalGet), c)
	out = append(out, opI32Const, 1, opI32Sub)
	return appendU32(append(out, opLocalTee), c)
}

// countDown appends c -= 1; if c == 0 { c = yield() }.
func (w *rewriter) countDown(out []byte, c uint32) []byte {
	out = w.decrement(out, c)
	out = append(out, opI32Eqz, opIf, blockEmpty)
	out = appendU32(append(out, opCall), w.yield)
	out = appendU32(append(out, opLocalSet), c)
	return append(out, opEnd)
}

// load appends c = fuel.
func (w *rewriter) load(out []byte, c uint32) []byte {
	out = appendU32(append(out, opGlobalGet), w.fuel)
	return appendU32(append(out, opLocalSet), c)
}

// store appends fuel = c.
func (w *rewriter) store(out []byte, c uint32) []byte {
	out = appendU32(append(out, opLocalGet), c)
	return appendU32(append(out, opGlobalSet), w.fuel)
}

// entry appends the function's prologue: c = fuel, and for a function that
// calls others one check (recursion without a loop is metered here).
func (w *rewriter) entry(out []byte, c uint32, calls bool) []byte {
	out = w.load(out, c)
	if calls {
		out = w.countDown(out, c)
	}
	return out
}

// shape is what a scan of a function body found.
type shape struct{ loops, calls bool }

// label is an open block of the input, as the output has it.
type label struct {
	level   int  // the output's nesting level of its label (0: outermost block in the function)
	wrapped bool // a loop wrapped with a cold yield path: three more levels around it
}

// expr copies one expression, through the end that closes it, from r to
// out, with function indices renumbered. With meter set (a function body
// whose scratch local is c) it inserts the checks: a count-down at every
// loop head, fuel stored before every call and exit and loaded after every
// call. It reports the expression's shape.
//
// A loop without parameters is wrapped so that its yield call lies outside
// it (a call inside a loop makes the compiler keep the loop's values in
// memory, measured at 5-10% of a plugin's time: RATIONALE.md):
//
//	block bt                      ;; done: the loop's results leave here
//	  loop                        ;; retry
//	    block                     ;; exhausted
//	      loop bt                 ;; the loop itself
//	        c -= 1; br_if exhausted (c == 0)
//	        ...body...
//	      end
//	      br done
//	    end
//	    c = yield(); br retry     ;; back to the loop's head: the same as its back-edge
//	  end
//	  unreachable
//	end
//
// Branches in the body are renumbered for the labels added around the
// loop. A loop with parameters keeps the check inline.
func (w *rewriter) expr(r *reader, out []byte, meter bool, c uint32) ([]byte, shape) {
	var labels []label
	level := 0 // open output blocks
	var sh shape
	// rel maps a branch's label of the input to the output's.
	rel := func(l uint32) (uint32, bool) {
		t := len(labels) - 1 - int(l)
		if t < 0 { // the function's own label (or invalid: the engine says so)
			return l - uint32(len(labels)) + uint32(level), true
		}
		return uint32(level - 1 - labels[t].level), false
	}
	for r.err == nil {
		start := r.off
		op := r.byte()
		switch op {
		case opBlock, opLoop, opIf:
			params := r.blockType(w.types)
			bt := r.b[start+1 : r.off]
			if op != opLoop {
				labels = append(labels, label{level: level})
				level++
				out = append(out, r.b[start:r.off]...)
				continue
			}
			sh.loops = true
			switch {
			case !meter:
				labels = append(labels, label{level: level})
				level++
				out = append(out, r.b[start:r.off]...)
			case params:
				labels = append(labels, label{level: level})
				level++
				out = append(out, r.b[start:r.off]...)
				out = w.countDown(out, c)
			default:
				out = append(append(out, opBlock), bt...)
				out = append(out, opLoop, blockEmpty, opBlock, blockEmpty)
				out = append(append(out, opLoop), bt...)
				labels = append(labels, label{level: level + 3, wrapped: true})
				level += 4
				out = w.decrement(out, c)
				out = append(out, opI32Eqz, opBrIf, 1)
			}
			continue
		case opEnd:
			if len(labels) == 0 {
				if meter {
					out = w.store(out, c)
				}
				return append(out, op), sh
			}
			lb := labels[len(labels)-1]
			labels = labels[:len(labels)-1]
			if !lb.wrapped {
				level--
				out = append(out, op)
				continue
			}
			level -= 4
			out = append(out, opEnd, opBr, 2, opEnd) // the loop; br done; exhausted
			out = appendU32(append(out, opCall), w.yield)
			out = appendU32(append(out, opLocalSet), c)
			out = append(out, opBr, 0, opEnd, opUnreachable, opEnd) // br retry; retry; done
			continue
		case opCall, opCallIndirect:
			sh.calls = true
			if meter {
				out = w.store(out, c)
			}
			if op == opCall {
				out = appendU32(append(out, op), w.fn(r.u32()))
			} else {
				r.u32() // type
				r.u32() // table
				out = append(out, r.b[start:r.off]...)
			}
			if meter {
				out = w.load(out, c)
			}
			continue
		case opRefFunc:
			out = appendU32(append(out, op), w.fn(r.u32()))
			continue
		case opReturn:
			if meter {
				out = w.store(out, c)
			}
		case opBr, opBrIf:
			l, exits := rel(r.u32())
			if meter && exits {
				out = w.store(out, c)
			}
			out = appendU32(append(out, op), l)
			continue
		case opBrTable:
			n := r.u32()
			if r.err == nil && int64(n) >= int64(len(r.b)-r.off) {
				r.failf("br_table of %d labels in %d bytes", n, len(r.b)-r.off)
				continue
			}
			targets := make([]uint32, 0, n+1)
			exits := false
			for i := uint32(0); i <= n && r.err == nil; i++ {
				l, e := rel(r.u32())
				targets = append(targets, l)
				exits = exits || e
			}
			if meter && exits {
				out = w.store(out, c)
			}
			out = appendU32(append(out, op), n)
			for _, l := range targets {
				out = appendU32(out, l)
			}
			continue
		default:
			r.immediates(op)
		}
		out = append(out, r.b[start:r.off]...)
	}
	return out, sh
}

// blockType skips a block type: empty, a value type, or a type index (s33).
// It reports whether the block has parameters (a type index whose function
// type has some; an index out of range is left to the engine to refuse).
func (r *reader) blockType(types [][2]int) bool {
	if r.off < len(r.b) && (r.b[r.off] == blockEmpty || isValType(r.b[r.off])) {
		r.off++
		return false
	}
	start := r.off
	r.skipSigned(33)
	if r.err != nil {
		return false
	}
	var idx uint64
	for i, c := range r.b[start:r.off] {
		idx |= uint64(c&0x7f) << (7 * i)
	}
	if r.b[r.off-1]&0x40 != 0 || idx >= uint64(len(types)) { // negative, or no such type
		return true // not wrapped; the engine refuses it
	}
	return types[idx][0] > 0
}

// memarg skips a memory argument (alignment, offset). Multi-memory's
// memory index (alignment bit 6) is not part of core 2.0.
func (r *reader) memarg() {
	if r.u32()&0x40 != 0 {
		r.failf("multi-memory instructions are not supported")
	}
	r.u32()
}

// immediates skips the immediates of op, any instruction of core spec 2.0
// that expr does not handle itself. Anything else is an error: an instruction the
// rewriter does not know could hide a branch or a call from it.
func (r *reader) immediates(op byte) {
	switch {
	case op == 0x00 || op == 0x01 || op == 0x05 || // unreachable nop else
		op == 0x1a || op == 0x1b || // drop select
		op >= 0x45 && op <= 0xc4 || // numeric, sign extension
		op == 0xd1: // ref.is_null
	case op == 0x1c: // select t*
		n := r.u32()
		r.bytes(int(n))
	case op >= 0x20 && op <= 0x26: // local.*, global.*, table.get/set
		r.u32()
	case op >= 0x28 && op <= 0x3e: // loads and stores
		r.memarg()
	case op == 0x3f || op == 0x40: // memory.size memory.grow
		if r.byte() != 0 {
			r.failf("memory index other than 0")
		}
	case op == 0x41:
		r.skipSigned(32)
	case op == 0x42:
		r.skipSigned(64)
	case op == 0x43:
		r.bytes(4)
	case op == 0x44:
		r.bytes(8)
	case op == 0xd0: // ref.null t
		r.byte()
	case op == opPrefixMisc:
		r.misc()
	case op == opPrefixSIMD:
		r.simd()
	default:
		r.failf("instruction 0x%02x is not supported (WebAssembly 2.0 only)", op)
	}
}

// misc skips a 0xfc-prefixed instruction's sub-opcode and immediates.
func (r *reader) misc() {
	switch sub := r.u32(); {
	case sub <= 7: // saturating truncations
	case sub == 8: // memory.init data 0
		r.u32()
		r.byte()
	case sub == 9, sub == 13, sub >= 15 && sub <= 17: // data.drop elem.drop table.grow/size/fill
		r.u32()
	case sub == 10: // memory.copy 0 0
		r.byte()
		r.byte()
	case sub == 11: // memory.fill 0
		r.byte()
	case sub == 12, sub == 14: // table.init elem table, table.copy table table
		r.u32()
		r.u32()
	default:
		r.failf("instruction 0xfc %d is not supported", sub)
	}
}

// simd skips a 0xfd-prefixed (vector) instruction's sub-opcode and
// immediates.
func (r *reader) simd() {
	switch sub := r.u32(); {
	case sub <= 11, sub == 92, sub == 93: // v128 loads, store, load*_zero
		r.memarg()
	case sub == 12, sub == 13: // v128.const, i8x16.shuffle
		r.bytes(16)
	case sub >= 21 && sub <= 34: // extract/replace lane
		r.byte()
	case sub >= 84 && sub <= 91: // load/store lane
		r.memarg()
		r.byte()
	case sub <= 255:
	default:
		r.failf("instruction 0xfd %d is not supported", sub)
	}
}
