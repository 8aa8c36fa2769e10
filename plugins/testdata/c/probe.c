/* probe.wasm (C) and ../assemblyscript/probe.ts: SDK probes. Each update's
 * key is a command for apply, so a test drives the SDK's writer, batched
 * reads and overlay through the real host and checks the view:
 *
 *   w/<k>      put: view put <k> = value; delete/purge: view delete <k>
 *   pf/<k>     prefetch view key <k>
 *   pfraw/<k>  prefetch raw key <k>
 *   r/<k>      read view key <k>; put got/<i>/<k> = "1"+value or "0"
 *   raw/<k>    read raw key <k>; put rawgot/<i>/<k> = "<rev>:"+value or "0"
 *   log        log the value at info level
 *   stdout     write the value to stdout as it is (C probe only)
 *   stderr     write the value to stderr as it is (C probe only)
 *   emit/<s>   emit an effect to subject <s> with the value as payload
 *   emitfor/<n>/<s>  the same, naming record <n> (one decimal digit) as the
 *              effect's (fh_emit_for)
 *   fail       fail the batch with the value as message (in apply)
 *   parsefail  fail the batch with the value as message (in parse)
 *   reject...  rejected by parse
 *   anything else: accepted, ignored
 *
 * <i> is the record's index in the batch's accepted records. */
#include <string.h>
#include <unistd.h>

#include "foldhost.h"

struct rec {
	uint8_t op;
	fh_bytes key, value;
};

static int has_prefix(fh_bytes b, const char *p) {
	size_t n = strlen(p);
	return b.len >= n && memcmp(b.ptr, p, n) == 0;
}

static int is(fh_bytes b, const char *s) { return b.len == strlen(s) && memcmp(b.ptr, s, b.len) == 0; }

static int parse(const fh_update *u, struct rec *r) {
	if (has_prefix(u->key, "reject"))
		return FH_REJECT;
	if (is(u->key, "parsefail")) {
		fh_fail_bytes(u->value.ptr, u->value.len);
		return FH_FAIL;
	}
	r->op = u->op;
	r->key = u->key;
	r->value = u->value;
	return FH_ACCEPT;
}

static uint32_t put_uint(uint8_t *dst, uint64_t v) {
	uint8_t tmp[20];
	uint32_t n = 0;
	do {
		tmp[n++] = (uint8_t)('0' + v % 10);
		v /= 10;
	} while (v);
	for (uint32_t i = 0; i < n; i++)
		dst[i] = tmp[n - 1 - i];
	return n;
}

/* result puts <prefix><i>/<k> = head + value */
static void result(const char *prefix, uint32_t i, fh_bytes k, const uint8_t *head, uint32_t hl, fh_bytes v) {
	uint32_t pl = (uint32_t)strlen(prefix);
	uint8_t *key = fh_alloc(pl + 10 + 1 + k.len), *w = key;
	memcpy(w, prefix, pl);
	w += pl;
	w += put_uint(w, i);
	*w++ = '/';
	memcpy(w, k.ptr, k.len);
	w += k.len;
	uint8_t *val = fh_alloc(hl + v.len);
	memcpy(val, head, hl);
	memcpy(val + hl, v.ptr, v.len);
	fh_put(key, (uint32_t)(w - key), val, hl + v.len);
}

static fh_bytes rest(fh_bytes b, uint32_t n) { return (fh_bytes){b.ptr + n, b.len - n}; }

static int apply(struct rec *rs, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		struct rec *r = &rs[i];
		fh_bytes v;
		if (has_prefix(r->key, "w/")) {
			fh_bytes k = rest(r->key, 2);
			if (r->op == FH_OP_PUT)
				fh_put(k.ptr, k.len, r->value.ptr, r->value.len);
			else
				fh_delete(k.ptr, k.len);
		} else if (has_prefix(r->key, "pf/")) {
			fh_bytes k = rest(r->key, 3);
			fh_prefetch_view(k.ptr, k.len);
		} else if (has_prefix(r->key, "pfraw/")) {
			fh_bytes k = rest(r->key, 6);
			fh_prefetch_raw(k.ptr, k.len);
		} else if (has_prefix(r->key, "r/")) {
			fh_bytes k = rest(r->key, 2);
			int found = fh_get_view(k.ptr, k.len, &v);
			if (found < 0)
				return FH_FAIL;
			if (found)
				result("got/", i, k, (const uint8_t *)"1", 1, v);
			else
				result("got/", i, k, (const uint8_t *)"0", 1, (fh_bytes){NULL, 0});
		} else if (has_prefix(r->key, "raw/")) {
			fh_bytes k = rest(r->key, 4);
			uint64_t rev = 0;
			int found = fh_get_raw(k.ptr, k.len, &rev, &v);
			if (found < 0)
				return FH_FAIL;
			if (found) {
				uint8_t head[21];
				uint32_t hl = put_uint(head, rev);
				head[hl++] = ':';
				result("rawgot/", i, k, head, hl, v);
			} else {
				result("rawgot/", i, k, (const uint8_t *)"0", 1, (fh_bytes){NULL, 0});
			}
		} else if (is(r->key, "log")) {
			fh_log(FH_LOG_INFO, r->value.ptr, r->value.len);
		} else if (is(r->key, "stdout") || is(r->key, "stderr")) {
			write(is(r->key, "stdout") ? 1 : 2, r->value.ptr, r->value.len);
		} else if (has_prefix(r->key, "emitfor/") && r->key.len > 10) {
			fh_bytes subj = rest(r->key, 10);
			fh_emit_for((uint32_t)(r->key.ptr[8] - '0'), subj.ptr, subj.len, NULL, 0, r->value.ptr, r->value.len);
		} else if (has_prefix(r->key, "emit/")) {
			fh_bytes subj = rest(r->key, 5);
			fh_emit(subj.ptr, subj.len, NULL, 0, r->value.ptr, r->value.len);
		} else if (is(r->key, "fail")) {
			return fh_fail_bytes(r->value.ptr, r->value.len);
		}
	}
	return FH_OK;
}

FOLDHOST_PLUGIN("testdata-probe", "1.0.0", 1, struct rec, parse, apply);
