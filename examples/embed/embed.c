/* SPDX-License-Identifier: MIT */
#include <stdio.h>

#include <rankrt/rankrt.h>

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	/* a USER frame of this application from rank 'peer' (a scheduler or an
	 * NCCL bootstrap on the world takes its own frames before they get here) */
	return RK_BUSY;		/* real work: keep the loop spinning for its window */
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	fprintf(stderr, "rank %d failed: %s\n", rank, rk_strerror(err));
	rk_loop_stop(rk_world_loop(w));
}

int main(void)
{
	static const struct rk_world_ops ops = { .frame = on_frame, .peer_error = on_peer_error };
	struct rk_config cfg;
	struct rk_loop *loop;
	struct rk_world *world;
	char err[2048];		/* an unknown variable's message lists every known one */
	int ret;

	rk_config_init(&cfg);
	cfg.catch_signals = true;			/* SIGINT/SIGTERM stop the loop */
	/* RK_RANK, RK_WORLD_SIZE, RK_LEADER, ...; else the launcher's (README "Launching") */
	if (rk_config_from_env(&cfg, err, sizeof(err)) ||
	    rk_config_from_launcher_env(&cfg, err, sizeof(err))) {
		fprintf(stderr, "%s\n", err);		/* the bad variable, by name */
		return 2;
	}
	if ((ret = rk_loop_create(&cfg, &loop)))
		goto out;
	if ((ret = rk_world_create(loop, &ops, NULL, &world)) == 0) {
		/* run until rk_loop_stop() or a signal */
		if ((ret = rk_world_wait_ready(world)) == 0)
			ret = rk_loop_run(loop, RK_RUN_DEFAULT);
		rk_world_destroy(world);		/* BYE to every peer, bounded linger */
	}
	rk_loop_destroy(loop);
out:
	if (ret && ret != -RK_ESTOPPED)
		fprintf(stderr, "rankrt: %s\n", rk_strerror(ret));
	return ret == 0 || ret == -RK_ESTOPPED ? 0 : 1;
}
