/*
 * foldhost.h: the C guest SDK for the foldhost plugin ABI v1 (abi/ABI.md).
 *
 * A plugin is two callbacks:
 *
 *   parse(update, record)  turns one KV update into a domain record (a
 *                          fixed-size struct the plugin defines), or rejects
 *                          it (malformed or irrelevant; counted, never fatal);
 *   apply(records, n)      turns the batch's accepted records into view
 *                          mutations with fh_put / fh_delete, reading the
 *                          committed fold with batched reads when it needs to.
 *
 * and one definition that names them:
 *
 *   FOLDHOST_PLUGIN("my-plugin", "1.0.0", 1, struct my_record, my_parse, my_apply);
 *
 * foldhost.c provides the ABI exports (foldhost_abi_v1, foldhost_alloc,
 * foldhost_info, foldhost_apply), decodes the batch in place and encodes the
 * output. Build (see README.md):
 *
 *   clang --target=wasm32-wasi -mexec-model=reactor -O2 \
 *       -Wl,--stack-first -Wl,--strip-debug \
 *       -I abi/sdk/c abi/sdk/c/foldhost.c plugin.c -o plugin.wasm
 *
 * Memory: everything the SDK hands out during one foldhost_apply call (update
 * keys and values, read results, fh_alloc memory) stays valid until that call
 * returns, and no longer. The SDK keeps its buffers between batches and does
 * no heap allocation per update in steady state: a per-batch arena is reset at
 * the start of every batch. Running out of memory traps (after a log line),
 * which the host treats as it treats any trap.
 *
 * Errors: a plugin that cannot apply a batch calls fh_fail (from parse or
 * apply) and returns FH_FAIL; the host then commits nothing and shows the
 * message. A trap (__builtin_trap, out-of-bounds access) also fails the batch
 * and costs the instance.
 *
 * Threading: wasm guests are single-threaded; nothing here is reentrant.
 */
#ifndef FOLDHOST_H
#define FOLDHOST_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FOLDHOST_ABI_MAJOR 1
#define FOLDHOST_ABI_MINOR 3

/* Update ops (the batch). */
enum { FH_OP_PUT = 1, FH_OP_DELETE = 2, FH_OP_PURGE = 3 };

/* Read spaces. */
enum { FH_SPACE_VIEW = 0, FH_SPACE_RAW = 1 };

/* Log levels (Go slog levels). */
enum { FH_LOG_DEBUG = -4, FH_LOG_INFO = 0, FH_LOG_WARN = 4, FH_LOG_ERROR = 8 };

/* Results of parse and apply. */
enum { FH_ACCEPT = 0, FH_OK = 0, FH_REJECT = 1, FH_FAIL = -1 };

/* A byte string that aliases SDK-owned memory (see "Memory" above). */
typedef struct fh_bytes {
	const uint8_t *ptr;
	uint32_t len;
} fh_bytes;

/* One update of the batch; key and value alias the input buffer. */
typedef struct fh_update {
	uint8_t op;              /* FH_OP_PUT, FH_OP_DELETE or FH_OP_PURGE */
	uint64_t revision;       /* 0: unknown (a repair's synthetic delete) */
	int64_t time_unix_nano;
	fh_bytes key;
	fh_bytes value;          /* empty for delete and purge */
} fh_update;

/*
 * parse fills *record (record_size bytes, uninitialised) from u and returns
 * FH_ACCEPT, or returns FH_REJECT (the record is dropped, the update counted
 * as rejected), or FH_FAIL after fh_fail (the whole batch fails). The record
 * may keep pointers into u->key / u->value and into fh_alloc memory.
 *
 * apply receives the accepted records in batch order and returns FH_OK, or
 * FH_FAIL after fh_fail.
 */
typedef int (*fh_parse_fn)(const fh_update *u, void *record);
typedef int (*fh_apply_fn)(void *records, uint32_t count);

typedef struct fh_plugin {
	const char *name;
	const char *version;
	uint32_t view_schema;
	uint32_t record_size;
	fh_parse_fn parse;
	fh_apply_fn apply;
} fh_plugin;

/* The plugin defines exactly one, usually with FOLDHOST_PLUGIN. */
extern const fh_plugin foldhost_plugin;

#define FOLDHOST_PLUGIN(name_, version_, view_schema_, record_type_, parse_, apply_) \
	static int fh_parse_trampoline_(const fh_update *u, void *r) {                  \
		return parse_(u, (record_type_ *)r);                                      \
	}                                                                             \
	static int fh_apply_trampoline_(void *rs, uint32_t n) {                         \
		return apply_((record_type_ *)rs, n);                                     \
	}                                                                             \
	const fh_plugin foldhost_plugin = {(name_), (version_), (view_schema_),       \
		(uint32_t)sizeof(record_type_), fh_parse_trampoline_, fh_apply_trampoline_}

/* ---- output (call from apply) ---- */

/* fh_put appends a view put. Key and value are copied; later mutations of
 * the same key win. */
void fh_put(const void *key, uint32_t key_len, const void *value, uint32_t value_len);

/* fh_delete appends a view delete. */
void fh_delete(const void *key, uint32_t key_len);

/* One header of an effect. */
typedef struct fh_header {
	const void *name;
	uint32_t name_len;
	const void *value;
	uint32_t value_len;
} fh_header;

/* fh_emit appends an effect (ABI minor 1): a message the host publishes
 * once this batch is committed, never if it is not, in the order emitted.
 * Everything is copied. A subject or header that abi/ABI.md ("Effects")
 * refuses makes the output malformed: the batch fails. */
void fh_emit(const void *subject, uint32_t subject_len, const fh_header *headers, uint32_t header_count,
	     const void *payload, uint32_t payload_len);

/* fh_emit_for is fh_emit for an effect that derives from one update: the
 * record at index `record` of those apply received (ABI minor 3). Its id is
 * then that update's, whatever the batch around it, so replicas that batch
 * the same updates differently publish it once (README, "Plugin effects").
 * In one batch, either every effect names its record or none does, and the
 * records named must not decrease; otherwise the batch fails. */
void fh_emit_for(uint32_t record, const void *subject, uint32_t subject_len, const fh_header *headers,
		 uint32_t header_count, const void *payload, uint32_t payload_len);

/* fh_fail makes the batch fail with msg (copied; the first call wins) and
 * returns FH_FAIL, so `return fh_fail("...");` reads naturally. */
int fh_fail(const char *msg);
int fh_fail_bytes(const void *msg, uint32_t len);

/* ---- batched reads of the committed fold ----
 *
 * Reads see the fold as committed before this batch, with this batch's own
 * earlier view writes layered on top: a view key the plugin put or deleted
 * earlier in this apply reads back as written (found with the written value,
 * or not found). Prefetch every key you will need first; the first get of a
 * pending key fetches all pending keys of its space in one host call. A get
 * of a key never prefetched costs a host call of its own.
 */
void fh_prefetch_view(const void *key, uint32_t key_len);
void fh_prefetch_raw(const void *key, uint32_t key_len);

/* fh_fetch sends every pending prefetch now (optional). Returns FH_OK or
 * FH_FAIL (the batch has failed). */
int fh_fetch(void);

/* fh_get_view returns 1 (found, *value set), 0 (not found) or FH_FAIL (the
 * host refused the read; the batch has failed). *value stays valid until
 * this apply returns. */
int fh_get_view(const void *key, uint32_t key_len, fh_bytes *value);

/* fh_get_raw reads the raw fold (the KV entry as the host stored it): 1 with
 * its revision and value, 0, or FH_FAIL. Raw entries are never overlaid. */
int fh_get_raw(const void *key, uint32_t key_len, uint64_t *revision, fh_bytes *value);

/* ---- queries (ABI minor 2) ----
 *
 * A plugin may export named, read-only queries: input bytes in, answer bytes
 * out, reading the fold's views (and raw entries) at one snapshot with the
 * gets above and the ranges below. A query cannot write: fh_put, fh_delete
 * and fh_emit fail it. Declare them once, after FOLDHOST_PLUGIN:
 *
 *   static int by_owner(fh_bytes input) { ...; fh_answer(p, n); return FH_OK; }
 *   FOLDHOST_QUERIES({"by_owner", "application/json", by_owner},
 *                    {"count", "", count});
 *
 * A name is 1 to 64 of [A-Za-z0-9_.-]; the content type ("" means
 * application/octet-stream) is what the host's HTTP API answers it with. A
 * query returns FH_OK after fh_answer (the answer is everything appended,
 * possibly nothing), or FH_FAIL after fh_fail (the caller sees the message).
 * input and everything the SDK hands out during the query stay valid until
 * it returns. A plugin without FOLDHOST_QUERIES exports no queries.
 */
typedef int (*fh_query_fn)(fh_bytes input);

typedef struct fh_query {
	const char *name;
	const char *content_type;
	fh_query_fn fn;
} fh_query;

/* fh_answer appends to the query's answer (copied). */
void fh_answer(const void *p, uint32_t len);
void fh_answers(const char *s);

/* One entry of a range: key and value alias SDK memory valid until the
 * query returns. */
typedef struct fh_kv {
	fh_bytes key;
	fh_bytes value;
} fh_kv;

typedef struct fh_range {
	fh_kv *items;
	uint32_t count;
	int more; /* the range holds entries past the last one answered */
} fh_range;

/* fh_range_view reads the view keys k with start <= k < end (end_len 0: no
 * upper bound) at the query's snapshot, at most limit of them, in key order
 * or, with reverse, from the end down. An answer stops early (more set)
 * where it would pass the host's read bound; continue after the last key
 * (its bytes followed by a 0 byte) or, in reverse, before it (the last key
 * as the new end). Returns FH_OK, or FH_FAIL (the query has failed: the
 * host refused it, or it was called outside a query). limit 0 answers
 * nothing. */
int fh_range_view(const void *start, uint32_t start_len, const void *end, uint32_t end_len,
		  uint32_t limit, int reverse, fh_range *res);

/* fh_prefix_view is fh_range_view over the keys starting with prefix. */
int fh_prefix_view(const void *prefix, uint32_t prefix_len, uint32_t limit, int reverse, fh_range *res);

/* ---- secondary indexes ----
 *
 * An index entry is the view key <index>/<value>/<primary> with an empty
 * value (the example router's upstream/<addr>/<host>). apply writes and
 * deletes entries with fh_index_put / fh_index_del; a query lists the
 * primaries of one value with fh_index_scan, one prefix range over
 * <index>/<value>/, paged FH_INDEX_PAGE keys at a time. value must not
 * contain '/' (a value "a/b" would list among value "a"'s primaries);
 * primary may. index is a NUL-terminated name.
 */
#define FH_INDEX_PAGE 1024

void fh_index_put(const char *index, const void *value, uint32_t value_len, const void *primary, uint32_t primary_len);
void fh_index_del(const char *index, const void *value, uint32_t value_len, const void *primary, uint32_t primary_len);

/* fh_index_scan sets *primaries to the primaries of value in index, in key
 * order, at the query's snapshot (*count of them; SDK memory valid until
 * the query returns). Returns FH_OK, or FH_FAIL (the query has failed). */
int fh_index_scan(const char *index, const void *value, uint32_t value_len, fh_bytes **primaries, uint32_t *count);

/* The exports FOLDHOST_QUERIES defines call these. */
int64_t fh_queries_export_(const fh_query *qs, uint32_t n);
int64_t fh_query_export_(const fh_query *qs, uint32_t n, int32_t name_len, int32_t input_len);

#define FOLDHOST_QUERIES(...)                                                                 \
	static const fh_query fh_queries_[] = {__VA_ARGS__};                                    \
	__attribute__((export_name("foldhost_queries"))) int64_t foldhost_queries(void) {        \
		return fh_queries_export_(fh_queries_, sizeof fh_queries_ / sizeof fh_queries_[0]); \
	}                                                                                     \
	__attribute__((export_name("foldhost_query"))) int64_t foldhost_query(int32_t nl, int32_t il) { \
		return fh_query_export_(fh_queries_, sizeof fh_queries_ / sizeof fh_queries_[0], nl, il); \
	}

/* ---- memory and logging ---- */

/* fh_alloc returns n bytes (8-aligned, uninitialised) from the per-batch
 * arena, valid until this apply returns. Never NULL: out of memory traps. */
void *fh_alloc(size_t n);

/* fh_log sends one line to the host log at a slog level. */
void fh_log(int level, const void *msg, uint32_t len);
void fh_logs(int level, const char *msg);

#ifdef __cplusplus
}
#endif

#endif /* FOLDHOST_H */
