// SPDX-License-Identifier: MIT
/*
 * check_gpu: the GPU module (docs/GPU.md): the notifier and the NCCL
 * bootstrap; the toy model's CUDA backend is check_toy_cuda.c's.
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

#include "gpu_test.h"
#include "runtime_int.h"
#include "toy_cuda_k.h"
#ifdef RK_HAVE_CUDA
#include "gpu_int.h"	/* rk__nccl_take_id() */
#endif

#ifdef RK_HAVE_CUDA
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

	rk_gpu_notifier_stats(n, &st, sizeof(st));
	ck_assert_uint_eq(st.marks, NMARKS);
	ck_assert_uint_eq(st.via_poll + st.via_wake, NMARKS);
	ck_assert_uint_gt(st.max_outstanding, 1);
	if (mode == RK_GPU_NOTIFY_POLL)
		ck_assert_uint_eq(st.via_wake, 0);
	if (mode == RK_GPU_NOTIFY_WAKE)
		ck_assert_uint_eq(st.via_poll, 0);
	rk_loop_stats(loop, &ls, sizeof(ls));
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
	rk_gpu_notifier_stats(n, &st, sizeof(st));
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
	ck_assert(rk__config_tuning(&c)->wait.predict);
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
	rk_gpu_notifier_stats(n, &st, sizeof(st));
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
	rk_gpu_notifier_stats(n, &st, sizeof(st));
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
	rk_gpu_notifier_stats(n, &st, sizeof(st));
	ck_assert_int_eq(rk_gpu_notifier_mark(n, 2), 0);
	ck_assert(run_until(loop, deadline, &got, 2));
	{
		struct rk_gpu_notifier_stats st2;

		rk_gpu_notifier_stats(n, &st2, sizeof(st2));
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

		rk_gpu_notifier_stats(n, &st2, sizeof(st2));
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
	if (t->rank == 0 && rk__nccl_take_id(t->nccl, 1, zeros) != -EPROTO)
		T_FAIL(t, -EPROTO);	/* an id is never sent to the leader */
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
	if (t->rank == 1 && rk__nccl_take_id(t->nccl, 0, zeros) != -EPROTO)
		T_FAIL(t, -EPROTO);	/* a second id */
	if (t->foreign)
		T_FAIL(t, -EPROTO);	/* the id went to the bootstrap, not on_frame() */

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
		rk_gpu_notifier_stats(nt[m], &ns, sizeof(ns));
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

/* ---- round epochs on the device (rk_gpu_epoch_*) ---------------------------------- */

/* Wait (a hang guard, not a timing bound) for @s to drain; false if it did not. */
static bool stream_drains(cudaStream_t s, uint64_t ms)
{
	uint64_t deadline = rk_test_now_ns() + ms * MS;
	const struct timespec pause = { 0, 100000 };
	cudaError_t r;

	while ((r = cudaStreamQuery(s)) == cudaErrorNotReady && rk_test_now_ns() < deadline)
		nanosleep(&pause, NULL);
	return r == cudaSuccess;
}

/* A leader's region in a sealed memfd (@w) and a follower's view of it (@v). */
static void view_pair(uint32_t desc_max, _Atomic uint32_t *waiters, _Atomic uint32_t *bell,
		      struct rk_epoch **w, struct rk_epoch **v)
{
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(desc_max, &fd, w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, desc_max, waiters, bell, v), 0);
	close(fd);
}

/*
 * A same-host follower's region is its read-only view of the leader's (a
 * sealed memfd): it registers read-only, and a kernel polling the view's
 * epoch word starts on the writer's store, with no call of the reader in
 * between. A stream wait on the view is refused (-EROFS: closing a view
 * could not end it); the writer's own region still takes one.
 */
START_TEST(test_epoch_view)
{
	_Atomic uint32_t waiters = 0, bell = 0;
	struct rk_epoch *w = NULL, *v = NULL;
	struct rk_gpu_epoch *gw = NULL, *gv = NULL;
	uint64_t *flag, *dflag;
	const uint64_t *dep;
	cudaStream_t s;

	CK_CUDA(cudaSetDevice(0));
	CK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
	view_pair(256, &waiters, &bell, &w, &v);
	ck_assert(rk__epoch_is_view(v));
	ck_assert(!rk__epoch_is_view(w));
	ck_assert_int_eq(rk_gpu_epoch_register(v, 0, &gv), 0);
	ck_assert_int_eq(rk_gpu_epoch_register(w, 0, &gw), 0);
	ck_assert_int_eq(rk_gpu_epoch_wait(gv, s, 1), -EROFS);

	CK_CUDA(cudaHostAlloc((void **)&flag, sizeof(*flag), cudaHostAllocMapped));
	__atomic_store_n(flag, 0, __ATOMIC_RELAXED);
	CK_CUDA(cudaHostGetDevicePointer((void **)&dflag, flag, 0));
	dep = (const uint64_t *)((uint8_t *)rk_gpu_epoch_device_ptr(gv) + RK_EPOCH_OFF_EPOCH);
	ck_assert_int_eq(toy_cuda_k_poll_flag(s, dep, 3, dflag, 77), 0);
	/* epoch 0 < 3: the kernel cannot have stored yet */
	ck_assert_uint_eq(__atomic_load_n(flag, __ATOMIC_ACQUIRE), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 1, 0, NULL, 0), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 2, 0, NULL, 0), 0);
	ck_assert_uint_eq(__atomic_load_n(flag, __ATOMIC_ACQUIRE), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 3, 0, NULL, 0), 0);
	ck_assert_msg(stream_drains(s, 20000), "the kernel on the view never saw epoch 3");
	ck_assert_uint_eq(__atomic_load_n(flag, __ATOMIC_ACQUIRE), 77);
	ck_assert_uint_eq(rk_epoch_current(v), 3);

	/* the writer's region: a stream wait, met by the next publication */
	ck_assert_int_eq(rk_gpu_epoch_wait(gw, s, 4), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 4, 0, NULL, 0), 0);
	ck_assert(stream_drains(s, 20000));

	ck_assert_int_eq(rk_gpu_epoch_unregister(&gv), 0);
	ck_assert_int_eq(rk_gpu_epoch_unregister(&gw), 0);
	ck_assert_ptr_null(gv);
	CK_CUDA(cudaFreeHost(flag));
	CK_CUDA(cudaStreamDestroy(s));
	rk_epoch_release(v);
	rk_epoch_release(w);
}
END_TEST

static Suite *gpu_suite(void)
{
	Suite *s = suite_create("gpu");
	TCase *tc;

	tc = rk_tcase(s, "notifier", 120, NULL, NULL);
	tcase_add_loop_test(tc, test_notify_order, 0, 6);
	tcase_add_test(tc, test_notify_errors);
	tcase_add_test(tc, test_notify_lazy);
	tcase_add_test(tc, test_notify_set_mode);
	tc = rk_tcase(s, "epoch", 120, NULL, NULL);
	tcase_add_test(tc, test_epoch_view);
#ifdef RK_HAVE_NCCL
	tc = rk_tcase(s, "nccl", 120, NULL, NULL);
	tcase_add_test(tc, test_nccl_single);
	tcase_add_loop_test(tc, test_nccl_pair, 0, 2);
	tcase_add_test(tc, test_nccl_world_fail);
#endif
	return s;
}
#endif /* RK_HAVE_CUDA */

int main(void)
{
	gpu_test_setup();
#ifndef RK_HAVE_CUDA
	/* the stubs answer -EOPNOTSUPP, and that is all there is to test */
	if (rk_gpu_probe() != -EOPNOTSUPP ||
	    rk_gpu_notifier_create(NULL, NULL, RK_GPU_NOTIFY_AUTO, NULL, NULL, NULL) !=
		    -EOPNOTSUPP ||
	    rk_nccl_create(NULL, 0, NULL, NULL, NULL) != -EOPNOTSUPP) {
		fprintf(stderr, "check_gpu: a stub did not return -EOPNOTSUPP\n");
		return EXIT_FAILURE;
	}
	printf("SKIP: rankrt was built without CUDA\n");
	return 77;
#else
	if (gpu_test_probe())
		return 77;
	if (getenv("RK_BENCH_GPU_LAT") && !strcmp(getenv("RK_BENCH_GPU_LAT"), "1"))
		return bench();
	printf("check_gpu: %d CUDA device(s)\n", g_ndev);
	return rk_check_run(gpu_suite());
#endif
}
