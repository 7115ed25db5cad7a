/* SPDX-License-Identifier: MIT */
/*
 * Decode-round scheduling (the leader's batcher and the followers' launcher):
 * its lifetime, and the frames the world hands it. sched_int.h says which
 * file does what.
 *
 * It lives in runtime/, not gpu/: it only forms ROUND frames, calls the
 * backend, and reacts to completion events, so it runs unchanged on the CPU
 * backend, the CUDA backend, or a server's own. One round is in flight at a
 * time; the next is formed in the completion handler of the last, so the
 * ROUND leaves in the same loop iteration (flushed before the loop waits).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sched_int.h"

/* ---- frames from the world ---------------------------------------------------------- */

/*
 * The scheduler's frames, handed over by the world (its claim), decoded by
 * the link they came on: ROUND on a follower, ROUND_DONE on the leader, and
 * the backend's USER tags on any rank.
 */
static enum rk_activity sched_frame(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				    const uint8_t *payload, const union rk__wire_payload *p)
{
	struct rk_sched *s = rk__container_of(c, struct rk_sched, claim);
	int ret, rank = s->rank;

	switch (h->type) {
	case RK_FRAME_ROUND:
		if (s->rank == 0 || peer != 0)
			break;
		ret = rk__sched_follower_round(s, h, payload, &p->round);
		if (ret) {
			s->off_loop = false;
			if (ret != -RK_ESTOPPED)
				rk__err(s->rank, "round %llu: %s", (unsigned long long)s->round_id,
					rk_strerror(ret));
			rk__sched_follower_report(s, s->round_id, ret);
			return RK_BUSY;
		}
		/* a round the backend runs without this loop is not its work */
		return s->off_loop ? RK_IDLE : RK_BUSY;
	case RK_FRAME_ROUND_DONE:
		if (s->rank != 0)
			break;
		if (p->done.status) {
			rk__err(0, "rank %d: round %llu failed: %s", peer,
				(unsigned long long)p->done.round_id, rk_strerror(p->done.status));
			if (!s->in_flight || p->done.round_id != s->round_id || s->stopped)
				return RK_IDLE;
			/* a follower's own watchdog: it is the slow rank */
			if (p->done.status == -RK_EROUNDTIMEOUT)
				rk__sched_leader_timeout(s, peer);
			else
				rk__sched_leader_complete(s, p->done.status);
		}
		return RK_IDLE;
	case RK_FRAME_ROUND_WATCH:
		return rk__sched_watch_frame(s, peer, &p->watch);
	case RK_FRAME_USER:
		/* stopped, the backend is called only to finish what it holds */
		if (s->stopped && !s->open)
			return RK_IDLE;
		/* it may report a round from here: nothing of @s is touched after */
		ret = s->ops->frame(s->ctx, peer, &p->user);
		if (ret >= 0)
			return ret == RK_IDLE ? RK_IDLE : RK_BUSY;
		rk__warn(rank, "rank %d: a message for the backend (tag 0x%x) refused: %s", peer,
			 p->user.tag, rk_strerror(ret));
		return RK_BUSY;
	default:
		break;
	}
	rk__warn(s->rank, "a %s from rank %d, which this rank never takes: dropped",
		 rk_wire_frame_name(h->type), peer);
	return RK_IDLE;
}

/* ---- create / destroy ------------------------------------------------------------ */

void rk_sched_config_init(struct rk_sched_config *cfg)
{
	memset(cfg, 0, sizeof(*cfg));
	cfg->max_batch = 8;
}

/* The config's mode, auto taking the loop's RK_RESIDENT; off without resident consumers. */
static enum rk_resident_mode resident_mode(const struct rk_sched *s, const struct rk_config *lc)
{
	if (!(s->ops->flags & (RK_BACKEND_RESIDENT | RK_BACKEND_SHARED_EPOCH)))
		return RK_RESIDENT_OFF;
	if (s->cfg.resident != RK_RESIDENT_AUTO)
		return s->cfg.resident;
	return rk__config_ctuning(lc)->resident;
}

int rk_sched_create(struct rk_world *world, const struct rk_sched_config *cfg,
		    const struct rk_backend_ops *ops, void *ctx, struct rk_sched **out)
{
	const struct rk_config *lc;
	struct rk_sched *s;
	uint32_t mb;
	int ret;

	if (!world || !out || !ops || !ops->launch || (!ops->token && rk_world_rank(world) == 0))
		return -EINVAL;
	if (cfg && (cfg->draft_k > RK_SCHED_MAX_DRAFT ||
		    (unsigned int)cfg->resident > RK_RESIDENT_OFF))
		return -EINVAL;
	/* a backend's messages: an op and its tags, or neither */
	if (!ops->frame != !ops->user_tags ||
	    (uint64_t)ops->user_tag + ops->user_tags > (uint64_t)UINT32_MAX + 1)
		return -EINVAL;
	s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->world = world;
	s->loop = rk_world_loop(world);
	s->ops = ops;
	s->ctx = ctx;
	s->rank = rk_world_rank(world);
	if (cfg)
		s->cfg = *cfg;
	else
		rk_sched_config_init(&s->cfg);
	if (!s->cfg.max_batch)
		s->cfg.max_batch = 8;
	if (!s->cfg.draft)
		s->cfg.draft = rk_ngram_draft;
	lc = rk_loop_config(s->loop);
	s->frame_max = lc->max_frame < RK_WIRE_MAX_PAYLOAD ? lc->max_frame : RK_WIRE_MAX_PAYLOAD;
	mb = s->cfg.max_batch;
	s->next_id = 1;
	rk_timer_init(&s->kick, rk__sched_kick_cb, s);
	rk_timer_init(&s->watch, rk__sched_watch_cb, s);
	s->wd_floor = rk__config_ctuning(lc)->round_timeout_ns;
	ret = -ENOMEM;
	s->batch = calloc(mb, sizeof(*s->batch));
	s->streams = calloc(mb, sizeof(*s->streams));
	s->draft_off = calloc(mb, sizeof(*s->draft_off));
	s->outs = calloc(RK_SCHED_MAX_DRAFT + 1, sizeof(*s->outs));
	if (!s->batch || !s->streams || !s->draft_off || !s->outs)
		goto err_free;
	/* from here the world hands this scheduler its frames, never the application */
	s->claim.types = 1u << RK_FRAME_ROUND | 1u << RK_FRAME_ROUND_DONE |
			 1u << RK_FRAME_ROUND_WATCH;
	s->claim.tag = ops->user_tag;
	s->claim.ntags = ops->user_tags;
	s->claim.frame = sched_frame;
	ret = rk__world_claim(world, &s->claim);
	if (ret)
		goto err_free;
	s->resident = resident_mode(s, lc);
	if (s->resident != RK_RESIDENT_OFF) {
		ret = rk_epoch_create(rk__epoch_desc_bound(lc->max_frame), &s->ep);
		if (ret) {
			/* the launch path still runs every round */
			rk__warn(s->rank, "resident rounds off: no epoch region: %s",
				 rk_strerror(ret));
			s->ep = NULL;
			s->stats.resident_fallbacks++;
		}
	}
	/* a ready world: settle the same-host upgrades, then the region is known */
	if (rk__world_settle(world))
		rk__sched_choose_region(s);
	rk__world_hold(world);
	*out = s;
	return 0;
err_free:
	free(s->batch);
	free(s->streams);
	free(s->draft_off);
	free(s->outs);
	free(s);
	return ret;
}

void rk_sched_stop(struct rk_sched *s)
{
	s->stopped = true;
	if (s->done_pending) {
		/* the backend has reported: nothing is left for the kick to do */
		s->done_pending = false;
		s->in_flight = false;
	}
	rk_timer_stop(&s->kick);
	rk_timer_stop(&s->watch);
	s->wd_open = false;
	if (s->walking)
		return;	/* the walk under way fails the rest when it ends */
	rk__sched_fail_all(s, -RK_ESTOPPED);
}

bool rk_sched_busy(const struct rk_sched *s)
{
	return s->open > 0;
}

static void sched_free(struct rk_sched *s)
{
	free(s->batch);
	free(s->streams);
	free(s->draft_off);
	free(s->outs);
	free(s->buf);
	free(s->tokens);
	free(s->prev_ids);
	free(s->cur_ids);
	rk_epoch_release(s->ep);
	rk_epoch_release(s->ep_pub);
	free(s);
}

int rk_sched_destroy(struct rk_sched *s)
{
	if (!s)
		return 0;
	if (s->depth || s->walking)
		return -EBUSY;	/* from inside one of our callbacks */
	rk_sched_stop(s);
	if (s->ep)
		rk_epoch_close(s->ep);	/* a consumer still armed for a next round gives up */
	if (s->ep_pub)
		rk_epoch_close(s->ep_pub);	/* the followers' too */
	rk__world_unclaim(&s->claim);	/* its frames go to the application again */
	rk__world_release(s->world);
	/*
	 * As a libuv handle after uv_close(): nothing of the scheduler runs any
	 * more, but a backend that still holds a round holds s too, so its
	 * memory goes with the last report (rk_sched_complete() below).
	 */
	s->closing = true;
	if (!s->open)
		sched_free(s);
	return 0;
}

bool rk_sched_idle(const struct rk_sched *s)
{
	return !s->qhead && !s->nbatch && !s->in_flight;
}

size_t rk_sched_stats(const struct rk_sched *s, struct rk_sched_stats *out, size_t size)
{
	struct rk_sched_stats st = s->stats;
	const struct rk_request *r;

	st.queued = 0;
	for (r = s->qhead; r; r = r->next)	/* bounded by what was submitted */
		st.queued++;
	st.running = s->nbatch;
	st.round_bound_ns = rk__sched_watch_bound(s);
	return rk__stats_copy(out, size, &st, sizeof(st));
}

/* ---- completion reports ------------------------------------------------------------ */

void rk_sched_complete(struct rk_sched *s, uint64_t round_id, int status)
{
	if (s->open)
		s->open--;	/* the backend handed a round back */
	if (s->closing) {
		/* destroyed: touch nothing (loop, world, tracer), only count */
		if (!s->open)
			sched_free(s);
		return;
	}
	trace(s, round_id, RK_SCHED_EV_DONE);
	if (s->rank != 0) {
		rk__sched_watch_done(s, round_id, status);
		rk__sched_follower_report(s, round_id, status);
		return;
	}
	if (!s->in_flight || s->done_pending || round_id != s->round_id) {
		/* an older one ended another way (a follower's failure): it is only
		 * counted; a round never launched is the backend's bug */
		if (round_id > s->round_id)
			rk__warn(0, "completion for round %llu, expected %llu: ignored",
				 (unsigned long long)round_id, (unsigned long long)s->round_id);
		return;
	}
	if (s->depth || s->walking) {
		/* reported from inside launch() (or another call of ours): handled
		 * from the loop, so a backend that completes at once never recurses */
		s->done_pending = true;
		s->done_status = status;
		kick(s);
		return;
	}
	rk__sched_leader_complete(s, status);
}
