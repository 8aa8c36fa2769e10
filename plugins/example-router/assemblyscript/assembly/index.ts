// example-router, the AssemblyScript build: a routing table from
// route.<host> keys. The behaviour, byte for byte, is
// plugins/example-router/SPEC.md; the Go, C and Rust builds produce the same
// views for the same input (plugins/example-router/fixtures/*.jsonl) and
// the same query answers (TestConformanceRouterQueries).
//
// Build: scripts/build-plugins (or `npm run build` in this directory).
//
// Parsing works on the raw bytes of the input buffer (no strings, no
// per-update allocation beyond the record object and arena memory). Fixed
// names live in static memory (memory.data): a helper taking a managed
// string pays for the incremental GC's shadow stack on every call, which
// made this plugin ~40% slower.

import {
  Plugin,
  Update,
  Bytes,
  register,
  put,
  del,
  alloc,
  prefetchView,
  getView,
  emitFor,
  emitHeader,
  OP_PUT,
  indexPut,
  indexDel,
  indexScan,
  registerQuery,
  answer,
  fail,
  rangeView,
  prefixEnd,
  prefixEndLen,
  after,
  afterLen,
  RangeResult,
} from "@foldhost/sdk-assemblyscript";

export * from "@foldhost/sdk-assemblyscript/assembly/exports";
export * from "@foldhost/sdk-assemblyscript/assembly/queries";

const MAX_UPSTREAMS: u32 = 64;
const MAX_ADDR: u32 = 255;
const MAX_WEIGHT: u32 = 1000;

// An upstream in unmanaged memory: addr ptr, addr len, weight (u32 each).
const UP: usize = 12;

const CH_QUOTE: u32 = 0x22; // "
const CH_BSLASH: u32 = 0x5c; // \
const CH_COMMA: u32 = 0x2c; // ,
const CH_COLON: u32 = 0x3a; // :
const CH_EQ: u32 = 0x3d; // =
const CH_SLASH: u32 = 0x2f; // /
const CH_LBRACE: u32 = 0x7b; // {
const CH_RBRACE: u32 = 0x7d; // }
const CH_LBRACK: u32 = 0x5b; // [
const CH_RBRACK: u32 = 0x5d; // ]
const CH_MINUS: u32 = 0x2d;
const CH_PLUS: u32 = 0x2b;
const CH_DOT: u32 = 0x2e;
const CH_0: u32 = 0x30;
const CH_9: u32 = 0x39;

class Route {
  isPut: bool = false;
  hostPtr: usize = 0; // aliases the update key
  hostLen: u32 = 0;
  hostKeyPtr: usize = 0; // "host/<host>", arena
  hostKeyLen: u32 = 0;
  entryPtr: usize = 0; // rendered view value, arena
  entryLen: u32 = 0;
  ups: usize = 0; // n upstreams, arena
  n: u32 = 0;
}

// ---- a minimal validating JSON reader over [jp, jend) ----
// Strict on every edge so that the Go, C and AssemblyScript builds agree
// byte for byte: known field names match exactly (case-sensitive, unescaped);
// a repeated known field or one of the wrong type (null included) makes the
// update malformed; unknown values nest at most MAX_DEPTH deep.

let jp: usize = 0;
let jend: usize = 0;
// the last string or number read
let sPtr: usize = 0;
let sLen: u32 = 0;
let sEsc = false;
let nPlain = false;

@inline function peek(): i32 {
  return jp < jend ? <i32>load<u8>(jp) : -1;
}

function ws(): void {
  while (jp < jend) {
    const c = load<u8>(jp);
    if (c != 0x20 && c != 0x09 && c != 0x0a && c != 0x0d) return;
    jp++;
  }
}

function hexval(c: u32): i32 {
  if (c >= CH_0 && c <= CH_9) return <i32>(c - CH_0);
  if (c >= 0x61 && c <= 0x66) return <i32>(c - 0x61 + 10);
  if (c >= 0x41 && c <= 0x46) return <i32>(c - 0x41 + 10);
  return -1;
}

// jstring reads a string at jp (on the opening quote) into sPtr/sLen/sEsc.
function jstring(): bool {
  jp++;
  const start = jp;
  sEsc = false;
  while (jp < jend) {
    const c = <u32>load<u8>(jp);
    if (c == CH_QUOTE) {
      sPtr = start;
      sLen = <u32>(jp - start);
      jp++;
      return true;
    }
    if (c < 0x20) return false;
    jp++;
    if (c != CH_BSLASH) continue;
    sEsc = true;
    if (jp >= jend) return false;
    const e = <u32>load<u8>(jp);
    jp++;
    if (e == 0x75) {
      // \uXXXX
      if (jend - jp < 4) return false;
      for (let i = 0; i < 4; i++) {
        if (hexval(<u32>load<u8>(jp)) < 0) return false;
        jp++;
      }
    } else if (
      e != CH_QUOTE && e != CH_BSLASH && e != CH_SLASH &&
      e != 0x62 && e != 0x66 && e != 0x6e && e != 0x72 && e != 0x74
    ) {
      return false;
    }
  }
  return false;
}

// ASCII names as static bytes: helpers that take a managed string pay for
// the incremental GC's shadow stack on every call.
const N_ADDR = memory.data<u8>([0x61, 0x64, 0x64, 0x72]);
const N_WEIGHT = memory.data<u8>([0x77, 0x65, 0x69, 0x67, 0x68, 0x74]);
const N_UPSTREAMS = memory.data<u8>([0x75, 0x70, 0x73, 0x74, 0x72, 0x65, 0x61, 0x6d, 0x73]);
const N_TRUE = memory.data<u8>([0x74, 0x72, 0x75, 0x65]);
const N_FALSE = memory.data<u8>([0x66, 0x61, 0x6c, 0x73, 0x65]);
const N_NULL = memory.data<u8>([0x6e, 0x75, 0x6c, 0x6c]);
const N_ROUTE = memory.data<u8>([0x72, 0x6f, 0x75, 0x74, 0x65, 0x2e]);

// keyIs reports whether the last string read (a member name) equals name.
// A name written with escapes never matches a known field.
function keyIs(name: usize, nl: u32): bool {
  return !sEsc && sLen == nl && memory.compare(sPtr, name, nl) == 0;
}

@inline function isDigit(c: i32): bool {
  return c >= <i32>CH_0 && c <= <i32>CH_9;
}

// jnumber reads a JSON number into sPtr/sLen; nPlain: a bare non-negative
// integer (no sign, fraction or exponent).
function jnumber(): bool {
  const start = jp;
  nPlain = true;
  if (peek() == <i32>CH_MINUS) {
    jp++;
    nPlain = false;
  }
  const c = peek();
  if (c == <i32>CH_0) {
    jp++;
  } else if (c >= 0x31 && c <= 0x39) {
    while (isDigit(peek())) jp++;
  } else {
    return false;
  }
  if (peek() == <i32>CH_DOT) {
    jp++;
    nPlain = false;
    if (!isDigit(peek())) return false;
    while (isDigit(peek())) jp++;
  }
  if (peek() == 0x65 || peek() == 0x45) {
    jp++;
    nPlain = false;
    if (peek() == <i32>CH_PLUS || peek() == <i32>CH_MINUS) jp++;
    if (!isDigit(peek())) return false;
    while (isDigit(peek())) jp++;
  }
  sPtr = start;
  sLen = <u32>(jp - start);
  return true;
}

function jliteral(lit: usize, n: usize): bool {
  if (jend - jp < n || memory.compare(jp, lit, n) != 0) return false;
  jp += n;
  return true;
}

// jmember reads an object member's name and colon.
function jmember(): bool {
  ws();
  if (peek() != <i32>CH_QUOTE || !jstring()) return false;
  ws();
  if (peek() != <i32>CH_COLON) return false;
  jp++;
  return true;
}

function jscalar(): bool {
  const c = peek();
  if (c == <i32>CH_QUOTE) return jstring();
  if (c == 0x74) return jliteral(N_TRUE, 4);
  if (c == 0x66) return jliteral(N_FALSE, 5);
  if (c == 0x6e) return jliteral(N_NULL, 4);
  return jnumber();
}

// Unknown values nest at most this deep: top-level members are at depth 1,
// an upstream object's members at depth 2, each container adds one.
const MAX_DEPTH: u32 = 64;
const stack = memory.data(<i32>MAX_DEPTH + 1);

// jskip validates and skips one value of any shape at nesting depth `depth`;
// a value deeper than MAX_DEPTH makes the input malformed.
function jskip(depth: u32): bool {
  let open: u32 = 0;
  while (true) {
    if (depth + open > MAX_DEPTH) return false;
    ws();
    const c = peek();
    if (c == <i32>CH_LBRACE || c == <i32>CH_LBRACK) {
      jp++;
      ws();
      if (peek() == (c == <i32>CH_LBRACE ? <i32>CH_RBRACE : <i32>CH_RBRACK)) {
        jp++;
      } else {
        store<u8>(stack + <usize>open, <u8>c);
        open++;
        if (c == <i32>CH_LBRACE && !jmember()) return false;
        continue;
      }
    } else if (!jscalar()) {
      return false;
    }
    // after a value: a separator, or the ends of containers
    while (true) {
      if (open == 0) return true;
      ws();
      const top = <i32>load<u8>(stack + <usize>open - 1);
      if (peek() == <i32>CH_COMMA) {
        jp++;
        if (top == <i32>CH_LBRACE && !jmember()) return false;
        break;
      }
      if (peek() != (top == <i32>CH_LBRACE ? <i32>CH_RBRACE : <i32>CH_RBRACK)) return false;
      jp++;
      open--;
    }
  }
  return false;
}

// ---- the route entry ----

function validAddr(p: usize, n: u32): bool {
  if (n == 0 || n > MAX_ADDR) return false;
  for (let i: u32 = 0; i < n; i++) {
    const c = <u32>load<u8>(p + i);
    if (c == CH_COMMA || c == CH_EQ || c == CH_SLASH || c < 0x20) return false;
  }
  return true;
}

// parseUpstream reads one upstream object (jp on '{') into u.
function parseUpstream(u: usize): bool {
  let haveAddr = false;
  let haveWeight = false;
  store<u32>(u, 1, 8);
  jp++;
  ws();
  if (peek() == <i32>CH_RBRACE) return false; // no addr
  while (true) {
    if (peek() != <i32>CH_QUOTE || !jstring()) return false;
    const isAddr = keyIs(N_ADDR, 4);
    const isWeight = keyIs(N_WEIGHT, 6);
    ws();
    if (peek() != <i32>CH_COLON) return false;
    jp++;
    ws();
    if (isAddr) {
      if (haveAddr || peek() != <i32>CH_QUOTE || !jstring() || sEsc || !validAddr(sPtr, sLen)) return false;
      haveAddr = true;
      store<u32>(u, <u32>sPtr, 0);
      store<u32>(u, sLen, 4);
    } else if (isWeight) {
      if (haveWeight || !isDigit(peek()) || !jnumber() || !nPlain || sLen > 4) return false;
      haveWeight = true;
      let w: u32 = 0;
      for (let i: u32 = 0; i < sLen; i++) w = w * 10 + (<u32>load<u8>(sPtr + i) - CH_0);
      if (w < 1 || w > MAX_WEIGHT) return false;
      store<u32>(u, w, 8);
    } else if (!jskip(2)) {
      return false;
    }
    ws();
    if (peek() == <i32>CH_COMMA) {
      jp++;
      ws();
      continue;
    }
    if (peek() == <i32>CH_RBRACE) {
      jp++;
      return haveAddr;
    }
    return false;
  }
  return false;
}

const scratchUps = memory.data(<i32>(MAX_UPSTREAMS * <u32>UP));
let parsedN: u32 = 0;

// parseUpstreams reads the upstreams array into scratchUps/parsedN.
function parseUpstreams(): bool {
  if (peek() != <i32>CH_LBRACK) return false;
  jp++;
  let n: u32 = 0;
  while (true) {
    ws();
    // also an empty array, a non-object entry, too many entries
    if (peek() != <i32>CH_LBRACE || n == MAX_UPSTREAMS) return false;
    if (!parseUpstream(scratchUps + <usize>n * UP)) return false;
    n++;
    ws();
    if (peek() == <i32>CH_COMMA) {
      jp++;
      continue;
    }
    if (peek() == <i32>CH_RBRACK) {
      jp++;
      parsedN = n;
      return true;
    }
    return false;
  }
  return false;
}

// parseEntry parses a route value; false if it breaks a rule.
function parseEntry(p: usize, len: u32): bool {
  jp = p;
  jend = p + len;
  let have = false;
  ws();
  if (peek() != <i32>CH_LBRACE) return false;
  jp++;
  ws();
  if (peek() == <i32>CH_RBRACE) return false; // no upstreams
  while (true) {
    if (peek() != <i32>CH_QUOTE || !jstring()) return false;
    const isUps = keyIs(N_UPSTREAMS, 9);
    ws();
    if (peek() != <i32>CH_COLON) return false;
    jp++;
    ws();
    if (isUps) {
      if (have || !parseUpstreams()) return false;
      have = true;
    } else if (!jskip(1)) {
      return false;
    }
    ws();
    if (peek() == <i32>CH_COMMA) {
      jp++;
      ws();
      continue;
    }
    if (peek() == <i32>CH_RBRACE) {
      jp++;
      break;
    }
    return false;
  }
  ws();
  return have && jp == jend;
}

function putUint(dst: usize, v: u32): u32 {
  let n: u32 = 0;
  let t = v;
  do {
    n++;
    t /= 10;
  } while (t);
  for (let i = n; i > 0; i--) {
    store<u8>(dst + i - 1, <u8>(CH_0 + v % 10));
    v /= 10;
  }
  return n;
}

const HOST_PREFIX = memory.data<u8>([0x68, 0x6f, 0x73, 0x74, 0x2f]); // host/
const UPSTREAM_PREFIX = memory.data<u8>([0x75, 0x70, 0x73, 0x74, 0x72, 0x65, 0x61, 0x6d, 0x2f]); // upstream/

// ---- apply helpers ----

function addrIn(set: usize, n: u32, p: usize, len: u32): bool {
  for (let i: u32 = 0; i < n; i++) {
    const e = set + <usize>i * 8;
    if (load<u32>(e, 4) == len && memory.compare(<usize>load<u32>(e), p, len) == 0) return true;
  }
  return false;
}

// oldAddrs splits a stored entry ("a=1,b=2") into its distinct addrs: a set
// of (ptr u32, len u32) in the arena; the count is in oldN.
let oldN: u32 = 0;
function oldAddrs(v: usize, vl: u32): usize {
  let parts: u32 = vl ? 1 : 0;
  for (let i: u32 = 0; i < vl; i++) if (<u32>load<u8>(v + i) == CH_COMMA) parts++;
  const set = alloc(<usize>(parts ? parts : <u32>1) * 8);
  let n: u32 = 0;
  let i: u32 = 0;
  while (i < vl) {
    const start = i;
    while (i < vl && <u32>load<u8>(v + i) != CH_COMMA) i++;
    let end = start;
    while (end < i && <u32>load<u8>(v + end) != CH_EQ) end++;
    if (!addrIn(set, n, v + start, end - start)) {
      store<u32>(set + <usize>n * 8, <u32>(v + start));
      store<u32>(set + <usize>n * 8, end - start, 4);
      n++;
    }
    i++; // the comma
  }
  oldN = n;
  return set;
}

// The reverse index upstream/<addr>/<host> is the index "upstream".
const UPSTREAM_INDEX = UPSTREAM_PREFIX; // its first 8 bytes

const newSet = memory.data(<i32>(MAX_UPSTREAMS * 8));

const CHANGED_SUBJECT = memory.data<u8>([0x72, 0x6f, 0x75, 0x74, 0x65, 0x2e, 0x63, 0x68, 0x61, 0x6e, 0x67, 0x65, 0x64]); // route.changed
const OP_HEADER = memory.data<u8>([0x52, 0x6f, 0x75, 0x74, 0x65, 0x2d, 0x4f, 0x70]); // Route-Op
const OP_PUT_VALUE = memory.data<u8>([0x70, 0x75, 0x74]); // put
const OP_DELETE_VALUE = memory.data<u8>([0x64, 0x65, 0x6c, 0x65, 0x74, 0x65]); // delete

// emitChanged emits the effect of a changed host (SPEC.md, "Effects"),
// naming the record it derives from: its id is then its update's.
function emitChanged(record: u32, r: Route): void {
  const n = r.hostLen + 1 + (r.isPut ? r.entryLen : 0);
  const payload = alloc(n);
  memory.copy(payload, r.hostPtr, r.hostLen);
  store<u8>(payload + r.hostLen, 0x0a);
  if (r.isPut) memory.copy(payload + r.hostLen + 1, r.entryPtr, r.entryLen);
  if (r.isPut) emitHeader(OP_HEADER, 8, OP_PUT_VALUE, 3);
  else emitHeader(OP_HEADER, 8, OP_DELETE_VALUE, 6);
  emitFor(record, CHANGED_SUBJECT, 13, payload, n);
}
const prev = new Bytes();

class Router extends Plugin<Route> {
  parse(u: Update): Route | null {
    if (u.keyLen <= 6 || memory.compare(u.keyPtr, N_ROUTE, 6) != 0) return null;
    const r = new Route();
    r.hostPtr = u.keyPtr + 6;
    r.hostLen = u.keyLen - 6;
    if (u.op == OP_PUT) {
      if (!parseEntry(u.valuePtr, u.valueLen)) return null;
      const n = parsedN;
      r.isPut = true;
      r.n = n;
      r.ups = alloc(<usize>n * UP);
      memory.copy(r.ups, scratchUps, <usize>n * UP);
      let size: usize = 0;
      for (let i: u32 = 0; i < n; i++) size += <usize>load<u32>(r.ups + <usize>i * UP, 4) + 1 + 4 + 1;
      const v = alloc(size);
      let w = v;
      for (let i: u32 = 0; i < n; i++) {
        const up = r.ups + <usize>i * UP;
        if (i) {
          store<u8>(w, <u8>CH_COMMA);
          w++;
        }
        const al = load<u32>(up, 4);
        memory.copy(w, <usize>load<u32>(up), al);
        w += al;
        store<u8>(w, <u8>CH_EQ);
        w++;
        w += putUint(w, load<u32>(up, 8));
      }
      r.entryPtr = v;
      r.entryLen = <u32>(w - v);
    }
    r.hostKeyLen = 5 + r.hostLen;
    r.hostKeyPtr = alloc(r.hostKeyLen);
    memory.copy(r.hostKeyPtr, HOST_PREFIX, 5);
    memory.copy(r.hostKeyPtr + 5, r.hostPtr, r.hostLen);
    return r;
  }

  apply(rs: Array<Route>): void {
    const count = rs.length;
    for (let i = 0; i < count; i++) prefetchView(rs[i].hostKeyPtr, rs[i].hostKeyLen);
    for (let i = 0; i < count; i++) {
      const r = rs[i];
      const found = getView(r.hostKeyPtr, r.hostKeyLen, prev);
      if (found < 0) return;
      // Decided before any write: prev may alias the output buffer.
      let changed = found != 0;
      if (r.isPut) changed = !found || prev.len != r.entryLen || memory.compare(prev.ptr, r.entryPtr, r.entryLen) != 0;
      let olds: usize = 0;
      let nold: u32 = 0;
      if (found) {
        olds = oldAddrs(prev.ptr, prev.len);
        nold = oldN;
      }

      let nnew: u32 = 0;
      for (let j: u32 = 0; j < r.n; j++) {
        const up = r.ups + <usize>j * UP;
        const ap = <usize>load<u32>(up);
        const al = load<u32>(up, 4);
        if (!addrIn(newSet, nnew, ap, al)) {
          store<u32>(newSet + <usize>nnew * 8, <u32>ap);
          store<u32>(newSet + <usize>nnew * 8, al, 4);
          nnew++;
        }
      }
      for (let j: u32 = 0; j < nold; j++) {
        const ap = <usize>load<u32>(olds + <usize>j * 8);
        const al = load<u32>(olds + <usize>j * 8, 4);
        if (!addrIn(newSet, nnew, ap, al)) indexDel(UPSTREAM_INDEX, 8, ap, al, r.hostPtr, r.hostLen);
      }
      for (let j: u32 = 0; j < nnew; j++) {
        const ap = <usize>load<u32>(newSet + <usize>j * 8);
        const al = load<u32>(newSet + <usize>j * 8, 4);
        if (!addrIn(olds, nold, ap, al)) indexPut(UPSTREAM_INDEX, 8, ap, al, r.hostPtr, r.hostLen);
      }
      if (r.isPut) put(r.hostKeyPtr, r.hostKeyLen, r.entryPtr, r.entryLen);
      else del(r.hostKeyPtr, r.hostKeyLen);
      if (changed) emitChanged(<u32>i, r);
    }
  }
}

register(new Router("example-router", "1.0.0", 1));

// ---- queries (ABI minor 2; SPEC.md, "Queries") ----

const HEX = memory.data<u8>([0x30, 0x31, 0x32, 0x33, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x61, 0x62, 0x63, 0x64, 0x65, 0x66]);
const esc = memory.data(8);

// jsonStr appends s as a JSON string: '"' and '\' escaped, control
// characters as \u00XX, every other byte as is.
function jsonStr(s: usize, n: u32): void {
  store<u8>(esc, <u8>CH_QUOTE);
  answer(esc, 1);
  let run: u32 = 0;
  for (let i: u32 = 0; i < n; i++) {
    const c = <u32>load<u8>(s + i);
    if (c >= 0x20 && c != CH_QUOTE && c != CH_BSLASH) continue;
    answer(s + run, i - run);
    run = i + 1;
    store<u8>(esc, 0x5c);
    if (c == CH_QUOTE || c == CH_BSLASH) {
      store<u8>(esc + 1, <u8>c);
      answer(esc, 2);
    } else {
      store<u8>(esc + 1, 0x75); // u
      store<u8>(esc + 2, <u8>CH_0);
      store<u8>(esc + 3, <u8>CH_0);
      store<u8>(esc + 4, load<u8>(HEX + (c >> 4)));
      store<u8>(esc + 5, load<u8>(HEX + (c & 15)));
      answer(esc, 6);
    }
  }
  answer(s + run, n - run);
  store<u8>(esc, <u8>CH_QUOTE);
  answer(esc, 1);
}

function answerAscii(s: string): void {
  for (let i = 0; i < s.length; i++) {
    store<u8>(esc, <u8>s.charCodeAt(i));
    answer(esc, 1);
  }
}

const QUERY_PAGE: u32 = 1024;
const scanned = new RangeResult();

// hosts_of_upstream: input an upstream addr; answers
// {"upstream":"<addr>","hosts":["<host>",...]} in host order, from the
// reverse index (one paged prefix range over upstream/<addr>/).
function hostsOfUpstream(input: Bytes): void {
  if (!validAddr(input.ptr, input.len)) {
    fail("hosts_of_upstream: the input must be an upstream addr (1 to 255 bytes, no ',', '=', '/' or control characters)");
    return;
  }
  if (indexScan(UPSTREAM_INDEX, 8, input.ptr, input.len, scanned) < 0) return;
  answerAscii('{"upstream":');
  jsonStr(input.ptr, input.len);
  answerAscii(',"hosts":[');
  for (let i: u32 = 0; i < scanned.count; i++) {
    if (i) answerAscii(",");
    jsonStr(scanned.keyPtr(i), scanned.keyLen(i));
  }
  answerAscii("]}");
}

// A ranked upstream in the arena: addr ptr, addr len, hosts (u32 each).
const RK: usize = 12;

// rankInsert keeps top[0..rankN) (at most max) ordered by hosts descending;
// addrs come in ascending order, so a tie keeps the earlier (smaller) addr
// first.
let rankN: u32 = 0;
function rankInsert(top: usize, max: u32, a: usize, al: u32, hosts: u32): void {
  let i = rankN;
  if (i == max) {
    if (load<u32>(top + <usize>(max - 1) * RK, 8) >= hosts) return;
    i = max - 1;
  } else {
    rankN++;
  }
  while (i > 0 && load<u32>(top + <usize>(i - 1) * RK, 8) < hosts) {
    memory.copy(top + <usize>i * RK, top + <usize>(i - 1) * RK, RK);
    i--;
  }
  store<u32>(top + <usize>i * RK, <u32>a);
  store<u32>(top + <usize>i * RK, al, 4);
  store<u32>(top + <usize>i * RK, hosts, 8);
}

const page = new RangeResult();
const numBuf = memory.data(12);

// top_upstreams: input n, a decimal 1..1000 (empty: 10); answers the n
// upstreams serving the most hosts, [{"addr":"<addr>","hosts":<count>},...],
// most first, ties in addr order, from one paged range over upstream/.
function topUpstreams(input: Bytes): void {
  let max: u32 = 10;
  if (input.len) {
    if (input.len > 4) {
      fail("top_upstreams: the input must be a count from 1 to 1000");
      return;
    }
    max = 0;
    for (let i: u32 = 0; i < input.len; i++) {
      const c = <u32>load<u8>(input.ptr + i);
      if (c < CH_0 || c > CH_9) {
        fail("top_upstreams: the input must be a count from 1 to 1000");
        return;
      }
      max = max * 10 + (c - CH_0);
    }
    if (max < 1 || max > 1000) {
      fail("top_upstreams: the input must be a count from 1 to 1000");
      return;
    }
  }
  const top = alloc(<usize>max * RK);
  rankN = 0;
  let curA: usize = 0;
  let curL: u32 = 0;
  let curN: u32 = 0;
  const end = prefixEnd(UPSTREAM_PREFIX, 9);
  const endLen = prefixEndLen;
  let start = UPSTREAM_PREFIX;
  let startLen: u32 = 9;
  while (true) {
    if (rangeView(start, startLen, end, endLen, QUERY_PAGE, false, page) < 0) return;
    for (let i: u32 = 0; i < page.count; i++) {
      const a = page.keyPtr(i) + 9;
      const rest = page.keyLen(i) - 9;
      let al: u32 = 0;
      while (al < rest && <u32>load<u8>(a + al) != CH_SLASH) al++;
      if (curN && curL == al && memory.compare(curA, a, al) == 0) {
        curN++;
        continue;
      }
      if (curN) rankInsert(top, max, curA, curL, curN);
      curA = a; // lives until the query returns
      curL = al;
      curN = 1;
    }
    if (!page.more || page.count == 0) break;
    start = after(page.keyPtr(page.count - 1), page.keyLen(page.count - 1));
    startLen = afterLen;
  }
  if (curN) rankInsert(top, max, curA, curL, curN);
  answerAscii("[");
  for (let i: u32 = 0; i < rankN; i++) {
    if (i) answerAscii(",");
    answerAscii('{"addr":');
    jsonStr(<usize>load<u32>(top + <usize>i * RK), load<u32>(top + <usize>i * RK, 4));
    answerAscii(',"hosts":');
    answer(numBuf, putUint(numBuf, load<u32>(top + <usize>i * RK, 8)));
    answerAscii("}");
  }
  answerAscii("]");
}

registerQuery("hosts_of_upstream", "application/json", hostsOfUpstream);
registerQuery("top_upstreams", "application/json", topUpstreams);
