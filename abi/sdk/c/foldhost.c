/*
 * foldhost.c: the C guest SDK for the foldhost plugin ABI v1 (see foldhost.h
 * for the programming model and abi/ABI.md for the contract and the bytes).
 *
 * State kept between batches (grown on demand, never shrunk below what the
 * largest batch needed, so steady state allocates nothing):
 *   in      the input buffer foldhost_alloc hands out
 *   out     the output record (header, mutations) or an error record
 *   arena   chunks for per-batch memory (fh_alloc, read responses, key copies)
 *   table   the read/overlay table: one entry per (space, key) the plugin read
 *           or, lazily, wrote, with an open-addressed index over it
 */
#include "foldhost.h"

#include <stdlib.h>
#include <string.h>

#define FH_IMPORT(name) __attribute__((import_module("foldhost"), import_name(name)))
#define FH_EXPORT(name) __attribute__((export_name(name)))

FH_IMPORT("read") int32_t fh_host_read(int32_t space, int32_t req_ptr, int32_t req_len);
FH_IMPORT("read_result") void fh_host_read_result(int32_t dst_ptr);
FH_IMPORT("log") void fh_host_log(int32_t level, int32_t ptr, int32_t len);
FH_IMPORT("range") int32_t fh_host_range(int32_t space, int32_t req_ptr, int32_t req_len);

enum { MUT_PUT = 1, MUT_DELETE = 2 };
enum { STATUS_OK = 0, STATUS_ERROR = 1, STATUS_OK_EFFECTS = 2, STATUS_OK_UPDATE_EFFECTS = 3 };

/* op, revision, time, key length, value length */
#define MIN_UPDATE (1 + 8 + 8 + 4 + 4)
/* status, rejected, count */
#define OUT_HEADER 12

static inline uint32_t addr32(const void *p) { return (uint32_t)(uintptr_t)p; }

/* wasm is little-endian: memcpy loads and stores are the wire's byte order. */
static inline uint32_t ld32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static inline uint64_t ld64(const uint8_t *p) {
	uint64_t v;
	memcpy(&v, p, 8);
	return v;
}
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

__attribute__((noreturn)) static void out_of_memory(void) {
	static const char msg[] = "foldhost: out of memory";
	fh_host_log(FH_LOG_ERROR, (int32_t)addr32(msg), (int32_t)(sizeof msg - 1));
	__builtin_trap();
}

/* ---- growable buffers ---- */

typedef struct buf {
	uint8_t *p;
	size_t len, cap;
} buf;

static void buf_reserve(buf *b, size_t extra) {
	if (b->cap - b->len >= extra)
		return;
	size_t need = b->len + extra;
	if (need < b->len)
		out_of_memory();
	size_t cap = b->cap ? b->cap : 256;
	while (cap < need)
		cap = cap > SIZE_MAX / 2 ? need : cap * 2;
	uint8_t *p = realloc(b->p, cap);
	if (!p)
		out_of_memory();
	b->p = p;
	b->cap = cap;
}

static inline void buf_u8(buf *b, uint8_t v) { b->p[b->len++] = v; }
static inline void buf_u32(buf *b, uint32_t v) {
	st32(b->p + b->len, v);
	b->len += 4;
}
static inline void buf_bytes(buf *b, const void *p, uint32_t n) {
	buf_u32(b, n);
	if (n)
		memcpy(b->p + b->len, p, n);
	b->len += n;
}

/* ---- the per-batch arena ---- */

typedef struct chunk {
	struct chunk *next;
	size_t cap, used;
	uint32_t pad; /* the header is 16 bytes: data stays 8-aligned */
} chunk;

#define ARENA_FIRST (64 * 1024)
#define ARENA_KEEP (16 * 1024 * 1024) /* retain at most this much between batches */

static chunk *arena;
static size_t arena_total;

static inline uint8_t *chunk_data(chunk *c) { return (uint8_t *)(c + 1); }

void *fh_alloc(size_t n) {
	if (n > SIZE_MAX - 7)
		out_of_memory();
	n = (n + 7) & ~(size_t)7;
	chunk *c = arena;
	if (!c || c->cap - c->used < n) {
		size_t cap = c ? c->cap * 2 : ARENA_FIRST;
		if (cap < n)
			cap = n;
		if (cap > SIZE_MAX - sizeof(chunk))
			out_of_memory();
		chunk *nc = malloc(sizeof(chunk) + cap);
		if (!nc)
			out_of_memory();
		nc->next = c;
		nc->cap = cap;
		nc->used = 0;
		arena = nc;
		arena_total += cap;
		c = nc;
	}
	void *p = chunk_data(c) + c->used;
	c->used += n;
	return p;
}

/* arena_reset frees the batch's memory. A batch that needed several chunks
 * leaves one chunk of their total size, so the next batch like it needs no
 * allocation. */
static void arena_reset(void) {
	if (!arena)
		return;
	if (!arena->next && arena_total <= ARENA_KEEP) {
		arena->used = 0;
		return;
	}
	size_t total = arena_total;
	while (arena) {
		chunk *next = arena->next;
		free(arena);
		arena = next;
	}
	arena_total = 0;
	if (total > ARENA_KEEP)
		return;
	chunk *c = malloc(sizeof(chunk) + total);
	if (c) {
		c->next = NULL;
		c->cap = total;
		c->used = 0;
		arena = c;
		arena_total = total;
	}
}

/* ---- batch state ---- */

static uint8_t *in_buf;
static size_t in_cap;

static buf out;          /* the output record being built */
static uint32_t out_mutations;
static buf effects;            /* the encoded effects (ABI minor 1) */
static uint32_t out_effects;
/* Effects that name their update (fh_emit_for, ABI minor 3): rec_update maps
 * an accepted record to its update's index in the batch. */
static uint32_t *rec_update;
static uint32_t rec_count;
static int effects_for;        /* 0: no effect yet, 1: fh_emit, 2: fh_emit_for */
static uint32_t last_update;
static uint32_t out_rejected;
static size_t out_indexed; /* mutations before this offset are in the table */

static buf fail_msg;
static int failed;

static buf req; /* a read request being built */

static int in_query; /* a query runs: writes fail it, ranges are allowed */
static buf answer;   /* the query's answer */

/* ---- the read/overlay table ---- */

enum { FETCH_NONE, FETCH_PENDING, FETCH_FOUND, FETCH_MISSING };

typedef struct entry {
	const uint8_t *key; /* an arena copy, or NULL: the key is in out at key_off */
	uint32_t key_off, key_len;
	uint32_t hash;
	uint32_t slot;
	uint32_t next_pending; /* index + 1 of the next pending entry; 0 ends */
	uint8_t space;
	uint8_t fetch;   /* FETCH_* */
	uint8_t written; /* 0, MUT_PUT or MUT_DELETE: this batch's last write */
	uint32_t wval_off, wval_len; /* the written value, in out */
	const uint8_t *fval;         /* the fetched value, in the arena */
	uint32_t fval_len;
	uint64_t frev;
} entry;

static entry *ents;
static uint32_t nents, ents_cap;
static uint32_t *slots; /* entry index + 1; 0 is empty */
static uint32_t slots_cap; /* a power of two, or 0 */

static uint32_t pend_head[2], pend_tail[2], pend_n[2];

static uint32_t hash_key(uint32_t space, const uint8_t *p, uint32_t n) {
	uint32_t h = 2166136261u ^ (space * 0x9E3779B9u) ^ n;
	while (n >= 4) {
		h = (h ^ ld32(p)) * 0x9E3779B1u;
		h ^= h >> 15;
		p += 4;
		n -= 4;
	}
	while (n--)
		h = (h ^ *p++) * 0x01000193u;
	h ^= h >> 16;
	h *= 0x85EBCA6Bu;
	h ^= h >> 13;
	return h;
}

static inline const uint8_t *entry_key(const entry *e) {
	return e->key ? e->key : out.p + e->key_off;
}

static void table_grow(void) {
	uint32_t cap = slots_cap ? slots_cap * 2 : 256;
	if (cap == 0 || cap > (UINT32_MAX / sizeof(uint32_t)))
		out_of_memory();
	uint32_t *s = calloc(cap, sizeof(uint32_t));
	if (!s)
		out_of_memory();
	free(slots);
	slots = s;
	slots_cap = cap;
	for (uint32_t i = 0; i < nents; i++) {
		uint32_t j = ents[i].hash & (cap - 1);
		while (slots[j])
			j = (j + 1) & (cap - 1);
		slots[j] = i + 1;
		ents[i].slot = j;
	}
}

/* table_find returns the index of the (space, key) entry, creating it when
 * create is set (key_in_out: the key lives in out at key_off, else it is
 * copied to the arena); or UINT32_MAX when absent and not created. */
static uint32_t table_find(uint8_t space, const uint8_t *key, uint32_t len, int create,
			   int key_in_out, uint32_t key_off) {
	uint32_t h = hash_key(space, key, len);
	if (slots_cap) {
		uint32_t j = h & (slots_cap - 1);
		for (uint32_t s; (s = slots[j]) != 0; j = (j + 1) & (slots_cap - 1)) {
			entry *e = &ents[s - 1];
			if (e->hash == h && e->space == space && e->key_len == len &&
			    memcmp(entry_key(e), key, len) == 0)
				return s - 1;
		}
	}
	if (!create)
		return UINT32_MAX;
	if ((uint64_t)(nents + 1) * 2 > slots_cap)
		table_grow();
	if (nents == ents_cap) {
		uint32_t cap = ents_cap ? ents_cap * 2 : 64;
		if (cap > UINT32_MAX / sizeof(entry))
			out_of_memory();
		entry *ne = realloc(ents, (size_t)cap * sizeof(entry));
		if (!ne)
			out_of_memory();
		ents = ne;
		ents_cap = cap;
	}
	uint32_t i = nents++;
	entry *e = &ents[i];
	memset(e, 0, sizeof *e);
	if (key_in_out) {
		e->key_off = key_off;
	} else {
		uint8_t *k = fh_alloc(len);
		if (len)
			memcpy(k, key, len);
		e->key = k;
	}
	e->key_len = len;
	e->hash = h;
	e->space = space;
	uint32_t j = h & (slots_cap - 1);
	while (slots[j])
		j = (j + 1) & (slots_cap - 1);
	slots[j] = i + 1;
	e->slot = j;
	return i;
}

static void table_reset(void) {
	for (uint32_t i = 0; i < nents; i++)
		slots[ents[i].slot] = 0;
	nents = 0;
	for (int s = 0; s < 2; s++)
		pend_head[s] = pend_tail[s] = pend_n[s] = 0;
}

/* index_writes records the mutations written since the last call in the
 * table, so reads see them. Done lazily: a plugin that never reads after
 * writing never pays for hashing its writes. */
static void index_writes(void) {
	size_t off = out_indexed;
	while (off < out.len) {
		uint8_t op = out.p[off];
		uint32_t klen = ld32(out.p + off + 1);
		uint32_t koff = (uint32_t)(off + 5);
		off = koff + klen;
		uint32_t i = table_find(FH_SPACE_VIEW, out.p + koff, klen, 1, 1, koff);
		entry *e = &ents[i];
		e->written = op;
		if (op == MUT_PUT) {
			e->wval_len = ld32(out.p + off);
			e->wval_off = (uint32_t)(off + 4);
			off += 4 + e->wval_len;
		}
	}
	out_indexed = off;
}

/* ---- output ---- */

static int query_write(const char *what) {
	if (!in_query)
		return 0;
	fh_fail(what);
	return 1;
}

void fh_put(const void *key, uint32_t key_len, const void *value, uint32_t value_len) {
	if (query_write("foldhost: a query cannot write (fh_put)"))
		return;
	buf_reserve(&out, 1 + 4 + (size_t)key_len + 4 + (size_t)value_len);
	buf_u8(&out, MUT_PUT);
	buf_bytes(&out, key, key_len);
	buf_bytes(&out, value, value_len);
	out_mutations++;
}

void fh_delete(const void *key, uint32_t key_len) {
	if (query_write("foldhost: a query cannot write (fh_delete)"))
		return;
	buf_reserve(&out, 1 + 4 + (size_t)key_len);
	buf_u8(&out, MUT_DELETE);
	buf_bytes(&out, key, key_len);
	out_mutations++;
}

static void emit(const void *subject, uint32_t subject_len, const fh_header *headers, uint32_t header_count,
		 const void *payload, uint32_t payload_len);

void fh_emit(const void *subject, uint32_t subject_len, const fh_header *headers, uint32_t header_count,
	     const void *payload, uint32_t payload_len) {
	if (query_write("foldhost: a query cannot emit effects (fh_emit)"))
		return;
	if (effects_for == 2) {
		fh_fail("foldhost: fh_emit after fh_emit_for in one batch: every effect names its record or none does");
		return;
	}
	effects_for = 1;
	emit(subject, subject_len, headers, header_count, payload, payload_len);
}

void fh_emit_for(uint32_t record, const void *subject, uint32_t subject_len, const fh_header *headers,
		 uint32_t header_count, const void *payload, uint32_t payload_len) {
	if (query_write("foldhost: a query cannot emit effects (fh_emit_for)"))
		return;
	if (record >= rec_count) {
		fh_fail("foldhost: fh_emit_for names a record apply did not receive");
		return;
	}
	uint32_t u = rec_update[record];
	if (effects_for == 1) {
		fh_fail("foldhost: fh_emit_for after fh_emit in one batch: every effect names its record or none does");
		return;
	}
	if (effects_for == 2 && u < last_update) {
		fh_fail("foldhost: fh_emit_for names an earlier record than the effect before it");
		return;
	}
	effects_for = 2;
	last_update = u;
	buf_reserve(&effects, 4);
	buf_u32(&effects, u);
	emit(subject, subject_len, headers, header_count, payload, payload_len);
}

static void emit(const void *subject, uint32_t subject_len, const fh_header *headers, uint32_t header_count,
		 const void *payload, uint32_t payload_len) {
	size_t n = 4 + (size_t)subject_len + 4 + 4 + (size_t)payload_len;
	for (uint32_t i = 0; i < header_count; i++)
		n += 8 + (size_t)headers[i].name_len + (size_t)headers[i].value_len;
	buf_reserve(&effects, n);
	buf_bytes(&effects, subject, subject_len);
	buf_u32(&effects, header_count);
	for (uint32_t i = 0; i < header_count; i++) {
		buf_bytes(&effects, headers[i].name, headers[i].name_len);
		buf_bytes(&effects, headers[i].value, headers[i].value_len);
	}
	buf_bytes(&effects, payload, payload_len);
	out_effects++;
}

int fh_fail_bytes(const void *msg, uint32_t len) {
	if (!failed) {
		failed = 1;
		fail_msg.len = 0;
		buf_reserve(&fail_msg, len ? len : 1);
		if (len)
			memcpy(fail_msg.p, msg, len);
		fail_msg.len = len;
	}
	return FH_FAIL;
}

int fh_fail(const char *msg) { return fh_fail_bytes(msg, (uint32_t)strlen(msg)); }

/* ---- reads ---- */

static void prefetch(uint8_t space, const void *key, uint32_t len) {
	uint32_t i = table_find(space, key, len, 1, 0, 0);
	entry *e = &ents[i];
	if (e->fetch != FETCH_NONE)
		return;
	e->fetch = FETCH_PENDING;
	e->next_pending = 0;
	if (pend_n[space])
		ents[pend_tail[space] - 1].next_pending = i + 1;
	else
		pend_head[space] = i + 1;
	pend_tail[space] = i + 1;
	pend_n[space]++;
}

void fh_prefetch_view(const void *key, uint32_t key_len) { prefetch(FH_SPACE_VIEW, key, key_len); }
void fh_prefetch_raw(const void *key, uint32_t key_len) { prefetch(FH_SPACE_RAW, key, key_len); }

static int flush(uint8_t space) {
	if (!pend_n[space])
		return failed ? FH_FAIL : FH_OK;
	size_t need = 4;
	for (uint32_t i = pend_head[space]; i; i = ents[i - 1].next_pending)
		need += 4 + (size_t)ents[i - 1].key_len;
	req.len = 0;
	buf_reserve(&req, need);
	buf_u32(&req, pend_n[space]);
	for (uint32_t i = pend_head[space]; i; i = ents[i - 1].next_pending)
		buf_bytes(&req, entry_key(&ents[i - 1]), ents[i - 1].key_len);

	uint32_t head = pend_head[space];
	pend_head[space] = pend_tail[space] = pend_n[space] = 0;

	int32_t n = fh_host_read(space, (int32_t)addr32(req.p), (int32_t)req.len);
	if (n < 0)
		return fh_fail("foldhost: the host refused a read request");
	uint8_t *resp = fh_alloc(n ? (size_t)n : 1);
	fh_host_read_result((int32_t)addr32(resp));

	size_t off = 0, end = (size_t)n;
	for (uint32_t i = head; i; i = ents[i - 1].next_pending) {
		entry *e = &ents[i - 1];
		if (end - off < 1)
			goto malformed;
		uint8_t found = resp[off++];
		if (found == 0) {
			e->fetch = FETCH_MISSING;
			continue;
		}
		if (found != 1 || end - off < 4)
			goto malformed;
		uint32_t vlen = ld32(resp + off);
		off += 4;
		if (end - off < vlen)
			goto malformed;
		const uint8_t *v = resp + off;
		off += vlen;
		if (space == FH_SPACE_RAW) {
			if (vlen < 8)
				goto malformed;
			e->frev = ld64(v);
			v += 8;
			vlen -= 8;
		}
		e->fetch = FETCH_FOUND;
		e->fval = v;
		e->fval_len = vlen;
	}
	if (off != end)
		goto malformed;
	return failed ? FH_FAIL : FH_OK;
malformed:
	return fh_fail("foldhost: malformed read response from the host");
}

int fh_fetch(void) {
	int a = flush(FH_SPACE_VIEW);
	int b = flush(FH_SPACE_RAW);
	return a == FH_OK && b == FH_OK ? FH_OK : FH_FAIL;
}

static int get(uint8_t space, const void *key, uint32_t len, uint64_t *rev, fh_bytes *value) {
	if (space == FH_SPACE_VIEW && !in_query)
		index_writes();
	uint32_t i = table_find(space, key, len, 1, 0, 0);
	entry *e = &ents[i];
	if (e->written == MUT_DELETE)
		return 0;
	if (e->written == MUT_PUT) {
		/* out moves as it grows: hand out a copy that lives for the batch. */
		uint8_t *v = fh_alloc(e->wval_len ? e->wval_len : 1);
		memcpy(v, out.p + e->wval_off, e->wval_len);
		value->ptr = v;
		value->len = e->wval_len;
		return 1;
	}
	if (e->fetch == FETCH_NONE)
		prefetch(space, key, len);
	if (ents[i].fetch == FETCH_PENDING && flush(space) != FH_OK)
		return FH_FAIL;
	e = &ents[i];
	if (e->fetch != FETCH_FOUND)
		return e->fetch == FETCH_MISSING ? 0 : fh_fail("foldhost: read not answered");
	if (rev)
		*rev = e->frev;
	value->ptr = e->fval;
	value->len = e->fval_len;
	return 1;
}

int fh_get_view(const void *key, uint32_t key_len, fh_bytes *value) {
	return get(FH_SPACE_VIEW, key, key_len, NULL, value);
}

int fh_get_raw(const void *key, uint32_t key_len, uint64_t *revision, fh_bytes *value) {
	return get(FH_SPACE_RAW, key, key_len, revision, value);
}

/* ---- logging ---- */

void fh_log(int level, const void *msg, uint32_t len) {
	fh_host_log(level, (int32_t)addr32(msg), (int32_t)len);
}

void fh_logs(int level, const char *msg) { fh_log(level, msg, (uint32_t)strlen(msg)); }

/* ---- the ABI exports ---- */

static inline int64_t pack(const void *p, size_t len) {
	return (int64_t)(((uint64_t)addr32(p) << 32) | (uint64_t)(uint32_t)len);
}

FH_EXPORT("foldhost_abi_v1") int32_t foldhost_abi_v1(void) { return FOLDHOST_ABI_MINOR; }

FH_EXPORT("foldhost_alloc") int32_t foldhost_alloc(int32_t size) {
	if (size < 0)
		return 0;
	if (in_buf && (size_t)size <= in_cap)
		return (int32_t)addr32(in_buf);
	size_t cap = in_cap ? in_cap : 4096;
	while (cap < (size_t)size)
		cap *= 2;
	free(in_buf);
	in_buf = malloc(cap);
	if (!in_buf) {
		cap = size ? (size_t)size : 1;
		in_buf = malloc(cap);
	}
	in_cap = in_buf ? cap : 0;
	return (int32_t)addr32(in_buf);
}

FH_EXPORT("foldhost_info") int64_t foldhost_info(void) {
	static buf info;
	if (!info.len) {
		const fh_plugin *p = &foldhost_plugin;
		uint32_t nl = (uint32_t)strlen(p->name), vl = (uint32_t)strlen(p->version);
		buf_reserve(&info, 4 + (size_t)nl + 4 + vl + 4);
		buf_bytes(&info, p->name, nl);
		buf_bytes(&info, p->version, vl);
		buf_u32(&info, p->view_schema);
	}
	return pack(info.p, info.len);
}

static int64_t error_output(const char *msg) {
	if (msg)
		fh_fail(msg);
	if (!fail_msg.len)
		fh_fail_bytes("plugin failed", 13);
	out.len = 0;
	buf_reserve(&out, 8 + fail_msg.len);
	buf_u32(&out, STATUS_ERROR);
	buf_bytes(&out, fail_msg.p, (uint32_t)fail_msg.len);
	return pack(out.p, out.len);
}

static void begin_batch(void) {
	arena_reset();
	table_reset();
	out.len = 0;
	buf_reserve(&out, OUT_HEADER);
	out.len = OUT_HEADER;
	out_indexed = OUT_HEADER;
	out_mutations = out_rejected = 0;
	effects.len = 0;
	out_effects = 0;
	rec_update = NULL;
	rec_count = 0;
	effects_for = 0;
	last_update = 0;
	failed = 0;
	fail_msg.len = 0;
}

FH_EXPORT("foldhost_apply") int64_t foldhost_apply(int32_t len) {
	const fh_plugin *pl = &foldhost_plugin;
	begin_batch();
	if (len < 0 || !in_buf || (size_t)len > in_cap)
		return error_output("foldhost: batch length exceeds the input buffer");

	const uint8_t *p = in_buf, *end = in_buf + len;
	if (end - p < 4)
		return error_output("foldhost: malformed batch: truncated count");
	uint32_t count = ld32(p);
	p += 4;
	if ((uint64_t)count * MIN_UPDATE > (uint64_t)(end - p))
		return error_output("foldhost: malformed batch: count cannot fit");

	size_t rsize = pl->record_size ? pl->record_size : 1;
	uint8_t *records = fh_alloc(rsize * (count ? count : 1));
	uint32_t *updates = fh_alloc(sizeof(uint32_t) * (count ? count : 1));
	uint32_t accepted = 0;
	for (uint32_t i = 0; i < count; i++) {
		fh_update u;
		if (end - p < 1 + 8 + 8 + 4)
			return error_output("foldhost: malformed batch: truncated update");
		u.op = p[0];
		u.revision = ld64(p + 1);
		u.time_unix_nano = (int64_t)ld64(p + 9);
		p += 17;
		u.key.len = ld32(p);
		p += 4;
		if ((size_t)(end - p) < (size_t)u.key.len + 4)
			return error_output("foldhost: malformed batch: key past the end");
		u.key.ptr = p;
		p += u.key.len;
		u.value.len = ld32(p);
		p += 4;
		if ((size_t)(end - p) < u.value.len)
			return error_output("foldhost: malformed batch: value past the end");
		u.value.ptr = p;
		p += u.value.len;
		if (u.op < FH_OP_PUT || u.op > FH_OP_PURGE)
			return error_output("foldhost: malformed batch: unknown update op");

		int r = pl->parse(&u, records + (size_t)accepted * rsize);
		if (failed || r == FH_FAIL)
			return error_output(NULL);
		if (r == FH_ACCEPT)
			updates[accepted++] = i;
		else if (r == FH_REJECT)
			out_rejected++;
		else
			return error_output("foldhost: parse returned an unknown result");
	}
	if (p != end)
		return error_output("foldhost: malformed batch: trailing bytes");

	rec_update = updates;
	rec_count = accepted;
	int r = pl->apply(records, accepted);
	if (failed || r != FH_OK)
		return error_output(r == FH_OK || r == FH_FAIL ? NULL
						       : "foldhost: apply returned an unknown result");

	st32(out.p, STATUS_OK);
	st32(out.p + 4, out_rejected);
	st32(out.p + 8, out_mutations);
	if (out_effects) { /* status 2 or 3; without effects the record stays status 0 */
		buf_reserve(&out, 4 + effects.len);
		st32(out.p, effects_for == 2 ? STATUS_OK_UPDATE_EFFECTS : STATUS_OK_EFFECTS);
		buf_u32(&out, out_effects);
		if (effects.len)
			memcpy(out.p + out.len, effects.p, effects.len);
		out.len += effects.len;
	}
	return pack(out.p, out.len);
}

/* ---- queries (ABI minor 2) ---- */

void fh_answer(const void *p, uint32_t len) {
	buf_reserve(&answer, len);
	if (len)
		memcpy(answer.p + answer.len, p, len);
	answer.len += len;
}

void fh_answers(const char *s) { fh_answer(s, (uint32_t)strlen(s)); }

int fh_range_view(const void *start, uint32_t start_len, const void *end, uint32_t end_len,
		  uint32_t limit, int reverse, fh_range *res) {
	res->items = NULL;
	res->count = 0;
	res->more = 0;
	if (!in_query)
		return fh_fail("foldhost: fh_range_view outside a query");
	if (limit == 0)
		return failed ? FH_FAIL : FH_OK;
	req.len = 0;
	buf_reserve(&req, 1 + 4 + 4 + (size_t)start_len + 4 + (size_t)end_len);
	buf_u8(&req, reverse ? 1 : 0);
	buf_u32(&req, limit);
	buf_bytes(&req, start, start_len);
	buf_bytes(&req, end, end_len);
	int32_t n = fh_host_range(FH_SPACE_VIEW, (int32_t)addr32(req.p), (int32_t)req.len);
	if (n < 0)
		return fh_fail("foldhost: the host refused a range request");
	uint8_t *resp = fh_alloc(n ? (size_t)n : 1);
	fh_host_read_result((int32_t)addr32(resp));
	size_t off = 0, total = (size_t)n;
	if (total < 5 || resp[0] > 1)
		goto malformed;
	int more = resp[0];
	uint32_t count = ld32(resp + 1);
	off = 5;
	if ((uint64_t)count * 8 > total - off)
		goto malformed;
	fh_kv *items = fh_alloc((count ? count : 1) * sizeof *items);
	for (uint32_t i = 0; i < count; i++) {
		fh_bytes *f[2] = {&items[i].key, &items[i].value};
		for (int j = 0; j < 2; j++) {
			if (total - off < 4)
				goto malformed;
			uint32_t len = ld32(resp + off);
			off += 4;
			if (total - off < len)
				goto malformed;
			f[j]->ptr = resp + off;
			f[j]->len = len;
			off += len;
		}
	}
	if (off != total)
		goto malformed;
	res->items = items;
	res->count = count;
	res->more = more;
	return failed ? FH_FAIL : FH_OK;
malformed:
	return fh_fail("foldhost: malformed range answer from the host");
}

int fh_prefix_view(const void *prefix, uint32_t prefix_len, uint32_t limit, int reverse, fh_range *res) {
	/* The end is the smallest key after every key with the prefix: trailing
	 * 0xff bytes dropped, the last other byte incremented; none (all 0xff,
	 * or no prefix): no upper bound. */
	uint8_t *end = fh_alloc(prefix_len ? prefix_len : 1);
	uint32_t end_len = prefix_len;
	if (prefix_len)
		memcpy(end, prefix, prefix_len);
	while (end_len && end[end_len - 1] == 0xff)
		end_len--;
	if (end_len)
		end[end_len - 1]++;
	return fh_range_view(prefix, prefix_len, end, end_len, limit, reverse, res);
}

/* ---- secondary indexes ---- */

/* index_key builds <index>/<value>/<primary> in the arena. */
static fh_bytes index_key(const char *index, const void *value, uint32_t value_len, const void *primary,
			  uint32_t primary_len) {
	uint32_t il = (uint32_t)strlen(index);
	uint32_t n = il + 1 + value_len + 1 + primary_len;
	uint8_t *k = fh_alloc(n ? n : 1);
	memcpy(k, index, il);
	k[il] = '/';
	if (value_len)
		memcpy(k + il + 1, value, value_len);
	k[il + 1 + value_len] = '/';
	if (primary_len)
		memcpy(k + il + 2 + value_len, primary, primary_len);
	return (fh_bytes){k, n};
}

void fh_index_put(const char *index, const void *value, uint32_t value_len, const void *primary, uint32_t primary_len) {
	fh_bytes k = index_key(index, value, value_len, primary, primary_len);
	fh_put(k.ptr, k.len, "", 0);
}

void fh_index_del(const char *index, const void *value, uint32_t value_len, const void *primary, uint32_t primary_len) {
	fh_bytes k = index_key(index, value, value_len, primary, primary_len);
	fh_delete(k.ptr, k.len);
}

int fh_index_scan(const char *index, const void *value, uint32_t value_len, fh_bytes **primaries, uint32_t *count) {
	*primaries = NULL;
	*count = 0;
	fh_bytes prefix = index_key(index, value, value_len, NULL, 0);
	/* The prefix ends in '/': its end is the prefix with '/' + 1 last. */
	uint8_t *end = fh_alloc(prefix.len);
	memcpy(end, prefix.ptr, prefix.len);
	end[prefix.len - 1]++;
	fh_bytes start = prefix;
	fh_bytes *out = NULL;
	uint32_t n = 0, cap = 0;
	for (;;) {
		fh_range r;
		if (fh_range_view(start.ptr, start.len, end, prefix.len, FH_INDEX_PAGE, 0, &r) != FH_OK)
			return FH_FAIL;
		if (n + r.count > cap) {
			uint32_t c = cap ? cap * 2 : 64;
			while (c < n + r.count)
				c *= 2;
			fh_bytes *grown = fh_alloc(c * sizeof *grown);
			if (n)
				memcpy(grown, out, n * sizeof *grown);
			out = grown;
			cap = c;
		}
		for (uint32_t i = 0; i < r.count; i++)
			out[n++] = (fh_bytes){r.items[i].key.ptr + prefix.len, r.items[i].key.len - prefix.len};
		if (!r.more || r.count == 0)
			break;
		fh_bytes last = r.items[r.count - 1].key;
		uint8_t *next = fh_alloc(last.len + 1);
		memcpy(next, last.ptr, last.len);
		next[last.len] = 0;
		start = (fh_bytes){next, last.len + 1};
	}
	*primaries = out;
	*count = n;
	return FH_OK;
}

int64_t fh_queries_export_(const fh_query *qs, uint32_t n) {
	static buf list;
	if (!list.len) {
		size_t need = 4;
		for (uint32_t i = 0; i < n; i++)
			need += 8 + strlen(qs[i].name) + strlen(qs[i].content_type ? qs[i].content_type : "");
		buf_reserve(&list, need);
		buf_u32(&list, n);
		for (uint32_t i = 0; i < n; i++) {
			const char *ct = qs[i].content_type ? qs[i].content_type : "";
			buf_bytes(&list, qs[i].name, (uint32_t)strlen(qs[i].name));
			buf_bytes(&list, ct, (uint32_t)strlen(ct));
		}
	}
	return pack(list.p, list.len);
}

int64_t fh_query_export_(const fh_query *qs, uint32_t n, int32_t name_len, int32_t input_len) {
	begin_batch();
	answer.len = 0;
	if (name_len < 0 || input_len < 0 || !in_buf || (size_t)name_len + (size_t)input_len > in_cap)
		return error_output("foldhost: query name and input exceed the input buffer");
	const fh_query *q = NULL;
	for (uint32_t i = 0; i < n && !q; i++)
		if (strlen(qs[i].name) == (size_t)name_len && memcmp(qs[i].name, in_buf, (size_t)name_len) == 0)
			q = &qs[i];
	if (!q)
		return error_output("foldhost: no such query");
	in_query = 1;
	int r = q->fn((fh_bytes){in_buf + name_len, (uint32_t)input_len});
	in_query = 0;
	if (failed || r != FH_OK)
		return error_output(r == FH_OK || r == FH_FAIL ? NULL : "foldhost: the query returned an unknown result");
	out.len = 0;
	buf_reserve(&out, 8 + answer.len);
	buf_u32(&out, 0);
	buf_bytes(&out, answer.p, (uint32_t)answer.len);
	return pack(out.p, out.len);
}
