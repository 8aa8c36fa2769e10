/* spin.wasm: apply logs "spin.wasm: spinning" (INFO), then never returns.
 * For the host's per-call deadline and its containment of a spinning guest. */
#include "foldhost.h"

struct rec {
	int unused;
};

static int parse(const fh_update *u, struct rec *r) {
	(void)u;
	(void)r;
	return FH_ACCEPT;
}

static volatile uint64_t spins;

static int apply(struct rec *rs, uint32_t n) {
	(void)rs;
	(void)n;
	fh_logs(FH_LOG_INFO, "spin.wasm: spinning");
	for (;;)
		spins++;
	return FH_OK;
}

FOLDHOST_PLUGIN("testdata-spin", "1.0.0", 1, struct rec, parse, apply);
