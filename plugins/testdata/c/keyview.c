/* keyview.wasm: the view is the raw fold under a schema prefix: a put of
 * key K with value V sets view "s<SCHEMA>/K" = V, a delete or purge removes
 * it. Built twice, with -DSCHEMA=1 and -DSCHEMA=2 (keyview1.wasm,
 * keyview2.wasm): two view schemas of one plugin, for the view rebuild
 * tests. A value "trap<SCHEMA>" traps (a module that cannot fold that key).
 * A put of a value "to:NAME" also sets view "s<SCHEMA>/NAME" = K: a view
 * key no partition of the bucket's keys owns (the partitioned reads'
 * tests). Built with -DCOST=N (keyview-costly.wasm), its apply also
 * spins N iterations per update: a plugin whose apply is what costs. */
#include <string.h>

#include "foldhost.h"

#ifndef SCHEMA
#define SCHEMA 1
#endif
#define STR2(x) #x
#define STR(x) STR2(x)

static const char pfx[] = "s" STR(SCHEMA) "/";
static const char bad[] = "trap" STR(SCHEMA);
static const char to[] = "to:";

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

#ifdef COST
static volatile uint32_t burned;
#endif

static int apply(struct rec *rs, uint32_t n) {
	for (uint32_t i = 0; i < n; i++) {
		struct rec *r = &rs[i];
#ifdef COST
		for (uint32_t c = 0; c < COST; c++)
			burned += c;
#endif
		if (r->value.len == sizeof bad - 1 && memcmp(r->value.ptr, bad, r->value.len) == 0)
			__builtin_trap();
		uint32_t kl = (uint32_t)(sizeof pfx - 1) + r->key.len;
		uint8_t *k = fh_alloc(kl);
		memcpy(k, pfx, sizeof pfx - 1);
		memcpy(k + sizeof pfx - 1, r->key.ptr, r->key.len);
		if (r->op == FH_OP_PUT)
			fh_put(k, kl, r->value.ptr, r->value.len);
		else
			fh_delete(k, kl);
		if (r->op == FH_OP_PUT && r->value.len > sizeof to - 1 && memcmp(r->value.ptr, to, sizeof to - 1) == 0) {
			uint32_t nl = r->value.len - (uint32_t)(sizeof to - 1);
			uint32_t vl = (uint32_t)(sizeof pfx - 1) + nl;
			uint8_t *v = fh_alloc(vl);
			memcpy(v, pfx, sizeof pfx - 1);
			memcpy(v + sizeof pfx - 1, r->value.ptr + sizeof to - 1, nl);
			fh_put(v, vl, r->key.ptr, r->key.len);
		}
	}
	return FH_OK;
}

FOLDHOST_PLUGIN("testdata-keyview", "1." STR(SCHEMA), SCHEMA, struct rec, parse, apply);
