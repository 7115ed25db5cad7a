/* SPDX-License-Identifier: MIT */
/*
 * Run-time loading of CUDA and NCCL. Built only with CUDA.
 *
 * librankrt has no DT_NEEDED entry on libcuda, libcudart or libnccl: a build
 * made where CUDA and NCCL exist loads, and runs its CPU paths, on a host
 * without them (as PyTorch and NCCL's own plugins load theirs). The GPU entry
 * points (rk_gpu_probe(), rk_gpu_notifier_create(), rk_nccl_create()) call a
 * loader first; every other GPU call takes an object that only they create.
 *
 * The libraries are opened by versioned soname, so the dynamic loader's usual
 * search applies (LD_LIBRARY_PATH, the ld.so cache), and a program that links
 * them itself shares the very same copy with rankrt (dlopen of a soname that
 * is already loaded returns that object). The runtime's major version is the
 * build's: its ABI is only stable within a major. They are never closed: CUDA
 * and NCCL keep threads and exit handlers of their own.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

#include "gpu_int.h"

_Static_assert(CUDART_VERSION / 1000 == RK_CUDART_MAJOR,
	       "configure's CUDA runtime major is the one of the headers compiled against");

/* Filled once under pthread_once, then read-only: the rare justified globals. */
struct rk__cudart_fns rk__cudart;
#ifdef RK_HAVE_NCCL
struct rk__nccl_fns rk__nccl;
#endif

static const char *const sonames[] = {
	[RK__GPU_LIB_DRIVER] = "libcuda.so.1",
	[RK__GPU_LIB_CUDART] = "libcudart.so." RK__XSTR(RK_CUDART_MAJOR),
#ifdef RK_HAVE_NCCL
	[RK__GPU_LIB_NCCL] = "libnccl.so." RK__XSTR(NCCL_MAJOR),
#endif
};
_Static_assert(sizeof(sonames) / sizeof(sonames[0]) == RK__GPU_LIB__COUNT,
	       "every library needs a soname");

const char *rk__gpu_soname(enum rk__gpu_lib lib)
{
	return (unsigned int)lib < RK__GPU_LIB__COUNT ? sonames[lib] : "?";
}

static void why_set(char *why, size_t cap, const char *fallback)
{
	const char *e = dlerror();

	snprintf(why, cap, "%s", e ? e : fallback);
}

/*
 * *@slot = dlsym(@h, @name). The slot is a function pointer: POSIX has dlsym's
 * void * converted to one through the object's representation (dlsym(3)).
 */
static int resolve(void *h, const char *name, void **slot, char *why, size_t cap)
{
	dlerror();
	*slot = dlsym(h, name);
	if (*slot)
		return 0;
	why_set(why, cap, name);
	return -RK_ENOGPU;
}

#define RESOLVE_INTO(table, f)								\
	do {										\
		if (resolve(h, RK__XSTR(f), (void **)&(table).f, why, cap))		\
			return -RK_ENOGPU;						\
	} while (0)
#define RESOLVE_CUDART(f)	RESOLVE_INTO(rk__cudart, f);
#define RESOLVE_NCCL(f)		RESOLVE_INTO(rk__nccl, f);

int rk__gpu_dl_open(enum rk__gpu_lib lib, char *why, size_t cap)
{
	void *h;

	if ((unsigned int)lib >= RK__GPU_LIB__COUNT) {
		snprintf(why, cap, "no such library");
		return -RK_ENOGPU;
	}
	dlerror();
	h = dlopen(sonames[lib], RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		why_set(why, cap, sonames[lib]);
		return -RK_ENOGPU;
	}
	switch (lib) {
	case RK__GPU_LIB_DRIVER:
		break;		/* present is all we ask: the runtime uses it (same soname) */
	case RK__GPU_LIB_CUDART:
		RK__CUDART_FNS(RESOLVE_CUDART)
		break;
#ifdef RK_HAVE_NCCL
	case RK__GPU_LIB_NCCL:
		RK__NCCL_FNS(RESOLVE_NCCL)
		break;
#endif
	case RK__GPU_LIB__COUNT:
		break;
	}
	return 0;	/* @h is never closed (see the top) */
}

static int g_cuda_ret;
static pthread_once_t g_cuda_once = PTHREAD_ONCE_INIT;

static void cuda_load_once(void)
{
	char why[256];

	if (rk__gpu_dl_open(RK__GPU_LIB_DRIVER, why, sizeof(why)) ||
	    rk__gpu_dl_open(RK__GPU_LIB_CUDART, why, sizeof(why))) {
		/* a partly filled table is never used: every caller checks the result */
		rk__warn(-1, "gpu: CUDA not available (%s): GPU calls fail with RK_ENOGPU", why);
		g_cuda_ret = -RK_ENOGPU;
	}
}

int rk__cuda_load(void)
{
	pthread_once(&g_cuda_once, cuda_load_once);
	return g_cuda_ret;
}

#ifdef RK_HAVE_NCCL
static int g_nccl_ret;
static pthread_once_t g_nccl_once = PTHREAD_ONCE_INIT;

static void nccl_load_once(void)
{
	char why[256];

	g_nccl_ret = rk__cuda_load();
	if (g_nccl_ret)
		return;		/* logged already */
	if (rk__gpu_dl_open(RK__GPU_LIB_NCCL, why, sizeof(why))) {
		rk__warn(-1, "gpu: NCCL not available (%s): NCCL calls fail with RK_ENOGPU", why);
		g_nccl_ret = -RK_ENOGPU;
	}
}

int rk__nccl_load(void)
{
	pthread_once(&g_nccl_once, nccl_load_once);
	return g_nccl_ret;
}
#endif /* RK_HAVE_NCCL */
