/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's rounds that run without the loop (toy_cpu.c is the
 * backend; toy_cpu_int.h what the two files share).
 *
 * Resident rounds (RK_RESIDENT, rk_sched.h "Round epochs"; toy_resident_on()):
 * while round N runs, launch() pre-arms round N+1 by queueing an armed job
 * behind it. The worker takes it and waits on the scheduler's epoch (spin,
 * then futex) instead of on the queue, reads the descriptor from the region
 * and computes as soon as the leader sends or the follower receives the
 * ROUND, before launch() has run. Which path a round takes is decided twice
 * from the same facts: launch() on the loop and the worker each check that
 * the epoch is the armed one, that the region holds its descriptor and that
 * the round fits the armed job's buffers (the pre-armed shape: the largest
 * round seen, at least ARM_STREAMS x ARM_TOKENS x ARM_OUTS). When it does
 * not, the worker hands the armed job back unused and launch() queues the
 * round as a posted job behind it (counted: resident_mismatch). The worker
 * allocates nothing on the resident path. Retires the loop makes between
 * rounds happen before the next publication (release), so the worker sees
 * them after its acquire.
 *
 * Same-host followers (RK_BACKEND_SHARED_EPOCH): the region may be the
 * leader's, which holds round N as soon as the leader sends it, so the armed
 * job can run N before this rank's loop has the ROUND: its post then comes
 * back before launch(N), which finds the job done (early) and reports it, and
 * nothing runs twice. The loop's retires for N may then come while the worker
 * computes N (from a region the loop did not publish), so the stream table is
 * under tab_mu whenever the loop touches it; a stream retired at N is not in N.
 *
 * The lane: on a same-host link a follower's worker sends its partials itself,
 * on the link's lane (rk_link_lane_open(), RK_LANE), before it posts the job:
 * the follower's loop is then not on the round's path (the post only reports);
 * a frame the lane cannot take goes by the loop. A round's partials go once,
 * by one of the two (job->lane_sent).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "toy_cpu_int.h"

/* the smallest pre-armed shape: a decode batch of 8 plain streams */
#define ARM_STREAMS 8u
#define ARM_TOKENS 64u
#define ARM_OUTS 8u

/* toy_params.worker_spin_us for a rank of a @size-rank world under @mode, ns */
static uint64_t worker_spin_ns(uint32_t us, enum rk_wait_mode mode, uint32_t size)
{
	if (us == UINT32_MAX)
		return UINT64_MAX;
	if (us != TOY_WORKER_SPIN_AUTO)
		return (uint64_t)us * 1000;
	if (mode == RK_WAIT_SPIN)
		return UINT64_MAX;
	return toy_cpus_spare(size, mode) ? TOY_WORKER_SPIN_US * 1000ull : 0;
}

void toy__resident_init(struct toy_cpu *b, const struct toy_params *p)
{
	const struct rk_config *lc = rk_loop_config(b->loop);

	/*
	 * The armed worker's spin on the epoch (worker_spin_ns()): a worker that
	 * sleeps costs the leader a FUTEX_WAKE per round on the round's path, one
	 * per follower; one that spins takes a core, which a machine with a CPU
	 * per thread has to spare and a smaller one needs for its loops
	 * (docs/RESIDENT-SHM.md).
	 */
	b->spin_ns = worker_spin_ns(p->worker_spin_us, lc->wait.mode, b->size);
	b->res_wait = lc->wait.mode;
	b->hook = p->test_hook;
	b->hook_arg = p->test_arg;
	b->shape_st = ARM_STREAMS;
	b->shape_tok = ARM_TOKENS;
	b->shape_out = ARM_OUTS;
	atomic_init(&b->halt, false);
}

struct rk_epoch *toy__resident_epoch(struct toy_cpu *b, struct rk_sched *s)
{
	/* the scheduler's mode is known from its first launch on: decided once */
	if (!b->res_set && s) {
		b->res_set = true;
		b->res_on = toy_resident_on(rk_sched_resident(s), b->size, b->res_wait);
	}
	return b->res_on ? rk_sched_epoch(s) : NULL;
}

/* ---- the worker ------------------------------------------------------------------- */

/* Outputs of round @v: one per input batch and one per draft, per stream. */
static uint64_t view_outs(const struct rk_wire_round *v)
{
	return (uint64_t)v->n_streams + v->n_draft_total;	/* summed by the decode */
}

/* Round @v fits armed job @a's buffers: the worker would allocate nothing. */
static bool shape_fits(const struct toy_job *a, const struct rk_wire_round *v, uint32_t V)
{
	return v->n_streams <= a->r.st_cap && v->n_tok_total <= a->r.tok_cap &&
	       view_outs(v) * V <= a->out_cap;
}

/*
 * Worker: the armed job @job waits for its round on the epoch and computes it
 * from the region's descriptor. False when the round is the launch path's
 * (stopped, disarmed, not in the region, or a shape the job does not fit).
 */
static bool run_armed(struct toy_cpu *b, struct toy_job *job)
{
	struct rk_wire_round v;
	uint32_t kicks = rk_epoch_kicks(b->ep), flags;
	uint64_t id = 0, t0;
	int64_t n;
	int ret;

	for (;;) {
		/* kicks read before the flags: a kick after them ends the wait */
		if (atomic_load_explicit(&job->disarm, memory_order_acquire) ||
		    atomic_load_explicit(&b->halt, memory_order_acquire))
			return false;
		ret = rk_epoch_wait(b->ep, job->want, b->spin_ns, &kicks);
		if (ret >= 0)
			break;
	}
	job->slept = ret == 1;
	n = rk_epoch_read(b->ep, &id, &flags, b->desc, b->desc_max);
	if (n < 0 || id != job->want || rk_wire_decode_round(b->desc, (size_t)n, &v) ||
	    !shape_fits(job, &v, b->m.V))
		return false;	/* launch() decided the same from the same facts */
	/*
	 * Release: before the partials can reach the leader (the lane), and so
	 * before the region can hold a later round: a launch() that finds the
	 * region past @want sees this and takes the job (armed_takes()).
	 */
	if (b->hook)
		b->hook(b->hook_arg, TOY_HOOK_WORKER_TAKES, b->ep, job->want);
	atomic_store_explicit(&job->took, true, memory_order_release);
	t0 = now_ns();
	/* it fits: toy_round_copy() only checks and copies */
	job->status = toy_round_copy(&job->r, &v, b->m.V);
	if (!job->status) {
		pthread_mutex_lock(&b->tab_mu);
		job->status = toy_table_exec(&b->tab, &job->r, job->out);
		pthread_mutex_unlock(&b->tab_mu);
	}
	job->ns = now_ns() - t0;
	return true;
}

bool toy__resident_run(struct toy_cpu *b, struct toy_job *job)
{
	if (run_armed(b, job))
		return true;
	pthread_mutex_lock(&b->mu);
	job->next = b->unused;
	b->unused = job;
	pthread_mutex_unlock(&b->mu);
	return false;
}

/* ---- arming (loop thread) ----------------------------------------------------------- */

/* Armed jobs the worker handed back go to the free list. */
static void reclaim_unused(struct toy_cpu *b)
{
	struct toy_job *job, *next;

	pthread_mutex_lock(&b->mu);
	job = b->unused;
	b->unused = NULL;
	pthread_mutex_unlock(&b->mu);
	for (; job; job = next) {
		next = job->next;
		job->armed = false;
		toy__job_put(b, job);
	}
}

static void resident_fallback(struct toy_cpu *b, const char *why, int err)
{
	if (!b->res_logged)
		fprintf(stderr, "toy: rank %u: resident rounds fall back to the launch path: %s%s%s\n",
			b->rank, why, err ? ": " : "", err ? rk_strerror(err) : "");
	b->res_logged = true;
	b->stats.resident_fallbacks++;
}

static int grow_buf(void **p, uint32_t *cap, uint64_t need, size_t size)
{
	void *q;

	if (need <= *cap)
		return 0;
	if (need > UINT32_MAX)
		return -ENOMEM;
	q = realloc(*p, (size_t)need * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = (uint32_t)need;
	return 0;
}

/*
 * Pre-arm round @want: an armed job, with buffers of the shape seen so far,
 * queued behind the rounds already queued. A failure leaves the round to the
 * launch path (one log line, a counter).
 */
static void arm_one(struct toy_cpu *b, uint64_t want)
{
	struct toy_job *job;
	size_t out_need;
	uint32_t out_cap;
	int ret;

	job = toy__job_get(b);
	if (!job) {
		resident_fallback(b, "no job", -ENOMEM);
		b->res_on = false;
		return;
	}
	out_need = (size_t)b->shape_out * b->m.V;
	out_cap = job->out_cap > UINT32_MAX ? UINT32_MAX : (uint32_t)job->out_cap;
	ret = grow_buf((void **)&job->r.st, &job->r.st_cap, b->shape_st, sizeof(*job->r.st));
	if (!ret)
		ret = grow_buf((void **)&job->r.tok, &job->r.tok_cap, b->shape_tok,
			       sizeof(*job->r.tok));
	if (!ret && out_need > job->out_cap) {
		ret = grow_buf((void **)&job->out, &out_cap, out_need, sizeof(*job->out));
		if (!ret)
			job->out_cap = out_cap;
	}
	if (ret) {
		toy__job_put(b, job);
		resident_fallback(b, "no memory for the pre-armed shape", ret);
		b->res_on = false;
		return;
	}
	job->armed = true;
	job->want = want;
	job->slept = false;
	job->orphan = false;
	job->launched = false;
	job->early = false;
	atomic_store_explicit(&job->disarm, false, memory_order_relaxed);
	atomic_store_explicit(&job->took, false, memory_order_relaxed);
	job->s = NULL;
	toy__queue_job(b, job);
	b->armed[b->n_armed++] = job;
}

/* Keep TOY_ARM_DEPTH rounds after @after pre-armed on @ep (arm_one()). */
static void arm(struct toy_cpu *b, struct rk_epoch *ep, uint64_t after)
{
	if (!b->res_on || !ep || b->aborted)
		return;
	if (!b->ep) {
		b->desc_max = rk_epoch_desc_max(ep);
		b->desc = malloc(b->desc_max);
		if (!b->desc) {
			resident_fallback(b, "no descriptor buffer", -ENOMEM);
			b->res_on = false;
			return;
		}
		rk_epoch_hold(ep);
		b->ep = ep;
	} else if (ep != b->ep) {
		return;		/* another scheduler's region: the launch path for it */
	}
	reclaim_unused(b);
	while (b->n_armed < TOY_ARM_DEPTH && b->res_on)
		arm_one(b, b->n_armed ? b->armed[b->n_armed - 1]->want + 1 : after + 1);
}

/*
 * Whether the armed job @a takes round @round (launch()): done early, or
 * taken (the worker read this round from the region and it fitted; its
 * partials may have gone on the lane, and the region may hold a later round
 * already); else the worker's facts: the region holds this round's
 * descriptor (-ENOSPC: one is there, not copied), it fits the worker's copy
 * and the armed buffers.
 */
static bool armed_takes(const struct toy_cpu *b, struct rk_epoch *ep, struct toy_job *a,
			const struct rk_wire_round *round)
{
	int64_t len = rk_wire_round_size(round->n_streams, round->n_tok_total);
	uint64_t id = 0;

	if (ep != b->ep || a->want != round->round_id)
		return false;
	if (a->early || atomic_load_explicit(&a->took, memory_order_acquire))
		return true;
	if (len < 0 || len > b->desc_max)
		return false;
	if (b->hook && shape_fits(a, round, b->m.V))
		b->hook(b->hook_arg, TOY_HOOK_LOOP_WINDOW, ep, round->round_id);
	if (rk_epoch_read(ep, &id, NULL, NULL, 0) == -ENOSPC && id == round->round_id)
		return shape_fits(a, round, b->m.V);
	/*
	 * The region moved past this round while we looked (this thread
	 * preempted between the two reads): the leader completed it, so our
	 * share reached it, which only the worker sends before our launch(); it
	 * set took first, and the read (acquire) that saw the later epoch makes
	 * that store visible now. Without this second look the round was posted
	 * again and ran twice (-EPROTO).
	 */
	return id > round->round_id && atomic_load_explicit(&a->took, memory_order_acquire);
}

struct toy_job *toy__resident_take(struct toy_cpu *b, struct rk_epoch *ep,
				   const struct rk_wire_round *round)
{
	struct toy_job *a;
	unsigned int i;
	bool kick = false;

	if (!b->n_armed)
		return NULL;
	a = b->armed[0];
	if (armed_takes(b, ep, a, round)) {
		for (i = 1; i < b->n_armed; i++)
			b->armed[i - 1] = b->armed[i];
		b->n_armed--;
		return a;
	}
	/* the launch path: the oldest hands itself back (same check), the rest
	 * would wait ahead of the posted round */
	b->stats.resident_mismatch++;
	for (i = 0; i < b->n_armed; i++) {
		if (b->armed[i]->early) {
			/* it ran another round's worth: back, unused (toy__resident_back()
			 * drops those that come back later) */
			b->armed[i]->armed = false;
			b->armed[i]->early = false;
			toy__job_put(b, b->armed[i]);
			continue;
		}
		if (rk_epoch_current(b->ep) < b->armed[i]->want) {
			/* release: the flag before the kick's count (run_armed() reads
			 * the count, then the flag) */
			atomic_store_explicit(&b->armed[i]->disarm, true, memory_order_release);
			kick = true;
		}
	}
	b->n_armed = 0;
	if (kick)
		rk_epoch_kick(b->ep);
	return NULL;
}

void toy__resident_abandon(struct toy_cpu *b, struct toy_job *job)
{
	if (!job)
		return;
	if (job->early) {
		/* back already: no post will bring it to toy__resident_back() */
		job->armed = false;
		job->early = false;
		toy__job_put(b, job);
		return;
	}
	/* the worker computes it anyway: dropped when it comes back */
	job->orphan = true;
	b->orphans++;
}

static void shape_grow(struct toy_cpu *b, const struct rk_wire_round *round)
{
	uint64_t outs = view_outs(round);

	if (round->n_streams > b->shape_st)
		b->shape_st = round->n_streams;
	if (round->n_tok_total > b->shape_tok)
		b->shape_tok = round->n_tok_total;
	if (outs > b->shape_out)
		b->shape_out = outs > UINT32_MAX ? UINT32_MAX : (uint32_t)outs;
}

int toy__resident_launched(struct toy_cpu *b, struct rk_epoch *ep, struct toy_job *job,
			   const struct rk_wire_round *round)
{
	/* a follower's worker runs it from the region and sends its partials on
	 * the lane: the loop only reaps the report */
	bool off_loop = job->armed && b->rank != 0 &&
			atomic_load_explicit(&b->lane, memory_order_relaxed);

	if (job->early)
		rk_loop_post(b->loop, &job->post);	/* done: reported from the loop */
	shape_grow(b, round);
	arm(b, ep, round->round_id);
	return off_loop ? RK_LAUNCH_OFF_LOOP : 0;
}

/* @job is one of the armed jobs launch() may still take. */
static bool armed_holds(const struct toy_cpu *b, const struct toy_job *job)
{
	unsigned int i;

	for (i = 0; i < b->n_armed; i++)
		if (b->armed[i] == job)
			return true;
	return false;
}

bool toy__resident_back(struct toy_cpu *b, struct toy_job *job, enum rk_activity *act)
{
	if (job->orphan) {
		/* its launch failed after the worker had taken it: nobody waits */
		job->orphan = false;
		job->armed = false;
		b->orphans--;
		toy__job_put(b, job);
		*act = RK_BUSY;
		return true;
	}
	if (!job->launched) {
		/* ran from the shared region before its launch(): launch() reports
		 * it (early), unless its round went to the launch path meanwhile */
		if (!armed_holds(b, job)) {
			job->armed = false;
			toy__job_put(b, job);
			*act = RK_BUSY;
			return true;
		}
		job->early = true;
		/* its partials went on the lane: launch() only reports it */
		*act = job->lane_sent ? RK_IDLE : RK_BUSY;
		return true;
	}
	b->stats.resident++;
	b->stats.resident_sleeps += job->slept;
	b->stats.resident_early += job->early;
	job->armed = false;
	job->early = false;
	return false;
}

void toy__resident_halt(struct toy_cpu *b)
{
	/* halt before the kick: an armed wait that sees the kick sees halt */
	atomic_store_explicit(&b->halt, true, memory_order_release);
	if (b->ep)
		rk_epoch_kick(b->ep);
}

void toy__resident_fini(struct toy_cpu *b)
{
	struct toy_job *job;
	unsigned int i;

	/* done early for a round never launched (the scheduler stopped): ours */
	for (i = 0; i < b->n_armed; i++)
		if (b->armed[i]->early)
			toy__job_free(b->armed[i]);
	while ((job = b->unused)) {
		b->unused = job->next;
		toy__job_free(job);
	}
	rk_epoch_release(b->ep);
	free(b->desc);
	rk_lane_close(atomic_load(&b->lane));	/* the worker is gone */
}

/* ---- the lane (a follower on a same-host link) --------------------------------------- */

void toy__lane_open(struct toy_cpu *b)
{
	struct rk_link *link;
	struct rk_lane *ln;

	if (atomic_load_explicit(&b->lane, memory_order_relaxed))
		return;
	link = rk_world_link(b->w, 0);
	if (!link || rk_link_lane_open(link, &ln))
		return;	/* not on shared memory (yet), or RK_LANE=0: the loop sends */
	/* release: the lane's state before the pointer the worker reads */
	atomic_store_explicit(&b->lane, ln, memory_order_release);
}

void toy__lane_send(struct toy_cpu *b, struct toy_job *job)
{
	struct rk_lane *ln = atomic_load_explicit(&b->lane, memory_order_acquire);
	uint64_t len = toy__partials_len(b, job);
	uint8_t *p;
	int ret;

	job->lane_sent = false;
	if (!ln || job->status)
		return;
	/* past rk_lane_max() the reservation fails (-RK_ETOOBIG): the loop sends */
	p = len <= UINT32_MAX ? rk_lane_reserve(ln, (uint32_t)len, &ret) : NULL;
	if (p) {
		toy__partials_encode(b, job, p);
		ret = rk_lane_commit(ln, RK_FRAME_USER, 0, (uint32_t)len);
	}
	if (!p || ret) {
		atomic_fetch_add_explicit(&b->lane_refused, 1, memory_order_relaxed);
		return;
	}
	job->lane_sent = true;
	atomic_fetch_add_explicit(&b->lane_sent, 1, memory_order_relaxed);
}
