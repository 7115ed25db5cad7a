/* SPDX-License-Identifier: MIT */
/*
 * A link's learner of arrival gaps on its loop: an ordinary source (expect()
 * and verdict(), no poll(); its learning is wait.c's), attached at the link's
 * first busy frame and detached before the link is freed.
 */
#include "config.h"

#include "runtime_int.h"
#include "wait_int.h"

void rk__gaps_arrival(struct rk_loop *loop, struct rk__gaps *g)
{
	if (!g->src.loop) {
		rk_source_init(&g->src, &rk__gaps_ops, NULL);
		rk__gaps_init(g, rk__loop_wait(loop));
		rk_loop_add_source(loop, &g->src);
	}
	rk__loop_busy_by(loop, &g->src);	/* whose work this iteration's is */
	if (rk__gaps_seen(g, rk_loop_now(loop), rk__loop_after_park(loop)))
		rk__loop_source_event(loop, &g->src);	/* what a prediction waits for */
}

void rk__gaps_detach(struct rk__gaps *g)
{
	if (g->src.loop)
		rk_loop_remove_source(g->src.loop, &g->src);
}
