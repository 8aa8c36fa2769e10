// @foldhost/sdk-assemblyscript: the AssemblyScript guest SDK for the foldhost
// plugin ABI v1 (abi/ABI.md). README.md has the programming model and the
// build command; this file is the whole SDK.
//
// A plugin subclasses Plugin<R> (parse: update -> record or null to reject;
// apply: records -> view puts/deletes through put/del, with batched reads)
// and registers one instance at top level:
//
//   class Router extends Plugin<Route> { ... }
//   register(new Router("example-router", "1.0.0", 1));
//   export { foldhost_abi_v1, foldhost_alloc, foldhost_info, foldhost_apply }
//     from "@foldhost/sdk-assemblyscript/assembly/exports";
//
// Queries (ABI minor 2): registerQuery at top level, and the entry file
// re-exports "@foldhost/sdk-assemblyscript/assembly/queries" (see
// "queries" below). Secondary-index helpers: indexPut, indexDel, indexScan.
//
// Memory: pointers the SDK hands out during one foldhost_apply (update keys
// and values, read results, alloc() memory) are valid until that call
// returns. The SDK's own buffers are unmanaged (heap.alloc), kept between
// batches and grown on demand; a per-batch arena is reset at every batch, so
// the SDK allocates nothing per update in steady state. The plugin's own
// managed objects (records, strings) are collected by the incremental GC.

// ---- host imports ----

@external("foldhost", "read")
declare function hostRead(space: i32, reqPtr: usize, reqLen: i32): i32;
@external("foldhost", "read_result")
declare function hostReadResult(dstPtr: usize): void;
@external("foldhost", "log")
declare function hostLog(level: i32, ptr: usize, len: i32): void;
@external("foldhost", "range")
declare function hostRange(space: i32, reqPtr: usize, reqLen: i32): i32;

// ---- constants ----

export const ABI_MINOR: i32 = 3;

export const OP_PUT: u8 = 1;
export const OP_DELETE: u8 = 2;
export const OP_PURGE: u8 = 3;

export const SPACE_VIEW: i32 = 0;
export const SPACE_RAW: i32 = 1;

export const LOG_DEBUG: i32 = -4;
export const LOG_INFO: i32 = 0;
export const LOG_WARN: i32 = 4;
export const LOG_ERROR: i32 = 8;

const MUT_PUT: u8 = 1;
const MUT_DELETE: u8 = 2;
const STATUS_OK: u32 = 0;
const STATUS_ERROR: u32 = 1;
const STATUS_OK_EFFECTS: u32 = 2;
const STATUS_OK_UPDATE_EFFECTS: u32 = 3;
const MIN_UPDATE: u32 = 1 + 8 + 8 + 4 + 4;
const OUT_HEADER: usize = 12;

const ACCEPT: i32 = 0;
const REJECT: i32 = 1;
const FAIL: i32 = -1;

// ---- public types ----

/** One update of the batch. The SDK reuses one instance: copy what you keep.
 * key and value point into the input buffer (valid for this apply). */
export class Update {
  op: u8 = 0;
  revision: u64 = 0;
  timeUnixNano: i64 = 0;
  keyPtr: usize = 0;
  keyLen: u32 = 0;
  valuePtr: usize = 0;
  valueLen: u32 = 0;

  /** The key decoded as UTF-8 (allocates). */
  key(): string {
    return String.UTF8.decodeUnsafe(this.keyPtr, this.keyLen);
  }

  /** The value decoded as UTF-8 (allocates). */
  value(): string {
    return String.UTF8.decodeUnsafe(this.valuePtr, this.valueLen);
  }

  /** Whether the key starts with the ASCII prefix (no allocation). */
  keyHasPrefix(prefix: string): bool {
    const n = <u32>prefix.length;
    if (this.keyLen < n) return false;
    for (let i: u32 = 0; i < n; i++) {
      if (<u32>load<u8>(this.keyPtr + i) != <u32>prefix.charCodeAt(i)) return false;
    }
    return true;
  }
}

/** A byte string in SDK-owned memory (a read result). */
export class Bytes {
  ptr: usize = 0;
  len: u32 = 0;
  /** For raw-space reads: the entry's revision. */
  revision: u64 = 0;

  toString(): string {
    return String.UTF8.decodeUnsafe(this.ptr, this.len);
  }
}

/** The non-generic face of a plugin, what the SDK drives. */
export abstract class PluginBase {
  constructor(public name: string, public version: string, public viewSchema: u32) {}
  abstract _begin(count: u32): void;
  /** Returns 0 accepted, 1 rejected, -1 failed. */
  abstract _parse(u: Update): i32;
  abstract _apply(): void;
  abstract _end(): void;
}

/** A plugin: parse turns an update into a record (null rejects it: malformed
 * or irrelevant, counted, never fatal); apply turns the batch's accepted
 * records, in batch order, into view mutations (put/del), reading the
 * committed fold with prefetchView/getView. Either may call fail(msg): the
 * batch then fails with a status-1 output and the host commits nothing. */
export abstract class Plugin<R> extends PluginBase {
  private records: Array<R> = new Array<R>();

  abstract parse(u: Update): R | null;
  abstract apply(records: Array<R>): void;

  _begin(count: u32): void {
    this.records.length = 0;
  }

  _parse(u: Update): i32 {
    const r = this.parse(u);
    if (failed) return FAIL;
    if (r === null) return REJECT;
    this.records.push(changetype<R>(r));
    return ACCEPT;
  }

  _apply(): void {
    this.apply(this.records);
  }

  _end(): void {
    this.records.length = 0; // let the GC have them
  }
}

let plugin: PluginBase | null = null;

/** register installs the plugin; call it once at top level. */
export function register(p: PluginBase): void {
  plugin = p;
}

// ---- growable unmanaged buffers ----

// resize grows (or first allocates) an unmanaged block to at least need
// bytes, doubling from 256; returns the new pointer. cap is the old size.
function resize(ptr: usize, cap: usize, need: usize): usize {
  let c = cap ? cap : 256;
  while (c < need) c <<= 1;
  resizedCap = c;
  return ptr ? heap.realloc(ptr, c) : heap.alloc(c);
}
let resizedCap: usize = 0;

// ---- the per-batch arena ----
// chunk header: next (usize), cap (usize), used (usize), pad; data follows.

const CHUNK_HEADER: usize = 16;
const ARENA_FIRST: usize = 64 * 1024;
const ARENA_KEEP: usize = 16 * 1024 * 1024;

let arena: usize = 0;
let arenaTotal: usize = 0;

/** alloc returns n bytes (8-aligned, uninitialised) valid until this apply
 * returns. Running out of memory traps. */
export function alloc(n: usize): usize {
  n = (n + 7) & ~(<usize>7);
  let c = arena;
  if (c == 0 || load<usize>(c, 4) - load<usize>(c, 8) < n) {
    let cap: usize = c ? load<usize>(c, 4) << 1 : ARENA_FIRST;
    if (cap < n) cap = n;
    const nc = heap.alloc(CHUNK_HEADER + cap);
    store<usize>(nc, c, 0);
    store<usize>(nc, cap, 4);
    store<usize>(nc, 0, 8);
    arena = nc;
    arenaTotal += cap;
    c = nc;
  }
  const used = load<usize>(c, 8);
  store<usize>(c, used + n, 8);
  return c + CHUNK_HEADER + used;
}

function arenaReset(): void {
  if (arena == 0) return;
  if (load<usize>(arena, 0) == 0 && arenaTotal <= ARENA_KEEP) {
    store<usize>(arena, 0, 8);
    return;
  }
  const total = arenaTotal;
  while (arena) {
    const next = load<usize>(arena, 0);
    heap.free(arena);
    arena = next;
  }
  arenaTotal = 0;
  if (total > ARENA_KEEP) return;
  const c = heap.alloc(CHUNK_HEADER + total);
  store<usize>(c, 0, 0);
  store<usize>(c, total, 4);
  store<usize>(c, 0, 8);
  arena = c;
  arenaTotal = total;
}

// ---- batch state ----

let inPtr: usize = 0;
let inCap: usize = 0;

let outPtr: usize = 0;
let outLen: usize = 0;
let outCap: usize = 0;
let outMutations: u32 = 0;
let outRejected: u32 = 0;
let outIndexed: usize = 0;

// The encoded effects (ABI minor 1), and the headers staged for the next.
let effPtr: usize = 0;
let effLen: usize = 0;
let effCap: usize = 0;
let outEffects: u32 = 0;
let hdrPtr: usize = 0;
let hdrLen: usize = 0;
let hdrCap: usize = 0;
let hdrCount: u32 = 0;
// Effects that name their update (emitFor, ABI minor 3): recPtr maps an
// accepted record to its update's index in the batch (recCount records);
// effectsFor is 0 before any effect, 1 after emit, 2 after emitFor.
let recPtr: usize = 0;
let recCap: usize = 0;
let recCount: u32 = 0;
let effectsFor: u32 = 0;
let lastUpdate: u32 = 0;

let failed = false;
let inQuery = false; // a query runs: writes fail it, ranges are allowed
let failPtr: usize = 0;
let failLen: usize = 0;
let failCap: usize = 0;

let reqPtr: usize = 0;
let reqCap: usize = 0;

const update = new Update();

// ---- the read/overlay table ----
// One entry per (space, key) read or (lazily) written in this batch.

const FETCH_NONE: u8 = 0;
const FETCH_PENDING: u8 = 1;
const FETCH_FOUND: u8 = 2;
const FETCH_MISSING: u8 = 3;

// entry layout (56 bytes)
const E_KEY: usize = 0; // arena copy, or 0: the key is in out at E_KEYOFF
const E_KEYOFF: usize = 4;
const E_KEYLEN: usize = 8;
const E_HASH: usize = 12;
const E_SLOT: usize = 16;
const E_NEXT: usize = 20; // index + 1 of the next pending entry
const E_SPACE: usize = 24;
const E_FETCH: usize = 25;
const E_WRITTEN: usize = 26;
const E_WVALOFF: usize = 28;
const E_WVALLEN: usize = 32;
const E_FVAL: usize = 36;
const E_FVALLEN: usize = 40;
const E_FREV: usize = 48;
const ENTRY: usize = 56;

let ents: usize = 0;
let nents: u32 = 0;
let entsCap: u32 = 0;
let slots: usize = 0; // u32 entry index + 1; 0 empty
let slotsCap: u32 = 0; // power of two or 0

let pendHead0: u32 = 0;
let pendTail0: u32 = 0;
let pendN0: u32 = 0;
let pendHead1: u32 = 0;
let pendTail1: u32 = 0;
let pendN1: u32 = 0;

@inline function ent(i: u32): usize {
  return ents + <usize>i * ENTRY;
}

function hashKey(space: u32, p: usize, n: u32): u32 {
  let h: u32 = 2166136261 ^ (space * 0x9E3779B9) ^ n;
  while (n >= 4) {
    h = (h ^ load<u32>(p)) * 0x9E3779B1;
    h ^= h >> 15;
    p += 4;
    n -= 4;
  }
  while (n) {
    h = (h ^ <u32>load<u8>(p)) * 0x01000193;
    p++;
    n--;
  }
  h ^= h >> 16;
  h *= 0x85EBCA6B;
  h ^= h >> 13;
  return h;
}

@inline function entryKey(e: usize): usize {
  const k = load<usize>(e, E_KEY);
  return k ? k : outPtr + <usize>load<u32>(e, E_KEYOFF);
}

function tableGrow(): void {
  const cap: u32 = slotsCap ? slotsCap << 1 : 256;
  const s = heap.alloc(<usize>cap << 2);
  memory.fill(s, 0, <usize>cap << 2);
  if (slots) heap.free(slots);
  slots = s;
  slotsCap = cap;
  for (let i: u32 = 0; i < nents; i++) {
    const e = ent(i);
    let j = load<u32>(e, E_HASH) & (cap - 1);
    while (load<u32>(slots + (<usize>j << 2))) j = (j + 1) & (cap - 1);
    store<u32>(slots + (<usize>j << 2), i + 1);
    store<u32>(e, j, E_SLOT);
  }
}

// tableFind returns the entry index for (space, key), creating it when
// create is set (keyOff != -1: the key lives in out at keyOff, else it is
// copied to the arena); or u32.MAX_VALUE when absent and not created.
function tableFind(space: u32, key: usize, len: u32, create: bool, keyOff: i64): u32 {
  const h = hashKey(space, key, len);
  if (slotsCap) {
    let j = h & (slotsCap - 1);
    while (true) {
      const s = load<u32>(slots + (<usize>j << 2));
      if (s == 0) break;
      const e = ent(s - 1);
      if (
        load<u32>(e, E_HASH) == h &&
        <u32>load<u8>(e, E_SPACE) == space &&
        load<u32>(e, E_KEYLEN) == len &&
        memory.compare(entryKey(e), key, len) == 0
      ) return s - 1;
      j = (j + 1) & (slotsCap - 1);
    }
  }
  if (!create) return u32.MAX_VALUE;
  if ((<u64>nents + 1) * 2 > <u64>slotsCap) tableGrow();
  if (nents == entsCap) {
    const cap: u32 = entsCap ? entsCap << 1 : 64;
    ents = ents ? heap.realloc(ents, <usize>cap * ENTRY) : heap.alloc(<usize>cap * ENTRY);
    entsCap = cap;
  }
  const i = nents++;
  const e = ent(i);
  memory.fill(e, 0, ENTRY);
  if (keyOff >= 0) {
    store<u32>(e, <u32>keyOff, E_KEYOFF);
  } else {
    const k = alloc(len);
    memory.copy(k, key, len);
    store<usize>(e, k, E_KEY);
  }
  store<u32>(e, len, E_KEYLEN);
  store<u32>(e, h, E_HASH);
  store<u8>(e, <u8>space, E_SPACE);
  let j = h & (slotsCap - 1);
  while (load<u32>(slots + (<usize>j << 2))) j = (j + 1) & (slotsCap - 1);
  store<u32>(slots + (<usize>j << 2), i + 1);
  store<u32>(e, j, E_SLOT);
  return i;
}

function tableReset(): void {
  for (let i: u32 = 0; i < nents; i++) {
    store<u32>(slots + (<usize>load<u32>(ent(i), E_SLOT) << 2), 0);
  }
  nents = 0;
  pendHead0 = pendTail0 = pendN0 = 0;
  pendHead1 = pendTail1 = pendN1 = 0;
}

// indexWrites records the mutations written since the last call in the
// table, so reads see them (lazily: a plugin that never reads after writing
// never pays for hashing its writes).
function indexWrites(): void {
  let off = outIndexed;
  while (off < outLen) {
    const op = load<u8>(outPtr + off);
    const klen = load<u32>(outPtr + off + 1);
    const koff = off + 5;
    off = koff + klen;
    const i = tableFind(<u32>SPACE_VIEW, outPtr + koff, klen, true, <i64>koff);
    const e = ent(i);
    store<u8>(e, op, E_WRITTEN);
    if (op == MUT_PUT) {
      const vlen = load<u32>(outPtr + off);
      store<u32>(e, vlen, E_WVALLEN);
      store<u32>(e, <u32>(off + 4), E_WVALOFF);
      off += 4 + vlen;
    }
  }
  outIndexed = off;
}

// ---- output ----

function ensureOut(extra: usize): void {
  if (outCap - outLen < extra) {
    outPtr = resize(outPtr, outCap, outLen + extra);
    outCap = resizedCap;
  }
}

@inline function outU32(v: u32): void {
  store<u32>(outPtr + outLen, v);
  outLen += 4;
}

@inline function outBytes(p: usize, n: u32): void {
  outU32(n);
  memory.copy(outPtr + outLen, p, n);
  outLen += n;
}

/** put appends a view put (key and value are copied). */
export function put(keyPtr: usize, keyLen: u32, valuePtr: usize, valueLen: u32): void {
  if (inQuery) {
    fail("foldhost: a query cannot write (put)");
    return;
  }
  ensureOut(1 + 4 + <usize>keyLen + 4 + <usize>valueLen);
  store<u8>(outPtr + outLen, MUT_PUT);
  outLen++;
  outBytes(keyPtr, keyLen);
  outBytes(valuePtr, valueLen);
  outMutations++;
}

/** del appends a view delete. */
export function del(keyPtr: usize, keyLen: u32): void {
  if (inQuery) {
    fail("foldhost: a query cannot write (del)");
    return;
  }
  ensureOut(1 + 4 + <usize>keyLen);
  store<u8>(outPtr + outLen, MUT_DELETE);
  outLen++;
  outBytes(keyPtr, keyLen);
  outMutations++;
}

function bufU32(p: usize, v: u32): void {
  store<u32>(p, v);
}

/** emitHeader stages a header (copied) for the next emit. */
export function emitHeader(namePtr: usize, nameLen: u32, valuePtr: usize, valueLen: u32): void {
  const n: usize = 8 + <usize>nameLen + <usize>valueLen;
  if (hdrCap - hdrLen < n) {
    hdrPtr = resize(hdrPtr, hdrCap, hdrLen + n);
    hdrCap = resizedCap;
  }
  bufU32(hdrPtr + hdrLen, nameLen);
  memory.copy(hdrPtr + hdrLen + 4, namePtr, nameLen);
  hdrLen += 4 + <usize>nameLen;
  bufU32(hdrPtr + hdrLen, valueLen);
  memory.copy(hdrPtr + hdrLen + 4, valuePtr, valueLen);
  hdrLen += 4 + <usize>valueLen;
  hdrCount++;
}

/**
 * emit appends an effect (ABI minor 1) with the headers staged by
 * emitHeader since the last emit: a message the host publishes once this
 * batch is committed, never if it is not, in the order emitted. Everything
 * is copied. A subject or header that abi/ABI.md ("Effects") refuses makes
 * the output malformed: the batch fails.
 */
export function emit(subjectPtr: usize, subjectLen: u32, payloadPtr: usize, payloadLen: u32): void {
  if (inQuery) {
    fail("foldhost: a query cannot emit effects (emit)");
    return;
  }
  if (effectsFor == 2) {
    fail("foldhost: emit after emitFor in one batch: every effect names its record or none does");
    return;
  }
  effectsFor = 1;
  pushEffect(subjectPtr, subjectLen, payloadPtr, payloadLen);
}

/**
 * emitFor is emit for an effect that derives from one update: the record at
 * index `record` of those apply received (ABI minor 3). Its id is then that
 * update's, whatever the batch around it, so replicas that batch the same
 * updates differently publish it once. In one batch, either every effect
 * names its record or none does, and the records named must not decrease;
 * otherwise the batch fails.
 */
export function emitFor(record: u32, subjectPtr: usize, subjectLen: u32, payloadPtr: usize, payloadLen: u32): void {
  if (inQuery) {
    fail("foldhost: a query cannot emit effects (emitFor)");
    return;
  }
  if (record >= recCount) {
    fail("foldhost: emitFor names a record apply did not receive");
    return;
  }
  const u = load<u32>(recPtr + <usize>record * 4);
  if (effectsFor == 1) {
    fail("foldhost: emitFor after emit in one batch: every effect names its record or none does");
    return;
  }
  if (effectsFor == 2 && u < lastUpdate) {
    fail("foldhost: emitFor names an earlier record than the effect before it");
    return;
  }
  effectsFor = 2;
  lastUpdate = u;
  if (effCap - effLen < 4) {
    effPtr = resize(effPtr, effCap, effLen + 4);
    effCap = resizedCap;
  }
  bufU32(effPtr + effLen, u);
  effLen += 4;
  pushEffect(subjectPtr, subjectLen, payloadPtr, payloadLen);
}

function pushEffect(subjectPtr: usize, subjectLen: u32, payloadPtr: usize, payloadLen: u32): void {
  const n: usize = 4 + <usize>subjectLen + 4 + hdrLen + 4 + <usize>payloadLen;
  if (effCap - effLen < n) {
    effPtr = resize(effPtr, effCap, effLen + n);
    effCap = resizedCap;
  }
  let p = effPtr + effLen;
  bufU32(p, subjectLen);
  memory.copy(p + 4, subjectPtr, subjectLen);
  p += 4 + <usize>subjectLen;
  bufU32(p, hdrCount);
  memory.copy(p + 4, hdrPtr, hdrLen);
  p += 4 + hdrLen;
  bufU32(p, payloadLen);
  memory.copy(p + 4, payloadPtr, payloadLen);
  effLen += n;
  outEffects++;
  hdrLen = 0;
  hdrCount = 0;
}

/** utf8 encodes s into the arena; returns the pointer, length in utf8Len. */
export let utf8Len: u32 = 0;
export function utf8(s: string): usize {
  const n = <usize>String.UTF8.byteLength(s);
  const p = alloc(n);
  utf8Len = <u32>String.UTF8.encodeUnsafe(changetype<usize>(s), s.length, p);
  return p;
}

/** putString appends a view put of UTF-8 encoded strings. */
export function putString(key: string, value: string): void {
  const k = utf8(key);
  const kl = utf8Len;
  const v = utf8(value);
  put(k, kl, v, utf8Len);
}

/** deleteString appends a view delete of a UTF-8 encoded key. */
export function deleteString(key: string): void {
  const k = utf8(key);
  del(k, utf8Len);
}

/** failBytes makes the batch fail with the message (the first call wins). */
export function failBytes(ptr: usize, len: u32): void {
  if (failed) return;
  failed = true;
  if (failCap < <usize>len) {
    failPtr = resize(failPtr, failCap, len);
    failCap = resizedCap;
  }
  memory.copy(failPtr, ptr, len);
  failLen = len;
}

/** fail makes the batch fail with msg (the first call wins). */
export function fail(msg: string): void {
  if (failed) return;
  const n = String.UTF8.byteLength(msg);
  const p = heap.alloc(<usize>n);
  String.UTF8.encodeUnsafe(changetype<usize>(msg), msg.length, p);
  failBytes(p, n);
  heap.free(p);
}

/** hasFailed reports whether fail was called in this batch. */
export function hasFailed(): bool {
  return failed;
}

// ---- reads ----

function prefetch(space: u32, key: usize, len: u32): void {
  const i = tableFind(space, key, len, true, -1);
  const e = ent(i);
  if (load<u8>(e, E_FETCH) != FETCH_NONE) return;
  store<u8>(e, FETCH_PENDING, E_FETCH);
  store<u32>(e, 0, E_NEXT);
  if (space == <u32>SPACE_VIEW) {
    if (pendN0) store<u32>(ent(pendTail0 - 1), i + 1, E_NEXT);
    else pendHead0 = i + 1;
    pendTail0 = i + 1;
    pendN0++;
  } else {
    if (pendN1) store<u32>(ent(pendTail1 - 1), i + 1, E_NEXT);
    else pendHead1 = i + 1;
    pendTail1 = i + 1;
    pendN1++;
  }
}

/** prefetchView queues a view key for the next batched read. */
export function prefetchView(keyPtr: usize, keyLen: u32): void {
  prefetch(<u32>SPACE_VIEW, keyPtr, keyLen);
}

/** prefetchRaw queues a raw-fold key for the next batched read. */
export function prefetchRaw(keyPtr: usize, keyLen: u32): void {
  prefetch(<u32>SPACE_RAW, keyPtr, keyLen);
}

function flush(space: u32): bool {
  const head = space == <u32>SPACE_VIEW ? pendHead0 : pendHead1;
  const count = space == <u32>SPACE_VIEW ? pendN0 : pendN1;
  if (count == 0) return !failed;
  let need: usize = 4;
  for (let i = head; i; i = load<u32>(ent(i - 1), E_NEXT)) {
    need += 4 + <usize>load<u32>(ent(i - 1), E_KEYLEN);
  }
  if (reqCap < need) {
    reqPtr = resize(reqPtr, reqCap, need);
    reqCap = resizedCap;
  }
  store<u32>(reqPtr, count);
  let w: usize = 4;
  for (let i = head; i; i = load<u32>(ent(i - 1), E_NEXT)) {
    const e = ent(i - 1);
    const kl = load<u32>(e, E_KEYLEN);
    store<u32>(reqPtr + w, kl);
    memory.copy(reqPtr + w + 4, entryKey(e), kl);
    w += 4 + kl;
  }
  if (space == <u32>SPACE_VIEW) pendHead0 = pendTail0 = pendN0 = 0;
  else pendHead1 = pendTail1 = pendN1 = 0;

  const n = hostRead(<i32>space, reqPtr, <i32>w);
  if (n < 0) {
    fail("foldhost: the host refused a read request");
    return false;
  }
  const resp = alloc(n ? <usize>n : 1);
  hostReadResult(resp);

  let off: usize = 0;
  const end = <usize>n;
  for (let i = head; i; i = load<u32>(ent(i - 1), E_NEXT)) {
    const e = ent(i - 1);
    if (end - off < 1) return malformedResponse();
    const found = load<u8>(resp + off);
    off++;
    if (found == 0) {
      store<u8>(e, FETCH_MISSING, E_FETCH);
      continue;
    }
    if (found != 1 || end - off < 4) return malformedResponse();
    let vlen = load<u32>(resp + off);
    off += 4;
    if (end - off < <usize>vlen) return malformedResponse();
    let v = resp + off;
    off += vlen;
    if (space == <u32>SPACE_RAW) {
      if (vlen < 8) return malformedResponse();
      store<u64>(e, load<u64>(v), E_FREV);
      v += 8;
      vlen -= 8;
    }
    store<u8>(e, FETCH_FOUND, E_FETCH);
    store<usize>(e, v, E_FVAL);
    store<u32>(e, vlen, E_FVALLEN);
  }
  if (off != end) return malformedResponse();
  return !failed;
}

function malformedResponse(): bool {
  fail("foldhost: malformed read response from the host");
  return false;
}

/** fetch sends every pending prefetch now (optional); false if the batch
 * has failed. */
export function fetch(): bool {
  const a = flush(<u32>SPACE_VIEW);
  const b = flush(<u32>SPACE_RAW);
  return a && b;
}

function get(space: u32, key: usize, len: u32, out: Bytes): i32 {
  if (space == <u32>SPACE_VIEW && !inQuery) indexWrites();
  const i = tableFind(space, key, len, true, -1);
  let e = ent(i);
  const written = load<u8>(e, E_WRITTEN);
  if (written == MUT_DELETE) return 0;
  if (written == MUT_PUT) {
    // out moves as it grows: hand out a copy that lives for the batch.
    const vl = load<u32>(e, E_WVALLEN);
    const v = alloc(vl ? <usize>vl : 1);
    memory.copy(v, outPtr + <usize>load<u32>(e, E_WVALOFF), vl);
    out.ptr = v;
    out.len = vl;
    out.revision = 0;
    return 1;
  }
  if (load<u8>(e, E_FETCH) == FETCH_NONE) prefetch(space, key, len);
  if (load<u8>(ent(i), E_FETCH) == FETCH_PENDING && !flush(space)) return FAIL;
  e = ent(i);
  const f = load<u8>(e, E_FETCH);
  if (f == FETCH_MISSING) return 0;
  if (f != FETCH_FOUND) {
    fail("foldhost: read not answered");
    return FAIL;
  }
  out.ptr = load<usize>(e, E_FVAL);
  out.len = load<u32>(e, E_FVALLEN);
  out.revision = load<u64>(e, E_FREV);
  return 1;
}

/** getView reads a view key: 1 found (out set), 0 not found, -1 the host
 * refused the read (the batch has failed). This batch's own earlier writes
 * are layered over the committed fold. */
export function getView(keyPtr: usize, keyLen: u32, out: Bytes): i32 {
  return get(<u32>SPACE_VIEW, keyPtr, keyLen, out);
}

/** getRaw reads the raw fold (out.revision is the entry's revision). */
export function getRaw(keyPtr: usize, keyLen: u32, out: Bytes): i32 {
  return get(<u32>SPACE_RAW, keyPtr, keyLen, out);
}

// ---- secondary indexes ----
// An index entry is the view key <index>/<value>/<primary> with an empty
// value (the example router's upstream/<addr>/<host>). apply writes and
// deletes entries with indexPut / indexDel; a query lists the primaries of
// one value with indexScan, one prefix range over <index>/<value>/, paged.
// value must not contain '/' (a value "a/b" would list among value "a"'s
// primaries); primary may.

/** indexKey builds <index>/<value>/<primary> in the arena; returns its
 * pointer, its length in indexKeyLen. */
export let indexKeyLen: u32 = 0;
export function indexKey(indexPtr: usize, indexLen: u32, valuePtr: usize, valueLen: u32, primaryPtr: usize, primaryLen: u32): usize {
  const n = indexLen + 1 + valueLen + 1 + primaryLen;
  const k = alloc(<usize>n);
  memory.copy(k, indexPtr, indexLen);
  store<u8>(k + indexLen, 0x2f);
  memory.copy(k + indexLen + 1, valuePtr, valueLen);
  store<u8>(k + indexLen + 1 + valueLen, 0x2f);
  memory.copy(k + indexLen + 2 + valueLen, primaryPtr, primaryLen);
  indexKeyLen = n;
  return k;
}

/** indexPut writes the index entry <index>/<value>/<primary>. */
export function indexPut(indexPtr: usize, indexLen: u32, valuePtr: usize, valueLen: u32, primaryPtr: usize, primaryLen: u32): void {
  const k = indexKey(indexPtr, indexLen, valuePtr, valueLen, primaryPtr, primaryLen);
  put(k, indexKeyLen, 0, 0);
}

/** indexDel deletes the index entry <index>/<value>/<primary>. */
export function indexDel(indexPtr: usize, indexLen: u32, valuePtr: usize, valueLen: u32, primaryPtr: usize, primaryLen: u32): void {
  const k = indexKey(indexPtr, indexLen, valuePtr, valueLen, primaryPtr, primaryLen);
  del(k, indexKeyLen);
}

/** How many entries one range of indexScan asks for. */
export const INDEX_PAGE: u32 = 1024;

/** indexScan lists the primaries of value in index, in key order, at the
 * query's snapshot: out's entries are the primaries (keyPtr/keyLen; the
 * values are empty), from one prefix range paged INDEX_PAGE keys at a time.
 * Returns 0, or -1 (the query has failed). */
export function indexScan(indexPtr: usize, indexLen: u32, valuePtr: usize, valueLen: u32, out: RangeResult): i32 {
  const prefix = indexKey(indexPtr, indexLen, valuePtr, valueLen, 0, 0);
  const pl = indexKeyLen;
  const end = prefixEnd(prefix, pl);
  const endLen = prefixEndLen;
  let start = prefix;
  let startLen = pl;
  let items: usize = 0;
  let count: u32 = 0;
  let cap: u32 = 0;
  const page = new RangeResult();
  while (true) {
    if (rangeView(start, startLen, end, endLen, INDEX_PAGE, false, page) < 0) return FAIL;
    if (count + page.count > cap) {
      let c = cap ? cap << 1 : 64;
      while (c < count + page.count) c <<= 1;
      const n = alloc(<usize>c * KV);
      if (count) memory.copy(n, items, <usize>count * KV);
      items = n;
      cap = c;
    }
    for (let i: u32 = 0; i < page.count; i++) {
      const e = items + <usize>(count + i) * KV;
      store<usize>(e, page.keyPtr(i) + pl);
      store<u32>(e, page.keyLen(i) - pl, 4);
      store<usize>(e, 0, 8);
      store<u32>(e, 0, 12);
    }
    count += page.count;
    if (!page.more || page.count == 0) break;
    start = after(page.keyPtr(page.count - 1), page.keyLen(page.count - 1));
    startLen = afterLen;
  }
  out.items = items;
  out.count = count;
  out.more = false;
  return 0;
}

// ---- queries (ABI minor 2) ----
// A plugin may export named, read-only queries: input bytes in, answer
// bytes out, reading the fold's views (and raw entries) at one snapshot
// with getView/getRaw and rangeView/prefixView/indexScan. A query cannot
// write: put, del and emit fail it. Declare them at top level and re-export
// the query exports from the entry file:
//
//   function byOwner(input: Bytes): void { ...; answer(p, n); }
//   registerQuery("by_owner", "application/json", byOwner);
//   export * from "@foldhost/sdk-assemblyscript/assembly/queries";
//
// A name is 1 to 64 of [A-Za-z0-9_.-]; the content type ("" means
// application/octet-stream) is what the host's HTTP API answers it with. A
// query answers everything appended with answer (possibly nothing), or
// fails after fail(msg) (the caller sees the message). input and everything
// the SDK hands out during the query stay valid until it returns. A plugin
// without registerQuery and the re-export exports no queries and never
// imports range.

/** A query function; the input aliases the SDK's input buffer. */
export type QueryFn = (input: Bytes) => void;

const queryNames = new Array<string>();
const queryTypes = new Array<string>();
const queryFns = new Array<QueryFn>();

/** registerQuery declares a query; call it at top level. */
export function registerQuery(name: string, contentType: string, fn: QueryFn): void {
  queryNames.push(name);
  queryTypes.push(contentType);
  queryFns.push(fn);
}

let ansPtr: usize = 0;
let ansLen: usize = 0;
let ansCap: usize = 0;

/** answer appends to the query's answer (copied). */
export function answer(p: usize, n: u32): void {
  if (ansCap - ansLen < <usize>n) {
    ansPtr = resize(ansPtr, ansCap, ansLen + <usize>n);
    ansCap = resizedCap;
  }
  memory.copy(ansPtr + ansLen, p, n);
  ansLen += n;
}

/** answerString appends a UTF-8 encoded string to the query's answer. */
export function answerString(s: string): void {
  const p = utf8(s);
  answer(p, utf8Len);
}

// A range entry in the arena: key ptr, key len, value ptr, value len.
const KV: usize = 16;

/** The answer to one range read; keys and values live until the query
 * returns. */
export class RangeResult {
  items: usize = 0;
  count: u32 = 0;
  /** The range holds entries past the last one answered: continue after
   * the last key (after()) or, in reverse, with it as the new end. */
  more: bool = false;

  keyPtr(i: u32): usize {
    return load<usize>(this.items + <usize>i * KV);
  }
  keyLen(i: u32): u32 {
    return load<u32>(this.items + <usize>i * KV, 4);
  }
  valuePtr(i: u32): usize {
    return load<usize>(this.items + <usize>i * KV, 8);
  }
  valueLen(i: u32): u32 {
    return load<u32>(this.items + <usize>i * KV, 12);
  }
}

/** after returns the smallest key greater than k (k followed by a 0 byte),
 * where the next page of a forward range starts; its length in afterLen. */
export let afterLen: u32 = 0;
export function after(k: usize, n: u32): usize {
  const p = alloc(<usize>n + 1);
  memory.copy(p, k, n);
  store<u8>(p + n, 0);
  afterLen = n + 1;
  return p;
}

/** prefixEnd returns the smallest key after every key starting with the
 * prefix (trailing 0xff bytes dropped, the last other byte incremented;
 * length 0, no upper bound, when none is left); its length in
 * prefixEndLen. */
export let prefixEndLen: u32 = 0;
export function prefixEnd(p: usize, n: u32): usize {
  const e = alloc(n ? <usize>n : 1);
  memory.copy(e, p, n);
  while (n && load<u8>(e + n - 1) == 0xff) n--;
  if (n) store<u8>(e + n - 1, load<u8>(e + n - 1) + 1);
  prefixEndLen = n;
  return e;
}

/** rangeView reads the view keys k with start <= k < end (endLen 0: no
 * upper bound) at the query's snapshot, at most limit of them, in key order
 * or, with reverse, from the end down. An answer stops early (more set)
 * where it would pass the host's read bound. Returns 0, or -1 (the query
 * has failed: the host refused it, or it was called outside a query).
 * limit 0 answers nothing. */
export function rangeView(start: usize, startLen: u32, end: usize, endLen: u32, limit: u32, reverse: bool, out: RangeResult): i32 {
  out.items = 0;
  out.count = 0;
  out.more = false;
  if (!inQuery) {
    fail("foldhost: rangeView outside a query");
    return FAIL;
  }
  if (limit == 0) return failed ? FAIL : 0;
  const need: usize = 1 + 4 + 4 + <usize>startLen + 4 + <usize>endLen;
  if (reqCap < need) {
    reqPtr = resize(reqPtr, reqCap, need);
    reqCap = resizedCap;
  }
  store<u8>(reqPtr, reverse ? 1 : 0);
  store<u32>(reqPtr + 1, limit);
  store<u32>(reqPtr + 5, startLen);
  memory.copy(reqPtr + 9, start, startLen);
  store<u32>(reqPtr + 9 + startLen, endLen);
  memory.copy(reqPtr + 13 + startLen, end, endLen);
  const n = hostRange(SPACE_VIEW, reqPtr, <i32>need);
  if (n < 0) {
    fail("foldhost: the host refused a range request");
    return FAIL;
  }
  const resp = alloc(n ? <usize>n : 1);
  hostReadResult(resp);
  const total = <usize>n;
  if (total < 5 || load<u8>(resp) > 1) return malformedRange();
  const more = load<u8>(resp) == 1;
  const count = load<u32>(resp, 1);
  let off: usize = 5;
  if (<u64>count * 8 > <u64>(total - off)) return malformedRange();
  const items = alloc(<usize>(count ? count : <u32>1) * KV);
  for (let i: u32 = 0; i < count; i++) {
    for (let j: usize = 0; j < 2; j++) {
      if (total - off < 4) return malformedRange();
      const len = load<u32>(resp + off);
      off += 4;
      if (total - off < <usize>len) return malformedRange();
      store<usize>(items + <usize>i * KV + j * 8, resp + off);
      store<u32>(items + <usize>i * KV + j * 8, len, 4);
      off += len;
    }
  }
  if (off != total) return malformedRange();
  out.items = items;
  out.count = count;
  out.more = more;
  return failed ? FAIL : 0;
}

function malformedRange(): i32 {
  fail("foldhost: malformed range answer from the host");
  return FAIL;
}

/** prefixView is rangeView over the keys starting with the prefix. */
export function prefixView(prefix: usize, prefixLen: u32, limit: u32, reverse: bool, out: RangeResult): i32 {
  const end = prefixEnd(prefix, prefixLen);
  return rangeView(prefix, prefixLen, end, prefixEndLen, limit, reverse, out);
}

// ---- logging ----

/** logBytes sends one line to the host log at a slog level. */
export function logBytes(level: i32, ptr: usize, len: u32): void {
  hostLog(level, ptr, <i32>len);
}

/** logString sends one line (UTF-8 encoded) to the host log. */
export function logString(level: i32, msg: string): void {
  const n = String.UTF8.byteLength(msg);
  const p = heap.alloc(<usize>n);
  String.UTF8.encodeUnsafe(changetype<usize>(msg), msg.length, p);
  hostLog(level, p, n);
  heap.free(p);
}

/** abort replaces AssemblyScript's env.abort when the plugin is built with
 * `--use abort=...` (see README.md): the message reaches the host log, then
 * the call traps. */
export function abort(message: string | null, fileName: string | null, line: u32, column: u32): void {
  let msg = "abort";
  if (message !== null) msg += ": " + message;
  if (fileName !== null) msg += " at " + fileName + ":" + line.toString() + ":" + column.toString();
  logString(LOG_ERROR, msg);
  unreachable();
}

// ---- the ABI exports (re-exported by exports.ts) ----

@inline function pack(p: usize, n: usize): i64 {
  return <i64>((<u64>p << 32) | <u64>(<u32>n));
}

export function foldhost_abi_v1(): i32 {
  return ABI_MINOR;
}

export function foldhost_alloc(size: i32): usize {
  if (size < 0) return 0;
  if (inPtr != 0 && <usize>size <= inCap) return inPtr;
  let c = inCap ? inCap : 4096;
  while (c < <usize>size) c <<= 1;
  if (inPtr) heap.free(inPtr);
  inPtr = heap.alloc(c);
  inCap = c;
  return inPtr;
}

let infoPtr: usize = 0;
let infoLen: usize = 0;

export function foldhost_info(): i64 {
  if (infoLen == 0) {
    const p = plugin!;
    const nl = String.UTF8.byteLength(p.name);
    const vl = String.UTF8.byteLength(p.version);
    infoLen = 4 + <usize>nl + 4 + <usize>vl + 4;
    infoPtr = heap.alloc(infoLen);
    store<u32>(infoPtr, nl);
    String.UTF8.encodeUnsafe(changetype<usize>(p.name), p.name.length, infoPtr + 4);
    store<u32>(infoPtr + 4 + nl, vl);
    String.UTF8.encodeUnsafe(changetype<usize>(p.version), p.version.length, infoPtr + 8 + nl);
    store<u32>(infoPtr + 8 + nl + vl, p.viewSchema);
  }
  return pack(infoPtr, infoLen);
}

function errorOutput(msg: string | null): i64 {
  if (msg !== null) fail(msg);
  if (failLen == 0 && !failed) fail("plugin failed");
  outLen = 0;
  ensureOut(8 + failLen);
  outU32(STATUS_ERROR);
  outBytes(failPtr, <u32>failLen);
  return pack(outPtr, outLen);
}

function beginBatch(): void {
  arenaReset();
  tableReset();
  outLen = 0;
  ensureOut(OUT_HEADER);
  outLen = OUT_HEADER;
  outIndexed = OUT_HEADER;
  outMutations = 0;
  outRejected = 0;
  effLen = 0;
  outEffects = 0;
  hdrLen = 0;
  hdrCount = 0;
  recCount = 0;
  effectsFor = 0;
  lastUpdate = 0;
  failed = false;
  failLen = 0;
}

let queriesPtr: usize = 0;
let queriesLen: usize = 0;

export function foldhost_queries(): i64 {
  if (queriesLen == 0) {
    const n = queryNames.length;
    let size: usize = 4;
    for (let i = 0; i < n; i++) {
      size += 8 + <usize>String.UTF8.byteLength(queryNames[i]) + <usize>String.UTF8.byteLength(queryTypes[i]);
    }
    queriesPtr = heap.alloc(size);
    store<u32>(queriesPtr, <u32>n);
    let w = queriesPtr + 4;
    for (let i = 0; i < n; i++) {
      const name = queryNames[i];
      const ct = queryTypes[i];
      const nl = <usize>String.UTF8.encodeUnsafe(changetype<usize>(name), name.length, w + 4);
      store<u32>(w, <u32>nl);
      w += 4 + nl;
      const cl = <usize>String.UTF8.encodeUnsafe(changetype<usize>(ct), ct.length, w + 4);
      store<u32>(w, <u32>cl);
      w += 4 + cl;
    }
    queriesLen = size;
  }
  return pack(queriesPtr, queriesLen);
}

const queryInput = new Bytes();

export function foldhost_query(nameLen: i32, inputLen: i32): i64 {
  beginBatch();
  ansLen = 0;
  if (nameLen < 0 || inputLen < 0 || inPtr == 0 || <usize>nameLen + <usize>inputLen > inCap) {
    return errorOutput("foldhost: query name and input exceed the input buffer");
  }
  let q = -1;
  for (let i = 0; i < queryNames.length && q < 0; i++) {
    const name = queryNames[i];
    if (String.UTF8.byteLength(name) != nameLen) continue;
    const p = utf8(name);
    if (memory.compare(p, inPtr, <usize>nameLen) == 0) q = i;
  }
  if (q < 0) return errorOutput("foldhost: no such query");
  queryInput.ptr = inPtr + <usize>nameLen;
  queryInput.len = <u32>inputLen;
  inQuery = true;
  queryFns[q](queryInput);
  inQuery = false;
  if (failed) return errorOutput(null);
  outLen = 0;
  ensureOut(8 + ansLen);
  outU32(STATUS_OK);
  outBytes(ansPtr, <u32>ansLen);
  return pack(outPtr, outLen);
}

export function foldhost_apply(len: i32): i64 {
  beginBatch();
  if (plugin === null) return errorOutput("foldhost: no plugin registered");
  const pl = plugin!;
  if (len < 0 || inPtr == 0 || <usize>len > inCap) {
    return errorOutput("foldhost: batch length exceeds the input buffer");
  }
  let p = inPtr;
  const end = inPtr + <usize>len;
  if (end - p < 4) return errorOutput("foldhost: malformed batch: truncated count");
  const count = load<u32>(p);
  p += 4;
  if (<u64>count * <u64>MIN_UPDATE > <u64>(end - p)) {
    return errorOutput("foldhost: malformed batch: count cannot fit");
  }
  pl._begin(count);
  const u = update;
  for (let i: u32 = 0; i < count; i++) {
    if (end - p < 1 + 8 + 8 + 4) return errorOutput("foldhost: malformed batch: truncated update");
    u.op = load<u8>(p);
    u.revision = load<u64>(p, 1);
    u.timeUnixNano = load<i64>(p, 9);
    p += 17;
    u.keyLen = load<u32>(p);
    p += 4;
    if (<u64>(end - p) < <u64>u.keyLen + 4) return errorOutput("foldhost: malformed batch: key past the end");
    u.keyPtr = p;
    p += u.keyLen;
    u.valueLen = load<u32>(p);
    p += 4;
    if (<u64>(end - p) < <u64>u.valueLen) return errorOutput("foldhost: malformed batch: value past the end");
    u.valuePtr = p;
    p += u.valueLen;
    if (u.op < OP_PUT || u.op > OP_PURGE) return errorOutput("foldhost: malformed batch: unknown update op");

    const r = pl._parse(u);
    if (failed || r == FAIL) {
      pl._end();
      return errorOutput(null);
    }
    if (r == REJECT) outRejected++;
    else {
      if (recCap < (<usize>recCount + 1) * 4) {
        recPtr = resize(recPtr, recCap, (<usize>recCount + 1) * 4);
        recCap = resizedCap;
      }
      store<u32>(recPtr + <usize>recCount * 4, i);
      recCount++;
    }
  }
  if (p != end) {
    pl._end();
    return errorOutput("foldhost: malformed batch: trailing bytes");
  }
  pl._apply();
  pl._end();
  if (failed) return errorOutput(null);
  store<u32>(outPtr, STATUS_OK);
  store<u32>(outPtr, outRejected, 4);
  store<u32>(outPtr, outMutations, 8);
  if (outEffects > 0) {
    // status 2 or 3; without effects the record stays status 0
    ensureOut(4 + effLen);
    store<u32>(outPtr, effectsFor == 2 ? STATUS_OK_UPDATE_EFFECTS : STATUS_OK_EFFECTS);
    outU32(outEffects);
    memory.copy(outPtr + outLen, effPtr, effLen);
    outLen += effLen;
  }
  return pack(outPtr, outLen);
}
