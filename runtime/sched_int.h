/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's insides, shared by its files (never installed):
 *   sched.c           its lifetime (create, stop, destroy, stats), the frames the
 *                     world hands it (its claim), completion reports
 *   sched_leader.c    the leader: requests, admission, forming and sending
 *                     rounds, verifying drafts and handing out tokens
 *   sched_follower.c  a follower: launching each ROUND as its link decoded it,
 *                     retiring the streams absent from it, reporting a failure
 *   sched_epoch.c     round epochs: which region, and publishing rounds in it
 *   sched_draft.c     prompt-lookup drafting (rk_ngram_draft())
 *   sched_watch.c     the round watchdog: deadlines, progress, verdicts
 * rk__sched_* names cross between them.
 *
 * Work that must not run inside the call that caused it (a submitted request,
 * a completion reported from inside launch()) is deferred to a zero-delay
 * timer: the loop runs it in the same iteration, from its timer step, so the
 * stack never grows with the length of a generation. 'depth' counts the calls
 * out (backend, request callbacks, drafter, tracer: the helpers below) under
 * way; 'walking' is set while the batch is being iterated, when nothing may
 * reshape it.
 */
#ifndef RK_SCHED_INT_H
#define RK_SCHED_INT_H

#include "runtime_int.h"
#include "rk_sched.h"

struct rk_sched {
	struct rk_world *world;
	struct rk__claim claim;		/* its frames, handed over by the world */
	struct rk_loop *loop;
	struct rk_sched_config cfg;
	const struct rk_backend_ops *ops;
	void *ctx;
	int rank;
	bool stopped;			/* no request, no backend call any more */
	bool closing;			/* destroyed: freed at the backend's last report */
	unsigned int depth;		/* calls out under way (see the top of the file) */
	uint64_t frame_max;		/* the largest ROUND payload a link takes */
	uint32_t open;			/* rounds launched here, not yet reported by the backend */

	/* leader */
	struct rk_request *qhead, *qtail;	/* waiting, FIFO */
	struct rk_request **batch;		/* running, in round order */
	uint32_t nbatch;
	uint64_t next_id;
	uint64_t round_id;
	bool in_flight;			/* round_id launched and not yet handled */
	bool walking;			/* the batch is being iterated: it keeps its shape */
	bool done_pending;		/* round_id reported from inside a call: kick handles it */
	int done_status;
	struct rk_timer kick;		/* deferred work, run from the loop's timer step */
	uint64_t t_launch;
	uint8_t *buf;				/* the ROUND payload */
	size_t buf_cap;
	struct rk_wire_stream *streams;
	uint32_t *tokens;
	size_t tok_cap;
	uint32_t *draft_off;			/* per batch index: offset of drafts in tokens */
	uint32_t *outs;				/* scratch: k + 1 outputs */

	/* follower */
	uint64_t *prev_ids, *cur_ids;
	uint32_t nprev;
	uint32_t ids_cap;
	/*
	 * The last ROUND's launch() said RK_LAUNCH_OFF_LOOP: the round is not
	 * this loop's work, so its frame is reported idle (and the link's learner
	 * of arrival gaps, which predicts the next ROUND, leaves it out).
	 */
	bool off_loop;

	/* round epochs (rk_sched.h): NULL when resident is off or the region
	 * could not be made */
	enum rk_resident_mode resident;	/* rk_sched_resident() */
	struct rk_epoch *ep;
	struct rk_epoch *ep_pub;	/* leader: the shared region, when not ep */
	bool ep_view;			/* follower: ep is the leader's, read-only */
	bool ep_shared;			/* leader: ep is the one its followers map */
	bool ep_fixed;			/* the region is chosen (rk__sched_choose_region()) */

	/* the round watchdog (sched_watch.c) */
	struct rk_timer watch;		/* lazy: due at or before wd_deadline */
	uint64_t wd_floor;		/* RK_ROUND_TIMEOUT_MS in ns; 0: no watchdog */
	uint64_t wd_slowest;		/* the slowest round done here with no progress call */
	uint64_t wd_round;		/* the round watched: the last launched here */
	uint64_t wd_deadline;		/* loop time by which it must be done */
	uint64_t wd_sent;		/* follower: its last progress frame for it */
	bool wd_open;			/* wd_round launched, neither done nor timed out */
	bool wd_extended;		/* a progress call moved its deadline */
	bool wd_told;			/* follower: wd_sent is this round's */
	rk_sched_timeout_cb timeout_cb;
	void *timeout_arg;

	struct rk_sched_stats stats;
};

static inline void trace_at(struct rk_sched *s, uint64_t round_id, enum rk_sched_event ev,
			    uint64_t t_ns)
{
	if (!s->cfg.trace)
		return;
	s->depth++;
	s->cfg.trace(s->cfg.trace_arg, round_id, ev, t_ns);
	s->depth--;
}

static inline void trace(struct rk_sched *s, uint64_t round_id, enum rk_sched_event ev)
{
	if (s->cfg.trace)
		trace_at(s, round_id, ev, rk__now_ns());
}

/* ---- calls out ------------------------------------------------------------------- */

static inline int be_launch(struct rk_sched *s, const struct rk_wire_round *view,
			    unsigned int flags)
{
	int ret;

	s->depth++;
	ret = s->ops->launch(s->ctx, s, view, flags);
	s->depth--;
	if (s->rank != 0)
		s->off_loop = ret == RK_LAUNCH_OFF_LOOP;
	if (ret == RK_LAUNCH_OFF_LOOP) {
		s->stats.off_loop_rounds += s->rank != 0;
		ret = 0;
	}
	return ret;
}

static inline int be_token(struct rk_sched *s, uint32_t i, uint32_t j, uint32_t *tok)
{
	int ret;

	s->depth++;
	ret = s->ops->token(s->ctx, i, j, tok);
	s->depth--;
	return ret;
}

static inline void be_retire(struct rk_sched *s, uint64_t id)
{
	if (!s->ops->retire || s->stopped)
		return;
	s->depth++;
	s->ops->retire(s->ctx, id);
	s->depth--;
}

static inline void req_call(struct rk_sched *s, struct rk_request *r, const uint32_t *toks,
			    uint32_t n, bool done, int err)
{
	s->depth++;
	r->cb(r, toks, n, done, err);	/* done: the caller may free r now */
	s->depth--;
}

static inline void kick(struct rk_sched *s)
{
	if (!s->kick.active)
		rk_timer_start(s->loop, &s->kick, 0, 0);
}

/* ---- sched_leader.c ---------------------------------------------------------------- */

/* End every running, then every queued request with @err (a stop). */
void rk__sched_fail_all(struct rk_sched *s, int err);
/* Round s->round_id is done on this rank (@status 0) or failed somewhere: verify,
 * hand out tokens, form the next. */
void rk__sched_leader_complete(struct rk_sched *s, int status);
/* The zero-delay timer's work (s->kick): a completion from inside a call, or a step. */
enum rk_activity rk__sched_kick_cb(struct rk_timer *t, uint64_t now);

/* Round s->round_id did not finish within the bound: rank @rank is blamed, every
 * rank hears it, its requests fail with -RK_EROUNDTIMEOUT, the queue goes on. */
void rk__sched_leader_timeout(struct rk_sched *s, int rank);

/* ---- sched_follower.c -------------------------------------------------------------- */

int rk__sched_follower_round(struct rk_sched *s, const struct rk_wire_hdr *h,
			     const uint8_t *payload, const struct rk_wire_round *view);
void rk__sched_follower_report(struct rk_sched *s, uint64_t round_id, int status);

/* ---- sched_watch.c ----------------------------------------------------------------- */

/* Round @round_id launches now (s->t_launch set): its deadline. */
void rk__sched_watch_start(struct rk_sched *s, uint64_t round_id);
/* This rank's share of @round_id is done (@status): no deadline; a success measures. */
void rk__sched_watch_done(struct rk_sched *s, uint64_t round_id, int status);
/* Leader: the verdict to every follower and the timeout callback. */
void rk__sched_watch_tell(struct rk_sched *s, uint64_t round_id, int rank);
enum rk_activity rk__sched_watch_cb(struct rk_timer *t, uint64_t now);
enum rk_activity rk__sched_watch_frame(struct rk_sched *s, int peer,
				       const struct rk_wire_round_watch *w);
/* The bound this rank waits now (0: no watchdog). */
uint64_t rk__sched_watch_bound(const struct rk_sched *s);

/* ---- sched_epoch.c ----------------------------------------------------------------- */

void rk__sched_choose_region(struct rk_sched *s);
void rk__sched_publish(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
		       uint32_t len);
void rk__sched_publish_shared(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
			      uint32_t len);

#endif /* RK_SCHED_INT_H */
