//! foldhost.rs: the Rust guest SDK for the foldhost plugin ABI v1
//! (abi/ABI.md). std only, Rust 1.63 or newer, no cargo needed: a plugin
//! includes this file as a module named `foldhost` at its crate root and is
//! built with plain rustc (see README.md):
//!
//! ```text
//! #[path = "../../../abi/sdk/rust/foldhost.rs"]
//! mod foldhost;
//!
//! rustc --edition 2021 --target wasm32-unknown-unknown --crate-type cdylib \
//!     -O -C strip=debuginfo -C target-feature=+bulk-memory plugin.rs -o plugin.wasm
//! ```
//!
//! A plugin is two functions:
//!
//! - `parse(update) -> Result<Parsed<R>, Fail>` turns one KV update into a
//!   record `R` (a type the plugin defines, which may borrow the update's key
//!   and value and the batch arena), or rejects it (`Parsed::Reject`:
//!   malformed or irrelevant; counted, never fatal), or fails the batch;
//! - `apply(records, batch) -> Result<(), Fail>` turns the batch's accepted
//!   records into view mutations with `batch.put` / `batch.delete`, reading
//!   the committed fold with batched reads when it needs to;
//!
//! and one macro call that names them:
//!
//! ```text
//! foldhost_plugin!("my-plugin", "1.0.0", 1, parse, apply);
//! ```
//!
//! This module provides the ABI exports (`foldhost_abi_v1`, `foldhost_alloc`,
//! `_initialize`; the macro adds `foldhost_info` and `foldhost_apply`),
//! decodes the batch in place and encodes the output. Queries (ABI minor 2):
//! `foldhost_queries!` adds `foldhost_queries` and `foldhost_query` (see
//! "queries" below); secondary-index helpers: `Batch::index_put`,
//! `Batch::index_delete`, `Query::index_scan`.
//!
//! Memory: everything the SDK hands out during one batch (update keys and
//! values, read results, arena memory) lives for the batch's lifetime `'a`
//! and no longer; the borrow checker enforces it. The SDK keeps its buffers
//! between batches and does no heap allocation per update in steady state:
//! the per-batch arena is reset at the start of every batch.
//!
//! Panics: the wasm32-unknown-unknown target aborts on panic (no
//! unwinding); the abort is the wasm `unreachable` instruction, a trap,
//! which the host contains (it discards the instance and fails the batch).
//! `_initialize` installs a panic hook that first writes the panic message
//! to stderr (WASI `fd_write`), which the host attaches to the trap error.
//!
//! Threading: wasm guests are single-threaded; nothing here is reentrant.
#![allow(dead_code)]

use std::alloc::{self, Layout};
use std::cell::{Cell, UnsafeCell};
use std::fmt;
use std::mem;
use std::ptr;
use std::slice;

pub const ABI_MAJOR: u32 = 1;
pub const ABI_MINOR: u32 = 3;

/// An update's op (the batch).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Op {
    Put = 1,
    Delete = 2,
    /// A purge, or a server limit marker.
    Purge = 3,
}

/// Log levels (Go slog levels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Debug = -4,
    Info = 0,
    Warn = 4,
    Error = 8,
}

/// One update of the batch; key and value alias the input buffer.
pub struct Update<'a> {
    pub op: Op,
    /// 0: unknown (a repair's synthetic delete).
    pub revision: u64,
    pub time_unix_nano: i64,
    pub key: &'a [u8],
    /// Empty for delete and purge.
    pub value: &'a [u8],
    arena: &'a Arena,
}

impl<'a> Update<'a> {
    /// The batch arena, for record data that outlives this call.
    pub fn arena(&self) -> &'a Arena {
        self.arena
    }

    /// Whether the update removes its key (delete or purge).
    pub fn removes(&self) -> bool {
        self.op != Op::Put
    }
}

/// What parse made of an update.
pub enum Parsed<R> {
    /// The record, handed to apply in batch order.
    Accept(R),
    /// Malformed or irrelevant: counted in the output's `rejected`.
    Reject,
}

/// A failed batch: the host commits nothing and reports the message.
pub struct Fail {
    msg: Vec<u8>,
}

impl Fail {
    pub fn new(msg: impl Into<Vec<u8>>) -> Fail {
        Fail { msg: msg.into() }
    }

    pub fn message(&self) -> &[u8] {
        &self.msg
    }
}

impl From<&str> for Fail {
    fn from(s: &str) -> Fail {
        Fail::new(s)
    }
}

impl From<String> for Fail {
    fn from(s: String) -> Fail {
        Fail::new(s)
    }
}

impl fmt::Debug for Fail {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Fail({:?})", String::from_utf8_lossy(&self.msg))
    }
}

/// A raw fold entry: the KV entry as the host stored it.
#[derive(Clone, Copy, Debug)]
pub struct Raw<'a> {
    pub revision: u64,
    pub value: &'a [u8],
}

// ---- host imports ----

mod imports {
    #[link(wasm_import_module = "foldhost")]
    extern "C" {
        pub fn read(space: i32, req_ptr: i32, req_len: i32) -> i32;
        pub fn read_result(dst_ptr: i32);
        pub fn log(level: i32, ptr: i32, len: i32);
        pub fn range(space: i32, req_ptr: i32, req_len: i32) -> i32;
    }

    #[link(wasm_import_module = "wasi_snapshot_preview1")]
    extern "C" {
        pub fn fd_write(fd: i32, iovs: i32, iovs_len: i32, nwritten: i32) -> i32;
    }
}

const SPACE_VIEW: u8 = 0;
const SPACE_RAW: u8 = 1;

const MUT_PUT: u8 = 1;
const MUT_DELETE: u8 = 2;

const STATUS_OK: u32 = 0;
const STATUS_ERROR: u32 = 1;
const STATUS_OK_EFFECTS: u32 = 2;
const STATUS_OK_UPDATE_EFFECTS: u32 = 3;

/// op, revision, time, key length, value length
const MIN_UPDATE: usize = 1 + 8 + 8 + 4 + 4;
/// status, rejected, count
const OUT_HEADER: usize = 12;

#[inline]
fn addr32<T>(p: *const T) -> i32 {
    p as usize as u32 as i32
}

#[inline]
fn ld32(b: &[u8], off: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[off..off + 4]);
    u32::from_le_bytes(a)
}

#[inline]
fn ld64(b: &[u8], off: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[off..off + 8]);
    u64::from_le_bytes(a)
}

#[inline]
fn push_u32(v: &mut Vec<u8>, x: u32) {
    v.extend_from_slice(&x.to_le_bytes());
}

#[inline]
fn push_bytes(v: &mut Vec<u8>, b: &[u8]) {
    push_u32(v, b.len() as u32);
    v.extend_from_slice(b);
}

#[inline]
fn pack(p: *const u8, len: usize) -> i64 {
    (((p as usize as u32 as u64) << 32) | len as u32 as u64) as i64
}

// ---- logging and stderr ----

/// log sends one line to the host log at a slog level.
pub fn log(level: Level, msg: impl AsRef<[u8]>) {
    let m = msg.as_ref();
    unsafe { imports::log(level as i32, addr32(m.as_ptr()), m.len() as i32) }
}

/// write_stderr writes b to the guest's stderr (WASI fd 2), which the host
/// attaches to the error of a failing call.
fn write_stderr(mut b: &[u8]) {
    while !b.is_empty() {
        let iov: [u32; 2] = [b.as_ptr() as usize as u32, b.len() as u32];
        let mut n: u32 = 0;
        let errno = unsafe { imports::fd_write(2, addr32(iov.as_ptr()), 1, addr32(&mut n as *mut u32)) };
        if errno != 0 || n == 0 {
            return;
        }
        b = &b[(n as usize).min(b.len())..];
    }
}

struct Stderr;

impl fmt::Write for Stderr {
    fn write_str(&mut self, s: &str) -> fmt::Result {
        write_stderr(s.as_bytes());
        Ok(())
    }
}

// ---- the per-batch arena ----

const ARENA_FIRST: usize = 64 * 1024;
/// Retain at most this much between batches.
const ARENA_KEEP: usize = 16 * 1024 * 1024;
const ARENA_ALIGN: usize = 16;

/// A bump arena for memory that lives as long as the batch: record data
/// built in parse, read results. Reset at the start of every batch; a batch
/// that needed several chunks leaves one chunk of their total size, so the
/// next batch like it needs no allocation.
pub struct Arena {
    next: Cell<*mut u8>,
    end: Cell<*mut u8>,
    cur_cap: Cell<usize>,
    total: Cell<usize>,
    chunks: UnsafeCell<Vec<(*mut u8, usize)>>,
}

impl Arena {
    const fn new() -> Arena {
        Arena {
            next: Cell::new(ptr::null_mut()),
            end: Cell::new(ptr::null_mut()),
            cur_cap: Cell::new(0),
            total: Cell::new(0),
            chunks: UnsafeCell::new(Vec::new()),
        }
    }

    /// raw returns size bytes (size > 0) aligned to align (a power of two
    /// of at most ARENA_ALIGN), uninitialised.
    fn raw(&self, size: usize, align: usize) -> *mut u8 {
        let next = self.next.get();
        let at = next as usize;
        let pad = at.wrapping_neg() & (align - 1);
        let room = (self.end.get() as usize).wrapping_sub(at);
        if !next.is_null() && pad <= room && size <= room - pad {
            unsafe {
                let p = next.add(pad);
                self.next.set(p.add(size));
                return p;
            }
        }
        // A new chunk, twice the last one or as big as size: its start is
        // ARENA_ALIGN-aligned.
        let cap = match self.cur_cap.get() {
            0 => ARENA_FIRST,
            c => c.saturating_mul(2),
        };
        if !self.add_chunk(cap.max(size)) {
            out_of_memory();
        }
        let p = self.next.get();
        unsafe { self.next.set(p.add(size)) };
        p
    }

    /// add_chunk makes a chunk of cap bytes the current one; false when
    /// memory ran out.
    #[cold]
    fn add_chunk(&self, cap: usize) -> bool {
        let layout = match Layout::from_size_align(cap, ARENA_ALIGN) {
            Ok(l) => l,
            Err(_) => return false,
        };
        let p = unsafe { alloc::alloc(layout) };
        if p.is_null() {
            return false;
        }
        unsafe { (*self.chunks.get()).push((p, cap)) };
        self.next.set(p);
        self.end.set(unsafe { p.add(cap) });
        self.cur_cap.set(cap);
        self.total.set(self.total.get() + cap);
        true
    }

    /// reset frees the batch's memory. A batch that needed several chunks
    /// leaves one chunk of their total size, so the next batch like it needs
    /// no allocation.
    fn reset(&mut self) {
        let total = self.total.get();
        let chunks = self.chunks.get_mut();
        if chunks.len() <= 1 && total <= ARENA_KEEP {
            if let Some(&(p, _)) = chunks.first() {
                self.next.set(p);
            }
            return;
        }
        for (p, cap) in chunks.drain(..) {
            unsafe { alloc::dealloc(p, Layout::from_size_align_unchecked(cap, ARENA_ALIGN)) };
        }
        self.next.set(ptr::null_mut());
        self.end.set(ptr::null_mut());
        self.cur_cap.set(0);
        self.total.set(0);
        if total <= ARENA_KEEP {
            self.add_chunk(total); // a failure leaves the arena empty, as at the start
        }
    }

    /// alloc returns n zeroed bytes that live as long as the batch.
    #[allow(clippy::mut_from_ref)] // a bump arena: every call returns fresh memory
    pub fn alloc(&self, n: usize) -> &mut [u8] {
        if n == 0 {
            return &mut [];
        }
        unsafe {
            let p = self.raw(n, 1);
            ptr::write_bytes(p, 0, n);
            slice::from_raw_parts_mut(p, n)
        }
    }

    /// copy returns a copy of b that lives as long as the batch.
    pub fn copy(&self, b: &[u8]) -> &[u8] {
        self.copy_slice(b)
    }

    /// concat returns the concatenation of parts, living as long as the
    /// batch.
    pub fn concat(&self, parts: &[&[u8]]) -> &[u8] {
        let n = match parts.iter().try_fold(0usize, |n, p| n.checked_add(p.len())) {
            Some(n) => n,
            None => out_of_memory(),
        };
        if n == 0 {
            return &[];
        }
        unsafe {
            let p = self.raw(n, 1);
            let mut w = p;
            for part in parts {
                ptr::copy_nonoverlapping(part.as_ptr(), w, part.len());
                w = w.add(part.len());
            }
            slice::from_raw_parts(p, n)
        }
    }

    /// copy_slice returns a copy of s that lives as long as the batch. T
    /// must be aligned to at most 16 bytes.
    pub fn copy_slice<T: Copy>(&self, s: &[T]) -> &[T] {
        let p = self.slice_raw::<T>(s.len());
        unsafe {
            ptr::copy_nonoverlapping(s.as_ptr(), p, s.len());
            slice::from_raw_parts(p, s.len())
        }
    }

    /// alloc_slice returns len copies of init that live as long as the
    /// batch. T must be aligned to at most 16 bytes.
    #[allow(clippy::mut_from_ref)] // a bump arena: every call returns fresh memory
    pub fn alloc_slice<T: Copy>(&self, len: usize, init: T) -> &mut [T] {
        let p = self.slice_raw::<T>(len);
        unsafe {
            for i in 0..len {
                p.add(i).write(init);
            }
            slice::from_raw_parts_mut(p, len)
        }
    }

    /// slice_raw returns room for len values of T, uninitialised (a
    /// dangling, aligned pointer when that is no bytes).
    fn slice_raw<T>(&self, len: usize) -> *mut T {
        let align = mem::align_of::<T>();
        assert!(align <= ARENA_ALIGN, "foldhost: the arena aligns to at most 16 bytes");
        let n = match mem::size_of::<T>().checked_mul(len) {
            Some(n) => n,
            None => out_of_memory(),
        };
        if n == 0 {
            return ptr::NonNull::<T>::dangling().as_ptr();
        }
        self.raw(n, align) as *mut T
    }
}

#[cold]
fn out_of_memory() -> ! {
    write_stderr(b"foldhost: out of memory\n");
    std::process::abort()
}

// ---- the read/overlay table ----
//
// One entry per (space, key) the plugin read or, lazily, wrote, with an
// open-addressed index over it. Keys live in the table's own buffer, or in
// the output buffer for keys indexed from this batch's writes.

const FETCH_NONE: u8 = 0;
const FETCH_PENDING: u8 = 1;
const FETCH_FOUND: u8 = 2;
const FETCH_MISSING: u8 = 3;

#[derive(Clone, Copy)]
struct Entry {
    key_off: u32,
    key_len: u32,
    key_in_out: bool,
    hash: u32,
    slot: u32,
    next_pending: u32, // index + 1 of the next pending entry; 0 ends
    space: u8,
    fetch: u8,
    written: u8, // 0, MUT_PUT or MUT_DELETE: this batch's last write
    wval_off: u32,
    wval_len: u32,
    fval: *const u8, // the fetched value, in the arena
    fval_len: u32,
    frev: u64,
}

struct Table {
    ents: Vec<Entry>,
    slots: Vec<u32>, // entry index + 1; 0 is empty; the length is a power of two, or 0
    keys: Vec<u8>,
    pend_head: [u32; 2],
    pend_tail: [u32; 2],
    pend_n: [u32; 2],
}

fn hash_key(space: u8, key: &[u8]) -> u32 {
    let mut h = 2166136261u32 ^ (space as u32).wrapping_mul(0x9E3779B9) ^ key.len() as u32;
    let mut chunks = key.chunks_exact(4);
    for c in &mut chunks {
        h = (h ^ u32::from_le_bytes([c[0], c[1], c[2], c[3]])).wrapping_mul(0x9E3779B1);
        h ^= h >> 15;
    }
    for &b in chunks.remainder() {
        h = (h ^ b as u32).wrapping_mul(0x01000193);
    }
    h ^= h >> 16;
    h = h.wrapping_mul(0x85EBCA6B);
    h ^= h >> 13;
    h
}

impl Table {
    const fn new() -> Table {
        Table { ents: Vec::new(), slots: Vec::new(), keys: Vec::new(), pend_head: [0; 2], pend_tail: [0; 2], pend_n: [0; 2] }
    }

    fn key<'k>(&'k self, e: &Entry, out: &'k [u8]) -> &'k [u8] {
        let (off, len) = (e.key_off as usize, e.key_len as usize);
        if e.key_in_out {
            &out[off..off + len]
        } else {
            &self.keys[off..off + len]
        }
    }

    fn grow(&mut self) {
        let cap = if self.slots.is_empty() { 256 } else { self.slots.len() * 2 };
        self.slots.clear();
        self.slots.resize(cap, 0);
        let mask = cap - 1;
        for (i, e) in self.ents.iter_mut().enumerate() {
            let mut j = e.hash as usize & mask;
            while self.slots[j] != 0 {
                j = (j + 1) & mask;
            }
            self.slots[j] = i as u32 + 1;
            e.slot = j as u32;
        }
    }

    /// find returns the index of the (space, key) entry, creating it when
    /// create is set: with its key at out[out_off..] when out_off is Some,
    /// else copied to the table's key buffer.
    fn find(&mut self, out: &[u8], space: u8, key: &[u8], create: bool, out_off: Option<u32>) -> Option<usize> {
        let h = hash_key(space, key);
        if !self.slots.is_empty() {
            let mask = self.slots.len() - 1;
            let mut j = h as usize & mask;
            loop {
                let s = self.slots[j];
                if s == 0 {
                    break;
                }
                let e = &self.ents[s as usize - 1];
                if e.hash == h && e.space == space && e.key_len as usize == key.len() && self.key(e, out) == key {
                    return Some(s as usize - 1);
                }
                j = (j + 1) & mask;
            }
        }
        if !create {
            return None;
        }
        if (self.ents.len() + 1) * 2 > self.slots.len() {
            self.grow();
        }
        let i = self.ents.len();
        let (key_off, key_in_out) = match out_off {
            Some(off) => (off, true),
            None => {
                let off = self.keys.len() as u32;
                self.keys.extend_from_slice(key);
                (off, false)
            }
        };
        let mask = self.slots.len() - 1;
        let mut j = h as usize & mask;
        while self.slots[j] != 0 {
            j = (j + 1) & mask;
        }
        self.slots[j] = i as u32 + 1;
        self.ents.push(Entry {
            key_off,
            key_len: key.len() as u32,
            key_in_out,
            hash: h,
            slot: j as u32,
            next_pending: 0,
            space,
            fetch: FETCH_NONE,
            written: 0,
            wval_off: 0,
            wval_len: 0,
            fval: ptr::null(),
            fval_len: 0,
            frev: 0,
        });
        Some(i)
    }

    fn reset(&mut self) {
        for e in &self.ents {
            self.slots[e.slot as usize] = 0;
        }
        self.ents.clear();
        self.keys.clear();
        self.pend_head = [0; 2];
        self.pend_tail = [0; 2];
        self.pend_n = [0; 2];
    }
}

// ---- batch state ----

struct Core {
    out: Vec<u8>, // the output record being built
    mutations: u32,
    effects: Vec<u8>, // the encoded effects (ABI minor 1)
    neffects: u32,
    // Effects that name their update (emit_for, ABI minor 3): rec_update
    // maps an accepted record to its update's index in the batch;
    // effects_for is 0 before any effect, 1 after emit, 2 after emit_for.
    rec_update: Vec<u32>,
    effects_for: u8,
    last_update: u32,
    rejected: u32,
    indexed: usize, // mutations before this offset are in the table
    failed: bool,
    fail_msg: Vec<u8>,
    req: Vec<u8>, // a read request being built
    idx: Vec<u8>, // an index key being built (index_put, index_delete)
    table: Table,
}

impl Core {
    const fn new() -> Core {
        Core {
            out: Vec::new(),
            mutations: 0,
            effects: Vec::new(),
            neffects: 0,
            rec_update: Vec::new(),
            effects_for: 0,
            last_update: 0,
            rejected: 0,
            indexed: 0,
            failed: false,
            fail_msg: Vec::new(),
            req: Vec::new(),
            idx: Vec::new(),
            table: Table::new(),
        }
    }

    /// fail records the batch's failure (the first message wins).
    fn fail(&mut self, msg: &[u8]) -> Fail {
        if !self.failed {
            self.failed = true;
            self.fail_msg.clear();
            self.fail_msg.extend_from_slice(msg);
        }
        Fail::new(msg)
    }

    /// index_writes records the mutations written since the last call in
    /// the table, so reads see them. Done lazily: a plugin that never reads
    /// after writing never pays for hashing its writes.
    fn index_writes(&mut self) {
        let out = &self.out[..];
        let mut off = self.indexed;
        while off < out.len() {
            let op = out[off];
            let klen = ld32(out, off + 1) as usize;
            let koff = off + 5;
            off = koff + klen;
            let i = self.table.find(out, SPACE_VIEW, &out[koff..koff + klen], true, Some(koff as u32)).unwrap();
            let e = &mut self.table.ents[i];
            e.written = op;
            if op == MUT_PUT {
                e.wval_len = ld32(out, off);
                e.wval_off = (off + 4) as u32;
                off += 4 + e.wval_len as usize;
            }
        }
        self.indexed = off;
    }

    fn prefetch(&mut self, space: u8, key: &[u8]) -> usize {
        let i = self.table.find(&self.out, space, key, true, None).unwrap();
        let t = &mut self.table;
        if t.ents[i].fetch != FETCH_NONE {
            return i;
        }
        let s = space as usize;
        t.ents[i].fetch = FETCH_PENDING;
        t.ents[i].next_pending = 0;
        if t.pend_n[s] != 0 {
            let tail = t.pend_tail[s] as usize - 1;
            t.ents[tail].next_pending = i as u32 + 1;
        } else {
            t.pend_head[s] = i as u32 + 1;
        }
        t.pend_tail[s] = i as u32 + 1;
        t.pend_n[s] += 1;
        i
    }

    /// flush sends the pending prefetches of space in one host call.
    fn flush(&mut self, arena: &Arena, space: u8) -> Result<(), Fail> {
        let s = space as usize;
        if self.table.pend_n[s] == 0 {
            return self.status();
        }
        let t = &mut self.table;
        let req = &mut self.req;
        req.clear();
        push_u32(req, t.pend_n[s]);
        let mut i = t.pend_head[s];
        while i != 0 {
            let e = &t.ents[i as usize - 1];
            push_bytes(req, t.key(e, &self.out));
            i = e.next_pending;
        }
        let head = t.pend_head[s];
        t.pend_head[s] = 0;
        t.pend_tail[s] = 0;
        t.pend_n[s] = 0;

        let n = unsafe { imports::read(space as i32, addr32(req.as_ptr()), req.len() as i32) };
        if n < 0 {
            return Err(self.fail(b"foldhost: the host refused a read request"));
        }
        let n = n as usize;
        let resp: &[u8] = unsafe {
            let p = arena.raw(n.max(1), 1);
            imports::read_result(addr32(p));
            slice::from_raw_parts(p, n)
        };

        let mut off = 0;
        let mut i = head;
        let mut ok = true;
        while i != 0 {
            let e = &mut t.ents[i as usize - 1];
            i = e.next_pending;
            if off >= n {
                ok = false;
                break;
            }
            let found = resp[off];
            off += 1;
            if found == 0 {
                e.fetch = FETCH_MISSING;
                continue;
            }
            if found != 1 || n - off < 4 {
                ok = false;
                break;
            }
            let mut vlen = ld32(resp, off) as usize;
            off += 4;
            if n - off < vlen {
                ok = false;
                break;
            }
            let mut v = off;
            off += vlen;
            if space == SPACE_RAW {
                if vlen < 8 {
                    ok = false;
                    break;
                }
                e.frev = ld64(resp, v);
                v += 8;
                vlen -= 8;
            }
            e.fetch = FETCH_FOUND;
            e.fval = resp[v..].as_ptr();
            e.fval_len = vlen as u32;
        }
        if !ok || off != n {
            return Err(self.fail(b"foldhost: malformed read response from the host"));
        }
        self.status()
    }

    fn status(&self) -> Result<(), Fail> {
        if self.failed {
            Err(Fail::new(self.fail_msg.clone()))
        } else {
            Ok(())
        }
    }

    fn get<'a>(&mut self, arena: &'a Arena, space: u8, key: &[u8]) -> Result<Option<Raw<'a>>, Fail> {
        if space == SPACE_VIEW {
            self.index_writes();
        }
        let i = self.table.find(&self.out, space, key, true, None).unwrap();
        let e = self.table.ents[i];
        if e.written == MUT_DELETE {
            return Ok(None);
        }
        if e.written == MUT_PUT {
            // out moves as it grows: hand out a copy that lives for the batch.
            let (off, len) = (e.wval_off as usize, e.wval_len as usize);
            return Ok(Some(Raw { revision: 0, value: arena.copy(&self.out[off..off + len]) }));
        }
        if e.fetch == FETCH_NONE {
            self.prefetch(space, key);
        }
        if self.table.ents[i].fetch == FETCH_PENDING {
            self.flush(arena, space)?;
        }
        let e = self.table.ents[i];
        match e.fetch {
            FETCH_FOUND => {
                let value = if e.fval_len == 0 {
                    &[][..]
                } else {
                    // The response lives in the arena until the batch ends.
                    unsafe { slice::from_raw_parts(e.fval, e.fval_len as usize) }
                };
                Ok(Some(Raw { revision: e.frev, value }))
            }
            FETCH_MISSING => Ok(None),
            _ => Err(self.fail(b"foldhost: read not answered")),
        }
    }
}

/// The batch being applied: view writes and reads of the committed fold.
pub struct Batch<'a> {
    core: &'a mut Core,
    arena: &'a Arena,
}

impl<'a> Batch<'a> {
    /// The batch arena.
    pub fn arena(&self) -> &'a Arena {
        self.arena
    }

    /// put appends a view put. Key and value are copied; later mutations of
    /// the same key win.
    pub fn put(&mut self, key: &[u8], value: &[u8]) {
        let out = &mut self.core.out;
        out.reserve(1 + 4 + key.len() + 4 + value.len());
        out.push(MUT_PUT);
        push_bytes(out, key);
        push_bytes(out, value);
        self.core.mutations += 1;
    }

    /// delete appends a view delete.
    pub fn delete(&mut self, key: &[u8]) {
        let out = &mut self.core.out;
        out.reserve(1 + 4 + key.len());
        out.push(MUT_DELETE);
        push_bytes(out, key);
        self.core.mutations += 1;
    }

    /// index_put writes the secondary-index entry
    /// `<index>/<value>/<primary>` (an empty value; see index_key).
    pub fn index_put(&mut self, index: &[u8], value: &[u8], primary: &[u8]) {
        let mut k = mem::take(&mut self.core.idx);
        index_key(&mut k, index, value, primary);
        self.put(&k, b"");
        self.core.idx = k;
    }

    /// index_delete deletes the secondary-index entry
    /// `<index>/<value>/<primary>`.
    pub fn index_delete(&mut self, index: &[u8], value: &[u8], primary: &[u8]) {
        let mut k = mem::take(&mut self.core.idx);
        index_key(&mut k, index, value, primary);
        self.delete(&k);
        self.core.idx = k;
    }

    /// emit appends an effect (ABI minor 1): a message the host publishes
    /// once this batch is committed, never if it is not, in the order
    /// emitted. Everything is copied; headers are (name, value) pairs. A
    /// subject or header that abi/ABI.md ("Effects") refuses makes the
    /// output malformed: the batch fails.
    pub fn emit(&mut self, subject: &[u8], headers: &[(&[u8], &[u8])], payload: &[u8]) {
        if self.core.effects_for == 2 {
            self.core.fail(b"foldhost: emit after emit_for in one batch: every effect names its record or none does");
            return;
        }
        self.core.effects_for = 1;
        self.push_effect(subject, headers, payload);
    }

    /// emit_for is emit for an effect that derives from one update: the
    /// record at index `record` of those apply received (ABI minor 3). Its
    /// id is then that update's, whatever the batch around it, so replicas
    /// that batch the same updates differently publish it once. In one
    /// batch, either every effect names its record or none does, and the
    /// records named must not decrease; otherwise the batch fails.
    pub fn emit_for(&mut self, record: usize, subject: &[u8], headers: &[(&[u8], &[u8])], payload: &[u8]) {
        let core = &mut *self.core;
        let u = match core.rec_update.get(record) {
            Some(&u) => u,
            None => {
                core.fail(b"foldhost: emit_for names a record apply did not receive");
                return;
            }
        };
        if core.effects_for == 1 {
            core.fail(b"foldhost: emit_for after emit in one batch: every effect names its record or none does");
            return;
        }
        if core.effects_for == 2 && u < core.last_update {
            core.fail(b"foldhost: emit_for names an earlier record than the effect before it");
            return;
        }
        core.effects_for = 2;
        core.last_update = u;
        push_u32(&mut core.effects, u);
        self.push_effect(subject, headers, payload);
    }

    fn push_effect(&mut self, subject: &[u8], headers: &[(&[u8], &[u8])], payload: &[u8]) {
        let e = &mut self.core.effects;
        e.reserve(4 + subject.len() + 4 + 4 + payload.len());
        push_bytes(e, subject);
        push_u32(e, headers.len() as u32);
        for (n, v) in headers {
            push_bytes(e, n);
            push_bytes(e, v);
        }
        push_bytes(e, payload);
        self.core.neffects += 1;
    }

    // Batched reads of the committed fold. Reads see the fold as committed
    // before this batch, with this batch's own earlier view writes layered
    // on top: a view key the plugin put or deleted earlier in this apply
    // reads back as written (Some(value), or None). Prefetch every key you
    // will need first; the first get of a pending key fetches all pending
    // keys of its space in one host call. A get of a key never prefetched
    // costs a host call of its own. A read the host refuses fails the batch
    // (the error is sticky: the batch fails even if apply then returns Ok).

    /// prefetch_view queues a view key for the next batched read.
    pub fn prefetch_view(&mut self, key: &[u8]) {
        self.core.prefetch(SPACE_VIEW, key);
    }

    /// prefetch_raw queues a raw fold key for the next batched read.
    pub fn prefetch_raw(&mut self, key: &[u8]) {
        self.core.prefetch(SPACE_RAW, key);
    }

    /// fetch sends every pending prefetch now (optional).
    pub fn fetch(&mut self) -> Result<(), Fail> {
        let a = self.core.flush(self.arena, SPACE_VIEW);
        let b = self.core.flush(self.arena, SPACE_RAW);
        a.and(b)
    }

    /// get_view reads a view key: Some(value) or None (not found).
    pub fn get_view(&mut self, key: &[u8]) -> Result<Option<&'a [u8]>, Fail> {
        Ok(self.core.get(self.arena, SPACE_VIEW, key)?.map(|r| r.value))
    }

    /// get_raw reads the raw fold (the KV entry as the host stored it, with
    /// its revision). Raw entries are never overlaid.
    pub fn get_raw(&mut self, key: &[u8]) -> Result<Option<Raw<'a>>, Fail> {
        self.core.get(self.arena, SPACE_RAW, key)
    }
}

// ---- secondary indexes ----
//
// An index entry is the view key `<index>/<value>/<primary>` with an empty
// value (the example router's `upstream/<addr>/<host>`). apply writes and
// deletes entries with Batch::index_put / index_delete; a query lists the
// primaries of one value with Query::index_scan, one prefix range over
// `<index>/<value>/`, paged. value must not contain '/' (a value "a/b"
// would list among value "a"'s primaries); primary may.

/// index_key sets k to `<index>/<value>/<primary>`.
pub fn index_key(k: &mut Vec<u8>, index: &[u8], value: &[u8], primary: &[u8]) {
    k.clear();
    k.reserve(index.len() + value.len() + primary.len() + 2);
    k.extend_from_slice(index);
    k.push(b'/');
    k.extend_from_slice(value);
    k.push(b'/');
    k.extend_from_slice(primary);
}

/// How many entries one range of index_scan asks for.
pub const INDEX_PAGE: u32 = 1024;

// ---- queries (ABI minor 2) ----
//
// A plugin may export named, read-only queries: input bytes in, answer
// bytes out, reading the fold's views (and raw entries) at one snapshot.
// Declare them once, after foldhost_plugin!:
//
//     fn by_owner<'a>(input: &'a [u8], q: &mut foldhost::Query<'a>) -> Result<(), foldhost::Fail> {
//         q.answer(b"...");
//         Ok(())
//     }
//     foldhost_queries!(("by_owner", "application/json", by_owner));
//
// A name is 1 to 64 of [A-Za-z0-9_.-]; the content type ("" means
// application/octet-stream) is what the host's HTTP API answers with. A
// query returns Ok after appending its answer with q.answer (possibly
// nothing), or Err(Fail) (the caller sees the message). Everything a query
// hands out lives for the query's lifetime 'a. A plugin without
// foldhost_queries! exports no queries and never imports `range`.

/// A query function: the caller's input and the running query.
pub type QueryFn = for<'a> fn(&'a [u8], &mut Query<'a>) -> Result<(), Fail>;

/// One entry of a range.
#[derive(Clone, Copy, Debug)]
pub struct Kv<'a> {
    pub key: &'a [u8],
    pub value: &'a [u8],
}

/// The answer to one range read.
pub struct RangePage<'a> {
    pub entries: &'a [Kv<'a>],
    /// The range holds entries past the last one answered (the limit was
    /// reached, or the host's read bound): continue after the last key
    /// (after()) or, in reverse, with the last key as the new end.
    pub more: bool,
}

/// One running query: reads at the query's snapshot (no overlay: a query
/// writes nothing) and its answer.
pub struct Query<'a> {
    core: &'a mut Core,
    arena: &'a Arena,
    answer: &'a mut Vec<u8>,
}

/// after returns the smallest key greater than k (k followed by a 0 byte),
/// where the next page of a forward range starts.
pub fn after<'a>(arena: &'a Arena, k: &[u8]) -> &'a [u8] {
    arena.concat(&[k, &[0]])
}

/// prefix_end returns the smallest key after every key starting with
/// prefix: trailing 0xff bytes dropped, the last other byte incremented;
/// empty (no upper bound) when none is left.
pub fn prefix_end<'a>(arena: &'a Arena, prefix: &[u8]) -> &'a [u8] {
    let mut n = prefix.len();
    while n > 0 && prefix[n - 1] == 0xff {
        n -= 1;
    }
    if n == 0 {
        return &[];
    }
    let e = arena.alloc(n);
    e.copy_from_slice(&prefix[..n]);
    e[n - 1] += 1;
    e
}

impl<'a> Query<'a> {
    /// The query's arena (memory that lives until the query returns).
    pub fn arena(&self) -> &'a Arena {
        self.arena
    }

    /// answer appends b to the query's answer (copied).
    pub fn answer(&mut self, b: &[u8]) {
        self.answer.extend_from_slice(b);
    }

    /// get_view reads a view key at the query's snapshot.
    pub fn get_view(&mut self, key: &[u8]) -> Result<Option<&'a [u8]>, Fail> {
        Ok(self.core.get(self.arena, SPACE_VIEW, key)?.map(|r| r.value))
    }

    /// get_raw reads a raw fold entry at the query's snapshot.
    pub fn get_raw(&mut self, key: &[u8]) -> Result<Option<Raw<'a>>, Fail> {
        self.core.get(self.arena, SPACE_RAW, key)
    }

    /// range_view reads the view keys k with start <= k < end (an empty
    /// end: no upper bound) at the query's snapshot, at most limit of them,
    /// in key order or, with reverse, from the end down. The answer may
    /// stop short of limit at the host's read bound (more set). limit 0
    /// answers nothing.
    pub fn range_view(&mut self, start: &[u8], end: &[u8], limit: u32, reverse: bool) -> Result<RangePage<'a>, Fail> {
        if limit == 0 {
            return Ok(RangePage { entries: &[], more: false });
        }
        let req = &mut self.core.req;
        req.clear();
        req.push(if reverse { 1 } else { 0 });
        push_u32(req, limit);
        push_bytes(req, start);
        push_bytes(req, end);
        let n = unsafe { imports::range(SPACE_VIEW as i32, addr32(req.as_ptr()), req.len() as i32) };
        if n < 0 {
            return Err(self.core.fail(b"foldhost: the host refused a range request"));
        }
        let n = n as usize;
        let resp: &'a [u8] = unsafe {
            let p = self.arena.raw(n.max(1), 1);
            imports::read_result(addr32(p));
            slice::from_raw_parts(p, n)
        };
        match decode_range(self.arena, resp) {
            Some(page) => Ok(page),
            None => Err(self.core.fail(b"foldhost: malformed range answer from the host")),
        }
    }

    /// prefix_view is range_view over the keys starting with prefix.
    pub fn prefix_view(&mut self, prefix: &[u8], limit: u32, reverse: bool) -> Result<RangePage<'a>, Fail> {
        let end = prefix_end(self.arena, prefix);
        self.range_view(prefix, end, limit, reverse)
    }

    /// index_scan lists the primaries of value in index, in key order: every
    /// entry `<index>/<value>/<primary>`, from one prefix range paged
    /// INDEX_PAGE keys at a time.
    pub fn index_scan(&mut self, index: &[u8], value: &[u8]) -> Result<Vec<&'a [u8]>, Fail> {
        let mut k = Vec::new();
        index_key(&mut k, index, value, b"");
        let prefix: &'a [u8] = self.arena.copy(&k);
        let end = prefix_end(self.arena, prefix);
        let mut start = prefix;
        let mut out = Vec::new();
        loop {
            let page = self.range_view(start, end, INDEX_PAGE, false)?;
            for e in page.entries {
                out.push(&e.key[prefix.len()..]);
            }
            match page.entries.last() {
                Some(last) if page.more => start = after(self.arena, last.key),
                _ => return Ok(out),
            }
        }
    }
}

fn decode_range<'a>(arena: &'a Arena, resp: &'a [u8]) -> Option<RangePage<'a>> {
    let n = resp.len();
    if n < 5 || resp[0] > 1 {
        return None;
    }
    let more = resp[0] == 1;
    let count = ld32(resp, 1) as usize;
    let mut off = 5;
    if (count as u64) * 8 > (n - off) as u64 {
        return None;
    }
    let entries = arena.alloc_slice(count, Kv { key: &[], value: &[] });
    for e in entries.iter_mut() {
        let mut f = [&[][..]; 2];
        for x in f.iter_mut() {
            if n - off < 4 {
                return None;
            }
            let len = ld32(resp, off) as usize;
            off += 4;
            if n - off < len {
                return None;
            }
            *x = &resp[off..off + len];
            off += len;
        }
        *e = Kv { key: f[0], value: f[1] };
    }
    if off != n {
        return None;
    }
    Some(RangePage { entries, more })
}

// ---- the SDK's state and the ABI exports ----

struct State {
    input: Vec<u8>, // the input buffer foldhost_alloc hands out (len == capacity)
    info: Vec<u8>,
    queries: Vec<u8>, // the query list foldhost_queries returns
    answer: Vec<u8>,  // the running query's answer
    arena: Arena,
    core: Core,
}

static mut STATE: State = State { input: Vec::new(), info: Vec::new(), queries: Vec::new(), answer: Vec::new(), arena: Arena::new(), core: Core::new() };

/// The state, for the one guest call running (wasm guests are single
/// threaded and the host never reenters a guest).
fn state() -> &'static mut State {
    unsafe { &mut *ptr::addr_of_mut!(STATE) }
}

// The exports are private: nothing in the plugin calls them.

#[no_mangle]
extern "C" fn foldhost_abi_v1() -> i32 {
    ABI_MINOR as i32
}

/// _initialize (the host calls it once per instance) installs the panic
/// hook: it writes "foldhost plugin panicked at ..." to stderr, without
/// allocating, before the abort that follows every panic traps.
#[no_mangle]
extern "C" fn _initialize() {
    std::panic::set_hook(Box::new(|info| {
        let _ = fmt::Write::write_fmt(&mut Stderr, format_args!("foldhost plugin {}\n", info));
    }));
}

/// foldhost_alloc hands out the input buffer (one, reused and grown on
/// demand; 0 when it cannot be allocated).
#[no_mangle]
extern "C" fn foldhost_alloc(size: i32) -> i32 {
    if size < 0 {
        return 0;
    }
    let st = state();
    let size = size as usize;
    if !st.input.is_empty() && size <= st.input.len() {
        return addr32(st.input.as_ptr());
    }
    let mut cap = if st.input.is_empty() { 4096 } else { st.input.len() };
    while cap < size {
        cap *= 2;
    }
    st.input = Vec::new();
    let mut v: Vec<u8> = Vec::new();
    if v.try_reserve_exact(cap).is_err() {
        cap = size.max(1);
        if v.try_reserve_exact(cap).is_err() {
            return 0;
        }
    }
    v.resize(cap, 0);
    st.input = v;
    addr32(st.input.as_ptr())
}

/// __info is the body of the foldhost_info export that foldhost_plugin!
/// defines.
///
/// # Safety
///
/// Only that export may call it (it uses the SDK's state).
#[doc(hidden)]
pub unsafe fn __info(name: &str, version: &str, view_schema: u32) -> i64 {
    let info = &mut state().info;
    if info.is_empty() {
        push_bytes(info, name.as_bytes());
        push_bytes(info, version.as_bytes());
        push_u32(info, view_schema);
    }
    pack(info.as_ptr(), info.len())
}

/// The scope of one foldhost_apply call: the lifetime of its borrow bounds
/// everything the batch hands out.
#[doc(hidden)]
pub struct __Scope(());

#[doc(hidden)]
pub fn __scope() -> __Scope {
    __Scope(())
}

fn error_output(core: &mut Core, msg: Option<&[u8]>) -> i64 {
    if let Some(m) = msg {
        core.fail(m);
    }
    if core.fail_msg.is_empty() {
        core.fail_msg.extend_from_slice(b"plugin failed");
    }
    let out = &mut core.out;
    out.clear();
    push_u32(out, STATUS_ERROR);
    push_bytes(out, &core.fail_msg);
    pack(out.as_ptr(), out.len())
}

/// __apply runs one batch: the body of the foldhost_apply export that
/// foldhost_plugin! defines.
///
/// # Safety
///
/// Only that export may call it: it borrows the SDK's state for the batch
/// (a call from inside a batch would alias it).
#[doc(hidden)]
pub unsafe fn __apply<'a, R, P, A>(_scope: &'a mut __Scope, len: i32, mut parse: P, apply: A) -> i64
where
    P: FnMut(&Update<'a>) -> Result<Parsed<R>, Fail>,
    A: FnOnce(&mut [R], &mut Batch<'a>) -> Result<(), Fail>,
{
    let st: &'a mut State = state();
    let State { input, arena, core, .. } = st;
    arena.reset();
    let arena: &'a Arena = arena;
    core.table.reset();
    core.out.clear();
    core.out.resize(OUT_HEADER, 0);
    core.indexed = OUT_HEADER;
    core.mutations = 0;
    core.effects.clear();
    core.neffects = 0;
    core.rec_update.clear();
    core.effects_for = 0;
    core.last_update = 0;
    core.rejected = 0;
    core.failed = false;
    core.fail_msg.clear();

    if len < 0 || input.is_empty() || len as usize > input.len() {
        return error_output(core, Some(b"foldhost: batch length exceeds the input buffer"));
    }
    let b: &'a [u8] = &input[..len as usize];
    let end = b.len();
    if end < 4 {
        return error_output(core, Some(b"foldhost: malformed batch: truncated count"));
    }
    let count = ld32(b, 0) as usize;
    let mut p = 4;
    if (count as u64) * (MIN_UPDATE as u64) > (end - p) as u64 {
        return error_output(core, Some(b"foldhost: malformed batch: count cannot fit"));
    }
    let mut records: Vec<R> = Vec::with_capacity(count);
    for i in 0..count {
        if end - p < 1 + 8 + 8 + 4 {
            return error_output(core, Some(b"foldhost: malformed batch: truncated update"));
        }
        let op = b[p];
        let revision = ld64(b, p + 1);
        let time_unix_nano = ld64(b, p + 9) as i64;
        p += 17;
        let klen = ld32(b, p) as usize;
        p += 4;
        if end - p < klen + 4 {
            return error_output(core, Some(b"foldhost: malformed batch: key past the end"));
        }
        let key = &b[p..p + klen];
        p += klen;
        let vlen = ld32(b, p) as usize;
        p += 4;
        if end - p < vlen {
            return error_output(core, Some(b"foldhost: malformed batch: value past the end"));
        }
        let value = &b[p..p + vlen];
        p += vlen;
        let op = match op {
            1 => Op::Put,
            2 => Op::Delete,
            3 => Op::Purge,
            _ => return error_output(core, Some(b"foldhost: malformed batch: unknown update op")),
        };
        let u = Update { op, revision, time_unix_nano, key, value, arena };
        match parse(&u) {
            Ok(Parsed::Accept(r)) => {
                records.push(r);
                core.rec_update.push(i as u32);
            }
            Ok(Parsed::Reject) => core.rejected += 1,
            Err(f) => return error_output(core, Some(&f.msg)),
        }
    }
    if p != end {
        return error_output(core, Some(b"foldhost: malformed batch: trailing bytes"));
    }

    let mut batch = Batch { core, arena };
    let r = apply(&mut records, &mut batch);
    drop(records);
    let core = batch.core;
    if let Err(f) = r {
        return error_output(core, Some(&f.msg));
    }
    if core.failed {
        return error_output(core, None);
    }
    let (rejected, mutations, neffects, status) = (
        core.rejected,
        core.mutations,
        core.neffects,
        if core.effects_for == 2 { STATUS_OK_UPDATE_EFFECTS } else { STATUS_OK_EFFECTS },
    );
    let out = &mut core.out;
    out[0..4].copy_from_slice(&STATUS_OK.to_le_bytes());
    out[4..8].copy_from_slice(&rejected.to_le_bytes());
    out[8..12].copy_from_slice(&mutations.to_le_bytes());
    if neffects > 0 {
        // status 2 or 3; without effects the record stays status 0
        out[0..4].copy_from_slice(&status.to_le_bytes());
        push_u32(out, neffects);
        out.extend_from_slice(&core.effects);
    }
    pack(out.as_ptr(), out.len())
}

/// foldhost_plugin!(name, version, view_schema, parse, apply) defines the
/// foldhost_info and foldhost_apply exports of the plugin. The SDK must be
/// the module `foldhost` at the crate root. parse and apply are functions
/// (or closures) of these shapes, with R the plugin's record type:
///
/// ```text
/// fn parse<'a>(u: &foldhost::Update<'a>) -> Result<foldhost::Parsed<R<'a>>, foldhost::Fail>
/// fn apply(records: &mut [R], batch: &mut foldhost::Batch) -> Result<(), foldhost::Fail>
/// ```
#[macro_export]
macro_rules! foldhost_plugin {
    ($name:expr, $version:expr, $view_schema:expr, $parse:expr, $apply:expr $(,)?) => {
        #[no_mangle]
        extern "C" fn foldhost_info() -> i64 {
            let (name, version, view_schema): (&str, &str, u32) = ($name, $version, $view_schema);
            // The host's call: the only one.
            unsafe { $crate::foldhost::__info(name, version, view_schema) }
        }

        #[no_mangle]
        extern "C" fn foldhost_apply(len: i32) -> i64 {
            let (parse, apply) = ($parse, $apply);
            // The host's call: the only one, never from inside a batch.
            unsafe { $crate::foldhost::__apply(&mut $crate::foldhost::__scope(), len, parse, apply) }
        }
    };
}

/// __queries is the body of the foldhost_queries export that
/// foldhost_queries! defines.
///
/// # Safety
///
/// Only that export may call it (it uses the SDK's state).
#[doc(hidden)]
pub unsafe fn __queries(qs: &[(&str, &str, QueryFn)]) -> i64 {
    let list = &mut state().queries;
    if list.is_empty() {
        push_u32(list, qs.len() as u32);
        for (name, ct, _) in qs {
            push_bytes(list, name.as_bytes());
            push_bytes(list, ct.as_bytes());
        }
    }
    pack(list.as_ptr(), list.len())
}

/// __query runs one query: the body of the foldhost_query export that
/// foldhost_queries! defines.
///
/// # Safety
///
/// Only that export may call it: it borrows the SDK's state for the query.
#[doc(hidden)]
pub unsafe fn __query<'a>(_scope: &'a mut __Scope, name_len: i32, input_len: i32, qs: &[(&str, &str, QueryFn)]) -> i64 {
    let st: &'a mut State = state();
    let State { input, arena, core, answer, .. } = st;
    arena.reset();
    let arena: &'a Arena = arena;
    core.table.reset();
    core.out.clear();
    core.indexed = 0;
    core.failed = false;
    core.fail_msg.clear();
    answer.clear();
    if name_len < 0 || input_len < 0 || input.is_empty() || name_len as usize + input_len as usize > input.len() {
        return error_output(core, Some(b"foldhost: query name and input exceed the input buffer"));
    }
    let (nl, il) = (name_len as usize, input_len as usize);
    let name = &input[..nl];
    let inp: &'a [u8] = &input[nl..nl + il];
    let f = match qs.iter().find(|q| q.0.as_bytes() == name) {
        Some(q) => q.2,
        None => return error_output(core, Some(b"foldhost: no such query")),
    };
    let mut q = Query { core, arena, answer };
    let r = f(inp, &mut q);
    let Query { core, answer, .. } = q;
    if let Err(e) = r {
        return error_output(core, Some(&e.msg));
    }
    if core.failed {
        return error_output(core, None);
    }
    let out = &mut core.out;
    out.clear();
    push_u32(out, STATUS_OK);
    push_bytes(out, answer);
    pack(out.as_ptr(), out.len())
}

/// foldhost_queries!((name, content_type, fn), ...) defines the
/// foldhost_queries and foldhost_query exports (ABI minor 2): the
/// plugin's read-only queries. Each fn has the shape of QueryFn:
///
/// ```text
/// fn q<'a>(input: &'a [u8], q: &mut foldhost::Query<'a>) -> Result<(), foldhost::Fail>
/// ```
#[macro_export]
macro_rules! foldhost_queries {
    ($(($name:expr, $ct:expr, $f:expr)),+ $(,)?) => {
        const __FOLDHOST_QUERIES: &[(&str, &str, $crate::foldhost::QueryFn)] = &[$(($name, $ct, $f)),+];

        #[no_mangle]
        extern "C" fn foldhost_queries() -> i64 {
            // The host's call: the only one.
            unsafe { $crate::foldhost::__queries(__FOLDHOST_QUERIES) }
        }

        #[no_mangle]
        extern "C" fn foldhost_query(name_len: i32, input_len: i32) -> i64 {
            // The host's call: the only one, never from inside a batch.
            unsafe { $crate::foldhost::__query(&mut $crate::foldhost::__scope(), name_len, input_len, __FOLDHOST_QUERIES) }
        }
    };
}
