/* SPDX-License-Identifier: MIT */
/*
 * The round watchdog (sched_int.h): every rank bounds its own share of the
 * round it launched last, the leader the whole round. The bound is the larger
 * of RK_ROUND_TIMEOUT_MS and 10x the slowest round this rank finished without
 * a progress call; rk_sched_round_progress() moves a round's deadline.
 *
 * Who is blamed: a follower whose share is late says so itself (a ROUND_DONE
 * with -RK_EROUNDTIMEOUT); the leader waits a quarter of the bound longer
 * than its followers do, so their reports come first; when none came it
 * blames the rank its backend says its own share still waits for
 * (rk_backend_ops.waiting_for: a follower whose loop is blocked, or one that
 * never sends its part), or itself when the backend cannot tell. Its verdict goes to every follower in a
 * ROUND_WATCH and to each rank's timeout callback.
 *
 * The timer is lazy: armed when a round launches and none is pending, it
 * fires at an older deadline at most and re-arms itself for the current one,
 * so a round costs no timer operation.
 */
#include "config.h"

#include <errno.h>

#include "sched_int.h"

#define WD_SLOWEST_FACTOR	10	/* the bound: this many times the slowest round */

/* This rank's bound for one round. */
static uint64_t wd_bound(const struct rk_sched *s)
{
	uint64_t b = s->wd_slowest * WD_SLOWEST_FACTOR;

	return b > s->wd_floor ? b : s->wd_floor;
}

/* How long this rank waits: the leader a quarter longer, for its followers' reports. */
static uint64_t wd_limit(const struct rk_sched *s)
{
	uint64_t b = wd_bound(s);

	return s->rank == 0 ? b + b / 4 : b;
}

uint64_t rk__sched_watch_bound(const struct rk_sched *s)
{
	return s->wd_floor ? wd_limit(s) : 0;
}

void rk__sched_watch_start(struct rk_sched *s, uint64_t round_id)
{
	uint64_t now = s->t_launch;

	if (!s->wd_floor)
		return;
	s->wd_round = round_id;
	s->wd_open = true;
	s->wd_extended = false;
	s->wd_told = false;
	s->wd_deadline = now + wd_limit(s);
	/* an active timer is due no later than this deadline: it re-arms then */
	if (!s->watch.active)
		rk_timer_start(s->loop, &s->watch, s->wd_deadline - now, 0);
}

void rk__sched_watch_done(struct rk_sched *s, uint64_t round_id, int status)
{
	uint64_t t;

	if (!s->wd_open || round_id != s->wd_round)
		return;
	s->wd_open = false;
	if (status || s->wd_extended)
		return;	/* a failure, or a round its backend said was long: no measure */
	t = rk_loop_now(s->loop) - s->t_launch;
	if (t > s->wd_slowest)
		s->wd_slowest = t;
}

/* Every rank's application hears of a verdict once, from here. */
static void watch_call(struct rk_sched *s, uint64_t round_id, int rank)
{
	s->stats.round_timeouts++;
	if (!s->timeout_cb)
		return;
	s->depth++;
	s->timeout_cb(s->timeout_arg, s, round_id, rank);
	s->depth--;
}

void rk__sched_watch_tell(struct rk_sched *s, uint64_t round_id, int rank)
{
	struct rk_wire_round_watch w = {
		.round_id = round_id,
		.rank = (uint32_t)rank,
		.status = -RK_EROUNDTIMEOUT,
		.elapsed_ns = rk_loop_now(s->loop) - s->t_launch,
	};
	uint8_t buf[24];
	int i, n, size = rk_world_size(s->world);

	rk__err(0, "round %llu: rank %d did not finish its share within the round bound "
		"(%llu ms): the round fails", (unsigned long long)round_id, rank,
		(unsigned long long)(wd_bound(s) / 1000000));
	n = rk_wire_encode_round_watch(buf, sizeof(buf), &w);
	for (i = 1; i < size && n > 0; i++)
		rk_world_send(s->world, i, RK_FRAME_ROUND_WATCH, 0, buf, (uint32_t)n);
	watch_call(s, round_id, rank);
}

/* Follower: this rank's own share is late; the leader decides the round. */
static void follower_late(struct rk_sched *s, uint64_t now)
{
	struct rk_wire_round_done d = {
		.round_id = s->wd_round,
		.status = -RK_EROUNDTIMEOUT,
		.elapsed_ns = now - s->t_launch,
	};
	uint8_t buf[24];
	int n;

	rk__err(s->rank, "round %llu: this rank's share did not finish within the round bound "
		"(%llu ms): reported to the leader", (unsigned long long)s->wd_round,
		(unsigned long long)(wd_bound(s) / 1000000));
	n = rk_wire_encode_round_done(buf, sizeof(buf), &d);
	if (n > 0)
		rk_world_send(s->world, 0, RK_FRAME_ROUND_DONE, 0, buf, (uint32_t)n);
}

/* No follower said its share was late: the rank the leader's share waits for,
 * as its backend tells, or the leader itself. */
static int leader_blames(struct rk_sched *s)
{
	int r = s->ops->waiting_for ? s->ops->waiting_for(s->ctx, s->wd_round) : -1;

	return r >= 0 && r < rk_world_size(s->world) ? r : 0;
}

enum rk_activity rk__sched_watch_cb(struct rk_timer *t, uint64_t now)
{
	struct rk_sched *s = t->data;

	if (!s->wd_open || s->stopped)
		return RK_IDLE;
	/* a leader's round reported from inside launch() is handled by the kick */
	if (now < s->wd_deadline || (s->rank == 0 && s->done_pending)) {
		rk_timer_start(s->loop, t, now < s->wd_deadline ? s->wd_deadline - now : 0, 0);
		return RK_IDLE;
	}
	s->wd_open = false;
	if (s->rank != 0) {
		follower_late(s, now);
		return RK_BUSY;
	}
	if (s->in_flight && s->round_id == s->wd_round)
		rk__sched_leader_timeout(s, leader_blames(s));
	return RK_BUSY;
}

enum rk_activity rk__sched_watch_frame(struct rk_sched *s, int peer,
				       const struct rk_wire_round_watch *w)
{
	uint64_t now, d;

	if (s->rank == 0) {
		/* a follower's progress on the round in flight; anything else is stale */
		if (w->status || w->rank != (uint32_t)peer || !s->wd_open ||
		    w->round_id != s->wd_round)
			return RK_IDLE;
		now = rk_loop_now(s->loop);
		s->wd_extended = true;
		d = now + wd_limit(s);
		if (d > s->wd_deadline)
			s->wd_deadline = d;
		return RK_IDLE;
	}
	if (peer != 0 || !w->status || w->rank >= (uint32_t)rk_world_size(s->world)) {
		rk__warn(s->rank, "a ROUND_WATCH from rank %d for rank %u, status %d: dropped",
			 peer, w->rank, w->status);
		return RK_IDLE;
	}
	rk__warn(s->rank, "round %llu: rank %u did not finish its share: %s",
		 (unsigned long long)w->round_id, w->rank, rk_strerror(w->status));
	/* the leader decided first: this rank's report would come too late */
	if (s->wd_open && s->wd_round == w->round_id)
		s->wd_open = false;
	if (!s->stopped)
		watch_call(s, w->round_id, (int)w->rank);
	return RK_BUSY;
}

int rk_sched_round_progress(struct rk_sched *s, uint64_t round_id)
{
	struct rk_wire_round_watch w = {
		.round_id = round_id,
		.rank = (uint32_t)s->rank,
		.status = 0,
	};
	uint64_t now, d;
	uint8_t buf[24];
	int n;

	if (!s->wd_floor)
		return 0;
	if (!s->wd_open || round_id != s->wd_round)
		return -ENOENT;
	now = rk_loop_now(s->loop);
	s->wd_extended = true;
	d = now + wd_limit(s);
	if (d > s->wd_deadline)
		s->wd_deadline = d;
	/* the leader hears at most four a bound: each moves its deadline a bound on */
	if (s->rank == 0 || (s->wd_told && now - s->wd_sent < wd_bound(s) / 4))
		return 0;
	s->wd_told = true;
	s->wd_sent = now;
	s->stats.progress_sent++;
	w.elapsed_ns = now - s->t_launch;
	n = rk_wire_encode_round_watch(buf, sizeof(buf), &w);
	if (n > 0)
		rk_world_send(s->world, 0, RK_FRAME_ROUND_WATCH, 0, buf, (uint32_t)n);
	return 0;
}

void rk_sched_set_timeout_cb(struct rk_sched *s, rk_sched_timeout_cb cb, void *arg)
{
	s->timeout_cb = cb;
	s->timeout_arg = arg;
}
