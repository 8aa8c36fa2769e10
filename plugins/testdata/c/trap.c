/* trap.wasm: parse accepts everything, apply writes a line to stderr and
 * traps (unreachable). For the host's trap handling: the batch fails, the
 * instance is discarded, the stderr line is attached to the error. */
#include <unistd.h>

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
	static const char msg[] = "trap.wasm: about to trap\n";
	write(2, msg, sizeof msg - 1);
	__builtin_trap();
}

FOLDHOST_PLUGIN("testdata-trap", "1.0.0", 1, struct rec, parse, apply);
