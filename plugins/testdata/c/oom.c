/* oom.wasm: apply allocates 1 MiB blocks without bound. When memory cannot
 * grow any further (the host's page limit) malloc returns NULL and the plugin
 * traps, as a language runtime does on out-of-memory. Run it only under a
 * memory limit: without one it takes the whole 4 GiB wasm32 address space. */
#include <stdlib.h>
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

static void *volatile last;

static int apply(struct rec *rs, uint32_t n) {
	(void)rs;
	(void)n;
	for (;;) {
		void *p = malloc(1 << 20);
		if (!p) {
			static const char msg[] = "oom.wasm: out of memory\n";
			write(2, msg, sizeof msg - 1);
			__builtin_trap();
		}
		last = p;
	}
	return FH_OK;
}

FOLDHOST_PLUGIN("testdata-oom", "1.0.0", 1, struct rec, parse, apply);
