/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CPU backend: struct rk_backend_ops for every rank.
 *
 * Threads: launch() copies the round and queues it for one worker thread (the
 * stand-in for a GPU stream) and returns. The worker owns the stream table
 * while a round is queued or running; it computes the rank's partial logits
 * and posts the job back to the loop (the job carries its own struct rk_post:
 * nothing is allocated on that path). Everything else runs on the loop thread.
 *
 * Resident rounds (RK_RESIDENT, rk_sched.h "Round epochs"): while round N
 * runs, launch() pre-arms round N+1 by queueing an armed job behind it. The
 * worker takes it and waits on the scheduler's epoch (spin, then futex)
 * instead of on the queue, reads the descriptor from the region and computes
 * as soon as the leader sends or the follower receives the ROUND, before
 * launch() has run. Which path a round takes is decided twice from the same
 * facts: launch() on the loop and the worker each check that the epoch is the
 * armed one, that the region holds its descriptor and that the round fits the
 * armed job's buffers (the pre-armed shape: the largest round seen, at least
 * ARM_STREAMS x ARM_TOKENS x ARM_OUTS). When it does not, the worker hands
 * the armed job back unused and launch() queues the round as a posted job
 * behind it (counted: resident_mismatch). The worker allocates nothing on
 * the resident path. Retires the loop makes between rounds happen before the
 * next publication (release), so the worker sees them after its acquire.
 *
 * Same-host followers (RK_BACKEND_SHARED_EPOCH): the region may be the
 * leader's, which holds round N as soon as the leader sends it, so the armed
 * job can run N before this rank's loop has the ROUND: its post then comes
 * back before launch(N), which finds the job done (early) and reports it, and
 * nothing runs twice. The loop's retires for N may then come while the worker
 * computes N (from a region the loop did not publish), so the stream table is
 * under tab_mu whenever the loop touches it; a stream retired at N is not in N.
 *
 * Reduction: a follower sends its partials to the leader in one USER frame
 * tagged TOY_TAG (payload after the USER header: u64 round_id, u32 n_outputs,
 * u32 V, then n_outputs * V int32, all little-endian) and reports completion.
 * On a same-host link the worker sends that frame itself, on the link's lane
 * (rk_link_lane_open(), RK_LANE), before it posts the job: the follower's loop
 * is then not on the round's path (the post only reports); a frame the lane
 * cannot take goes by the loop as before. A round's partials go once, by one
 * of the two (job->lane_sent);
 * the leader sums its own partials and every follower's (int32, so the order
 * does not matter) and reports completion once all T have arrived. token()
 * then picks from the sums.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "le.h"
#include "toy.h"

#define PARTIAL_HDR 16u	/* round_id, n_outputs, V */
/* the smallest pre-armed shape: a decode batch of 8 plain streams */
#define ARM_STREAMS 8u
#define ARM_TOKENS 64u
#define ARM_OUTS 8u
/*
 * Rounds armed ahead: two, so the worker that finishes round N finds N+1's
 * armed job already queued (queued by launch(N-1)) and goes straight to the
 * epoch, instead of sleeping on the queue until launch(N) queues it.
 */
#define ARM_DEPTH 2u

struct toy_job {
	struct rk_post post;
	struct toy_cpu *b;
	struct rk_sched *s;	/* the round's completion target (NULL: only counted) */
	struct toy_round r;
	int32_t *out;		/* r.n_out * V partial logits */
	size_t out_cap;		/* elements */
	int status;
	uint64_t ns;
	struct toy_job *next;
	/* resident: set by the loop before the job is queued */
	bool armed;		/* waits on the epoch for round @want, not on the queue */
	uint64_t want;
	atomic_bool disarm;	/* the loop gave round @want to the launch path */
	atomic_bool took;	/* worker: it read round @want from the region and runs it */
	bool orphan;		/* loop: computed for a launch that failed; dropped */
	bool launched;		/* loop: launch() has run for its round */
	bool early;		/* loop: back from the worker before that launch() */
	bool slept;		/* worker: it slept on the futex before the epoch came */
	bool lane_sent;		/* worker: its partials went on the lane */
};

struct toy_cpu {
	struct rk_world *w;
	struct rk_loop *loop;
	uint32_t rank, size;
	struct toy_model m;
	struct toy_table tab;	/* the worker's while inflight > 0, else the loop's;
				 * changed under tab_mu (see the top of the file) */
	pthread_mutex_t tab_mu;
	struct toy_reports reports;

	/* the worker's queue */
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct toy_job *qhead, *qtail;	/* under mu */
	bool stop;			/* under mu */
	struct toy_job *unused;		/* under mu: armed jobs the worker handed back */
	atomic_bool halt;		/* destroy: an armed wait ends */
	/* follower: the lane the worker sends partials on (set by the loop, read
	 * by the worker; used by the worker alone), and its counts */
	_Atomic(struct rk_lane *) lane;
	atomic_uint_fast64_t lane_sent, lane_refused;

	/* resident rounds: the loop's, and read by the worker once armed */
	bool res_on;			/* RK_RESIDENT is not off */
	struct rk_epoch *ep;		/* the region armed jobs wait on (a reference) */
	uint8_t *desc;			/* the worker's copy of a descriptor, desc_max bytes */
	uint32_t desc_max;
	uint64_t spin_ns;		/* the worker spins this long before the futex */
	void (*hook)(void *, int, const struct rk_epoch *, uint64_t);	/* toy_params.test_hook */
	void *hook_arg;
	struct toy_job *armed[ARM_DEPTH];	/* loop: armed jobs the worker holds, oldest first */
	unsigned int n_armed;
	uint32_t shape_st, shape_tok, shape_out;	/* the largest round seen */
	unsigned int orphans;		/* computed for launches that failed, not back yet */
	bool res_logged;

	/* loop thread */
	struct toy_job *free_jobs;
	unsigned int inflight;		/* launched, not yet back through the post */
	uint64_t *retire_q;		/* retire() calls that came while inflight > 0 */
	uint32_t n_retire, retire_cap;
	struct toy_cpu_stats stats;

	int aborted;			/* toy_cpu_abort(): later launches fail with it */

	/* leader */
	bool launched_valid;
	uint64_t launched;		/* the last round launched */
	struct rk_sched *target;	/* ...and its completion target */
	struct toy_job *cur;		/* the last round computed here: token() reads it */
	bool acc_valid, acc_done;	/* acc holds round acc_round; done: reported */
	int acc_status;
	uint64_t acc_round;
	uint32_t acc_n_out, acc_have;
	int32_t *acc;			/* the sums, acc_n_out * V */
	size_t acc_cap;
	bool *acc_from;			/* [size]: whose partials are in */
};

void toy_params_init(struct toy_params *p)
{
	p->V = TOY_DEF_V;
	p->H = TOY_DEF_H;
	p->seed = 1;
	p->worker_spin_us = TOY_WORKER_SPIN_AUTO;
	p->test_hook = NULL;
	p->test_arg = NULL;
}

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

/* The end of round @round_id on this rank. Call last: it may re-enter launch(). */
static void report(struct toy_cpu *b, struct rk_sched *s, uint64_t round_id, int status)
{
	toy_report(&b->reports, s, round_id, status);
}

/* ---- the worker ------------------------------------------------------------------- */

/* Outputs of round @v: one per input batch and one per draft, per stream. */
static uint64_t view_outs(const struct rk_wire_round *v)
{
	struct rk_wire_stream ws;
	uint64_t out = 0;
	uint32_t i;

	for (i = 0; i < v->n_streams; i++) {
		rk_wire_round_stream(v, i, &ws);
		out += (uint64_t)ws.n_draft + 1;
	}
	return out;
}

/* Round @v fits armed job @a's buffers: the worker would allocate nothing. */
static bool shape_fits(const struct toy_job *a, const struct rk_wire_round *v, uint32_t V)
{
	return v->n_streams <= a->r.st_cap && v->n_tok_total <= a->r.tok_cap &&
	       view_outs(v) * V <= a->out_cap;
}

/*
 * Worker: the armed job @job waits for its round on the epoch and computes it
 * from the region's descriptor. Return: true when it ran (post it), false
 * when the round is the launch path's (stopped, disarmed, not in the region,
 * or a shape the job does not fit): the job goes back unused.
 */
static bool resident_run(struct toy_cpu *b, struct toy_job *job)
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

static void lane_send(struct toy_cpu *b, struct toy_job *job);

static void *worker_main(void *arg)
{
	struct toy_cpu *b = arg;
	struct toy_job *job;
	uint64_t t0;

	pthread_mutex_lock(&b->mu);
	while (!b->stop) {
		job = b->qhead;
		if (!job) {
			pthread_cond_wait(&b->cv, &b->mu);
			continue;
		}
		b->qhead = job->next;
		if (!b->qhead)
			b->qtail = NULL;
		pthread_mutex_unlock(&b->mu);

		if (job->armed) {
			if (!resident_run(b, job)) {
				pthread_mutex_lock(&b->mu);
				job->next = b->unused;
				b->unused = job;
				continue;
			}
		} else {
			t0 = now_ns();
			pthread_mutex_lock(&b->tab_mu);
			job->status = toy_table_exec(&b->tab, &job->r, job->out);
			pthread_mutex_unlock(&b->tab_mu);
			job->ns = now_ns() - t0;
		}
		if (b->rank != 0)
			lane_send(b, job);
		/* the loop owns the job from here; this thread must not touch it */
		rk_loop_post(b->loop, &job->post);

		pthread_mutex_lock(&b->mu);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* ---- jobs (loop thread) ----------------------------------------------------------- */

static enum rk_activity job_done(struct rk_post *p);

static struct toy_job *job_get(struct toy_cpu *b)
{
	struct toy_job *job = b->free_jobs;

	if (job) {
		b->free_jobs = job->next;
		return job;
	}
	job = calloc(1, sizeof(*job));
	if (!job)
		return NULL;
	job->b = b;
	rk_post_init(&job->post, job_done, job);
	return job;
}

static void job_put(struct toy_cpu *b, struct toy_job *job)
{
	job->next = b->free_jobs;
	b->free_jobs = job;
}

static void job_free(struct toy_job *job)
{
	toy_round_fini(&job->r);
	free(job->out);
	free(job);
}

/* ---- leader: the reduction -------------------------------------------------------- */

/* Fail round @id unless it is over already (a late or second failure is dropped). */
static void leader_fail(struct toy_cpu *b, uint64_t id, int err)
{
	if (b->acc_valid && (id < b->acc_round || (id == b->acc_round && b->acc_done)))
		return;
	b->acc_valid = true;
	b->acc_round = id;
	b->acc_done = true;
	b->acc_status = err;
	report(b, b->target, id, err);
}

/*
 * Admit a contribution to round @id from rank @from. Return: 1 to add it,
 * 0 when it is stale (the round is over), -EPROTO (wrong shape, twice from
 * one rank), -ENOMEM.
 */
static int acc_open(struct toy_cpu *b, uint64_t id, uint32_t n_out, uint32_t from)
{
	size_t need = (size_t)n_out * b->m.V;

	if (b->acc_valid && id < b->acc_round)
		return 0;
	if (!b->acc_valid || id > b->acc_round) {
		if (need > b->acc_cap) {
			int32_t *a = realloc(b->acc, need * sizeof(*a));

			if (!a)
				return -ENOMEM;
			b->acc = a;
			b->acc_cap = need;
		}
		memset(b->acc, 0, need * sizeof(*b->acc));
		memset(b->acc_from, 0, b->size * sizeof(*b->acc_from));
		b->acc_valid = true;
		b->acc_round = id;
		b->acc_done = false;
		b->acc_status = 0;
		b->acc_n_out = n_out;
		b->acc_have = 0;
	}
	if (b->acc_done)
		return 0;
	if (n_out != b->acc_n_out || b->acc_from[from])
		return -EPROTO;
	b->acc_from[from] = true;
	return 1;
}

/* The last of the T contributions reports the round. Call last: it may re-enter launch(). */
static void acc_count(struct toy_cpu *b)
{
	if (++b->acc_have < b->size)
		return;
	b->acc_done = true;
	report(b, b->target, b->acc_round, 0);
}

/* Sums wrap as uint32 so a hostile peer cannot cause signed overflow. */
static void acc_add_own(struct toy_cpu *b, const int32_t *p, size_t n)
{
	size_t x;

	for (x = 0; x < n; x++)
		b->acc[x] = (int32_t)((uint32_t)b->acc[x] + (uint32_t)p[x]);
}

static void acc_add_le(struct toy_cpu *b, const uint8_t *p, size_t n)
{
	size_t x;

	for (x = 0; x < n; x++)
		b->acc[x] = (int32_t)((uint32_t)b->acc[x] + get32(p + 4 * x));
}

/* Leader: the last round launched has not been reported (it waits for partials). */
static bool owes_report(const struct toy_cpu *b)
{
	return b->launched_valid &&
	       !(b->acc_valid && b->acc_round == b->launched && b->acc_done);
}

/* ---- follower: partials to the leader ----------------------------------------------- */

/* The partials frame's payload length (USER header included). */
static uint64_t partials_len(const struct toy_cpu *b, const struct toy_job *job)
{
	return 8 + PARTIAL_HDR + (uint64_t)job->r.n_out * b->m.V * 4;
}

/* Write @job's partials frame payload at @p (partials_len() bytes). */
static void partials_encode(const struct toy_cpu *b, const struct toy_job *job, uint8_t *p)
{
	size_t n = (size_t)job->r.n_out * b->m.V;
	uint8_t *d;

	/* the USER header only: it cannot fail with no data and room for it */
	d = p + rk_wire_encode_user(p, 8, TOY_TAG, NULL, 0);
	put64(d, job->r.round_id);
	put32(d + 8, job->r.n_out);
	put32(d + 12, b->m.V);
	d += PARTIAL_HDR;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(d, job->out, n * 4);
#else
	for (size_t x = 0; x < n; x++)
		put32(d + 4 * x, (uint32_t)job->out[x]);
#endif
}

static int send_partials(struct toy_cpu *b, const struct toy_job *job)
{
	struct rk_link *link = rk_world_link(b->w, 0);
	uint64_t len = partials_len(b, job);
	uint8_t *p;
	int ret;

	if (!link)
		return -ENOTCONN;
	if (len > RK_WIRE_MAX_PAYLOAD)
		return -RK_ETOOBIG;
	/* encoded in place in the link's send batch: no copy of the partials */
	p = rk_link_reserve(link, (uint32_t)len, &ret);
	if (!p)
		return ret;
	partials_encode(b, job, p);
	return rk_link_commit(link, RK_FRAME_USER, 0, (uint32_t)len);
}

/*
 * Worker: send @job's partials on the lane, if there is one and it takes
 * them; otherwise the loop sends them (job_done()). Only a computed round.
 */
static void lane_send(struct toy_cpu *b, struct toy_job *job)
{
	struct rk_lane *ln = atomic_load_explicit(&b->lane, memory_order_acquire);
	uint64_t len = partials_len(b, job);
	uint8_t *p;
	int ret;

	job->lane_sent = false;
	if (!ln || job->status)
		return;
	/* past rk_lane_max() the reservation fails (-RK_ETOOBIG): the loop sends */
	p = len <= UINT32_MAX ? rk_lane_reserve(ln, (uint32_t)len, &ret) : NULL;
	if (p) {
		partials_encode(b, job, p);
		ret = rk_lane_commit(ln, RK_FRAME_USER, 0, (uint32_t)len);
	}
	if (!p || ret) {
		atomic_fetch_add_explicit(&b->lane_refused, 1, memory_order_relaxed);
		return;
	}
	job->lane_sent = true;
	atomic_fetch_add_explicit(&b->lane_sent, 1, memory_order_relaxed);
}

/* ---- completion of the worker's job (loop thread) ----------------------------------- */

/* Loop: @job is one of the armed jobs launch() may still take. */
static bool armed_holds(const struct toy_cpu *b, const struct toy_job *job)
{
	unsigned int i;

	for (i = 0; i < b->n_armed; i++)
		if (b->armed[i] == job)
			return true;
	return false;
}

static enum rk_activity job_done(struct rk_post *p)
{
	struct toy_job *job = p->data;
	struct toy_cpu *b = job->b;
	struct rk_sched *s = job->s;
	uint64_t id = job->r.round_id;
	int status = job->status, ret;
	uint32_t i;

	if (job->orphan) {
		/* its launch failed after the worker had taken it: nobody waits */
		job->orphan = false;
		job->armed = false;
		b->orphans--;
		job_put(b, job);
		return RK_BUSY;
	}
	if (job->armed && !job->launched) {
		/* ran from the shared region before its launch(): launch() reports
		 * it (early), unless its round went to the launch path meanwhile */
		if (!armed_holds(b, job)) {
			job->armed = false;
			job_put(b, job);
			return RK_BUSY;
		}
		job->early = true;
		/* its partials went on the lane: launch() only reports it */
		return job->lane_sent ? RK_IDLE : RK_BUSY;
	}
	if (job->armed) {
		b->stats.resident++;
		b->stats.resident_sleeps += job->slept;
		b->stats.resident_early += job->early;
		job->armed = false;
		job->early = false;
	}
	b->inflight--;
	b->stats.rounds++;
	b->stats.outputs += job->r.n_out;
	b->stats.ns_compute += job->ns;
	if (!b->inflight) {
		/* the worker is idle: the table is ours again */
		pthread_mutex_lock(&b->tab_mu);
		for (i = 0; i < b->n_retire; i++)
			toy_table_retire(&b->tab, b->retire_q[i]);
		pthread_mutex_unlock(&b->tab_mu);
		b->n_retire = 0;
	}
	if (b->rank != 0) {
		/* partials that went on the lane leave the loop only the report,
		 * which nobody waits for (no ROUND_DONE for a success) */
		enum rk_activity act = !status && job->lane_sent ? RK_IDLE : RK_BUSY;

		if (!status && !job->lane_sent)
			status = send_partials(b, job);
		job_put(b, job);
		report(b, s, id, status);
		return act;
	}
	if (b->cur)
		job_put(b, b->cur);
	b->cur = job;
	if (status) {
		leader_fail(b, id, status);
		return RK_BUSY;
	}
	ret = acc_open(b, id, job->r.n_out, 0);
	if (ret < 0) {
		leader_fail(b, id, ret);
	} else if (ret > 0) {
		acc_add_own(b, job->out, (size_t)job->r.n_out * b->m.V);
		acc_count(b);
	}
	return RK_BUSY;
}

int toy_cpu_on_frame(struct toy_cpu *b, int peer, const struct rk_wire_hdr *h,
		     const uint8_t *payload)
{
	struct rk_wire_user u;
	uint64_t id;
	uint32_t n_out, V;
	int ret;

	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u) ||
	    u.tag != TOY_TAG)
		return -ENOENT;
	if (b->rank != 0 || peer <= 0 || (uint32_t)peer >= b->size)
		return -EPROTO;
	b->stats.frames_rx++;
	if (u.len < PARTIAL_HDR)
		goto bad;
	id = get64(u.data);
	n_out = get32(u.data + 8);
	V = get32(u.data + 12);
	if (V != b->m.V || u.len != PARTIAL_HDR + (uint64_t)n_out * V * 4)
		goto bad;
	/* partials can only follow a ROUND this leader sent, hence launched */
	if (!b->launched_valid || id > b->launched)
		goto bad;
	ret = acc_open(b, id, n_out, (uint32_t)peer);
	if (ret < 0) {
		leader_fail(b, id, ret);
		return ret;
	}
	if (!ret) {
		b->stats.stale++;
		return RK_BUSY;
	}
	acc_add_le(b, u.data + PARTIAL_HDR, (size_t)n_out * V);
	acc_count(b);
	return RK_BUSY;
bad:
	/* a round waiting for this peer would wait forever: fail it */
	if (b->launched_valid)
		leader_fail(b, b->launched, -EPROTO);
	return -EPROTO;
}

/* ---- the ops -------------------------------------------------------------------------- */

/* Hand @job to the worker, behind what it holds. */
static void queue_job(struct toy_cpu *b, struct toy_job *job)
{
	job->next = NULL;
	pthread_mutex_lock(&b->mu);
	if (b->qtail)
		b->qtail->next = job;
	else
		b->qhead = job;
	b->qtail = job;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
}

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
		job_put(b, job);
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

static void arm_one(struct toy_cpu *b, uint64_t want);

/* Loop: keep ARM_DEPTH rounds after @after pre-armed on @ep (arm_one()). */
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
	while (b->n_armed < ARM_DEPTH && b->res_on)
		arm_one(b, b->n_armed ? b->armed[b->n_armed - 1]->want + 1 : after + 1);
}

/*
 * Loop: pre-arm round @want: an armed job, with buffers of the shape seen so
 * far, queued behind the rounds already queued. A failure leaves the round
 * to the launch path (one log line, a counter).
 */
static void arm_one(struct toy_cpu *b, uint64_t want)
{
	struct toy_job *job;
	size_t out_need;
	uint32_t out_cap;
	int ret;

	job = job_get(b);
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
		job_put(b, job);
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
	queue_job(b, job);
	b->armed[b->n_armed++] = job;
}

/*
 * Loop: whether the armed job @a takes round @round (launch()): done early,
 * or taken (the worker read this round from the region and it fitted; its
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

/*
 * Loop: round @round is launched. Return the oldest armed job when the worker
 * takes the round from the region (the same checks as resident_run()), else
 * NULL: every armed job is the worker's to hand back, and those still waiting
 * for an epoch are told so (the round goes to the queue behind them).
 */
static struct toy_job *take_armed(struct toy_cpu *b, struct rk_epoch *ep,
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
			/* it ran another round's worth: back, unused (job_done() drops
			 * those that come back later) */
			b->armed[i]->armed = false;
			b->armed[i]->early = false;
			job_put(b, b->armed[i]);
			continue;
		}
		if (rk_epoch_current(b->ep) < b->armed[i]->want) {
			/* release: the flag before the kick's count (resident_run()
			 * reads the count, then the flag) */
			atomic_store_explicit(&b->armed[i]->disarm, true, memory_order_release);
			kick = true;
		}
	}
	b->n_armed = 0;
	if (kick)
		rk_epoch_kick(b->ep);
	return NULL;
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

/* Loop, follower: the lane to the leader, once the link is on shared memory
 * (RK_LANE): the worker sends its partials on it from then on. */
static void lane_open(struct toy_cpu *b)
{
	struct rk_link *link = rk_world_link(b->w, 0);
	struct rk_lane *ln;

	if (!link || rk_link_lane_open(link, &ln))
		return;	/* not on shared memory (yet), or RK_LANE=0: the loop sends */
	/* release: the lane's state before the pointer the worker reads */
	atomic_store_explicit(&b->lane, ln, memory_order_release);
}

static int cpu_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		      unsigned int flags)
{
	struct toy_cpu *b = ctx;
	struct rk_epoch *ep = b->res_on ? rk_sched_epoch(s) : NULL;
	struct toy_job *job;
	size_t need;
	bool off_loop;
	int ret;

	(void)flags;
	if (b->rank != 0 && !atomic_load_explicit(&b->lane, memory_order_relaxed))
		lane_open(b);
	job = take_armed(b, ep, round);
	/* a follower's worker runs it from the region and sends its partials on
	 * the lane: the loop only reaps the report */
	off_loop = job && b->rank != 0 && atomic_load_explicit(&b->lane, memory_order_relaxed);
	if (b->aborted) {
		if (job && job->early) {
			/* back already: no post will bring it to job_done() */
			job->armed = false;
			job->early = false;
			job_put(b, job);
		} else if (job) {
			/* the worker computes it anyway: dropped when it comes back */
			job->orphan = true;
			b->orphans++;
		}
		return b->aborted;
	}
	/*
	 * Every launch is reported once. A round the scheduler ended another way
	 * (a follower's failure) still waits here for partials that will not
	 * come: it is over now.
	 */
	if (b->rank == 0 && owes_report(b))
		leader_fail(b, b->launched, -ECANCELED);
	if (!job) {
		job = job_get(b);
		if (!job)
			return -ENOMEM;
		ret = toy_round_copy(&job->r, round, b->m.V);
		if (ret)
			goto fail;
		need = (size_t)job->r.n_out * b->m.V;
		if (need > job->out_cap) {
			int32_t *o = realloc(job->out, need * sizeof(*o));

			ret = -ENOMEM;
			if (!o)
				goto fail;
			job->out = o;
			job->out_cap = need;
		}
		queue_job(b, job);
		b->stats.posted++;
	}
	if (b->rank == 0) {
		/* token() is done with the previous round once the next launches */
		if (b->cur)
			job_put(b, b->cur);
		b->cur = NULL;
		b->launched_valid = true;
		b->launched = round->round_id;
		b->target = s;
	}
	/* the worker may be computing it already: it never reads job->s */
	job->s = s;
	job->launched = true;
	b->inflight++;
	if (job->early)
		rk_loop_post(b->loop, &job->post);	/* done: reported from the loop */
	shape_grow(b, round);
	arm(b, ep, round->round_id);
	return off_loop ? RK_LAUNCH_OFF_LOOP : 0;
fail:
	job_put(b, job);
	return ret;
}

static int cpu_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct toy_cpu *b = ctx;
	const struct toy_job *job = b->cur;

	if (b->rank != 0)
		return -EPERM;
	if (!job || !b->acc_valid || !b->acc_done || b->acc_status ||
	    b->acc_round != job->r.round_id)
		return -EAGAIN;
	return toy_round_token(&job->r, b->acc, b->m.V, b->m.H, i, j, tok);
}

static void cpu_retire(void *ctx, uint64_t stream_id)
{
	struct toy_cpu *b = ctx;
	uint64_t *q;

	if (!b->inflight) {
		pthread_mutex_lock(&b->tab_mu);
		toy_table_retire(&b->tab, stream_id);	/* -ENOENT: already gone, fine */
		pthread_mutex_unlock(&b->tab_mu);
		return;
	}
	if (b->n_retire == b->retire_cap) {
		uint32_t cap = b->retire_cap ? b->retire_cap * 2 : 16;

		q = realloc(b->retire_q, cap * sizeof(*q));
		if (!q)
			return;	/* the stream rule drops it at its first absence anyway */
		b->retire_q = q;
		b->retire_cap = cap;
	}
	b->retire_q[b->n_retire++] = stream_id;
}

const struct rk_backend_ops toy_cpu_ops = {
	.launch = cpu_launch,
	.token = cpu_token,
	.retire = cpu_retire,
	.flags = RK_BACKEND_SHARED_EPOCH,
};

/* ---- lifetime --------------------------------------------------------------------------- */

int toy_cpu_create(struct rk_world *w, const struct toy_params *p, struct toy_cpu **out)
{
	const struct rk_config *lc;
	struct toy_params def;
	struct toy_cpu *b;
	int ret, rank, size;

	if (!w)
		return -EINVAL;
	if (!p) {
		toy_params_init(&def);
		p = &def;
	}
	rank = rk_world_rank(w);
	size = rk_world_size(w);
	if (rank < 0 || size <= 0 || rank >= size)
		return -EINVAL;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->w = w;
	b->loop = rk_world_loop(w);
	b->rank = (uint32_t)rank;
	b->size = (uint32_t)size;
	lc = rk_loop_config(b->loop);
	b->res_on = toy_resident_on(TOY_BACKEND_CPU, lc->resident, b->size, lc->wait.mode);
	/*
	 * The armed worker's spin on the epoch (worker_spin_ns()): a worker that
	 * sleeps costs the leader a FUTEX_WAKE per round on the round's path, one
	 * per follower; one that spins takes a core, which a machine with a CPU
	 * per thread has to spare and a smaller one needs for its loops
	 * (docs/RESIDENT-SHM.md).
	 */
	b->spin_ns = worker_spin_ns(p->worker_spin_us, lc->wait.mode, b->size);
	b->hook = p->test_hook;
	b->hook_arg = p->test_arg;
	b->shape_st = ARM_STREAMS;
	b->shape_tok = ARM_TOKENS;
	b->shape_out = ARM_OUTS;
	atomic_init(&b->halt, false);
	ret = toy_model_init(&b->m, p->V, p->H, p->seed, b->rank, b->size);
	if (ret)
		goto err_free;
	ret = toy_table_init(&b->tab, &b->m);
	if (ret)
		goto err_model;
	ret = -ENOMEM;
	b->acc_from = calloc(b->size, sizeof(*b->acc_from));
	if (!b->acc_from)
		goto err_table;
	ret = -pthread_mutex_init(&b->tab_mu, NULL);
	if (ret)
		goto err_from;
	ret = -pthread_mutex_init(&b->mu, NULL);
	if (ret)
		goto err_tab_mu;
	ret = -pthread_cond_init(&b->cv, NULL);
	if (ret)
		goto err_mutex;
	ret = -pthread_create(&b->thr, NULL, worker_main, b);
	if (ret)
		goto err_cond;
	*out = b;
	return 0;
err_cond:
	pthread_cond_destroy(&b->cv);
err_mutex:
	pthread_mutex_destroy(&b->mu);
err_tab_mu:
	pthread_mutex_destroy(&b->tab_mu);
err_from:
	free(b->acc_from);
err_table:
	toy_table_fini(&b->tab);
err_model:
	toy_model_fini(&b->m);
err_free:
	free(b);
	return ret;
}

uint64_t toy_cpu_reports(const struct toy_cpu *b, uint64_t *round_id, int *status)
{
	return toy_reports_get(&b->reports, round_id, status);
}

void toy_cpu_abort(struct toy_cpu *b)
{
	if (!b->aborted)
		b->aborted = -ECONNRESET;
	if (b->rank == 0 && owes_report(b))
		leader_fail(b, b->launched, -ECONNRESET);
}

bool toy_cpu_busy(const struct toy_cpu *b)
{
	return b->inflight > 0 || b->orphans > 0;
}

uint32_t toy_cpu_streams(const struct toy_cpu *b)
{
	/* the worker may run a round early, on the table, while the loop reads */
	pthread_mutex_t *mu = (pthread_mutex_t *)&b->tab_mu;
	uint32_t n;

	pthread_mutex_lock(mu);
	n = b->tab.count;
	pthread_mutex_unlock(mu);
	return n;
}

const struct toy_model *toy_cpu_model(const struct toy_cpu *b)
{
	return &b->m;
}

void toy_cpu_stats(const struct toy_cpu *b, struct toy_cpu_stats *out)
{
	*out = b->stats;
	out->lane_sent = atomic_load_explicit(&b->lane_sent, memory_order_relaxed);
	out->lane_refused = atomic_load_explicit(&b->lane_refused, memory_order_relaxed);
}

int toy_cpu_destroy(struct toy_cpu *b)
{
	struct toy_job *job;
	unsigned int i;

	if (!b)
		return 0;
	if (toy_cpu_busy(b))
		return -EBUSY;
	/* halt before the kick: an armed wait that sees the kick sees halt */
	atomic_store_explicit(&b->halt, true, memory_order_release);
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	if (b->ep)
		rk_epoch_kick(b->ep);
	pthread_join(b->thr, NULL);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	pthread_mutex_destroy(&b->tab_mu);
	/* done early for a round never launched (the scheduler stopped): ours */
	for (i = 0; i < b->n_armed; i++)
		if (b->armed[i]->early)
			job_free(b->armed[i]);
	/* an armed job is left in the queue or was handed back */
	while ((job = b->qhead)) {
		b->qhead = job->next;
		job_free(job);
	}
	while ((job = b->unused)) {
		b->unused = job->next;
		job_free(job);
	}
	rk_epoch_release(b->ep);
	rk_lane_close(atomic_load(&b->lane));	/* the worker is gone */
	free(b->desc);
	if (b->cur)
		job_put(b, b->cur);
	while ((job = b->free_jobs)) {
		b->free_jobs = job->next;
		job_free(job);
	}
	free(b->retire_q);
	free(b->acc);
	free(b->acc_from);
	toy_table_fini(&b->tab);
	toy_model_fini(&b->m);
	free(b);
	return 0;
}
