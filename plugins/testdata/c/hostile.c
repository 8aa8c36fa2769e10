/* hostile.wasm: a plugin that tries to make the host hold memory, each
 * update's value saying how (the memory-bound tests). Written without the
 * SDK, so that its output and its reads are exactly what it asks for:
 *
 *   keys N     N view puts of distinct 8-byte keys with empty values
 *   value N    one view put of an N-byte value
 *   key N      one view put of an N-byte key
 *   error N    fail the batch (status 1) with an N-byte message
 *   read N M   M read calls, each asking the raw fold for key "big" N times
 *              and taking the answer with read_result
 *   stderr N   write N bytes to stderr at once
 *   grow       grow memory a page at a time, filling every page, until it
 *              cannot grow; then trap
 *   trap       trap
 *   effects N  N effects (status 2) to subject "e", no headers or payload
 *   effect N   one effect of N bytes in all (subject "e", N-1 payload bytes)
 *   badsubject one effect to subject "a.*" (a wildcard: malformed)
 *
 * Any other value is a view put of the update's key and value. The first
 * command of a batch that fails ends it. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define IMPORT(name) __attribute__((import_module("foldhost"), import_name(name)))
#define EXPORT(name) __attribute__((export_name(name)))

IMPORT("read") int32_t host_read(int32_t space, int32_t ptr, int32_t len);
IMPORT("read_result") void host_read_result(int32_t dst);

static const uint8_t info[] = {
	16, 0, 0, 0, 't', 'e', 's', 't', 'd', 'a', 't', 'a', '-', 'h', 'o', 's', 't', 'i', 'l', 'e',
	5, 0, 0, 0, '1', '.', '0', '.', '0',
	1, 0, 0, 0,
};

static uint8_t *in;
static size_t in_cap;
static uint8_t *out;
static size_t out_cap, out_len;
static uint8_t *res;
static size_t res_cap;

static uint32_t ld32(const uint8_t *p) {
	uint32_t v;
	memcpy(&v, p, 4);
	return v;
}
static void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

static int64_t packed(const void *p, size_t n) { return (int64_t)((uint64_t)(uintptr_t)p << 32 | (uint32_t)n); }

/* reserve makes room for n more output bytes, or traps. */
static void reserve(size_t n) {
	if (out_cap - out_len >= n)
		return;
	size_t need = out_len + n, cap = out_cap * 2 > need ? out_cap * 2 : need;
	uint8_t *p = realloc(out, cap);
	if (!p && cap > need)
		p = realloc(out, cap = need);
	if (!p)
		__builtin_trap();
	out = p;
	out_cap = cap;
}

static void put_str(const void *p, uint32_t n) {
	st32(out + out_len, n);
	memcpy(out + out_len + 4, p, n);
	out_len += 4 + n;
}

/* put appends a view put whose key is k (kn bytes) and value vn bytes of
 * v, or of 'v' when v is NULL. */
static void put(const void *k, uint32_t kn, const void *v, uint32_t vn) {
	reserve(1 + 4 + (size_t)kn + 4 + vn);
	out[out_len++] = 1;
	put_str(k, kn);
	st32(out + out_len, vn);
	if (v)
		memcpy(out + out_len + 4, v, vn);
	else
		memset(out + out_len + 4, 'v', vn);
	out_len += 4 + vn;
}

/* cmd reports whether value (n bytes) is word followed by a space and
 * numbers, parsed into a and b (b: 0 when missing). */
static int cmd(const uint8_t *value, uint32_t n, const char *word, uint32_t *a, uint32_t *b) {
	size_t w = strlen(word);
	if (n < w || memcmp(value, word, w) != 0 || (n > w && value[w] != ' '))
		return 0;
	uint32_t v[2] = {0, 0};
	int i = -1;
	for (uint32_t j = (uint32_t)w; j < n; j++) {
		if (value[j] == ' ') {
			if (i < 1)
				i++;
			continue;
		}
		if (i < 0 || value[j] < '0' || value[j] > '9')
			return 0;
		v[i] = v[i] * 10 + (uint32_t)(value[j] - '0');
	}
	*a = v[0];
	*b = v[1];
	return 1;
}

static int64_t fail(uint32_t n) {
	out_len = 0;
	reserve(8 + (size_t)n);
	st32(out, 1);
	st32(out + 4, n);
	memset(out + 8, 'e', n);
	return packed(out, 8 + (size_t)n);
}

/* readloop makes m read calls of n times the raw key "big". */
static int readloop(uint32_t n, uint32_t m) {
	size_t rn = 4 + (size_t)n * 7;
	uint8_t *req = malloc(rn);
	if (!req)
		__builtin_trap();
	st32(req, n);
	for (uint32_t i = 0; i < n; i++) {
		st32(req + 4 + (size_t)i * 7, 3);
		memcpy(req + 8 + (size_t)i * 7, "big", 3);
	}
	for (uint32_t i = 0; i < m; i++) {
		int32_t got = host_read(1, (int32_t)(uintptr_t)req, (int32_t)rn);
		if (got < 0) {
			free(req);
			return -1;
		}
		if ((size_t)got > res_cap) {
			free(res);
			res = malloc((size_t)got);
			if (!res)
				__builtin_trap();
			res_cap = (size_t)got;
		}
		host_read_result((int32_t)(uintptr_t)res);
	}
	free(req);
	return 0;
}

static void grow(void) {
	for (;;) {
		size_t page = __builtin_wasm_memory_grow(0, 1);
		if (page == (size_t)-1)
			__builtin_trap();
		memset((void *)(page * 65536), 1, 65536);
	}
}

EXPORT("foldhost_abi_v1") int32_t abi_v1(void) { return 0; }

EXPORT("foldhost_alloc") int32_t alloc(int32_t size) {
	if (size < 0)
		return 0;
	if ((size_t)size > in_cap) {
		free(in);
		in = malloc((size_t)size);
		in_cap = in ? (size_t)size : 0;
		if (!in)
			return 0;
	}
	return (int32_t)(uintptr_t)in;
}

EXPORT("foldhost_info") int64_t info_(void) { return packed(info, sizeof info); }

/* effect appends one effect to subject s with an n-byte payload of 'p'. */
static void effect(const char *s, uint32_t sn, uint32_t n) {
	reserve(4 + (size_t)sn + 4 + 4 + n);
	put_str(s, sn);
	st32(out + out_len, 0);
	st32(out + out_len + 4, n);
	memset(out + out_len + 8, 'p', n);
	out_len += 8 + n;
}

EXPORT("foldhost_apply") int64_t apply(int32_t len) {
	(void)len;
	out_len = 0;
	reserve(12);
	out_len = 12;
	uint32_t count = ld32(in), muts = 0;
	uint32_t neff = 0, effsize = 0, bad = 0; /* the effects, after the mutations */
	const uint8_t *p = in + 4;
	for (uint32_t u = 0; u < count; u++) {
		p += 1 + 8 + 8;
		uint32_t kn = ld32(p);
		const uint8_t *k = p + 4;
		p += 4 + kn;
		uint32_t vn = ld32(p);
		const uint8_t *v = p + 4;
		p += 4 + vn;
		uint32_t a, b;
		if (cmd(v, vn, "keys", &a, &b)) {
			reserve((size_t)a * 17);
			for (uint32_t i = 0; i < a; i++) {
				uint8_t key[8] = {'k'};
				for (int j = 7; j > 0; j--)
					key[j] = (uint8_t)('a' + (i >> ((7 - j) * 4) & 15));
				put(key, 8, "", 0);
			}
			muts += a;
		} else if (cmd(v, vn, "value", &a, &b)) {
			put(k, kn, NULL, a);
			muts++;
		} else if (cmd(v, vn, "key", &a, &b)) {
			uint8_t *key = malloc(a ? a : 1);
			if (!key)
				__builtin_trap();
			memset(key, 'k', a);
			put(key, a, "v", 1);
			free(key);
			muts++;
		} else if (cmd(v, vn, "error", &a, &b)) {
			return fail(a);
		} else if (cmd(v, vn, "read", &a, &b)) {
			if (readloop(a, b) < 0)
				return fail(13);
		} else if (cmd(v, vn, "stderr", &a, &b)) {
			uint8_t *m = malloc(a ? a : 1);
			if (!m)
				__builtin_trap();
			memset(m, 'e', a);
			for (uint32_t off = 0; off < a;) {
				ssize_t w = write(2, m + off, a - off);
				if (w <= 0)
					break;
				off += (uint32_t)w;
			}
			free(m);
		} else if (cmd(v, vn, "grow", &a, &b)) {
			grow();
		} else if (cmd(v, vn, "trap", &a, &b)) {
			__builtin_trap();
		} else if (cmd(v, vn, "effects", &a, &b)) {
			neff = a;
		} else if (cmd(v, vn, "effect", &a, &b)) {
			effsize = a ? a : 1;
		} else if (cmd(v, vn, "badsubject", &a, &b)) {
			bad = 1;
		} else {
			put(k, kn, v, vn);
			muts++;
		}
	}
	uint32_t total = neff + (effsize > 0) + bad;
	if (total) {
		reserve(4);
		st32(out + out_len, total);
		out_len += 4;
		for (uint32_t i = 0; i < neff; i++)
			effect("e", 1, 0);
		if (effsize)
			effect("e", 1, effsize - 1);
		if (bad)
			effect("a.*", 3, 0);
	}
	st32(out, total ? 2 : 0);
	st32(out + 4, 0);
	st32(out + 8, muts);
	return packed(out, out_len);
}
