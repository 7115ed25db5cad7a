// SPDX-License-Identifier: MIT
/*
 * check_shm_bcast: the leader's broadcast ring on shared memory, written once
 * for every same-host follower: order in a mixed world, a reader that stops,
 * frames far larger than a ring, every record size, a ring's stale laps and
 * full head, and the direct lane a frame with nothing queued before it takes.
 */
#define _GNU_SOURCE
#include <stddef.h>

#include "shm_test.h"

/* ---- one write for every same-host follower --------------------------------------- */

/*
 * A mixed world: followers 1 and 2 on shared memory, 3 on TCP. The leader
 * interleaves broadcasts and frames to one follower; every follower gets
 * exactly its frames, in the order they were sent, and the broadcasts reached
 * the shared-memory followers through the ring.
 */
START_TEST(test_broadcast_order)
{
	static const enum rk_shm_mode mode[4] = { RK_SHM_AUTO, RK_SHM_AUTO, RK_SHM_AUTO,
						  RK_SHM_OFF };
	struct rank r[4] = { 0 };
	uint32_t want[4][600], nwant[4] = { 0 }, seq;
	struct rk_link_stats ls;
	int f, i, k;

	start(r, 4, mode);
	for (seq = 0; seq < 600; seq++) {
		k = (int)(seq % 5);
		if (k < 3) {
			ck_assert_int_eq(send_seq(&r[0], -1, TAG_SEQ, seq, 24 + seq % 100), 0);
			for (f = 1; f < 4; f++)
				want[f][nwant[f]++] = seq;
		} else {
			f = 1 + (int)(seq % 3);
			ck_assert_int_eq(send_seq(&r[0], f, TAG_SEQ, seq, 8), 0);
			want[f][nwant[f]++] = seq;
		}
		if (seq % 50 == 49)
			PUMP_UNTIL(1, false, &r[0], &r[1], &r[2], &r[3]);
	}
	ck_assert(PUMP_UNTIL(10000, r[1].nrx == nwant[1] && r[2].nrx == nwant[2] &&
				    r[3].nrx == nwant[3], &r[0], &r[1], &r[2], &r[3]));
	for (f = 1; f < 4; f++)
		for (i = 0; i < (int)nwant[f]; i++)
			ck_assert_msg(r[f].rx[i].seq == want[f][i], "rank %d frame %d: %u, want %u",
				      f, i, r[f].rx[i].seq, want[f][i]);
	for (f = 1; f < 3; f++) {
		link_stats(&r[0], f, &ls);
		ck_assert_uint_gt(ls.shm_bcast_frames, 0);
		link_stats(&r[f], 0, &ls);
		ck_assert_uint_gt(ls.shm_bcast_frames, 0);
	}
	link_stats(&r[0], 3, &ls);
	ck_assert_uint_eq(ls.shm_bcast_frames, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr + r[2].nerr + r[3].nerr, 0);
	stop(r, 4);
}
END_TEST

/*
 * A follower that stops reading bounds the broadcast ring's reuse; the others
 * get copies on their links meanwhile, the send bound drops it with
 * RK_ESLOWPEER, and the ring serves the others again.
 */
START_TEST(test_slow_reader)
{
	struct rank r[3] = { 0 };
	struct rank *both[2] = { &r[0], &r[1] };
	struct rk_link_stats before, after;
	uint32_t seq;
	int ret;

	g_tx_limit = 1u << 20;
	start(r, 3, NULL);
	link_stats(&r[1], 0, &before);
	/* rank 2 is not pumped from here on: it reads nothing */
	for (seq = 0; seq < 20000 && !r[0].nerr; seq++) {
		ret = send_seq(&r[0], -1, TAG_SEQ, seq, 4000);
		ck_assert_msg(!ret || ret == -RK_ESLOWPEER, "broadcast %u: %s", seq,
			      rk_errname(ret));
		pump(both, 2);
	}
	ck_assert(PUMP_UNTIL(10000, r[0].nerr > 0, &r[0], &r[1]));
	ck_assert_int_eq(r[0].errs[0].rank, 2);
	ck_assert_int_eq(r[0].errs[0].err, -RK_ESLOWPEER);
	ck_assert(PUMP_UNTIL(20000, r[1].nseq == seq, &r[0], &r[1]));
	link_stats(&r[1], 0, &after);
	/* while rank 2 held the ring, rank 1 took copies on its link */
	ck_assert_uint_lt(after.shm_bcast_frames - before.shm_bcast_frames, seq);
	before = after;
	for (ret = 0; ret < 50; ret++, seq++)	/* rank 2 is gone: -ENOTCONN names it */
		ck_assert_int_eq(send_seq(&r[0], -1, TAG_SEQ, seq, 64), -ENOTCONN);
	ck_assert(PUMP_UNTIL(10000, r[1].nseq == seq, &r[0], &r[1]));
	/* rank 1 saw every frame, in order, across all of it */
	ck_assert_uint_eq(r[1].disorder, 0);
	/* ...and the ring serves it again once rank 2 is gone */
	link_stats(&r[1], 0, &after);
	ck_assert_uint_eq(after.shm_bcast_frames, before.shm_bcast_frames + 50);
	ck_assert_int_eq(r[1].nerr, 1);		/* only the leader's word that rank 2 failed */
	ck_assert_int_eq(r[1].errs[0].rank, 2);
	stop(r, 3);
}
END_TEST

/* Frames far larger than a ring arrive whole, on both paths. */
START_TEST(test_big_frames)
{
	struct rank r[2] = { 0 };
	size_t sizes[] = { 70000, 300000, 1u << 20, 3u << 20 };
	uint64_t hash = 0;
	uint8_t *buf = malloc(3u << 20);
	size_t i, j;

	ck_assert_ptr_nonnull(buf);
	start(r, 2, NULL);
	for (i = 0; i < ARRAY_SIZE(sizes); i++) {
		for (j = 0; j < sizes[i]; j++)
			buf[j] = (uint8_t)(j * 131 + i);
		hash = rk__fnv1a64(buf, sizes[i]) ^ (hash * 31);
		if (i % 2) {
			uint8_t *f = malloc(sizes[i] + 8);
			int m = rk_wire_encode_user(f, sizes[i] + 8, TAG_BIG, buf, (uint32_t)sizes[i]);

			ck_assert_int_eq(rk_world_broadcast(r[0].w, RK_FRAME_USER, 0, f, (uint32_t)m),
					 0);
			free(f);
		} else {
			ck_assert_int_eq(rk_world_send_user(r[0].w, 1, TAG_BIG, buf,
							    (uint32_t)sizes[i]), 0);
		}
		ck_assert(PUMP_UNTIL(20000, r[1].nrx == i + 1, &r[0], &r[1]));
	}
	ck_assert_uint_eq(r[1].rx_hash, hash);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	free(buf);
	stop(r, 2);
}
END_TEST

/*
 * Every small size a record comes in: frames of 0-200 data bytes (records of
 * 40-240 bytes, around the 48 bytes of a record's first line that the writer
 * stores and the reader loads in place, and the CRC's 8/16/32-byte steps),
 * first one a record (each delivered before the next is sent), then all in
 * one burst (a record of many frames). Each arrives once, in order, intact.
 */
START_TEST(test_record_sizes)
{
	struct rank r[2] = { 0 };
	uint8_t buf[200];
	uint64_t hash = 0;
	unsigned int i, n = 0, round;

	start(r, 2, NULL);
	for (round = 0; round < 2; round++) {
		for (i = 0; i <= sizeof(buf); i++, n++) {
			memset(buf, (int)(n * 7 + 1), sizeof(buf));
			memcpy(buf, &n, i < 4 ? i : 4);
			hash = rk__fnv1a64(buf, i) ^ (hash * 31);
			ck_assert_int_eq(rk_world_send_user(r[0].w, 1, TAG_BIG, buf, i), 0);
			if (!round)
				ck_assert(PUMP_UNTIL(5000, r[1].nrx == n + 1, &r[0], &r[1]));
		}
		ck_assert(PUMP_UNTIL(5000, r[1].nrx == n, &r[0], &r[1]));
	}
	PUMP_UNTIL(20, false, &r[0], &r[1]);
	ck_assert_uint_eq(r[1].nrx, n);
	for (i = 0; i < n; i++)
		ck_assert_uint_eq(r[1].rx[i].ulen, i % (sizeof(buf) + 1));
	ck_assert_uint_eq(r[1].rx_hash, hash);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/* ---- the link ring's records ------------------------------------------------------ */

/*
 * The reader polls the length word at its head, so what the ring held a lap
 * before must never read as a record. Lap 1: frames whose data, wherever a
 * later record could start (every 128 bytes), looks like a valid 8-byte
 * record header; lap 2: small frames, each read at once, so the reader looks
 * at its next head (last lap's bytes but for the writer's zero word) after
 * every one. Every frame arrives once, in order, and nothing fails.
 */
START_TEST(test_wrap_stale)
{
	static const uint8_t fake[16] = { 8 };	/* u32 length 8, u32 zero, u64 mark 0 */
	struct rank r[2] = { 0 };
	uint8_t buf[4000];
	uint32_t seq;
	size_t j;

	start(r, 2, NULL);
	/* user data byte j sits at 56 + j past its record's start (16 + 32 + 8):
	 * the slots at multiples of 128 are the bytes with j % 16 == 8 onwards */
	for (j = 0; j < sizeof(buf); j++)
		buf[j] = fake[(j + 8) % 16];
	for (seq = 0; seq < 400; seq++) {	/* 400 x 4096 bytes: more than the 1 MiB ring */
		memcpy(buf, &seq, 4);
		ck_assert_int_eq(rk_world_send_user(r[0].w, 1, TAG_SEQ, buf, sizeof(buf)), 0);
		ck_assert(PUMP_UNTIL(5000, r[1].nseq == seq + 1, &r[0], &r[1]));
	}
	for (; seq < 400 + 3000; seq++) {	/* 3000 x 128 bytes over lap 1's */
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq, 8), 0);
		ck_assert(PUMP_UNTIL(5000, r[1].nseq == seq + 1 || r[1].nerr, &r[0], &r[1]));
		ck_assert_msg(!r[1].nerr, "frame %u: %s", seq, rk_errname(r[1].errs[0].err));
	}
	PUMP_UNTIL(20, false, &r[0], &r[1]);
	ck_assert_uint_eq(r[1].nseq, seq);
	ck_assert_uint_eq(r[1].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/*
 * The reader publishes its head lazily, but every poll that read publishes it
 * before it ends: a writer that found the ring full (and spins, not asleep)
 * writes again right after one poll of the reader, however few bytes that
 * poll took (here far less than the quarter ring after which a batch
 * publishes on its own). Then every frame arrives, in order.
 */
START_TEST(test_full_ring_head)
{
	struct rank r[2] = { 0 };
	struct rk_link_stats a, b;
	struct rk_link *l0;
	uint64_t sent;
	uint32_t seq;

	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);	/* both idle, nothing in flight */
	l0 = rk_world_link(r[0].w, 1);
	link_stats(&r[0], 1, &a);
	/* rank 1 reads nothing while rank 0 fills the 1 MiB ring with 1200 x 1152 bytes */
	for (seq = 0; seq < 1200; seq++) {
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq, 1000), 0);
		rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	}
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	link_stats(&r[0], 1, &b);
	ck_assert_uint_gt(b.shm_ring_full, a.shm_ring_full);
	sent = l0->tx_sent;
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	ck_assert_uint_eq(l0->tx_sent, sent);		/* full: nothing more goes */
	rk_loop_run(r[1].loop, RK_RUN_NOWAIT);		/* one poll's worth of records */
	ck_assert_uint_gt(r[1].nrx, 0);
	ck_assert_uint_lt(r[1].nrx * 1152ull, (1u << 20) / 4);
	rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	ck_assert_uint_gt(l0->tx_sent, sent);		/* it saw the room at once */
	ck_assert(PUMP_UNTIL(20000, r[1].nseq == 1200, &r[0], &r[1]));
	ck_assert_uint_eq(r[1].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/* ---- the direct lane: a frame with nothing queued before it skips the batch ------- */

static uint64_t stat_delta(const struct rk_link_stats *a, const struct rk_link_stats *b,
			   size_t off)
{
	uint64_t x, y;

	memcpy(&x, (const uint8_t *)a + off, 8);
	memcpy(&y, (const uint8_t *)b + off, 8);
	return y - x;
}

#define DELTA(a, b, f) stat_delta(&(a), &(b), offsetof(struct rk_link_stats, f))

/*
 * A round trip's two frames each find nothing queued and the ring with room:
 * both go into the ring from the send (the ping from the test, the pong from
 * the frame callback), every frame of both links so, and no flush runs.
 */
START_TEST(test_direct_lane)
{
	struct rank r[2] = { 0 };
	struct rk_link_stats a0, a1, b0, b1;
	unsigned int i, n;

	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);	/* the switch's frames are all out */
	r[1].echo = true;
	link_stats(&r[0], 1, &a0);
	link_stats(&r[1], 0, &a1);
	for (i = 0; i < 200; i++) {
		n = r[0].nrx;
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_PING, i, 16 + i % 100), 0);
		ck_assert(PUMP_UNTIL(5000, r[0].nrx == n + 1, &r[0], &r[1]));
		ck_assert_uint_eq(r[0].rx[n].tag, TAG_PONG);
		ck_assert_uint_eq(r[0].rx[n].seq, i);
	}
	link_stats(&r[0], 1, &b0);
	link_stats(&r[1], 0, &b1);
	ck_assert_uint_ge(DELTA(a0, b0, shm_tx_direct), 200);
	ck_assert_uint_ge(DELTA(a1, b1, shm_tx_direct), 200);
	/* every frame (heartbeats too), and no flush */
	ck_assert_uint_eq(DELTA(a0, b0, shm_tx_direct), DELTA(a0, b0, tx_frames));
	ck_assert_uint_eq(DELTA(a1, b1, shm_tx_direct), DELTA(a1, b1, tx_frames));
	ck_assert_uint_eq(DELTA(a0, b0, tx_flushes), 0);
	ck_assert_uint_eq(DELTA(a1, b1, tx_flushes), 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/* A TAG_SEQ frame of @len data bytes (any size), @seq in its first four. */
static int send_seq_big(struct rank *r, int to, uint32_t seq, uint8_t *buf, size_t len)
{
	memset(buf, (int)(seq & 0xff), len);
	memcpy(buf, &seq, 4);
	return rk_world_send_user(r->w, to, TAG_SEQ, buf, (uint32_t)len);
}

/*
 * A frame queued before goes before: behind a frame over one record (which
 * the flush writes in several), behind frames a full ring left in the batch,
 * and while the batch drains, each later frame waits its turn; once all is
 * out, the lane serves again. Every frame arrives once, in order.
 */
START_TEST(test_direct_order)
{
	struct rank r[2] = { 0 };
	struct rk_link_stats a, b;
	uint8_t *buf = malloc(300000);
	uint32_t seq = 0, k;

	ck_assert_ptr_nonnull(buf);
	start(r, 2, NULL);
	PUMP_UNTIL(20, false, &r[0], &r[1]);
	/* 1: small, big (several records), small: the second small one may not pass */
	for (k = 0; k < 20; k++) {
		link_stats(&r[0], 1, &a);
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 8), 0);
		ck_assert_int_eq(send_seq_big(&r[0], 1, seq++, buf, 70000 + k * 10000), 0);
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 8), 0);
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 100), 0);
		link_stats(&r[0], 1, &b);
		ck_assert(PUMP_UNTIL(10000, r[1].nseq == seq || r[1].nerr, &r[0], &r[1]));
		/* a frame that passed one before it breaks the link's sequence */
		ck_assert_msg(!r[1].nerr, "round %u: %s", k, rk_errname(r[1].errs[0].err));
		ck_assert_uint_eq(r[1].disorder, 0);
		ck_assert_uint_eq(DELTA(a, b, shm_tx_direct), 1);	/* the first only */
	}
	/* 2: rank 1 reads nothing while rank 0 sends more than the 1 MiB ring holds */
	link_stats(&r[0], 1, &a);
	for (k = 0; k < 1500; k++) {
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 1000), 0);
		rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
	}
	link_stats(&r[0], 1, &b);
	ck_assert_uint_gt(b.shm_ring_full, a.shm_ring_full);	/* the batch holds the rest */
	ck_assert_uint_gt(DELTA(a, b, shm_tx_direct), 0);
	ck_assert_uint_lt(DELTA(a, b, shm_tx_direct), 1500);
	/* 3: rank 1 reads; rank 0 sends on while the batch drains */
	for (k = 0; k < 1500; k++) {
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 4 + k % 600), 0);
		rk_loop_run(r[0].loop, RK_RUN_NOWAIT);
		rk_loop_run(r[1].loop, RK_RUN_NOWAIT);
	}
	ck_assert(PUMP_UNTIL(20000, r[1].nseq == seq || r[1].nerr, &r[0], &r[1]));
	ck_assert_msg(!r[1].nerr, "draining: %s", rk_errname(r[1].errs[0].err));
	ck_assert_uint_eq(r[1].nseq, seq);
	ck_assert_uint_eq(r[1].disorder, 0);
	/* 4: all out: the lane again, no flush */
	PUMP_UNTIL(20, false, &r[0], &r[1]);
	link_stats(&r[0], 1, &a);
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, seq++, 64), 0);
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(DELTA(a, b, shm_tx_direct), 1);
	ck_assert(PUMP_UNTIL(5000, r[1].nseq == seq, &r[0], &r[1]));
	link_stats(&r[0], 1, &b);
	ck_assert_uint_eq(DELTA(a, b, tx_flushes), 0);
	ck_assert_uint_eq(r[1].disorder, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	free(buf);
	stop(r, 2);
}
END_TEST

/*
 * Both ranks send a frame every iteration from the moment they are ready,
 * through the upgrade: the frames before each side's switch go on TCP, the
 * ones after it on the ring, most from the send itself. The stream runs on
 * unbroken: every frame once, in order, both ways.
 */
START_TEST(test_direct_switch)
{
	struct rank r[2] = { 0 };
	struct rank *rs[2] = { &r[0], &r[1] };
	struct rk_link_stats a;
	struct rk_config c;
	uint64_t dl = rk_test_deadline_ms(10000);
	uint32_t sent[2] = { 0 }, extra = 0;
	int i, port;

	cfg_base(&c, 0, 2);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	port = rk_world_port(r[0].w);
	cfg_base(&c, 1, 2);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	ck_assert_int_eq(rank_create(&r[1], &c), 0);
	while (extra < 200) {
		for (i = 0; i < 2; i++) {
			if (!r[i].ready || !rk_world_link(r[i].w, 1 - i))
				continue;
			ck_assert_int_eq(send_seq(&r[i], 1 - i, TAG_SEQ, sent[i],
						  8 + sent[i] % 200), 0);
			sent[i]++;
		}
		if (on_shm(&r[0], 1) && on_shm(&r[1], 0))
			extra++;
		ck_assert_msg(rk_test_now_ns() < dl, "not on shm after 10 s");
		pump(rs, 2);
	}
	ck_assert(PUMP_UNTIL(10000, r[1].nseq == sent[0] && r[0].nseq == sent[1], &r[0],
			     &r[1]));
	for (i = 0; i < 2; i++) {
		ck_assert_uint_eq(r[i].disorder, 0);
		link_stats(&r[i], 1 - i, &a);
		ck_assert_uint_gt(a.shm_tx_direct, 0);
		ck_assert_uint_lt(a.shm_tx_direct, a.tx_frames);	/* the handshake's, on TCP */
	}
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

static Suite *shm_bcast_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc;

	tc = shm_tcase(s, "broadcast");
	tcase_add_test(tc, test_broadcast_order);
	tcase_add_test(tc, test_slow_reader);
	tcase_add_test(tc, test_big_frames);
	tcase_add_test(tc, test_record_sizes);
	tcase_add_test(tc, test_wrap_stale);
	tcase_add_test(tc, test_full_ring_head);
	tcase_add_test(tc, test_direct_lane);
	tcase_add_test(tc, test_direct_order);
	tcase_add_test(tc, test_direct_switch);
	return s;
}

int main(void)
{
	return rk_check_run(shm_bcast_suite());
}
