// SPDX-License-Identifier: MIT
/*
 * check_world_strangers: strangers on the leader's port, played by raw sockets:
 * garbage, silence and floods before a handshake; strangers who know the port
 * but not the secret (wrong keys, replays, reflections, taken ranks), a fake
 * leader, a follower's checks of what the leader says, bounded pending
 * connections and log lines, and a transport class registered by scheme.
 */
#define _GNU_SOURCE
#include "world_test.h"
#include "link_int.h"
#include "tcp_int.h"

/* ---- strangers on the leader's port ------------------------------------------------- */

enum { G_RANDOM, G_BADCRC, G_SILENT, G_HTTP, G_TRUNC, G_HELLO };

static const struct garbage {
	const char *name;
	int kind;
	/* G_HELLO: the frame */
	unsigned int type;
	uint32_t proto, size, rank, src;
	uint64_t session;
	bool bad_paycrc;
	int want;	/* the ERROR the leader must answer with; 0 = it just closes */
} garbage[] = {
	{ .name = "random bytes", .kind = G_RANDOM, .want = -RK_EMAGIC },
	{ .name = "magic with a bad header CRC", .kind = G_BADCRC, .want = -RK_EHDRCRC },
	{ .name = "silent (handshake timeout)", .kind = G_SILENT },
	{ .name = "HTTP GET", .kind = G_HTTP, .want = -RK_EMAGIC },
	{ .name = "truncated HELLO then EOF", .kind = G_TRUNC },
	{ "world size", G_HELLO, RK_FRAME_HELLO, 2, 3, 1, 1, SESSION, false, -RK_EWORLD },
	{ "session id", G_HELLO, RK_FRAME_HELLO, 2, 2, 1, 1, SESSION + 1, false, -RK_ESESSION },
	{ "protocol version", G_HELLO, RK_FRAME_HELLO, 1, 2, 1, 1, SESSION, false, -RK_EPROTOVER },
	{ "duplicate rank", G_HELLO, RK_FRAME_HELLO, 2, 2, 1, 1, SESSION, false, -RK_ERANK },
	{ "the leader's rank", G_HELLO, RK_FRAME_HELLO, 2, 2, 0, 0, SESSION, false, -RK_ERANK },
	{ "rank of the world size", G_HELLO, RK_FRAME_HELLO, 2, 2, 2, 2, SESSION, false,
	  -RK_ERANK },
	{ "rank past the size", G_HELLO, RK_FRAME_HELLO, 2, 2, 7, 7, SESSION, false, -RK_ERANK },
	{ "src_rank unlike HELLO's", G_HELLO, RK_FRAME_HELLO, 2, 2, 1, 0, SESSION, false,
	  -RK_ERANK },
	{ "WELCOME first", G_HELLO, RK_FRAME_WELCOME, 2, 2, 1, 1, SESSION, false,
	  -RK_EHANDSHAKE },
	{ "HELLO payload CRC", G_HELLO, RK_FRAME_HELLO, 2, 2, 1, 1, SESSION, true, -RK_EPAYCRC },
};

START_TEST(test_garbage)
{
	const struct garbage *g = &garbage[_i];
	static const char http[] = "GET / HTTP/1.1\r\nHost: localhost\r\n\r\n";
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk_link *l;
	struct raw r;
	struct rk_world_stats ws0, ws1;
	uint8_t f[256], hello[RK_WIRE_HELLO_LEN];
	unsigned int dropped;
	uint64_t t_conn, el;
	int port;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	port = start_world(n, 2, &c);
	l = rk_world_link(n[0].w, 1);
	ping_pong(&n[0], &n[1]);
	dropped = log_dropped();
	rk_world_stats(n[0].w, &ws0, sizeof(ws0));

	raw_connect(&r, port, 0);
	t_conn = rk_test_now_ns();
	switch (g->kind) {
	case G_RANDOM:
		pattern(f, 64, 99);
		f[0] = 'X';
		raw_send(&r, f, 64);
		break;
	case G_BADCRC:
		make_frame(f, RK_FRAME_USER, 0, 1, 0, "\1\0\0\0\0\0\0\0", 8);
		f[28] ^= 1;
		raw_send(&r, f, RK_WIRE_HDR_LEN + 8);
		break;
	case G_SILENT:
		break;
	case G_HTTP:
		raw_send(&r, http, sizeof(http) - 1);
		break;
	case G_TRUNC:
		hello_payload(hello, RK_WIRE_VERSION, 2, 1, SESSION);
		make_frame(f, RK_FRAME_HELLO, 0, 1, 0, hello, sizeof(hello));
		raw_send(&r, f, 20);
		ck_assert_int_eq(shutdown(r.fd, SHUT_WR), 0);
		break;
	case G_HELLO:
		hello_payload(hello, g->proto, g->size, g->rank, g->session);
		make_frame(f, g->type, 0, g->src, 0, hello, sizeof(hello));
		if (g->bad_paycrc)
			f[RK_WIRE_HDR_LEN + 20] ^= 1;
		raw_send(&r, f, RK_WIRE_HDR_LEN + sizeof(hello));
		break;
	}
	ping_pong(&n[0], &n[1]);	/* the world keeps working meanwhile */
	if (g->want) {
		raw_expect_error(&r, RANKS(&n[0], &n[1]), g->want);
	} else {
		raw_wait_eof(&r, RANKS(&n[0], &n[1]), 3000);
		ck_assert_uint_eq(r.discarded, 0);	/* closed without a word */
	}
	el = rk_test_now_ns() - t_conn;
	rk_world_stats(n[0].w, &ws1, sizeof(ws1));
	ck_assert_uint_eq(ws1.refused_timeout - ws0.refused_timeout, g->kind == G_SILENT);
	/* no earlier than the timeout: the leader took the connection in after
	 * t_conn, so load can only make this later */
	if (g->kind == G_SILENT)
		ck_assert_msg(el >= rk__config_tuning(&c)->handshake_timeout_ns,
			      "a silent socket was dropped after %llu ms", (unsigned long long)(el / MS));
	/* the leader logged it */
	ck_assert(PUMP_UNTIL(5000, log_dropped() > dropped, &n[0], &n[1]));

	ping_pong(&n[0], &n[1]);
	ck_assert_ptr_eq(rk_world_link(n[0].w, 1), l);
	ck_assert(rk_link_up(l));
	ck_assert_int_eq(n[0].nerr, 0);
	ck_assert_int_eq(n[1].nerr, 0);
	ck_assert_int_eq(rk_world_failed(n[0].w), 0);
	raw_close(&r);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* Many silent sockets: the leader bounds them (RK_MAX_PENDING, here 64) and drops the rest. */
START_TEST(test_pending_flood)
{
	enum { FLOOD = 80 };
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct raw *r;
	struct rk_world_stats ws;
	int port, i, closed = 0;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	rk__config_tuning(&c)->handshake_timeout_ns = 2000 * MS;
	rk__config_tuning(&c)->max_pending = 64;
	port = start_world(n, 2, &c);
	r = calloc(FLOOD, sizeof(*r));
	ck_assert_ptr_nonnull(r);
	for (i = 0; i < FLOOD; i++)
		raw_connect(&r[i], port, 0);
#define COUNT_CLOSED()								\
	({									\
		closed = 0;							\
		for (i = 0; i < FLOOD; i++) {					\
			raw_poll(&r[i]);					\
			closed += r[i].eof;					\
		}								\
		closed;								\
	})
	/* the surplus is refused at once, for newer connections, not by the handshake timeout */
	ck_assert(PUMP_UNTIL(5000, COUNT_CLOSED() >= FLOOD - 64, &n[0], &n[1]));
	rk_world_stats(n[0].w, &ws, sizeof(ws));
	ck_assert_uint_eq(ws.refused_evicted, FLOOD - 64);
	ck_assert_uint_eq(ws.refused_timeout, 0);
	ck_assert_int_lt(closed, FLOOD);
	ping_pong(&n[0], &n[1]);
	/* the rest when their handshake time is up */
	ck_assert(PUMP_UNTIL(6000, COUNT_CLOSED() == FLOOD, &n[0], &n[1]));
#undef COUNT_CLOSED
	ping_pong(&n[0], &n[1]);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	for (i = 0; i < FLOOD; i++)
		raw_close(&r[i]);
	free(r);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* ---- trust: strangers who know the port but not the secret ---------------------- */

enum { S_WRONG_KEY, S_NO_KEY, S_NO_PROOF, S_REPLAY, S_REFLECT, S_RANK0, S_RANK1, S_RANKSIZE };

static const struct stranger {
	const char *name;
	int kind;
	int want;	/* the ERROR it gets; 0: dropped without one (its time ran out) */
} strangers[] = {
	{ "a wrong key", S_WRONG_KEY, -RK_EAUTH },
	{ "no key", S_NO_KEY, -RK_EAUTH },
	{ "no proof at all", S_NO_PROOF, 0 },
	{ "a real handshake replayed", S_REPLAY, -RK_EAUTH },
	{ "the leader's own proof sent back", S_REFLECT, -RK_EAUTH },
	{ "a HELLO claiming rank 0", S_RANK0, -RK_ERANK },
	{ "a HELLO claiming a taken rank", S_RANK1, -RK_ERANK },
	{ "a HELLO claiming the world size", S_RANKSIZE, -RK_ERANK },
};

/*
 * A world of 3 whose rank 2 has not joined yet: a stranger tries to take that
 * rank (or another) without the secret. It is refused with RK_EAUTH or
 * RK_ERANK, holds no rank meanwhile, the counters say why, nothing leaks into
 * the log, and the real rank 2 then joins.
 */
START_TEST(test_stranger)
{
	const struct stranger *g = &strangers[_i];
	struct rank n[3] = { 0 };
	struct rk_config c;
	struct rk_world_stats st0, st;
	struct rk_wire_hdr h;
	struct raw r, rec;
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];
	uint8_t rec_hello[RK_WIRE_HELLO_LEN], rec_auth[RK_WIRE_MAC_LEN], pl[64];
	uint32_t rank = 2;
	int port;

	cfg_base(&c, 0, 3, 0);
	if (!g_auth) {
		/* no OpenSSL: such a build refuses a secret instead */
		ck_assert_int_eq(rk_config_set_secret(&c, SECRET, strlen(SECRET)), 0);
		ck_assert_int_eq(rank_create(&n[0], &c), -EOPNOTSUPP);
		return;
	}
	c.peer_timeout_ns = 5000 * MS;	/* raw peers send no heartbeats */
	port = start_world(n, 2, &c);
	ck_assert_int_eq(n[0].ready, 0);
	rk_world_stats(n[0].w, &st0, sizeof(st0));

	if (g->kind == S_REPLAY) {
		/* first a real handshake as rank 2, recorded; then rank 2 goes away */
		raw_connect(&rec, port, 0);
		raw_join_key(&rec, RANKS(&n[0], &n[1]), 2, 3, SECRET, rec_hello, rec_auth);
		ck_assert(PUMP_UNTIL(3000, n[0].ready, &n[0], &n[1]));
		raw_close(&rec);
		ck_assert(PUMP_UNTIL(3000, saw_error_for(&n[0], 2), &n[0], &n[1]));
		rk_world_stats(n[0].w, &st0, sizeof(st0));
	}
	raw_connect(&r, port, 0);
	switch (g->kind) {
	case S_RANK0:
		rank = 0;
		break;
	case S_RANK1:
		rank = 1;
		break;
	case S_RANKSIZE:
		rank = 3;
		break;
	}
	if (g->kind == S_REPLAY)
		memcpy(hello, rec_hello, sizeof(hello));
	else
		raw_hello(hello, rank, 3, g->kind != S_NO_KEY, 0x77);
	raw_send_frame(&r, RK_FRAME_HELLO, 0, rank, hello, sizeof(hello));
	if (g->want == -RK_EAUTH && g->kind != S_NO_KEY) {
		/* the leader proves itself first, to anyone: that costs nothing */
		ck_assert_int_eq(raw_next(&r, RANKS(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
		memcpy(welcome, pl, sizeof(welcome));
		ck_assert_int_eq(raw_next(&r, RANKS(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_AUTH);
		if (g->kind == S_WRONG_KEY)
			raw_proof(WRONG_SECRET, RK__AUTH_FOLLOWER, hello, welcome, mac);
		else if (g->kind == S_REPLAY)
			memcpy(mac, rec_auth, sizeof(mac));
		else
			memcpy(mac, pl, sizeof(mac));	/* S_REFLECT */
		raw_send_frame(&r, RK_FRAME_AUTH, 0, rank, mac, sizeof(mac));
	}
	if (g->want) {
		raw_expect_error(&r, RANKS(&n[0], &n[1]), g->want);
	} else {
		/* it never proves anything: dropped when its handshake time is up */
		ck_assert_int_eq(raw_next(&r, RANKS(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
		ck_assert_ptr_null(rk_world_link(n[0].w, 2));	/* it holds no rank */
		raw_wait_eof(&r, RANKS(&n[0], &n[1]), 3000);
	}
	raw_close(&r);

	rk_world_stats(n[0].w, &st, sizeof(st));
	if (g->want == -RK_EAUTH)
		ck_assert_uint_eq(st.refused_auth, st0.refused_auth + 1);
	else if (g->want == -RK_ERANK)
		ck_assert_uint_eq(st.refused_rank, st0.refused_rank + 1);
	else
		ck_assert_uint_eq(st.refused_timeout, st0.refused_timeout + 1);
	ck_assert_uint_eq(st.joined, st0.joined);
	ck_assert_ptr_null(rk_world_link(n[0].w, 2));
	ck_assert_int_eq(n[0].ready, g->kind == S_REPLAY);
	ck_assert(rk_link_up(rk_world_link(n[0].w, 1)));
	ping_pong(&n[0], &n[1]);

	/* the real rank 2 joins, with the secret */
	c.rank = 2;
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	rank_start(&n[2], &c);
	ck_assert(PUMP_UNTIL(5000, n[2].ready && rk_world_link(n[0].w, 2), &n[0], &n[1], &n[2]));
	ping_pong(&n[0], &n[2]);
	ck_assert_uint_eq(log_leaks(), 0);
	rank_stop(&n[2]);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* A stranger mid-handshake for rank 2 does not keep the real rank 2 out. */
START_TEST(test_stranger_holds_no_rank)
{
	struct rank n[3] = { 0 };
	struct rk_config c;
	struct raw r;
	uint8_t hello[RK_WIRE_HELLO_LEN];
	int port;

	cfg_base(&c, 0, 3, 0);
	rk__config_tuning(&c)->handshake_timeout_ns = 5000 * MS;
	port = start_world(n, 2, &c);
	raw_connect(&r, port, 0);
	raw_hello(hello, 2, 3, g_auth, 0x99);
	raw_send_frame(&r, RK_FRAME_HELLO, 0, 2, hello, sizeof(hello));
	PUMP_FOR(50, &n[0], &n[1]);	/* its HELLO is in: it waits for a proof */

	c.rank = 2;
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	rank_start(&n[2], &c);
	if (!g_auth) {
		/* without a secret nothing tells them apart: the first HELLO wins */
		ck_assert(PUMP_UNTIL(3000, n[2].nerr > 0, &n[0], &n[1], &n[2]));
		ck_assert_int_eq(n[2].errs[0].err, -RK_ERANK);
	} else {
		ck_assert(PUMP_UNTIL(5000, n[0].ready && n[2].ready, &n[0], &n[1], &n[2]));
		ping_pong(&n[0], &n[2]);
	}
	raw_close(&r);
	rank_stop(&n[2]);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* A raw "leader" on a port the follower dials: it answers HELLO as told. */
struct fake_leader {
	int ls;
	int port;
	struct raw r;
};

static void fake_leader_listen(struct fake_leader *f)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	f->ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(f->ls, 0);
	ck_assert_int_eq(bind(f->ls, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(f->ls, 4), 0);
	ck_assert_int_eq(getsockname(f->ls, (struct sockaddr *)&a, &len), 0);
	f->port = ntohs(a.sin_port);
}

/* Accept the follower and read its HELLO into @hello. */
static void fake_leader_accept(struct fake_leader *f, struct rank *n, uint8_t *hello)
{
	uint8_t pl[RK_WIRE_HELLO_LEN];
	struct rk_wire_hdr h;
	uint64_t dl = rk_test_deadline_ms(3000);
	int fd;

	memset(&f->r, 0, sizeof(f->r));
	for (;;) {
		fd = accept4(f->ls, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
		if (fd >= 0)
			break;
		ck_assert_msg(rk_test_now_ns() < dl, "the follower did not connect");
		pump(&n, 1);
	}
	f->r.fd = fd;
	f->r.cap = 65536;
	f->r.buf = malloc(f->r.cap);
	ck_assert_ptr_nonnull(f->r.buf);
	ck_assert_int_eq(raw_next(&f->r, &n, 1, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_uint_eq(h.type, RK_FRAME_HELLO);
	memcpy(hello, pl, RK_WIRE_HELLO_LEN);
}

/* The follower's side: a leader that cannot prove the secret is refused. */
START_TEST(test_follower_refuses_fake_leader)
{
	struct rank n = { 0 };
	struct fake_leader f;
	struct rk_config c;
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];

	if (!rk__auth_available())
		return;
	fake_leader_listen(&f);
	cfg_base(&c, 1, 2, f.port);
	rank_start(&n, &c);
	fake_leader_accept(&f, &n, hello);
	ck_assert_uint_eq(hello[12], RK_WIRE_AUTH_HMAC);
	raw_hello(welcome, 0, 2, _i == 0, 0x33);
	raw_send_frame(&f.r, RK_FRAME_WELCOME, 0, 0, welcome, sizeof(welcome));
	if (_i == 0) {	/* a proof made with a guess */
		raw_proof(WRONG_SECRET, RK__AUTH_LEADER, hello, welcome, mac);
		raw_send_frame(&f.r, RK_FRAME_AUTH, 0, 0, mac, sizeof(mac));
	}			/* else: it claims to use no secret */
	raw_expect_error_from(&f.r, RANKS(&n), -RK_EAUTH, 1);
	ck_assert(PUMP_UNTIL(3000, n.nerr > 0, &n));
	ck_assert_int_eq(n.errs[0].rank, 0);
	ck_assert_msg(n.errs[0].err == -RK_EAUTH, "peer_error %s", rk_errname(n.errs[0].err));
	ck_assert_int_eq(n.ready, 0);
	raw_close(&f.r);
	close(f.ls);
	rank_stop(&n);
}
END_TEST

/*
 * An ERROR frame naming a rank the world does not have (0xfffffffe, the
 * follower itself, a rank past the size) is the link's own error: peer_error
 * gets rank 0, never -2.
 */
START_TEST(test_error_rank_checked)
{
	static const uint32_t ranks[] = { 0xfffffffeu, 1, 5 };
	struct rank n = { 0 };
	struct fake_leader f;
	struct rk_config c;
	struct rk_wire_hdr h;
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];
	uint8_t pl[512];
	int m;

	fake_leader_listen(&f);
	cfg_base(&c, 1, 2, f.port);
	rank_start(&n, &c);
	fake_leader_accept(&f, &n, hello);
	raw_hello(welcome, 0, 2, g_auth, 0x34);
	raw_send_frame(&f.r, RK_FRAME_WELCOME, 0, 0, welcome, sizeof(welcome));
	if (g_auth) {
		raw_proof(SECRET, RK__AUTH_LEADER, hello, welcome, mac);
		raw_send_frame(&f.r, RK_FRAME_AUTH, 0, 0, mac, sizeof(mac));
		ck_assert_int_eq(raw_next(&f.r, RANKS(&n), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_AUTH);
		raw_proof(SECRET, RK__AUTH_FOLLOWER, hello, welcome, mac);
		ck_assert_mem_eq(pl, mac, sizeof(mac));
	}
	ck_assert(PUMP_UNTIL(3000, n.ready, &n));
	m = rk_wire_encode_error(pl, sizeof(pl), -RK_EPEERDEAD, ranks[_i], "made up");
	ck_assert_int_gt(m, 0);
	raw_send_frame(&f.r, RK_FRAME_ERROR, 0, 0, pl, (uint32_t)m);
	ck_assert(PUMP_UNTIL(3000, n.nerr > 0, &n));
	ck_assert_int_eq(n.nerr, 1);
	ck_assert_int_eq(n.errs[0].rank, 0);	/* the link to the leader, nothing else */
	ck_assert_int_eq(n.errs[0].err, -RK_EPEERDEAD);
	raw_close(&f.r);
	close(f.ls);
	rank_stop(&n);
}
END_TEST

/* Before its handshake a stranger may send only HELLO, of HELLO's size: a bigger
 * length or another type is refused from the header alone, at once, before the
 * leader buffers any payload. */
static const struct big_frame {
	const char *name;
	unsigned int type;
	uint32_t len;		/* claimed in the header; only the header is sent */
	int want;
} big_frames[] = {
	{ "USER of max_frame bytes", RK_FRAME_USER, 4u << 20, -RK_ETOOBIG },
	{ "ROUND of 16 MiB", RK_FRAME_ROUND, RK_WIRE_MAX_PAYLOAD, -RK_ETOOBIG },
	{ "HELLO of 16 MiB", RK_FRAME_HELLO, RK_WIRE_MAX_PAYLOAD, -RK_ETRAILING },
	{ "a small USER frame", RK_FRAME_USER, 8, -RK_EHANDSHAKE },
	{ "AUTH before HELLO", RK_FRAME_AUTH, RK_WIRE_MAC_LEN, -RK_EHANDSHAKE },
};

START_TEST(test_stranger_big_frame)
{
	const struct big_frame *b = &big_frames[_i];
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct raw r;
	struct rk_world_stats ws;
	uint8_t f[RK_WIRE_HDR_LEN];
	int port;

	cfg_base(&c, 0, 2, 0);
	/* far: the answer must not wait for it */
	rk__config_tuning(&c)->handshake_timeout_ns = 20000 * MS;
	port = start_world(n, 2, &c);
	raw_connect(&r, port, 0);
	memset(f, 0, sizeof(f));
	put32(f, RK_WIRE_MAGIC);
	f[4] = RK_WIRE_VERSION;
	f[5] = (uint8_t)b->type;
	put32(f + 8, 1);
	put32(f + 12, b->len);
	reseal_hdr(f);
	raw_send(&r, f, sizeof(f));
	raw_expect_error(&r, RANKS(&n[0], &n[1]), b->want);
	rk_world_stats(n[0].w, &ws, sizeof(ws));
	ck_assert_uint_eq(ws.refused_timeout, 0);	/* the header's answer, not the timeout's */
	raw_close(&r);
	ping_pong(&n[0], &n[1]);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/*
 * 200 idle sockets, then 300 more connections one after another: the pending
 * table never holds more than RK_MAX_PENDING, each new one pushes the oldest
 * out, and the real follower still joins.
 */
START_TEST(test_pending_evict)
{
	enum { IDLE = 200, RAPID = 300 };
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	struct raw *r;
	int port, i, closed;

	cfg_base(&c, 0, 2, 0);
	/* only eviction may close them */
	rk__config_tuning(&c)->handshake_timeout_ns = 30000 * MS;
	rk__config_tuning(&c)->max_pending = 16;
	rank_start(&n[0], (c.rank = 0, &c));
	port = rk_world_port(n[0].w);
	r = calloc(IDLE, sizeof(*r));
	ck_assert_ptr_nonnull(r);
	for (i = 0; i < IDLE; i++) {
		raw_connect(&r[i], port, 0);
		if (i % 16 == 15)
			PUMP_FOR(2, &n[0]);	/* the accept queue may be short (somaxconn) */
	}
#define COUNT_CLOSED()								\
	({									\
		closed = 0;							\
		for (i = 0; i < IDLE; i++) {					\
			raw_poll(&r[i]);					\
			closed += r[i].eof;					\
		}								\
		closed;								\
	})
	ck_assert(PUMP_UNTIL(5000, COUNT_CLOSED() >= IDLE - 16, &n[0]));
	rk_world_stats(n[0].w, &st, sizeof(st));
	ck_assert_uint_eq(st.accepted, IDLE);
	ck_assert_uint_le(st.pending, 16);
	ck_assert_uint_le(st.pending_max, 16);
	ck_assert_uint_ge(st.refused_evicted, IDLE - 16);
	/* the ones left are the newest: the first 184 were pushed out */
	for (i = 0; i < IDLE - 16; i++)
		ck_assert_msg(r[i].eof, "socket %d of %d is still open", i, IDLE);
	for (i = 0; i < RAPID; i++) {
		struct raw q;

		raw_connect(&q, port, 0);
		raw_close(&q);
		if (i % 16 == 15)
			PUMP_FOR(2, &n[0]);
	}
	/* the real follower joins through all that */
	c.rank = 1;
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	rank_start(&n[1], &c);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[1].ready, &n[0], &n[1]));
	ping_pong(&n[0], &n[1]);
	rk_world_stats(n[0].w, &st, sizeof(st));
	ck_assert_uint_le(st.pending_max, 16);
	ck_assert_uint_eq(st.joined, 1);
	ck_assert_uint_ge(st.accepted, IDLE + RAPID + 1);
	COUNT_CLOSED();
	ck_assert_int_eq(closed, IDLE);	/* the rapid ones pushed out the last idle ones */
#undef COUNT_CLOSED
	for (i = 0; i < IDLE; i++)
		raw_close(&r[i]);
	free(r);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* A stranger with the session but not the key: connect from @src, send HELLO for
 * rank 1, and pump until the leader's WELCOME is in (it waits for a proof now). */
static void hello_stranger(struct raw *r, int port, const char *src, struct rank *n)
{
	uint8_t hello[RK_WIRE_HELLO_LEN], pl[64];
	struct rk_wire_hdr h;

	raw_connect_from(r, port, src, 0);
	raw_hello(hello, 1, 2, true, 0x99);
	raw_send_frame(r, RK_FRAME_HELLO, 0, 1, hello, sizeof(hello));
	ck_assert_int_eq(raw_next(r, &n, 1, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
}

/* The real rank 1, by hand: its HELLO, then the leader's WELCOME and proof in. */
static void follower_hello(struct raw *r, struct rank *n, uint8_t *hello, uint8_t *welcome)
{
	uint8_t pl[64];
	struct rk_wire_hdr h;

	raw_hello(hello, 1, 2, true, 0x41);
	raw_send_frame(r, RK_FRAME_HELLO, 0, 1, hello, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(raw_next(r, &n, 1, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
	memcpy(welcome, pl, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(raw_next(r, &n, 1, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_uint_eq(h.type, RK_FRAME_AUTH);
}

/* ...and its proof: the leader takes it as rank 1. */
static void follower_proof(struct raw *r, struct rank *n, const uint8_t *hello,
			   const uint8_t *welcome)
{
	uint8_t mac[RK_WIRE_MAC_LEN];

	raw_proof(SECRET, RK__AUTH_FOLLOWER, hello, welcome, mac);
	raw_send_frame(r, RK_FRAME_AUTH, 0, 1, mac, sizeof(mac));
	ck_assert(PUMP_UNTIL(3000, n->ready, n));
}

/* Pump until the leader has evicted @want strangers in all. */
#define PUMP_EVICTED(n, want)								\
	({										\
		struct rk_world_stats st_;						\
											\
		PUMP_UNTIL(3000, (rk_world_stats((n)->w, &st_, sizeof(st_)),		\
				  st_.refused_evicted >= (want)), (n));		\
	})

/*
 * A full table of strangers that sent the session's HELLO, then a real rank
 * that connected before them starts its proof round trip, then more such
 * strangers come: each pushes out the stalest stranger, never the rank whose
 * round trip is younger than theirs, and the rank joins.
 */
START_TEST(test_pending_round_trip)
{
	enum { MAX = 8 };
	struct rank n = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	struct raw f, old[MAX - 1], fresh[MAX - 1];
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN];
	int port, i;

	cfg_base(&c, 0, 2, 0);
	if (!g_auth)
		return;		/* without a secret a HELLO is the whole handshake */
	c.peer_timeout_ns = 5000 * MS;
	rk__config_tuning(&c)->handshake_timeout_ns = 30000 * MS;	/* only eviction */
	rk__config_tuning(&c)->max_pending = MAX;
	rank_start(&n, &c);
	port = rk_world_port(n.w);
	raw_connect(&f, port, 0);
	for (i = 0; i < MAX - 1; i++)
		hello_stranger(&old[i], port, NULL, &n);
	follower_hello(&f, &n, hello, welcome);
	for (i = 0; i < MAX - 1; i++)
		hello_stranger(&fresh[i], port, NULL, &n);
	ck_assert(PUMP_EVICTED(&n, MAX - 1));
	PUMP_FOR(20, &n);
	rk_world_stats(n.w, &st, sizeof(st));
	ck_assert_uint_eq(st.refused_evicted, MAX - 1);
	ck_assert_uint_eq(st.pending, MAX);
	for (i = 0; i < MAX - 1; i++) {
		raw_poll(&old[i]);
		raw_poll(&fresh[i]);
		ck_assert_msg(old[i].eof, "stale stranger %d is still in", i);
		ck_assert_msg(!fresh[i].eof, "fresh stranger %d was pushed out", i);
	}
	raw_poll(&f);
	ck_assert_msg(!f.eof, "the rank in its proof round trip was pushed out");
	follower_proof(&f, &n, hello, welcome);
	rk_world_stats(n.w, &st, sizeof(st));
	ck_assert_uint_eq(st.joined, 1);
	ck_assert_uint_eq(st.refused_evicted, MAX - 1);
	for (i = 0; i < MAX - 1; i++) {
		raw_close(&old[i]);
		raw_close(&fresh[i]);
	}
	raw_close(&f);
	rank_stop(&n);
}
END_TEST

/*
 * Per-address accounting: the real rank (127.0.0.1) is the stalest stranger,
 * but each newcomer (from 127.0.0.2 or .3) pushes out the stalest stranger of
 * the address that holds the most at the time: 127.0.0.2's until .3 holds
 * more, then .3's. The rank, alone on its address, stays in and joins.
 */
START_TEST(test_pending_by_address)
{
	enum { MAX = 8 };
	struct rank n = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	struct raw f, two[MAX + 2], three[4];
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN];
	int port, i;

	cfg_base(&c, 0, 2, 0);
	if (!g_auth)
		return;
	c.peer_timeout_ns = 5000 * MS;
	rk__config_tuning(&c)->handshake_timeout_ns = 30000 * MS;
	rk__config_tuning(&c)->max_pending = MAX;
	rank_start(&n, &c);
	port = rk_world_port(n.w);
	raw_connect(&f, port, 0);
	follower_hello(&f, &n, hello, welcome);
	for (i = 0; i < MAX - 1; i++)		/* full: .1 holds 1, .2 holds 7 */
		hello_stranger(&two[i], port, "127.0.0.2", &n);
	ck_assert_uint_eq((rk_world_stats(n.w, &st, sizeof(st)), st.refused_evicted), 0);
	for (i = 0; i < 3; i++)			/* .2 gives up 3: .2 holds 4, .3 holds 3 */
		hello_stranger(&three[i], port, "127.0.0.3", &n);
	ck_assert(PUMP_EVICTED(&n, 3));
	hello_stranger(&two[MAX - 1], port, "127.0.0.2", &n);	/* .2's own: still 4 */
	ck_assert(PUMP_EVICTED(&n, 4));
	hello_stranger(&three[3], port, "127.0.0.3", &n);	/* .2 3, .3 4 */
	ck_assert(PUMP_EVICTED(&n, 5));
	hello_stranger(&two[MAX], port, "127.0.0.2", &n);	/* .3 gives up its stalest */
	ck_assert(PUMP_EVICTED(&n, 6));
	PUMP_FOR(20, &n);
	rk_world_stats(n.w, &st, sizeof(st));
	ck_assert_uint_eq(st.refused_evicted, 6);
	ck_assert_uint_eq(st.pending, MAX);
	for (i = 0; i <= MAX; i++) {
		raw_poll(&two[i]);
		ck_assert_msg(two[i].eof == (i < 5), "127.0.0.2's stranger %d: %s", i,
			      two[i].eof ? "pushed out" : "still in");
	}
	for (i = 0; i < 4; i++) {
		raw_poll(&three[i]);
		ck_assert_msg(three[i].eof == (i == 0), "127.0.0.3's stranger %d: %s", i,
			      three[i].eof ? "pushed out" : "still in");
	}
	raw_poll(&f);
	ck_assert_msg(!f.eof, "the only stranger of its address was pushed out");
	follower_proof(&f, &n, hello, welcome);
	rk_world_stats(n.w, &st, sizeof(st));
	ck_assert_uint_eq(st.joined, 1);
	for (i = 0; i <= MAX; i++)
		raw_close(&two[i]);
	for (i = 0; i < 4; i++)
		raw_close(&three[i]);
	raw_close(&f);
	rank_stop(&n);
}
END_TEST

/*
 * A flood of refusals costs one log line, then one summary line per
 * RK_REFUSED_LOG_MS with the counts; the counters hold every one.
 */
START_TEST(test_refusal_log_rate)
{
	enum { FLOOD = 100 };
	struct rank n = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	unsigned int lines0;
	uint64_t t0, el;
	struct raw r;
	int port, i;

	cfg_base(&c, 0, 2, 0);
	rk__config_tuning(&c)->refused_log_ns = 300 * MS;
	rank_start(&n, &c);
	port = rk_world_port(n.w);
	lines0 = log_dropped();
	t0 = rk_test_now_ns();
	for (i = 0; i < FLOOD; i++) {
		raw_connect(&r, port, 0);
		raw_send(&r, "GET / HTTP/1.0\r\n\r\n", 18);
		raw_wait_eof(&r, RANKS(&n), 3000);
		raw_close(&r);
	}
	el = rk_test_now_ns() - t0;
	rk_world_stats(n.w, &st, sizeof(st));
	ck_assert_uint_eq(st.refused_magic, FLOOD);
	ck_assert_uint_ge(st.log_suppressed, 1);
	/* lines: one at the start of each interval, whatever the flood's pace
	 * (the intervals it spanned, however slowly the machine ran it) */
	ck_assert_uint_eq(log_dropped() - lines0 + st.log_suppressed, FLOOD);
	ck_assert_msg(log_dropped() - lines0 <= 1 + el / rk__config_tuning(&c)->refused_log_ns,
		      "%u lines for %llu ms of refusals", log_dropped() - lines0,
		      (unsigned long long)(el / MS));
	ck_assert(PUMP_UNTIL(3000, log_summaries() >= 1, &n));
	rank_stop(&n);
}
END_TEST

/* A transport class registered by scheme carries the world: world.c names none. */
static unsigned int g_dummy_connects, g_dummy_accepts;

static int dummy_connect(struct rk_loop *loop, const struct rk__addr *a, void *ctx,
			 const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	g_dummy_connects++;
	ck_assert_ptr_eq(ctx, &g_dummy_connects);
	return rk__tcp_connect(loop, a, oops, owner, out);
}

static int dummy_from_fd(struct rk_loop *loop, int fd, void *ctx,
			 const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	g_dummy_accepts++;
	ck_assert_ptr_eq(ctx, &g_dummy_connects);
	return rk__tcp_link_from_fd(loop, fd, oops, owner, RK_LINK_ACCEPTED, out);
}

static unsigned int g_dummy_prepared, g_dummy_released;

static int dummy_prepare(struct rk_loop *loop, const struct rk__addr *a, void **ctx)
{
	(void)loop;
	ck_assert_str_eq(a->scheme, "dummy");
	g_dummy_prepared++;
	*ctx = &g_dummy_connects;
	return 0;
}

static void dummy_release(void *ctx)
{
	ck_assert_ptr_eq(ctx, &g_dummy_connects);
	g_dummy_released++;
}

static const struct rk__transport_class dummy_class = {
	.scheme = "dummy",
	.prepare = dummy_prepare,
	.release = dummy_release,
	.connect = dummy_connect,
	.from_fd = dummy_from_fd,
};

START_TEST(test_transport_class)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk__addr a;

	ck_assert_int_eq(rk__addr_parse("dummy://127.0.0.1:1", &a), -RK_ECONFIG);
	ck_assert_int_eq(rk__transport_register(&dummy_class), 0);
	ck_assert_int_eq(rk__transport_register(&dummy_class), -EEXIST);
	ck_assert_ptr_eq(rk__transport_find("dummy"), &dummy_class);
	ck_assert_ptr_nonnull(rk__transport_find("tcp"));
	ck_assert_ptr_nonnull(rk__transport_find("roce"));
	ck_assert_int_eq(rk__addr_parse("dummy://127.0.0.1:1", &a), 0);

	cfg_base(&c, 0, 2, rk_test_free_port());
	snprintf(c.leader, sizeof(c.leader), "dummy://127.0.0.1:%d", rk_test_free_port());
	rank_start(&n[0], &c);
	c.rank = 1;
	snprintf(c.leader, sizeof(c.leader), "dummy://127.0.0.1:%d", rk_world_port(n[0].w));
	rank_start(&n[1], &c);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[1].ready, &n[0], &n[1]));
	ping_pong(&n[0], &n[1]);
	ck_assert_uint_ge(g_dummy_connects, 1);
	ck_assert_uint_ge(g_dummy_accepts, 1);
	ck_assert_uint_eq(g_dummy_prepared, 2);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
	ck_assert_uint_eq(g_dummy_released, 2);
	rk__transport_unregister(&dummy_class);
	ck_assert_ptr_null(rk__transport_find("dummy"));
}
END_TEST

static Suite *world_strangers_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc;

	tc = world_tcase(s, "strangers");
	tcase_add_loop_test(tc, test_garbage, 0, ARRAY_SIZE(garbage));
	tcase_add_test(tc, test_pending_flood);

	tc = world_tcase(s, "trust");
	tcase_add_loop_test(tc, test_stranger, 0, ARRAY_SIZE(strangers));
	tcase_add_test(tc, test_stranger_holds_no_rank);
	tcase_add_loop_test(tc, test_follower_refuses_fake_leader, 0, 2);
	tcase_add_loop_test(tc, test_error_rank_checked, 0, 3);
	tcase_add_loop_test(tc, test_stranger_big_frame, 0, ARRAY_SIZE(big_frames));
	tcase_add_test(tc, test_pending_evict);
	tcase_add_test(tc, test_pending_round_trip);
	tcase_add_test(tc, test_pending_by_address);
	tcase_add_test(tc, test_refusal_log_rate);
	tcase_add_test(tc, test_transport_class);
	return s;
}

int main(void)
{
	return rk_check_run(world_strangers_suite());
}
