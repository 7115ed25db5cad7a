/* SPDX-License-Identifier: MIT */
/*
 * The NCCL bootstrap over rank links, and its failure handling. Built only
 * with NCCL.
 *
 * States, all driven on the loop thread by one timer (RK_NCCL_INIT_POLL_MS
 * while coming up, RK_NCCL_WATCH_MS once ready):
 *   WAIT_WORLD  leader: the unique id exists; waiting for every follower link
 *   WAIT_ID     follower: waiting for the leader's NCCL_ID frame
 *   INIT        ncclCommInitRankConfig(blocking = 0) returned; polling
 *               ncclCommGetAsyncError until it leaves ncclInProgress
 *   SPLIT       the parent is up; ncclCommSplit (also non-blocking: it runs under
 *               the parent's config) makes the child with config.blocking = 1,
 *               polled the same way
 *   READY       collectives go to the child; the async-error watch runs only while
 *               the owner says collectives are in flight (rk_nccl_busy): an idle
 *               rank gets no timer wake-ups
 *   FAILED      the communicator is aborted (or never existed)
 * A world failure (rk_world_failed) in any state before READY aborts the
 * bring-up, so a rank never waits for a dead peer; once READY, the owner calls
 * rk_nccl_abort() from peer_error. The leader's id reaches a follower through
 * the world's claim on NCCL_ID frames (rk__world_claim()), never through the
 * application: the bootstrap is a user of the world, as the scheduler is.
 *
 * Why two communicators: on a non-blocking communicator every collective is
 * launched by a thread that NCCL creates for it, and answers ncclInProgress
 * until that thread is done; nothing more may go on the stream before then.
 * That costs a thread and a wait of the caller in every round. The child is a
 * blocking communicator, so a collective is enqueued inline, but it is made
 * by a split of the non-blocking parent and so is still brought up without
 * blocking the loop. Its connections exist once the split completes only
 * with NCCL_RUNTIME_CONNECT=0 (else the first collective connects, and that
 * blocks until every rank has issued it: docs/GPU.md).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "gpu_int.h"	/* nccl.h, and the functions loaded from libnccl */

#define FINALIZE_MS	5000	/* bound of the one blocking wait (destroy) */
#define MS		1000000ull

_Static_assert(sizeof(ncclUniqueId) == RK_WIRE_NCCL_ID_LEN, "NCCL_ID frame carries the id");

enum nstate { NS_WAIT_WORLD, NS_WAIT_ID, NS_INIT, NS_SPLIT, NS_READY, NS_FAILED };

struct rk_nccl {
	struct rk_world *w;
	struct rk__claim claim;		/* the world's NCCL_ID frames */
	struct rk_loop *loop;
	int rank, size, dev;
	enum nstate st;
	int err;			/* NS_FAILED: why */
	ncclUniqueId id;
	bool have_id;
	ncclComm_t parent;		/* non-blocking: INIT and later */
	ncclComm_t comm;		/* the blocking child: SPLIT (coming up), READY */
	rk_nccl_ready_cb ready;
	void *ready_arg;
	rk_nccl_error_cb on_error;
	void *error_arg;
	rk_nccl_release_cb release;
	void *release_arg;
	struct rk_timer timer;
	uint64_t t0;
	bool busy;			/* collectives in flight (rk_nccl_busy) */
};

/* Convert an ncclResult_t once: log it (and NCCL's last error), return -EIO. */
static int nccl_check(const struct rk_nccl *n, ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return 0;
	rk__err(n->rank, "%s: %s (%s)", what, rk__nccl.ncclGetErrorString(r),
		rk__nccl.ncclGetLastError(n->comm ? n->comm : n->parent));
	return -EIO;
}

static uint64_t mono_ms(void)
{
	return rk__now_ns() / 1000000u;
}

/* Before NCCL may wait for the owner's graphs: let it release them, once. */
static void release(struct rk_nccl *n)
{
	rk_nccl_release_cb cb = n->release;

	n->release = NULL;
	if (cb && n->comm)
		cb(n, n->release_arg);
}

/* Abort the child, then the parent (either may be absent). */
static int comm_abort(struct rk_nccl *n)
{
	int ret = 0, r;

	if (!n->comm && !n->parent)
		return 0;
	release(n);
	ret = RK_CUDA(n->rank, cudaSetDevice, n->dev);
	if (n->comm) {
		r = nccl_check(n, rk__nccl.ncclCommAbort(n->comm), "ncclCommAbort (child)");
		ret = ret ? ret : r;
		n->comm = NULL;
	}
	if (n->parent) {
		r = nccl_check(n, rk__nccl.ncclCommAbort(n->parent), "ncclCommAbort");
		ret = ret ? ret : r;
		n->parent = NULL;
	}
	return ret;
}

/* Enter FAILED with @err; a bring-up that has not reported yet reports it. */
static void fail(struct rk_nccl *n, int err)
{
	bool was_ready = n->st == NS_READY;

	if (n->st == NS_FAILED)
		return;
	comm_abort(n);
	n->st = NS_FAILED;
	n->err = err;
	rk_timer_stop(&n->timer);
	if (!was_ready && n->ready)
		n->ready(n, err, n->ready_arg);
}

static int start_init(struct rk_nccl *n)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t r;
	int ret;

	ret = RK_CUDA(n->rank, cudaSetDevice, n->dev);
	if (ret) {
		fail(n, ret);
		return ret;
	}
	cfg.blocking = 0;	/* returns at once; progress is polled from the loop */
	r = rk__nccl.ncclCommInitRankConfig(&n->parent, n->size, n->id, n->rank, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		ret = nccl_check(n, r, "ncclCommInitRankConfig");
		fail(n, ret);
		return ret;
	}
	n->st = NS_INIT;
	n->t0 = mono_ms();
	rk__dbg(n->rank, "nccl: init started (%d ranks, device %d)", n->size, n->dev);
	return 0;
}

/* The parent is up: split the blocking child off it (non-blocking too). */
static int start_split(struct rk_nccl *n)
{
	ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
	ncclResult_t r;
	int ret;

	cfg.blocking = 1;	/* the child's collectives enqueue inline */
	cfg.splitShare = 1;	/* and share the parent's channels and buffers */
	r = rk__nccl.ncclCommSplit(n->parent, 0, n->rank, &n->comm, &cfg);
	if (r != ncclSuccess && r != ncclInProgress) {
		ret = nccl_check(n, r, "ncclCommSplit");
		fail(n, ret);
		return ret;
	}
	n->st = NS_SPLIT;
	rk__dbg(n->rank, "nccl: parent up after %llu ms, split started",
		(unsigned long long)(mono_ms() - n->t0));
	return 0;
}

/* Poll @c's async state in a bring-up state. Return RK_IDLE while in progress. */
static enum rk_activity poll_up(struct rk_nccl *n, ncclComm_t c, const char *what, int werr,
				bool *done)
{
	ncclResult_t as = ncclSuccess;
	int ret;

	*done = false;
	ret = nccl_check(n, rk__nccl.ncclCommGetAsyncError(c, &as), "ncclCommGetAsyncError");
	if (ret) {
		fail(n, ret);
		return RK_BUSY;
	}
	if (as == ncclInProgress) {
		if (werr) {
			rk__err(n->rank, "nccl: world failed during %s: %s", what,
				rk_strerror(werr));
			fail(n, werr);
			return RK_BUSY;
		}
		return RK_IDLE;
	}
	if (as != ncclSuccess) {
		fail(n, nccl_check(n, as, what));
		return RK_BUSY;
	}
	*done = true;
	return RK_BUSY;
}

static bool followers_up(struct rk_nccl *n)
{
	struct rk_link *l;
	int r;

	for (r = 1; r < n->size; r++) {
		l = rk_world_link(n->w, r);
		if (!l || !rk_link_up(l))
			return false;
	}
	return true;
}

/* One step of the state machine. Return RK_BUSY when the state changed. */
static enum rk_activity step(struct rk_nccl *n)
{
	uint8_t buf[RK_WIRE_NCCL_ID_LEN];
	ncclResult_t as = ncclSuccess;
	enum rk_activity act;
	int ret, werr;
	bool done;

	werr = rk_world_failed(n->w);
	switch (n->st) {
	case NS_WAIT_WORLD:
		if (werr) {
			fail(n, werr);
			return RK_BUSY;
		}
		if (!followers_up(n))
			return RK_IDLE;
		ret = rk_wire_encode_nccl_id(buf, sizeof(buf), (const uint8_t *)&n->id);
		if (ret > 0 && n->size > 1)
			ret = rk_world_broadcast(n->w, RK_FRAME_NCCL_ID, 0, buf, (uint32_t)ret);
		if (ret < 0) {
			rk__err(n->rank, "nccl: sending the unique id: %s", rk_strerror(ret));
			fail(n, ret);
			return RK_BUSY;
		}
		start_init(n);
		return RK_BUSY;
	case NS_WAIT_ID:
		if (werr)
			fail(n, werr);
		return werr ? RK_BUSY : RK_IDLE;
	case NS_INIT:
		act = poll_up(n, n->parent, "ncclCommInitRankConfig (async)", werr, &done);
		if (done)
			start_split(n);
		return act;
	case NS_SPLIT:
		/*
		 * The split runs as a job of the parent: its state is the parent's,
		 * and NCCL sets the child's handle only once the split is complete.
		 */
		act = poll_up(n, n->parent, "ncclCommSplit (async)", werr, &done);
		if (!done)
			return act;
		if (!n->comm) {
			rk__err(n->rank, "nccl: ncclCommSplit completed without a communicator");
			fail(n, -EIO);
			return RK_BUSY;
		}
		n->st = NS_READY;
		rk__info(n->rank, "nccl: communicator ready (%d ranks, device %d, %llu ms)",
			 n->size, n->dev, (unsigned long long)(mono_ms() - n->t0));
		rk_timer_stop(&n->timer);
		if (n->busy)
			rk_timer_start(n->loop, &n->timer, RK_NCCL_WATCH_MS * MS,
				       RK_NCCL_WATCH_MS * MS);
		if (n->ready)
			n->ready(n, 0, n->ready_arg);
		return RK_BUSY;
	case NS_READY:
		ret = nccl_check(n, rk__nccl.ncclCommGetAsyncError(n->comm, &as),
				 "ncclCommGetAsyncError");
		if (!ret && (as == ncclSuccess || as == ncclInProgress)) {
			/* one look after the last collective, then quiet until the next */
			if (!n->busy)
				rk_timer_stop(&n->timer);
			return RK_IDLE;
		}
		if (!ret)
			ret = nccl_check(n, as, "nccl: asynchronous error");
		/* the communicator is unusable: abort it so nothing of ours hangs */
		fail(n, ret);
		if (n->on_error)
			n->on_error(n, ret, n->error_arg);
		return RK_BUSY;
	case NS_FAILED:
		break;
	}
	return RK_IDLE;
}

static enum rk_activity timer_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	return step(t->data);
}

static enum rk_activity id_frame(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, const union rk__wire_payload *p)
{
	(void)h;
	(void)payload;
	rk__nccl_take_id(rk__container_of(c, struct rk_nccl, claim), peer, p->nccl_id);
	return RK_BUSY;
}

int rk_nccl_create(struct rk_world *w, int cuda_device, rk_nccl_ready_cb ready, void *arg,
		   struct rk_nccl **out)
{
	struct rk_nccl *n;
	const char *nvls, *rc;
	int ret;

	ret = rk__nccl_load();
	if (ret) {
		if (out)
			*out = NULL;
		return ret;
	}
	if (!w || !out || cuda_device < 0)
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->w = w;
	n->loop = rk_world_loop(w);
	n->rank = rk_world_rank(w);
	n->size = rk_world_size(w);
	n->dev = cuda_device;
	n->ready = ready;
	n->ready_arg = arg;
	if (n->rank < 0 || n->size <= 0 || n->rank >= n->size) {
		ret = -EINVAL;
		goto err_free;
	}
	ret = RK_CUDA(n->rank, cudaSetDevice, cuda_device);
	if (ret)
		goto err_free;
	/* from here an NCCL_ID frame comes here, not to the application */
	n->claim.types = 1u << RK_FRAME_NCCL_ID;
	n->claim.frame = id_frame;
	ret = rk__world_claim(w, &n->claim);
	if (ret)
		goto err_free;
	nvls = getenv("NCCL_NVLS_ENABLE");
	if (!nvls || strcmp(nvls, "0"))
		rk__warn(n->rank, "nccl: NCCL_NVLS_ENABLE is not 0: NVLink SHARP (multicast) may be "
			 "used (docs/GPU.md says why it should be off)");
	rc = getenv("NCCL_RUNTIME_CONNECT");
	if (!rc || strcmp(rc, "0"))
		rk__warn(n->rank, "nccl: NCCL_RUNTIME_CONNECT is not 0: the first collective may "
			 "block until every rank has issued it (docs/GPU.md)");
	if (n->rank == 0) {
		ret = nccl_check(n, rk__nccl.ncclGetUniqueId(&n->id), "ncclGetUniqueId");
		if (ret)
			goto err_unclaim;
		n->have_id = true;
		n->st = NS_WAIT_WORLD;
	} else {
		n->st = NS_WAIT_ID;
	}
	rk_timer_init(&n->timer, timer_cb, n);
	/* the first step runs from the loop, so no callback runs inside create */
	rk_timer_start(n->loop, &n->timer, 0, RK_NCCL_INIT_POLL_MS * MS);
	*out = n;
	return 0;
err_unclaim:
	rk__world_unclaim(&n->claim);
err_free:
	free(n);
	return ret;
}

void rk_nccl_set_error_cb(struct rk_nccl *n, rk_nccl_error_cb cb, void *arg)
{
	n->on_error = cb;
	n->error_arg = arg;
}

void rk_nccl_set_release_cb(struct rk_nccl *n, rk_nccl_release_cb cb, void *arg)
{
	n->release = cb;
	n->release_arg = arg;
}

void rk_nccl_busy(struct rk_nccl *n, bool busy)
{
	n->busy = busy;
	/* Started only when idle: back-to-back rounds must not keep pushing it out. */
	if (busy && n->st == NS_READY && !n->timer.active)
		rk_timer_start(n->loop, &n->timer, RK_NCCL_WATCH_MS * MS, RK_NCCL_WATCH_MS * MS);
}

int rk__nccl_take_id(struct rk_nccl *n, int peer, const uint8_t id[RK_WIRE_NCCL_ID_LEN])
{
	if (n->rank == 0 || peer != 0 || n->have_id) {
		rk__warn(n->rank, "nccl: unexpected NCCL_ID from rank %d: dropped", peer);
		return -EPROTO;
	}
	memcpy(&n->id, id, sizeof(n->id));
	n->have_id = true;
	if (n->st != NS_WAIT_ID)
		return RK_BUSY;		/* failed (aborted) already: nothing to start */
	if (start_init(n))
		return -EIO;	/* the ready callback has run */
	return RK_BUSY;
}

int rk_nccl_state(const struct rk_nccl *n)
{
	switch (n->st) {
	case NS_READY:
		return 1;
	case NS_FAILED:
		return n->err;
	default:
		return 0;
	}
}

int rk_nccl_progress(struct rk_nccl *n)
{
	step(n);
	return rk_nccl_state(n);
}

void *rk_nccl_comm(const struct rk_nccl *n)
{
	return n->st == NS_READY ? (void *)n->comm : NULL;
}

int rk_nccl_device(const struct rk_nccl *n)
{
	return n->dev;
}

int rk_nccl_abort(struct rk_nccl *n)
{
	bool was_ready = n->st == NS_READY;
	int ret;

	if (n->st == NS_FAILED)
		return 0;
	rk__info(n->rank, "nccl: aborting the communicator");
	ret = comm_abort(n);
	n->st = NS_FAILED;
	n->err = -ECONNRESET;
	rk_timer_stop(&n->timer);
	if (!was_ready && n->ready)
		n->ready(n, -ECONNRESET, n->ready_arg);
	return ret;
}

/*
 * Finalize and destroy *@c: a non-blocking communicator's finalize is polled
 * for at most FINALIZE_MS; the blocking child's returns once its own work is
 * flushed (its owner has synchronized the stream). On failure *@c stays for
 * comm_abort(). Return: 0 or -EIO (logged).
 */
static int finalize(struct rk_nccl *n, ncclComm_t *c, const char *name)
{
	ncclResult_t as = ncclInProgress, r;
	uint64_t until;
	int ret;

	r = rk__nccl.ncclCommFinalize(*c);
	ret = r == ncclInProgress ? 0 : nccl_check(n, r, "ncclCommFinalize");
	until = mono_ms() + FINALIZE_MS;
	while (!ret && mono_ms() < until) {
		ret = nccl_check(n, rk__nccl.ncclCommGetAsyncError(*c, &as),
				 "ncclCommGetAsyncError");
		if (ret || as != ncclInProgress)
			break;
		nanosleep(&(struct timespec){ .tv_nsec = 100000 }, NULL);
	}
	if (ret)
		return ret;
	if (as != ncclSuccess) {
		rk__warn(n->rank, "nccl: finalize of the %s %s: aborting", name,
			 as == ncclInProgress ? "timed out" : rk__nccl.ncclGetErrorString(as));
		return -EIO;
	}
	ret = nccl_check(n, rk__nccl.ncclCommDestroy(*c), "ncclCommDestroy");
	*c = NULL;
	return ret;
}

int rk_nccl_destroy(struct rk_nccl *n)
{
	int ret = 0, r;

	if (!n)
		return 0;
	rk__world_unclaim(&n->claim);
	rk_timer_stop(&n->timer);
	if (n->comm && n->st == NS_READY) {
		release(n);
		ret = RK_CUDA(n->rank, cudaSetDevice, n->dev);
		if (!ret)
			ret = finalize(n, &n->comm, "child");
		if (!ret && n->parent)
			ret = finalize(n, &n->parent, "parent");
	}
	r = comm_abort(n);	/* what is left: not ready, or a finalize failed */
	ret = ret ? ret : r;
	free(n);
	return ret;
}
