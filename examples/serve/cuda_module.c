/* SPDX-License-Identifier: MIT */
/*
 * rk-serve: finding and opening the CUDA backend's module (cuda_module.h).
 * The module is never closed: CUDA and NCCL keep threads and exit handlers.
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <libgen.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_module.h"

/*
 * Where to look, in order (cuda_module_open()): @paths gets up to @max file
 * names. An uninstalled rk-serve is a libtool wrapper that runs .libs/rk-serve
 * (or lt-rk-serve), where libtool also puts the module it built; a static
 * build's rk-serve sits one level up.
 */
static int module_paths(char paths[][PATH_MAX], int max)
{
	const char *env = getenv("RANKRT_SERVE_MODULE_DIR");
	char exe[PATH_MAX];
	ssize_t n;
	int k = 0, len;

	if (env && env[0]) {
		len = snprintf(paths[k], PATH_MAX, "%s/%s", env, CUDA_MODULE_FILE);
		return len < PATH_MAX ? 1 : 0;	/* named: nowhere else */
	}
	n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
	if (n > 0) {
		const char *d, *base;

		exe[n] = '\0';
		d = dirname(exe);
		base = strrchr(d, '/');
		len = snprintf(paths[k], PATH_MAX, "%s/%s%s", d,
			       base && !strcmp(base, "/.libs") ? "" : ".libs/", CUDA_MODULE_FILE);
		if (len < PATH_MAX)
			k++;
	}
	if (k < max) {
		len = snprintf(paths[k], PATH_MAX, "%s/%s", RK_SERVE_PKGLIBDIR, CUDA_MODULE_FILE);
		if (len < PATH_MAX)
			k++;
	}
	return k;
}

const struct cuda_module *cuda_module_open(char *why, size_t cap)
{
	static const struct cuda_module *g_mod;
	char paths[3][PATH_MAX];
	const struct cuda_module *m;
	const char *e;
	void *h = NULL;
	int i, n;

	if (g_mod)
		return g_mod;
	n = module_paths(paths, 3);
	for (i = 0; i < n; i++) {
		if (access(paths[i], F_OK))
			continue;	/* not here: the next place */
		dlerror();
		h = dlopen(paths[i], RTLD_NOW | RTLD_LOCAL);
		if (h)
			break;
		/* there but not loadable: dlerror() names the library missing */
		e = dlerror();
		snprintf(why, cap, "%s", e ? e : paths[i]);
		return NULL;
	}
	if (!h) {
		snprintf(why, cap, "%s not found%s%s (RANKRT_SERVE_MODULE_DIR names its directory)",
			 CUDA_MODULE_FILE, n ? ": looked for " : "", n ? paths[n - 1] : "");
		return NULL;
	}
	dlerror();
	m = dlsym(h, CUDA_MODULE_SYM);
	if (!m) {
		e = dlerror();
		snprintf(why, cap, "%s", e ? e : CUDA_MODULE_SYM);
		return NULL;
	}
	if (m->version != CUDA_MODULE_VERSION || m->size != sizeof(*m)) {
		snprintf(why, cap, "%s: built for another rk-serve (module version %u, size %u)",
			 paths[i], m->version, m->size);
		return NULL;
	}
	g_mod = m;
	return m;
}
