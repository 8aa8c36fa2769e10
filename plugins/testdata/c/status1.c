/* status1.wasm: apply reports a plugin error (a status-1 output with the
 * message "deliberate failure"); the host commits nothing. */
#include "foldhost.h"

struct rec {
	int unused;
};

static int parse(const fh_update *u, struct rec *r) {
	(void)u;
	(void)r;
	return FH_ACCEPT;
}

static int apply(struct rec *rs, uint32_t n) {
	(void)rs;
	(void)n;
	return fh_fail("deliberate failure");
}

FOLDHOST_PLUGIN("testdata-status1", "1.0.0", 1, struct rec, parse, apply);
