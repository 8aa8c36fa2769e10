/* spin-{init,info,alloc,gc}.wasm: a module that spins in one guest entry
 * other than apply, chosen at build time (-DSPIN_INIT, -DSPIN_INFO,
 * -DSPIN_ALLOC, -DSPIN_GC); every other entry answers at once (apply: an
 * empty ok output). Written without the SDK. The host must end each spin
 * at its call deadline, and a spin in _initialize or foldhost_info must
 * fail the module's trial run in Runtime.Load. */
#include <stdint.h>

static uint8_t buf[4096];
static const uint8_t info[] = {
	12, 0, 0, 0, 't', 'e', 's', 't', 'd', 'a', 't', 'a', '-', 's', 'p', 'n',
	5, 0, 0, 0, '1', '.', '0', '.', '0',
	1, 0, 0, 0,
};
static const uint8_t ok[12]; /* status 0, rejected 0, count 0 */
static volatile uint64_t spins;

static void spin(void) {
	for (;;)
		spins++;
}

#ifdef SPIN_INIT
__attribute__((constructor)) static void init(void) { spin(); }
#endif

__attribute__((export_name("foldhost_abi_v1"))) int32_t abi_v1(void) { return 0; }

__attribute__((export_name("foldhost_alloc"))) int32_t alloc(int32_t size) {
#ifdef SPIN_ALLOC
	spin();
#endif
	return size >= 0 && size <= (int32_t)sizeof buf ? (int32_t)(uintptr_t)buf : 0;
}

__attribute__((export_name("foldhost_info"))) int64_t info_(void) {
#ifdef SPIN_INFO
	spin();
#endif
	return (int64_t)((uint64_t)(uintptr_t)info << 32 | sizeof info);
}

__attribute__((export_name("foldhost_apply"))) int64_t apply(int32_t len) {
	(void)len;
	return (int64_t)((uint64_t)(uintptr_t)ok << 32 | sizeof ok);
}

__attribute__((export_name("foldhost_gc"))) void gc(void) {
#ifdef SPIN_GC
	spin();
#endif
}
