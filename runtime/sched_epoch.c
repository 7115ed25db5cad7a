/* SPDX-License-Identifier: MIT */
/*
 * Round epochs on the scheduler's side (rk_sched.h, "Round epochs"; the
 * region itself is runtime/epoch.c): which region a scheduler publishes its
 * rounds in, chosen once before any backend takes it, and the publications
 * before each launch() (sched_int.h).
 */
#include "config.h"

#include "sched_int.h"

/*
 * The region behind rk_sched_epoch(), once, before any backend takes it (at
 * rk_sched_create() on a settled world, else before the first round's
 * launch): the same-host region when there is one (rk__world_epoch()) and it
 * is not closed (a scheduler before this one used it: its rounds were its
 * own), the leader also publishing into it for its followers when its own
 * backend keeps the local one. Anything else keeps the local region.
 */
void rk__sched_choose_region(struct rk_sched *s)
{
	bool opt_in = (s->ops->flags & RK_BACKEND_SHARED_EPOCH) != 0;
	struct rk_epoch *sh;

	if (s->ep_fixed)
		return;
	s->ep_fixed = true;
	if (s->resident == RK_RESIDENT_OFF || rk_world_size(s->world) < 2)
		return;
	sh = rk__world_epoch(s->world);
	if (sh && rk_epoch_current(sh) == RK_EPOCH_CLOSED)
		sh = NULL;
	if (!sh) {
		if (s->rank != 0)
			rk__info(s->rank, "round epochs: this rank's own region (the link to "
				 "rank 0 has no shared one)");
		return;
	}
	rk_epoch_hold(sh);
	if (s->rank == 0 && !opt_in) {
		s->ep_pub = sh;
		rk__info(0, "round epochs: also published in the region same-host followers map");
		return;
	}
	if (s->rank != 0 && !opt_in) {
		rk_epoch_release(sh);
		rk__info(s->rank, "round epochs: this rank's own region (the backend does not "
			 "take the shared one)");
		return;
	}
	rk_epoch_release(s->ep);	/* no backend has taken it yet */
	s->ep = sh;
	s->ep_view = s->rank != 0;
	s->ep_shared = s->rank == 0;
	rk__info(s->rank, s->rank ? "round epochs: the leader's region, shared on this host"
				  : "round epochs: one region, shared with same-host followers");
}

/*
 * Publish round @id (ROUND payload @p, @len bytes) for resident consumers in
 * @e. A refusal (a descriptor too large for the region) still moves the
 * epoch, and the consumers see that they must leave this round to the launch
 * path; it is counted, never fatal. Return: rk_epoch_publish()'s.
 */
static int publish_in(struct rk_sched *s, struct rk_epoch *e, uint64_t id, uint32_t flags,
		      const uint8_t *p, uint32_t len)
{
	int ret = rk_epoch_publish(e, id, flags, p, len);

	if (ret) {
		if (!s->stats.resident_fallbacks)
			rk__warn(s->rank, "round %llu: not published for resident consumers: %s",
				 (unsigned long long)id, rk_strerror(ret));
		s->stats.resident_fallbacks++;
	}
	return ret;
}

/*
 * Round @id in this rank's own region, right before launch(): the leader
 * once the ROUND is sent, a follower as it receives it; a follower on the
 * leader's region only counts it.
 */
void rk__sched_publish(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
		       uint32_t len)
{
	int ret;

	if (!s->ep_fixed)
		rk__sched_choose_region(s);
	if (!s->ep || s->ep_shared)
		return;		/* the leader's shared region: rk__sched_publish_shared() */
	if (s->ep_view) {
		/* the leader published it there before it sent the ROUND */
		s->stats.shared_rounds++;
		return;
	}
	ret = publish_in(s, s->ep, id, flags, p, len);
	if (ret && ret != -RK_ETOOBIG)
		return;
	s->stats.published++;
}

/*
 * Leader: round @id into the region its same-host followers map, before the
 * ROUND is sent: a follower whose loop has the ROUND finds its epoch there
 * (its launch() and its consumer decide from the same facts), and its
 * consumer starts without waiting for its loop.
 */
void rk__sched_publish_shared(struct rk_sched *s, uint64_t id, uint32_t flags, const uint8_t *p,
			      uint32_t len)
{
	struct rk_epoch *e;
	int ret;

	if (!s->ep_fixed)
		rk__sched_choose_region(s);
	e = s->ep_shared ? s->ep : s->ep_pub;
	if (!e)
		return;
	ret = publish_in(s, e, id, flags, p, len);
	if (ret && ret != -RK_ETOOBIG)
		return;
	s->stats.shared_rounds++;
	if (e == s->ep)
		s->stats.published++;
}

struct rk_epoch *rk_sched_epoch(const struct rk_sched *s)
{
	return s ? s->ep : NULL;
}

enum rk_resident_mode rk_sched_resident(const struct rk_sched *s)
{
	return s ? s->resident : RK_RESIDENT_OFF;
}
