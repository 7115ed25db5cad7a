/* SPDX-License-Identifier: MIT */
/*
 * Stream notifications: "the work enqueued so far on this stream is done",
 * turned into a loop event. Built in every configuration: the device is
 * behind struct rk__notify_dev_ops (gpu/notify_int.h), CUDA's in
 * gpu/notifier_cuda.c, the emulated one's in gpu/emu.c. The text below names
 * the CUDA calls; the emulated device does the same things in order.
 *
 * Two paths, one sequence. Mark k (k = 1, 2, ...) enqueues, on the compute
 * stream and in this order:
 *   fast path: cuStreamWriteValue64(word, k) into host-mapped memory; the
 *              loop source's poll() reads the word and delivers every mark <= it;
 *   wake path: cudaEventRecord(ev) on the compute stream, cudaStreamWaitEvent on
 *              a side stream, cudaLaunchHostFunc(side, host_fn, slot k): the host
 *              function posts slot k's preallocated struct rk_post to the loop,
 *              which delivers every mark <= k.
 * Because a stream runs in order, "k is done" implies "every mark before k is
 * done", so delivery is a single counter (delivered) that either path advances;
 * whichever comes second finds nothing left to do. Callbacks therefore run once
 * per mark, in mark order.
 *
 * Why the side stream: a host function blocks its stream until it returns
 * and occupies a CUDA worker thread; on the compute stream it would delay the
 * next kernel by the callback hop (docs/GPU.md has its cost). On a side stream
 * that only waits on an event, the compute stream never waits for it.
 *
 * Prediction (AUTO and POLL): the source learns how long a mark takes, from
 * the mark (or the delivery of the one before, if later) to the loop seeing
 * the word, as an EWMA with its mean deviation, and tells the loop when it
 * expects the oldest outstanding mark (rk_source_ops.expect): the loop sleeps
 * until shortly before, then spins on the word. Once the predictor is warm,
 * AUTO marks enqueue no host function (they record the event only); if such
 * a mark becomes overdue and the loop wants to block, arm() enqueues the host
 * function then, waiting on the event's latest record (a mark at or after the
 * oldest outstanding one), so a blocked loop is always woken.
 *
 * Lazy marks (rk_gpu_notifier_set_lazy(): nobody on this rank waits for them)
 * give no prediction and no host function at mark time; a wait with a timeout
 * arms nothing for them, one without a timeout arms the host function as
 * above. They are delivered when the loop next looks at the word.
 *
 * Slots: a ring of RK_GPU_NOTIFY_SLOTS. Slot k % N is busy from mark k until k
 * is delivered and, on the wake path, until its post has run on the loop (a
 * post is owned by the loop from rk_loop_post() until its callback). A mark
 * whose slot is busy gets -EAGAIN; nothing is allocated after create.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "notify_int.h"

struct slot {
	struct rk_post post;		/* owned by the loop while post_inflight */
	struct rk_gpu_notifier *n;
	struct rk_loop *loop;
	uint64_t seq;
	uint64_t cookie;
	uint64_t t_mark;		/* loop clock at the mark */
	bool post_inflight;
};


struct rk_gpu_notifier {
	struct rk_source src;
	struct rk_loop *loop;
	int rank;
	const struct rk__notify_dev_ops *ops;	/* the device (gpu/notify_int.h) */
	void *dev;
	bool all_paths;			/* the device set up the word and host functions */
	enum rk_gpu_notify_mode mode;
	bool use_poll, use_wake;
	bool lazy;			/* rk_gpu_notifier_set_lazy() */
	rk_gpu_done_cb cb;
	void *arg;

	/*
	 * The fast path's word, the device's (write_word): on CUDA host-mapped
	 * pinned memory, written by the GPU (a stream memory operation, preceded
	 * by a system-scope fence by default: CU_STREAM_WRITE_VALUE_DEFAULT); on
	 * the emulated device a release store by its thread. Read by the loop
	 * with an acquire load. Pairs: device fence + write (the stream's earlier
	 * work and copies into pinned memory are visible first) -> our acquire
	 * load -> the callback reads those results.
	 */
	uint64_t *word;

	/* the predictor (loop clock, ns) */
	struct rk__pred pred;		/* a mark's duration */
	uint64_t last_deliver;		/* when the last mark was delivered */
	uint64_t last_look;		/* last poll that saw the oldest mark undone, 0 = none */
	uint64_t wake_upto;		/* highest mark with a host function enqueued */

	uint64_t issued;		/* marks enqueued: 1..issued */
	uint64_t delivered;		/* marks whose callback ran (or dropped by destroy) */
	unsigned int posts_inflight;	/* host functions enqueued whose post has not run */
	bool broken;			/* a mark failed half-way: refuse more */
	bool closing;			/* destroyed; memory waits for the last post */
	struct rk_gpu_notifier_stats st;
	struct slot slots[RK_GPU_NOTIFY_SLOTS];
};

static inline uint64_t word_load(const struct rk_gpu_notifier *n)
{
	/* pairs with the device's fenced write */
	return __atomic_load_n(n->word, __ATOMIC_ACQUIRE);
}

/* Run the callbacks of marks (delivered, upto]. Return how many reported RK_BUSY. */
static int deliver(struct rk_gpu_notifier *n, uint64_t upto, bool via_poll)
{
	const struct slot *sl;
	uint64_t cookie;
	int busy = 0;

	if (upto > n->issued)
		upto = n->issued;	/* cannot happen: the word only carries issued marks */
	while (n->delivered < upto) {
		sl = &n->slots[(n->delivered + 1) % RK_GPU_NOTIFY_SLOTS];
		cookie = sl->cookie;
		/* advance first: the callback may mark again and reuse this slot */
		n->delivered++;
		n->last_look = 0;
		if (via_poll)
			n->st.via_poll++;
		else
			n->st.via_wake++;
		if (n->cb(n, cookie, n->arg) == RK_BUSY)
			busy++;
	}
	return busy;
}

/* ---- the loop source: the fast path -------------------------------------------- */

static const struct slot *oldest(const struct rk_gpu_notifier *n)
{
	return &n->slots[(n->delivered + 1) % RK_GPU_NOTIFY_SLOTS];
}

/* When the oldest outstanding mark started: its mark, or the delivery before it. */
static uint64_t oldest_start(const struct rk_gpu_notifier *n)
{
	uint64_t t = oldest(n)->t_mark;

	return t > n->last_deliver ? t : n->last_deliver;
}

/*
 * Learn from the oldest mark, seen done at @now. A flip seen between two close
 * looks of a spinning loop is a sample (their midpoint); one seen after the
 * loop slept, or after a long gap, only bounds the duration from above.
 */
static void pred_learn(struct rk_gpu_notifier *n, uint64_t now)
{
	uint64_t start = oldest_start(n), d, gap, close;

	if (now <= start) {
		/* seen in the iteration that marked (the work was that short):
		 * the iteration's cached time predates the mark */
		now = rk__loop_clock(n->loop);
		if (now <= start)
			now = start + 1;
	}
	d = now - start;
	gap = n->last_look && n->last_look > start ? now - n->last_look : d;
	close = d / 4 > 10000 ? d / 4 : 10000;
	if (gap <= close && !rk__loop_after_park(n->loop)) {
		rk__pred_sample(&n->pred, d - gap / 2);
	} else {
		n->st.pred_bounded++;
		rk__pred_bound(&n->pred, d);
	}
}

/*
 * The loop time by which the oldest outstanding mark should be done, or 0:
 * nothing outstanding, lazy marks (nobody waits for them), a host function
 * already covers it, the predictor is cold, or the prediction is overdue (then
 * arm() must make sure of a wake).
 */
static uint64_t predict_at(const struct rk_gpu_notifier *n, uint64_t now)
{
	if (!n->use_poll || n->lazy || n->delivered == n->issued || n->wake_upto > n->delivered)
		return 0;
	return rk__pred_expect(&n->pred, oldest_start(n), now);
}

static int src_poll(struct rk_source *s, uint64_t now)
{
	struct rk_gpu_notifier *n = s->data;
	uint64_t w;
	int busy;

	if (!n->use_poll || n->delivered == n->issued)
		return 0;
	w = word_load(n);
	if (w <= n->delivered) {
		n->last_look = now;
		return 0;
	}
	pred_learn(n, now);
	busy = deliver(n, w, true);
	n->last_deliver = now;
	return busy;
}

static uint64_t src_expect(struct rk_source *s, uint64_t now)
{
	return predict_at(s->data, now);
}

/* The wake path for marks already enqueued: a host function after the event's last record. */
static int arm_wake_now(struct rk_gpu_notifier *n)
{
	uint64_t seq = n->issued;
	struct slot *sl = &n->slots[seq % RK_GPU_NOTIFY_SLOTS];
	int ret;

	if (sl->post_inflight)
		return 0;	/* its host function is on the way */
	ret = n->ops->host_fn(n->dev, sl);
	if (ret) {
		n->broken = true;
		return ret;
	}
	sl->post_inflight = true;
	n->posts_inflight++;
	n->wake_upto = seq;
	n->st.wake_armed_late++;
	return 0;
}

/*
 * Before the loop blocks. Report what the word already shows. A mark with a
 * host function behind it, or a prediction the loop honours (it sleeps no
 * longer than that), needs nothing more, nor does a lazy mark when the wait
 * has a timeout; an AUTO mark without any of these gets its host function now.
 * POLL without a prediction keeps the loop from blocking.
 */
static int src_arm(struct rk_source *s)
{
	struct rk_gpu_notifier *n = s->data;

	if (!n->use_poll || n->delivered == n->issued)
		return 0;
	if (word_load(n) > n->delivered)
		return 1;
	if (n->wake_upto > n->delivered)
		return 0;
	if (n->lazy && rk__loop_parking_ns(n->loop) != UINT64_MAX) {
		n->st.lazy_sleeps++;	/* seen when the wait ends */
		return 0;
	}
	if (rk_loop_predicts(n->loop) && predict_at(n, rk_loop_now(n->loop)))
		return 0;
	if (n->use_wake)
		return arm_wake_now(n) ? 1 : 0;
	return 1;
}

static const struct rk_source_ops notifier_source_ops = {
	.name = "gpu-notifier",
	.poll = src_poll,
	.arm = src_arm,
	.expect = src_expect,
};

/* ---- the wake path ------------------------------------------------------------------ */

/*
 * Runs on a device thread (a CUDA worker, the emulated device's) once the
 * event (the mark) has completed. It may make no device call, must not block
 * or allocate: it only pushes the slot's preallocated post (a lock-free push
 * plus, if the loop sleeps, one eventfd write). The notifier outlives it:
 * destroy's close op waits for every host function.
 */
void rk__notify_fire(void *token)
{
	struct slot *sl = token;

	rk_loop_post(sl->loop, &sl->post);
}

static void release(struct rk_gpu_notifier *n)
{
	rk_loop_remove_source(n->loop, &n->src);
	free(n);
}

static enum rk_activity post_cb(struct rk_post *p)
{
	struct slot *sl = p->data;
	struct rk_gpu_notifier *n = sl->n;
	int busy;

	sl->post_inflight = false;
	n->posts_inflight--;
	if (n->closing) {
		if (!n->posts_inflight)
			release(n);
		return RK_IDLE;
	}
	if (sl->seq <= n->delivered) {
		n->st.wake_late++;	/* the fast path was first */
		return RK_IDLE;
	}
	busy = deliver(n, sl->seq, false);
	n->last_deliver = rk_loop_now(n->loop);
	return busy ? RK_BUSY : RK_IDLE;
}

/* ---- the API ------------------------------------------------------------------------ */

int rk_gpu_notifier_mark(struct rk_gpu_notifier *n, uint64_t cookie)
{
	uint64_t seq = n->issued + 1;
	struct slot *sl = &n->slots[seq % RK_GPU_NOTIFY_SLOTS];
	bool wrote = false, hostfn;
	int ret;

	if (n->broken || n->closing)
		return -ESHUTDOWN;
	if (seq - n->delivered > RK_GPU_NOTIFY_SLOTS || sl->post_inflight) {
		n->st.refused++;
		return -EAGAIN;
	}
	sl->seq = seq;
	sl->cookie = cookie;
	if (n->use_poll) {
		/* first, so the fast path is queued as early as possible */
		ret = n->ops->write_word(n->dev, seq);
		if (ret)
			return ret;	/* nothing enqueued */
		wrote = true;
	}
	/* AUTO with a warm predictor, or lazy: the event only (for arm_wake_now()) */
	hostfn = n->use_wake && (!n->use_poll || (!n->lazy && n->pred.n < RK__PRED_WARM) ||
				 !rk_loop_predicts(n->loop));
	if (n->use_wake) {
		ret = n->ops->record(n->dev);
		if (!ret && hostfn)
			ret = n->ops->host_fn(n->dev, sl);
		if (ret) {
			if (wrote) {
				/* the word will reach seq: keep the sequence whole */
				n->issued = seq;
				n->st.marks++;
			}
			n->broken = true;
			return ret;
		}
		if (hostfn) {
			sl->post_inflight = true;
			n->posts_inflight++;
			n->wake_upto = seq;
		} else {
			n->st.predicted++;
		}
	}
	sl->t_mark = rk__loop_clock(n->loop);
	n->issued = seq;
	n->st.marks++;
	if (n->issued - n->delivered > n->st.max_outstanding)
		n->st.max_outstanding = (uint32_t)(n->issued - n->delivered);
	return 0;
}

void rk_gpu_notifier_set_lazy(struct rk_gpu_notifier *n, bool lazy)
{
	n->lazy = lazy;
}

int rk_gpu_notifier_set_mode(struct rk_gpu_notifier *n, enum rk_gpu_notify_mode mode)
{
	if (mode != RK_GPU_NOTIFY_AUTO && mode != RK_GPU_NOTIFY_POLL && mode != RK_GPU_NOTIFY_WAKE)
		return -EINVAL;
	if (!n->all_paths)
		return -EOPNOTSUPP;
	if (n->issued != n->delivered)
		return -EBUSY;
	n->mode = mode;
	n->use_poll = mode != RK_GPU_NOTIFY_WAKE;
	n->use_wake = mode != RK_GPU_NOTIFY_POLL;
	return 0;
}

unsigned int rk_gpu_notifier_outstanding(const struct rk_gpu_notifier *n)
{
	return (unsigned int)(n->issued - n->delivered);
}

enum rk_gpu_notify_mode rk_gpu_notifier_mode(const struct rk_gpu_notifier *n)
{
	return n->mode;
}

size_t rk_gpu_notifier_stats(const struct rk_gpu_notifier *n, struct rk_gpu_notifier_stats *out,
			     size_t size)
{
	struct rk_gpu_notifier_stats st = n->st;

	st.outstanding = (uint32_t)(n->issued - n->delivered);
	st.pred_mean_ns = n->pred.mean;
	st.pred_dev_ns = n->pred.dev;
	st.pred_q_ns = n->pred.q;
	return rk__stats_copy(out, size, &st, sizeof(st));
}

int rk__notifier_rank(const struct rk_gpu_notifier *n)
{
	return n->rank;
}

int rk__notifier_create(struct rk_loop *loop, enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb,
			void *arg, const struct rk__notify_dev_ops *ops, void *dev, uint64_t *word,
			bool all_paths, struct rk_gpu_notifier **out)
{
	struct rk_gpu_notifier *n;
	int ret, i;

	if (!loop || !cb || !ops || !out ||
	    (mode != RK_GPU_NOTIFY_AUTO && mode != RK_GPU_NOTIFY_POLL &&
	     mode != RK_GPU_NOTIFY_WAKE) || (mode != RK_GPU_NOTIFY_WAKE && !word))
		return -EINVAL;
	n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	n->loop = loop;
	n->rank = rk__loop_rank(loop);
	n->ops = ops;
	n->dev = dev;
	n->word = word;
	n->all_paths = all_paths;
	n->cb = cb;
	n->arg = arg;
	n->mode = mode;
	n->use_poll = mode != RK_GPU_NOTIFY_WAKE;
	n->use_wake = mode != RK_GPU_NOTIFY_POLL;
	for (i = 0; i < RK_GPU_NOTIFY_SLOTS; i++) {
		n->slots[i].n = n;
		n->slots[i].loop = loop;
		n->slots[i].post.cb = post_cb;
		n->slots[i].post.data = &n->slots[i];
	}
	n->src.ops = &notifier_source_ops;
	n->src.data = n;
	ret = rk_loop_add_source(loop, &n->src);
	if (ret) {
		free(n);
		return ret;
	}
	*out = n;
	return 0;
}

int rk_gpu_notifier_destroy(struct rk_gpu_notifier *n, bool force)
{
	bool pending = false, sync;
	int ret;

	if (!n)
		return 0;
	if (n->issued != n->delivered && !force)
		return -EBUSY;
	/* forced: the device must not write into the word after it is freed */
	sync = n->issued != n->delivered;
	n->delivered = n->issued;
	n->closing = true;
	/* every host function has run after this: their posts are on the loop's inbox */
	ret = n->ops->close(n->dev, sync, &pending);
	n->word = NULL;
	n->use_poll = false;
	if (pending)
		rk_loop_remove_source(n->loop, &n->src);	/* a host function may still run:
								 * keep its memory forever */
	else if (!n->posts_inflight)
		release(n);
	/* else the last post_cb() releases it */
	return ret;
}
