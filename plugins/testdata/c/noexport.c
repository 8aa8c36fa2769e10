/* noexport.wasm: speaks ABI v1 but lacks the required foldhost_apply export.
 * Written without the SDK (which always exports apply). The host must refuse
 * it before instantiation. */
#include <stdint.h>

static uint8_t buf[4096];
static const uint8_t info[] = {
	17, 0, 0, 0, 't', 'e', 's', 't', 'd', 'a', 't', 'a', '-', 'n', 'o', 'e', 'x', 'p', 'o', 'r', 't',
	5, 0, 0, 0, '1', '.', '0', '.', '0',
	1, 0, 0, 0,
};

__attribute__((export_name("foldhost_abi_v1"))) int32_t abi_v1(void) { return 0; }

__attribute__((export_name("foldhost_alloc"))) int32_t alloc(int32_t size) {
	return size >= 0 && size <= (int32_t)sizeof buf ? (int32_t)(uintptr_t)buf : 0;
}

__attribute__((export_name("foldhost_info"))) int64_t info_(void) {
	return (int64_t)((uint64_t)(uintptr_t)info << 32 | sizeof info);
}
