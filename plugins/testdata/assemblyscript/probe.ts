// probe.wasm (AssemblyScript build, probe-as.wasm): the SDK probe of
// ../c/probe.c, command for command, byte for byte. Built without
// `--use abort=...`, so it imports env.abort(msg, file, line, col) from the
// host like a plain AssemblyScript module.

import {
  Plugin, Update, Bytes, register, put, del, alloc, prefetchView, prefetchRaw,
  getView, getRaw, failBytes, logBytes, OP_PUT, LOG_INFO, emit, emitFor,
} from "../../../abi/sdk/assemblyscript/assembly/index";

export * from "../../../abi/sdk/assemblyscript/assembly/exports";

class Rec {
  constructor(public op: u8, public keyPtr: usize, public keyLen: u32, public valuePtr: usize, public valueLen: u32) {}
}

function hasPrefix(p: usize, n: u32, prefix: string): bool {
  if (n < <u32>prefix.length) return false;
  for (let i = 0; i < prefix.length; i++) {
    if (<i32>load<u8>(p + <usize>i) != prefix.charCodeAt(i)) return false;
  }
  return true;
}

function is(p: usize, n: u32, s: string): bool {
  return n == <u32>s.length && hasPrefix(p, n, s);
}

function putUint(dst: usize, v: u64): u32 {
  let n: u32 = 0;
  let t = v;
  do {
    n++;
    t /= 10;
  } while (t);
  for (let i = n; i > 0; i--) {
    store<u8>(dst + <usize>i - 1, <u8>(48 + v % 10));
    v /= 10;
  }
  return n;
}

function storeAscii(dst: usize, s: string): void {
  for (let i = 0; i < s.length; i++) store<u8>(dst + <usize>i, <u8>s.charCodeAt(i));
}

// result puts <prefix><i>/<k> = head + value
function result(prefix: string, i: u32, kp: usize, kl: u32, head: usize, hl: u32, vp: usize, vl: u32): void {
  const pl = <u32>prefix.length;
  const key = alloc(<usize>(pl + 10 + 1 + kl));
  let w = key;
  storeAscii(w, prefix);
  w += pl;
  w += putUint(w, i);
  store<u8>(w, 0x2f);
  w++;
  memory.copy(w, kp, kl);
  w += kl;
  const val = alloc(<usize>(hl + vl));
  memory.copy(val, head, hl);
  memory.copy(val + hl, vp, vl);
  put(key, <u32>(w - key), val, hl + vl);
}

const ONE = memory.data<u8>([0x31]);
const ZERO = memory.data<u8>([0x30]);
const head = memory.data(24);
const v = new Bytes();

class Probe extends Plugin<Rec> {
  parse(u: Update): Rec | null {
    if (hasPrefix(u.keyPtr, u.keyLen, "reject")) return null;
    if (is(u.keyPtr, u.keyLen, "parsefail")) {
      failBytes(u.valuePtr, u.valueLen);
      return null;
    }
    return new Rec(u.op, u.keyPtr, u.keyLen, u.valuePtr, u.valueLen);
  }

  apply(rs: Array<Rec>): void {
    for (let i = 0; i < rs.length; i++) {
      const r = rs[i];
      const kp = r.keyPtr;
      const kl = r.keyLen;
      if (hasPrefix(kp, kl, "w/")) {
        if (r.op == OP_PUT) put(kp + 2, kl - 2, r.valuePtr, r.valueLen);
        else del(kp + 2, kl - 2);
      } else if (hasPrefix(kp, kl, "pf/")) {
        prefetchView(kp + 3, kl - 3);
      } else if (hasPrefix(kp, kl, "pfraw/")) {
        prefetchRaw(kp + 6, kl - 6);
      } else if (hasPrefix(kp, kl, "r/")) {
        const found = getView(kp + 2, kl - 2, v);
        if (found < 0) return;
        if (found) result("got/", <u32>i, kp + 2, kl - 2, ONE, 1, v.ptr, v.len);
        else result("got/", <u32>i, kp + 2, kl - 2, ZERO, 1, 0, 0);
      } else if (hasPrefix(kp, kl, "raw/")) {
        const found = getRaw(kp + 4, kl - 4, v);
        if (found < 0) return;
        if (found) {
          let hl = putUint(head, v.revision);
          store<u8>(head + hl, 0x3a);
          hl++;
          result("rawgot/", <u32>i, kp + 4, kl - 4, head, hl, v.ptr, v.len);
        } else result("rawgot/", <u32>i, kp + 4, kl - 4, ZERO, 1, 0, 0);
      } else if (is(kp, kl, "log")) {
        logBytes(LOG_INFO, r.valuePtr, r.valueLen);
      } else if (hasPrefix(kp, kl, "emitfor/") && kl > 10) {
        emitFor(<u32>load<u8>(kp + 8) - 0x30, kp + 10, kl - 10, r.valuePtr, r.valueLen);
      } else if (hasPrefix(kp, kl, "emit/")) {
        emit(kp + 5, kl - 5, r.valuePtr, r.valueLen);
      } else if (is(kp, kl, "fail")) {
        failBytes(r.valuePtr, r.valueLen);
        return;
      }
    }
  }
}

register(new Probe("testdata-probe", "1.0.0", 1));
