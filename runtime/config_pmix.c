// SPDX-License-Identifier: MIT
/*
 * The leader's address through PMIx (mpirun of Open MPI 4/5, srun --mpi=pmix):
 * rank 0 of the PMIx job posts it, every rank reads it after a fence, and
 * rank and size come from PMIx too.
 *
 * libpmix is opened at run time, as gpu/load.c opens CUDA: librankrt has no
 * DT_NEEDED on it, so a host without it still runs, and this launcher is then
 * skipped. Only the headers are needed at build time; the structures used
 * here (pmix_proc_t, pmix_info_t, pmix_value_t) are the PMIx standard's and
 * keep their layout across libpmix.so.2 (PMIx 3 to 5).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "config_int.h"

#define RK__PMIX_KEY	"rankrt.leader"	/* rank 0's leader address, a string */

#ifdef RK_HAVE_PMIX
#include <dlfcn.h>
#include <pthread.h>
#include <pmix.h>

static const char soname[] = "libpmix.so.2";

/* Filled once under pthread_once, then read-only. */
static struct {
	pmix_status_t (*PMIx_Init)(pmix_proc_t *proc, pmix_info_t info[], size_t ninfo);
	pmix_status_t (*PMIx_Finalize)(const pmix_info_t info[], size_t ninfo);
	pmix_status_t (*PMIx_Put)(pmix_scope_t scope, const char key[], pmix_value_t *val);
	pmix_status_t (*PMIx_Commit)(void);
	pmix_status_t (*PMIx_Fence)(const pmix_proc_t procs[], size_t nprocs,
				    const pmix_info_t info[], size_t ninfo);
	pmix_status_t (*PMIx_Get)(const pmix_proc_t *proc, const char key[],
				  const pmix_info_t info[], size_t ninfo, pmix_value_t **val);
	const char *(*PMIx_Error_string)(pmix_status_t status);
} fns;
static pthread_once_t fns_once = PTHREAD_ONCE_INIT;
static char fns_why[160];	/* why libpmix is not usable, "" when it is */

#define RESOLVE(h, f)									\
	do {										\
		dlerror();								\
		*(void **)&fns.f = dlsym(h, #f);					\
		if (!fns.f) {								\
			snprintf(fns_why, sizeof(fns_why), "%s: no %s", soname, #f);	\
			return;								\
		}									\
	} while (0)

static void fns_load(void)
{
	const char *e;
	void *h;

	/* GLOBAL: libpmix's own plugins resolve its symbols. Never closed:
	 * PMIx keeps a progress thread while initialised. */
	h = dlopen(soname, RTLD_NOW | RTLD_GLOBAL);
	if (!h) {
		e = dlerror();
		snprintf(fns_why, sizeof(fns_why), "%s", e ? e : soname);
		return;
	}
	RESOLVE(h, PMIx_Init);
	RESOLVE(h, PMIx_Finalize);
	RESOLVE(h, PMIx_Put);
	RESOLVE(h, PMIx_Commit);
	RESOLVE(h, PMIx_Fence);
	RESOLVE(h, PMIx_Get);
	RESOLVE(h, PMIx_Error_string);
}

static const char *pmix_str(pmix_status_t st)
{
	const char *s = fns.PMIx_Error_string(st);

	return s ? s : "?";
}

/* One info entry, filled as PMIX_INFO_LOAD would (that macro calls into libpmix). */
static void info_set(pmix_info_t *in, const char *key, pmix_data_type_t type)
{
	memset(in, 0, sizeof(*in));
	snprintf(in->key, sizeof(in->key), "%s", key);
	in->value.type = type;
}

/* A value libpmix allocated for PMIx_Get(): only strings and integers come here. */
static void value_free(pmix_value_t *v)
{
	if (!v)
		return;
	if (v->type == PMIX_STRING)
		free(v->data.string);
	free(v);
}

static int job_size(const pmix_proc_t *me, pmix_info_t *tmo, struct rk__launch_id *id, char *err,
		    size_t errlen)
{
	pmix_proc_t job;
	pmix_value_t *v = NULL;
	pmix_status_t st;
	int ret = 0;

	memset(&job, 0, sizeof(job));
	memcpy(job.nspace, me->nspace, sizeof(job.nspace));
	job.rank = PMIX_RANK_WILDCARD;
	st = fns.PMIx_Get(&job, PMIX_JOB_SIZE, tmo, 1, &v);
	if (st != PMIX_SUCCESS || !v || v->type != PMIX_UINT32 || !v->data.uint32 ||
	    v->data.uint32 > RK__WORLD_MAX) {
		rk__seterr(err, errlen, "PMIx: no job size (PMIx_Get %s: %s)", PMIX_JOB_SIZE,
			   st != PMIX_SUCCESS ? pmix_str(st) : "not an integer in [1, 65536]");
		ret = -RK_ECONFIG;
	} else {
		id->world_size = (int)v->data.uint32;
	}
	value_free(v);
	return ret;
}

/*
 * Rank 0 posts @mine and commits; everyone fences with PMIX_COLLECT_DATA, so
 * that every node's PMIx server holds rank 0's post before any rank passes
 * the fence; the others then read it from their own server. The fence is
 * also why rank 0 may finalise right after it: no later read needs rank 0.
 */
static int exchange(const pmix_proc_t *me, const char *mine, pmix_info_t *tmo,
		    struct rk__launch_id *id, char *err, size_t errlen)
{
	pmix_info_t fence[2];
	pmix_value_t val, *v = NULL;
	pmix_proc_t r0;
	pmix_status_t st;
	int ret = 0;

	if (me->rank == 0) {
		memset(&val, 0, sizeof(val));
		val.type = PMIX_STRING;
		val.data.string = (char *)mine;
		st = fns.PMIx_Put(PMIX_GLOBAL, RK__PMIX_KEY, &val);
		if (st == PMIX_SUCCESS)
			st = fns.PMIx_Commit();
		if (st != PMIX_SUCCESS) {
			rk__seterr(err, errlen, "PMIx: rank 0 cannot post its address: %s",
				   pmix_str(st));
			return -RK_ECONFIG;
		}
	}
	fence[0] = *tmo;
	info_set(&fence[1], PMIX_COLLECT_DATA, PMIX_BOOL);
	fence[1].value.data.flag = true;
	st = fns.PMIx_Fence(NULL, 0, fence, 2);
	if (st != PMIX_SUCCESS) {
		rk__seterr(err, errlen, "PMIx: the fence for rank 0's address failed within "
			   "%d s (RK_CONNECT_TIMEOUT_MS): %s", tmo->value.data.integer,
			   pmix_str(st));
		return -RK_ECONFIG;
	}
	if (me->rank == 0)
		return snprintf(id->leader, sizeof(id->leader), "%s", mine) <
			(int)sizeof(id->leader) ? 0 : -RK_ECONFIG;
	memset(&r0, 0, sizeof(r0));
	memcpy(r0.nspace, me->nspace, sizeof(r0.nspace));
	r0.rank = 0;
	st = fns.PMIx_Get(&r0, RK__PMIX_KEY, tmo, 1, &v);
	if (st != PMIX_SUCCESS || !v || v->type != PMIX_STRING || !v->data.string ||
	    snprintf(id->leader, sizeof(id->leader), "%s", v->data.string) >=
	    (int)sizeof(id->leader)) {
		rk__seterr(err, errlen, "PMIx: no leader address from rank 0 (%s): %s",
			   RK__PMIX_KEY, st != PMIX_SUCCESS ? pmix_str(st) : "not a string");
		ret = -RK_ECONFIG;
	}
	value_free(v);
	return ret;
}

int rk__pmix_exchange(const char *mine, unsigned int timeout_s, struct rk__launch_id *id,
		      char *err, size_t errlen)
{
	pmix_info_t tmo;
	pmix_proc_t me;
	pmix_status_t st;
	int ret;

	pthread_once(&fns_once, fns_load);
	if (fns_why[0]) {
		rk__seterr(err, errlen, "%s", fns_why);
		return -EOPNOTSUPP;
	}
	memset(&me, 0, sizeof(me));
	st = fns.PMIx_Init(&me, NULL, 0);
	if (st != PMIX_SUCCESS) {
		rk__seterr(err, errlen, "PMIx_Init: %s", pmix_str(st));
		return -EOPNOTSUPP;
	}
	if (me.rank > RK__RANK_MAX) {
		rk__seterr(err, errlen, "PMIx: rank %u: not in [0, %d]", me.rank, RK__RANK_MAX);
		ret = -RK_ECONFIG;
		goto out_finalize;
	}
	id->rank = (int)me.rank;
	info_set(&tmo, PMIX_TIMEOUT, PMIX_INT);
	tmo.value.data.integer = timeout_s ? (int)timeout_s : 1;
	ret = job_size(&me, &tmo, id, err, errlen);
	if (!ret)
		ret = exchange(&me, mine, &tmo, id, err, errlen);
out_finalize:
	fns.PMIx_Finalize(NULL, 0);
	return ret;
}

#else /* !RK_HAVE_PMIX */

int rk__pmix_exchange(const char *mine, unsigned int timeout_s, struct rk__launch_id *id,
		      char *err, size_t errlen)
{
	(void)mine;
	(void)timeout_s;
	(void)id;
	rk__seterr(err, errlen, "rankrt was built without PMIx (configure --with-pmix)");
	return -EOPNOTSUPP;
}

#endif /* RK_HAVE_PMIX */
