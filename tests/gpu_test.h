// SPDX-License-Identifier: MIT
/*
 * Helpers shared by the GPU suites, check_gpu.c (the notifier, NCCL, the
 * latency benchmark) and check_toy_cuda.c (the toy model's CUDA backend): the
 * device count probed in a child, and worlds of rank threads over loopback.
 * Never installed.
 */
#ifndef RK_GPU_TEST_H
#define RK_GPU_TEST_H

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "toy.h"
#include "toy_cuda.h"

#ifdef RK_HAVE_CUDA
#include <cuda.h>
#include <cuda_runtime_api.h>
#endif
#if defined(RK_HAVE_CUDA) && defined(RK_HAVE_NCCL)
#define HAVE_TOY_CUDA 1
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#include "toy_cuda_k.h"
#endif

#define SESSION		0x6770750000000001ull

/* Every GPU suite starts so. */
static inline void gpu_test_setup(void)
{
	/* every GPU run of this project keeps NVLink SHARP off (docs/GPU.md) */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	setenv("NCCL_RUNTIME_CONNECT", "0", 1);	/* rk_nccl_create() warns otherwise */
	rk_log_set_handler(log_quiet, "CHECK_GPU_VERBOSE");
}

#ifdef RK_HAVE_CUDA
/* CUDA devices, probed in a child before any test forks (unused where a suite has no tests) */
static int g_ndev __attribute__((unused));

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

/* Count devices in a child: the parent must not initialise CUDA before forking tests. */
static inline int probe_in_child(void)
{
	int st = 0;
	pid_t pid = fork();

	if (pid < 0)
		return -errno;
	if (!pid) {
		int n = rk_gpu_probe();

		_exit(n > 0 ? (n > 100 ? 100 : n) : 101 + (n == -EOPNOTSUPP));
	}
	if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
		return -ECHILD;
	st = WEXITSTATUS(st);
	return st <= 100 ? st : (st == 102 ? -EOPNOTSUPP : -ENODEV);
}

/* g_ndev, probed in a child. Return: 0, or 77 (said) without a device. */
static inline int gpu_test_probe(void)
{
	g_ndev = probe_in_child();
	if (g_ndev <= 0) {
		printf("SKIP: no CUDA device (%s)\n", rk_strerror(g_ndev));
		return 77;
	}
	return 0;
}

#ifdef RK_HAVE_NCCL
/* ---- worlds of threads over loopback --------------------------------------------- */

struct gworld;

struct grank {
	struct gworld *gw;
	int rank;
	struct rk_loop *loop;
	struct rk_world *w;
	int line, err;		/* where and why it failed; 0 = it did not */
	int peer_errs;
	bool quit;
	int foreign;		/* frames on_frame() got that were not the test's (a
				 * ROUND, ROUND_DONE or NCCL_ID: their modules' own) */
	/* nccl tests */
	struct rk_nccl *nccl;
	int ready_status, ready_calls, error_calls;
	bool abort_on_peer_error;
	uint64_t marks_done;
	/* toy tests */
	struct toy_cuda *b;
	struct rk_sched *sched;
	uint64_t completions;	/* the backend's reports seen (no scheduler) */
	uint64_t done_id;
	int done_status;
	struct toy_cuda_stats stats;
};

#define TSTREAMS	8
#define GEN_MAX		32

struct gstream {
	uint32_t prompt[8], n_prompt, n_gen;
	struct toy_sampling s;
	uint32_t ref[GEN_MAX];
	struct rk_request req;
	uint32_t got[GEN_MAX], n_got;
	int n_done, done_err;
};

struct gworld {
	int size;
	atomic_int port;
	atomic_int stage;	/* test-specific hand-offs between the rank threads */
	int test;		/* which scenario the ranks run */
	enum rk_resident_mode resident;	/* RK_RESIDENT of every rank (0: auto) */
	/* toy */
	struct toy_params p;
	enum rk_gpu_notify_mode mode;
	uint32_t draft_k;
	int nstreams;
	struct gstream s[TSTREAMS];
	uint64_t drafts_proposed;
	struct grank r[2];
};

#define TAG_QUIT 0x71756974u

static inline enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct grank *t = arg;
	struct rk_wire_user u;

	(void)w;
	(void)peer;
	/* the scheduler's frames and the NCCL id go to them, never here */
	if (h->type != RK_FRAME_USER)
		t->foreign++;
	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u) &&
	    u.tag == TAG_QUIT)
		t->quit = true;
	return RK_BUSY;
}

static inline void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct grank *t = arg;

	(void)w;
	(void)rank;
	(void)err;
	t->peer_errs++;
	if (t->abort_on_peer_error) {
		if (t->nccl)
			rk_nccl_abort(t->nccl);
		if (t->b)
			toy_cuda_abort(t->b);
	}
}

static const struct rk_world_ops world_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};

static inline int node_create(struct grank *t, uint64_t deadline)
{
	struct rk_config c;

	rk_config_init(&c);
	c.rank = t->rank;
	c.world_size = t->gw->size;
	c.session_id = SESSION;
	rk__config_tuning(&c)->resident = t->gw->resident;
	c.peer_timeout_ns = 5000 * MS;
	c.connect_timeout_ns = 20000 * MS;
	return rk_test_join(&c, &t->gw->port, deadline, &world_ops, t, &t->loop, &t->w);
}

static inline void node_destroy(struct grank *t)
{
	uint64_t deadline = rk_test_now_ns() + 5000 * MS;
	int ret;

	if (t->w)
		rk_world_destroy(t->w);
	t->w = NULL;
	if (!t->loop)
		return;
	do {
		rk_loop_run(t->loop, RK_RUN_NOWAIT);
		ret = rk_loop_destroy(t->loop);
	} while (ret == -EBUSY && rk_test_now_ns() < deadline);
	if (ret && !t->line) {
		t->line = __LINE__;
		t->err = ret;
	}
	t->loop = NULL;
}

static inline void run_ranks(struct gworld *gw, void *(*fn)(void *))
{
	pthread_t th[2];
	int r;

	atomic_init(&gw->port, 0);
	atomic_init(&gw->stage, 0);
	for (r = 0; r < gw->size; r++) {
		gw->r[r].gw = gw;
		gw->r[r].rank = r;
		ck_assert_int_eq(pthread_create(&th[r], NULL, fn, &gw->r[r]), 0);
	}
	for (r = 0; r < gw->size; r++)
		ck_assert_int_eq(pthread_join(th[r], NULL), 0);
	for (r = 0; r < gw->size; r++)
		ck_assert_msg(!gw->r[r].line, "rank %d failed at line %d: %s", r, gw->r[r].line,
			      rk_errname(gw->r[r].err));
}

static inline void wait_stage(struct gworld *gw, int stage, uint64_t deadline)
{
	while (atomic_load(&gw->stage) < stage && rk_test_now_ns() < deadline)
		usleep(200);
}
#endif /* RK_HAVE_NCCL */
#endif /* RK_HAVE_CUDA */
#endif /* RK_GPU_TEST_H */
