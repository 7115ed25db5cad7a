// SPDX-License-Identifier: MIT
/*
 * check_gpu_load: a build with CUDA (and NCCL) loads and runs where they are
 * absent, and its GPU entry points say so (gpu/load.c, docs/GPU.md).
 *
 * Unlike check_gpu, this binary links no CUDA or NCCL library itself, so what
 * it sees is what a CPU-only program of librankrt sees:
 * - no GPU library is mapped before the first GPU call (no DT_NEEDED entry);
 * - every symbol of the run-time tables exists in the libraries this host has
 *   (libcudart.so.<major>, libnccl.so.2: a case per library found), so a typo
 *   in a table cannot wait for a GPU machine to show;
 * - without the driver (libcuda.so.1, this build host): rk_gpu_probe(),
 *   rk_gpu_notifier_create() and rk_nccl_create() return -RK_ENOGPU (the
 *   latter its stub's -EOPNOTSUPP in a build without NCCL), also from threads
 *   racing to the first load, with one warning that names libcuda.so.1; the
 *   loop and a one-rank world run as usual after it;
 * - with the driver: rk_gpu_probe() counts devices (or says -ENODEV) and
 *   warns about nothing.
 * Every case runs in a fresh child (CK_FORK): the loaders run once per process.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "gpu_int.h"

#define THREADS 8

/* rk_nccl_create() without NCCL: the library's absence, or the stub's answer */
#ifdef RK_HAVE_NCCL
#define NCCL_ABSENT (-RK_ENOGPU)
#else
#define NCCL_ABSENT (-EOPNOTSUPP)
#endif

static atomic_int g_warns;		/* log lines at warn or error */
static atomic_int g_driver_named;	/* ...that name libcuda.so.1 */
static pthread_mutex_t g_msg_lock = PTHREAD_MUTEX_INITIALIZER;
static char g_msg[512];			/* the first of them */

static void log_count(int level, int rank, const char *msg, void *arg)
{
	(void)rank;
	(void)arg;
	if (getenv("CHECK_GPU_VERBOSE"))
		fprintf(stderr, "    [%d] %s\n", level, msg);
	if (level > RK_LOG_WARN)
		return;
	if (strstr(msg, rk__gpu_soname(RK__GPU_LIB_DRIVER)))
		atomic_fetch_add(&g_driver_named, 1);
	pthread_mutex_lock(&g_msg_lock);
	if (atomic_fetch_add(&g_warns, 1) == 0)
		snprintf(g_msg, sizeof(g_msg), "%s", msg);
	pthread_mutex_unlock(&g_msg_lock);
}

/* Whether @soname loads in a fresh process (a child, so this one stays clean). */
static bool loadable(const char *soname)
{
	pid_t pid = fork();
	int st;

	if (pid < 0)
		return false;
	if (!pid)
		_exit(dlopen(soname, RTLD_NOW | RTLD_LOCAL) ? 0 : 1);
	return waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

static bool mapped(enum rk__gpu_lib lib)
{
	void *h = dlopen(rk__gpu_soname(lib), RTLD_NOW | RTLD_NOLOAD);

	if (h)
		dlclose(h);	/* drops only the reference NOLOAD took */
	return h != NULL;
}

START_TEST(test_nothing_mapped_at_start)
{
	int lib;

	for (lib = 0; lib < RK__GPU_LIB__COUNT; lib++)
		ck_assert_msg(!mapped(lib), "%s is mapped before any GPU call",
			      rk__gpu_soname(lib));
}
END_TEST

static void check_table(enum rk__gpu_lib lib)
{
	char why[256] = "";

	ck_assert_msg(rk__gpu_dl_open(lib, why, sizeof(why)) == 0, "%s: %s",
		      rk__gpu_soname(lib), why);
}

START_TEST(test_cudart_table)
{
	check_table(RK__GPU_LIB_CUDART);
	ck_assert_ptr_nonnull(rk__cudart.cudaLaunchHostFunc);
	ck_assert_str_eq(rk__cudart.cudaGetErrorName(cudaErrorInvalidValue),
			 "cudaErrorInvalidValue");
}
END_TEST

#ifdef RK_HAVE_NCCL
START_TEST(test_nccl_table)
{
	check_table(RK__GPU_LIB_NCCL);
	ck_assert_ptr_nonnull(rk__nccl.ncclCommSplit);
	ck_assert_str_eq(rk__nccl.ncclGetErrorString(ncclSuccess), "no error");
}
END_TEST
#endif

static enum rk_activity done_cb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	(void)n;
	(void)cookie;
	(void)arg;
	return RK_IDLE;
}

static enum rk_activity post_cb(struct rk_post *p)
{
	*(int *)p->data += 1;
	return RK_BUSY;
}

START_TEST(test_enogpu_entry_points)
{
	struct rk_gpu_notifier *gn = (void *)&gn;
	struct rk_nccl *nc = (void *)&nc;
	struct rk_config cfg;
	struct rk_loop *loop = NULL;
	struct rk_world *w = NULL;
	struct rk_post post = { .cb = post_cb };
	atomic_int port = 0;
	int ran = 0;

	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_test_join(&cfg, &port, rk_test_now_ns() + 5000000000ull, NULL, NULL,
				      &loop, &w), 0);
	ck_assert_int_eq(rk_world_wait_ready(w), 0);

	ck_assert_int_eq(rk_gpu_probe(), -RK_ENOGPU);
	ck_assert_int_eq(rk_gpu_probe(), -RK_ENOGPU);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, NULL, RK_GPU_NOTIFY_AUTO, done_cb, NULL, &gn),
			 -RK_ENOGPU);
	ck_assert_ptr_null(gn);
	ck_assert_int_eq(rk_nccl_create(w, 0, NULL, NULL, &nc), NCCL_ABSENT);
	ck_assert_ptr_null(nc);
	ck_assert_str_eq(rk_strerror(-RK_ENOGPU), "RK_ENOGPU: GPU library not available");

	/* one warning, naming the driver, for all of them */
	ck_assert_int_eq(atomic_load(&g_warns), 1);
	ck_assert_msg(atomic_load(&g_driver_named) == 1, "the warning: %s", g_msg);
	ck_assert(!mapped(RK__GPU_LIB_DRIVER));

	/* the CPU paths run on */
	post.data = &ran;
	rk_loop_post(loop, &post);
	while (!ran)
		ck_assert_int_eq(rk_loop_run(loop, RK_RUN_ONCE), 0);
	ck_assert_int_eq(rk_world_destroy(w), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
}
END_TEST

static void *racer(void *arg)
{
	struct rk_gpu_notifier *gn;
	struct rk_nccl *nc;
	int *bad = arg;

	if (rk_gpu_probe() != -RK_ENOGPU)
		(*bad)++;
	if (rk_gpu_notifier_create(NULL, NULL, RK_GPU_NOTIFY_AUTO, NULL, NULL, &gn) != -RK_ENOGPU)
		(*bad)++;
	if (rk_nccl_create(NULL, 0, NULL, NULL, &nc) != NCCL_ABSENT)
		(*bad)++;
	return NULL;
}

START_TEST(test_enogpu_threads)
{
	pthread_t t[THREADS];
	int bad[THREADS] = { 0 }, i;

	for (i = 0; i < THREADS; i++)
		ck_assert_int_eq(pthread_create(&t[i], NULL, racer, &bad[i]), 0);
	for (i = 0; i < THREADS; i++) {
		pthread_join(t[i], NULL);
		ck_assert_msg(!bad[i], "thread %d: %d calls did not fail as expected", i, bad[i]);
	}
	ck_assert_int_eq(atomic_load(&g_warns), 1);
	ck_assert_int_eq(atomic_load(&g_driver_named), 1);
}
END_TEST

START_TEST(test_driver_probe)
{
	int n = rk_gpu_probe();

	ck_assert_msg(n > 0 || n == -ENODEV, "rk_gpu_probe: %d (%s)", n, rk_strerror(n));
	ck_assert_msg(atomic_load(&g_warns) == 0, "unexpected warning: %s", g_msg);
}
END_TEST

/* A TCase of this suite: 30 s a test, no fixture. */
static TCase *tcase(Suite *s, const char *name)
{
	return rk_tcase(s, name, 30, NULL, NULL);
}

int main(void)
{
	bool driver = loadable(rk__gpu_soname(RK__GPU_LIB_DRIVER));
	Suite *s = suite_create("gpu_load");

	rk_log_set_handler(log_count, NULL);
	tcase_add_test(tcase(s, "start"), test_nothing_mapped_at_start);
	if (loadable(rk__gpu_soname(RK__GPU_LIB_CUDART)))
		tcase_add_test(tcase(s, "cudart"), test_cudart_table);
	else
		printf("check_gpu_load: no %s here: its table is not checked\n",
		       rk__gpu_soname(RK__GPU_LIB_CUDART));
#ifdef RK_HAVE_NCCL
	if (loadable(rk__gpu_soname(RK__GPU_LIB_NCCL)))
		tcase_add_test(tcase(s, "nccl"), test_nccl_table);
	else
		printf("check_gpu_load: no %s here: its table is not checked\n",
		       rk__gpu_soname(RK__GPU_LIB_NCCL));
#endif
	if (driver) {
		printf("check_gpu_load: %s loads: the -RK_ENOGPU cases are not run\n",
		       rk__gpu_soname(RK__GPU_LIB_DRIVER));
		tcase_add_test(tcase(s, "driver"), test_driver_probe);
	} else {
		TCase *tc = tcase(s, "enogpu");

		tcase_add_test(tc, test_enogpu_entry_points);
		tcase_add_test(tc, test_enogpu_threads);
	}
	return rk_check_run(s);
}
