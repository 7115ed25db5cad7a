// SPDX-License-Identifier: MIT
/*
 * check_sched_world: the scheduler in a two-rank world over loopback, both
 * loops pumped in this thread (rank_test.h): each teardown order,
 * mid-generation, of the leader or of the follower, and which frames reach
 * the scheduler rather than the application; the round watchdog (a rank
 * that stops finishing rounds, progress calls).
 */
#include "sched_test.h"
#include "rank_test.h"

/*
 * A backend in an allocation of its own, so that a call into it after its
 * teardown is a use after free that ASan reports. Completion comes from a
 * post; as under tensor parallelism, the leader's share of a round completes
 * only once the follower has launched it too (g_f_round), so a follower that
 * launches nothing holds the leader's round until the leader aborts it.
 */
struct tb {
	struct rk_loop *loop;
	struct rk_world *w;		/* set: a follower sends a message per round */
	uint64_t msgs;			/* leader: messages received (tb_frame) */
	struct rk_post post;
	struct rk_sched *target;
	uint64_t round;
	bool held;			/* launched; the post has not reported it */
	bool leader;
	bool abort;			/* a peer failed: report what is held, failed */
	uint32_t n_streams;
	struct rk_post stall_post;	/* reports the stalled round (follower) */
	uint64_t stalled;		/* the round held back, 0: none */
	struct rk_sched *stall_target;
};

static uint64_t g_f_round;		/* the last round the follower launched */
/*
 * The watchdog's tests: the leader's share waits for the follower's report
 * (g_f_done), as a reduction does, and rank g_stall_rank does not finish
 * round g_stall_round until the test releases it (tb.stall_post).
 */
static bool g_tp;
static uint64_t g_f_done;		/* the last round the follower reported */
static uint64_t g_stall_round;		/* 0: none */
static int g_stall_rank;
static const char *g_f_bound;		/* the follower's RK_ROUND_TIMEOUT_MS, if not the leader's */

#define TB_TAG	0x7462u			/* the backend's messages (tb_frame) */

static enum rk_activity tb_done(struct rk_post *p)
{
	struct tb *b = p->data;

	if (!b->abort && b->leader &&
	    ((g_tp ? g_f_done : g_f_round) < b->round ||
	     (g_stall_rank == 0 && b->round == g_stall_round))) {
		rk_loop_post(b->loop, p);	/* look again next iteration */
		return RK_IDLE;
	}
	if (!b->leader)
		g_f_done = b->round;
	if (b->w && !b->leader)		/* as a follower's partials would go */
		ck_assert_int_eq(rk_world_send_user(b->w, 0, TB_TAG, &b->round,
						    sizeof(b->round)), 0);
	b->held = false;
	rk_sched_complete(b->target, b->round, b->abort ? -ECONNRESET : 0);
	return RK_BUSY;
}

static int tb_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *r,
		     unsigned int flags)
{
	struct tb *b = ctx;

	(void)flags;
	if (b->abort)
		return -EBUSY;
	if (b->held && g_tp && b->leader) {
		/* a round the watchdog ended: over now; the pending post takes this one */
		rk_sched_complete(b->target, b->round, -ECANCELED);
		b->target = s;
		b->round = r->round_id;
		b->n_streams = r->n_streams;
		return 0;
	}
	if (b->held)
		return -EBUSY;
	if (!b->leader && r->round_id == g_stall_round && g_stall_rank == 1) {
		/* stuck: reported only when the test releases it */
		b->stalled = r->round_id;
		b->stall_target = s;
		g_f_round = r->round_id;
		return 0;
	}
	b->target = s;
	b->round = r->round_id;
	b->n_streams = r->n_streams;
	b->held = true;
	if (!b->leader)
		g_f_round = r->round_id;
	rk_loop_post(b->loop, &b->post);
	return 0;
}

static int tb_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct tb *b = ctx;

	if (i >= b->n_streams)
		return -EINVAL;
	*tok = (uint32_t)(b->round * 3 + i + j) % VOC;
	return 0;
}

static void tb_retire(void *ctx, uint64_t id)
{
	(void)ctx;
	(void)id;
}

/* The leader gets the follower's messages from the scheduler, never from the world. */
static int tb_frame(void *ctx, int peer, const struct rk_wire_user *msg)
{
	struct tb *b = ctx;

	if (!b->leader || peer != 1 || msg->tag != TB_TAG || msg->len != sizeof(uint64_t))
		return -EPROTO;
	b->msgs++;
	return RK_BUSY;
}

/* The leader's share waits for the follower's report (g_tp), as a reduction does. */
static int tb_waiting_for(void *ctx, uint64_t round_id)
{
	struct tb *b = ctx;

	if (!b->leader || !g_tp)
		return -1;
	return g_f_done < round_id ? 1 : 0;
}

static const struct rk_backend_ops tb_ops = {
	.launch = tb_launch,
	.token = tb_token,
	.retire = tb_retire,
	.frame = tb_frame,
	.user_tag = TB_TAG,
	.user_tags = 1,
	.waiting_for = tb_waiting_for,
};

static enum rk_activity tb_stall_done(struct rk_post *p)
{
	struct tb *b = p->data;
	uint64_t id = b->stalled;

	b->stalled = 0;
	if (id > g_f_done)
		g_f_done = id;
	rk_sched_complete(b->stall_target, id, 0);
	return RK_BUSY;
}

static struct tb *tb_create(struct rk_loop *loop, bool leader)
{
	struct tb *b = calloc(1, sizeof(*b));

	ck_assert_ptr_nonnull(b);
	b->loop = loop;
	b->leader = leader;
	rk_post_init(&b->post, tb_done, b);
	rk_post_init(&b->stall_post, tb_stall_done, b);
	return b;
}

/* -EBUSY while it holds a round, as toy_cpu_destroy(). */
static int tb_destroy(struct tb *b)
{
	if (b->held || b->stalled)
		return -EBUSY;
	free(b);
	return 0;
}

/* A rank of the two-rank world: its scheduler and backend beside its loop and world. */
struct srank {
	struct rank r;
	struct rk_sched *s;
	struct tb *b;
};

/* What a server does when a rank dies: stop generating, fail what waits for it. */
static void tr_peer_error(struct rank *r, int rank, int err)
{
	struct srank *t = rk__container_of(r, struct srank, r);

	(void)rank;
	(void)err;
	if (t->s)
		rk_sched_stop(t->s);
	if (t->b)
		t->b->abort = true;
}

/* Pump both ranks until @cond, which must come within 10 s. */
#define TR_PUMP_UNTIL(t, cond)								\
	ck_assert_msg(PUMP_UNTIL(10000, cond, &(t)[0].r, &(t)[1].r), "timed out: %s", #cond)

static void tr_start_bound(struct srank *r, const char *round_timeout_ms)
{
	uint64_t deadline = rk_test_deadline_ms(10000);
	struct rk_sched_config sc;
	atomic_int port = 0;
	struct rk_config c;
	int i;

	memset(r, 0, 2 * sizeof(*r));
	g_f_round = 0;
	g_f_done = 0;
	for (i = 0; i < 2; i++) {
		const char *bound = i == 1 && g_f_bound ? g_f_bound : round_timeout_ms;

		rk_config_init(&c);
		if (bound)
			ck_assert_int_eq(rk_config_set(&c, "RK_ROUND_TIMEOUT_MS", bound, NULL, 0), 0);
		c.rank = i;
		c.world_size = 2;
		c.session_id = 0x7464;
		r[i].r.on_error = tr_peer_error;
		ck_assert_int_eq(rank_join(&r[i].r, &c, &port, deadline), 0);
		r[i].b = tb_create(r[i].r.loop, i == 0);
		rk_sched_config_init(&sc);
		sc.max_batch = 4;
		ck_assert_int_eq(rk_sched_create(r[i].r.w, &sc, &tb_ops, r[i].b, &r[i].s), 0);
	}
	TR_PUMP_UNTIL(r, r[0].r.ready && r[1].r.ready);
}

static void tr_start(struct srank *r)
{
	tr_start_bound(r, NULL);
}

/* Whatever is left of rank @t, in the documented order: scheduler, backend, world, loop. */
static void tr_down(struct srank *t, struct srank *all)
{
	if (t->s) {
		ck_assert_int_eq(rk_sched_destroy(t->s), 0);
		t->s = NULL;
	}
	if (t->b) {
		TR_PUMP_UNTIL(all, !t->b->held);
		ck_assert_int_eq(tb_destroy(t->b), 0);
		t->b = NULL;
	}
	if (t->r.w) {
		ck_assert_int_eq(rk_world_destroy(t->r.w), 0);
		t->r.w = NULL;
	}
	ck_assert_int_eq(rk_loop_run(t->r.loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(rk_loop_destroy(t->r.loop), 0);
	t->r.loop = NULL;
	rank_free(&t->r);
}

enum { TD_STOP_DRAIN, TD_SCHED_THEN_WORLD, TD_WORLD_THEN_SCHED, TD_BACKEND_FIRST,
       TD_BACKEND_FIRST_IDLE, TD_FOLLOWER_FIRST, TD_FOLLOWER_STOPS, TD__COUNT };

static void on_tokens_quiet(struct rk_request *req, const uint32_t *t, uint32_t n, bool done,
			    int err)
{
	struct out *o = req->data;

	if (n && o->n + n <= ARRAY_SIZE(o->toks))
		memcpy(o->toks + o->n, t, n * sizeof(*t));
	o->n += n;
	if (done) {
		o->done++;
		o->err = err;
	}
}

static int tr_done(void)
{
	int i, n = 0;

	for (i = 0; i < 4; i++)
		n += g_a[i].done;
	return n;
}

static uint64_t tr_rounds(struct srank *t)
{
	struct rk_sched_stats st;

	rk_sched_stats(t->s, &st, sizeof(st));
	return st.rounds;
}

/*
 * Each teardown order, mid-generation (a round in flight whose completion is
 * a post not yet run), of the leader or of the follower: the library makes
 * the order safe or refuses it (-EBUSY) until it is, every request ends
 * exactly once, and nothing reaches a destroyed object (run under ASan).
 */
START_TEST(test_teardown_order)
{
	struct srank r[2];
	uint64_t rounds;
	int i;

	tr_start(r);
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], NULL, prompts[i], _i == TD_BACKEND_FIRST_IDLE ? 8 : 400);
		g_a[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_a[i].req), 0);
	}
	out_init(&g_b[0], NULL, prompts[0], 8);
	g_b[0].req.cb = on_tokens_quiet;
	if (_i == TD_BACKEND_FIRST_IDLE)
		TR_PUMP_UNTIL(r, tr_done() == 4);
	else
		TR_PUMP_UNTIL(r, tr_rounds(&r[0]) >= 3 && rk_sched_busy(r[0].s));

	switch (_i) {
	case TD_STOP_DRAIN:
		rk_sched_stop(r[0].s);
		ck_assert_int_eq(tr_done(), 4);
		TR_PUMP_UNTIL(r, !rk_sched_busy(r[0].s));
		break;
	case TD_SCHED_THEN_WORLD:
		/* destroyed with its round held: the report frees it, later */
		ck_assert(rk_sched_busy(r[0].s));
		ck_assert_int_eq(rk_sched_destroy(r[0].s), 0);
		r[0].s = NULL;
		ck_assert_int_eq(tr_done(), 4);
		ck_assert(r[0].b->held);
		ck_assert_int_eq(rk_world_destroy(r[0].r.w), 0);
		r[0].r.w = NULL;
		break;
	case TD_WORLD_THEN_SCHED:
		ck_assert_int_eq(rk_world_destroy(r[0].r.w), -EBUSY);	/* nothing changed */
		ck_assert_int_eq(tr_done(), 0);
		rounds = tr_rounds(&r[0]);
		TR_PUMP_UNTIL(r, tr_rounds(&r[0]) > rounds + 2);
		break;
	case TD_BACKEND_FIRST:
		rk_sched_stop(r[0].s);
		TR_PUMP_UNTIL(r, !r[0].b->held);
		ck_assert_int_eq(tb_destroy(r[0].b), 0);
		r[0].b = NULL;
		for (i = 0; i < 50; i++)	/* nothing may call the freed backend now */
			pump(RANKS(&r[0].r, &r[1].r));
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_b[0].req), -RK_ESTOPPED);
		break;
	case TD_BACKEND_FIRST_IDLE:
		ck_assert(rk_sched_idle(r[0].s));
		ck_assert_int_eq(tb_destroy(r[0].b), 0);	/* no stop: destroy calls no op */
		r[0].b = NULL;
		break;
	case TD_FOLLOWER_FIRST:
		/* the follower goes with a ROUND on its way to it: its world's
		 * teardown must not hand that frame to the freed scheduler (the
		 * pointer stays dangling, on purpose, until the world is gone) */
		TR_PUMP_UNTIL(r, !rk_sched_busy(r[1].s) && !r[1].b->held);
		ck_assert_int_eq(rk_sched_destroy(r[1].s), 0);
		ck_assert_int_eq(tb_destroy(r[1].b), 0);
		r[1].b = NULL;
		for (i = 0; i < 20; i++)
			ck_assert_int_eq(rk_loop_run(r[0].r.loop, RK_RUN_NOWAIT), 0);
		ck_assert_int_eq(rk_world_destroy(r[1].r.w), 0);
		r[1].r.w = NULL;
		r[1].s = NULL;
		tr_down(&r[1], r);
		/* the leader hears of it and stops (tr_peer_error) */
		TR_PUMP_UNTIL(r, tr_done() == 4);
		for (i = 0; i < 4; i++)
			ck_assert_int_ne(g_a[i].err, 0);
		break;
	case TD_FOLLOWER_STOPS:
		/* a stopped follower launches nothing: it fails the leader's round */
		rk_sched_stop(r[1].s);
		TR_PUMP_UNTIL(r, tr_done() == 4);
		for (i = 0; i < 4; i++)
			ck_assert_int_eq(g_a[i].err, -RK_ESTOPPED);
		ck_assert_int_eq(r[0].r.nerr, 0);	/* the world is whole */
		r[0].b->abort = true;	/* the follower's share will never come */
		break;
	}
	if (r[0].r.loop)
		tr_down(&r[0], r);
	if (r[1].r.loop)
		tr_down(&r[1], r);
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g_a[i].done, 1);
}
END_TEST

/*
 * The world hands the scheduler its frames: through a generation, a failed
 * share and the backend's messages, the application's frame callback gets
 * only its own frame, never a ROUND, a ROUND_DONE or a message of the
 * backend's tag, and the backend gets every one of its messages from the
 * scheduler. A ROUND is decoded once per rank: the follower's scheduler
 * decodes none (its link did), the leader's its own, once.
 */
START_TEST(test_frames_claimed)
{
	struct rk_sched_stats st[2];
	struct srank r[2];
	int i;

	tr_start(r);
	r[1].b->w = r[1].r.w;
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], NULL, prompts[i], 12);
		g_a[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_a[i].req), 0);
	}
	TR_PUMP_UNTIL(r, tr_done() == 4 && !r[1].b->held);
	TR_PUMP_UNTIL(r, r[0].b->msgs == tr_rounds(&r[1]));
	for (i = 0; i < 4; i++)
		ck_assert_int_eq(g_a[i].err, 0);
	ck_assert_int_eq(rk_world_send_user(r[1].r.w, 0, TB_TAG + 1, NULL, 0), 0);
	TR_PUMP_UNTIL(r, count_tag(&r[0].r, TB_TAG + 1) == 1);
	/* a stopped follower answers the next ROUND with a ROUND_DONE */
	rk_sched_stop(r[1].s);
	out_init(&g_b[0], NULL, prompts[0], 8);
	g_b[0].req.cb = on_tokens_quiet;
	ck_assert_int_eq(rk_sched_submit(r[0].s, &g_b[0].req), 0);
	TR_PUMP_UNTIL(r, g_b[0].done);
	ck_assert_int_eq(g_b[0].err, -RK_ESTOPPED);
	r[0].b->abort = true;	/* the follower's share will never come */
	for (i = 0; i < 2; i++) {
		rk_sched_stats(r[i].s, &st[i], sizeof(st[i]));
		/* what the world's frame callback was offered */
		ck_assert_uint_eq(count_type(&r[i].r, RK_FRAME_ROUND), 0);
		ck_assert_uint_eq(count_type(&r[i].r, RK_FRAME_ROUND_DONE), 0);
		ck_assert_uint_eq(count_tag(&r[i].r, TB_TAG), 0);
		ck_assert_uint_eq(count_type(&r[i].r, RK_FRAME_USER), i == 0 ? 1 : 0);
	}
	ck_assert_uint_gt(st[1].rounds, 0);
	ck_assert_uint_eq(st[0].rounds, st[1].rounds + 1);	/* the last one, failed */
	ck_assert_uint_eq(r[0].b->msgs, st[1].rounds);
	ck_assert_uint_eq(st[0].round_decodes, st[0].rounds);
	ck_assert_uint_eq(st[1].round_decodes, 0);
	tr_down(&r[0], r);
	tr_down(&r[1], r);
}
END_TEST

/* What each rank's timeout callback heard. */
static struct {
	int calls;
	uint64_t round;
	int rank;
} g_heard[2];

static void on_timeout(void *arg, struct rk_sched *s, uint64_t round_id, int rank)
{
	int me = (int)(intptr_t)arg;

	(void)s;
	g_heard[me].calls++;
	g_heard[me].round = round_id;
	g_heard[me].rank = rank;
}

enum { WD_FOLLOWER_STALLS, WD_LEADER_STALLS, WD_PROGRESS, WD_FOLLOWER_SILENT, WD__COUNT };

/*
 * The round watchdog on a small bound (RK_ROUND_TIMEOUT_MS): rank 1 (or the
 * leader) stops finishing round 3. The requests in it fail alone with
 * -RK_EROUNDTIMEOUT, each rank's callback hears which rank was slow, and the
 * requests after it succeed. With progress calls for that round, its
 * deadline moves on both ranks: nothing fails. A follower that never says
 * its share is late (its watchdog off here; a blocked loop or a fake rank
 * elsewhere) is still the one blamed: the leader's backend names it.
 */
START_TEST(test_round_timeout)
{
	struct rk_sched_stats st[2];
	struct srank r[2];
	uint64_t calls = 0;
	int i, slow = _i == WD_LEADER_STALLS ? 0 : 1;

	g_tp = true;
	g_stall_round = 3;
	g_stall_rank = slow;
	g_f_bound = _i == WD_FOLLOWER_SILENT ? "0" : NULL;
	memset(g_heard, 0, sizeof(g_heard));
	tr_start_bound(r, _i == WD_PROGRESS ? "400" : "200");
	for (i = 0; i < 2; i++)
		rk_sched_set_timeout_cb(r[i].s, on_timeout, (void *)(intptr_t)i);
	for (i = 0; i < 4; i++) {
		out_init(&g_a[i], NULL, prompts[i], 8);
		g_a[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_a[i].req), 0);
	}
	if (_i == WD_PROGRESS) {
		/* the follower's backend says "still working", then finishes */
		TR_PUMP_UNTIL(r, r[1].b->stalled == 3);
		ck_assert_int_eq(rk_sched_round_progress(r[1].s, 2), -ENOENT);
		for (calls = 0; calls < 40; calls++) {
			ck_assert_int_eq(rk_sched_round_progress(r[1].s, 3), 0);
			PUMP_FOR(40, &r[0].r, &r[1].r);
			ck_assert_int_eq(tr_done(), 0);
		}
		rk_loop_post(r[1].r.loop, &r[1].b->stall_post);
	}
	TR_PUMP_UNTIL(r, tr_done() == 4);
	for (i = 0; i < 4; i++) {
		ck_assert_int_eq(g_a[i].done, 1);
		ck_assert_int_eq(g_a[i].err, _i == WD_PROGRESS ? 0 : -RK_EROUNDTIMEOUT);
	}
	if (_i != WD_PROGRESS)
		TR_PUMP_UNTIL(r, g_heard[1].calls == 1);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(g_heard[i].calls, _i == WD_PROGRESS ? 0 : 1);
		if (_i != WD_PROGRESS) {
			ck_assert_uint_eq(g_heard[i].round, 3);
			ck_assert_int_eq(g_heard[i].rank, slow);
		}
	}
	/* the job goes on: later requests succeed */
	if (r[1].b->stalled)
		rk_loop_post(r[1].r.loop, &r[1].b->stall_post);
	g_stall_round = 0;
	for (i = 0; i < 2; i++) {
		out_init(&g_b[i], NULL, prompts[i + 4], 6);
		g_b[i].req.cb = on_tokens_quiet;
		ck_assert_int_eq(rk_sched_submit(r[0].s, &g_b[i].req), 0);
	}
	TR_PUMP_UNTIL(r, g_b[0].done && g_b[1].done);
	for (i = 0; i < 2; i++) {
		ck_assert_int_eq(g_b[i].err, 0);
		ck_assert_uint_eq(g_b[i].n, 6);
	}
	for (i = 0; i < 2; i++) {
		rk_sched_stats(r[i].s, &st[i], sizeof(st[i]));
		ck_assert_uint_eq(st[i].round_timeouts, _i == WD_PROGRESS ? 0 : 1);
		if (i == 0 || _i != WD_FOLLOWER_SILENT)
			ck_assert_uint_gt(st[i].round_bound_ns, 0);
	}
	if (_i == WD_PROGRESS)
		ck_assert_uint_gt(st[1].progress_sent, 1);
	/* the application never sees the watchdog's frames */
	ck_assert_uint_eq(count_type(&r[0].r, RK_FRAME_ROUND_WATCH), 0);
	ck_assert_uint_eq(count_type(&r[1].r, RK_FRAME_ROUND_WATCH), 0);
	TR_PUMP_UNTIL(r, !r[0].b->held && !r[1].b->held && !r[1].b->stalled);
	tr_down(&r[0], r);
	tr_down(&r[1], r);
	g_tp = false;
	g_f_bound = NULL;
}
END_TEST

static Suite *sched_world_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc;

	tc = rk_tcase(s, "teardown", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_teardown_order, 0, TD__COUNT);
	tcase_add_test(tc, test_frames_claimed);
	tc = rk_tcase(s, "watchdog", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_round_timeout, 0, WD__COUNT);
	return s;
}

int main(void)
{
	return rk_check_run(sched_world_suite());
}
