/* abi2.wasm: a module of a future ABI major: it exports foldhost_abi_v2 and
 * no foldhost_abi_v1 (otherwise it has the v1 exports, and its apply answers
 * an empty ok output). Written without the SDK. The host must refuse it,
 * naming the version it found. */
#include <stdint.h>

static uint8_t buf[4096];
static const uint8_t info[] = {
	13, 0, 0, 0, 't', 'e', 's', 't', 'd', 'a', 't', 'a', '-', 'a', 'b', 'i', '2',
	5, 0, 0, 0, '2', '.', '0', '.', '0',
	1, 0, 0, 0,
};
static const uint8_t ok[12]; /* status 0, rejected 0, count 0 */

__attribute__((export_name("foldhost_abi_v2"))) int32_t abi_v2(void) { return 0; }

__attribute__((export_name("foldhost_alloc"))) int32_t alloc(int32_t size) {
	return size >= 0 && size <= (int32_t)sizeof buf ? (int32_t)(uintptr_t)buf : 0;
}

__attribute__((export_name("foldhost_info"))) int64_t info_(void) {
	return (int64_t)((uint64_t)(uintptr_t)info << 32 | sizeof info);
}

__attribute__((export_name("foldhost_apply"))) int64_t apply(int32_t len) {
	(void)len;
	return (int64_t)((uint64_t)(uintptr_t)ok << 32 | sizeof ok);
}
