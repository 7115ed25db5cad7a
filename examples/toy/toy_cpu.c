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
 * Emulated device time (toy_params.device): launch() also enqueues the
 * round's modelled device time on an emulated device (rk_gpu_emu_launch())
 * and a notifier mark after it; the round completes (job_finish()) once both
 * the worker's post and the mark are back, whichever comes second. The
 * completion path is rankrt's GPU notifier (gpu/notifier.c): the polled
 * word, the wake path, the predictor.
 *
 * Rounds that run without the loop are toy_cpu_resident.c's: resident rounds
 * (RK_RESIDENT: the worker, pre-armed, takes a round from the scheduler's
 * epoch region before launch()) and a follower's partials sent by the worker
 * on the lane. toy_cpu_int.h holds what the two files share.
 *
 * Reduction: a follower sends its partials to the leader in one USER frame
 * tagged TOY_TAG (payload after the USER header: u64 round_id, u32 n_outputs,
 * u32 V, then n_outputs * V int32, all little-endian) and reports completion;
 * the leader sums its own partials and every follower's (int32, so the order
 * does not matter) and reports completion once all T have arrived. token()
 * then picks from the sums.
 */
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "le.h"
#include "toy_cpu_int.h"

#define PARTIAL_HDR 16u	/* round_id, n_outputs, V */

void toy_params_init(struct toy_params *p)
{
	p->V = TOY_DEF_V;
	p->H = TOY_DEF_H;
	p->seed = 1;
	p->worker_spin_us = TOY_WORKER_SPIN_AUTO;
	p->test_hook = NULL;
	p->test_arg = NULL;
	p->stall_round = 0;
	p->stall_ms = 0;
	p->stall_loop = false;
	memset(&p->device, 0, sizeof(p->device));
	p->device_notify = RK_GPU_NOTIFY_AUTO;
	p->device_attr = NULL;
}

/* ---- the worker ------------------------------------------------------------------- */

/* The test hook toy_params.stall_round: called and returns with b->mu held. */
static void stall(struct toy_cpu *b)
{
	uint64_t end = now_ns() + b->stall_ns;
	struct timespec ts = { 0, 10 * 1000000 };

	while (!b->stop && !b->stall_cancel && now_ns() < end) {
		pthread_mutex_unlock(&b->mu);
		nanosleep(&ts, NULL);
		pthread_mutex_lock(&b->mu);
	}
}

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
		if (!job->armed && b->stall_round && !b->stall_loop &&
		    job->r.round_id == b->stall_round)
			stall(b);
		pthread_mutex_unlock(&b->mu);

		if (!job->armed) {
			t0 = now_ns();
			pthread_mutex_lock(&b->tab_mu);
			job->status = toy_table_exec(&b->tab, &job->r, job->out);
			pthread_mutex_unlock(&b->tab_mu);
			job->ns = now_ns() - t0;
		} else if (!toy__resident_run(b, job)) {
			/* not its round: handed back, the launch path has it */
			pthread_mutex_lock(&b->mu);
			continue;
		}
		if (b->rank != 0)
			toy__lane_send(b, job);
		/* the loop owns the job from here; this thread must not touch it */
		rk_loop_post(b->loop, &job->post);

		pthread_mutex_lock(&b->mu);
	}
	pthread_mutex_unlock(&b->mu);
	return NULL;
}

/* ---- jobs (loop thread) ----------------------------------------------------------- */

static enum rk_activity job_done(struct rk_post *p);

struct toy_job *toy__job_get(struct toy_cpu *b)
{
	struct toy_job *job = b->free_jobs;

	if (job) {
		b->free_jobs = job->next;
	} else {
		job = calloc(1, sizeof(*job));
		if (!job)
			return NULL;
		job->b = b;
		rk_post_init(&job->post, job_done, job);
	}
	/* no device time to wait for unless launch() enqueues it */
	job->computed = false;
	job->dev_done = true;
	return job;
}

void toy__job_put(struct toy_cpu *b, struct toy_job *job)
{
	job->next = b->free_jobs;
	b->free_jobs = job;
}

void toy__job_free(struct toy_job *job)
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
	toy_report(&b->reports, b->target, id, err);
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
	toy_report(&b->reports, b->target, b->acc_round, 0);
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

uint64_t toy__partials_len(const struct toy_cpu *b, const struct toy_job *job)
{
	return 8 + PARTIAL_HDR + (uint64_t)job->r.n_out * b->m.V * 4;
}

void toy__partials_encode(const struct toy_cpu *b, const struct toy_job *job, uint8_t *p)
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
	uint64_t len = toy__partials_len(b, job);
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
	toy__partials_encode(b, job, p);
	return rk_link_commit(link, RK_FRAME_USER, 0, (uint32_t)len);
}

/* ---- completion of the worker's job (loop thread) ----------------------------------- */

/* The round is computed and (with a device) its mark is delivered: report it. */
static enum rk_activity job_finish(struct toy_job *job)
{
	struct toy_cpu *b = job->b;
	struct rk_sched *s = job->s;
	uint64_t id = job->r.round_id;
	int status = job->status, ret;
	enum rk_activity act;
	uint32_t i;

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
		act = !status && job->lane_sent ? RK_IDLE : RK_BUSY;
		if (!status && !job->lane_sent)
			status = send_partials(b, job);
		toy__job_put(b, job);
		toy_report(&b->reports, s, id, status);	/* last: it may launch */
		return act;
	}
	if (b->cur)
		toy__job_put(b, b->cur);
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

static enum rk_activity job_done(struct rk_post *p)
{
	struct toy_job *job = p->data;
	enum rk_activity act;

	if (job->armed && toy__resident_back(job->b, job, &act))
		return act;
	job->computed = true;
	if (!job->dev_done) {
		job->b->stats.device_held++;	/* the device time is not over yet */
		return RK_IDLE;
	}
	return job_finish(job);
}

/* The emulated device is past the round's modelled time (its notifier's callback). */
static enum rk_activity device_done(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct toy_job *job = (struct toy_job *)(uintptr_t)cookie;

	(void)n;
	(void)arg;
	job->dev_done = true;
	if (!job->computed) {
		job->b->stats.device_late++;	/* the compute runs longer: its post reports */
		return RK_IDLE;
	}
	return job_finish(job);
}

/* A follower's partials (TOY_TAG), handed over by the scheduler (toy_cpu_ops.frame). */
static int cpu_frame(void *ctx, int peer, const struct rk_wire_user *u)
{
	struct toy_cpu *b = ctx;
	uint64_t id;
	uint32_t n_out, V;
	int ret;

	if (u->tag != TOY_TAG)
		return -ENOENT;
	if (b->rank != 0 || peer <= 0 || (uint32_t)peer >= b->size)
		return -EPROTO;
	b->stats.frames_rx++;
	if (u->len < PARTIAL_HDR)
		goto bad;
	id = get64(u->data);
	n_out = get32(u->data + 8);
	V = get32(u->data + 12);
	if (V != b->m.V || u->len != PARTIAL_HDR + (uint64_t)n_out * V * 4)
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
	acc_add_le(b, u->data + PARTIAL_HDR, (size_t)n_out * V);
	acc_count(b);
	return RK_BUSY;
bad:
	/* a round waiting for this peer would wait forever: fail it */
	if (b->launched_valid)
		leader_fail(b, b->launched, -EPROTO);
	return -EPROTO;
}

/*
 * The round watchdog asks whose part round @id still waits for (leader): the
 * lowest follower whose partials are not in, else the leader's own; nothing
 * in at all is the leader's own share (its part opens the sum, or a
 * follower's does and is in).
 */
static int cpu_waiting_for(void *ctx, uint64_t id)
{
	struct toy_cpu *b = ctx;
	uint32_t r;

	if (b->rank != 0 || (b->acc_valid && (id < b->acc_round || b->acc_done)))
		return -1;
	if (!b->acc_valid || id > b->acc_round)
		return 0;
	for (r = 1; r < b->size; r++)
		if (!b->acc_from[r])
			return (int)r;
	return 0;
}

/* ---- the ops -------------------------------------------------------------------------- */

/* The round's device time, then a mark after it that carries @job. */
static int device_launch(struct toy_cpu *b, struct toy_job *job)
{
	uint64_t ns = toy_device_round_ns(&b->dev, job->r.n_streams, job->r.n_tok);
	int ret;

	ret = rk_gpu_emu_launch(b->emu, ns, NULL);
	if (!ret)
		ret = rk_gpu_notifier_mark(b->notif, (uint64_t)(uintptr_t)job);
	if (!ret)
		b->stats.device_ns += ns;
	return ret;
}

void toy__queue_job(struct toy_cpu *b, struct toy_job *job)
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

static int cpu_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		      unsigned int flags)
{
	struct toy_cpu *b = ctx;
	struct rk_epoch *ep = toy__resident_epoch(b, s);
	struct toy_job *job;
	size_t need;
	int ret;

	(void)flags;
	if (b->stall_loop && round->round_id == b->stall_round) {
		struct timespec ts = { (time_t)(b->stall_ns / 1000000000),
				       (long)(b->stall_ns % 1000000000) };

		nanosleep(&ts, NULL);	/* the test hook: a launch blocked in a collective */
	}
	/* with a device, partials leave after its mark, from the loop: no lane */
	if (b->rank != 0 && !b->emu)
		toy__lane_open(b);
	/* a resident round: the armed worker's job that takes it from the region */
	job = toy__resident_take(b, ep, round);
	if (b->aborted) {
		toy__resident_abandon(b, job);
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
		job = toy__job_get(b);
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
		if (b->emu) {
			job->dev_done = false;
			ret = device_launch(b, job);
			if (ret)
				goto fail;
		}
		toy__queue_job(b, job);
		b->stats.posted++;
	}
	if (b->rank == 0) {
		/* token() is done with the previous round once the next launches */
		if (b->cur)
			toy__job_put(b, b->cur);
		b->cur = NULL;
		b->launched_valid = true;
		b->launched = round->round_id;
		b->target = s;
	}
	/* the worker may be computing it already: it never reads job->s */
	job->s = s;
	job->launched = true;
	b->inflight++;
	return toy__resident_launched(b, ep, job, round);
fail:
	toy__job_put(b, job);
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
	.flags = RK_BACKEND_RESIDENT | RK_BACKEND_SHARED_EPOCH,	/* toy_cpu_resident.c */
	.frame = cpu_frame,
	.user_tag = TOY_TAG,
	.user_tags = 1,
	.waiting_for = cpu_waiting_for,
};

/* ---- lifetime --------------------------------------------------------------------------- */

/*
 * The emulated device and its notifier. Resident rounds are off with it: a
 * GPU round is launched, so every round is.
 */
static int device_create(struct toy_cpu *b, const struct toy_params *p)
{
	struct rk_gpu_emu_attr a;
	int ret;

	if (p->device_attr)
		a = *p->device_attr;
	else
		rk_gpu_emu_attr_init(&a);
	a.wake_ns = p->device.wake_ns;
	b->dev = p->device;
	ret = rk_gpu_emu_create(&a, &b->emu);
	if (ret)
		return ret;
	ret = rk_gpu_notifier_create_emu(b->loop, b->emu, p->device_notify, device_done, b,
					 &b->notif);
	if (ret) {
		rk_gpu_emu_destroy(b->emu);
		b->emu = NULL;
		return ret;
	}
	b->res_set = true;
	b->res_on = false;
	return 0;
}

/* Not busy: no mark is outstanding. Posts its notifier left on the loop free it later. */
static void device_destroy(struct toy_cpu *b)
{
	if (!b->emu)
		return;
	rk_gpu_notifier_destroy(b->notif, true);
	rk_gpu_emu_destroy(b->emu);
	b->notif = NULL;
	b->emu = NULL;
}

int toy_cpu_create(struct rk_world *w, const struct toy_params *p, struct toy_cpu **out)
{
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
	b->stall_round = p->stall_round;
	b->stall_ns = p->stall_ms * 1000000;
	b->stall_loop = p->stall_loop;
	toy__resident_init(b, p);
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
	if (p->device.on) {
		ret = device_create(b, p);
		if (ret)
			goto err_cond;
	}
	ret = -pthread_create(&b->thr, NULL, worker_main, b);
	if (ret)
		goto err_device;
	*out = b;
	return 0;
err_device:
	device_destroy(b);
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
	if (b->stall_round) {
		pthread_mutex_lock(&b->mu);
		b->stall_cancel = true;
		pthread_mutex_unlock(&b->mu);
	}
	if (b->rank == 0 && owes_report(b))
		leader_fail(b, b->launched, -ECONNRESET);
}

struct rk_gpu_notifier *toy_cpu_notifier(const struct toy_cpu *b)
{
	return b->notif;
}

struct rk_gpu_emu *toy_cpu_device(const struct toy_cpu *b)
{
	return b->emu;
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

	if (!b)
		return 0;
	if (toy_cpu_busy(b))
		return -EBUSY;
	pthread_mutex_lock(&b->mu);
	b->stop = true;
	pthread_cond_signal(&b->cv);
	pthread_mutex_unlock(&b->mu);
	toy__resident_halt(b);
	pthread_join(b->thr, NULL);
	device_destroy(b);
	pthread_cond_destroy(&b->cv);
	pthread_mutex_destroy(&b->mu);
	pthread_mutex_destroy(&b->tab_mu);
	toy__resident_fini(b);
	/* an armed job may be left in the queue */
	while ((job = b->qhead)) {
		b->qhead = job->next;
		toy__job_free(job);
	}
	if (b->cur)
		toy__job_put(b, b->cur);
	while ((job = b->free_jobs)) {
		b->free_jobs = job->next;
		toy__job_free(job);
	}
	free(b->retire_q);
	free(b->acc);
	free(b->acc_from);
	toy_table_fini(&b->tab);
	toy_model_fini(&b->m);
	free(b);
	return 0;
}
