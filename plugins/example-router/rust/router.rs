//! example-router, the Rust build: a routing table from route.<host> keys.
//! The behaviour, byte for byte, is plugins/example-router/SPEC.md; the C,
//! Go and AssemblyScript builds produce the same views for the same input
//! (plugins/example-router/fixtures/*.jsonl) and the same query answers
//! (TestConformanceRouterQueries).
//!
//! Build: scripts/build-plugins (see abi/sdk/rust/README.md for the flags).

#[path = "../../../abi/sdk/rust/foldhost.rs"]
mod foldhost;

use foldhost::{Batch, Fail, Op, Parsed, Query, Update};

const MAX_UPSTREAMS: usize = 64;
const MAX_ADDR: usize = 255;
const MAX_WEIGHT: u32 = 1000;
/// Unknown values nest at most this deep: top-level members are at depth
/// 1, an upstream object's members at depth 2, each container adds one.
const MAX_DEPTH: usize = 64;

#[derive(Clone, Copy)]
struct Upstream<'a> {
    addr: &'a [u8],
    weight: u32,
}

struct Route<'a> {
    remove: bool,
    host: &'a [u8],             // aliases the update's key
    hostkey: &'a [u8],          // "host/<host>", arena
    entry: &'a [u8],            // the rendered view value (puts only), arena
    ups: &'a [Upstream<'a>],    // puts only, arena
}

// ---- a minimal validating JSON reader ----
//
// Enough JSON for the spec, strict on every edge so that every build agrees
// byte for byte: objects, arrays, strings (escapes validated and skipped),
// numbers, true/false/null, nesting up to MAX_DEPTH. Known field names match
// exactly (case-sensitive, unescaped); a repeated known field, or a known
// field of the wrong type (null included), makes the update malformed. Every
// reader returns None (or false) for malformed input; the cursor is then
// meaningless.

struct Cur<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Cur<'a> {
    fn ws(&mut self) {
        while self.p < self.b.len() && matches!(self.b[self.p], b' ' | b'\t' | b'\n' | b'\r') {
            self.p += 1;
        }
    }

    /// peek is the byte at the cursor, or None at the end.
    fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    fn peek_digit(&self) -> bool {
        matches!(self.peek(), Some(b'0'..=b'9'))
    }

    /// string reads a string at the cursor (on the opening quote): its raw
    /// bytes between the quotes and whether it has escapes.
    fn string(&mut self) -> Option<(&'a [u8], bool)> {
        let b = self.b;
        self.p += 1;
        let start = self.p;
        let mut esc = false;
        while self.p < b.len() {
            let ch = b[self.p];
            if ch == b'"' {
                let s = &b[start..self.p];
                self.p += 1;
                return Some((s, esc));
            }
            if ch < 0x20 {
                return None;
            }
            self.p += 1;
            if ch != b'\\' {
                continue;
            }
            esc = true;
            let e = *b.get(self.p)?;
            self.p += 1;
            match e {
                b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {}
                b'u' => {
                    let hex = b.get(self.p..self.p + 4)?;
                    if !hex.iter().all(|c| c.is_ascii_hexdigit()) {
                        return None;
                    }
                    self.p += 4;
                }
                _ => return None,
            }
        }
        None
    }

    fn digits(&mut self) {
        while self.peek_digit() {
            self.p += 1;
        }
    }

    /// number reads a JSON number: its bytes and whether it is a bare
    /// non-negative integer (no sign, fraction or exponent).
    fn number(&mut self) -> Option<(&'a [u8], bool)> {
        let start = self.p;
        let mut plain = true;
        if self.peek() == Some(b'-') {
            self.p += 1;
            plain = false;
        }
        match self.peek() {
            Some(b'0') => self.p += 1,
            Some(b'1'..=b'9') => self.digits(),
            _ => return None,
        }
        if self.peek() == Some(b'.') {
            self.p += 1;
            plain = false;
            if !self.peek_digit() {
                return None;
            }
            self.digits();
        }
        if matches!(self.peek(), Some(b'e' | b'E')) {
            self.p += 1;
            plain = false;
            if matches!(self.peek(), Some(b'+' | b'-')) {
                self.p += 1;
            }
            if !self.peek_digit() {
                return None;
            }
            self.digits();
        }
        Some((&self.b[start..self.p], plain))
    }

    fn literal(&mut self, lit: &[u8]) -> bool {
        if self.b[self.p..].starts_with(lit) {
            self.p += lit.len();
            true
        } else {
            false
        }
    }

    /// member reads an object member's name and colon.
    fn member(&mut self) -> bool {
        self.ws();
        if self.peek() != Some(b'"') || self.string().is_none() {
            return false;
        }
        self.colon()
    }

    /// colon reads the colon after a member name (and the space before it).
    fn colon(&mut self) -> bool {
        self.ws();
        if self.peek() != Some(b':') {
            return false;
        }
        self.p += 1;
        true
    }

    /// scalar reads a string, number or literal.
    fn scalar(&mut self) -> bool {
        match self.peek() {
            Some(b'"') => self.string().is_some(),
            Some(b't') => self.literal(b"true"),
            Some(b'f') => self.literal(b"false"),
            Some(b'n') => self.literal(b"null"),
            _ => self.number().is_some(),
        }
    }

    /// skip validates and skips one value of any shape at nesting depth
    /// `depth`; a value deeper than MAX_DEPTH makes the input malformed.
    /// Nesting is tracked on an explicit stack, not the wasm stack.
    fn skip(&mut self, depth: usize) -> bool {
        let mut stack = [0u8; MAX_DEPTH + 1];
        let mut open = 0;
        loop {
            if depth + open > MAX_DEPTH {
                return false;
            }
            self.ws();
            let ch = self.peek();
            if ch == Some(b'{') || ch == Some(b'[') {
                let ch = ch.unwrap();
                self.p += 1;
                self.ws();
                if self.peek() == Some(if ch == b'{' { b'}' } else { b']' }) {
                    self.p += 1;
                } else {
                    stack[open] = ch;
                    open += 1;
                    if ch == b'{' && !self.member() {
                        return false;
                    }
                    continue;
                }
            } else if !self.scalar() {
                return false;
            }
            // after a value: a separator, or the ends of containers
            loop {
                if open == 0 {
                    return true;
                }
                self.ws();
                let top = stack[open - 1];
                if self.peek() == Some(b',') {
                    self.p += 1;
                    if top == b'{' && !self.member() {
                        return false;
                    }
                    break;
                }
                if self.peek() != Some(if top == b'{' { b'}' } else { b']' }) {
                    return false;
                }
                self.p += 1;
                open -= 1;
            }
        }
    }

    /// next_member reads what follows an object member's value: true when
    /// another member follows (the cursor on its name), false at the
    /// closing brace (consumed); None when neither.
    fn next_member(&mut self) -> Option<bool> {
        self.ws();
        match self.peek() {
            Some(b',') => {
                self.p += 1;
                self.ws();
                Some(true)
            }
            Some(b'}') => {
                self.p += 1;
                Some(false)
            }
            _ => None,
        }
    }
}

// ---- the route entry ----

fn valid_addr(s: &[u8]) -> bool {
    !s.is_empty() && s.len() <= MAX_ADDR && !s.iter().any(|&c| c == b',' || c == b'=' || c == b'/' || c < 0x20)
}

/// parse_upstream reads an upstream object at the cursor (on its brace).
fn parse_upstream<'a>(c: &mut Cur<'a>) -> Option<Upstream<'a>> {
    let mut addr: Option<&'a [u8]> = None;
    let mut weight: Option<u32> = None;
    c.p += 1; // {
    c.ws();
    if c.peek() == Some(b'}') {
        return None; // no addr
    }
    loop {
        if c.peek() != Some(b'"') {
            return None;
        }
        let (name, esc) = c.string()?;
        let is_addr = !esc && name == b"addr";
        let is_weight = !esc && name == b"weight";
        if !c.colon() {
            return None;
        }
        c.ws();
        if is_addr {
            if addr.is_some() || c.peek() != Some(b'"') {
                return None;
            }
            let (s, esc) = c.string()?;
            if esc || !valid_addr(s) {
                return None;
            }
            addr = Some(s);
        } else if is_weight {
            if weight.is_some() || !c.peek_digit() {
                return None;
            }
            let (s, plain) = c.number()?;
            if !plain || s.len() > 4 {
                return None;
            }
            let w = s.iter().fold(0u32, |w, &d| w * 10 + (d - b'0') as u32);
            if !(1..=MAX_WEIGHT).contains(&w) {
                return None;
            }
            weight = Some(w);
        } else if !c.skip(2) {
            return None;
        }
        if !c.next_member()? {
            return addr.map(|addr| Upstream { addr, weight: weight.unwrap_or(1) });
        }
    }
}

/// parse_upstreams reads the upstreams array into ups; its length.
fn parse_upstreams<'a>(c: &mut Cur<'a>, ups: &mut [Upstream<'a>; MAX_UPSTREAMS]) -> Option<usize> {
    if c.peek() != Some(b'[') {
        return None;
    }
    c.p += 1;
    let mut n = 0;
    loop {
        c.ws();
        if c.peek() != Some(b'{') || n == MAX_UPSTREAMS {
            return None; // also an empty array, a non-object entry, too many
        }
        ups[n] = parse_upstream(c)?;
        n += 1;
        c.ws();
        match c.peek() {
            Some(b',') => c.p += 1,
            Some(b']') => {
                c.p += 1;
                return Some(n);
            }
            _ => return None,
        }
    }
}

/// parse_entry parses a route value into ups; its length, or None if it
/// breaks a rule.
fn parse_entry<'a>(value: &'a [u8], ups: &mut [Upstream<'a>; MAX_UPSTREAMS]) -> Option<usize> {
    let mut c = Cur { b: value, p: 0 };
    let mut count = None;
    c.ws();
    if c.peek() != Some(b'{') {
        return None;
    }
    c.p += 1;
    c.ws();
    if c.peek() == Some(b'}') {
        return None; // no upstreams
    }
    loop {
        if c.peek() != Some(b'"') {
            return None;
        }
        let (name, esc) = c.string()?;
        let is_ups = !esc && name == b"upstreams";
        if !c.colon() {
            return None;
        }
        c.ws();
        if is_ups {
            if count.is_some() {
                return None;
            }
            count = Some(parse_upstreams(&mut c, ups)?);
        } else if !c.skip(1) {
            return None;
        }
        if !c.next_member()? {
            break;
        }
    }
    c.ws();
    if c.p != value.len() {
        return None;
    }
    count
}

/// put_uint writes v in decimal at dst; the number of bytes.
fn put_uint(dst: &mut [u8], mut v: u32) -> usize {
    let mut tmp = [0u8; 10];
    let mut n = 0;
    loop {
        tmp[n] = b'0' + (v % 10) as u8;
        n += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..n {
        dst[i] = tmp[n - 1 - i];
    }
    n
}

fn route_parse<'a>(u: &Update<'a>) -> Result<Parsed<Route<'a>>, Fail> {
    const PREFIX: &[u8] = b"route.";
    if u.key.len() <= PREFIX.len() || !u.key.starts_with(PREFIX) {
        return Ok(Parsed::Reject);
    }
    let arena = u.arena();
    let host = &u.key[PREFIX.len()..];
    let mut r = Route { remove: true, host, hostkey: &[], entry: &[], ups: &[] };
    if u.op == Op::Put {
        let mut ups = [Upstream { addr: &[], weight: 0 }; MAX_UPSTREAMS];
        let n = match parse_entry(u.value, &mut ups) {
            Some(n) => n,
            None => return Ok(Parsed::Reject),
        };
        let ups = &ups[..n];
        let size: usize = ups.iter().map(|up| up.addr.len() + 1 + 4 + 1).sum();
        let v = arena.alloc(size);
        let mut w = 0;
        for (i, up) in ups.iter().enumerate() {
            if i > 0 {
                v[w] = b',';
                w += 1;
            }
            v[w..w + up.addr.len()].copy_from_slice(up.addr);
            w += up.addr.len();
            v[w] = b'=';
            w += 1;
            w += put_uint(&mut v[w..], up.weight);
        }
        r.remove = false;
        r.ups = arena.copy_slice(ups);
        r.entry = &v[..w];
    }
    r.hostkey = arena.concat(&[b"host/", host]);
    Ok(Parsed::Accept(r))
}

// ---- apply ----

fn addr_in(set: &[&[u8]], a: &[u8]) -> bool {
    set.contains(&a)
}

/// old_addrs splits a stored entry ("a=1,b=2") into its distinct addrs.
fn old_addrs<'a>(v: &'a [u8], set: &mut Vec<&'a [u8]>) {
    set.clear();
    let mut i = 0;
    while i < v.len() {
        let start = i;
        while i < v.len() && v[i] != b',' {
            i += 1;
        }
        let mut end = start;
        while end < i && v[end] != b'=' {
            end += 1;
        }
        let a = &v[start..end];
        if !addr_in(set, a) {
            set.push(a);
        }
        i += 1; // the comma
    }
}

/// The reverse index upstream/<addr>/<host>.
const UPSTREAM_INDEX: &[u8] = b"upstream";

fn route_apply(rs: &mut [Route], b: &mut Batch) -> Result<(), Fail> {
    for r in rs.iter() {
        b.prefetch_view(r.hostkey);
    }
    let mut olds: Vec<&[u8]> = Vec::with_capacity(MAX_UPSTREAMS);
    let mut news: Vec<&[u8]> = Vec::with_capacity(MAX_UPSTREAMS);
    let mut key: Vec<u8> = Vec::with_capacity(512);
    for (i, r) in rs.iter().enumerate() {
        let changed = match b.get_view(r.hostkey)? {
            Some(prev) => {
                old_addrs(prev, &mut olds);
                r.remove || prev != r.entry
            }
            None => {
                olds.clear();
                !r.remove
            }
        };
        news.clear();
        for up in r.ups {
            if !addr_in(&news, up.addr) {
                news.push(up.addr);
            }
        }
        for &a in &olds {
            if !addr_in(&news, a) {
                b.index_delete(UPSTREAM_INDEX, a, r.host);
            }
        }
        for &a in &news {
            if !addr_in(&olds, a) {
                b.index_put(UPSTREAM_INDEX, a, r.host);
            }
        }
        if r.remove {
            b.delete(r.hostkey);
        } else {
            b.put(r.hostkey, r.entry);
        }
        if changed {
            // The effect of a changed host (SPEC.md, "Effects"), naming the
            // record it derives from: its id is then its update's.
            key.clear();
            key.extend_from_slice(r.host);
            key.push(b'\n');
            key.extend_from_slice(r.entry);
            let op: &[u8] = if r.remove { b"delete" } else { b"put" };
            b.emit_for(i, b"route.changed", &[(b"Route-Op", op)], &key);
        }
    }
    Ok(())
}

foldhost_plugin!("example-router", "1.0.0", 1, route_parse, route_apply);

// ---- queries (ABI minor 2; SPEC.md, "Queries") ----

/// json_str appends s as a JSON string: '"' and '\' escaped, control
/// characters as \u00XX, every other byte as is.
fn json_str(out: &mut Vec<u8>, s: &[u8]) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    for &c in s {
        if c == b'"' || c == b'\\' {
            out.extend_from_slice(&[b'\\', c]);
        } else if c < 0x20 {
            out.extend_from_slice(&[b'\\', b'u', b'0', b'0', HEX[(c >> 4) as usize], HEX[(c & 15) as usize]]);
        } else {
            out.push(c);
        }
    }
    out.push(b'"');
}

/// How many keys one range of top_upstreams asks for.
const QUERY_PAGE: u32 = 1024;

/// hosts_of_upstream: input an upstream addr; answers
/// {"upstream":"<addr>","hosts":["<host>",...]} in host order, from the
/// reverse index (one paged prefix range over upstream/<addr>/).
fn hosts_of_upstream<'a>(input: &'a [u8], q: &mut Query<'a>) -> Result<(), Fail> {
    if !valid_addr(input) {
        return Err(Fail::from("hosts_of_upstream: the input must be an upstream addr (1 to 255 bytes, no ',', '=', '/' or control characters)"));
    }
    let hosts = q.index_scan(UPSTREAM_INDEX, input)?;
    let mut out = Vec::with_capacity(64 + hosts.len() * 16);
    out.extend_from_slice(b"{\"upstream\":");
    json_str(&mut out, input);
    out.extend_from_slice(b",\"hosts\":[");
    for (i, h) in hosts.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        json_str(&mut out, h);
    }
    out.extend_from_slice(b"]}");
    q.answer(&out);
    Ok(())
}

/// rank_insert keeps top (at most max) ordered by hosts descending; addrs
/// come in ascending order, so a tie keeps the earlier (smaller) addr
/// first.
fn rank_insert<'a>(top: &mut Vec<(&'a [u8], u32)>, max: usize, c: (&'a [u8], u32)) {
    let mut i = top.len();
    if i == max {
        if top[max - 1].1 >= c.1 {
            return;
        }
        i = max - 1;
    } else {
        top.push(c);
    }
    while i > 0 && top[i - 1].1 < c.1 {
        top[i] = top[i - 1];
        i -= 1;
    }
    top[i] = c;
}

/// top_upstreams: input n, a decimal 1..1000 (empty: 10); answers the n
/// upstreams serving the most hosts, [{"addr":"<addr>","hosts":<count>},...],
/// most first, ties in addr order, from one paged range over upstream/.
fn top_upstreams<'a>(input: &'a [u8], q: &mut Query<'a>) -> Result<(), Fail> {
    const BAD: &str = "top_upstreams: the input must be a count from 1 to 1000";
    let mut max: usize = 10;
    if !input.is_empty() {
        if input.len() > 4 {
            return Err(Fail::from(BAD));
        }
        max = 0;
        for &c in input {
            if !c.is_ascii_digit() {
                return Err(Fail::from(BAD));
            }
            max = max * 10 + (c - b'0') as usize;
        }
        if !(1..=1000).contains(&max) {
            return Err(Fail::from(BAD));
        }
    }
    const PREFIX: &[u8] = b"upstream/";
    let end = foldhost::prefix_end(q.arena(), PREFIX);
    let mut start: &[u8] = PREFIX;
    let mut top: Vec<(&'a [u8], u32)> = Vec::with_capacity(max);
    let mut cur: Option<(&'a [u8], u32)> = None;
    loop {
        let page = q.range_view(start, end, QUERY_PAGE, false)?;
        for e in page.entries {
            let rest = &e.key[PREFIX.len()..];
            let a = match rest.iter().position(|&c| c == b'/') {
                Some(i) => &rest[..i],
                None => rest,
            };
            match cur {
                Some((ca, n)) if ca == a => cur = Some((ca, n + 1)),
                _ => {
                    if let Some(c) = cur {
                        rank_insert(&mut top, max, c);
                    }
                    cur = Some((a, 1));
                }
            }
        }
        match page.entries.last() {
            Some(last) if page.more => start = foldhost::after(q.arena(), last.key),
            _ => break,
        }
    }
    if let Some(c) = cur {
        rank_insert(&mut top, max, c);
    }
    let mut out = Vec::with_capacity(2 + top.len() * 32);
    out.push(b'[');
    for (i, &(a, n)) in top.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"addr\":");
        json_str(&mut out, a);
        out.extend_from_slice(b",\"hosts\":");
        out.extend_from_slice(n.to_string().as_bytes());
        out.push(b'}');
    }
    out.push(b']');
    q.answer(&out);
    Ok(())
}

foldhost_queries!(
    ("hosts_of_upstream", "application/json", hosts_of_upstream),
    ("top_upstreams", "application/json", top_upstreams),
);
