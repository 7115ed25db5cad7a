/* SPDX-License-Identifier: MIT */
/*
 * The CPU backend's insides, shared by its two files: toy_cpu.c (the launch
 * path, the worker, the reduction: the backend itself) and
 * toy_cpu_resident.c (what lets a round run without the loop: resident
 * rounds the armed worker takes from the epoch region, and a follower's
 * partials sent by the worker on the lane). toy__* names cross between them.
 * Never installed.
 */
#ifndef TOY_CPU_INT_H
#define TOY_CPU_INT_H

#include <pthread.h>
#include <stdatomic.h>

#include "toy.h"

/*
 * Rounds armed ahead: two, so the worker that finishes round N finds N+1's
 * armed job already queued (queued by launch(N-1)) and goes straight to the
 * epoch, instead of sleeping on the queue until launch(N) queues it.
 */
#define TOY_ARM_DEPTH 2u

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
	bool launched;		/* loop: launch() has run for its round */
	bool lane_sent;		/* worker: its partials went on the lane */
	/* resident (toy_cpu_resident.c): set by the loop before the job is queued */
	bool armed;		/* waits on the epoch for round @want, not on the queue */
	uint64_t want;
	atomic_bool disarm;	/* the loop gave round @want to the launch path */
	atomic_bool took;	/* worker: it read round @want from the region and runs it */
	bool orphan;		/* loop: computed for a launch that failed; dropped */
	bool early;		/* loop: back from the worker before that launch() */
	bool slept;		/* worker: it slept on the futex before the epoch came */
	/* emulated device time (loop): the round completes once both are true */
	bool computed;		/* the worker's post has come back */
	bool dev_done;		/* its mark was delivered (true without a device) */
};

struct toy_cpu {
	struct rk_world *w;
	struct rk_loop *loop;
	uint32_t rank, size;
	struct toy_model m;
	struct toy_table tab;	/* the worker's while inflight > 0, else the loop's;
				 * changed under tab_mu (a resident round may run early) */
	pthread_mutex_t tab_mu;
	struct toy_reports reports;

	/* the worker's queue */
	pthread_t thr;
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct toy_job *qhead, *qtail;	/* under mu */
	bool stop;			/* under mu */
	uint64_t stall_round, stall_ns;	/* toy_params.stall_*: a test hook */
	bool stall_loop;
	bool stall_cancel;		/* under mu: toy_cpu_abort() ends a stall */

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

	/* follower: the lane the worker sends partials on (set by the loop, read
	 * by the worker; used by the worker alone), and its counts */
	_Atomic(struct rk_lane *) lane;
	atomic_uint_fast64_t lane_sent, lane_refused;

	/* resident rounds (toy_cpu_resident.c): the loop's, read by the worker once armed */
	bool res_on;			/* toy_resident_on(), at the first launch */
	bool res_set;			/* ...which has come */
	enum rk_wait_mode res_wait;	/* the loop's wait mode at create, for the rule */
	struct toy_job *unused;		/* under mu: armed jobs the worker handed back */
	atomic_bool halt;		/* destroy: an armed wait ends */
	struct rk_epoch *ep;		/* the region armed jobs wait on (a reference) */
	uint8_t *desc;			/* the worker's copy of a descriptor, desc_max bytes */
	uint32_t desc_max;
	uint64_t spin_ns;		/* the worker spins this long before the futex */
	void (*hook)(void *, int, const struct rk_epoch *, uint64_t);	/* toy_params.test_hook */
	void *hook_arg;
	struct toy_job *armed[TOY_ARM_DEPTH];	/* loop: armed jobs the worker holds, oldest
						 * first */
	unsigned int n_armed;
	uint32_t shape_st, shape_tok, shape_out;	/* the largest round seen */
	unsigned int orphans;		/* computed for launches that failed, not back yet */
	bool res_logged;

	/* emulated device time (toy_params.device): loop thread */
	struct toy_device_model dev;
	struct rk_gpu_emu *emu;		/* NULL: off */
	struct rk_gpu_notifier *notif;	/* marks carry the job (cookie) */
};

/* toy_cpu.c: jobs (loop thread), and the partials frame */
struct toy_job *toy__job_get(struct toy_cpu *b);
void toy__job_put(struct toy_cpu *b, struct toy_job *job);
void toy__job_free(struct toy_job *job);
/* Hand @job to the worker, behind what it holds. */
void toy__queue_job(struct toy_cpu *b, struct toy_job *job);
/* The partials frame's payload length (USER header included). */
uint64_t toy__partials_len(const struct toy_cpu *b, const struct toy_job *job);
/* Write @job's partials frame payload at @p (toy__partials_len() bytes). */
void toy__partials_encode(const struct toy_cpu *b, const struct toy_job *job, uint8_t *p);

/* toy_cpu_resident.c, at create: the worker's spin, the test hook. */
void toy__resident_init(struct toy_cpu *b, const struct toy_params *p);
/*
 * Loop, launch() on @s: the region resident rounds take rounds from, NULL
 * for none (@s's rk_sched_resident() and toy_resident_on() decide at the
 * first launch).
 */
struct rk_epoch *toy__resident_epoch(struct toy_cpu *b, struct rk_sched *s);
/*
 * Worker: run armed @job's round from the epoch region. Return: true when it
 * ran (post it); false when the round is the launch path's: the job is back
 * on b->unused.
 */
bool toy__resident_run(struct toy_cpu *b, struct toy_job *job);
/*
 * Loop, launch(): the armed job that takes @round from @ep (the region of the
 * launching scheduler, NULL without resident rounds), or NULL: the round is
 * posted, behind every armed job, which each hand themselves back.
 */
struct toy_job *toy__resident_take(struct toy_cpu *b, struct rk_epoch *ep,
				   const struct rk_wire_round *round);
/* Loop: a launch failed after toy__resident_take() gave it @job (or NULL). */
void toy__resident_abandon(struct toy_cpu *b, struct toy_job *job);
/*
 * Loop: @round is launched as @job: pre-arm the rounds after it. Return:
 * launch()'s value (RK_LAUNCH_OFF_LOOP when a follower's worker runs it and
 * shares it on the lane).
 */
int toy__resident_launched(struct toy_cpu *b, struct rk_epoch *ep, struct toy_job *job,
			   const struct rk_wire_round *round);
/*
 * Loop: armed @job came back from the worker. Return: true with *@act when
 * that is all (dropped, or done before its launch()); false when it completes
 * its launched round as a posted job would.
 */
bool toy__resident_back(struct toy_cpu *b, struct toy_job *job, enum rk_activity *act);
/* Loop, destroy, before the worker is joined: an armed wait ends. */
void toy__resident_halt(struct toy_cpu *b);
/* Loop, destroy, after the join: the armed jobs, the region, the lane. */
void toy__resident_fini(struct toy_cpu *b);

/* Loop, follower: open the lane to the leader once the link is on shared memory. */
void toy__lane_open(struct toy_cpu *b);
/* Worker, follower: send @job's partials on the lane if it takes them (job->lane_sent). */
void toy__lane_send(struct toy_cpu *b, struct toy_job *job);

#endif /* TOY_CPU_INT_H */
