// SPDX-License-Identifier: MIT
/*
 * check_shm_lane: what a same-host follower writes and maps beside its link:
 * the lane (rk_link_lane_open(): frames from any thread, full, waking, and
 * outliving the link) and its view of the leader's round epochs
 * (docs/RESIDENT-SHM.md).
 */
#define _GNU_SOURCE
#include "shm_test.h"

/* ---- the follower's lane ------------------------------------------------------- */

/* One TAG_SEQ frame of @len data bytes on @ln, @seq in its first four. */
static int lane_seq(struct rk_lane *ln, uint32_t seq, size_t len)
{
	uint8_t buf[4096], *p;
	int err = 0, n;

	ck_assert_uint_le(len, sizeof(buf));
	ck_assert_uint_ge(len, 4);
	memset(buf, (int)(seq & 0xff), len);
	memcpy(buf, &seq, 4);
	p = rk_lane_reserve(ln, (uint32_t)(8 + len), &err);
	if (!p)
		return err;
	n = rk_wire_encode_user(p, 8 + len, TAG_SEQ, buf, (uint32_t)len);
	ck_assert_int_eq(n, (int)(8 + len));
	return rk_lane_commit(ln, RK_FRAME_USER, 0, (uint32_t)n);
}

/*
 * Who may have a lane, and what a lane refuses: only the follower's end of a
 * link on shared memory, one at a time; a lane closed and opened again goes
 * on where the last stopped (its frames keep their order and the lane's
 * sequence: a restart at 0 would fail the link with RK_ESEQ).
 */
START_TEST(test_lane_open)
{
	static const enum rk_shm_mode tcp[2] = { RK_SHM_AUTO, RK_SHM_OFF };
	struct rank r[2] = { 0 };
	struct rk_link_stats st;
	struct rk_lane *a, *b;
	struct rk_lane_stats ls;
	uint8_t *p;
	int err, i;

	start(r, 2, NULL);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[0].w, 1), &a), -EOPNOTSUPP);
	ck_assert_ptr_null(a);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &a), 0);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &b), -EBUSY);
	ck_assert_uint_ge(rk_lane_max(a), 4096);
	err = 0;
	ck_assert_ptr_null(rk_lane_reserve(a, rk_lane_max(a) + 1, &err));
	ck_assert_int_eq(err, -RK_ETOOBIG);
	p = rk_lane_reserve(a, 16, &err);
	ck_assert_ptr_nonnull(p);
	ck_assert_ptr_null(rk_lane_reserve(a, 16, &err));
	ck_assert_int_eq(err, -EBUSY);
	ck_assert_int_eq(rk_lane_commit(a, RK_FRAME_NCCL_ID, 0, 16), -EINVAL);
	ck_assert_int_eq(rk_lane_commit(a, RK_FRAME_USER, 0, 8), -EINVAL);	/* ended */
	ck_assert_ptr_nonnull(rk_lane_reserve(a, 16, &err));
	ck_assert_int_eq(rk_lane_commit(a, RK_FRAME_USER, 0, 17), -EINVAL);	/* past it */
	for (i = 0; i < 10; i++)
		ck_assert_int_eq(lane_seq(a, (uint32_t)i, 16 + (size_t)i * 40), 0);
	rk_lane_stats(a, &ls, sizeof(ls));
	ck_assert_uint_eq(ls.frames, 10);
	rk_lane_close(a);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &b), 0);
	for (i = 10; i < 20; i++)
		ck_assert_int_eq(lane_seq(b, (uint32_t)i, 100), 0);
	ck_assert(PUMP_UNTIL(5000, r[0].nseq == 20, &r[0], &r[1]));
	ck_assert_uint_eq(r[0].disorder, 0);
	ck_assert_int_eq(r[0].rx[0].peer, 1);
	link_stats(&r[0], 1, &st);
	ck_assert_uint_eq(st.shm_lane_rx, 20);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	/* the link ends: the lane refuses, and outlives the world safely */
	rank_stop(&r[1]);
	ck_assert_int_eq(lane_seq(b, 20, 8), -EPIPE);
	rk_lane_close(b);
	rank_stop(&r[0]);

	/* a link on TCP, and RK_LANE=0, have none */
	start(r, 2, tcp);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &a), -EOPNOTSUPP);
	stop(r, 2);
	memset(r, 0, sizeof(r));
	setenv("RK_LANE", "0", 1);
	{
		struct rk_config c;

		rk_config_init(&c);
		ck_assert_int_eq(rk_config_from_env(&c, NULL, 0), 0);
		ck_assert(!rk__config_tuning(&c)->lane);
	}
	unsetenv("RK_LANE");
	g_lane_off = true;
	start(r, 2, NULL);
	g_lane_off = false;
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &a), -EOPNOTSUPP);
	stop(r, 2);
}
END_TEST

/*
 * A lane without room refuses (-EAGAIN, counted, nothing sent, the lane's
 * sequence not spent); once the leader read, it takes frames again, and
 * every frame taken arrives once, in order.
 */
START_TEST(test_lane_full)
{
	struct rank r[2] = { 0 };
	struct rk_lane *ln;
	struct rk_lane_stats ls;
	uint32_t sent = 0;
	int ret;

	start(r, 2, NULL);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &ln), 0);
	while ((ret = lane_seq(ln, sent, 1000)) == 0)
		sent++;
	ck_assert_int_eq(ret, -EAGAIN);
	ck_assert_uint_gt(sent, 100);
	rk_lane_stats(ln, &ls, sizeof(ls));
	ck_assert_uint_eq(ls.full, 1);
	ck_assert_uint_eq(ls.frames, sent);
	ck_assert(PUMP_UNTIL(5000, r[0].nseq == sent, &r[0], &r[1]));
	ck_assert_int_eq(lane_seq(ln, sent, 1000), 0);
	sent++;
	ck_assert(PUMP_UNTIL(5000, r[0].nseq == sent, &r[0], &r[1]));
	ck_assert_uint_eq(r[0].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	rk_lane_close(ln);
	stop(r, 2);
}
END_TEST

/*
 * The lane wakes a sleeping leader, as the link's own writer does (both
 * ranks in this thread, as test_no_lost_wakeup): a lane frame published
 * before the leader's arm step is seen by it (no sleep); once the leader is
 * asleep the next lane frame rings its bell exactly once; while it is awake
 * no frame makes a wake-up syscall. Futex waits and eventfds.
 */
START_TEST(test_lane_wake)
{
	struct rank r[2] = { 0 };
	struct rk_lane *ln;
	struct rk_lane_stats ls;
	struct rk_link *l0;

	rk__shm_test_mask(_i ? RK__SHM_F_FUTEX : 0);
	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);
	l0 = rk_world_link(r[0].w, 1);
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &ln), 0);

	ck_assert_int_eq(lane_seq(ln, 0, 8), 0);	/* the leader is awake */
	rk_lane_stats(ln, &ls, sizeof(ls));
	ck_assert_uint_eq(ls.wakes, 0);
	ck_assert_int_eq(rk__shm_test_arm(l0), 1);	/* it looks again and finds it */
	ck_assert(PUMP_UNTIL(5000, r[0].nseq == 1, &r[0]));

	PUMP_UNTIL(5, false, &r[0]);
	ck_assert_int_eq(rk__shm_test_arm(l0), 0);	/* asleep */
	ck_assert_int_eq(lane_seq(ln, 1, 8), 0);
	ck_assert_int_eq(lane_seq(ln, 2, 8), 0);
	rk_lane_stats(ln, &ls, sizeof(ls));
	ck_assert_uint_eq(ls.wakes, 1);			/* the bell was taken */
	ck_assert(PUMP_UNTIL(5000, r[0].nseq == 3, &r[0], &r[1]));
	ck_assert_uint_eq(r[0].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	rk_lane_close(ln);
	stop(r, 2);
}
END_TEST

struct lane_writer {
	struct rk_lane *ln;
	uint32_t n;
	uint64_t refused;
	atomic_bool done;
};

static void *lane_writer_main(void *arg)
{
	struct lane_writer *lw = arg;
	uint32_t i = 0;
	int ret;

	while (i < lw->n) {
		ret = lane_seq(lw->ln, i, 16 + (i * 37) % 3000);
		if (ret == -EAGAIN) {
			lw->refused++;
			sched_yield();
			continue;
		}
		if (ret)
			break;
		i++;
	}
	lw->n = i;
	atomic_store(&lw->done, true);
	return NULL;
}

/*
 * A thread that is not the loop's sends on the lane while this thread runs
 * both loops and the link carries its own frames both ways (pings and their
 * pongs): every lane frame arrives once, in the lane's order, and every pong.
 */
START_TEST(test_lane_thread)
{
	struct rank r[2] = { 0 };
	struct lane_writer lw = { .n = 3000 };
	struct rk_link_stats st;
	pthread_t th;
	uint32_t i;

	start(r, 2, NULL);
	r[1].echo = true;
	ck_assert_int_eq(rk_link_lane_open(rk_world_link(r[1].w, 0), &lw.ln), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, lane_writer_main, &lw), 0);
	for (i = 0; i < 300; i++) {
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_PING, i, 16 + i % 100), 0);
		ck_assert(PUMP_UNTIL(10000, r[0].npong == i + 1, &r[0], &r[1]));
	}
	/* the leader reads while the writer may still wait for room */
	ck_assert(PUMP_UNTIL(10000, atomic_load(&lw.done), &r[0], &r[1]));
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(lw.n, 3000);
	ck_assert(PUMP_UNTIL(10000, r[0].nseq == 3000, &r[0], &r[1]));
	ck_assert_uint_eq(r[0].disorder, 0);
	link_stats(&r[0], 1, &st);
	ck_assert_uint_eq(st.shm_lane_rx, 3000);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	rk_lane_close(lw.ln);
	stop(r, 2);
}
END_TEST

/* ---- round epochs the followers map (docs/RESIDENT-SHM.md) ----------------------- */

/* A consumer asleep on a follower's view of the leader's region. */
struct ep_waiter {
	struct rk_epoch *e;
	uint64_t want;
	atomic_bool started, done;
	int ret;
};

static void *ep_wait_main(void *arg)
{
	struct ep_waiter *w = arg;
	uint32_t kicks = rk_epoch_kicks(w->e);

	atomic_store(&w->started, true);
	w->ret = rk_epoch_wait(w->e, w->want, 0, &kicks);	/* no spin: asleep at once */
	atomic_store(&w->done, true);
	return NULL;
}

static void ep_waiter_start(struct ep_waiter *w, pthread_t *th, struct rk_epoch *e, uint64_t want)
{
	uint64_t dl;

	memset(w, 0, sizeof(*w));
	w->e = e;
	w->want = want;
	ck_assert_int_eq(pthread_create(th, NULL, ep_wait_main, w), 0);
	dl = rk_test_deadline_ms(5000);
	while (!atomic_load(&w->started))
		usleep(100);
	/* on the sleep path: counted before its last look at the epoch, so what
	 * wakes it from here on is the bell (or that look, in a narrow window) */
	while (!rk__epoch_sleepers(e) && rk_test_now_ns() < dl)
		usleep(100);
	ck_assert_msg(rk__epoch_sleepers(e) >= 1, "the waiter never went to sleep");
	usleep(1000);
	ck_assert(!atomic_load(&w->done));
}

/* Whether @w ends within @ms, with nobody's loop run meanwhile. */
static bool ep_waiter_ends(struct ep_waiter *w, unsigned int ms)
{
	uint64_t dl = rk_test_deadline_ms(ms);

	while (!atomic_load(&w->done) && rk_test_now_ns() < dl)
		usleep(200);
	return atomic_load(&w->done);
}

/*
 * The follower maps the leader's region read-only: what the leader publishes
 * is there without the follower's loop running, a publication on the view is
 * refused, and a write to its mapping faults.
 */
START_TEST(test_epoch_view)
{
	struct rank r[2] = { 0 };
	struct rk_epoch *le, *fv;
	uint32_t flags = 0;
	uint64_t id = 0;
	char buf[16] = { 0 };
	int st;
	pid_t pid;

	start(r, 2, NULL);
	le = rk__world_epoch(r[0].w);
	fv = rk__world_epoch(r[1].w);
	ck_assert_ptr_nonnull(le);
	ck_assert_ptr_nonnull(fv);
	ck_assert_ptr_ne(le, fv);
	ck_assert_uint_eq(rk_epoch_current(fv), 0);
	ck_assert_int_eq(rk_epoch_publish(le, 1, 3, "round-1", 7), 0);
	/* only the leader's loop may run: the follower's is not pumped */
	PUMP_UNTIL(5, false, &r[0]);
	ck_assert_uint_eq(rk_epoch_current(fv), 1);
	ck_assert_int_eq(rk_epoch_read(fv, &id, &flags, buf, sizeof(buf)), 7);
	ck_assert_uint_eq(id, 1);
	ck_assert_uint_eq(flags, 3);
	ck_assert_str_eq(buf, "round-1");
	ck_assert_int_eq(rk_epoch_publish(fv, 2, 0, "x", 1), -EPERM);
	ck_assert_uint_eq(rk_epoch_current(fv), 1);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (!pid) {
		volatile uint8_t *p = rk_epoch_base(fv, NULL);

		signal(SIGSEGV, SIG_DFL);
		p[0] = 1;	/* a read-only mapping: SIGSEGV */
		_exit(0);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGSEGV);
	stop(r, 2);
}
END_TEST

/* A follower's consumer asleep on the view wakes at the leader's publication,
 * the follower's loop not running (its bell is rung by the leader). */
START_TEST(test_epoch_view_wake)
{
	struct rank r[2] = { 0 };
	struct ep_waiter w;
	struct rk_epoch *le, *fv;
	pthread_t th;

	start(r, 2, NULL);
	le = rk__world_epoch(r[0].w);
	fv = rk__world_epoch(r[1].w);
	ck_assert_ptr_nonnull(le);
	ck_assert_ptr_nonnull(fv);
	ep_waiter_start(&w, &th, fv, 1);
	ck_assert_int_eq(rk_epoch_publish(le, 1, 0, "r", 1), 0);
	ck_assert_msg(ep_waiter_ends(&w, 5000), "the leader's publication woke nobody");
	ck_assert_int_ge(w.ret, 0);
	ck_assert_uint_eq(rk_epoch_current(fv), 1);
	pthread_join(th, NULL);
	stop(r, 2);
}
END_TEST

/* The follower's world ends: its consumer asleep on the view is released
 * (the epoch reads closed), though the leader publishes nothing; the view,
 * still held, stays mapped, its bell with it. */
START_TEST(test_epoch_view_close)
{
	struct rank r[2] = { 0 };
	struct ep_waiter w;
	struct rk_epoch *fv;
	pthread_t th;

	start(r, 2, NULL);
	fv = rk__world_epoch(r[1].w);
	ck_assert_ptr_nonnull(fv);
	rk_epoch_hold(fv);
	ep_waiter_start(&w, &th, fv, 5);
	rank_stop(&r[1]);
	ck_assert_msg(ep_waiter_ends(&w, 5000), "the follower's close released nobody");
	ck_assert_int_ge(w.ret, 0);
	ck_assert_uint_eq(rk_epoch_current(fv), RK_EPOCH_CLOSED);
	pthread_join(th, NULL);
	rk_epoch_release(fv);
	rank_stop(&r[0]);
}
END_TEST

/* A follower on TCP (RK_SHM=off) has no view; its same-host sibling has, and
 * sees the leader's rounds; RK_RESIDENT=off makes no region at all. */
START_TEST(test_epoch_view_mixed)
{
	static const enum rk_shm_mode mix[3] = { RK_SHM_AUTO, RK_SHM_AUTO, RK_SHM_OFF };
	struct rank r[3] = { 0 };
	struct rk_epoch *le;

	start(r, 3, mix);
	le = rk__world_epoch(r[0].w);
	ck_assert_ptr_nonnull(le);
	ck_assert_ptr_nonnull(rk__world_epoch(r[1].w));
	ck_assert_ptr_null(rk__world_epoch(r[2].w));
	ck_assert_int_eq(rk_epoch_publish(le, 1, 0, "r", 1), 0);
	ck_assert_uint_eq(rk_epoch_current(rk__world_epoch(r[1].w)), 1);
	stop(r, 3);
}
END_TEST

static Suite *shm_lane_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc;

	tc = shm_tcase(s, "lane");
	tcase_add_test(tc, test_lane_open);
	tcase_add_test(tc, test_lane_full);
	tcase_add_loop_test(tc, test_lane_wake, 0, 2);
	tcase_add_test(tc, test_lane_thread);
	tc = shm_tcase(s, "epoch");
	tcase_add_test(tc, test_epoch_view);
	tcase_add_test(tc, test_epoch_view_wake);
	tcase_add_test(tc, test_epoch_view_close);
	tcase_add_test(tc, test_epoch_view_mixed);
	return s;
}

int main(void)
{
	return rk_check_run(shm_lane_suite());
}
