// SPDX-License-Identifier: MIT
/*
 * check_world_link: two ranks' links in one process over loopback TCP (or
 * shared memory, RK_TEST_SHM=auto): frames of every type both ways and the
 * counters, claims, sends from the ready callback and from inside a handler,
 * bursts, reserve/commit, big frames, and the heartbeat's rule.
 */
#define _GNU_SOURCE
#include "world_test.h"

#define BURST_FRAMES 10000

/* Handshake frames each way on a link, and their bytes. */
static unsigned int hs_frames(void)
{
	return g_auth ? 2 : 1;
}

static uint64_t hs_bytes(void)
{
	return RK_WIRE_HDR_LEN + RK_WIRE_HELLO_LEN + (g_auth ? RK_WIRE_HDR_LEN + RK_WIRE_MAC_LEN : 0);
}

/*
 * The frames after the handshake that move a link to shared memory: the
 * follower's SHM_REQUEST (on every tcp link, whatever it asks) and, when the
 * link moved, its SHM_ANSWER and the leader's SHM_OFFER and SHM_SWITCH.
 */
static unsigned int shm_frames(bool leader, bool moved)
{
	return leader ? (moved ? 2 : 0) : 1 + moved;
}

static uint64_t shm_bytes(bool leader, bool moved)
{
	if (leader)
		return moved ? 2 * RK_WIRE_HDR_LEN + RK_WIRE_SHM_OFFER_LEN + RK_WIRE_SHM_SWITCH_LEN : 0;
	return RK_WIRE_HDR_LEN + RK_WIRE_SHM_REQUEST_LEN +
	       (moved ? RK_WIRE_HDR_LEN + RK_WIRE_SHM_ANSWER_LEN : 0);
}

/* Whether a link is on the transport this run expects once its upgrade is done. */
static bool link_settled(struct rk_link *l)
{
	return l && !strcmp(rk_link_transport(l), test_shm() == RK_SHM_OFF ? "tcp" : "shm");
}

struct sent {
	unsigned int type, flags;
	uint8_t buf[1024];
	uint32_t len;
};

/* USER, ROUND, ROUND_DONE, NCCL_ID and an empty USER, with @salt in every payload. */
static size_t make_app_frames(struct sent *s, uint32_t salt)
{
	struct rk_wire_stream st[2] = {
		{ .stream_id = 100 + salt, .position = 7, .n_tokens = 3, .n_draft = 2,
		  .top_k = 40, .temperature = 0.7f, .top_p = 0.9f, .seed = 42 },
		{ .stream_id = 200 + salt, .position = 0, .n_tokens = 1, .n_draft = 0,
		  .top_k = 0, .temperature = 0.0f, .top_p = 1.0f, .seed = 7 },
	};
	uint32_t tokens[6] = { 11, 12, 13, 14, 15, 16 + salt };
	struct rk_wire_round_done d = { .round_id = 900 + salt, .status = -5,
					.elapsed_ns = 123456 };
	uint8_t data[200], id[RK_WIRE_NCCL_ID_LEN];
	int64_t m;

	pattern(data, sizeof(data), salt);
	pattern(id, sizeof(id), salt + 1);
	memset(s, 0, 5 * sizeof(*s));

	s[0].type = RK_FRAME_USER;
	m = rk_wire_encode_user(s[0].buf, sizeof(s[0].buf), TAG_PLAIN, data, sizeof(data));
	ck_assert_int_gt(m, 0);
	s[0].len = (uint32_t)m;

	s[1].type = RK_FRAME_ROUND;
	s[1].flags = RK_FRAME_F_DRAFTED | RK_FRAME_F_PREFILL;
	m = rk_wire_encode_round(s[1].buf, sizeof(s[1].buf), 77 + salt, st, 2, tokens);
	ck_assert_int_gt(m, 0);
	s[1].len = (uint32_t)m;

	s[2].type = RK_FRAME_ROUND_DONE;
	m = rk_wire_encode_round_done(s[2].buf, sizeof(s[2].buf), &d);
	ck_assert_int_gt(m, 0);
	s[2].len = (uint32_t)m;

	s[3].type = RK_FRAME_NCCL_ID;
	m = rk_wire_encode_nccl_id(s[3].buf, sizeof(s[3].buf), id);
	ck_assert_int_gt(m, 0);
	s[3].len = (uint32_t)m;

	s[4].type = RK_FRAME_USER;
	m = rk_wire_encode_user(s[4].buf, sizeof(s[4].buf), TAG_PLAIN, NULL, 0);
	ck_assert_int_gt(m, 0);
	s[4].len = (uint32_t)m;
	return 5;
}

static void check_received(const struct rank *n, int from, const struct sent *s, size_t ns,
			   uint32_t salt)
{
	struct rk_wire_round r;
	struct rk_wire_stream st;
	struct rk_wire_round_done d;
	uint64_t last_seq = 0;
	size_t i;

	ck_assert_uint_eq(n->nrx, ns);
	for (i = 0; i < ns; i++) {
		const struct rxframe *f = &n->rx[i];

		ck_assert_int_eq(f->peer, from);
		ck_assert_uint_eq(f->type, s[i].type);
		ck_assert_uint_eq(f->flags, s[i].flags);
		ck_assert_uint_eq(f->len, s[i].len);
		ck_assert_mem_eq(f->data, s[i].buf, s[i].len);
		if (i)	/* heartbeats may sit between */
			ck_assert_uint_gt(f->hdr_seq, last_seq);
		last_seq = f->hdr_seq;
	}
	ck_assert_int_eq(rk_wire_decode_round(n->rx[1].data, n->rx[1].len, &r), 0);
	ck_assert_uint_eq(r.round_id, 77 + salt);
	ck_assert_uint_eq(r.n_streams, 2);
	ck_assert_uint_eq(r.n_tok_total, 6);
	rk_wire_round_stream(&r, 0, &st);
	ck_assert_uint_eq(st.stream_id, 100 + salt);
	ck_assert_uint_eq(st.n_draft, 2);
	ck_assert_uint_eq(rk_wire_round_token(&r, 5), 16 + salt);
	ck_assert_int_eq(rk_wire_decode_round_done(n->rx[2].data, n->rx[2].len, &d), 0);
	ck_assert_uint_eq(d.round_id, 900 + salt);
	ck_assert_int_eq(d.status, -5);
}

START_TEST(test_frames_both_ways)
{
	struct rank n[2] = { 0 };
	struct sent s0[5], s1[5];
	struct rk_link_stats ls0, ls1;
	struct rk_config c;
	struct rk_link *l0, *l1;
	uint64_t app_bytes0 = 0, app_bytes1 = 0;
	size_t i, k0, k1;
	bool moved;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;	/* a stalled test thread must not look like a death */
	start_world(n, 2, &c);
	ck_assert_int_eq(n[0].ready, 1);
	ck_assert_int_eq(n[1].ready, 1);
	ck_assert_int_eq(rk_world_wait_ready(n[0].w), 0);
	ck_assert_int_eq(rk_world_wait_ready(n[1].w), 0);

	/* accessors */
	ck_assert_int_eq(rk_world_rank(n[0].w), 0);
	ck_assert_int_eq(rk_world_rank(n[1].w), 1);
	ck_assert_int_eq(rk_world_size(n[1].w), 2);
	ck_assert_ptr_eq(rk_world_loop(n[1].w), n[1].loop);
	ck_assert_int_eq(rk_world_port(n[1].w), -ENOTCONN);
	ck_assert_int_eq(rk_world_failed(n[0].w), 0);
	l0 = rk_world_link(n[0].w, 1);
	l1 = rk_world_link(n[1].w, 0);
	ck_assert_ptr_nonnull(l0);
	ck_assert_ptr_nonnull(l1);
	ck_assert_ptr_null(rk_world_link(n[0].w, 0));
	ck_assert_ptr_null(rk_world_link(n[0].w, 2));
	ck_assert_ptr_null(rk_world_link(n[0].w, -1));
	ck_assert_ptr_null(rk_world_link(n[1].w, 1));
	ck_assert_int_eq(rk_link_peer(l0), 1);
	ck_assert_int_eq(rk_link_peer(l1), 0);
	ck_assert(rk_link_up(l0) && rk_link_up(l1));
	/* the same-host upgrade (RK_TEST_SHM=auto) follows the handshake */
	ck_assert(PUMP_UNTIL(5000, link_settled(l0) && link_settled(l1), &n[0], &n[1]));
	moved = test_shm() != RK_SHM_OFF;
	ck_assert_int_eq(rk_world_send(n[0].w, 0, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	ck_assert_int_eq(rk_world_send(n[0].w, 2, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	ck_assert_int_eq(rk_world_send(n[1].w, -1, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	ck_assert_int_eq(rk_world_broadcast(n[1].w, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	/* an invalid frame is refused at the sender, not sent */
	ck_assert_int_eq(rk_world_send(n[0].w, 1, RK_FRAME_NCCL_ID, 0, "x", 1), -RK_ESHORT);
	ck_assert_int_eq(rk_world_send(n[0].w, 1, RK_FRAME_USER, 0x8, "12345678", 8), -RK_EFLAGS);

	k0 = make_app_frames(s0, 0);
	k1 = make_app_frames(s1, 1);
	for (i = 0; i < k0; i++) {
		ck_assert_int_eq(rk_world_send(n[0].w, 1, s0[i].type, s0[i].flags, s0[i].buf,
					       s0[i].len), 0);
		app_bytes0 += RK_WIRE_HDR_LEN + s0[i].len;
	}
	for (i = 0; i < k1; i++) {
		ck_assert_int_eq(rk_world_send(n[1].w, 0, s1[i].type, s1[i].flags, s1[i].buf,
					       s1[i].len), 0);
		app_bytes1 += RK_WIRE_HDR_LEN + s1[i].len;
	}
	ck_assert(PUMP_UNTIL(5000, n[0].nrx >= k1 && n[1].nrx >= k0, &n[0], &n[1]));
	PUMP_FOR(20, &n[0], &n[1]);	/* nothing else may follow */
	check_received(&n[1], 0, s0, k0, 0);
	check_received(&n[0], 1, s1, k1, 1);

	/* counters: one handshake frame each way, heartbeats, and ours */
	rk_link_stats(l0, &ls0, sizeof(ls0));
	rk_link_stats(l1, &ls1, sizeof(ls1));
	ck_assert_uint_eq(ls0.tx_frames - ls0.heartbeats_tx, hs_frames() + shm_frames(1, moved) + k0);
	ck_assert_uint_eq(ls1.tx_frames - ls1.heartbeats_tx, hs_frames() + shm_frames(0, moved) + k1);
	ck_assert_uint_eq(ls0.rx_frames - ls0.heartbeats_rx, hs_frames() + shm_frames(0, moved) + k1);
	ck_assert_uint_eq(ls1.rx_frames - ls1.heartbeats_rx, hs_frames() + shm_frames(1, moved) + k0);
	ck_assert_uint_eq(ls0.rx_bytes - ls0.heartbeats_rx * 40,
			  hs_bytes() + shm_bytes(0, moved) + app_bytes1);
	ck_assert_uint_eq(ls1.rx_bytes - ls1.heartbeats_rx * 40,
			  hs_bytes() + shm_bytes(1, moved) + app_bytes0);
	ck_assert_uint_eq(ls0.tx_bytes - ls0.heartbeats_tx * 40,
			  hs_bytes() + shm_bytes(1, moved) + app_bytes0);
	ck_assert_uint_ge(ls0.tx_flushes, 1);
	ck_assert_uint_le(ls0.tx_flushes, ls0.tx_frames);
	/* sent back to back outside the loop, they waited in one batch, all but
	 * the first, which may have left from its commit (a direct lane) */
	ck_assert_uint_ge(ls0.tx_queued_max, app_bytes0 - RK_WIRE_HDR_LEN - s0[0].len);
	ck_assert_int_eq(n[0].nerr, 0);
	ck_assert_int_eq(n[1].nerr, 0);

	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* A module built on the world (a scheduler, an NCCL bootstrap) takes its frames by a claim. */
struct claimer {
	struct rk__claim c;
	uint32_t types;			/* 1u << type of each frame it got */
	uint32_t tags[8];		/* the USER tags it got, in order */
	size_t n, ntags;
	bool views_ok;			/* every decoded form was a view into its payload */
};

static enum rk_activity claimer_frame(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				      const uint8_t *payload, const union rk__wire_payload *p)
{
	struct claimer *k = rk__container_of(c, struct claimer, c);

	k->n++;
	k->types |= 1u << h->type;
	k->views_ok &= peer == 0;
	if (h->type == RK_FRAME_USER) {
		if (k->ntags < ARRAY_SIZE(k->tags))
			k->tags[k->ntags++] = p->user.tag;
		k->views_ok &= p->user.data == payload + RK_WIRE_USER_HDR_LEN;
	} else if (h->type == RK_FRAME_ROUND) {
		k->views_ok &= p->round.streams == payload + RK_WIRE_ROUND_HDR_LEN &&
			       p->round.n_draft_total == 2;
	} else if (h->type == RK_FRAME_ROUND_DONE) {
		k->views_ok &= p->done.round_id == 900;
	} else {
		k->views_ok &= h->type == RK_FRAME_NCCL_ID && !memcmp(p->nccl_id, payload, h->len);
	}
	return RK_BUSY;
}

static void claimer_init(struct claimer *k, uint32_t types, uint32_t tag, uint32_t ntags)
{
	memset(k, 0, sizeof(*k));
	k->c.types = types;
	k->c.tag = tag;
	k->c.ntags = ntags;
	k->c.frame = claimer_frame;
	k->views_ok = true;
}

/*
 * Claims (runtime_int.h): the frames a claim covers go to it, decoded once by
 * the link, and never to the world's frame callback; the rest still do; claims
 * never overlap; an unclaimed type comes back to the callback; a world's
 * destroy drops the claims left on it.
 */
START_TEST(test_frame_claims)
{
	static const uint32_t tags[] = { 99, 100, 109, 110, 111 };
	struct rank n[2] = { 0 };
	struct claimer a, b, bad;
	struct rk_config c;
	struct sent s[5];
	size_t k, i, base;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	ck_assert_int_eq(rk_world_wait_ready(n[1].w), 0);

	claimer_init(&a, 1u << RK_FRAME_ROUND, 100, 10);
	ck_assert_int_eq(rk__world_claim(n[1].w, &a.c), 0);
	ck_assert_int_eq(rk__world_claim(n[1].w, &a.c), -EINVAL);	/* registered already */
	claimer_init(&bad, 1u << RK_FRAME_USER, 0, 0);		/* USER goes by tag */
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EINVAL);
	claimer_init(&bad, 1u << RK_FRAME_HEARTBEAT, 0, 0);	/* the runtime's own */
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EINVAL);
	claimer_init(&bad, 0, 5, 0);				/* nothing */
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EINVAL);
	claimer_init(&bad, 0, UINT32_MAX, 2);			/* past the last tag */
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EINVAL);
	claimer_init(&bad, 0, UINT32_MAX, 1);
	bad.c.frame = NULL;
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EINVAL);
	claimer_init(&bad, 1u << RK_FRAME_ROUND, 0, 0);		/* taken */
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EBUSY);
	claimer_init(&bad, 0, 109, 1);
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EBUSY);
	claimer_init(&bad, 0, 90, 11);
	ck_assert_int_eq(rk__world_claim(n[1].w, &bad.c), -EBUSY);
	claimer_init(&b, 1u << RK_FRAME_ROUND_DONE | 1u << RK_FRAME_NCCL_ID, 110, 1);
	ck_assert_int_eq(rk__world_claim(n[1].w, &b.c), 0);	/* next to a's tags */

	/* USER (TAG_PLAIN), ROUND, ROUND_DONE, NCCL_ID, USER; then tags around the ranges */
	k = make_app_frames(s, 0);
	for (i = 0; i < k; i++)
		ck_assert_int_eq(rk_world_send(n[0].w, 1, s[i].type, s[i].flags, s[i].buf,
					       s[i].len), 0);
	for (i = 0; i < ARRAY_SIZE(tags); i++)
		ck_assert_int_eq(rk_world_send_user(n[0].w, 1, tags[i], "x", 1), 0);
	ck_assert(PUMP_UNTIL(5000, n[1].nrx >= 4 && a.n + b.n >= 5, &n[0], &n[1]));
	PUMP_FOR(20, &n[0], &n[1]);	/* nothing else may follow */
	ck_assert_uint_eq(a.n, 3);
	ck_assert_uint_eq(a.types, 1u << RK_FRAME_ROUND | 1u << RK_FRAME_USER);
	ck_assert_uint_eq(a.ntags, 2);
	ck_assert_uint_eq(a.tags[0], 100);
	ck_assert_uint_eq(a.tags[1], 109);
	ck_assert_uint_eq(b.n, 3);
	ck_assert_uint_eq(b.types, 1u << RK_FRAME_ROUND_DONE | 1u << RK_FRAME_NCCL_ID |
					   1u << RK_FRAME_USER);
	ck_assert_uint_eq(b.ntags, 1);
	ck_assert_uint_eq(b.tags[0], 110);
	ck_assert(a.views_ok && b.views_ok);
	/* the application got what no claim covers, and only that */
	ck_assert_uint_eq(n[1].nrx, 4);
	ck_assert_uint_eq(count_tag(&n[1], TAG_PLAIN), 2);
	ck_assert_uint_eq(count_tag(&n[1], 99), 1);
	ck_assert_uint_eq(count_tag(&n[1], 111), 1);

	/* unclaimed, a ROUND is the application's again; twice is a no-op */
	rk__world_unclaim(&a.c);
	rk__world_unclaim(&a.c);
	base = n[1].nrx;
	ck_assert_int_eq(rk_world_send(n[0].w, 1, s[1].type, s[1].flags, s[1].buf, s[1].len), 0);
	ck_assert(PUMP_UNTIL(5000, n[1].nrx > base, &n[0], &n[1]));
	ck_assert_uint_eq(n[1].rx[base].type, RK_FRAME_ROUND);
	ck_assert_uint_eq(a.n, 3);
	ck_assert_int_eq(rk__world_claim(n[1].w, &a.c), 0);	/* and can be claimed again */
	rk__world_unclaim(&a.c);

	/* a world's destroy drops the claims left: unclaiming after it is a no-op */
	rank_stop(&n[1]);
	ck_assert_ptr_null(b.c.world);
	rk__world_unclaim(&b.c);
	rank_stop(&n[0]);
}
END_TEST

/* The ready callback is where a server sends its first frames. */
START_TEST(test_send_from_ready)
{
	struct rank n[3] = { 0 };
	struct rk_config c;
	int i;

	cfg_base(&c, 0, 3, 0);
	c.peer_timeout_ns = 2000 * MS;
	for (i = 0; i < 3; i++)
		n[i].send_on_ready = true;
	start_world(n, 3, &c);
	for (i = 0; i < 3; i++)
		ck_assert_msg(n[i].ready_send == 0, "rank %d: send from ready: %s", i,
			      rk_errname(n[i].ready_send));
	ck_assert(PUMP_UNTIL(3000, count_tag(&n[0], TAG_HI) == 2 && count_tag(&n[1], TAG_HI) == 1 &&
				   count_tag(&n[2], TAG_HI) == 1,
			     &n[0], &n[1], &n[2]));
	for (i = 0; i < 3; i++)
		ck_assert_int_eq(n[i].nerr, 0);
	for (i = 2; i >= 0; i--)
		rank_stop(&n[i]);
}
END_TEST

/*
 * rk__loop_flush_now() sends queued frames from inside a handler: the peer
 * gets them though the sender's loop never runs again (the scheduler sends a
 * ROUND so before the leader's own launch).
 */
START_TEST(test_flush_now)
{
	struct rank n[2] = { 0 };
	struct rk_loop_stats a, b;
	struct rk_config c;
	uint64_t deadline;
	size_t before;

	cfg_base(&c, 0, 2, 0);
	/*
	 * A send of rank 0's still in flight (its completion not reaped) holds
	 * the frame back until rank 0's loop runs again: no heartbeats, then,
	 * and pumped until an iteration of rank 0's finds nothing, which is
	 * when the handshake's sends are done. (A heartbeat sent by the last
	 * pump held the frame back on a loaded machine.) Nor may rank 1 miss
	 * heartbeats while only it runs.
	 */
	rk__config_tuning(&c)->heartbeat_ns = 60000 * MS;
	c.peer_timeout_ns = 120000 * MS;
	start_world(n, 2, &c);
	deadline = rk_test_deadline_ms(5000);
	do {
		ck_assert_msg(rk_test_now_ns() < deadline, "rank 0's loop never went idle");
		rk_loop_stats(n[0].loop, &a, sizeof(a));
		pump(RANKS(&n[0], &n[1]));
		rk_loop_stats(n[0].loop, &b, sizeof(b));
	} while (b.events != a.events);
	before = count_tag(&n[1], TAG_PLAIN);
	ck_assert_int_eq(send_user(&n[0], 1, TAG_PLAIN, "now", 3), 0);
	rk__loop_flush_now(n[0].loop);
	rk__loop_flush_now(n[0].loop);	/* nothing queued: no-op */
	ck_assert_msg(PUMP_UNTIL(2000, count_tag(&n[1], TAG_PLAIN) > before, &n[1]),
		      "the frame did not leave without the sender's loop");
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* Leader: a TAG_BURST frame makes it queue BURST_FRAMES frames in this one callback. */
static void burst_hook(struct rank *n, int peer, const struct rk_wire_hdr *h, const uint8_t *p)
{
	uint8_t buf[12];
	uint32_t i;
	int m, ret;

	(void)h;
	(void)p;
	if (n->rx[n->nrx - 1].tag != TAG_BURST)
		return;
	for (i = 0; i < BURST_FRAMES; i++) {
		m = rk_wire_encode_user(buf, sizeof(buf), TAG_SEQ, &i, sizeof(i));
		ret = m < 0 ? m : rk_world_send(n->w, peer, RK_FRAME_USER, 0, buf, (uint32_t)m);
		if (ret && !n->hook_err)
			n->hook_err = ret;
	}
}

START_TEST(test_burst)
{
	struct rank n[2] = { 0 };
	struct rk_link_stats a, b;
	struct rk_config c;
	struct rk_wire_user u;
	uint32_t i, v;
	size_t base;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	n[0].hook = burst_hook;
	rk_link_stats(rk_world_link(n[0].w, 1), &a, sizeof(a));
	base = n[1].nrx;
	ck_assert_int_eq(send_user(&n[1], 0, TAG_BURST, NULL, 0), 0);
	ck_assert(PUMP_UNTIL(10000, n[1].nrx >= base + BURST_FRAMES, &n[0], &n[1]));
	ck_assert_int_eq(n[0].hook_err, 0);
	rk_link_stats(rk_world_link(n[0].w, 1), &b, sizeof(b));
	for (i = 0; i < BURST_FRAMES; i++) {
		const struct rxframe *f = &n[1].rx[base + i];

		ck_assert_int_eq(rk_wire_decode_user(f->data, f->len, &u), 0);
		ck_assert_uint_eq(u.tag, TAG_SEQ);
		ck_assert_uint_eq(u.len, 4);
		memcpy(&v, u.data, 4);
		ck_assert_uint_eq(v, i);
	}
	ck_assert_uint_ge(b.tx_frames - a.tx_frames, BURST_FRAMES);
	/* batching: many frames per send */
	ck_assert_msg((b.tx_flushes - a.tx_flushes) * 20 < b.tx_frames - a.tx_frames,
		      "%llu sends for %llu frames",
		      (unsigned long long)(b.tx_flushes - a.tx_flushes),
		      (unsigned long long)(b.tx_frames - a.tx_frames));
	ck_assert_uint_ge(b.tx_queued_max, (uint64_t)BURST_FRAMES * (RK_WIRE_HDR_LEN + 12) / 2);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	rank_stop(&n[0]);
	rank_stop(&n[1]);
}
END_TEST

START_TEST(test_reserve_commit)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk_link *l;
	struct rk_wire_user u;
	uint8_t *p, *big;
	size_t base;
	int err, m;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	l = rk_world_link(n[0].w, 1);
	base = n[1].nrx;

	/* reserve, write in place, commit a shorter length */
	err = 1;
	p = rk_link_reserve(l, 256, &err);
	ck_assert_ptr_nonnull(p);
	ck_assert_int_eq(err, 0);
	ck_assert_ptr_null(rk_link_reserve(l, 16, &err));
	ck_assert_int_eq(err, -EBUSY);
	ck_assert_int_eq(rk_link_send(l, RK_FRAME_USER, 0, "12345678", 8), -EBUSY);
	m = rk_wire_encode_user(p, 256, TAG_PLAIN, "in place", 8);
	ck_assert_int_eq(m, 16);
	ck_assert_int_eq(rk_link_commit(l, RK_FRAME_USER, 0, (uint32_t)m), 0);
	ck_assert_int_eq(rk_link_commit(l, RK_FRAME_USER, 0, (uint32_t)m), -EINVAL);

	/* bounds */
	ck_assert_ptr_null(rk_link_reserve(l, c.max_frame + 1, &err));
	ck_assert_int_eq(err, -RK_ETOOBIG);
	ck_assert_int_eq(rk_link_send(l, RK_FRAME_USER, 0, NULL, 0), -RK_ESHORT);

	/* a commit past the reservation is refused and sends nothing */
	p = rk_link_reserve(l, 16, &err);
	ck_assert_ptr_nonnull(p);
	memset(p, 0, 16);
	ck_assert_int_eq(rk_link_commit(l, RK_FRAME_USER, 0, 1u << 20), -EINVAL);

	/* a 1 MiB frame written in place */
	p = rk_link_reserve(l, 1u << 20, &err);
	ck_assert_ptr_nonnull(p);
	big = malloc(1u << 20);
	ck_assert_ptr_nonnull(big);
	pattern(big, 1u << 20, 3);
	m = rk_wire_encode_user(p, 1u << 20, TAG_BIG, big, (1u << 20) - 8);
	ck_assert_int_eq(m, 1 << 20);
	ck_assert_int_eq(rk_link_commit(l, RK_FRAME_USER, 0, (uint32_t)m), 0);
	ck_assert(rk_link_up(l));

	ck_assert(PUMP_UNTIL(5000, n[1].nrx >= base + 2, &n[0], &n[1]));
	PUMP_FOR(20, &n[0], &n[1]);
	ck_assert_uint_eq(n[1].nrx, base + 2);
	ck_assert_int_eq(rk_wire_decode_user(n[1].rx[base].data, n[1].rx[base].len, &u), 0);
	ck_assert_uint_eq(u.tag, TAG_PLAIN);
	ck_assert_mem_eq(u.data, "in place", 8);
	ck_assert_int_eq(rk_wire_decode_user(n[1].rx[base + 1].data, n[1].rx[base + 1].len, &u), 0);
	ck_assert_uint_eq(u.tag, TAG_BIG);
	ck_assert_uint_eq(u.len, (1u << 20) - 8);
	ck_assert_mem_eq(u.data, big, u.len);
	free(big);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	rank_stop(&n[0]);
	rank_stop(&n[1]);
}
END_TEST

START_TEST(test_big_frames)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	uint8_t *a, *b, *max;
	size_t base0, base1;
	uint32_t len = 1u << 20;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	c.max_frame = 4u << 20;
	start_world(n, 2, &c);
	a = malloc(len);
	b = malloc(len);
	max = malloc(c.max_frame + 1);
	ck_assert(a && b && max);
	pattern(a, len, 10);
	pattern(b, len, 11);
	pattern(max, c.max_frame + 1, 12);
	put32(a, TAG_BIG);	/* make them valid USER payloads */
	put32(a + 4, 0);
	put32(b, TAG_BIG);
	put32(b + 4, 0);
	put32(max, TAG_BIG);
	put32(max + 4, 0);
	base0 = n[0].nrx;
	base1 = n[1].nrx;
	ck_assert_int_eq(rk_world_send(n[0].w, 1, RK_FRAME_USER, 0, a, len), 0);
	ck_assert_int_eq(rk_world_send(n[1].w, 0, RK_FRAME_USER, 0, b, len), 0);
	ck_assert_int_eq(rk_world_send(n[0].w, 1, RK_FRAME_USER, 0, max, c.max_frame), 0);
	ck_assert_int_eq(rk_world_send(n[0].w, 1, RK_FRAME_USER, 0, max, c.max_frame + 1),
			 -RK_ETOOBIG);
	ck_assert(rk_link_up(rk_world_link(n[0].w, 1)));
	ck_assert(PUMP_UNTIL(10000, n[1].nrx >= base1 + 2 && n[0].nrx >= base0 + 1, &n[0], &n[1]));
	ck_assert_uint_eq(n[1].rx[base1].len, len);
	ck_assert_mem_eq(n[1].rx[base1].data, a, len);
	ck_assert_uint_eq(n[0].rx[base0].len, len);
	ck_assert_mem_eq(n[0].rx[base0].data, b, len);
	ck_assert_uint_eq(n[1].rx[base1 + 1].len, c.max_frame);
	ck_assert_mem_eq(n[1].rx[base1 + 1].data, max, c.max_frame);
	ping_pong(&n[0], &n[1]);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	free(a);
	free(b);
	free(max);
	rank_stop(&n[0]);
	rank_stop(&n[1]);
}
END_TEST

/*
 * The heartbeat tick's rule (rk__heartbeat_due()): ticks one period apart,
 * each a little early or late (timer jitter), on an idle link. Every tick
 * sends, so the heartbeats go one period apart; a rule of "idle for a whole
 * period" skips each tick that comes earlier than the one before (here the
 * 2nd and 4th), and then a heartbeat waits two periods. A link that sent a
 * frame a moment before a tick (busy) does not send one.
 */
START_TEST(test_heartbeat_every_tick)
{
	static const int64_t jitter_us[] = { 0, 30, -10, 5, -40, 60, 0, -1 };
	const uint64_t us = 1000, hb = 1000 * MS, t0 = 1000000 * MS;
	uint64_t last_tx = t0, now;
	unsigned int i, sent = 0;

	for (i = 1; i < ARRAY_SIZE(jitter_us); i++) {
		now = t0 + i * hb + (uint64_t)(jitter_us[i] * (int64_t)us);
		if (rk__heartbeat_due(now, last_tx, hb)) {
			last_tx = now;
			sent++;
		}
	}
	ck_assert_uint_eq(sent, ARRAY_SIZE(jitter_us) - 1);
	/* a frame 100 ms before the tick: not idle, no heartbeat */
	ck_assert(!rk__heartbeat_due(t0 + hb, t0 + hb - 100 * MS, hb));
}
END_TEST

/*
 * A follower leaves: its link is gone from rk_world_link(), and the leader
 * still reads the link's final counters with rk_world_link_stats(); they are
 * what the follower counted on its end (its BYE after them). No heartbeats:
 * every frame counted is the test's or the bootstrap's.
 */
START_TEST(test_final_counters)
{
	struct rank n[2] = { 0 };
	struct rk_link_stats live, via, mine, fin;
	struct rk_config c;
	int i;

	cfg_base(&c, 0, 2, 0);
	rk__config_tuning(&c)->heartbeat_ns = 60000 * MS;
	c.peer_timeout_ns = 120000 * MS;
	start_world(n, 2, &c);
	ck_assert(PUMP_UNTIL(5000, link_settled(rk_world_link(n[0].w, 1)) &&
				   link_settled(rk_world_link(n[1].w, 0)), &n[0], &n[1]));
	for (i = 0; i < 20; i++)
		ck_assert_int_eq(send_user(&n[1], 0, TAG_PLAIN, "up", 2), 0);
	for (i = 0; i < 5; i++)
		ck_assert_int_eq(send_user(&n[0], 1, TAG_PLAIN, "down", 4), 0);
	ck_assert(PUMP_UNTIL(5000, count_tag(&n[0], TAG_PLAIN) == 20 &&
				   count_tag(&n[1], TAG_PLAIN) == 5, &n[0], &n[1]));
	PUMP_FOR(20, &n[0], &n[1]);

	/* up: the link's own counters; bad ranks refused */
	ck_assert_int_eq(rk_world_link_stats(n[0].w, 1, &live, sizeof(live)), (int)sizeof(live));
	rk_link_stats(rk_world_link(n[0].w, 1), &via, sizeof(via));
	ck_assert_mem_eq(&live, &via, sizeof(live));
	ck_assert_uint_ge(live.rx_frames, 20);
	ck_assert_int_eq(rk_world_link_stats(n[0].w, 0, &fin, sizeof(fin)), -EINVAL);
	ck_assert_int_eq(rk_world_link_stats(n[0].w, 2, &fin, sizeof(fin)), -EINVAL);
	ck_assert_int_eq(rk_world_link_stats(n[0].w, -1, &fin, sizeof(fin)), -EINVAL);
	ck_assert_int_eq(rk_world_link_stats(n[1].w, 1, &fin, sizeof(fin)), -EINVAL);
	ck_assert_int_eq(rk_world_link_stats(n[1].w, 0, &fin, 8), 8);

	/* the follower leaves with BYE */
	rk_link_stats(rk_world_link(n[1].w, 0), &mine, sizeof(mine));
	rank_stop(&n[1]);
	ck_assert(PUMP_UNTIL(5000, n[0].nerr >= 1, &n[0]));
	ck_assert_int_eq(n[0].errs[0].err, -RK_EPEERBYE);
	PUMP_FOR(200, &n[0]);	/* the link is freed: the world's copy answers */
	ck_assert_ptr_null(rk_world_link(n[0].w, 1));
	ck_assert_int_eq(rk_world_link_stats(n[0].w, 1, &fin, sizeof(fin)), (int)sizeof(fin));
	ck_assert_uint_eq(fin.rx_frames, mine.tx_frames + 1);
	ck_assert_uint_eq(fin.tx_frames, mine.rx_frames);
	ck_assert_uint_ge(fin.rx_bytes, live.rx_bytes);
	ck_assert_uint_eq(fin.tx_bytes, mine.rx_bytes);
	rank_stop(&n[0]);
}
END_TEST

static Suite *world_link_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc;

	tc = world_tcase(s, "link");
	tcase_add_test(tc, test_heartbeat_every_tick);
	tcase_add_test(tc, test_frames_both_ways);
	tcase_add_test(tc, test_frame_claims);
	tcase_add_test(tc, test_send_from_ready);
	tcase_add_test(tc, test_flush_now);
	tcase_add_test(tc, test_burst);
	tcase_add_test(tc, test_reserve_commit);
	tcase_add_test(tc, test_big_frames);
	tcase_add_test(tc, test_final_counters);
	return s;
}

int main(void)
{
	return rk_check_run(world_link_suite());
}
