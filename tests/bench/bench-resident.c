// SPDX-License-Identifier: MIT
/*
 * bench-resident: what resident rounds cost and what they save (issue 18,
 * docs/BENCH.md "Resident rounds"). A benchmark that prints figures; never a
 * test.
 *
 *   tests/bench/bench-resident [pub|gpu|all] [ITERS]     (default all 20000)
 *
 * pub: the leader's extra host time per round boundary, rk_epoch_publish()
 *   of a ROUND payload as the scheduler publishes it (small: 8 streams, one
 *   token each; large: 64 streams with 4 drafts), median and p99 of ITERS
 *   calls, each timed alone (the clock's own cost, measured the same way, is
 *   printed beside it): with no consumer on the CPU (a GPU consumer, or none),
 *   with a consumer thread spinning on the epoch, and with one asleep on its
 *   futex (the publication then includes the wake).
 * gpu (built with CUDA, a device present, else it says why and skips): the
 *   time from "round ready on the host" to "first kernel running", launch
 *   path against resident path, interleaved in one run, p50/p99 over ITERS
 *   of each. Launch: the host reads the clock, launches a kernel that stores
 *   a flag into host-mapped memory, spins on the flag. Resident: the stream
 *   was pre-armed (rk_gpu_epoch_wait() on the registered epoch region, then
 *   the same kernel) and left waiting 200 us; the host reads the clock,
 *   publishes the epoch, spins on the flag. Resident, kernel wait: the same
 *   with a kernel already running that polls the epoch through the mapping
 *   (toy_cuda_k_poll_flag()), then stores the flag. All include the
 *   flag's way back, so their differences are the start's. Also the launch
 *   call's host time.
 * Lines start with "PUB", "GPULAT" or "SKIP" (device-run.sh greps them).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"

#if defined(RK_HAVE_CUDA) && defined(RK_HAVE_NCCL)
#define HAVE_TOY_CUDA 1
#include <cuda_runtime_api.h>
#include "toy_cuda_k.h"
#endif

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* p50 and p99 of @n samples (sorted in place), in us. */
static void pct(uint64_t *v, size_t n, double *p50, double *p99)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	*p50 = (double)v[n / 2] / 1e3;
	*p99 = (double)v[(n * 99) / 100] / 1e3;
}

/* A ROUND payload as the scheduler publishes it. */
static int64_t make_round(uint8_t *buf, size_t cap, uint64_t id, uint32_t n, uint32_t drafts)
{
	struct rk_wire_stream st[64];
	uint32_t tok[64 * 5], i;

	for (i = 0; i < n; i++)
		st[i] = (struct rk_wire_stream){ .stream_id = 100 + i, .position = 1000 + i,
						 .n_tokens = 1, .n_draft = drafts,
						 .top_p = 1.0f };
	for (i = 0; i < n * (1 + drafts); i++)
		tok[i] = i % 256;
	return rk_wire_encode_round(buf, cap, id, st, n, tok);
}

/* ---- publication cost ------------------------------------------------------------ */

enum consumer { C_NONE, C_SPIN, C_SLEEP };

struct pubctx {
	struct rk_epoch *e;
	enum consumer mode;
	uint64_t last;
	atomic_uint_fast64_t seen;
	atomic_bool stop;
};

static void *consume(void *arg)
{
	struct pubctx *c = arg;
	uint32_t kicks = rk_epoch_kicks(c->e);
	uint64_t want = c->last + 1;
	int ret;

	while (!atomic_load(&c->stop)) {
		ret = rk_epoch_wait(c->e, want, c->mode == C_SPIN ? UINT64_MAX : 0, &kicks);
		if (ret < 0)
			continue;
		want = rk_epoch_current(c->e) + 1;
		atomic_store(&c->seen, want - 1);
	}
	return NULL;
}

static int bench_pub(unsigned int iters)
{
	static const char *const cname[] = { "no CPU consumer", "consumer spinning",
					     "consumer asleep (futex wake)" };
	static uint8_t buf[1 << 16];
	uint64_t *t = calloc(iters, sizeof(*t)), *clk = calloc(iters, sizeof(*clk)), t0, t1;
	double p50, p99, c50, c99;
	struct pubctx c;
	pthread_t th;
	unsigned int i, size, mode;
	int64_t len;

	if (!t || !clk)
		return 1;
	for (i = 0; i < iters; i++) {
		t0 = now_ns();
		t1 = now_ns();
		clk[i] = t1 - t0;
	}
	pct(clk, iters, &c50, &c99);
	for (size = 0; size < 2; size++) {
		for (mode = C_NONE; mode <= C_SLEEP; mode++) {
			memset(&c, 0, sizeof(c));
			if (rk_epoch_create(RK_EPOCH_DESC_MAX, &c.e))
				return 1;
			c.mode = (enum consumer)mode;
			atomic_init(&c.seen, 0);
			atomic_init(&c.stop, false);
			if (mode != C_NONE && pthread_create(&th, NULL, consume, &c))
				return 1;
			for (i = 0; i < iters; i++) {
				len = make_round(buf, sizeof(buf), i + 1, size ? 64 : 8, size ? 4 : 0);
				if (mode == C_SLEEP) {
					/* let it fall asleep: the futex, not its spin */
					struct timespec ts = { 0, 100000 };

					nanosleep(&ts, NULL);
				}
				t0 = now_ns();
				rk_epoch_publish(c.e, i + 1, 0, buf, (uint32_t)len);
				t1 = now_ns();
				t[i] = t1 - t0;
				if (mode != C_NONE)
					while (atomic_load(&c.seen) < i + 1)
						;
			}
			if (mode != C_NONE) {
				atomic_store(&c.stop, true);
				rk_epoch_kick(c.e);
				pthread_join(th, NULL);
			}
			rk_epoch_release(c.e);
			pct(t, iters, &p50, &p99);
			printf("PUB %-5s round (%5lld B), %-29s: p50 %.3f us p99 %.3f us "
			       "(clock read: p50 %.3f p99 %.3f us; %u boundaries)\n",
			       size ? "large" : "small", (long long)len, cname[mode], p50, p99, c50,
			       c99, iters);
		}
	}
	free(t);
	free(clk);
	return 0;
}

/* ---- GPU: ready to first kernel ---------------------------------------------------- */

#ifdef HAVE_TOY_CUDA
static int bench_gpu(unsigned int iters)
{
	uint64_t *tl = calloc(iters, sizeof(*tl)), *tr = calloc(iters, sizeof(*tr));
	uint64_t *tc = calloc(iters, sizeof(*tc)), *tk = calloc(iters, sizeof(*tk)), t0, t1, t2;
	volatile uint64_t *flag_h = NULL;
	uint64_t *flag_d = NULL, v = 0;
	struct rk_gpu_epoch *g = NULL;
	struct rk_epoch *e = NULL;
	cudaStream_t st;
	double a50, a99, b50, b99, c50, c99, k50, k99;
	uint8_t *dbase;
	struct timespec pause = { 0, 200000 };
	unsigned int i;
	int ret, n = 0;

	if (!tl || !tr || !tc || !tk)
		return 1;
	if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) {
		printf("SKIP gpu: no CUDA device\n");
		return 0;
	}
	if (cudaSetDevice(0) != cudaSuccess ||
	    cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess ||
	    cudaHostAlloc((void **)&flag_h, sizeof(*flag_h), cudaHostAllocMapped) != cudaSuccess ||
	    cudaHostGetDevicePointer((void **)&flag_d, (void *)flag_h, 0) != cudaSuccess) {
		printf("SKIP gpu: CUDA setup failed\n");
		return 1;
	}
	*flag_h = 0;
	ret = rk_epoch_create(4096, &e);
	if (!ret)
		ret = rk_gpu_epoch_register(e, 0, &g);
	if (ret) {
		printf("SKIP gpu: rk_gpu_epoch_register: %s\n", rk_strerror(ret));
		return 1;
	}
	dbase = rk_gpu_epoch_device_ptr(g);
	/* warm up both paths */
	for (i = 0; i < 100; i++) {
		toy_cuda_k_flag(st, flag_d, ++v);
		while (*flag_h != v)
			;
	}
	for (i = 0; i < iters; i++) {
		/* launch path */
		v++;
		t0 = now_ns();
		toy_cuda_k_flag(st, flag_d, v);
		t1 = now_ns();
		while (*flag_h != v)
			;
		t2 = now_ns();
		tl[i] = t2 - t0;
		tc[i] = t1 - t0;
		/* resident path: pre-armed, waiting */
		v++;
		if (rk_gpu_epoch_wait(g, st, 2 * (uint64_t)i + 1) || toy_cuda_k_flag(st, flag_d, v)) {
			printf("SKIP gpu: pre-arm failed\n");
			return 1;
		}
		nanosleep(&pause, NULL);
		t0 = now_ns();
		rk_epoch_publish(e, 2 * (uint64_t)i + 1, 0, NULL, 0);
		while (*flag_h != v)
			;
		t2 = now_ns();
		tr[i] = t2 - t0;
		/* resident path, kernel wait: a kernel polls the epoch */
		v++;
		if (toy_cuda_k_poll_flag(st, (const uint64_t *)(dbase + RK_EPOCH_OFF_EPOCH),
					 2 * (uint64_t)i + 2, flag_d, v)) {
			printf("SKIP gpu: the polling kernel failed\n");
			return 1;
		}
		nanosleep(&pause, NULL);
		t0 = now_ns();
		rk_epoch_publish(e, 2 * (uint64_t)i + 2, 0, NULL, 0);
		while (*flag_h != v)
			;
		t2 = now_ns();
		tk[i] = t2 - t0;
	}
	cudaStreamSynchronize(st);
	pct(tl, iters, &a50, &a99);
	pct(tr, iters, &b50, &b99);
	pct(tc, iters, &c50, &c99);
	pct(tk, iters, &k50, &k99);
	printf("GPULAT ready->first kernel, launch path:   p50 %.1f us p99 %.1f us (%u)\n", a50,
	       a99, iters);
	printf("GPULAT ready->first kernel, resident path: p50 %.1f us p99 %.1f us (%u)\n", b50,
	       b99, iters);
	printf("GPULAT ready->first kernel, resident, kernel polls: p50 %.1f us p99 %.1f us "
	       "(%u)\n", k50, k99, iters);
	printf("GPULAT the launch call alone (host):       p50 %.1f us p99 %.1f us\n", c50, c99);
	rk_gpu_epoch_unregister(&g);
	rk_epoch_release(e);
	cudaFreeHost((void *)flag_h);
	cudaStreamDestroy(st);
	free(tl);
	free(tr);
	free(tc);
	free(tk);
	return 0;
}
#else
static int bench_gpu(unsigned int iters)
{
	(void)iters;
	printf("SKIP gpu: built without CUDA and NCCL\n");
	return 0;
}
#endif

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "all";
	unsigned int iters = argc > 2 ? (unsigned int)strtoul(argv[2], NULL, 10) : 20000;
	int ret = 0;

	if (!iters)
		iters = 20000;
	if (!strcmp(what, "pub") || !strcmp(what, "all"))
		ret |= bench_pub(iters);
	if (!strcmp(what, "gpu") || !strcmp(what, "all"))
		ret |= bench_gpu(iters < 5000 ? iters : 5000);
	return ret ? EXIT_FAILURE : EXIT_SUCCESS;
}
