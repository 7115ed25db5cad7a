// SPDX-License-Identifier: MIT
/*
 * check_shm_wake: a shared-memory link wakes only a sleeper: ranks on threads
 * of their own blocking, spinning or adaptive, the spin-to-block race one
 * step at a time, a writer asleep for room, and heartbeats that stay idle
 * events. A lost wake-up shows as a hang, which the TCase timeout fails.
 */
#define _GNU_SOURCE
#include "shm_test.h"

/* ---- waking only a sleeper ----------------------------------------------------- */

/* What test_wake asks of its two rank threads. */
struct pinger {
	enum rk_wait_mode mode;
	unsigned int rounds;
};

static void *ping_thread(void *arg)
{
	struct rank_thread *t = arg;
	struct rank *r = &t->r;
	const struct pinger *p = t->arg;
	struct rk_config c;
	uint64_t dl = rk_test_deadline_ms(30000);
	unsigned int i;
	int ret, rank = r->rank;

	cfg_base(&c, rank, 2);
	c.wait.mode = p->mode;
	/* no timer for a minute: a blocked rank wakes only when the other rings
	 * its bell, so a lost wake-up hangs the test (its timeout fails it) */
	rk__config_tuning(&c)->heartbeat_ns = 60000 * MS;
	c.peer_timeout_ns = 120000 * MS;
	r->echo = rank == 1;
	ret = rank_join(r, &c, t->port, dl);
	if (!ret)
		ret = rk_world_wait_ready(r->w);
	if (ret)
		T_FAIL(t, ret);
	while (!on_shm(r, rank ? 0 : 1) && rk_test_now_ns() < dl)
		rk_loop_run(r->loop, RK_RUN_ONCE);
	if (rank == 1) {
		while (!r->quit && !r->nerr && rk_test_now_ns() < dl)
			rk_loop_run(r->loop, RK_RUN_DEFAULT);	/* a QUIT stops it */
	} else {
		for (i = 0; i < p->rounds && !r->nerr && rk_test_now_ns() < dl; i++) {
			ret = send_seq(r, 1, TAG_PING, i, 8);
			while (!ret && !r->nerr && r->nrx == i && rk_test_now_ns() < dl)
				rk_loop_run(r->loop, RK_RUN_DEFAULT);	/* a PONG stops it */
			if (ret || r->nrx != i + 1 || r->rx[i].seq != i)
				T_FAIL(t, ret ? ret : -EPROTO);
		}
		send_seq(r, 1, TAG_QUIT, 0, 4);
		rk_loop_run(r->loop, RK_RUN_NOWAIT);
	}
	if (r->nerr && rank == 0)
		T_FAIL(t, r->errs[0].err);
out:
	return NULL;
}

/*
 * Both ends block between frames (RK_WAIT=block): every frame is found through
 * a wake-up, none is lost, and the writer made its wake-up syscalls only for a
 * sleeper (wakes never exceed the peer's sleeps). In spin mode nobody sleeps,
 * so there is no wake-up at all.
 */
START_TEST(test_wake)
{
	static const struct {
		enum rk_wait_mode mode;
		unsigned int mask;
	} v[] = {
		{ RK_WAIT_BLOCK, 0 },
		{ RK_WAIT_BLOCK, RK__SHM_F_FUTEX },
		{ RK_WAIT_SPIN, 0 },
		{ RK_WAIT_ADAPTIVE, 0 },
	};
	struct pinger p = { v[_i].mode, 2000 };
	struct rank_thread t[2];
	struct rk_link_stats l0, l1;
	atomic_int port;
	int i;

	memset(t, 0, sizeof(t));
	t[0].arg = t[1].arg = &p;
	rk__shm_test_mask(v[_i].mask);
	run_rank_threads(t, 2, ping_thread, &port);
	link_stats(&t[0].r, 1, &l0);
	link_stats(&t[1].r, 0, &l1);
	ck_assert_uint_ge(l0.rx_frames, 2000);
	ck_assert_uint_le(l0.shm_wakes, l1.shm_sleeps);
	ck_assert_uint_le(l1.shm_wakes, l0.shm_sleeps);
	if (v[_i].mode == RK_WAIT_BLOCK) {
		ck_assert_uint_gt(l0.shm_wakes, 0);
		ck_assert_uint_gt(l1.shm_wakes, 0);
	}
	if (v[_i].mode == RK_WAIT_SPIN)
		ck_assert_uint_eq(l0.shm_wakes + l1.shm_wakes + l0.shm_sleeps + l1.shm_sleeps, 0);
	for (i = 1; i >= 0; i--)
		rank_stop(&t[i].r);
}
END_TEST

/*
 * The spin-to-block race, one step at a time (both ranks in this thread, so
 * the test decides what happens between the reader's last poll and its sleep):
 *  1. the reader is awake: the writer's write makes no wake-up syscall;
 *  2. a write lands after the reader's last poll but before its bell: the
 *     reader's arm step looks again, finds it and does not block;
 *  3. the reader armed (asleep): the next write rings its bell, exactly once,
 *     however many writes follow before it runs; then every frame arrives.
 * Run with futex waits and with eventfds.
 */
START_TEST(test_no_lost_wakeup)
{
	struct rank r[2] = { 0 };
	struct rk_link_stats a, b;
	struct rk_link *l1;

	rk__shm_test_mask(_i ? RK__SHM_F_FUTEX : 0);
	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);	/* both idle, nothing in flight */
	l1 = rk_world_link(r[1].w, 0);
	link_stats(&r[0], 1, &a);

	/* 1 */
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 0, 8), 0);
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);	/* flushed into the ring */
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(b.shm_wakes, a.shm_wakes);
	ck_assert_uint_eq(r[1].nrx, 0);

	/* 2: the frame of step 1 is what the reader's arm must see */
	ck_assert_int_eq(rk__shm_test_arm(l1), 1);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1, &r[1]));
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(b.shm_wakes, a.shm_wakes);

	/* 3 */
	PUMP_UNTIL(5, false, &r[1]);
	ck_assert_int_eq(rk__shm_test_arm(l1), 0);
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 1, 8), 0);
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(b.shm_wakes, a.shm_wakes + 1);
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 2, 8), 0);
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(b.shm_wakes, a.shm_wakes + 1);	/* the bell was taken */
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 3, &r[0], &r[1]));
	ck_assert_uint_eq(r[1].rx[1].seq, 1);
	ck_assert_uint_eq(r[1].rx[2].seq, 2);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/*
 * A writer asleep for room in a full ring is woken by the reader that makes
 * it, exactly once: by the fence of the reader's own flush when it answers in
 * the same iteration (_i & 1), else before the reader's poll ends. Futex
 * waits and eventfds (_i & 2).
 */
START_TEST(test_room_wake)
{
	struct rank r[2] = { 0 };
	struct rk_link_stats a, b;
	struct rk_link *l0;
	bool reply = _i & 1;
	uint32_t seq, tag = reply ? TAG_PING : TAG_SEQ;

	rk__shm_test_mask(_i & 2 ? RK__SHM_F_FUTEX : 0);
	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);	/* both idle, nothing in flight */
	r[1].echo = reply;
	l0 = rk_world_link(r[0].w, 1);
	link_stats(&r[0], 1, &a);
	/* rank 1 reads nothing while rank 0 fills the ring (1 MiB) to it */
	for (seq = 0; seq < 300; seq++) {
		ck_assert_int_eq(send_seq(&r[0], 1, tag, seq, 4096), 0);
		rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	}
	link_stats(&r[0], 1, &b);
	ck_assert_uint_gt(b.shm_ring_full, a.shm_ring_full);
	ck_assert_int_eq(rk__shm_test_arm(l0), 0);	/* asleep, for room */
	link_stats(&r[1], 0, &a);
	rk_loop_run(r[1].loop, RK_RUN_NOWAIT);	/* one poll's worth of records */
	ck_assert_uint_gt(r[1].nrx, 0);
	ck_assert_uint_lt(r[1].nrx, 300);
	link_stats(&r[1], 0, &b);
	ck_assert_uint_eq(b.shm_wakes, a.shm_wakes + 1);
	/*
	 * Frames beyond heartbeats (a slow machine's fill outlasts a heartbeat
	 * period); with replies, its flush told it.
	 */
	if (reply)
		ck_assert_uint_gt(b.tx_frames - b.heartbeats_tx, a.tx_frames - a.heartbeats_tx);
	else
		ck_assert_uint_eq(b.tx_frames - b.heartbeats_tx, a.tx_frames - a.heartbeats_tx);
	/* the rest arrives, in order */
	ck_assert(PUMP_UNTIL(20000, r[1].nrx == 300, &r[0], &r[1]));
	if (!reply)
		ck_assert_uint_eq(r[1].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/*
 * An idle world on shared memory stays idle: the heartbeats its ranks read
 * from the rings are idle events, as on TCP, and never restart the busy
 * window (else every heartbeat would cost a spin window of CPU).
 */
START_TEST(test_idle_heartbeats)
{
	struct rank r[2] = { 0 };
	struct rk_loop_stats a0, a1, b0, b1;
	struct rk_link_stats h0, h1, l0, l1;

	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);	/* the upgrade's own frames are done */
	rk_loop_stats(r[0].loop, &a0, sizeof(a0));
	rk_loop_stats(r[1].loop, &a1, sizeof(a1));
	link_stats(&r[0], 1, &h0);
	link_stats(&r[1], 0, &h1);
	ck_assert(PUMP_UNTIL(10000, (link_stats(&r[0], 1, &l0), link_stats(&r[1], 0, &l1),
				     l0.heartbeats_rx >= h0.heartbeats_rx + 3 &&
				     l1.heartbeats_rx >= h1.heartbeats_rx + 3), &r[0], &r[1]));
	rk_loop_stats(r[0].loop, &b0, sizeof(b0));
	rk_loop_stats(r[1].loop, &b1, sizeof(b1));
	ck_assert_uint_eq(b0.busy_events, a0.busy_events);
	ck_assert_uint_eq(b1.busy_events, a1.busy_events);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

static Suite *shm_wake_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc;

	tc = shm_tcase(s, "wake");
	tcase_add_loop_test(tc, test_wake, 0, 4);
	tcase_add_loop_test(tc, test_no_lost_wakeup, 0, 2);
	tcase_add_loop_test(tc, test_room_wake, 0, 4);
	tcase_add_test(tc, test_idle_heartbeats);
	return s;
}

int main(void)
{
	return rk_check_run(shm_wake_suite());
}
