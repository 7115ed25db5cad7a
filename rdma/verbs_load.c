/* SPDX-License-Identifier: MIT */
/*
 * Run-time loading of libibverbs. Built only with verbs.
 *
 * librankrt has no DT_NEEDED entry on libibverbs: only roce:// needs it, so a
 * build made where rdma-core exists loads, and runs tcp:// and shm://, on a
 * host without it (as NCCL's ibvwrap and UCX do). It is opened by soname at
 * the first roce:// address or rk_rdma_probe(), so the dynamic loader's usual
 * search applies and a program that links libibverbs itself shares that copy.
 * It is never closed: its providers keep state of their own for the process.
 */
#include "config.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>

#include "rk_common.h"
#include "verbs_int.h"

#define VERBS_SONAME "libibverbs.so.1"

/* Filled once under pthread_once, then read-only: the rare justified globals. */
struct rk__ibv_fns rk__ibv;
static int g_ret;
static char g_why[256];
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static void why_set(const char *fallback)
{
	const char *e = dlerror();

	snprintf(g_why, sizeof(g_why), "%s", e ? e : fallback);
}

/* *@slot = dlsym(@h, @name): POSIX converts dlsym's void * to a function pointer. */
static int resolve(void *h, const char *name, void **slot)
{
	dlerror();
	*slot = dlsym(h, name);
	if (*slot)
		return 0;
	why_set(name);
	return -RK_ENOVERBS;
}

#define RESOLVE_IBV(f)								\
	if (resolve(h, "ibv_" #f, (void **)&rk__ibv.f))				\
		goto fail;

static void load_once(void)
{
	void *h;

	dlerror();
	h = dlopen(VERBS_SONAME, RTLD_NOW | RTLD_LOCAL);
	if (!h) {
		why_set(VERBS_SONAME);
		g_ret = -RK_ENOVERBS;
		return;
	}
	RK__IBV_FNS(RESOLVE_IBV)
	return;		/* @h is never closed (see the top) */
fail:
	/* a partly filled table is never used: every caller checks the result */
	g_ret = -RK_ENOVERBS;
}

int rk__verbs_load(const char **why)
{
	pthread_once(&g_once, load_once);
	if (why)
		*why = g_why;
	return g_ret;
}
