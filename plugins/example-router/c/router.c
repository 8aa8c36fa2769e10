/*
 * example-router, the C build: a routing table from route.<host> keys.
 * The behaviour, byte for byte, is plugins/example-router/SPEC.md; the Go,
 * AssemblyScript and Rust builds produce the same views for the same input
 * (plugins/example-router/fixtures) and the same query answers
 * (TestConformanceRouterQueries).
 *
 * Build: scripts/build-plugins (see abi/sdk/c/README.md for the flags).
 */
#include <stdint.h>
#include <string.h>

#include "foldhost.h"

#define MAX_UPSTREAMS 64
#define MAX_ADDR 255
#define MAX_WEIGHT 1000
/* Unknown values nest at most this deep: top-level members are at depth 1,
 * an upstream object's members at depth 2, each container adds one. */
#define MAX_DEPTH 64

enum { ROUTE_PUT, ROUTE_DELETE };

struct upstream {
	const uint8_t *addr;
	uint32_t addr_len;
	uint32_t weight;
};

struct route {
	int kind;
	fh_bytes host;    /* aliases the update's key */
	fh_bytes hostkey; /* "host/<host>", arena */
	fh_bytes entry;   /* the rendered view value (puts only), arena */
	struct upstream *ups; /* puts only, arena */
	uint32_t n;
};

/* ---- a minimal validating JSON reader ----
 *
 * Enough JSON for the spec, strict on every edge so that the Go, C and
 * AssemblyScript builds agree byte for byte: objects, arrays, strings
 * (escapes validated and skipped), numbers, true/false/null, nesting up to
 * MAX_DEPTH. Known field names match exactly (case-sensitive, unescaped); a
 * repeated known field, or a known field of the wrong type (null included),
 * makes the update malformed. */

typedef struct {
	const uint8_t *p, *end;
} jcur;

static void jws(jcur *c) {
	while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
		c->p++;
}

static int jpeek(jcur *c) { return c->p < c->end ? *c->p : -1; }

static int hexval(uint8_t ch) {
	if (ch >= '0' && ch <= '9')
		return ch - '0';
	if (ch >= 'a' && ch <= 'f')
		return ch - 'a' + 10;
	if (ch >= 'A' && ch <= 'F')
		return ch - 'A' + 10;
	return -1;
}

/* jstring reads a string at c->p (on the opening quote): its raw bytes
 * between the quotes and whether it has escapes. */
static int jstring(jcur *c, const uint8_t **s, uint32_t *n, int *esc) {
	c->p++;
	const uint8_t *start = c->p;
	*esc = 0;
	while (c->p < c->end) {
		uint8_t ch = *c->p;
		if (ch == '"') {
			*s = start;
			*n = (uint32_t)(c->p - start);
			c->p++;
			return 1;
		}
		if (ch < 0x20)
			return 0;
		c->p++;
		if (ch != '\\')
			continue;
		*esc = 1;
		if (c->p >= c->end)
			return 0;
		switch (*c->p++) {
		case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
			break;
		case 'u':
			if (c->end - c->p < 4)
				return 0;
			for (int i = 0; i < 4; i++)
				if (hexval(*c->p++) < 0)
					return 0;
			break;
		default:
			return 0;
		}
	}
	return 0;
}

/* key_is reports whether a raw member name equals name. A name written
 * with escapes never matches a known field (it is skipped as unknown). */
static int key_is(const uint8_t *s, uint32_t n, int esc, const char *name) {
	size_t nl = strlen(name);
	return !esc && n == nl && memcmp(s, name, nl) == 0;
}

/* jnumber reads a JSON number; *plain is set when it is a bare non-negative
 * integer (no sign, fraction or exponent). */
static int jnumber(jcur *c, const uint8_t **s, uint32_t *n, int *plain) {
	const uint8_t *start = c->p;
	*plain = 1;
	if (jpeek(c) == '-') {
		c->p++;
		*plain = 0;
	}
	int ch = jpeek(c);
	if (ch == '0') {
		c->p++;
	} else if (ch >= '1' && ch <= '9') {
		while ((ch = jpeek(c)) >= '0' && ch <= '9')
			c->p++;
	} else {
		return 0;
	}
	if (jpeek(c) == '.') {
		c->p++;
		*plain = 0;
		if (!((ch = jpeek(c)) >= '0' && ch <= '9'))
			return 0;
		while ((ch = jpeek(c)) >= '0' && ch <= '9')
			c->p++;
	}
	if (jpeek(c) == 'e' || jpeek(c) == 'E') {
		c->p++;
		*plain = 0;
		if (jpeek(c) == '+' || jpeek(c) == '-')
			c->p++;
		if (!((ch = jpeek(c)) >= '0' && ch <= '9'))
			return 0;
		while ((ch = jpeek(c)) >= '0' && ch <= '9')
			c->p++;
	}
	*s = start;
	*n = (uint32_t)(c->p - start);
	return 1;
}

static int jliteral(jcur *c, const char *lit) {
	size_t n = strlen(lit);
	if ((size_t)(c->end - c->p) < n || memcmp(c->p, lit, n) != 0)
		return 0;
	c->p += n;
	return 1;
}

/* jmember reads an object member's name and colon. */
static int jmember(jcur *c) {
	const uint8_t *s;
	uint32_t n;
	int esc;
	jws(c);
	if (jpeek(c) != '"' || !jstring(c, &s, &n, &esc))
		return 0;
	jws(c);
	if (jpeek(c) != ':')
		return 0;
	c->p++;
	return 1;
}

/* jscalar reads a string, number or literal. */
static int jscalar(jcur *c) {
	const uint8_t *s;
	uint32_t n;
	int flag;
	switch (jpeek(c)) {
	case '"': return jstring(c, &s, &n, &flag);
	case 't': return jliteral(c, "true");
	case 'f': return jliteral(c, "false");
	case 'n': return jliteral(c, "null");
	default: return jnumber(c, &s, &n, &flag);
	}
}

/* jskip validates and skips one value of any shape at nesting depth
 * `depth`; a value deeper than MAX_DEPTH makes the input malformed. Nesting
 * is tracked on an explicit stack, not the wasm stack. */
static int jskip(jcur *c, uint32_t depth) {
	uint8_t stack[MAX_DEPTH + 1];
	uint32_t open = 0;
	for (;;) {
		if (depth + open > MAX_DEPTH)
			return 0;
		jws(c);
		int ch = jpeek(c);
		if (ch == '{' || ch == '[') {
			c->p++;
			jws(c);
			if (jpeek(c) == (ch == '{' ? '}' : ']')) {
				c->p++;
			} else {
				stack[open++] = (uint8_t)ch;
				if (ch == '{' && !jmember(c))
					return 0;
				continue;
			}
		} else if (!jscalar(c)) {
			return 0;
		}
		/* after a value: a separator, or the ends of containers */
		for (;;) {
			if (open == 0)
				return 1;
			jws(c);
			uint8_t top = stack[open - 1];
			if (jpeek(c) == ',') {
				c->p++;
				if (top == '{' && !jmember(c))
					return 0;
				break;
			}
			if (jpeek(c) != (top == '{' ? '}' : ']'))
				return 0;
			c->p++;
			open--;
		}
	}
}

/* ---- the route entry ---- */

static int valid_addr(const uint8_t *s, uint32_t n) {
	if (n == 0 || n > MAX_ADDR)
		return 0;
	for (uint32_t i = 0; i < n; i++)
		if (s[i] == ',' || s[i] == '=' || s[i] == '/' || s[i] < 0x20)
			return 0;
	return 1;
}

static int parse_upstream(jcur *c, struct upstream *u) {
	const uint8_t *s;
	uint32_t n;
	int esc, plain;
	int have_addr = 0, have_weight = 0;
	u->weight = 1;
	c->p++; /* { */
	jws(c);
	if (jpeek(c) == '}')
		return 0; /* no addr */
	for (;;) {
		if (jpeek(c) != '"' || !jstring(c, &s, &n, &esc))
			return 0;
		int is_addr = key_is(s, n, esc, "addr");
		int is_weight = key_is(s, n, esc, "weight");
		jws(c);
		if (jpeek(c) != ':')
			return 0;
		c->p++;
		jws(c);
		if (is_addr) {
			if (have_addr || jpeek(c) != '"' || !jstring(c, &s, &n, &esc) || esc ||
			    !valid_addr(s, n))
				return 0;
			have_addr = 1;
			u->addr = s;
			u->addr_len = n;
		} else if (is_weight) {
			int ch = jpeek(c);
			if (have_weight || ch < '0' || ch > '9' || !jnumber(c, &s, &n, &plain) || !plain ||
			    n > 4)
				return 0;
			have_weight = 1;
			uint32_t w = 0;
			for (uint32_t i = 0; i < n; i++)
				w = w * 10 + (uint32_t)(s[i] - '0');
			if (w < 1 || w > MAX_WEIGHT)
				return 0;
			u->weight = w;
		} else if (!jskip(c, 2)) {
			return 0;
		}
		jws(c);
		if (jpeek(c) == ',') {
			c->p++;
			jws(c);
			continue;
		}
		if (jpeek(c) == '}') {
			c->p++;
			return have_addr;
		}
		return 0;
	}
}

static int parse_upstreams(jcur *c, struct upstream *ups, uint32_t *count) {
	if (jpeek(c) != '[')
		return 0;
	c->p++;
	uint32_t n = 0;
	for (;;) {
		jws(c);
		if (jpeek(c) != '{' || n == MAX_UPSTREAMS || !parse_upstream(c, &ups[n]))
			return 0; /* also an empty array, a non-object entry, too many */
		n++;
		jws(c);
		if (jpeek(c) == ',') {
			c->p++;
			continue;
		}
		if (jpeek(c) == ']') {
			c->p++;
			*count = n;
			return 1;
		}
		return 0;
	}
}

/* parse_entry parses a route value into ups; 0 if it breaks a rule. */
static int parse_entry(const uint8_t *p, uint32_t len, struct upstream *ups, uint32_t *count) {
	jcur c = {p, p + len};
	const uint8_t *s;
	uint32_t n;
	int esc, have = 0;
	jws(&c);
	if (jpeek(&c) != '{')
		return 0;
	c.p++;
	jws(&c);
	if (jpeek(&c) == '}')
		return 0; /* no upstreams */
	for (;;) {
		if (jpeek(&c) != '"' || !jstring(&c, &s, &n, &esc))
			return 0;
		int is_ups = key_is(s, n, esc, "upstreams");
		jws(&c);
		if (jpeek(&c) != ':')
			return 0;
		c.p++;
		jws(&c);
		if (is_ups) {
			if (have || !parse_upstreams(&c, ups, count))
				return 0;
			have = 1;
		} else if (!jskip(&c, 1)) {
			return 0;
		}
		jws(&c);
		if (jpeek(&c) == ',') {
			c.p++;
			jws(&c);
			continue;
		}
		if (jpeek(&c) == '}') {
			c.p++;
			break;
		}
		return 0;
	}
	jws(&c);
	return have && c.p == c.end;
}

static uint32_t put_uint(uint8_t *dst, uint32_t v) {
	uint8_t tmp[10];
	uint32_t n = 0;
	do {
		tmp[n++] = (uint8_t)('0' + v % 10);
		v /= 10;
	} while (v);
	for (uint32_t i = 0; i < n; i++)
		dst[i] = tmp[n - 1 - i];
	return n;
}

static fh_bytes concat2(const char *a, const uint8_t *b, uint32_t bl) {
	uint32_t al = (uint32_t)strlen(a);
	uint8_t *k = fh_alloc(al + bl);
	memcpy(k, a, al);
	memcpy(k + al, b, bl);
	return (fh_bytes){k, al + bl};
}

static int route_parse(const fh_update *u, struct route *r) {
	static const char prefix[] = "route.";
	const uint32_t pl = sizeof prefix - 1;
	if (u->key.len <= pl || memcmp(u->key.ptr, prefix, pl) != 0)
		return FH_REJECT;
	r->host = (fh_bytes){u->key.ptr + pl, u->key.len - pl};
	r->ups = NULL;
	r->n = 0;
	r->entry = (fh_bytes){NULL, 0};
	if (u->op != FH_OP_PUT) {
		r->kind = ROUTE_DELETE;
	} else {
		struct upstream ups[MAX_UPSTREAMS];
		uint32_t n = 0;
		if (!parse_entry(u->value.ptr, u->value.len, ups, &n))
			return FH_REJECT;
		r->kind = ROUTE_PUT;
		r->ups = fh_alloc(n * sizeof *ups);
		memcpy(r->ups, ups, n * sizeof *ups);
		r->n = n;
		size_t size = 0;
		for (uint32_t i = 0; i < n; i++)
			size += ups[i].addr_len + 1 + 4 + 1;
		uint8_t *v = fh_alloc(size), *w = v;
		for (uint32_t i = 0; i < n; i++) {
			if (i)
				*w++ = ',';
			memcpy(w, ups[i].addr, ups[i].addr_len);
			w += ups[i].addr_len;
			*w++ = '=';
			w += put_uint(w, ups[i].weight);
		}
		r->entry = (fh_bytes){v, (uint32_t)(w - v)};
	}
	r->hostkey = concat2("host/", r->host.ptr, r->host.len);
	return FH_ACCEPT;
}

/* ---- apply ---- */

typedef struct {
	const uint8_t *p;
	uint32_t n;
} addr;

static int addr_in(const addr *set, uint32_t n, const uint8_t *p, uint32_t len) {
	for (uint32_t i = 0; i < n; i++)
		if (set[i].n == len && memcmp(set[i].p, p, len) == 0)
			return 1;
	return 0;
}

/* old_addrs splits a stored entry ("a=1,b=2") into its distinct addrs. */
static uint32_t old_addrs(fh_bytes v, addr **out) {
	uint32_t parts = v.len ? 1 : 0;
	for (uint32_t i = 0; i < v.len; i++)
		parts += v.ptr[i] == ',';
	addr *set = fh_alloc((parts ? parts : 1) * sizeof *set);
	uint32_t n = 0, i = 0;
	while (i < v.len) {
		uint32_t start = i, end;
		while (i < v.len && v.ptr[i] != ',')
			i++;
		end = start;
		while (end < i && v.ptr[end] != '=')
			end++;
		if (!addr_in(set, n, v.ptr + start, end - start))
			set[n++] = (addr){v.ptr + start, end - start};
		i++; /* the comma */
	}
	*out = set;
	return n;
}

/* The reverse index upstream/<addr>/<host>. */
#define UPSTREAM_INDEX "upstream"

/* emit_changed emits the effect of a changed host (SPEC.md, "Effects"),
 * naming the record it derives from: its id is then its update's. */
static void emit_changed(uint32_t record, const struct route *r) {
	static const char subject[] = "route.changed";
	int put = r->kind == ROUTE_PUT;
	fh_header h = {"Route-Op", 8, put ? "put" : "delete", put ? 3 : 6};
	uint8_t *payload = fh_alloc(r->host.len + 1 + r->entry.len);
	memcpy(payload, r->host.ptr, r->host.len);
	payload[r->host.len] = '\n';
	if (r->entry.len)
		memcpy(payload + r->host.len + 1, r->entry.ptr, r->entry.len);
#ifdef PLAIN_EMIT
	/* A test build (plugins/testdata/build/router-c-plain.wasm): effects
	 * that do not name their update, as a plugin of ABI minor 1 or 2 emits
	 * them; the host files them under the batch's highest revision. */
	(void)record;
	fh_emit(subject, sizeof subject - 1, &h, 1, payload, r->host.len + 1 + r->entry.len);
#else
	fh_emit_for(record, subject, sizeof subject - 1, &h, 1, payload, r->host.len + 1 + r->entry.len);
#endif
}

static int route_apply(struct route *rs, uint32_t count) {
	for (uint32_t i = 0; i < count; i++)
		fh_prefetch_view(rs[i].hostkey.ptr, rs[i].hostkey.len);
	for (uint32_t i = 0; i < count; i++) {
		struct route *r = &rs[i];
		fh_bytes prev;
		int found = fh_get_view(r->hostkey.ptr, r->hostkey.len, &prev);
		if (found < 0)
			return FH_FAIL;
		/* Decided before any write: prev may alias the output buffer. */
		int changed = r->kind == ROUTE_PUT ? !found || prev.len != r->entry.len ||
							 memcmp(prev.ptr, r->entry.ptr, prev.len) != 0
						   : found;
		addr *olds = NULL;
		uint32_t nold = found ? old_addrs(prev, &olds) : 0;

		addr news[MAX_UPSTREAMS];
		uint32_t nnew = 0;
		for (uint32_t j = 0; j < r->n; j++)
			if (!addr_in(news, nnew, r->ups[j].addr, r->ups[j].addr_len))
				news[nnew++] = (addr){r->ups[j].addr, r->ups[j].addr_len};

		for (uint32_t j = 0; j < nold; j++)
			if (!addr_in(news, nnew, olds[j].p, olds[j].n))
				fh_index_del(UPSTREAM_INDEX, olds[j].p, olds[j].n, r->host.ptr, r->host.len);
		for (uint32_t j = 0; j < nnew; j++)
			if (!addr_in(olds, nold, news[j].p, news[j].n))
				fh_index_put(UPSTREAM_INDEX, news[j].p, news[j].n, r->host.ptr, r->host.len);
		if (r->kind == ROUTE_PUT)
			fh_put(r->hostkey.ptr, r->hostkey.len, r->entry.ptr, r->entry.len);
		else
			fh_delete(r->hostkey.ptr, r->hostkey.len);
		if (changed)
			emit_changed(i, r);
	}
	return FH_OK;
}

FOLDHOST_PLUGIN("example-router", "1.0.0", 1, struct route, route_parse, route_apply);

/* ---- queries (ABI minor 2; SPEC.md, "Queries") ---- */

/* json_str appends s as a JSON string: '"' and '\' escaped, control
 * characters as \u00XX (a stored addr or host holds none; an input might). */
static void json_str(const uint8_t *s, uint32_t n) {
	static const char hex[] = "0123456789abcdef";
	fh_answer("\"", 1);
	uint32_t run = 0;
	for (uint32_t i = 0; i < n; i++) {
		uint8_t c = s[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		fh_answer(s + run, i - run);
		run = i + 1;
		if (c == '"' || c == '\\') {
			uint8_t e[2] = {'\\', c};
			fh_answer(e, 2);
		} else {
			uint8_t e[6] = {'\\', 'u', '0', '0', (uint8_t)hex[c >> 4], (uint8_t)hex[c & 15]};
			fh_answer(e, 6);
		}
	}
	fh_answer(s + run, n - run);
	fh_answer("\"", 1);
}

/* after returns the smallest key greater than k: k followed by a 0 byte,
 * where the next page of a range starts. */
static fh_bytes after(fh_bytes k) {
	uint8_t *p = fh_alloc(k.len + 1);
	memcpy(p, k.ptr, k.len);
	p[k.len] = 0;
	return (fh_bytes){p, k.len + 1};
}

#define QUERY_PAGE 1024

/* hosts_of_upstream: input an upstream addr; answers
 * {"upstream":"<addr>","hosts":["<host>",...]} in host order, from the
 * reverse index (fh_index_scan: one prefix range over upstream/<addr>/,
 * paged). */
static int hosts_of_upstream(fh_bytes in) {
	if (!valid_addr(in.ptr, in.len))
		return fh_fail("hosts_of_upstream: the input must be an upstream addr (1 to 255 bytes, no ',', '=', '/' or control characters)");
	fh_bytes *hosts;
	uint32_t n;
	if (fh_index_scan(UPSTREAM_INDEX, in.ptr, in.len, &hosts, &n) != FH_OK)
		return FH_FAIL;
	fh_answers("{\"upstream\":");
	json_str(in.ptr, in.len);
	fh_answers(",\"hosts\":[");
	for (uint32_t i = 0; i < n; i++) {
		if (i)
			fh_answer(",", 1);
		json_str(hosts[i].ptr, hosts[i].len);
	}
	fh_answers("]}");
	return FH_OK;
}

struct ranked {
	const uint8_t *addr;
	uint32_t addr_len, hosts;
};

/* rank_insert keeps top[0..*n) (at most max) ordered by hosts descending;
 * addrs come in ascending order, so a tie keeps the earlier (smaller) addr
 * first. */
static void rank_insert(struct ranked *top, uint32_t *n, uint32_t max, struct ranked c) {
	uint32_t i = *n;
	if (i == max) {
		if (top[max - 1].hosts >= c.hosts)
			return;
		i = max - 1;
	} else {
		(*n)++;
	}
	while (i > 0 && top[i - 1].hosts < c.hosts) {
		top[i] = top[i - 1];
		i--;
	}
	top[i] = c;
}

/* top_upstreams: input n, a decimal 1..1000 (empty: 10); answers the n
 * upstreams serving the most hosts, [{"addr":"<addr>","hosts":<count>},...],
 * most first, ties in addr order, from one range over upstream/, paged. */
static int top_upstreams(fh_bytes in) {
	uint32_t max = 10;
	if (in.len) {
		if (in.len > 4)
			return fh_fail("top_upstreams: the input must be a count from 1 to 1000");
		max = 0;
		for (uint32_t i = 0; i < in.len; i++) {
			if (in.ptr[i] < '0' || in.ptr[i] > '9')
				return fh_fail("top_upstreams: the input must be a count from 1 to 1000");
			max = max * 10 + (uint32_t)(in.ptr[i] - '0');
		}
		if (max < 1 || max > 1000)
			return fh_fail("top_upstreams: the input must be a count from 1 to 1000");
	}
	struct ranked *top = fh_alloc(max * sizeof *top);
	uint32_t ntop = 0;
	struct ranked cur = {NULL, 0, 0};
	static const char prefix[] = "upstream/";
	const uint32_t pl = sizeof prefix - 1;
	fh_bytes start = {(const uint8_t *)prefix, pl};
	static const char end[] = "upstream0"; /* '/' + 1 */
	for (;;) {
		fh_range r;
		if (fh_range_view(start.ptr, start.len, end, pl, QUERY_PAGE, 0, &r) != FH_OK)
			return FH_FAIL;
		for (uint32_t i = 0; i < r.count; i++) {
			const uint8_t *a = r.items[i].key.ptr + pl;
			uint32_t rest = r.items[i].key.len - pl, al = 0;
			while (al < rest && a[al] != '/')
				al++;
			if (cur.addr && cur.addr_len == al && memcmp(cur.addr, a, al) == 0) {
				cur.hosts++;
				continue;
			}
			if (cur.addr)
				rank_insert(top, &ntop, max, cur);
			cur = (struct ranked){a, al, 1}; /* a lives until the query returns */
		}
		if (!r.more || r.count == 0)
			break;
		start = after(r.items[r.count - 1].key);
	}
	if (cur.addr)
		rank_insert(top, &ntop, max, cur);
	fh_answer("[", 1);
	for (uint32_t i = 0; i < ntop; i++) {
		uint8_t num[10];
		if (i)
			fh_answer(",", 1);
		fh_answers("{\"addr\":");
		json_str(top[i].addr, top[i].addr_len);
		fh_answers(",\"hosts\":");
		fh_answer(num, put_uint(num, top[i].hosts));
		fh_answer("}", 1);
	}
	fh_answer("]", 1);
	return FH_OK;
}

FOLDHOST_QUERIES({"hosts_of_upstream", "application/json", hosts_of_upstream},
		 {"top_upstreams", "application/json", top_upstreams});
