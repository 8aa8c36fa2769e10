//! probe.wasm (Rust build, probe-rust.wasm): the SDK probe of ../c/probe.c,
//! command for command, byte for byte, plus one command of its own:
//!
//!   panic      panic (in apply) with the value as message: the module traps
//!              after writing "foldhost plugin panicked at '<value>', ..."
//!              to stderr
//!
//! Each update's key is a command for apply (see ../c/probe.c): w/<k>,
//! pf/<k>, pfraw/<k>, r/<k>, raw/<k>, log, emit/<s>, emitfor/<n>/<s>, fail,
//! parsefail, reject...

#[path = "../../../abi/sdk/rust/foldhost.rs"]
mod foldhost;

use foldhost::{Batch, Fail, Level, Op, Parsed, Update};

struct Rec<'a> {
    op: Op,
    key: &'a [u8],
    value: &'a [u8],
}

fn parse<'a>(u: &Update<'a>) -> Result<Parsed<Rec<'a>>, Fail> {
    if u.key.starts_with(b"reject") {
        return Ok(Parsed::Reject);
    }
    if u.key == b"parsefail" {
        return Err(Fail::new(u.value));
    }
    Ok(Parsed::Accept(Rec { op: u.op, key: u.key, value: u.value }))
}

/// result puts <prefix><i>/<k> = head + value.
fn result(b: &mut Batch, prefix: &str, i: usize, k: &[u8], head: &[u8], v: &[u8]) {
    let mut key = format!("{}{}/", prefix, i).into_bytes();
    key.extend_from_slice(k);
    let val = b.arena().concat(&[head, v]);
    b.put(&key, val);
}

fn apply(rs: &mut [Rec], b: &mut Batch) -> Result<(), Fail> {
    for (i, r) in rs.iter().enumerate() {
        if let Some(k) = r.key.strip_prefix(b"w/") {
            if r.op == Op::Put {
                b.put(k, r.value);
            } else {
                b.delete(k);
            }
        } else if let Some(k) = r.key.strip_prefix(b"pf/") {
            b.prefetch_view(k);
        } else if let Some(k) = r.key.strip_prefix(b"pfraw/") {
            b.prefetch_raw(k);
        } else if let Some(k) = r.key.strip_prefix(b"r/") {
            match b.get_view(k)? {
                Some(v) => result(b, "got/", i, k, b"1", v),
                None => result(b, "got/", i, k, b"0", b""),
            }
        } else if let Some(k) = r.key.strip_prefix(b"raw/") {
            match b.get_raw(k)? {
                Some(e) => result(b, "rawgot/", i, k, format!("{}:", e.revision).as_bytes(), e.value),
                None => result(b, "rawgot/", i, k, b"0", b""),
            }
        } else if r.key == b"log" {
            foldhost::log(Level::Info, r.value);
        } else if r.key.starts_with(b"emitfor/") && r.key.len() > 10 {
            b.emit_for((r.key[8] - b'0') as usize, &r.key[10..], &[], r.value);
        } else if let Some(s) = r.key.strip_prefix(b"emit/") {
            b.emit(s, &[], r.value);
        } else if r.key == b"fail" {
            return Err(Fail::new(r.value));
        } else if r.key == b"panic" {
            panic!("{}", String::from_utf8_lossy(r.value));
        }
    }
    Ok(())
}

foldhost_plugin!("testdata-probe", "1.0.0", 1, parse, apply);
