// SPDX-License-Identifier: MIT
/*
 * check_verbs_load: a build with verbs loads and runs where libibverbs is
 * absent, and roce:// says so (rdma/verbs_load.c).
 *
 * This binary links no verbs library itself, so what it sees is what a
 * CPU-only program of librankrt sees:
 * - libibverbs.so.1 is not mapped before the first roce:// use (no DT_NEEDED);
 * - where it loads: every function of the run-time table exists in it, so a
 *   typo in the table cannot wait for an RDMA machine to show, and
 *   rk_rdma_probe() counts devices;
 * - where it does not (tests/hidden-libs.sh runs this binary with it hidden):
 *   rk_rdma_probe() and a roce:// world return -RK_ENOVERBS, with one error
 *   line that names the library, and a tcp:// world of one runs after it.
 * Every case runs in a fresh child (CK_FORK): the loader runs once per process.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <dlfcn.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "verbs_int.h"

#define SONAME "libibverbs.so.1"

static atomic_int g_errs;	/* log lines at warn or error */
static atomic_int g_named;	/* ...that name the library */
static char g_msg[512];		/* the first of them (loop thread only) */

static void log_count(int level, int rank, const char *msg, void *arg)
{
	(void)rank;
	(void)arg;
	if (getenv("CHECK_VERBS_VERBOSE"))
		fprintf(stderr, "    [%d] %s\n", level, msg);
	if (level > RK_LOG_WARN)
		return;
	if (strstr(msg, SONAME))
		atomic_fetch_add(&g_named, 1);
	if (atomic_fetch_add(&g_errs, 1) == 0)
		snprintf(g_msg, sizeof(g_msg), "%s", msg);
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

static bool mapped(void)
{
	void *h = dlopen(SONAME, RTLD_NOW | RTLD_NOLOAD);

	if (h)
		dlclose(h);	/* drops only the reference NOLOAD took */
	return h != NULL;
}

START_TEST(test_nothing_mapped_at_start)
{
	struct rk_config cfg;
	struct rk_loop *loop = NULL;
	struct rk_world *w = NULL;
	atomic_int port = 0;

	ck_assert_msg(!mapped(), SONAME " is mapped before any roce:// use");
	/* nor does a tcp:// world map it */
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_test_join(&cfg, &port, rk_test_now_ns() + 5000000000ull, NULL, NULL,
				      &loop, &w), 0);
	ck_assert_int_eq(rk_world_wait_ready(w), 0);
	ck_assert(!mapped());
	ck_assert_int_eq(rk_world_destroy(w), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
}
END_TEST

START_TEST(test_table)
{
	const char *why = NULL;
	int n;

	ck_assert_msg(rk__verbs_load(&why) == 0, SONAME ": %s", why);
	ck_assert(mapped());
	ck_assert_ptr_nonnull(rk__ibv.wc_status_str);
	ck_assert_str_eq(rk__ibv.wc_status_str(IBV_WC_SUCCESS), "success");
	n = rk_rdma_probe();
	ck_assert_msg(n >= 0 || n == -ENODEV || n == -ENOSYS, "rk_rdma_probe: %d (%s)", n,
		      rk_strerror(n));
	ck_assert_msg(atomic_load(&g_errs) == 0, "unexpected log line: %s", g_msg);
}
END_TEST

START_TEST(test_enoverbs)
{
	struct rk_config cfg;
	struct rk_loop *loop = NULL;
	struct rk_world *w = (void *)&w;
	atomic_int port = 0;

	ck_assert_int_eq(rk_rdma_probe(), -RK_ENOVERBS);
	ck_assert_int_eq(atomic_load(&g_errs), 0);	/* a probe is a question: no log */

	/* a leader of two: a world of one opens no transport */
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 2;
	snprintf(cfg.leader, sizeof(cfg.leader), "roce://127.0.0.1:1?dev=rxe0&gid=1");
	ck_assert_int_eq(rk_loop_create(&cfg, &loop), 0);
	ck_assert_int_eq(rk_world_create(loop, NULL, NULL, &w), -RK_ENOVERBS);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	ck_assert_str_eq(rk_strerror(-RK_ENOVERBS), "RK_ENOVERBS: verbs library not available");
	ck_assert_str_eq(rk_errname(-RK_ENOVERBS), "RK_ENOVERBS");
	ck_assert_int_eq(atomic_load(&g_errs), 1);
	ck_assert_msg(atomic_load(&g_named) == 1, "the error: %s", g_msg);
	ck_assert(!mapped());

	/* tcp:// runs on */
	cfg.world_size = 1;
	ck_assert_int_eq(rk_test_join(&cfg, &port, rk_test_now_ns() + 5000000000ull, NULL, NULL,
				      &loop, &w), 0);
	ck_assert_int_eq(rk_world_wait_ready(w), 0);
	ck_assert_int_eq(rk_world_destroy(w), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
}
END_TEST

/* A TCase of this suite: 30 s a test, no fixture. */
static TCase *tcase(Suite *s, const char *name)
{
	return rk_tcase(s, name, 30, NULL, NULL);
}

int main(void)
{
	Suite *s = suite_create("verbs_load");

	rk_log_set_handler(log_count, NULL);
	tcase_add_test(tcase(s, "start"), test_nothing_mapped_at_start);
	if (loadable(SONAME)) {
		printf("check_verbs_load: %s loads: the -RK_ENOVERBS case is not run\n", SONAME);
		tcase_add_test(tcase(s, "table"), test_table);
	} else {
		tcase_add_test(tcase(s, "enoverbs"), test_enoverbs);
	}
	return rk_check_run(s);
}
