#!/usr/bin/env node
// A dev check of the example-router builds under node (the authoritative
// conformance test is 'foldhost plugin test' on the fixtures, in
// cmd/foldhost's TestRouterFixtures). It
//
//   1. lists each module's imports and exports and checks the ABI names;
//   2. runs the conformance fixtures (fixtures/views.jsonl) through every
//      build it finds, with a tiny host
//      (a committed view and raw fold, batched reads, commit on status 0);
//   3. runs every build beside the C build on the same batches (the
//      conformance table, then random batches): the AssemblyScript and Rust
//      builds must produce byte-identical output records, every build the
//      same views;
//   4. checks a few SDK edge cases (malformed batches, input buffer growth,
//      a host that refuses reads, flat memory over many batches);
//   5. drives the SDK probes (plugins/testdata/c/probe.c and its
//      AssemblyScript and Rust twins): the writer, batched reads, the
//      overlay of the batch's own writes, raw reads, failures, logging.
//
// Usage: node plugins/example-router/check/check.mjs [build dir]
//        (CHECK_SEED, CHECK_N: seed and count of the random batches)
// Exits non-zero on any failure; the last line is "N passed, N failed".

import { readFileSync, existsSync } from "node:fs";
import { WASI } from "node:wasi";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

process.removeAllListeners("warning"); // node:wasi's ExperimentalWarning

const here = dirname(fileURLToPath(import.meta.url));
const buildDir = process.argv[2] || join(here, "..", "build");
const conformance = readCases(join(here, "..", "fixtures", "views.jsonl"));

// readCases reads a fixture file of gen_conformance.py's shape (docs/plugins.md,
// "Fixtures"): each fixture a case, its batches, and the views and rejected
// count its last batch expects.
function readCases(path) {
  const cases = [];
  let c = null;
  let open = null;
  for (const text of readFileSync(path, "utf8").split("\n")) {
    if (text.trim() === "" || text.trim().startsWith("#")) continue;
    const l = JSON.parse(text);
    if ("fixture" in l) {
      c = { name: l.fixture, batches: [], want_views: {}, want_rejected: 0 };
      cases.push(c);
      open = null;
    } else if ("batch" in l) {
      c.batches.push(open);
      open = null;
    } else if ("view" in l) {
      c.want_views[l.view] = l.value;
    } else if ("rejected" in l) {
      c.want_rejected = l.rejected;
    } else if ("key" in l) {
      if (!open) open = [];
      open.push(l.op ? { op: l.op, key: l.key } : { op: "put", key: l.key, value: l.value });
    } else throw new Error(`${path}: an unexpected line ${text}`);
  }
  return cases;
}

let passed = 0;
let failed = 0;
function ok(cond, what) {
  if (cond) passed++;
  else {
    failed++;
    console.log("FAIL " + (what.length > 400 ? what.slice(0, 400) + "..." : what));
  }
  return cond;
}

const OPS = { put: 1, delete: 2, purge: 3 };
const enc = new TextEncoder();
const latin1 = (b) => Buffer.from(b).toString("latin1"); // byte-exact map keys

// ---- a tiny host ----

class Guest {
  constructor(path) {
    this.path = path;
    this.module = new WebAssembly.Module(readFileSync(path));
    this.reset();
    this.refuseReads = false;
    this.reads = 0;
    this.logs = [];
    const wasi = new WASI({ version: "preview1", args: [], env: {}, returnOnExit: true });
    const self = this;
    const mem = () => new Uint8Array(self.instance.exports.memory.buffer);
    const imports = {
      wasi_snapshot_preview1: wasi.wasiImport,
      foldhost: {
        read(space, ptr, len) {
          self.reads++;
          if (self.refuseReads) return -1;
          const req = Buffer.from(mem().slice(ptr, ptr + len));
          const n = req.readUInt32LE(0);
          let off = 4;
          const parts = [];
          for (let i = 0; i < n; i++) {
            const kl = req.readUInt32LE(off);
            const key = latin1(req.subarray(off + 4, off + 4 + kl));
            off += 4 + kl;
            if (space === 0) {
              const v = self.view.get(key);
              if (v === undefined) parts.push(Buffer.from([0]));
              else parts.push(Buffer.from([1]), u32(v.length), v);
            } else {
              const e = self.raw.get(key);
              if (e === undefined) parts.push(Buffer.from([0]));
              else {
                const rev = Buffer.alloc(8);
                rev.writeBigUInt64LE(BigInt(e.rev));
                parts.push(Buffer.from([1]), u32(8 + e.value.length), rev, e.value);
              }
            }
          }
          if (off !== len) return -1;
          self.pending = Buffer.concat(parts);
          return self.pending.length;
        },
        read_result(dst) {
          mem().set(self.pending, dst);
        },
        // ABI minor 2: range is for queries, which this harness does not
        // run; the host refuses it during apply with -1, as here.
        range(space, ptr, len) {
          return -1;
        },
        log(level, ptr, len) {
          self.logs.push(level + " " + Buffer.from(mem().slice(ptr, ptr + len)).toString());
        },
      },
      env: {
        abort(msg, file, line, col) {
          throw new Error(`env.abort at ${line}:${col}`);
        },
      },
    };
    this.instance = new WebAssembly.Instance(this.module, imports);
    wasi.initialize(this.instance); // calls _initialize when exported
    this.x = this.instance.exports;
  }

  reset() {
    this.view = new Map();
    this.raw = new Map();
  }

  info() {
    const [p, n] = unpack(this.x.foldhost_info());
    const b = Buffer.from(new Uint8Array(this.x.memory.buffer, p, n));
    const nl = b.readUInt32LE(0);
    const name = b.subarray(4, 4 + nl).toString();
    const vl = b.readUInt32LE(4 + nl);
    const version = b.subarray(8 + nl, 8 + nl + vl).toString();
    return { name, version, schema: b.readUInt32LE(8 + nl + vl), len: n, want: 12 + nl + vl };
  }

  // callRaw hands a raw batch to the guest; returns a copy of the output.
  callRaw(batch) {
    const ptr = this.x.foldhost_alloc(batch.length);
    if (ptr === 0) throw new Error("alloc returned 0");
    new Uint8Array(this.x.memory.buffer).set(batch, ptr);
    const [p, n] = unpack(this.x.foldhost_apply(batch.length));
    const out = Buffer.from(new Uint8Array(this.x.memory.buffer).slice(p, p + n));
    if (this.x.foldhost_gc) this.x.foldhost_gc();
    return out;
  }

  // apply runs one batch of {op,key,value} and commits on success.
  apply(updates, rev0) {
    const out = this.callRaw(encodeBatch(updates, rev0));
    const d = decodeOutput(out);
    if (d.status === 0) {
      for (const m of d.mutations) {
        if (m.op === 1) this.view.set(m.key, m.value);
        else this.view.delete(m.key);
      }
      updates.forEach((u, i) => {
        const k = latin1(enc.encode(u.key));
        if (u.op === "put") this.raw.set(k, { rev: rev0 + i, value: Buffer.from(enc.encode(u.value || "")) });
        else this.raw.delete(k);
      });
    }
    return { out, ...d };
  }
}

function u32(n) {
  const b = Buffer.alloc(4);
  b.writeUInt32LE(n);
  return b;
}

function unpack(v) {
  const x = BigInt.asUintN(64, BigInt(v));
  return [Number(x >> 32n), Number(x & 0xffffffffn)];
}

function encodeBatch(updates, rev0) {
  const parts = [u32(updates.length)];
  updates.forEach((u, i) => {
    const h = Buffer.alloc(17);
    h[0] = typeof u.op === "number" ? u.op : OPS[u.op];
    h.writeBigUInt64LE(BigInt(rev0 + i), 1);
    h.writeBigInt64LE(BigInt(rev0 + i) * 1000n, 9);
    const k = Buffer.from(enc.encode(u.key));
    const v = Buffer.from(u.op === "put" ? enc.encode(u.value || "") : []);
    parts.push(h, u32(k.length), k, u32(v.length), v);
  });
  return Buffer.concat(parts);
}

function decodeOutput(b) {
  const status = b.readUInt32LE(0);
  if (status === 1) {
    const n = b.readUInt32LE(4);
    if (8 + n !== b.length) throw new Error("trailing bytes in an error record");
    return { status, message: b.subarray(8, 8 + n).toString() };
  }
  if (status !== 0 && status !== 2) throw new Error("bad status " + status);
  const rejected = b.readUInt32LE(4);
  const count = b.readUInt32LE(8);
  let off = 12;
  const mutations = [];
  for (let i = 0; i < count; i++) {
    const op = b[off];
    const kl = b.readUInt32LE(off + 1);
    const key = latin1(b.subarray(off + 5, off + 5 + kl));
    off += 5 + kl;
    let value;
    if (op === 1) {
      const vl = b.readUInt32LE(off);
      value = Buffer.from(b.subarray(off + 4, off + 4 + vl));
      off += 4 + vl;
    } else if (op !== 2) throw new Error("bad mutation op " + op);
    mutations.push({ op, key, value });
  }
  // Status 2 (ABI minor 1): effects follow; reported as an ok output.
  const effects = [];
  if (status === 2) {
    const ne = b.readUInt32LE(off);
    off += 4;
    if (ne === 0) throw new Error("status 2 without effects");
    const str = () => {
      const n = b.readUInt32LE(off);
      const v = Buffer.from(b.subarray(off + 4, off + 4 + n));
      off += 4 + n;
      return v;
    };
    for (let i = 0; i < ne; i++) {
      const subject = str().toString("latin1");
      const nh = b.readUInt32LE(off);
      off += 4;
      const headers = [];
      for (let j = 0; j < nh; j++) headers.push([str().toString("latin1"), str().toString("latin1")]);
      effects.push({ subject, headers, payload: str() });
    }
  }
  if (off !== b.length) throw new Error("trailing bytes in an output record");
  return { status: 0, rejected, mutations, effects };
}

function viewObject(view) {
  const o = {};
  for (const [k, v] of [...view.entries()].sort()) {
    o[Buffer.from(k, "latin1").toString()] = v.toString();
  }
  return o;
}

function sameViews(got, want) {
  const a = JSON.stringify(Object.entries(got).sort());
  const b = JSON.stringify(Object.entries(want).sort());
  return a === b;
}

// runCase runs one conformance case; returns the outputs per batch.
function runCase(g, c) {
  g.reset();
  let rev = 1;
  let rejected = 0;
  const outs = [];
  for (const batch of c.batches) {
    const r = g.apply(batch, rev);
    rev += batch.length;
    outs.push(r.out);
    if (!ok(r.status === 0, `${g.name}: ${c.name}: status ${r.status} ${r.message || ""}`)) return outs;
    rejected += r.rejected;
  }
  const got = viewObject(g.view);
  ok(sameViews(got, c.want_views),
    `${g.name}: ${c.name}: views\n  got  ${JSON.stringify(got)}\n  want ${JSON.stringify(c.want_views)}`);
  ok(rejected === c.want_rejected, `${g.name}: ${c.name}: rejected ${rejected}, want ${c.want_rejected}`);
  return outs;
}

// ---- random batches for the differential run ----

function rng(seed) {
  let s = seed >>> 0;
  return () => {
    s ^= s << 13;
    s >>>= 0;
    s ^= s >>> 17;
    s ^= s << 5;
    s >>>= 0;
    return s / 4294967296;
  };
}

function randomValue(r) {
  const pick = (a) => a[Math.floor(r() * a.length)];
  const addrs = ["10.0.0.1:80", "10.0.0.2:80", "b:1", "c:1", "x".repeat(255), "é:1", "a,b", "a=b", "a/b", "", "a\\\"b"];
  const weights = [undefined, "1", "2", "1000", "1001", "0", "1.5", "null", '"3"', "-1", "7"];
  const n = r() < 0.05 ? 65 : Math.floor(r() * 5);
  const items = [];
  for (let i = 0; i < n; i++) {
    const f = [];
    if (r() < 0.95) f.push(`"addr":"${pick(addrs)}"`);
    const w = pick(weights);
    if (w !== undefined) f.push(`"weight":${w}`);
    if (r() < 0.2) f.push(`"x":{"y":[1,"\\"]",{}]}`);
    if (r() < 0.5) f.reverse();
    items.push("{" + f.join(",") + "}");
  }
  let v = `{"upstreams":[${items.join(",")}]${r() < 0.3 ? ',"c":"\\u00e9\\n"' : ""}}`;
  if (r() < 0.1) {
    // corrupt one byte
    const i = Math.floor(r() * v.length);
    v = v.slice(0, i) + pick(["{", "}", "[", "]", ",", '"', "\\", " ", "x", ""]) + v.slice(i + 1);
  }
  return v;
}

function randomBatch(r, n) {
  const hosts = ["a", "b", "c", "a/b", "é"];
  const b = [];
  for (let i = 0; i < n; i++) {
    const x = r();
    const key = r() < 0.05 ? "other." + i : "route." + hosts[Math.floor(r() * hosts.length)];
    if (x < 0.7) b.push({ op: "put", key, value: randomValue(r) });
    else if (x < 0.9) b.push({ op: "delete", key });
    else b.push({ op: "purge", key });
  }
  return b;
}

// ---- main ----

const builds = ["c", "as", "go", "rust"]
  .map((l) => ({ lang: l, path: join(buildDir, `router-${l}.wasm`) }))
  .filter((b) => existsSync(b.path));
if (builds.length === 0) {
  console.log("no builds in " + buildDir + "; run scripts/build-plugins");
  process.exit(1);
}

const guests = {};
for (const b of builds) {
  let g;
  try {
    g = new Guest(b.path);
  } catch (e) {
    ok(false, `${b.lang}: instantiate: ${e.message}`);
    continue;
  }
  g.name = b.lang;
  guests[b.lang] = g;
  const exps = WebAssembly.Module.exports(g.module).map((e) => `${e.name}:${e.kind}`);
  const imps = WebAssembly.Module.imports(g.module).map((i) => `${i.module}.${i.name}`);
  console.log(`${b.lang}: ${b.path}\n  exports ${exps.join(" ")}\n  imports ${imps.join(" ") || "(none)"}`);
  for (const want of ["memory:memory", "foldhost_abi_v1:function", "foldhost_alloc:function", "foldhost_info:function", "foldhost_apply:function"]) {
    ok(exps.includes(want), `${b.lang}: export ${want}`);
  }
  for (const i of imps) {
    const allowed = i.startsWith("wasi_snapshot_preview1.") || i.startsWith("foldhost.") || i === "env.abort";
    ok(allowed, `${b.lang}: import ${i} is not one the host provides`);
  }
  // Every SDK speaks minor 2 (queries).
  ok(g.x.foldhost_abi_v1() === 2, `${b.lang}: abi minor`);
  const info = g.info();
  ok(info.name === "example-router" && info.version === "1.0.0" && info.schema === 1 && info.len === info.want,
    `${b.lang}: info ${JSON.stringify(info)}`);
}

// conformance, every build
const outputs = {};
for (const [lang, g] of Object.entries(guests)) {
  outputs[lang] = conformance.map((c) => runCase(g, c));
}

// Every build against the C build, byte for byte: the conformance batches,
// then random batches.
const ref = guests.c;
const c = guests.c;
const as = guests.as;
const rust = guests.rust;
const others = Object.values(guests).filter((g) => g !== ref);
if (ref && others.length) {
  // The AssemblyScript and Rust builds must match the C build byte for byte
  // (the same mutation stream); other builds must reach the same views, and
  // differing output records are reported as notes.
  const exact = (g) => g.name === "as" || g.name === "rust";
  const note = (g, what) => (exact(g) ? ok(false, what) : console.log("NOTE " + what.slice(0, 400)));
  const same = {};
  const diffs = {};
  for (const g of others) {
    same[g.name] = 0;
    conformance.forEach((cs, i) => {
      outputs.c[i].forEach((o, j) => {
        if (o.equals(outputs[g.name][i][j])) same[g.name]++;
        else {
          diffs[g.name] = (diffs[g.name] || 0) + 1;
          if (diffs[g.name] <= 3) note(g, `c vs ${g.name}: ${cs.name}: batch ${j} output differs`);
        }
      });
    });
  }
  const r = rng(Number(process.env.CHECK_SEED || 12345));
  for (const g of Object.values(guests)) g.reset();
  let rev = 1;
  const N = Number(process.env.CHECK_N || 3000);
  for (let i = 0; i < N; i++) {
    const b = randomBatch(r, 1 + Math.floor(r() * 12));
    const rc = ref.apply(b, rev);
    for (const g of others) {
      const rg = g.apply(b, rev);
      if (!rc.out.equals(rg.out)) {
        diffs[g.name] = (diffs[g.name] || 0) + 1;
        if (diffs[g.name] <= 3) note(g, `c vs ${g.name}: random batch ${i} differs: ${JSON.stringify(b)}`);
      } else same[g.name]++;
    }
    rev += b.length;
  }
  for (const g of others) {
    if (exact(g)) ok(!diffs[g.name], `c vs ${g.name}: ${diffs[g.name]} output records differ`);
    ok(sameViews(viewObject(ref.view), viewObject(g.view)), `c vs ${g.name}: views after random batches`);
    console.log(`c vs ${g.name}: ${same[g.name]} identical output records, ${diffs[g.name] || 0} different`);
  }
}

// SDK edge cases, C, AS and Rust
for (const g of [c, as, rust].filter(Boolean)) {
  const n = g.name;
  const status1 = (buf, what) => {
    const d = decodeOutput(g.callRaw(buf));
    ok(d.status === 1 && d.message.includes("malformed batch"), `${n}: ${what}: ${JSON.stringify(d)}`);
  };
  const good = encodeBatch([{ op: "put", key: "route.z", value: '{"upstreams":[{"addr":"a:1"}]}' }], 1);
  status1(Buffer.alloc(0), "empty batch record");
  status1(good.subarray(0, good.length - 1), "truncated batch");
  status1(Buffer.concat([good, Buffer.from([0])]), "trailing byte");
  status1(Buffer.from([0xff, 0xff, 0xff, 0xff]), "huge count");
  const badOp = Buffer.from(good);
  badOp[4] = 9;
  status1(badOp, "unknown op");
  g.reset();
  let d = decodeOutput(g.callRaw(encodeBatch([], 1)));
  ok(d.status === 0 && d.mutations.length === 0 && d.rejected === 0, `${n}: empty batch`);

  // a big batch grows the input buffer, the arena and the table
  const big = [];
  for (let i = 0; i < 5000; i++) big.push({ op: "put", key: "route.h" + (i % 700), value: `{"upstreams":[{"addr":"u${i % 13}:1"},{"addr":"v${i % 7}:1","weight":${1 + (i % 1000)}}]}` });
  g.reset();
  const r = g.apply(big, 1);
  ok(r.status === 0 && r.rejected === 0, `${n}: big batch status ${r.status} ${r.message || ""}`);
  ok(g.view.size === 700 * 3 || g.view.size === 700 * 2 || g.view.size > 1400, `${n}: big batch view size ${g.view.size}`);
  ok(g.reads > 0, `${n}: reads happened`);

  // one read call per batch for the prefetched keys
  const before = g.reads;
  g.apply([{ op: "delete", key: "route.h1" }, { op: "delete", key: "route.h2" }, { op: "put", key: "route.h3", value: '{"upstreams":[{"addr":"q:1"}]}' }], 10000);
  ok(g.reads - before === 1, `${n}: ${g.reads - before} read calls for one batch, want 1`);

  // a host that refuses reads fails the batch with a message
  g.refuseReads = true;
  d = decodeOutput(g.callRaw(encodeBatch([{ op: "delete", key: "route.h1" }], 20000)));
  g.refuseReads = false;
  ok(d.status === 1 && d.message.includes("refused"), `${n}: refused read: ${JSON.stringify(d)}`);
  // and the next batch works again
  d = decodeOutput(g.callRaw(encodeBatch([{ op: "delete", key: "route.h1" }], 20001)));
  ok(d.status === 0, `${n}: batch after a refused read: ${JSON.stringify(d)}`);

  // memory stays flat over many batches (arena reset, no leaks)
  const pages0 = g.x.memory.buffer.byteLength;
  for (let i = 0; i < 2000; i++) g.apply(big.slice(0, 50), 30000 + i * 50);
  ok(g.x.memory.buffer.byteLength === pages0, `${n}: memory grew from ${pages0} to ${g.x.memory.buffer.byteLength} over 2000 batches`);
}

// SDK probes (plugins/testdata/build/probe-{c,as,rust}.wasm; see
// plugins/testdata/c/probe.c): writer, batched reads, the overlay, raw reads,
// failures and logging, with the same bytes from C, AssemblyScript and Rust.
const probeDir = join(here, "..", "..", "testdata", "build");
const probeOut = {};
for (const lang of ["c", "as", "rust"]) {
  const path = join(probeDir, `probe-${lang}.wasm`);
  if (!existsSync(path)) {
    ok(false, `missing ${path}: run scripts/build-plugins`);
    continue;
  }
  const g = new Guest(path);
  const n = "probe-" + lang;
  const P = (key, value = "") => ({ op: "put", key, value });
  const D = (key) => ({ op: "delete", key });
  const steps = [
    // [batch, want {key: value or null} after commit, want view reads, want raw reads, want status/message]
    [[P("w/a", "1"), P("w/c", "3"), P("ignored", "x")], { a: "1", c: "3" }, 0, 0],
    [[P("pf/a"), P("pf/b"), P("pf/c"), P("r/a"), P("r/b"), P("r/c")],
      { "got/3/a": "11", "got/4/b": "0", "got/5/c": "13" }, 1, 0],
    [[P("w/a", "2"), P("r/a"), D("w/a"), P("r/a"), P("r/c"), P("w/c", "7"), P("r/c"), P("pf/d"), P("w/d", "9"), P("r/d")],
      { a: null, c: "7", d: "9", "got/1/a": "12", "got/3/a": "0", "got/4/c": "13", "got/6/c": "17", "got/9/d": "19" }, 1, 0],
    [[P("raw/w/a"), P("raw/w/c"), P("raw/nope"), P("pfraw/w/d"), P("pfraw/w/c"), P("raw/w/d")],
      { "rawgot/0/w/a": "0", "rawgot/1/w/c": "15:7", "rawgot/2/nope": "0", "rawgot/5/w/d": "18:9" }, 0, 4],
    [[P("reject1"), P("reject2"), P("w/z", "1"), P("fail", "boom")], { z: null }, 0, 0, "boom"],
    [[P("parsefail", "bad parse"), P("w/z", "1")], { z: null }, 0, 0, "bad parse"],
    [[P("reject1"), P("w/z", "1"), P("log", "hello from the probe")], { z: "1" }, 0, 0],
  ];
  let rev = 1;
  const outs = [];
  steps.forEach(([batch, want, vreads, rreads, failMsg], i) => {
    const r0 = g.reads;
    const r = g.apply(batch, rev);
    rev += batch.length;
    outs.push(r.out);
    const reads = g.reads - r0;
    if (failMsg) {
      ok(r.status === 1 && r.message === failMsg, `${n}: step ${i}: want status 1 ${failMsg}, got ${r.status} ${r.message}`);
    } else {
      ok(r.status === 0, `${n}: step ${i}: status ${r.status} ${r.message || ""}`);
      ok(reads === vreads + rreads, `${n}: step ${i}: ${reads} read calls, want ${vreads + rreads}`);
    }
    for (const [k, v] of Object.entries(want)) {
      const got = g.view.get(k);
      ok((got === undefined ? null : got.toString()) === v, `${n}: step ${i}: ${k} = ${got}, want ${v}`);
    }
  });
  ok(g.logs.some((l) => l === "0 hello from the probe"), `${n}: log line: ${JSON.stringify(g.logs)}`);
  ok(decodeOutput(outs[6]).rejected === 1, `${n}: rejected count`);
  g.refuseReads = true;
  const d = decodeOutput(g.callRaw(encodeBatch([P("r/q")], 1000)));
  ok(d.status === 1 && /refused/.test(d.message), `${n}: refused read: ${JSON.stringify(d)}`);
  probeOut[lang] = outs;
}
for (const lang of ["as", "rust"]) {
  if (probeOut.c && probeOut[lang]) {
    probeOut.c.forEach((o, i) => ok(o.equals(probeOut[lang][i]), `probe c vs ${lang}: step ${i} output differs`));
  }
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
