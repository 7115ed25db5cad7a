/* SPDX-License-Identifier: MIT */
/*
 * bench-bootstrap: what authentication costs a world's bootstrap. A world of
 * N ranks (threads of this process, one loop each, over loopback TCP) is
 * created and run until every rank is ready, R times without a secret and R
 * times with one, interleaved; prints each mode's median and p90 in
 * microseconds and the ratio of the medians. A benchmark, not a test: it
 * asserts nothing about time.
 *
 *   tests/bench/bench-bootstrap [--ranks N] [--runs R]     (defaults 4 and 10)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "rk_test.h"

#define MAX_RANKS 16
static const char secret[] = "bench-bootstrap: a secret of 32 bytes or more";

struct rank {
	pthread_t th;
	struct rk_config cfg;
	atomic_int *port;
	atomic_int *nready;
	int n;
	uint64_t t0;		/* when the run began */
	uint64_t t_ready;	/* when this rank's world was ready */
	int ret;
};

static void *rank_main(void *arg)
{
	struct rank *r = arg;
	struct rk_loop *loop = NULL;
	struct rk_world *w = NULL;

	r->ret = rk_test_join(&r->cfg, r->port, r->t0 + 10000000000ull, NULL, NULL, &loop, &w);
	if (!r->ret)
		r->ret = rk_world_wait_ready(w);
	r->t_ready = rk_test_now_ns();
	atomic_fetch_add(r->nready, 1);
	/* stay until every rank is ready, so no BYE ends another's bootstrap */
	while (!r->ret && atomic_load(r->nready) < r->n)
		rk_loop_run(loop, RK_RUN_NOWAIT);
	if (w)
		rk_world_destroy(w);
	if (loop)
		rk_loop_destroy(loop);
	return NULL;
}

/* One bootstrap of @n ranks; the time until the last one was ready, in ns. */
static uint64_t bootstrap(int n, bool auth)
{
	struct rank r[MAX_RANKS];
	atomic_int port = 0, nready = 0;
	uint64_t t0 = rk_test_now_ns(), last = 0;
	int i;

	memset(r, 0, sizeof(r));
	for (i = 0; i < n; i++) {
		rk_config_init(&r[i].cfg);
		r[i].cfg.rank = i;
		r[i].cfg.world_size = n;
		r[i].cfg.session_id = 0x626f6f74ull;
		r[i].cfg.log_level = getenv("BB_DEBUG") ? RK_LOG_DEBUG : RK_LOG_ERROR;
		r[i].cfg.wait.mode = RK_WAIT_ADAPTIVE;
		if (auth && rk_config_set_secret(&r[i].cfg, secret, sizeof(secret) - 1)) {
			fprintf(stderr, "bench-bootstrap: cannot set the secret\n");
			exit(1);
		}
		r[i].port = &port;
		r[i].nready = &nready;
		r[i].n = n;
		r[i].t0 = t0;
	}
	for (i = 0; i < n; i++)
		pthread_create(&r[i].th, NULL, rank_main, &r[i]);
	for (i = 0; i < n; i++) {
		pthread_join(r[i].th, NULL);
		if (r[i].ret) {
			fprintf(stderr, "bench-bootstrap: rank %d: %s\n", i, rk_strerror(r[i].ret));
			exit(1);
		}
		if (r[i].t_ready > last)
			last = r[i].t_ready;
		if (getenv("BB_DEBUG"))
			fprintf(stderr, "rank %d ready after %.1f us\n", i, (r[i].t_ready - t0) / 1e3);
	}
	return last - t0;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	uint64_t t[2][200];
	int n = 4, runs = 10, i, m;

	for (i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--ranks") && i + 1 < argc)
			n = atoi(argv[++i]);
		else if (!strcmp(argv[i], "--runs") && i + 1 < argc)
			runs = atoi(argv[++i]);
		else {
			fprintf(stderr, "usage: bench-bootstrap [--ranks N] [--runs R]\n");
			return 2;
		}
	}
	if (n < 2 || n > MAX_RANKS || runs < 1 || runs > 200) {
		fprintf(stderr, "bench-bootstrap: --ranks 2..%d, --runs 1..200\n", MAX_RANKS);
		return 2;
	}
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_ERROR);
	if (!rk__auth_available()) {
		fprintf(stderr, "bench-bootstrap: built without OpenSSL: nothing to compare\n");
		return 77;
	}
	bootstrap(n, false);	/* warm up: page faults, the first ring */
	bootstrap(n, true);
	for (i = 0; i < runs; i++)	/* interleaved, so drift hits both alike */
		for (m = 0; m < 2; m++)
			t[m][i] = bootstrap(n, m == 1);
	printf("bootstrap of a %d-rank world, loopback TCP, %d runs each, interleaved\n", n, runs);
	printf("%-10s %10s %10s\n", "mode", "p50_us", "p90_us");
	for (m = 0; m < 2; m++) {
		qsort(t[m], (size_t)runs, sizeof(t[m][0]), cmp);
		printf("%-10s %10.1f %10.1f\n", m ? "secret" : "none", t[m][runs / 2] / 1e3,
		       t[m][(runs * 9) / 10 < runs ? (runs * 9) / 10 : runs - 1] / 1e3);
	}
	printf("ratio secret/none (p50): %.3f\n", (double)t[1][runs / 2] / (double)t[0][runs / 2]);
	return 0;
}
