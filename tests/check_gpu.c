// SPDX-License-Identifier: MIT
/*
 * check_gpu: the GPU module (docs/GPU.md) and the toy model's CUDA backend.
 *
 * - notifier: every mark delivered exactly once and in order, in all three
 *   modes, with the loop spinning and blocking; results the stream copied into
 *   pinned memory before a mark are visible in its callback; errors (-EAGAIN
 *   when every slot is in flight, -EBUSY, forced destroy, bad arguments).
 * - nccl: the bootstrap over a world of 1 and of 2 ranks (threads, device =
 *   rank % devices; skipped with fewer than 2 GPUs), an int32 allreduce seen
 *   through the notifier, a world failure during the bring-up, and a peer that
 *   leaves while this rank waits inside a collective: rk_nccl_abort() from
 *   peer_error must end the collective.
 * - toy: the CUDA backend against the CPU model: every logit of random rounds
 *   (new streams, drafts, absent streams) at TP1, the golden values, launch
 *   errors; then rk_sched worlds at TP1 and TP2, 1 and 8 streams, plain and
 *   drafted, greedy and sampled, in every notify mode: every token equals
 *   toy_generate_ref() and the TOY.md receipts.
 *
 * Exits 77 without a GPU (probed in a child: CUDA must not be initialised in
 * the parent, whose forks run the tests) or without CUDA in the build.
 * RK_BENCH_GPU_LAT=1 runs the latency benchmark instead (no Check): p50/p99 of
 * an empty kernel's completion seen (a) spinning on a host word, (b) spinning
 * on cudaEventQuery, (c) blocking on a BlockingSync event, (d) through the
 * notifier's fast path in a spinning loop, (e) through its wake path in a
 * blocking loop; it fails when (d) p50 is above RK_BENCH_GPU_MAX_RATIO
 * (default 1.1) times (a) p50.
 *
 * Threads never call Check assertions: they record the failing line and
 * error, and the test body asserts after joining them.
 */
#define _GNU_SOURCE
#include "config.h"

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

#define MS		1000000ull
#define SESSION		0x6770750000000001ull

static void log_quiet(int level, int rank, const char *msg, void *arg)
{
	(void)arg;
	if (getenv("CHECK_GPU_VERBOSE") || level == RK_LOG_ERROR)
		fprintf(stderr, "    [%d] r%d %s\n", level, rank, msg);
}

#ifdef RK_HAVE_CUDA


static int g_ndev;	/* CUDA devices, probed in a child before any test forks */

#define CK_CUDA(call) ck_assert_msg((call) == cudaSuccess, "%s failed", #call)

static uint64_t rng_next(uint64_t *s)
{
	uint64_t z = (*s += 0x9E3779B97F4A7C15ull);

	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* Stream work that takes a while: a kernel sleeping @us (a memset without kernels). */
static cudaError_t busy_work(cudaStream_t s, void *dbuf, size_t cap, uint32_t us)
{
#ifdef HAVE_TOY_CUDA
	(void)dbuf;
	(void)cap;
	return (cudaError_t)toy_cuda_k_sleep(s, (uint64_t)us * 1000);
#else
	size_t n = (size_t)us * 4096;

	return cudaMemsetAsync(dbuf, us & 0xff, n < cap ? n : cap, s);
#endif
}

/* The smallest unit of work: an empty kernel (a 4-byte memset without kernels). */
static cudaError_t empty_work(cudaStream_t s, void *dbuf)
{
#ifdef HAVE_TOY_CUDA
	(void)dbuf;
	return (cudaError_t)toy_cuda_k_empty(s);
#else
	return cudaMemsetAsync(dbuf, 0, 4, s);
#endif
}

static struct rk_loop *make_loop(enum rk_wait_mode mode)
{
	struct rk_config c;
	struct rk_loop *loop = NULL;

	rk_config_init(&c);
	c.wait.mode = mode;
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	return loop;
}

/* Destroy a loop once the notifiers' last posts have drained. */
static void loop_drain_destroy(struct rk_loop *loop)
{
	uint64_t deadline = rk_test_now_ns() + 5000 * MS;
	int ret;

	do {
		rk_loop_run(loop, RK_RUN_NOWAIT);
		ret = rk_loop_destroy(loop);
	} while (ret == -EBUSY && rk_test_now_ns() < deadline);
	ck_assert_int_eq(ret, 0);
}

/* ---- the notifier ------------------------------------------------------------------ */

#define NMARKS		3000
#define RING		64

struct ntest {
	uint64_t expect;	/* index of the next mark */
	uint64_t bad_order, bad_data;
	volatile uint64_t *dst;	/* pinned: what the stream copied before each mark */
	uint64_t last_cookie;
};

static uint64_t cookie_of(uint64_t i)
{
	return i * 7 + 3;
}

static enum rk_activity ncb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct ntest *t = arg;

	(void)n;
	if (cookie != cookie_of(t->expect))
		t->bad_order++;
	/* the D2H copy enqueued before this mark has landed */
	if (t->dst && t->dst[t->expect % RING] != cookie)
		t->bad_data++;
	t->expect++;
	t->last_cookie = cookie;
	return RK_BUSY;
}

static bool run_until(struct rk_loop *loop, uint64_t deadline, const uint64_t *v, uint64_t want)
{
	while (*v < want && rk_test_now_ns() < deadline)
		if (rk_loop_run(loop, RK_RUN_ONCE) < 0)
			break;
	return *v >= want;
}

/* _i: mode = _i % 3 (auto, poll, wake); the loop spins (_i < 3) or blocks. */
START_TEST(test_notify_order)
{
	enum rk_gpu_notify_mode mode = (enum rk_gpu_notify_mode)(_i % 3);
	enum rk_wait_mode wmode = _i < 3 ? RK_WAIT_SPIN : RK_WAIT_BLOCK;
	struct rk_loop *loop = make_loop(wmode);
	struct rk_gpu_notifier *n = NULL;
	struct rk_gpu_notifier_stats st;
	struct rk_loop_stats ls;
	struct ntest t = { 0 };
	uint64_t *src, *dst, rs = 42 + (uint64_t)_i, i, deadline = rk_test_now_ns() + 50000 * MS;
	size_t cap = 16 << 20;
	cudaStream_t s;
	void *dbuf, *dval;
	int ret;

	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	CK_CUDA(cudaMalloc(&dbuf, cap));
	CK_CUDA(cudaMalloc(&dval, RING * 8));
	CK_CUDA(cudaHostAlloc((void **)&src, RING * 8, cudaHostAllocDefault));
	CK_CUDA(cudaHostAlloc((void **)&dst, RING * 8, cudaHostAllocDefault));
	memset(dst, 0, RING * 8);
	t.dst = dst;
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, mode, ncb, &t, &n), 0);
	ck_assert_int_eq(rk_gpu_notifier_mode(n), mode);

	for (i = 0; i < NMARKS; i++) {
		uint64_t r = rng_next(&rs);

		if (r % 97 == 0)
			CK_CUDA(busy_work(s, dbuf, cap, 300));	/* let marks pile up */
		else if (r % 3 == 0)
			CK_CUDA(busy_work(s, dbuf, cap, 5));
		/* its data slot is mark i - RING's: wait until that one is delivered */
		while (rk_gpu_notifier_outstanding(n) >= RING) {
			ck_assert_uint_lt(rk_test_now_ns(), deadline);
			rk_loop_run(loop, RK_RUN_ONCE);
		}
		/* a value through device memory into pinned memory, then the mark */
		src[i % RING] = cookie_of(i);
		CK_CUDA(cudaMemcpyAsync((char *)dval + (i % RING) * 8, &src[i % RING], 8,
					cudaMemcpyHostToDevice, s));
		CK_CUDA(cudaMemcpyAsync(&dst[i % RING], (char *)dval + (i % RING) * 8, 8,
					cudaMemcpyDeviceToHost, s));
		while ((ret = rk_gpu_notifier_mark(n, cookie_of(i))) == -EAGAIN) {
			ck_assert_uint_lt(rk_test_now_ns(), deadline);
			rk_loop_run(loop, RK_RUN_ONCE);
		}
		ck_assert_int_eq(ret, 0);
		if (r % 5 == 0)
			rk_loop_run(loop, RK_RUN_NOWAIT);
		if (r % 211 == 0)	/* drain completely: the loop waits (spins or blocks) */
			ck_assert(run_until(loop, deadline, &t.expect, i + 1));
	}
	ck_assert(run_until(loop, deadline, &t.expect, NMARKS));
	ck_assert_uint_eq(t.bad_order, 0);
	ck_assert_uint_eq(t.bad_data, 0);
	ck_assert_uint_eq(t.last_cookie, cookie_of(NMARKS - 1));
	ck_assert_uint_eq(rk_gpu_notifier_outstanding(n), 0);

	rk_gpu_notifier_stats(n, &st);
	ck_assert_uint_eq(st.marks, NMARKS);
	ck_assert_uint_eq(st.via_poll + st.via_wake, NMARKS);
	ck_assert_uint_gt(st.max_outstanding, 1);
	if (mode == RK_GPU_NOTIFY_POLL)
		ck_assert_uint_eq(st.via_wake, 0);
	if (mode == RK_GPU_NOTIFY_WAKE)
		ck_assert_uint_eq(st.via_poll, 0);
	rk_loop_stats(loop, &ls);
	if (wmode == RK_WAIT_BLOCK && mode == RK_GPU_NOTIFY_WAKE)
		ck_assert_uint_gt(ls.blocks, 0);	/* it slept and the host functions woke it */
	if (getenv("CHECK_GPU_VERBOSE"))
		printf("notify %s/%s: poll %llu wake %llu late %llu refused %llu max %u blocks %llu\n",
		       rk_gpu_notify_mode_name(mode), rk_wait_mode_name(wmode),
		       (unsigned long long)st.via_poll, (unsigned long long)st.via_wake,
		       (unsigned long long)st.wake_late, (unsigned long long)st.refused,
		       st.max_outstanding, (unsigned long long)ls.blocks);

	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	loop_drain_destroy(loop);
	CK_CUDA(cudaStreamDestroy(s));
	CK_CUDA(cudaFree(dbuf));
	CK_CUDA(cudaFree(dval));
	CK_CUDA(cudaFreeHost(src));
	CK_CUDA(cudaFreeHost(dst));
}
END_TEST

/* A stream gate: a host function that holds the stream until released. */
static atomic_int g_gate;

static void CUDART_CB gate_fn(void *arg)
{
	(void)arg;
	while (!atomic_load(&g_gate))
		usleep(100);
}

static void *gate_opener(void *arg)
{
	usleep(100 * 1000);
	atomic_store(&g_gate, 1);
	(void)arg;
	return NULL;
}

static enum rk_activity count_cb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	(void)n;
	(void)cookie;
	(*(uint64_t *)arg)++;
	return RK_BUSY;
}

START_TEST(test_notify_errors)
{
	struct rk_loop *loop = make_loop(RK_WAIT_ADAPTIVE);
	struct rk_gpu_notifier *n = NULL;
	struct rk_gpu_notifier_stats st;
	uint64_t got = 0, i, deadline = rk_test_now_ns() + 20000 * MS;
	pthread_t th;
	cudaStream_t s;

	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

	/* arguments */
	ck_assert_int_eq(rk_gpu_notifier_create(NULL, s, RK_GPU_NOTIFY_AUTO, count_cb, &got, &n),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_AUTO, NULL, &got, &n),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, (enum rk_gpu_notify_mode)7, count_cb,
						&got, &n),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_AUTO, count_cb, &got, NULL),
			 -EINVAL);
	ck_assert_int_eq(rk_gpu_notifier_destroy(NULL, false), 0);
	ck_assert_int_eq(rk_gpu_notify_mode_parse("poll"), RK_GPU_NOTIFY_POLL);
	ck_assert_int_eq(rk_gpu_notify_mode_parse("wake"), RK_GPU_NOTIFY_WAKE);
	ck_assert_int_eq(rk_gpu_notify_mode_parse("auto"), RK_GPU_NOTIFY_AUTO);
	ck_assert_int_eq(rk_gpu_notify_mode_parse("spin"), -EINVAL);
	ck_assert_str_eq(rk_gpu_notify_mode_name(RK_GPU_NOTIFY_WAKE), "wake");

	/* every slot in flight behind a closed gate: -EAGAIN; -EBUSY without force */
	atomic_store(&g_gate, 0);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_POLL, count_cb, &got, &n),
			 0);
	CK_CUDA(cudaLaunchHostFunc(s, gate_fn, NULL));
	for (i = 0; i < RK_GPU_NOTIFY_SLOTS; i++)
		ck_assert_int_eq(rk_gpu_notifier_mark(n, i), 0);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, i), -EAGAIN);
	rk_gpu_notifier_stats(n, &st);
	ck_assert_uint_eq(st.refused, 1);
	ck_assert_uint_eq(st.outstanding, RK_GPU_NOTIFY_SLOTS);
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), -EBUSY);
	rk_loop_run(loop, RK_RUN_NOWAIT);
	ck_assert_uint_eq(got, 0);
	atomic_store(&g_gate, 1);
	ck_assert(run_until(loop, deadline, &got, RK_GPU_NOTIFY_SLOTS));
	ck_assert_int_eq(rk_gpu_notifier_mark(n, i), 0);	/* room again */
	ck_assert(run_until(loop, deadline, &got, RK_GPU_NOTIFY_SLOTS + 1));
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);

	/* forced destroy with marks outstanding: it waits for the stream, no callback runs */
	got = 0;
	atomic_store(&g_gate, 0);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_AUTO, count_cb, &got, &n),
			 0);
	CK_CUDA(cudaLaunchHostFunc(s, gate_fn, NULL));
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(rk_gpu_notifier_mark(n, i), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, gate_opener, NULL), 0);
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, true), 0);
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_int_eq(rk_loop_destroy(loop), -EBUSY);	/* its posts are still queued */
	loop_drain_destroy(loop);
	ck_assert_uint_eq(got, 0);
	CK_CUDA(cudaStreamDestroy(s));
}
END_TEST

/* A source that predicts an event at @expect that never comes. */
struct far_src {
	struct rk_source src;
	uint64_t expect;
};

static int far_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;
}

static uint64_t far_expect(struct rk_source *src, uint64_t now)
{
	(void)now;
	return ((struct far_src *)src->data)->expect;
}

static int far_arm(struct rk_source *src)
{
	(void)src;
	return 0;
}

static const struct rk_source_ops far_ops = {
	.name = "far", .poll = far_poll, .arm = far_arm, .expect = far_expect };

static void *gate_opener_5ms(void *arg)
{
	usleep(5 * 1000);
	atomic_store(&g_gate, 1);
	(void)arg;
	return NULL;
}

/*
 * Lazy marks: nobody waits for them, so a loop that sleeps until another
 * source's predicted event (30 ms away) is not woken when the GPU finishes
 * (5 ms in): no host function, the mark is delivered after the sleep. A wait
 * without a timeout still arms the wake path, so the next lazy mark wakes a
 * blocked loop. Before lazy marks, a cold AUTO notifier put a host function
 * behind every mark and woke the loop at 5 ms.
 */
START_TEST(test_notify_lazy)
{
	struct rk_config c;
	struct rk_loop *loop = NULL;
	struct rk_gpu_notifier *n = NULL;
	struct rk_gpu_notifier_stats st;
	struct far_src far = { .src = { .ops = &far_ops } };
	uint64_t got = 0, t0, slept, deadline = rk_test_now_ns() + 20000 * MS;
	pthread_t th;
	cudaStream_t s;

	rk_config_init(&c);
	c.wait.mode = RK_WAIT_ADAPTIVE;
	c.wait.spin_ns = 0;		/* only the prediction keeps it from blocking */
	c.wait.timed_ns = 0;
	ck_assert(c.wait.predict);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_AUTO, count_cb, &got, &n),
			 0);
	if (rk_gpu_notifier_mode(n) != RK_GPU_NOTIFY_AUTO) {
		printf("test_notify_lazy: skipped (no stream memory operations: %s)\n",
		       rk_gpu_notify_mode_name(rk_gpu_notifier_mode(n)));
		goto out;
	}
	rk_gpu_notifier_set_lazy(n, true);
	far.src.data = &far;
	ck_assert_int_eq(rk_loop_add_source(loop, &far.src), 0);

	/* 1: a bounded sleep (the far prediction) arms nothing for the lazy mark */
	atomic_store(&g_gate, 0);
	CK_CUDA(cudaLaunchHostFunc(s, gate_fn, NULL));
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 1), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, gate_opener_5ms, NULL), 0);
	t0 = rk_test_now_ns();
	far.expect = rk_test_now_ns() + 30 * MS;	/* the loop clock (its cached time is stale) */
	/* sleeps until ~30 ms less the margin (a wait may end early on some
	 * other completion: then it sleeps again), then sees the word */
	ck_assert(run_until(loop, deadline, &got, 1));
	slept = rk_test_now_ns() - t0;
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	rk_gpu_notifier_stats(n, &st);
	ck_assert_msg(slept >= 20 * MS, "delivered after %llu us: the lazy mark woke the loop",
		      (unsigned long long)(slept / 1000));
	ck_assert_uint_ge(st.lazy_sleeps, 1);
	ck_assert_uint_eq(st.via_poll, 1);
	ck_assert_uint_eq(st.wake_armed_late, 0);

	/* 2: no prediction and no window: a block without a timeout; the lazy
	 * mark arms its host function then, which wakes the loop */
	ck_assert_int_eq(rk_loop_remove_source(loop, &far.src), 0);
	atomic_store(&g_gate, 0);
	CK_CUDA(cudaLaunchHostFunc(s, gate_fn, NULL));
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 2), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, gate_opener_5ms, NULL), 0);
	ck_assert(run_until(loop, deadline, &got, 2));
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	rk_gpu_notifier_stats(n, &st);
	ck_assert_uint_eq(st.wake_armed_late, 1);
	if (getenv("CHECK_GPU_VERBOSE"))
		printf("notify lazy: a 5 ms mark delivered after %llu us; lazy sleeps %llu, poll %llu "
		       "wake %llu\n", (unsigned long long)(slept / 1000),
		       (unsigned long long)st.lazy_sleeps, (unsigned long long)st.via_poll,
		       (unsigned long long)st.via_wake);
out:
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	loop_drain_destroy(loop);
	CK_CUDA(cudaStreamDestroy(s));
}
END_TEST

/*
 * Switching modes at run time (a bench compares them in one process): only an
 * AUTO notifier has both paths, and only with nothing outstanding; after a
 * switch, a mark takes the new mode's path.
 */
START_TEST(test_notify_set_mode)
{
	struct rk_loop *loop = make_loop(RK_WAIT_BLOCK);
	struct rk_gpu_notifier *n = NULL;
	struct rk_gpu_notifier_stats st;
	uint64_t got = 0, deadline = rk_test_now_ns() + 20000 * MS;
	cudaStream_t s;

	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_WAKE, count_cb, &got, &n),
			 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_POLL), -EOPNOTSUPP);
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	ck_assert_int_eq(rk_gpu_notifier_create(loop, s, RK_GPU_NOTIFY_AUTO, count_cb, &got, &n),
			 0);
	if (rk_gpu_notifier_mode(n) != RK_GPU_NOTIFY_AUTO) {
		printf("test_notify_set_mode: skipped (no stream memory operations)\n");
		goto out;
	}
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, (enum rk_gpu_notify_mode)7), -EINVAL);

	/* outstanding: refused, the mode stays */
	atomic_store(&g_gate, 0);
	CK_CUDA(cudaLaunchHostFunc(s, gate_fn, NULL));
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 1), 0);
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_WAKE), -EBUSY);
	ck_assert_int_eq(rk_gpu_notifier_mode(n), RK_GPU_NOTIFY_AUTO);
	atomic_store(&g_gate, 1);
	ck_assert(run_until(loop, deadline, &got, 1));

	/* WAKE: a blocked loop learns of the mark through the host function only */
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_WAKE), 0);
	ck_assert_int_eq(rk_gpu_notifier_mode(n), RK_GPU_NOTIFY_WAKE);
	rk_gpu_notifier_stats(n, &st);
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 2), 0);
	ck_assert(run_until(loop, deadline, &got, 2));
	{
		struct rk_gpu_notifier_stats st2;

		rk_gpu_notifier_stats(n, &st2);
		ck_assert_uint_eq(st2.via_wake, st.via_wake + 1);
		ck_assert_uint_eq(st2.via_poll, st.via_poll);
		st = st2;
	}

	/* POLL: the word only */
	ck_assert_int_eq(rk_gpu_notifier_set_mode(n, RK_GPU_NOTIFY_POLL), 0);
	rk_loop_set_wait(loop, &(struct rk_wait_policy){ .mode = RK_WAIT_SPIN });
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 3), 0);
	ck_assert(run_until(loop, deadline, &got, 3));
	{
		struct rk_gpu_notifier_stats st2;

		rk_gpu_notifier_stats(n, &st2);
		ck_assert_uint_eq(st2.via_poll, st.via_poll + 1);
		ck_assert_uint_eq(st2.via_wake, st.via_wake);
	}
out:
	ck_assert_int_eq(rk_gpu_notifier_destroy(n, false), 0);
	loop_drain_destroy(loop);
	CK_CUDA(cudaStreamDestroy(s));
}
END_TEST

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
	/* nccl tests */
	struct rk_nccl *nccl;
	int ready_status, ready_calls, error_calls;
	bool abort_on_peer_error;
	uint64_t marks_done;
	/* toy tests */
	struct toy_cuda *b;
	struct rk_sched *sched;
	bool round_done;
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
	/* toy */
	struct toy_params p;
	enum rk_gpu_notify_mode mode;
	uint32_t draft_k;
	int nstreams;
	struct gstream s[TSTREAMS];
	uint64_t drafts_proposed;
	struct grank r[2];
};

#define T_FAIL(t, e) do { (t)->line = __LINE__; (t)->err = (e); goto out; } while (0)
#define RUN_UNTIL(t, deadline, cond)						\
	({									\
		while (!(cond) && rk_test_now_ns() < (deadline))			\
			if (rk_loop_run((t)->loop, RK_RUN_ONCE) < 0)		\
				break;						\
		(bool)(cond);							\
	})

#define TAG_QUIT 0x71756974u

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct grank *t = arg;
	struct rk_wire_user u;
	int ret;

	(void)w;
	if (t->sched) {
		ret = rk_sched_on_frame(t->sched, peer, h, payload);
		if (ret != -ENOENT)
			return ret < 0 ? RK_BUSY : (enum rk_activity)ret;
	}
	if (t->b) {
		ret = toy_cuda_on_frame(t->b, peer, h, payload);
		if (ret != -ENOENT)
			return RK_BUSY;
	}
	if (t->nccl) {
		ret = rk_nccl_on_frame(t->nccl, peer, h, payload);
		if (ret != -ENOENT)
			return RK_BUSY;
	}
	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u) &&
	    u.tag == TAG_QUIT)
		t->quit = true;
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
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

static int node_create(struct grank *t, uint64_t deadline)
{
	struct rk_config c;

	rk_config_init(&c);
	c.rank = t->rank;
	c.world_size = t->gw->size;
	c.session_id = SESSION;
	c.peer_timeout_ns = 5000 * MS;
	c.connect_timeout_ns = 20000 * MS;
	return rk_test_join(&c, &t->gw->port, deadline, &world_ops, t, &t->loop, &t->w);
}

static void node_destroy(struct grank *t)
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

static void run_ranks(struct gworld *gw, void *(*fn)(void *))
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

static void wait_stage(struct gworld *gw, int stage, uint64_t deadline)
{
	while (atomic_load(&gw->stage) < stage && rk_test_now_ns() < deadline)
		usleep(200);
}

/* ---- NCCL ------------------------------------------------------------------------------ */

static void on_ready(struct rk_nccl *n, int status, void *arg)
{
	struct grank *t = arg;

	(void)n;
	t->ready_status = status;
	t->ready_calls++;
}

static void on_nccl_error(struct rk_nccl *n, int err, void *arg)
{
	struct grank *t = arg;

	(void)n;
	(void)err;
	t->error_calls++;
}

static enum rk_activity mark_cb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct grank *t = arg;

	(void)n;
	(void)cookie;
	t->marks_done++;
	return RK_BUSY;
}

/*
 * An allreduce; ncclInProgress is waited out (NCCL's rule) but is an error:
 * rk_nccl_comm() is the blocking child, whose collectives enqueue inline.
 */
static int allreduce_i32(ncclComm_t comm, int32_t *d, size_t count, cudaStream_t s)
{
	ncclResult_t r = ncclAllReduce(d, d, count, ncclInt32, ncclSum, comm, s), as;
	uint64_t deadline = rk_test_now_ns() + 30000 * MS;
	bool inprogress = r == ncclInProgress;

	while (r == ncclInProgress && rk_test_now_ns() < deadline) {
		if (ncclCommGetAsyncError(comm, &as) != ncclSuccess)
			return -EIO;
		if (as != ncclInProgress)
			return as != ncclSuccess ? -EIO : -EINPROGRESS;
		usleep(50);
	}
	if (inprogress)
		return r == ncclInProgress ? -ETIMEDOUT : -EINPROGRESS;
	return r == ncclSuccess ? 0 : -EIO;
}

enum { NT_BOOT, NT_ABORT, NT_WORLD_FAIL };

#define NCOUNT 4096

static void *nccl_rank(void *arg)
{
	struct grank *t = arg;
	struct gworld *gw = t->gw;
	uint64_t deadline = rk_test_now_ns() + 90000 * MS;
	struct rk_gpu_notifier *nt = NULL;
	int32_t *d = NULL, *h = NULL;
	cudaStream_t s = NULL;
	int ret, dev = t->rank % g_ndev, i;
	struct rk_wire_hdr fake = { .type = RK_FRAME_NCCL_ID, .len = RK_WIRE_NCCL_ID_LEN };
	uint8_t zeros[RK_WIRE_NCCL_ID_LEN] = { 0 };

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	if (gw->test == NT_WORLD_FAIL && t->rank == 0) {
		/* the leader leaves without ever sending NCCL_ID */
		ret = rk_world_wait_ready(t->w);
		if (ret)
			T_FAIL(t, ret);
		goto out;
	}
	/* before the world is ready: the leader sends the id once everyone is up */
	ret = rk_nccl_create(t->w, dev, on_ready, t, &t->nccl);
	if (ret)
		T_FAIL(t, ret);
	rk_nccl_set_error_cb(t->nccl, on_nccl_error, t);
	if (rk_nccl_comm(t->nccl) || rk_nccl_device(t->nccl) != dev)
		T_FAIL(t, -EPROTO);
	if (t->rank == 0 && rk_nccl_on_frame(t->nccl, 1, &fake, zeros) != -EPROTO)
		T_FAIL(t, -EPROTO);	/* an id is never sent to the leader */
	if (t->rank == 1 && rk_nccl_on_frame(t->nccl, 0, &(struct rk_wire_hdr){ .type =
								RK_FRAME_USER }, zeros) != -ENOENT)
		T_FAIL(t, -EPROTO);
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (!RUN_UNTIL(t, deadline, t->ready_calls))
		T_FAIL(t, -ETIMEDOUT);
	if (gw->test == NT_WORLD_FAIL) {
		/* rank 1: the world failed while it waited for the id */
		if (t->ready_status >= 0 || rk_nccl_state(t->nccl) != t->ready_status)
			T_FAIL(t, -EPROTO);
		goto out;
	}
	if (t->ready_status || rk_nccl_state(t->nccl) != 1 || !rk_nccl_comm(t->nccl))
		T_FAIL(t, t->ready_status ? t->ready_status : -EPROTO);
	if (t->rank == 1 && rk_nccl_on_frame(t->nccl, 0, &fake, zeros) != -EPROTO)
		T_FAIL(t, -EPROTO);	/* a second id */

	/* an int32 allreduce, its completion seen through the notifier */
	if (cudaSetDevice(dev) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
	    cudaMalloc((void **)&d, NCOUNT * 4) || cudaHostAlloc((void **)&h, NCOUNT * 4, 0))
		T_FAIL(t, -EIO);
	for (i = 0; i < NCOUNT; i++)
		h[i] = i * (t->rank + 1) - 1000;
	ret = rk_gpu_notifier_create(t->loop, s, RK_GPU_NOTIFY_AUTO, mark_cb, t, &nt);
	if (ret)
		T_FAIL(t, ret);
	if (cudaMemcpyAsync(d, h, NCOUNT * 4, cudaMemcpyHostToDevice, s))
		T_FAIL(t, -EIO);
	ret = allreduce_i32(rk_nccl_comm(t->nccl), d, NCOUNT, s);
	if (ret)
		T_FAIL(t, ret);
	if (cudaMemcpyAsync(h, d, NCOUNT * 4, cudaMemcpyDeviceToHost, s))
		T_FAIL(t, -EIO);
	ret = rk_gpu_notifier_mark(nt, 1);
	if (ret)
		T_FAIL(t, ret);
	if (!RUN_UNTIL(t, deadline, t->marks_done == 1))
		T_FAIL(t, -ETIMEDOUT);
	for (i = 0; i < NCOUNT; i++)
		if (h[i] != i * (gw->size * (gw->size + 1) / 2) - 1000 * gw->size)
			T_FAIL(t, -EBADMSG);

	if (gw->test == NT_ABORT) {
		if (t->rank == 0) {
			/* rank 1 never joins this one: only the abort can end it */
			t->abort_on_peer_error = true;
			ret = allreduce_i32(rk_nccl_comm(t->nccl), d, NCOUNT, s);
			if (ret)
				T_FAIL(t, ret);
			ret = rk_gpu_notifier_mark(nt, 2);
			if (ret)
				T_FAIL(t, ret);
			atomic_store(&gw->stage, 1);
			if (!RUN_UNTIL(t, deadline, t->peer_errs > 0))
				T_FAIL(t, -ETIMEDOUT);
			/* peer_error aborted the communicator: the stream drains */
			if (!RUN_UNTIL(t, rk_test_now_ns() + 20000 * MS, t->marks_done == 2))
				T_FAIL(t, -ETIMEDOUT);
			/*
			 * Aborted by peer_error (-ECONNRESET), or first by the async-error
			 * watch if NCCL itself noticed the peer go (-EIO, error callback).
			 */
			if (rk_nccl_comm(t->nccl) ||
			    !(rk_nccl_state(t->nccl) == -ECONNRESET ||
			      (rk_nccl_state(t->nccl) == -EIO && t->error_calls == 1)))
				T_FAIL(t, -EPROTO);
		} else {
			wait_stage(gw, 1, deadline);
			/* this rank "dies": its communicator goes, then its links */
			rk_nccl_abort(t->nccl);
			if (rk_nccl_state(t->nccl) != -ECONNRESET)
				T_FAIL(t, -EPROTO);
		}
	}
out:
	if (nt && rk_gpu_notifier_destroy(nt, true) && !t->line)
		t->line = __LINE__;
	/* both ranks finalize at about the same time (destroy waits for the peer) */
	if (t->nccl && rk_nccl_destroy(t->nccl) && !t->line)
		t->line = __LINE__;
	t->nccl = NULL;
	if (s)
		cudaStreamDestroy(s);
	cudaFree(d);
	cudaFreeHost(h);
	node_destroy(t);
	return NULL;
}

START_TEST(test_nccl_single)
{
	struct gworld *gw = calloc(1, sizeof(*gw));

	gw->size = 1;
	gw->test = NT_BOOT;
	run_ranks(gw, nccl_rank);
	free(gw);
}
END_TEST

START_TEST(test_nccl_pair)
{
	struct gworld *gw;

	if (g_ndev < 2) {
		printf("test_nccl_pair: skipped (%d GPU)\n", g_ndev);
		return;
	}
	gw = calloc(1, sizeof(*gw));
	gw->size = 2;
	gw->test = _i ? NT_ABORT : NT_BOOT;
	run_ranks(gw, nccl_rank);
	free(gw);
}
END_TEST

START_TEST(test_nccl_world_fail)
{
	struct gworld *gw = calloc(1, sizeof(*gw));

	gw->size = 2;
	gw->test = NT_WORLD_FAIL;
	run_ranks(gw, nccl_rank);
	ck_assert_int_eq(gw->r[1].ready_calls, 1);
	ck_assert_int_lt(gw->r[1].ready_status, 0);
	free(gw);
}
END_TEST

/* ---- the toy model's CUDA backend ---------------------------------------------------- */

#ifdef HAVE_TOY_CUDA
static void on_complete(void *arg, uint64_t round_id, int status)
{
	struct grank *t = arg;

	t->round_done = true;
	t->done_id = round_id;
	t->done_status = status;
}

/* Encode and launch one round on the backend; return launch()'s result. */
static int launch_round(struct toy_cuda *b, uint64_t id, const struct rk_wire_stream *st,
			uint32_t n, const uint32_t *tok, struct toy_round *copy, uint32_t V)
{
	static uint8_t buf[1 << 16];
	struct rk_wire_round view;
	int64_t len;

	len = rk_wire_encode_round(buf, sizeof(buf), id, st, n, tok);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	if (copy)
		ck_assert_int_eq(toy_round_copy(copy, &view, V), 0);
	return toy_cuda_ops.launch(b, &view, 0);
}

/*
 * TP1: random rounds through the CUDA backend and through the CPU stream table
 * (toy_table_exec: at TP1 its partials are the logits); every logit must match.
 */
START_TEST(test_toy_logits)
{
	const uint32_t V = 256, H = _i ? 1024 : 64;
	struct gworld *gw = calloc(1, sizeof(*gw));
	struct grank *t = &gw->r[0];
	struct toy_params p = { .V = V, .H = H, .seed = 1 };
	struct toy_model m;
	struct toy_table tab;
	struct toy_round r = { 0 };
	struct rk_wire_stream st[6];
	uint32_t tok[512], ids_live[6], n_live = 0, pos[6] = { 0 }, x;
	uint64_t rs = 99 + (uint64_t)_i, deadline = rk_test_now_ns() + 60000 * MS, round;
	int32_t *cpu;
	uint32_t i, j, ntok, n;

	gw->size = 1;
	t->gw = gw;
	ck_assert_int_eq(node_create(t, deadline), 0);
	ck_assert_int_eq(rk_world_wait_ready(t->w), 0);
	ck_assert_int_eq(toy_cuda_create(NULL, &p, 0, RK_GPU_NOTIFY_AUTO, &t->b), -EINVAL);
	p.H = 100;
	p.V = 0;
	ck_assert_int_eq(toy_cuda_create(t->w, &p, 0, RK_GPU_NOTIFY_AUTO, &t->b), -EINVAL);
	p.V = V;
	p.H = H;
	ck_assert_int_eq(toy_cuda_create(t->w, &p, 99, RK_GPU_NOTIFY_AUTO, &t->b), -ENODEV);
	ck_assert_int_eq(toy_cuda_create(t->w, &p, -1, (enum rk_gpu_notify_mode)(_i % 3), &t->b),
			 0);
	toy_cuda_set_complete(t->b, on_complete, t);
	toy_cuda_set_graphs(t->b, true);
	ck_assert_int_eq(toy_cuda_ready(t->b), 1);
	ck_assert_int_eq(toy_model_init(&m, V, H, 1, 0, 1), 0);
	ck_assert_int_eq(toy_table_init(&tab, &m), 0);
	cpu = malloc(sizeof(int32_t) * V * 64);

	/* the golden values of TOY.md (H = 64): a fresh stream fed token 1 */
	st[0] = (struct rk_wire_stream){ .stream_id = 5, .position = 0, .n_tokens = 1 };
	tok[0] = 1;
	ck_assert_int_eq(launch_round(t->b, 1, st, 1, tok, &r, V), 0);
	ck_assert(toy_cuda_busy(t->b));
	ck_assert_int_eq(toy_cuda_destroy(t->b), -EBUSY);
	ck_assert(RUN_UNTIL(t, deadline, t->round_done));
	ck_assert_int_eq(t->done_status, 0);
	ck_assert_uint_eq(t->done_id, 1);
	ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
	ck_assert_mem_eq(toy_cuda_logits(t->b, 0), cpu, V * 4);
	if (H == 64) {
		const int32_t *lg = toy_cuda_logits(t->b, 0);

		ck_assert_int_eq(lg[0], 80206);
		ck_assert_int_eq(lg[1], 8424);
		ck_assert_int_eq(lg[2], -85873);
		ck_assert_int_eq(lg[3], 2390);
		ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 0, &x), 0);
		ck_assert_uint_eq(x, 9);
	}
	ck_assert_ptr_null(toy_cuda_logits(t->b, 1));
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 1, 0, &x), -EINVAL);
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 1, &x), -EINVAL);

	/* errors: launch refuses, nothing changes */
	st[0] = (struct rk_wire_stream){ .stream_id = 5, .position = 3, .n_tokens = 1 };
	ck_assert_int_eq(launch_round(t->b, 2, st, 1, tok, NULL, V), -EPROTO);
	st[1] = st[0] = (struct rk_wire_stream){ .stream_id = 8, .position = 0, .n_tokens = 1 };
	tok[1] = 2;
	ck_assert_int_eq(launch_round(t->b, 2, st, 2, tok, NULL, V), -EINVAL);	/* twice */
	tok[0] = V;
	ck_assert_int_eq(launch_round(t->b, 2, st, 1, tok, NULL, V), -EINVAL);	/* token >= V */
	ck_assert(!toy_cuda_busy(t->b));
	ck_assert_uint_eq(toy_cuda_streams(t->b), 1);
	ck_assert_int_eq(toy_cuda_ops.token(t->b, 0, 0, &x), -EAGAIN);	/* the launch dropped it */

	/* random rounds: streams come (prefill), go (absent), draft (scratch only) */
	ids_live[n_live++] = 5;
	pos[0] = 1;
	for (round = 3; round < 60; round++) {
		n = 0;
		ntok = 0;
		for (i = 0; i < n_live; i++) {
			uint32_t k = (uint32_t)(rng_next(&rs) % 4), d = (uint32_t)(rng_next(&rs) % 5);

			if (rng_next(&rs) % 9 == 0) {	/* ends: absent from now on */
				ids_live[i] = ids_live[--n_live];
				pos[i] = pos[n_live];
				i--;
				continue;
			}
			k = k ? k : 1;
			st[n] = (struct rk_wire_stream){ .stream_id = ids_live[i], .position = pos[i],
							 .n_tokens = k, .n_draft = d };
			for (j = 0; j < k + d; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
			pos[i] += k;
			n++;
		}
		if (n_live < 5 && rng_next(&rs) % 2) {	/* a new stream with a prompt */
			uint32_t k = 1 + (uint32_t)(rng_next(&rs) % 20);

			ids_live[n_live] = 1000 + round;
			pos[n_live] = k;
			st[n++] = (struct rk_wire_stream){ .stream_id = 1000 + round, .position = 0,
							   .n_tokens = k, .n_draft = 2 };
			for (j = 0; j < k + 2; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
			n_live++;
		}
		if (!n)
			continue;
		t->round_done = false;
		ck_assert_int_eq(launch_round(t->b, round, st, n, tok, &r, V), 0);
		ck_assert(RUN_UNTIL(t, deadline, t->round_done));
		ck_assert_int_eq(t->done_status, 0);
		ck_assert_uint_le(r.n_out, 64);
		ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
		for (j = 0; j < r.n_out; j++)
			ck_assert_msg(!memcmp(toy_cuda_logits(t->b, j), cpu + (size_t)j * V, V * 4),
				      "round %llu output %u differs", (unsigned long long)round, j);
		ck_assert_uint_eq(toy_cuda_streams(t->b), tab.count);
	}
	/*
	 * Steady decode: three new streams, then rounds of one shape (3 streams,
	 * 9 outputs), which run as a CUDA graph from their second round on.
	 */
	for (round = 100; round < 116; round++) {
		ntok = 0;
		for (i = 0; i < 3; i++) {
			uint32_t k = round == 100 ? 4 : 1;

			st[i] = (struct rk_wire_stream){ .stream_id = 7000 + i,
							 .position = round == 100 ? 0 : 4 + (uint32_t)(round - 101),
							 .n_tokens = k, .n_draft = 2 };
			for (j = 0; j < k + 2; j++)
				tok[ntok++] = (uint32_t)(rng_next(&rs) % V);
		}
		t->round_done = false;
		ck_assert_int_eq(launch_round(t->b, round, st, 3, tok, &r, V), 0);
		ck_assert(RUN_UNTIL(t, deadline, t->round_done));
		ck_assert_int_eq(t->done_status, 0);
		ck_assert_uint_eq(r.n_out, 9);
		ck_assert_int_eq(toy_table_exec(&tab, &r, cpu), 0);
		for (j = 0; j < r.n_out; j++)
			ck_assert_msg(!memcmp(toy_cuda_logits(t->b, j), cpu + (size_t)j * V, V * 4),
				      "steady round %llu output %u differs", (unsigned long long)round, j);
	}
	toy_cuda_ops.retire(t->b, 7000);
	ck_assert_uint_eq(toy_cuda_streams(t->b), 2);
	toy_cuda_stats(t->b, &t->stats);
	ck_assert_uint_gt(t->stats.rounds, 20);
	ck_assert_uint_eq(t->stats.notify.marks, t->stats.rounds);
	/* the last 14 steady rounds at least: one capture, then launches */
	ck_assert_uint_ge(t->stats.graph_captures, 1);
	ck_assert_uint_ge(t->stats.graph_launches, 14);

	ck_assert_int_eq(toy_cuda_destroy(t->b), 0);
	t->b = NULL;
	toy_round_fini(&r);
	toy_table_fini(&tab);
	toy_model_fini(&m);
	free(cpu);
	node_destroy(t);
	ck_assert_int_eq(t->line, 0);
	free(gw);
}
END_TEST

/* A drafter that knows the answers: the reference's next tokens, some spoiled. */
static uint32_t ref_draft(void *arg, const uint32_t *hist, size_t n, uint32_t *out, uint32_t k)
{
	struct gworld *gw = arg;
	uint32_t i, j, gen;

	for (i = 0; i < (uint32_t)gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		if (n < s->n_prompt || memcmp(hist, s->prompt, s->n_prompt * 4))
			continue;
		gen = (uint32_t)n - s->n_prompt;
		for (j = 0; j < k && gen + j < s->n_gen; j++) {
			out[j] = s->ref[gen + j];
			if ((gen + j) % 5 == 3)
				out[j] = (out[j] + 1) % gw->p.V;	/* rejected, and the rest */
		}
		gw->drafts_proposed += j;
		return j;
	}
	return 0;
}

static void req_cb(struct rk_request *req, const uint32_t *tokens, uint32_t n, bool done, int err)
{
	struct gstream *s = req->data;

	if (n && s->n_got + n <= GEN_MAX) {	/* tokens is NULL when n is 0 */
		memcpy(s->got + s->n_got, tokens, n * 4);
		s->n_got += n;
	}
	if (done) {
		s->n_done++;
		s->done_err = err;
	}
}

static void *toy_rank(void *arg)
{
	struct grank *t = arg;
	struct gworld *gw = t->gw;
	struct rk_sched_config sc = { .max_batch = 8, .draft_k = gw->draft_k,
				      .draft = gw->draft_k ? ref_draft : NULL, .draft_arg = gw };
	uint64_t deadline = rk_test_now_ns() + 100000 * MS;
	uint8_t quit[8];
	int ret, i, done;

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	/* backend and scheduler before the world is ready (a frame may come with WELCOME) */
	ret = toy_cuda_create(t->w, &gw->p, -1, gw->mode, &t->b);
	if (ret)
		T_FAIL(t, ret);
	/* CHECK_GPU_GRAPHS=1: these rounds as CUDA graphs too (rk-serve's default) */
	if (getenv("CHECK_GPU_GRAPHS") && !strcmp(getenv("CHECK_GPU_GRAPHS"), "1"))
		toy_cuda_set_graphs(t->b, true);
	ret = rk_sched_create(t->w, &sc, &toy_cuda_ops, t->b, &t->sched);
	if (ret)
		T_FAIL(t, ret);
	toy_cuda_set_sched(t->b, t->sched);
	t->abort_on_peer_error = false;
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (t->rank == 0) {
		/* submitted at once: rounds wait inside the backend for NCCL */
		for (i = 0; i < gw->nstreams; i++) {
			struct gstream *s = &gw->s[i];

			memset(&s->req, 0, sizeof(s->req));
			s->req.prompt = s->prompt;
			s->req.prompt_len = s->n_prompt;
			s->req.max_tokens = s->n_gen;
			s->req.stop_token = -1;
			s->req.top_k = s->s.top_k;
			s->req.temperature = s->s.temperature;
			s->req.top_p = s->s.top_p;
			s->req.seed = s->s.seed;
			s->req.draft_k = -1;
			s->req.cb = req_cb;
			s->req.data = s;
			ret = rk_sched_submit(t->sched, &s->req);
			if (ret)
				T_FAIL(t, ret);
		}
		for (;;) {
			for (i = 0, done = 0; i < gw->nstreams; i++)
				done += gw->s[i].n_done;
			if (done == gw->nstreams)
				break;
			if (rk_test_now_ns() > deadline)
				T_FAIL(t, -ETIMEDOUT);
			if (rk_loop_run(t->loop, RK_RUN_ONCE) < 0)
				T_FAIL(t, -EIO);
		}
		if (!RUN_UNTIL(t, deadline, !toy_cuda_busy(t->b)))
			T_FAIL(t, -ETIMEDOUT);
		if (gw->size > 1) {
			ret = rk_wire_encode_user(quit, sizeof(quit), TAG_QUIT, NULL, 0);
			ret = rk_world_broadcast(t->w, RK_FRAME_USER, 0, quit, (uint32_t)ret);
			if (ret)
				T_FAIL(t, ret);
			rk_loop_run(t->loop, RK_RUN_NOWAIT);	/* QUIT leaves before we finalize */
		}
	} else {
		if (!RUN_UNTIL(t, deadline, t->quit))
			T_FAIL(t, -ETIMEDOUT);
	}
out:
	if (t->b) {
		RUN_UNTIL(t, rk_test_now_ns() + 10000 * MS, !toy_cuda_busy(t->b));
		toy_cuda_stats(t->b, &t->stats);
		ret = toy_cuda_destroy(t->b);
		if (ret && !t->line) {
			t->line = __LINE__;
			t->err = ret;
		}
		t->b = NULL;
	}
	if (t->sched)
		rk_sched_destroy(t->sched);
	t->sched = NULL;
	if (t->rank == 0 && gw->size > 1 && !t->line)
		RUN_UNTIL(t, rk_test_now_ns() + 10000 * MS, t->peer_errs == gw->size - 1);	/* BYE */
	node_destroy(t);
	return NULL;
}

/*
 * _i bits: 0: TP2, 1: 8 streams, 2: drafted, 3: stream 0 sampled. Stream 0 is
 * TOY.md's receipt stream (prompt 1..8, 32 tokens, H 1024); the others mix
 * greedy and sampled. The notify mode rotates with _i.
 */
/*
 * A peer dies after rounds ran as CUDA graphs that hold NCCL collectives.
 * NCCL's abort waits until every graph that captured a collective of the
 * communicator has been destroyed, so without rk_nccl's release hook (the
 * backend drops its graphs there) toy_cuda_abort() never returned. Rank 1
 * aborts and leaves; rank 0 aborts from peer_error. Both must come back.
 */
static void *toy_abort_rank(void *arg)
{
	struct grank *t = arg;
	struct gworld *gw = t->gw;
	uint64_t deadline = rk_test_now_ns() + 90000 * MS, round;
	struct rk_wire_stream st;
	struct rk_wire_round view;
	uint8_t buf[512];
	uint32_t tok[4], j;
	int64_t len;
	int ret;

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	ret = toy_cuda_create(t->w, &gw->p, -1, RK_GPU_NOTIFY_AUTO, &t->b);
	if (ret)
		T_FAIL(t, ret);
	toy_cuda_set_complete(t->b, on_complete, t);
	toy_cuda_set_graphs(t->b, true);
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (!RUN_UNTIL(t, deadline, toy_cuda_ready(t->b) != 0) || toy_cuda_ready(t->b) != 1)
		T_FAIL(t, toy_cuda_ready(t->b) ? toy_cuda_ready(t->b) : -ETIMEDOUT);
	/* one stream: a 3-token prompt, then 5 decode rounds; one shape (1 stream, 2 outputs) */
	for (round = 1; round <= 6; round++) {
		st = (struct rk_wire_stream){ .stream_id = 9,
					      .position = round == 1 ? 0 : (uint32_t)round + 1,
					      .n_tokens = round == 1 ? 3 : 1, .n_draft = 1 };
		for (j = 0; j < st.n_tokens + st.n_draft; j++)
			tok[j] = (uint32_t)(round * 7 + j) % gw->p.V;
		len = rk_wire_encode_round(buf, sizeof(buf), round, &st, 1, tok);
		if (len <= 0 || rk_wire_decode_round(buf, (size_t)len, &view))
			T_FAIL(t, -EPROTO);
		t->round_done = false;
		ret = toy_cuda_ops.launch(t->b, &view, 0);
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(t, deadline, t->round_done))
			T_FAIL(t, -ETIMEDOUT);
		if (t->done_status)
			T_FAIL(t, t->done_status);
	}
	toy_cuda_stats(t->b, &t->stats);
	if (t->stats.graph_captures < 1 || t->stats.graph_launches < 5)
		T_FAIL(t, -EPROTO);	/* rounds 2-6 ran as a graph */
	atomic_fetch_add(&gw->stage, 1);
	wait_stage(gw, 2, deadline);
	if (t->rank == 1) {
		toy_cuda_abort(t->b);	/* this rank "dies": its communicator, then its links */
	} else {
		t->abort_on_peer_error = true;
		if (!RUN_UNTIL(t, deadline, t->peer_errs > 0))
			T_FAIL(t, -ETIMEDOUT);
	}
	if (toy_cuda_ready(t->b) != -ECONNRESET)
		T_FAIL(t, -EPROTO);
out:
	if (t->b && toy_cuda_destroy(t->b) && !t->line)
		t->line = __LINE__;
	t->b = NULL;
	node_destroy(t);
	return NULL;
}

START_TEST(test_toy_abort_graphs)
{
	struct gworld *gw;

	if (g_ndev < 2) {
		printf("test_toy_abort_graphs: skipped (%d GPU)\n", g_ndev);
		return;
	}
	gw = calloc(1, sizeof(*gw));
	gw->size = 2;
	toy_params_init(&gw->p);
	run_ranks(gw, toy_abort_rank);
	free(gw);
}
END_TEST

START_TEST(test_toy_sched)
{
	/* TOY.md's receipts: greedy, sampled (FNV-1a without OpenSSL) */
	static const char *const golden[2] = {
#ifdef RK_HAVE_OPENSSL
		"580208bbe9f726d2", "74085fd6e1e26755",
#else
		"953b82ad5cb652c2", "072ca5397e51f06c",
#endif
	};
	const struct toy_sampling sampled = { 40, 0.8f, 0.95f, 1234 };
	struct gworld *gw;
	uint64_t rs = 7 + (uint64_t)_i;
	char hex[17];
	int i;
	uint32_t j;

	if ((_i & 1) && g_ndev < 2) {
		printf("test_toy_sched %d: TP2 skipped (%d GPU)\n", _i, g_ndev);
		return;
	}
	gw = calloc(1, sizeof(*gw));
	gw->size = (_i & 1) ? 2 : 1;
	gw->nstreams = (_i & 2) ? 8 : 1;
	gw->draft_k = (_i & 4) ? 3 : 0;
	gw->mode = (enum rk_gpu_notify_mode)(_i % 3);
	toy_params_init(&gw->p);		/* V 256, H 1024, seed 1 */
	for (i = 0; i < gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		if (i == 0) {
			for (j = 0; j < 8; j++)
				s->prompt[j] = j + 1;
			s->n_prompt = 8;
			s->n_gen = 32;
			if (_i & 8)
				s->s = sampled;
		} else {
			s->n_prompt = 1 + (uint32_t)(rng_next(&rs) % 8);
			for (j = 0; j < s->n_prompt; j++)
				s->prompt[j] = (uint32_t)(rng_next(&rs) % 256);
			s->prompt[0] = 100 + (uint32_t)i;	/* distinct: the drafter finds it */
			s->n_gen = 12 + (uint32_t)(rng_next(&rs) % 20);
			if (i % 2)
				s->s = (struct toy_sampling){ 5 + (uint32_t)i, 1.2f, 0.9f,
							      (uint64_t)i * 77 };
		}
		ck_assert_int_eq(toy_generate_ref(gw->p.V, gw->p.H, gw->p.seed, s->prompt,
						  s->n_prompt, s->n_gen, &s->s, s->ref), 0);
	}
	run_ranks(gw, toy_rank);
	for (i = 0; i < gw->nstreams; i++) {
		struct gstream *s = &gw->s[i];

		ck_assert_int_eq(s->n_done, 1);
		ck_assert_int_eq(s->done_err, 0);
		ck_assert_uint_eq(s->n_got, s->n_gen);
		ck_assert_msg(!memcmp(s->got, s->ref, s->n_gen * 4), "stream %d differs", i);
	}
	ck_assert_int_eq(toy_hash_tokens(gw->s[0].got, gw->s[0].n_got, hex), 0);
	ck_assert_str_eq(hex, golden[(_i & 8) ? 1 : 0]);
	ck_assert_uint_gt(gw->r[0].stats.rounds, 0);
	if (gw->size > 1)
		ck_assert_uint_eq(gw->r[1].stats.rounds, gw->r[0].stats.rounds);
	if (gw->draft_k)
		ck_assert_uint_gt(gw->drafts_proposed, 0);
	if (getenv("CHECK_GPU_VERBOSE"))
		printf("toy %d: TP%d %d streams draft %u %s: %llu rounds, poll %llu wake %llu\n",
		       _i, gw->size, gw->nstreams, gw->draft_k, rk_gpu_notify_mode_name(gw->mode),
		       (unsigned long long)gw->r[0].stats.rounds,
		       (unsigned long long)gw->r[0].stats.notify.via_poll,
		       (unsigned long long)gw->r[0].stats.notify.via_wake);
	free(gw);
}
END_TEST
#endif /* HAVE_TOY_CUDA */
#endif /* RK_HAVE_NCCL */

/* ---- the latency benchmark (RK_BENCH_GPU_LAT=1) --------------------------------------- */

typedef CUresult (*write_value64_fn)(CUstream, CUdeviceptr, cuuint64_t, unsigned int);

struct bench_ctx {
	struct rk_loop *loop;
	uint64_t t1;
	uint64_t want;
};

static enum rk_activity bench_cb(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct bench_ctx *c = arg;

	(void)n;
	if (cookie == c->want) {
		c->t1 = rk_test_now_ns();
		rk_loop_stop(c->loop);
	}
	return RK_BUSY;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

enum {
	M_WORD, M_QUERY, M_BLOCKSYNC, M_POLL_SPIN, M_AUTO_ADAPT, M_WAKE_BLOCK, M_AUTO_BLOCK,
	M__COUNT
};

static const char *const m_name[M__COUNT] = {
	[M_WORD] = "(a) raw host word spin (cuStreamWriteValue64)",
	[M_QUERY] = "(b) cudaEventQuery spin",
	[M_BLOCKSYNC] = "(c) cudaEventSynchronize, BlockingSync event",
	[M_POLL_SPIN] = "(d) notifier poll, loop spinning",
	[M_AUTO_ADAPT] = "(d') notifier auto, loop adaptive (spin window)",
	[M_WAKE_BLOCK] = "(e) notifier wake, loop blocking",
	[M_AUTO_BLOCK] = "(e') notifier auto, loop blocking",
};

static int bench(void)
{
	const char *e = getenv("RK_BENCH_GPU_ITERS");
	unsigned int iters = e ? (unsigned int)strtoul(e, NULL, 10) : 5000, chunk = 250;
	double ratio = getenv("RK_BENCH_GPU_MAX_RATIO") ? atof(getenv("RK_BENCH_GPU_MAX_RATIO"))
							 : 1.1;
	enum cudaDriverEntryPointQueryResult q;
	struct rk_loop *spin, *block, *adapt;
	struct rk_gpu_notifier *nt[M__COUNT] = { NULL };
	struct bench_ctx ctx[M__COUNT];
	struct rk_gpu_notifier_stats ns;
	write_value64_fn wv = NULL;
	cudaEvent_t ev, evb;
	cudaStream_t s;
	uint64_t *lat[M__COUNT], *word, seq = 0, t0, p50[M__COUNT];
	unsigned int cnt[M__COUNT] = { 0 }, m, k, done = 0;
	void *dword, *dbuf;
	struct rk_config c;
	int ret, dev = 0;
	bool pass;

	if (iters < 100)
		iters = 100;
	if (cudaSetDevice(dev) || cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) ||
	    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming) ||
	    cudaEventCreateWithFlags(&evb, cudaEventDisableTiming | cudaEventBlockingSync) ||
	    cudaHostAlloc((void **)&word, 64, cudaHostAllocMapped) ||
	    cudaHostGetDevicePointer(&dword, word, 0) || cudaMalloc(&dbuf, 4096)) {
		fprintf(stderr, "bench: CUDA setup failed\n");
		return 1;
	}
	if (cudaGetDriverEntryPointByVersion("cuStreamWriteValue64", (void **)&wv, 12000,
					     cudaEnableDefault, &q) || q != cudaDriverEntryPointSuccess)
		wv = NULL;
	*word = 0;
	rk_config_init(&c);
	ret = rk_loop_create(&c, &adapt);	/* the default adaptive policy */
	c.wait.mode = RK_WAIT_SPIN;
	ret = ret ? ret : rk_loop_create(&c, &spin);
	c.wait.mode = RK_WAIT_BLOCK;
	ret = ret ? ret : rk_loop_create(&c, &block);
	if (ret) {
		fprintf(stderr, "bench: loops: %s\n", rk_strerror(ret));
		return 1;
	}
	for (m = 0; m < M__COUNT; m++) {
		struct rk_loop *l = m == M_POLL_SPIN ? spin : m == M_AUTO_ADAPT ? adapt : block;
		enum rk_gpu_notify_mode md = m == M_POLL_SPIN ? RK_GPU_NOTIFY_POLL :
					     m == M_WAKE_BLOCK ? RK_GPU_NOTIFY_WAKE :
								 RK_GPU_NOTIFY_AUTO;

		lat[m] = calloc(iters, sizeof(uint64_t));
		ctx[m].loop = l;
		if (m < M_POLL_SPIN)
			continue;
		ret = rk_gpu_notifier_create(l, s, md, bench_cb, &ctx[m], &nt[m]);
		if (ret) {
			fprintf(stderr, "bench: notifier %s: %s\n", m_name[m], rk_strerror(ret));
			return 1;
		}
	}
	printf("GPU completion latency: an empty kernel (launch to the host knowing), %u samples "
	       "per method, interleaved in chunks of %u, device %d of %d\n", iters, chunk, dev,
	       g_ndev);
	/* warm-up, then chunks of each method in turn */
	for (k = 0; k < 200; k++) {
		empty_work(s, dbuf);
		cudaStreamSynchronize(s);
	}
	while (done < M__COUNT) {
		done = 0;
		for (m = 0; m < M__COUNT; m++) {
			if (cnt[m] >= iters || (m == M_WORD && !wv)) {
				done++;
				continue;
			}
			for (k = 0; k < chunk && cnt[m] < iters; k++) {
				seq++;
				t0 = rk_test_now_ns();
				empty_work(s, dbuf);
				switch (m) {
				case M_WORD:
					wv((CUstream)s, (CUdeviceptr)(uintptr_t)dword, seq, 0);
					while (__atomic_load_n(word, __ATOMIC_ACQUIRE) != seq)
						;
					lat[m][cnt[m]++] = rk_test_now_ns() - t0;
					break;
				case M_QUERY:
					cudaEventRecord(ev, s);
					while (cudaEventQuery(ev) == cudaErrorNotReady)
						;
					lat[m][cnt[m]++] = rk_test_now_ns() - t0;
					break;
				case M_BLOCKSYNC:
					cudaEventRecord(evb, s);
					cudaEventSynchronize(evb);
					lat[m][cnt[m]++] = rk_test_now_ns() - t0;
					break;
				default:
					ctx[m].want = seq;
					ctx[m].t1 = 0;
					/* all slots busy: let the loop run the wake
					 * path's late posts, then mark again */
					while ((ret = rk_gpu_notifier_mark(nt[m], seq)) == -EAGAIN)
						rk_loop_run(ctx[m].loop, RK_RUN_NOWAIT);
					if (ret) {
						fprintf(stderr, "bench: mark failed: %s\n",
							rk_strerror(ret));
						return 1;
					}
					rk_loop_run(ctx[m].loop, RK_RUN_DEFAULT);
					lat[m][cnt[m]++] = ctx[m].t1 - t0;
					break;
				}
			}
			/* let the last chunk's host functions land before another method runs */
			cudaStreamSynchronize(s);
			usleep(2000);
			rk_loop_run(spin, RK_RUN_NOWAIT);
			rk_loop_run(adapt, RK_RUN_NOWAIT);
			rk_loop_run(block, RK_RUN_NOWAIT);
		}
	}
	printf("%-52s %8s %8s %8s %8s\n", "method", "p50 us", "p90 us", "p99 us", "max us");
	for (m = 0; m < M__COUNT; m++) {
		if (!cnt[m]) {
			printf("%-52s %8s\n", m_name[m], "n/a");
			p50[m] = 0;
			continue;
		}
		qsort(lat[m], cnt[m], sizeof(uint64_t), cmp_u64);
		p50[m] = lat[m][cnt[m] / 2];
		printf("%-52s %8.1f %8.1f %8.1f %8.1f\n", m_name[m], p50[m] / 1e3,
		       lat[m][cnt[m] * 90 / 100] / 1e3, lat[m][cnt[m] * 99 / 100] / 1e3,
		       lat[m][cnt[m] - 1] / 1e3);
	}
	for (m = M_POLL_SPIN; m < M__COUNT; m++) {
		rk_gpu_notifier_stats(nt[m], &ns);
		printf("  %s: via poll %llu, via wake %llu, late wakes %llu\n", m_name[m],
		       (unsigned long long)ns.via_poll, (unsigned long long)ns.via_wake,
		       (unsigned long long)ns.wake_late);
	}
	pass = wv && p50[M_POLL_SPIN] <= ratio * (double)p50[M_WORD];
	printf("GPULAT-VERDICT %s: notifier fast path p50 %.2f us vs raw word p50 %.2f us "
	       "(ratio %.3f, limit %.2f)\n", pass ? "PASS" : "FAIL", p50[M_POLL_SPIN] / 1e3,
	       p50[M_WORD] / 1e3, p50[M_WORD] ? (double)p50[M_POLL_SPIN] / p50[M_WORD] : 0.0,
	       ratio);
	for (m = M_POLL_SPIN; m < M__COUNT; m++)
		rk_gpu_notifier_destroy(nt[m], true);
	cudaStreamSynchronize(s);
	rk_loop_run(spin, RK_RUN_NOWAIT);
	rk_loop_run(adapt, RK_RUN_NOWAIT);
	rk_loop_run(block, RK_RUN_NOWAIT);
	rk_loop_destroy(spin);
	rk_loop_destroy(adapt);
	rk_loop_destroy(block);
	return pass ? 0 : 1;
}

static Suite *gpu_suite(void)
{
	Suite *s = suite_create("gpu");
	TCase *tc;

	tc = tcase_create("notifier");
	tcase_set_timeout(tc, 120);
	tcase_add_loop_test(tc, test_notify_order, 0, 6);
	tcase_add_test(tc, test_notify_errors);
	tcase_add_test(tc, test_notify_lazy);
	tcase_add_test(tc, test_notify_set_mode);
	suite_add_tcase(s, tc);
#ifdef RK_HAVE_NCCL
	tc = tcase_create("nccl");
	tcase_set_timeout(tc, 120);
	tcase_add_test(tc, test_nccl_single);
	tcase_add_loop_test(tc, test_nccl_pair, 0, 2);
	tcase_add_test(tc, test_nccl_world_fail);
	suite_add_tcase(s, tc);
#endif
#ifdef HAVE_TOY_CUDA
	tc = tcase_create("toy");
	tcase_set_timeout(tc, 180);
	tcase_add_loop_test(tc, test_toy_logits, 0, 2);
	tcase_add_loop_test(tc, test_toy_sched, 0, 16);
	tcase_add_test(tc, test_toy_abort_graphs);
	suite_add_tcase(s, tc);
#endif
	return s;
}

/* Count devices in a child: the parent must not initialise CUDA before forking tests. */
static int probe_in_child(void)
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
#endif /* RK_HAVE_CUDA */

int main(void)
{
	/* every GPU run of this project keeps NVLink SHARP off (docs/GPU.md) */
	setenv("NCCL_NVLS_ENABLE", "0", 1);
	setenv("NCCL_RUNTIME_CONNECT", "0", 1);	/* rk_nccl_create() warns otherwise */
	rk_log_set_handler(log_quiet, NULL);
#ifndef RK_HAVE_CUDA
	/* the stubs answer -EOPNOTSUPP, and that is all there is to test */
	if (rk_gpu_probe() != -EOPNOTSUPP ||
	    rk_gpu_notifier_create(NULL, NULL, RK_GPU_NOTIFY_AUTO, NULL, NULL, NULL) !=
		    -EOPNOTSUPP ||
	    rk_nccl_create(NULL, 0, NULL, NULL, NULL) != -EOPNOTSUPP ||
	    toy_cuda_create(NULL, NULL, 0, RK_GPU_NOTIFY_AUTO, NULL) != -EOPNOTSUPP) {
		fprintf(stderr, "check_gpu: a stub did not return -EOPNOTSUPP\n");
		return EXIT_FAILURE;
	}
	printf("SKIP: rankrt was built without CUDA\n");
	return 77;
#else
	SRunner *sr;
	int failed;

	g_ndev = probe_in_child();
	if (g_ndev <= 0) {
		printf("SKIP: no CUDA device (%s)\n", rk_strerror(g_ndev));
		return 77;
	}
	if (getenv("RK_BENCH_GPU_LAT") && !strcmp(getenv("RK_BENCH_GPU_LAT"), "1"))
		return bench();
	printf("check_gpu: %d CUDA device(s)\n", g_ndev);
	sr = srunner_create(gpu_suite());
	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
#endif
}
