// SPDX-License-Identifier: MIT
/*
 * check_world: the star world's life over loopback TCP (or shared memory,
 * RK_TEST_SHM=auto): a world of 4 rank threads blocking in their loops, the
 * bootstrap (a follower first, no leader, bad configurations, a port in use, a
 * world of one), application frames (sent, and received by a call) and the
 * world's teardown. Links, failures and strangers are check_world_link's,
 * check_world_fail's and check_world_strangers'.
 */
#define _GNU_SOURCE
#include "world_test.h"
#include "rk_rdma.h"

/* ---- a world of 4, one thread per rank ---------------------------------------------- */

/* What the world of 4 asks of its ranks and what they saw besides their frames. */
struct world4 {
	uint64_t heartbeat_ns;	/* 0: cfg_base's */
	int wait_ret[4];
	int destroy_ret[4];
};

static void *rank_thread(void *arg)
{
	struct rank_thread *t = arg;
	struct rank *n = &t->r;
	struct world4 *tw = t->arg;
	struct rk_config c;
	uint64_t deadline = rk_test_deadline_ms(15000);
	int ret, i, rank = n->rank;

	cfg_base(&c, rank, 4, 0);
	c.peer_timeout_ns = 2000 * MS;
	if (tw->heartbeat_ns) {
		/* no timer for a minute: every wake must come from the events waited for */
		rk__config_tuning(&c)->heartbeat_ns = tw->heartbeat_ns;
		rk__config_tuning(&c)->handshake_timeout_ns = tw->heartbeat_ns;
		c.peer_timeout_ns = 2 * tw->heartbeat_ns;
	}
	ret = rank_join(n, &c, t->port, deadline);
	if (ret)
		T_FAIL(t, ret);
	tw->wait_ret[rank] = rk_world_wait_ready(n->w);
	if (tw->wait_ret[rank])
		T_FAIL(t, tw->wait_ret[rank]);
	if (rank == 0) {
		ret = rk_world_broadcast(n->w, RK_FRAME_USER, 0,
					 (const uint8_t[]){ TAG_ALL, 0, 0, 0, 0, 0, 0, 0, 'a', 'l',
							    'l' }, 11);
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(n, deadline, count_tag(n, TAG_ACK) == 3))
			T_FAIL(t, -ETIMEDOUT);
		for (i = 1; i < 4; i++) {
			ret = send_user(n, i, TAG_QUIT, NULL, 0);
			if (ret)
				T_FAIL(t, ret);
		}
		/* each follower leaves with BYE */
		if (!RUN_UNTIL(n, deadline, n->nerr == 3))
			T_FAIL(t, -ETIMEDOUT);
	} else {
		if (!RUN_UNTIL(n, deadline, count_tag(n, TAG_ALL) == 1))
			T_FAIL(t, -ETIMEDOUT);
		if (n->nerr)
			T_FAIL(t, n->errs[0].err);
		ret = send_user(n, 0, TAG_ACK, &rank, sizeof(rank));
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(n, deadline, count_tag(n, TAG_QUIT) == 1))
			T_FAIL(t, -ETIMEDOUT);
	}
out:
	tw->destroy_ret[rank] = rank_close(n);
	return NULL;
}

START_TEST(test_world_of_4)
{
	struct rank_thread t[4];
	struct world4 tw;
	struct rk_wire_user u;
	bool acked[4] = { false };
	atomic_int port;
	size_t i, k;
	int r;

	memset(t, 0, sizeof(t));
	memset(&tw, 0, sizeof(tw));
	/* _i 1: the bootstrap, the frames and the BYEs wake blocked loops by
	 * themselves (a wait that missed one would sleep until the next timer, a
	 * minute away, past this test's timeout) */
	tw.heartbeat_ns = _i ? 60000 * MS : 0;
	for (r = 0; r < 4; r++)
		t[r].arg = &tw;
	run_rank_threads(t, 4, rank_thread, &port);
	for (r = 0; r < 4; r++) {
		ck_assert_int_eq(tw.wait_ret[r], 0);
		ck_assert_int_eq(tw.destroy_ret[r], 0);
		ck_assert_int_eq(t[r].r.ready, 1);
	}
	for (r = 1; r < 4; r++) {
		struct rank *n = &t[r].r;

		/* a sibling leaving with BYE is not reported to the other followers */
		ck_assert_int_eq(n->nerr, 0);
		for (i = 0; i < (size_t)n->nerr; i++) {
			ck_assert_int_eq(n->errs[i].err, -RK_EPEERBYE);
			ck_assert(n->errs[i].rank >= 1 && n->errs[i].rank <= 3 &&
				  n->errs[i].rank != r);
		}
		for (i = 0, k = 0; i < n->nrx; i++) {
			if (n->rx[i].tag != TAG_ALL)
				continue;
			k++;
			ck_assert_int_eq(n->rx[i].peer, 0);
			ck_assert_int_eq(rk_wire_decode_user(n->rx[i].data, n->rx[i].len, &u), 0);
			ck_assert_uint_eq(u.len, 3);
			ck_assert_mem_eq(u.data, "all", 3);
		}
		ck_assert_uint_eq(k, 1);
	}
	for (i = 0; i < t[0].r.nrx; i++) {
		const struct rxframe *f = &t[0].r.rx[i];

		if (f->tag != TAG_ACK)
			continue;
		ck_assert_int_eq(rk_wire_decode_user(f->data, f->len, &u), 0);
		ck_assert_uint_eq(u.len, sizeof(int));
		memcpy(&r, u.data, sizeof(r));
		ck_assert_int_eq(r, f->peer);
		ck_assert(!acked[r]);
		acked[r] = true;
	}
	ck_assert(acked[1] && acked[2] && acked[3]);
	/* the followers left with BYE, and nothing worse was reported */
	ck_assert_int_eq(t[0].r.nerr, 3);
	memset(acked, 0, sizeof(acked));
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(t[0].r.errs[i].err, -RK_EPEERBYE);
		r = t[0].r.errs[i].rank;
		ck_assert(r >= 1 && r <= 3 && !acked[r]);
		acked[r] = true;
	}
	for (r = 0; r < 4; r++)
		rank_free(&t[r].r);
}
END_TEST

/* ---- bootstrap ---------------------------------------------------------------------- */

/* A follower started first keeps retrying and joins when the leader appears. */
START_TEST(test_follower_first)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	int port = rk_test_free_port();

	ck_assert_int_gt(port, 0);
	cfg_base(&c, 1, 2, port);
	c.peer_timeout_ns = 2000 * MS;
	rank_start(&n[1], &c);
	PUMP_FOR(200, &n[1]);
	ck_assert_int_eq(n[1].ready, 0);
	ck_assert_int_eq(n[1].nerr, 0);
	ck_assert_int_eq(rk_world_failed(n[1].w), 0);
	c.rank = 0;
	rank_start(&n[0], &c);
	ck_assert_int_eq(rk_world_port(n[0].w), port);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[1].ready, &n[0], &n[1]));
	ping_pong(&n[0], &n[1]);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* No leader: -RK_ETIMEOUT after connect_timeout, whatever the heartbeat period. */
static const uint64_t no_leader_hb_ms[] = { 20, 1000 };

START_TEST(test_no_leader)
{
	struct rank n = { 0 };
	struct rk_config c;
	struct rk__tuning *t = rk__config_tuning(&c);
	uint64_t t0, el;
	int port = rk_test_free_port(), ret;

	ck_assert_int_gt(port, 0);
	cfg_base(&c, 1, 2, port);
	c.connect_timeout_ns = 300 * MS;
	t->heartbeat_ns = no_leader_hb_ms[_i] * MS;
	if (t->handshake_timeout_ns < t->heartbeat_ns)
		t->handshake_timeout_ns = t->heartbeat_ns;
	if (c.peer_timeout_ns <= t->heartbeat_ns)
		c.peer_timeout_ns = 2 * t->heartbeat_ns;	/* rk_loop_create() insists */
	t0 = rk_test_now_ns();	/* before the world's deadline is set: load only adds */
	rank_start(&n, &c);
	ret = rk_world_wait_ready(n.w);
	el = rk_test_now_ns() - t0;
	ck_assert_msg(ret == -RK_ETIMEOUT, "wait_ready: %s", rk_errname(ret));
	ck_assert_msg(el >= c.connect_timeout_ns, "gave up after %llu ms",
		      (unsigned long long)(el / MS));
	ck_assert_int_eq(rk_world_failed(n.w), -RK_ETIMEOUT);
	ck_assert_int_eq(n.ready, 0);
	/* no late connection attempt after it gave up */
	PUMP_FOR(700, &n);
	ck_assert_int_eq(rk_world_failed(n.w), -RK_ETIMEOUT);
	ck_assert_int_le(n.nerr, 1);
	if (n.nerr)
		ck_assert_int_eq(n.errs[0].err, -RK_ETIMEOUT);
	rank_stop(&n);
}
END_TEST

static const struct bad_cfg {
	const char *name;
	int rank, size;
	const char *leader;
	int want;
} bad_cfgs[] = {
	{ "rank unset", -1, 2, "127.0.0.1:5000", -RK_ECONFIG },
	{ "size unset", 0, 0, "127.0.0.1:5000", -RK_ECONFIG },
	{ "rank past size", 2, 2, "127.0.0.1:5000", -RK_ECONFIG },
	{ "follower without leader", 1, 2, "", -RK_ECONFIG },
	{ "leader without address", 0, 2, "", -RK_ECONFIG },
	{ "address without port", 1, 2, "127.0.0.1", -RK_ECONFIG },
	{ "unknown scheme", 1, 2, "udp://127.0.0.1:5000", -RK_ECONFIG },
	{ "roce without a device", 1, 2, "roce://127.0.0.1:5000", -RK_ECONFIG },
	{ "roce on no such device", 1, 2, "roce://127.0.0.1:5000?dev=nosuch9&gid=1", 0 },
};

START_TEST(test_bad_config)
{
	const struct bad_cfg *b = &bad_cfgs[_i];
	struct rank n = { 0 };
	struct rk_world *w = NULL;
	struct rk_loop *loop;
	struct rk_config c;

	cfg_base(&c, b->rank, b->size, 0);
	snprintf(c.leader, sizeof(c.leader), "%s", b->leader);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	/* 0: no such device with verbs, built without verbs otherwise */
	ck_assert_int_eq(rk_world_create(loop, &rank_ops, &n, &w),
			 b->want ? b->want : rk_rdma_probe() == -EOPNOTSUPP ? -EOPNOTSUPP :
								      -ENODEV);
	ck_assert_ptr_null(w);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);	/* nothing left attached */
}
END_TEST

START_TEST(test_port_in_use)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t alen = sizeof(a);
	struct rank n = { 0 };
	struct rk_world *w = NULL;
	struct rk_loop *loop;
	struct rk_config c;
	int fd, port;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(fd, 4), 0);
	ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
	port = ntohs(a.sin_port);

	cfg_base(&c, 0, 2, port);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	ck_assert_int_eq(rk_world_create(loop, &rank_ops, &n, &w), -EADDRINUSE);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	close(fd);

	/* two leaders on one port */
	cfg_base(&c, 0, 2, 0);
	rank_start(&n, &c);
	port = rk_world_port(n.w);
	cfg_base(&c, 0, 2, port);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	ck_assert_int_eq(rk_world_create(loop, &rank_ops, &n, &w), -EADDRINUSE);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	rank_stop(&n);
}
END_TEST

START_TEST(test_world_of_one)
{
	struct rank n = { 0 };
	struct rk_config c;

	cfg_base(&c, 0, 1, 0);
	c.leader[0] = '\0';
	rank_start(&n, &c);
	ck_assert_int_eq(n.ready, 1);
	ck_assert_int_eq(rk_world_wait_ready(n.w), 0);
	ck_assert_int_eq(rk_world_broadcast(n.w, RK_FRAME_USER, 0, "12345678", 8), 0);
	ck_assert_int_eq(rk_world_send(n.w, 0, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	ck_assert_int_eq(rk_world_port(n.w), -ENOTCONN);
	rank_stop(&n);
}
END_TEST

/* ---- application messages and the world's teardown (rk_world_send_user, destroy) ---- */

/* The caller's bytes, any bytes, arrive as they were sent; the link stays up. */
START_TEST(test_send_user)
{
	struct rank n[2] = { 0 };
	struct rk_wire_user u;
	struct rk_config c;
	uint8_t raw[300], *big;
	size_t i;

	for (i = 0; i < sizeof(raw); i++)
		raw[i] = (uint8_t)(i * 7 + 1);	/* bytes 4..7 are not a zero "reserved" field */
	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0xab12, raw, sizeof(raw)), 0);
	ck_assert_int_eq(rk_world_send_user(n[1].w, 0, 0xab13, NULL, 0), 0);
	ck_assert(PUMP_UNTIL(3000, count_tag(&n[1], 0xab12) == 1 && count_tag(&n[0], 0xab13) == 1,
			     &n[0], &n[1]));
	for (i = 0; i < n[1].nrx && n[1].rx[i].tag != 0xab12; i++)
		;
	ck_assert_int_eq(rk_wire_decode_user(n[1].rx[i].data, n[1].rx[i].len, &u), 0);
	ck_assert_uint_eq(u.len, sizeof(raw));
	ck_assert_mem_eq(u.data, raw, sizeof(raw));
	ck_assert_int_eq(n[1].rx[i].peer, 0);
	PUMP_FOR(20, &n[0], &n[1]);
	ck_assert(rk_link_up(rk_world_link(n[0].w, 1)) && rk_link_up(rk_world_link(n[1].w, 0)));
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	/* what cannot be sent is refused at the sender */
	ck_assert_int_eq(rk_world_send_user(n[0].w, 0, 1, raw, 1), -ENOTCONN);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 2, 1, raw, 1), -ENOTCONN);
	ck_assert_int_eq(rk_world_send_user(n[1].w, -1, 1, raw, 1), -ENOTCONN);
	big = calloc(1, c.max_frame);
	ck_assert_ptr_nonnull(big);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 1, big, c.max_frame), -RK_ETOOBIG);
	free(big);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* rk_world_recv_user() takes the first frame of its tag, once; a second one the
 * same read brought, a frame too big for the buffer and other tags go to the
 * frame callback; nothing, a stop and a bad buffer end it as documented. */
START_TEST(test_recv_user)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	uint8_t buf[16];
	uint32_t len = 0;
	int peer = -1, r;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 5000 * MS;
	start_world(n, 2, &c);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0x78, "other", 5), 0);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0x77, "one", 3), 0);
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0x77, "two", 3), 0);
	PUMP_FOR(20, &n[0]);
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x77, buf, sizeof(buf), &peer, &len,
					    3000 * (int64_t)MS), 1);
	ck_assert_int_eq(peer, 0);
	ck_assert_uint_eq(len, 3);
	ck_assert_mem_eq(buf, "one", 3);
	/* "two": here, or at the callback if the read that brought "one" had it too */
	r = rk_world_recv_user(n[1].w, 0x77, buf, sizeof(buf), &peer, &len, 200 * (int64_t)MS);
	if (r == 1) {
		ck_assert_uint_eq(len, 3);
		ck_assert_mem_eq(buf, "two", 3);
		ck_assert_uint_eq(count_tag(&n[1], 0x77), 0);
	} else {
		ck_assert_int_eq(r, -RK_ETIMEOUT);
		ck_assert_uint_eq(count_tag(&n[1], 0x77), 1);
	}
	ck_assert_uint_eq(count_tag(&n[1], 0x78), 1);
	/* too big: the callback has it, the length is said */
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0x77, "0123456789abcdefXY", 18), 0);
	PUMP_FOR(20, &n[0]);
	r = (int)count_tag(&n[1], 0x77);
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x77, buf, sizeof(buf), &peer, &len,
					    3000 * (int64_t)MS), -EMSGSIZE);
	ck_assert_uint_eq(len, 18);
	ck_assert_uint_eq(count_tag(&n[1], 0x77), (size_t)r + 1);
	/* nothing comes; a stop asked for before; a buffer that is not there */
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x77, buf, sizeof(buf), NULL, NULL,
					    10 * (int64_t)MS), -RK_ETIMEOUT);
	rk_loop_stop(n[1].loop);
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x77, buf, sizeof(buf), NULL, NULL, -1), 0);
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x77, NULL, 4, NULL, NULL, 0), -EINVAL);
	/* an empty message, into no buffer */
	ck_assert_int_eq(rk_world_send_user(n[0].w, 1, 0x79, NULL, 0), 0);
	PUMP_FOR(20, &n[0]);
	ck_assert_int_eq(rk_world_recv_user(n[1].w, 0x79, NULL, 0, &peer, &len,
					    3000 * (int64_t)MS), 1);
	ck_assert_uint_eq(len, 0);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

static enum rk_activity count_post_cb(struct rk_post *p)
{
	(*(int *)p->data)++;
	return RK_BUSY;
}

static enum rk_activity count_timer_cb(struct rk_timer *t, uint64_t now)
{
	(void)now;
	(*(int *)t->data)++;
	return RK_IDLE;
}

/*
 * rk_world_destroy() drives only its links' I/O: a post queued and a timer due
 * before it run at the next rk_loop_run(), not inside it, and no frame reaches
 * the world's callback while it lingers.
 */
START_TEST(test_destroy_runs_nothing_else)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk_post p;
	struct rk_timer t;
	int posts = 0, fired = 0, i;
	size_t nrx;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	for (i = 0; i < 50; i++)	/* frames on their way to rank 0 as it leaves */
		ck_assert_int_eq(rk_world_send_user(n[1].w, 0, TAG_PLAIN, "late", 4), 0);
	ck_assert_int_eq(rk_loop_run(n[1].loop, RK_RUN_NOWAIT), 0);
	rk_post_init(&p, count_post_cb, &posts);
	rk_loop_post(n[0].loop, &p);
	rk_timer_init(&t, count_timer_cb, &fired);
	ck_assert_int_eq(rk_timer_start(n[0].loop, &t, 0, 0), 0);
	nrx = n[0].nrx;
	ck_assert_int_eq(rk_world_destroy(n[0].w), 0);
	n[0].w = NULL;
	ck_assert_int_eq(posts, 0);
	ck_assert_int_eq(fired, 0);
	ck_assert_uint_eq(n[0].nrx, nrx);
	ck_assert_int_eq(rk_loop_run(n[0].loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(posts, 1);
	ck_assert_int_eq(fired, 1);
	ck_assert(PUMP_UNTIL(3000, n[1].nerr > 0, &n[1]));	/* it heard the BYE */
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* rk_world_destroy() from inside one of the loop's callbacks refuses; the world lives on. */
struct destroy_cb {
	struct rk_timer t;
	struct rank *n;
	int ret;
};

static enum rk_activity destroy_timer_cb(struct rk_timer *t, uint64_t now)
{
	struct destroy_cb *d = rk__container_of(t, struct destroy_cb, t);

	(void)now;
	d->ret = rk_world_destroy(d->n->w);
	return RK_IDLE;
}

START_TEST(test_destroy_from_callback)
{
	struct rank n[2] = { 0 };
	struct destroy_cb d = { .ret = 1, .n = &n[0] };
	struct rk_config c;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	start_world(n, 2, &c);
	rk_timer_init(&d.t, destroy_timer_cb, NULL);
	ck_assert_int_eq(rk_timer_start(n[0].loop, &d.t, 0, 0), 0);
	ck_assert(PUMP_UNTIL(3000, d.ret != 1, &n[0], &n[1]));
	ck_assert_int_eq(d.ret, -EBUSY);
	ping_pong(&n[0], &n[1]);	/* still whole */
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

static Suite *world_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc;

	tc = world_tcase(s, "threads");
	tcase_add_loop_test(tc, test_world_of_4, 0, 2);

	tc = world_tcase(s, "bootstrap");
	tcase_add_test(tc, test_follower_first);
	tcase_add_loop_test(tc, test_no_leader, 0, ARRAY_SIZE(no_leader_hb_ms));
	tcase_add_loop_test(tc, test_bad_config, 0, ARRAY_SIZE(bad_cfgs));
	tcase_add_test(tc, test_port_in_use);
	tcase_add_test(tc, test_world_of_one);

	tc = world_tcase(s, "app_and_teardown");
	tcase_add_test(tc, test_send_user);
	tcase_add_test(tc, test_recv_user);
	tcase_add_test(tc, test_destroy_runs_nothing_else);
	tcase_add_test(tc, test_destroy_from_callback);
	return s;
}

int main(void)
{
	return rk_check_run(world_suite());
}
