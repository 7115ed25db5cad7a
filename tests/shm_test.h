/* SPDX-License-Identifier: MIT */
/*
 * What the same-host suites (check_shm, check_shm_bcast, check_shm_lane,
 * check_shm_wake) share: their ranks' configuration (links allowed onto shared
 * memory), a world started in the test's thread and settled on its transports,
 * numbered frames, and what the transport logged. Never installed.
 *
 * Most tests run every rank's loop in the test's own thread, one NOWAIT
 * iteration each in turn, so the test decides who runs when (a follower that
 * is not pumped is a reader that stopped reading). Broken peers are played
 * through rk__shm_test_poke(), which writes into a link's rings what a buggy
 * or hostile peer could. Every test asserts behaviour (order, counts, which
 * error and which path), never a time. CHECK_SHM_VERBOSE=1 prints rankrt's
 * log lines.
 */
#ifndef RK_SHM_TEST_H
#define RK_SHM_TEST_H

#include "link_int.h"
#include "shm_int.h"
#include "rank_test.h"

#define TIMEOUT_S	60
#define SESSION		0x73686d0000000001ull
#define SECRET		"check_shm: the job's secret, 32 bytes or more"
#define MAXN		5

static uint64_t g_tx_limit;		/* the links' send bound, 0: the default */
static bool g_lane_off;			/* RK_LANE=0 in the ranks made now */

/* Checked fixture: runs in the test's process, creates no ring. */
static inline void shm_setup(void)
{
	g_tx_limit = 0;
	g_rank_keep_data = false;	/* hundreds of megabytes go by */
	log_capture_start("CHECK_SHM_VERBOSE");
	rk__shm_test_mask(0);
}

/* Its teardown: the log back to stderr, the test pokes' mask cleared. */
static inline void shm_teardown(void)
{
	log_capture_stop();
	rk__shm_test_mask(0);
}

/* A TCase of the shm suites: their timeout, the log captured. */
static inline TCase *shm_tcase(Suite *s, const char *name)
{
	return rk_tcase(s, name, TIMEOUT_S, shm_setup, shm_teardown);
}

/* "stays on TCP" warnings */
static inline unsigned int log_stays_tcp(void)
{
	return log_count(RK_LOG_WARN, "stays on TCP");
}

/* Links that said they went onto shared memory with eventfd, or futex, wake-ups. */
static inline unsigned int log_eventfd_links(void)
{
	return log_count(-1, "on shared memory (eventfd");
}

static inline unsigned int log_futex_links(void)
{
	return log_count(-1, "on shared memory (futex");
}

/* ---- a world in this thread ---------------------------------------------------------- */

/* A rank of the shm suites: a follower's link moves to shared memory (RK_SHM=auto). */
static inline void cfg_base(struct rk_config *c, int rank, int size)
{
	rk_config_init(c);
	c->rank = rank;
	c->world_size = size;
	snprintf(c->leader, sizeof(c->leader), "127.0.0.1:0");
	c->session_id = SESSION;
	rk__config_tuning(c)->heartbeat_ns = 100 * MS;
	c->peer_timeout_ns = 10000 * MS;	/* a stalled test thread is not a death */
	c->connect_timeout_ns = 10000 * MS;
	rk__config_tuning(c)->handshake_timeout_ns = 10000 * MS;
	c->wait.spin_ns = 1 * MS;		/* the machine is shared: block soon */
	c->log_level = RK_LOG_INFO;
	c->shm = RK_SHM_AUTO;
	rk__config_tuning(c)->lane = !g_lane_off;
	if (g_tx_limit)
		c->tx_limit = g_tx_limit;
	if (rk__auth_available())
		ck_assert_int_eq(rk_config_set_secret(c, SECRET, strlen(SECRET)), 0);
}

/* Whether @a's link to @peer is on shared memory now, or on TCP. */
static inline bool on_shm(struct rank *a, int peer)
{
	return !strcmp(rank_transport(a, peer), "shm");
}

static inline bool on_tcp(struct rank *a, int peer)
{
	return !strcmp(rank_transport(a, peer), "tcp");
}

/*
 * A world of @n ranks in this thread; follower i gets @shm[i] (NULL: auto).
 * Pumps until every link is up and, where both ends allow it, on shared
 * memory. The leader is r[0].
 */
static inline void start(struct rank *r, int n, const enum rk_shm_mode *shm)
{
	struct rank *rs[MAXN] = { 0 };
	struct rk_config c;
	uint64_t dl = rk_test_deadline_ms(10000);
	bool all;
	int i, port;

	ck_assert_int_le(n, MAXN);
	cfg_base(&c, 0, n);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	port = rk_world_port(r[0].w);
	rs[0] = &r[0];
	for (i = 1; i < n; i++) {
		cfg_base(&c, i, n);
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
		if (shm)
			c.shm = shm[i];
		ck_assert_int_eq(rank_create(&r[i], &c), 0);
		rs[i] = &r[i];
	}
	for (;;) {
		all = r[0].ready > 0;
		for (i = 1; i < n; i++) {
			bool want = !shm || shm[i] != RK_SHM_OFF;

			all = all && r[i].ready && (want ? on_shm(&r[0], i) && on_shm(&r[i], 0) :
						   on_tcp(&r[0], i) && on_tcp(&r[i], 0));
		}
		if (all)
			break;
		ck_assert_msg(rk_test_now_ns() < dl, "world of %d not settled after 10 s", n);
		pump(rs, (size_t)n);
	}
}

/* Stop the ranks of a world start() made, followers first. */
static inline void stop(struct rank *r, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--)
		rank_stop(&r[i]);
}

/*
 * A USER frame of @len data bytes, @seq in its first four, to rank @to (-1:
 * a broadcast). Return: rk_world_send_user()'s or rk_world_broadcast()'s.
 */
static inline int send_seq(struct rank *r, int to, uint32_t tag, uint32_t seq, size_t len)
{
	uint8_t buf[4096];

	ck_assert_uint_le(len, sizeof(buf));
	memset(buf, (int)(seq & 0xff), len);
	memcpy(buf, &seq, 4);
	if (to < 0) {
		uint8_t f[4096 + 8];
		int m = rk_wire_encode_user(f, sizeof(f), tag, buf, (uint32_t)len);

		ck_assert_int_gt(m, 0);
		return rk_world_broadcast(r->w, RK_FRAME_USER, 0, f, (uint32_t)m);
	}
	return rk_world_send_user(r->w, to, tag, buf, (uint32_t)len);
}

/* @r's world counters, and those of its link to @peer (which must exist). */
static inline void world_stats(struct rank *r, struct rk_world_stats *st)
{
	rk_world_stats(r->w, st, sizeof(*st));
}

static inline void link_stats(struct rank *r, int peer, struct rk_link_stats *st)
{
	struct rk_link *l = rk_world_link(r->w, peer);

	ck_assert_ptr_nonnull(l);
	rk_link_stats(l, st, sizeof(*st));
}

#endif /* RK_SHM_TEST_H */
