/* query.wasm: queries of every outcome (ABI minor 2), over a plain view: a
 * put of key K with value V sets view K = V, a delete or purge removes it.
 * Queries:
 *
 *   get     the view value of the key the input names; fails "not found"
 *   scan    every view key starting with the input, one per line, read in
 *           ranges of 2 keys (paging on "more")
 *   rscan   the same in reverse, in ranges of 2 keys
 *   trap    writes "query.wasm: about to trap" to stderr, then traps
 *   spin    logs "query.wasm: spinning" (INFO), then never returns (only the
 *           host's deadline or cancellation stops it)
 *   write   calls fh_put (a query cannot write: it fails)
 *   fill    answers as many 'x' bytes as the decimal input says
 *   echo    answers its input (content type text/plain)
 *
 * A put of the key "range-in-apply" calls the range import during apply,
 * past the SDK (which refuses it there itself), with a valid request, and
 * sets view "range-in-apply" to what the host returned, in decimal: -1,
 * as the host refuses range outside a query.
 *
 * A put of a value "to:NAME" also sets view NAME = K: a view key no
 * partition of the bucket's keys owns (the partitioned queries' tests).
 */
#include <stdio.h>
#include <string.h>

#include "foldhost.h"

struct rec {
	uint8_t op;
	fh_bytes key, value;
};

static int parse(const fh_update *u, struct rec *r) {
	r->op = u->op;
	r->key = u->key;
	r->value = u->value;
	return FH_ACCEPT;
}

__attribute__((import_module("foldhost"), import_name("range"))) int32_t host_range(int32_t space, int32_t ptr, int32_t len);

static int range_in_apply(void) {
	/* flags 0, limit 10, start "", end "" */
	static const uint8_t req[] = {0, 10, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
	char num[16];
	int n = snprintf(num, sizeof num, "%d", (int)host_range(0, (int32_t)(uintptr_t)req, (int32_t)sizeof req));
	fh_put("range-in-apply", 14, num, (uint32_t)n);
	return FH_OK;
}

static int apply(struct rec *rs, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		if (rs[i].key.len == 14 && memcmp(rs[i].key.ptr, "range-in-apply", 14) == 0) {
			range_in_apply();
			continue;
		}
		if (rs[i].op == FH_OP_PUT)
			fh_put(rs[i].key.ptr, rs[i].key.len, rs[i].value.ptr, rs[i].value.len);
		else
			fh_delete(rs[i].key.ptr, rs[i].key.len);
		fh_bytes v = rs[i].value;
		if (rs[i].op == FH_OP_PUT && v.len > 3 && memcmp(v.ptr, "to:", 3) == 0)
			fh_put(v.ptr + 3, v.len - 3, rs[i].key.ptr, rs[i].key.len);
	}
	return FH_OK;
}

#ifndef SCHEMA
#define SCHEMA 1 /* query2.wasm: 2, the same views under another view schema */
#endif
FOLDHOST_PLUGIN("testdata-query", "1.0.0", SCHEMA, struct rec, parse, apply);

static int q_get(fh_bytes in) {
	fh_bytes v;
	int r = fh_get_view(in.ptr, in.len, &v);
	if (r < 0)
		return FH_FAIL;
	if (r == 0)
		return fh_fail("not found");
	fh_answer(v.ptr, v.len);
	return FH_OK;
}

static int scan(fh_bytes in, int reverse) {
	/* The prefix's end, as fh_prefix_view computes it; pages move start
	 * (forward) or end (reverse) past the last key answered. */
	fh_range r;
	if (fh_prefix_view(in.ptr, in.len, 2, reverse, &r) != FH_OK)
		return FH_FAIL;
	uint8_t *end = fh_alloc(in.len + 1);
	uint32_t end_len = in.len;
	memcpy(end, in.ptr, in.len);
	while (end_len && end[end_len - 1] == 0xff)
		end_len--;
	if (end_len)
		end[end_len - 1]++;
	fh_bytes lo = in, hi = {end, end_len};
	for (;;) {
		for (uint32_t i = 0; i < r.count; i++) {
			fh_answer(r.items[i].key.ptr, r.items[i].key.len);
			fh_answer("\n", 1);
		}
		if (!r.more)
			return FH_OK;
		fh_bytes last = r.items[r.count - 1].key;
		if (reverse) {
			hi = last;
		} else {
			uint8_t *p = fh_alloc(last.len + 1);
			memcpy(p, last.ptr, last.len);
			p[last.len] = 0;
			lo = (fh_bytes){p, last.len + 1};
		}
		if (fh_range_view(lo.ptr, lo.len, hi.ptr, hi.len, 2, reverse, &r) != FH_OK)
			return FH_FAIL;
	}
}

static int q_scan(fh_bytes in) { return scan(in, 0); }
static int q_rscan(fh_bytes in) { return scan(in, 1); }

static int q_trap(fh_bytes in) {
	(void)in;
	fprintf(stderr, "query.wasm: about to trap\n");
	fflush(stderr);
	__builtin_trap();
}

static volatile int spinning = 1;

static int q_spin(fh_bytes in) {
	(void)in;
	fh_logs(FH_LOG_INFO, "query.wasm: spinning");
	while (spinning)
		;
	return FH_OK;
}

static int q_write(fh_bytes in) {
	fh_put("k", 1, in.ptr, in.len);
	return FH_OK;
}

static int q_fill(fh_bytes in) {
	uint32_t n = 0;
	for (uint32_t i = 0; i < in.len; i++)
		n = n * 10 + (uint32_t)(in.ptr[i] - '0');
	uint8_t chunk[4096];
	memset(chunk, 'x', sizeof chunk);
	while (n) {
		uint32_t k = n < sizeof chunk ? n : (uint32_t)sizeof chunk;
		fh_answer(chunk, k);
		n -= k;
	}
	return FH_OK;
}

static int q_echo(fh_bytes in) {
	fh_answer(in.ptr, in.len);
	return FH_OK;
}

#ifdef BAD_QUERY_NAME
/* query-badname.wasm: a query list the host refuses (a name with a space). */
FOLDHOST_QUERIES({"get", "", q_get}, {"scan", "", q_scan}, {"rscan", "", q_rscan}, {"trap", "", q_trap},
		 {"spin", "", q_spin}, {"write", "", q_write}, {"fill", "", q_fill}, {"bad name", "", q_echo});
#else
FOLDHOST_QUERIES({"get", "", q_get}, {"scan", "text/plain", q_scan}, {"rscan", "text/plain", q_rscan},
		 {"trap", "", q_trap}, {"spin", "", q_spin}, {"write", "", q_write}, {"fill", "", q_fill},
		 {"echo", "text/plain", q_echo});
#endif
