// SPDX-License-Identifier: MIT
/*
 * check_shm: same-host links (runtime/shm*.c). Two or more ranks of one host
 * move their tcp:// links to shared-memory rings after the handshake; the
 * leader writes a broadcast once for every same-host follower.
 *
 * Most tests run every rank's loop in the test's own thread, one NOWAIT
 * iteration each in turn, so the test decides who runs when (a follower that
 * is not pumped is a reader that stopped reading). The wake tests give each
 * rank a thread of its own and blocking waits; the death tests fork followers
 * that build their loop after the fork. Broken peers are played through
 * rk__shm_test_poke(), which writes into a link's rings what a buggy or
 * hostile peer could. Every test asserts behaviour (order, counts, which error
 * and which path), never a time.
 */
#define _GNU_SOURCE
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "shm_int.h"
#include "rk_sched.h"
#include "rk_test.h"

#define TIMEOUT_S	60
#define SESSION		0x73686d0000000001ull
#define SECRET		"check_shm: the job's secret, 32 bytes or more"
#define MAXN		5
#define MAXRX		4096

enum { TAG_SEQ = 1, TAG_PING, TAG_PONG, TAG_BIG, TAG_QUIT };

/* ---- log capture: what the transport said, and how often ------------------------- */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_stays_tcp;	/* "stays on TCP" warnings */
static unsigned int g_eventfd_lines;	/* "on shared memory (eventfd wake-ups" */
static unsigned int g_futex_lines;
static uint64_t g_tx_limit;		/* the links' send bound, 0: the default */
static bool g_lane_off;			/* RK_LANE=0 in the ranks made now */

static void log_capture(int level, int rank, const char *msg, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_log_lock);
	if (level == RK_LOG_WARN && strstr(msg, "stays on TCP"))
		g_stays_tcp++;
	if (strstr(msg, "on shared memory (eventfd"))
		g_eventfd_lines++;
	if (strstr(msg, "on shared memory (futex"))
		g_futex_lines++;
	pthread_mutex_unlock(&g_log_lock);
	if (getenv("CHECK_SHM_VERBOSE"))
		fprintf(stderr, "[r%d] %s\n", rank, msg);
}

static void log_setup(void)
{
	g_stays_tcp = g_eventfd_lines = g_futex_lines = 0;
	g_tx_limit = 0;
	rk_log_set_handler(log_capture, NULL);
	rk__log_set_level(RK_LOG_INFO);
	rk__shm_test_mask(0);
}

static void log_teardown(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
	rk__shm_test_mask(0);
}

static unsigned int logged(unsigned int *counter)
{
	unsigned int v;

	pthread_mutex_lock(&g_log_lock);
	v = *counter;
	pthread_mutex_unlock(&g_log_lock);
	return v;
}

/* ---- a rank ---------------------------------------------------------------------- */

struct msg {
	int peer;
	uint32_t tag;
	uint32_t seq;		/* the first 4 data bytes, when there are */
	uint32_t len;
};

struct rank {
	struct rk_loop *loop;
	struct rk_world *w;
	int rank;
	int ready;
	struct msg rx[MAXRX];
	unsigned int nrx;
	uint64_t rx_bytes;	/* USER data received, all of it */
	uint64_t rx_hash;	/* FNV-1a over the data of TAG_BIG frames, in order */
	int nerr;
	int err_rank, err;	/* the first peer_error */
	bool echo;		/* answer TAG_PING with TAG_PONG */
	bool quit;
	uint32_t seq_next;	/* TAG_SEQ frames: the next one expected */
	unsigned int disorder;	/* ...and how many came out of order */
	uint64_t nseq;
	unsigned int npong;
};

static void on_ready(struct rk_world *w, void *arg)
{
	(void)w;
	((struct rank *)arg)->ready++;
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct rank *r = arg;
	struct rk_wire_user u;
	struct msg *m;

	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u))
		return RK_IDLE;
	r->rx_bytes += u.len;
	if (u.tag == TAG_BIG)
		r->rx_hash = rk__fnv1a64(u.data, u.len) ^ (r->rx_hash * 31);
	if (u.tag == TAG_PING && r->echo)
		rk_world_send_user(w, peer, TAG_PONG, u.data, u.len);
	if (u.tag == TAG_SEQ && u.len >= 4) {
		uint32_t seq;

		memcpy(&seq, u.data, 4);
		r->disorder += seq != r->seq_next;
		r->seq_next = seq + 1;
		r->nseq++;
	}
	if (u.tag == TAG_QUIT) {
		r->quit = true;
		rk_loop_stop(r->loop);
	}
	if (r->nrx < MAXRX) {
		m = &r->rx[r->nrx++];
		m->peer = peer;
		m->tag = u.tag;
		m->len = u.len;
		m->seq = 0;
		if (u.len >= 4)
			memcpy(&m->seq, u.data, 4);
	}
	if (u.tag == TAG_PONG) {
		r->npong++;
		rk_loop_stop(r->loop);
	}
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct rank *r = arg;

	(void)w;
	if (!r->nerr++) {
		r->err_rank = rank;
		r->err = err;
	}
	rk_loop_stop(r->loop);	/* a thread's run ends on it */
}

static const struct rk_world_ops ops = {
	.ready = on_ready,
	.frame = on_frame,
	.peer_error = on_peer_error,
};

static void cfg_base(struct rk_config *c, int rank, int size)
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

/* Loop and world of @r from @c; a leader on "…:0" takes a free port. */
static int rank_create(struct rank *r, const struct rk_config *tmpl)
{
	struct rk_config c = *tmpl;
	int ret, port, tries = 0;

	r->rank = c.rank;
	for (;;) {
		char *zero = strstr(c.leader, ":0");

		if (c.rank == 0 && zero && !zero[2]) {
			port = rk_test_free_port();
			if (port < 0)
				return port;
			snprintf(zero, sizeof(c.leader) - (size_t)(zero - c.leader), ":%u",
				 (unsigned int)port & 0xffff);
		}
		ret = rk_loop_create(&c, &r->loop);
		if (ret)
			return ret;
		ret = rk_world_create(r->loop, &ops, r, &r->w);
		if (!ret)
			return 0;
		rk_loop_destroy(r->loop);
		r->loop = NULL;
		if (c.rank != 0 || ret != -EADDRINUSE || ++tries == 10)
			return ret;
		c = *tmpl;
	}
}

static void rank_stop(struct rank *r)
{
	if (r->w)
		ck_assert_int_eq(rk_world_destroy(r->w), 0);
	r->w = NULL;
	if (r->loop)
		ck_assert_int_eq(rk_loop_destroy(r->loop), 0);
	r->loop = NULL;
}

/* One NOWAIT iteration of each listed rank that runs; a nap when none did anything. */
static void pump(struct rank **rs, size_t n)
{
	struct rk_loop_stats a, b;
	uint64_t ev = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!rs[i] || !rs[i]->loop)
			continue;
		rk_loop_stats(rs[i]->loop, &a, sizeof(a));
		rk_loop_run(rs[i]->loop, RK_RUN_NOWAIT);
		rk_loop_stats(rs[i]->loop, &b, sizeof(b));
		ev += b.events - a.events;
	}
	if (!ev)
		usleep(50);
}

#define PUMP_UNTIL(ms, cond, ...)						\
	({									\
		struct rank *rs_[] = { __VA_ARGS__ };				\
		uint64_t dl_ = rk_test_deadline_ms(ms);		\
		while (!(cond) && rk_test_now_ns() < dl_)			\
			pump(rs_, ARRAY_SIZE(rs_));				\
		(bool)(cond);							\
	})

static bool on_shm(struct rank *a, int peer)
{
	struct rk_link *l = rk_world_link(a->w, peer);

	return l && !strcmp(rk_link_transport(l), "shm");
}

static bool on_tcp(struct rank *a, int peer)
{
	struct rk_link *l = rk_world_link(a->w, peer);

	return l && !strcmp(rk_link_transport(l), "tcp");
}

/*
 * A world of @n ranks in this thread; follower i gets @shm[i] (NULL: auto).
 * Pumps until every link is up and, where both ends allow it, on shared
 * memory. The leader is r[0].
 */
static void start(struct rank *r, int n, const enum rk_shm_mode *shm)
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

static void stop(struct rank *r, int n)
{
	int i;

	for (i = n - 1; i >= 0; i--)
		rank_stop(&r[i]);
}

static int send_seq(struct rank *r, int to, uint32_t tag, uint32_t seq, size_t len)
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

static void world_stats(struct rank *r, struct rk_world_stats *st)
{
	rk_world_stats(r->w, st, sizeof(*st));
}

static void link_stats(struct rank *r, int peer, struct rk_link_stats *st)
{
	struct rk_link *l = rk_world_link(r->w, peer);

	ck_assert_ptr_nonnull(l);
	rk_link_stats(l, st, sizeof(*st));
}

/* ---- the upgrade --------------------------------------------------------------- */

/* Two ranks of one host: the link moves, frames keep their order both ways. */
START_TEST(test_upgrade)
{
	struct rank r[2] = { 0 };
	struct rk_world_stats ws;
	struct rk_link_stats ls;
	uint32_t i;

	start(r, 2, NULL);
	world_stats(&r[0], &ws);
	ck_assert_uint_eq(ws.shm_links, 1);
	ck_assert_uint_eq(ws.shm_fallback, 0);
	world_stats(&r[1], &ws);
	ck_assert_uint_eq(ws.shm_links, 1);
	for (i = 0; i < 1000; i++) {
		ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, i, 16 + i % 200), 0);
		ck_assert_int_eq(send_seq(&r[1], 0, TAG_SEQ, i, 16 + i % 300), 0);
		if (i % 100 == 99)
			PUMP_UNTIL(1, false, &r[0], &r[1]);
	}
	ck_assert(PUMP_UNTIL(10000, r[0].nrx == 1000 && r[1].nrx == 1000, &r[0], &r[1]));
	for (i = 0; i < 1000; i++) {
		ck_assert_uint_eq(r[1].rx[i].seq, i);
		ck_assert_uint_eq(r[1].rx[i].len, 16 + i % 200);
		ck_assert_uint_eq(r[0].rx[i].seq, i);
		ck_assert_uint_eq(r[0].rx[i].len, 16 + i % 300);
	}
	link_stats(&r[0], 1, &ls);
	ck_assert_uint_eq(ls.shm_ring_full, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/* RK_SHM=off on either end keeps the link on TCP, and says nothing of it. */
START_TEST(test_off)
{
	static const enum rk_shm_mode off[2] = { RK_SHM_AUTO, RK_SHM_OFF };
	struct rank r[2] = { 0 };
	struct rk_world_stats ws;

	start(r, 2, off);
	ck_assert(PUMP_UNTIL(50, false, &r[0], &r[1]) || true);
	ck_assert(on_tcp(&r[0], 1) && on_tcp(&r[1], 0));
	world_stats(&r[0], &ws);
	ck_assert_uint_eq(ws.shm_links + ws.shm_remote + ws.shm_fallback, 0);
	ck_assert_uint_eq(logged(&g_stays_tcp), 0);
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 7, 8), 0);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1, &r[0], &r[1]));
	stop(r, 2);
}
END_TEST

/* A kernel without memfd: TCP, one log line, a counter; frames still flow. */
START_TEST(test_fallback)
{
	struct rank r[3] = { 0 };
	struct rk_world_stats ws;
	struct rank *rs[3] = { &r[0], &r[1], &r[2] };
	struct rk_config c;
	int i, port;

	rk__shm_test_mask(RK__SHM_F_MEMFD);
	cfg_base(&c, 0, 3);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	port = rk_world_port(r[0].w);
	for (i = 1; i < 3; i++) {
		cfg_base(&c, i, 3);
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
		ck_assert_int_eq(rank_create(&r[i], &c), 0);
	}
	ck_assert(PUMP_UNTIL(10000, r[0].ready && r[1].ready && r[2].ready, rs[0], rs[1], rs[2]));
	world_stats(&r[0], &ws);
	ck_assert(PUMP_UNTIL(5000, (world_stats(&r[0], &ws), ws.shm_fallback == 2), &r[0], &r[1],
			     &r[2]));
	ck_assert_uint_eq(ws.shm_links, 0);
	ck_assert(on_tcp(&r[0], 1) && on_tcp(&r[0], 2) && on_tcp(&r[1], 0));
	/* the leader's one line (its second link is only counted); each follower's,
	 * once its leader's answer arrived (a follower reads it in a later pump) */
	ck_assert(PUMP_UNTIL(5000, logged(&g_stays_tcp) >= 3, &r[0], &r[1], &r[2]));
	ck_assert_uint_eq(logged(&g_stays_tcp), 3);
	ck_assert_int_eq(send_seq(&r[0], -1, TAG_SEQ, 1, 8), 0);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1 && r[2].nrx == 1, &r[0], &r[1], &r[2]));
	ck_assert_int_eq(r[0].nerr + r[1].nerr + r[2].nerr, 0);
	stop(r, 3);
}
END_TEST

/* No futex waits on this kernel: the rings still work, with eventfd wake-ups. */
START_TEST(test_eventfd_path)
{
	struct rank r[2] = { 0 };

	rk__shm_test_mask(_i ? RK__SHM_F_FUTEX : 0);
	start(r, 2, NULL);
	if (_i)
		ck_assert_uint_eq(logged(&g_eventfd_lines), 2);
	else if (logged(&g_futex_lines) != 2)
		ck_assert_uint_eq(logged(&g_eventfd_lines), 2);	/* a kernel before 6.7 */
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 1, 8), 0);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1, &r[0], &r[1]));
	stop(r, 2);
}
END_TEST

/* shm:// requires it: a follower that will not is refused with RK_ENOSHM. */
START_TEST(test_required)
{
	struct rank r[2] = { 0 };
	struct rk_config c;
	char addr[64];

	cfg_base(&c, 0, 2);
	snprintf(c.leader, sizeof(c.leader), "shm://127.0.0.1:0");
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	snprintf(addr, sizeof(addr), "127.0.0.1:%d", rk_world_port(r[0].w));
	cfg_base(&c, 1, 2);
	snprintf(c.leader, sizeof(c.leader), "%s", addr);
	c.shm = _i ? RK_SHM_AUTO : RK_SHM_OFF;	/* 1: it will, through shm:// too */
	if (_i)
		snprintf(c.leader, sizeof(c.leader), "shm://%s", addr);
	ck_assert_int_eq(rank_create(&r[1], &c), 0);
	if (_i) {
		ck_assert(PUMP_UNTIL(10000, on_shm(&r[0], 1) && on_shm(&r[1], 0), &r[0], &r[1]));
		ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	} else {
		ck_assert(PUMP_UNTIL(10000, r[0].nerr && r[1].nerr, &r[0], &r[1]));
		ck_assert_int_eq(r[0].err, -RK_ENOSHM);
		ck_assert_int_eq(r[1].err, -RK_ENOSHM);
	}
	stop(r, 2);
}
END_TEST

/* No secret and not loopback (RK_AUTH=off): no stranger is offered memory. */
START_TEST(test_unauthenticated)
{
	struct ifaddrs *ifa, *i;
	char host[INET_ADDRSTRLEN] = "";
	struct rank r[2] = { 0 };
	struct rk_config c;

	ck_assert_int_eq(getifaddrs(&ifa), 0);
	for (i = ifa; i && !host[0]; i = i->ifa_next) {
		struct sockaddr_in *sin = (struct sockaddr_in *)i->ifa_addr;

		if (sin && sin->sin_family == AF_INET &&
		    (ntohl(sin->sin_addr.s_addr) >> 24) != 127)
			inet_ntop(AF_INET, &sin->sin_addr, host, sizeof(host));
	}
	freeifaddrs(ifa);
	if (!host[0])
		return;		/* no address but loopback: nothing to show here */
	cfg_base(&c, 0, 2);
	c.secret_len = 0;
	c.auth = RK_AUTH_OFF;
	snprintf(c.leader, sizeof(c.leader), "%s:0", host);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	cfg_base(&c, 1, 2);
	c.secret_len = 0;
	c.auth = RK_AUTH_OFF;
	snprintf(c.leader, sizeof(c.leader), "%s:%d", host, rk_world_port(r[0].w));
	ck_assert_int_eq(rank_create(&r[1], &c), 0);
	ck_assert(PUMP_UNTIL(10000, r[0].ready && r[1].ready, &r[0], &r[1]));
	ck_assert(PUMP_UNTIL(200, false, &r[0], &r[1]) || true);
	ck_assert(on_tcp(&r[0], 1) && on_tcp(&r[1], 0));
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 1, 8), 0);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1, &r[0], &r[1]));
	stop(r, 2);
}
END_TEST

/*
 * The shm class takes over the tcp class's links (its .over): a world of
 * either scheme has its links made by the tcp class and runs the shm class's
 * hooks on them, which must move every link of an shm:// world (or under
 * RK_SHM=on) and may move a tcp:// world's.
 */
START_TEST(test_class)
{
	static const struct {
		const char *addr;
		enum rk_shm_mode shm;
		bool required;
	} v[] = {
		{ "tcp://127.0.0.1:1", RK_SHM_AUTO, false },
		{ "tcp://127.0.0.1:1", RK_SHM_ON, true },
		{ "shm://127.0.0.1:1", RK_SHM_AUTO, true },
	};
	struct rk__transport t;
	struct rk_loop *loop;
	struct rk_config c;
	struct rk__addr a;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(v); i++) {
		cfg_base(&c, 1, 2);
		c.shm = v[i].shm;
		ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
		ck_assert_int_eq(rk__addr_parse(v[i].addr, &a), 0);
		ck_assert_int_eq(rk__transport_open(loop, &a, &t), 0);
		ck_assert_ptr_eq(t.make, rk__transport_find("tcp"));
		ck_assert_ptr_eq(t.run, rk__transport_find("shm"));
		ck_assert_ptr_eq(t.run, &rk__shm_class);
		ck_assert(((struct rk__shm *)t.run_ctx)->required == v[i].required);
		rk__transport_close(&t);
		ck_assert_ptr_null(t.run);
		ck_assert_int_eq(rk_loop_destroy(loop), 0);
	}
}
END_TEST

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
	ck_assert_int_eq(r[0].err_rank, 2);
	ck_assert_int_eq(r[0].err, -RK_ESLOWPEER);
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
	ck_assert_int_eq(r[1].err_rank, 2);
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
		ck_assert_uint_eq(r[1].rx[i].len, i % (sizeof(buf) + 1));
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
		ck_assert_msg(!r[1].nerr, "frame %u: %s", seq, rk_errname(r[1].err));
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
		ck_assert_msg(!r[1].nerr, "round %u: %s", k, rk_errname(r[1].err));
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
	ck_assert_msg(!r[1].nerr, "draining: %s", rk_errname(r[1].err));
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

/* ---- a peer's memory is not trusted ------------------------------------------------ */

static const struct poke_case {
	const char *name;
	bool from_leader;	/* who writes the bad bytes */
	enum rk__shm_poke what;
	int frame;		/* for CHUNK/BCAST/LANE: 1 bad magic, 2 bad payload CRC,
				 * 3 not a USER frame, 4 a sequence number ahead */
	int expect;		/* the reader's error, which its world reports */
} pokes[] = {
	{ "link record longer than a chunk", true, RK__SHM_POKE_OVERSIZE, 0, -RK_ESHMRING },
	{ "follower's record longer than a chunk", false, RK__SHM_POKE_OVERSIZE, 0, -RK_ESHMRING },
	{ "record with its zero field set", true, RK__SHM_POKE_RESERVED, 0, -RK_ESHMRING },
	{ "leader's record with a bad mark", true, RK__SHM_POKE_MARK, 0, -RK_ESHMRING },
	{ "follower's record with a mark", false, RK__SHM_POKE_MARK, 0, -RK_ESHMRING },
	{ "garbage in a chunk", false, RK__SHM_POKE_CHUNK, 1, -RK_EMAGIC },
	{ "bad payload CRC in a chunk", true, RK__SHM_POKE_CHUNK, 2, -RK_EPAYCRC },
	{ "broadcast position past the tail", false, RK__SHM_POKE_BHEAD, 0, -RK_ESHMRING },
	{ "garbage broadcast record", true, RK__SHM_POKE_BCAST, 1, -RK_EMAGIC },
	{ "broadcast frame with a bad CRC", true, RK__SHM_POKE_BCAST, 2, -RK_EPAYCRC },
	{ "lane record longer than a lane frame", false, RK__SHM_POKE_LANE, 0, -RK_ESHMRING },
	{ "garbage on the lane", false, RK__SHM_POKE_LANE, 1, -RK_EMAGIC },
	{ "lane frame with a bad CRC", false, RK__SHM_POKE_LANE, 2, -RK_EPAYCRC },
	{ "lane frame that is not USER", false, RK__SHM_POKE_LANE, 3, -RK_ESHMRING },
	{ "lane frame out of sequence", false, RK__SHM_POKE_LANE, 4, -RK_ESEQ },
};

START_TEST(test_poke)
{
	const struct poke_case *pc = &pokes[_i];
	struct rank r[2] = { 0 };
	struct rank *writer, *reader;
	uint8_t f[64];
	int n = 0;

	start(r, 2, NULL);
	writer = pc->from_leader ? &r[0] : &r[1];
	reader = pc->from_leader ? &r[1] : &r[0];
	if (pc->frame) {
		struct rk_wire_round_done d = { .round_id = 1, .status = -EIO };

		if (pc->frame == 3)	/* a well-formed frame of another type */
			n = rk_wire_encode_round_done(f + RK_WIRE_HDR_LEN,
						      sizeof(f) - RK_WIRE_HDR_LEN, &d);
		else
			n = rk_wire_encode_user(f + RK_WIRE_HDR_LEN, sizeof(f) - RK_WIRE_HDR_LEN,
						TAG_SEQ, "payload!", 8);
		ck_assert_int_gt(n, 0);
		ck_assert_int_eq(rk_wire_encode_hdr(f, pc->frame == 3 ? RK_FRAME_ROUND_DONE :
						    RK_FRAME_USER, 0, (uint32_t)writer->rank,
						    pc->frame == 4 ? 5 : 0, f + RK_WIRE_HDR_LEN,
						    (uint32_t)n), 32);
		n += RK_WIRE_HDR_LEN;
		if (pc->frame == 1)
			f[0] = 'X';
		else if (pc->frame == 2)
			f[n - 1] ^= 1;
	}
	ck_assert_int_eq(rk__shm_test_poke(rk_world_link(writer->w, pc->from_leader ? 1 : 0),
					   pc->what, f, (size_t)n), 0);
	if (pc->what == RK__SHM_POKE_BHEAD)	/* the leader reads it when it next broadcasts */
		ck_assert_int_eq(send_seq(&r[0], -1, TAG_SEQ, 1, 8), -ENOTCONN);
	ck_assert(PUMP_UNTIL(5000, reader->nerr && writer->nerr, &r[0], &r[1]));
	ck_assert_msg(reader->err == pc->expect, "%s: the reader failed with %s", pc->name,
		      rk_errname(reader->err));
	/* the reader tells the writer why: its world reports the same code */
	ck_assert_msg(writer->err == pc->expect, "%s: the writer heard %s", pc->name,
		      rk_errname(writer->err));
	ck_assert_uint_eq(reader->nrx, 0);	/* nothing of it reached the application */
	stop(r, 2);
}
END_TEST

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

/* ---- waking only a sleeper ----------------------------------------------------- */

struct trank {
	struct rank r;
	atomic_int *port;
	int rank;
	enum rk_wait_mode mode;
	unsigned int rounds;
	int line, err;
};

static void *ping_thread(void *arg)
{
	struct trank *t = arg;
	struct rank *r = &t->r;
	struct rk_config c;
	uint64_t dl = rk_test_deadline_ms(30000);
	unsigned int i;
	int ret;

	cfg_base(&c, t->rank, 2);
	c.wait.mode = t->mode;
	/* no timer for a minute: a blocked rank wakes only when the other rings
	 * its bell, so a lost wake-up hangs the test (its timeout fails it) */
	rk__config_tuning(&c)->heartbeat_ns = 60000 * MS;
	c.peer_timeout_ns = 120000 * MS;
	r->echo = t->rank == 1;
	r->rank = t->rank;
	ret = rk_test_join(&c, t->port, dl, &ops, r, &r->loop, &r->w);
	if (!ret)
		ret = rk_world_wait_ready(r->w);
	if (ret) {
		t->line = __LINE__;
		t->err = ret;
		return NULL;
	}
	while (!on_shm(r, t->rank ? 0 : 1) && rk_test_now_ns() < dl)
		rk_loop_run(r->loop, RK_RUN_ONCE);
	if (t->rank == 1) {
		while (!r->quit && !r->nerr && rk_test_now_ns() < dl)
			rk_loop_run(r->loop, RK_RUN_DEFAULT);	/* a QUIT stops it */
	} else {
		for (i = 0; i < t->rounds && !r->nerr && rk_test_now_ns() < dl; i++) {
			ret = send_seq(r, 1, TAG_PING, i, 8);
			while (!ret && !r->nerr && r->nrx == i && rk_test_now_ns() < dl)
				rk_loop_run(r->loop, RK_RUN_DEFAULT);	/* a PONG stops it */
			if (ret || r->nrx != i + 1 || r->rx[i].seq != i) {
				t->line = __LINE__;
				t->err = ret ? ret : -EPROTO;
				return NULL;
			}
		}
		send_seq(r, 1, TAG_QUIT, 0, 4);
		rk_loop_run(r->loop, RK_RUN_NOWAIT);
	}
	if (r->nerr && t->rank == 0) {
		t->line = __LINE__;
		t->err = r->err;
	}
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
	struct trank t[2] = { 0 };
	struct rk_link_stats l0, l1;
	pthread_t th[2];
	atomic_int port = 0;
	int i;

	rk__shm_test_mask(v[_i].mask);
	for (i = 0; i < 2; i++) {
		t[i].port = &port;
		t[i].rank = i;
		t[i].mode = v[_i].mode;
		t[i].rounds = 2000;
		ck_assert_int_eq(pthread_create(&th[i], NULL, ping_thread, &t[i]), 0);
	}
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (i = 0; i < 2; i++)
		ck_assert_msg(!t[i].line, "rank %d failed at line %d: %s", i, t[i].line,
			      rk_errname(t[i].err));
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
	if (reply)
		ck_assert_uint_gt(b.tx_frames, a.tx_frames);	/* its flush told it */
	else
		ck_assert_uint_eq(b.tx_frames, a.tx_frames);
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

/* ---- a same-host peer's death ---------------------------------------------------- */

/* The follower in a child process: up on shared memory, then it dies. With
 * @hold (a pipe), a grandchild keeps its sockets open, so only its pidfd tells;
 * the grandchild's pid goes down the pipe for the test to kill. */
static int child_main(int port, int hold)
{
	struct rank r = { 0 };
	struct rk_config c;
	uint64_t dl = rk_test_deadline_ms(20000);
	pid_t g;

	cfg_base(&c, 1, 2);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	if (rank_create(&r, &c) || rk_world_wait_ready(r.w))
		return 2;
	while (!on_shm(&r, 0) && rk_test_now_ns() < dl)
		rk_loop_run(r.loop, RK_RUN_ONCE);
	if (!on_shm(&r, 0))
		return 3;
	send_seq(&r, 0, TAG_SEQ, 1, 8);
	rk_loop_run(r.loop, RK_RUN_NOWAIT);
	while (r.nrx == 0 && rk_test_now_ns() < dl)	/* the leader's go */
		rk_loop_run(r.loop, RK_RUN_ONCE);
	if (hold >= 0) {
		g = fork();
		if (g == 0) {
			pause();	/* holds every descriptor until the test kills it */
			_exit(0);
		}
		if (write(hold, &g, sizeof(g)) != sizeof(g))
			return 4;
	}
	raise(SIGKILL);
	return 5;
}

START_TEST(test_peer_death)
{
	struct rank r = { 0 };
	struct rk_config c;
	int pfd[2], gfd[2], port, st;
	pid_t pid, g = -1;
	char buf[16];
	bool hold = _i == 1;

	ck_assert_int_eq(pipe(pfd), 0);
	ck_assert_int_eq(pipe(gfd), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(pfd[1]);
		close(gfd[0]);
		if (read(pfd[0], buf, sizeof(buf)) <= 0)
			_exit(9);
		_exit(child_main(atoi(buf), hold ? gfd[1] : -1));
	}
	close(pfd[0]);
	close(gfd[1]);
	cfg_base(&c, 0, 2);
	ck_assert_int_eq(rank_create(&r, &c), 0);
	port = rk_world_port(r.w);
	snprintf(buf, sizeof(buf), "%d", port);
	ck_assert_int_eq(write(pfd[1], buf, strlen(buf) + 1), (ssize_t)strlen(buf) + 1);
	close(pfd[1]);
	ck_assert(PUMP_UNTIL(20000, r.nrx == 1, &r));
	ck_assert(on_shm(&r, 1));
	ck_assert_int_eq(send_seq(&r, 1, TAG_SEQ, 2, 8), 0);
	ck_assert(PUMP_UNTIL(20000, r.nerr, &r));
	ck_assert_int_eq(r.err_rank, 1);
	if (hold) {
		/* the socket is still open (the grandchild has it): only the pidfd told */
		ck_assert_int_eq(read(gfd[0], &g, sizeof(g)), (ssize_t)sizeof(g));
		ck_assert_msg(r.err == -RK_EPEEREXIT, "peer_error %s", rk_errname(r.err));
	} else {
		ck_assert_msg(r.err == -RK_EPEEREXIT || r.err == -ECONNRESET, "peer_error %s",
			      rk_errname(r.err));
	}
	close(gfd[0]);
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
	if (g > 0)
		kill(g, SIGKILL);	/* reparented: init reaps it */
	rank_stop(&r);
}
END_TEST

/* ---- strangers on the segment's socket ----------------------------------------- */

/* The abstract sockets named like ours, from /proc/net/unix, as a stranger sees them. */
static int find_shm_sockets(char names[][64], int max)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	int n = 0;

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "@rankrt-shm-");

		if (p) {
			p[strcspn(p, "\n ")] = '\0';
			snprintf(names[n++], 64, "%s", p + 1);
		}
	}
	fclose(f);
	return n;
}

/* A process that is not the follower connects to the offered socket first: it
 * gets no descriptor, and the follower's link still moves. */
START_TEST(test_stranger_socket)
{
	struct rank r[2] = { 0 };
	struct rk_config c;
	char names[8][64];
	int n = 0, i, st, sv[2];
	pid_t pid;

	cfg_base(&c, 0, 2);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	cfg_base(&c, 1, 2);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", rk_world_port(r[0].w));
	ck_assert_int_eq(rank_create(&r[1], &c), 0);
	/* one rank at a time, looking after each: the stranger comes in as soon as
	 * the leader listens, before the follower has run again */
	for (i = 0; i < 200000 && !n; i++) {
		pump((struct rank *[]){ &r[i % 2] }, 1);
		n = find_shm_sockets(names, 8);
	}
	ck_assert_int_gt(n, 0);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		struct sockaddr_un sa = { .sun_family = AF_UNIX };
		char data[16], cbuf[256];
		struct iovec iov = { data, sizeof(data) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
		ssize_t got;

		snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s", names[0]);
		if (connect(fd, (struct sockaddr *)&sa,
			    (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
					strlen(names[0]))) < 0)
			_exit(errno == ECONNREFUSED ? 0 : 5);	/* gone already: nothing to steal */
		if (write(sv[1], "c", 1) != 1)
			_exit(6);
		got = recvmsg(fd, &m, 0);
		/* closed on it, no descriptor */
		_exit(got == 0 && m.msg_controllen == 0 ? 0 : 7);
	}
	close(sv[1]);
	{
		char ch;

		ck_assert_int_ge(read(sv[0], &ch, 1), 0);	/* it is queued on the socket */
	}
	close(sv[0]);
	ck_assert(PUMP_UNTIL(10000, on_shm(&r[0], 1) && on_shm(&r[1], 0), &r[0], &r[1]));
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "stranger: status %#x", st);
	ck_assert_int_eq(send_seq(&r[0], 1, TAG_SEQ, 1, 8), 0);
	ck_assert(PUMP_UNTIL(5000, r[1].nrx == 1, &r[0], &r[1]));
	stop(r, 2);
}
END_TEST

/* ---- clean ---------------------------------------------------------------------- */

static int count_fds(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	int n = 0;

	ck_assert_ptr_nonnull(d);
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

static int count_dev_shm(void)
{
	DIR *d = opendir("/dev/shm");
	struct dirent *e;
	int n = 0;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* Worlds torn down mid-traffic leave no descriptor, mapping or /dev/shm entry. */
START_TEST(test_teardown)
{
	struct rank r[3] = { 0 };
	int fds = count_fds(), shm = count_dev_shm(), k;
	uint32_t i;

	for (k = 0; k < 3; k++) {
		memset(r, 0, sizeof(r));
		start(r, 3, NULL);
		for (i = 0; i < 200; i++) {
			send_seq(&r[0], -1, TAG_SEQ, i, 1000);
			send_seq(&r[1], 0, TAG_SEQ, i, 1000);
		}
		PUMP_UNTIL(2, false, &r[0], &r[1], &r[2]);
		/* a follower first, the leader first, or in the middle of everything */
		if (k == 0)
			stop(r, 3);
		else if (k == 1) {
			rank_stop(&r[0]);
			rank_stop(&r[2]);
			rank_stop(&r[1]);
		} else {
			rank_stop(&r[1]);
			rank_stop(&r[0]);
			rank_stop(&r[2]);
		}
	}
	ck_assert_int_eq(count_fds(), fds);
	ck_assert_int_eq(count_dev_shm(), shm);
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

static TCase *new_tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, TIMEOUT_S);
	tcase_add_checked_fixture(tc, log_setup, log_teardown);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *shm_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc;

	tc = new_tcase(s, "upgrade");
	tcase_add_test(tc, test_upgrade);
	tcase_add_test(tc, test_off);
	tcase_add_test(tc, test_fallback);
	tcase_add_loop_test(tc, test_eventfd_path, 0, 2);
	tcase_add_loop_test(tc, test_required, 0, 2);
	tcase_add_test(tc, test_unauthenticated);
	tcase_add_test(tc, test_class);
	tc = new_tcase(s, "broadcast");
	tcase_add_test(tc, test_broadcast_order);
	tcase_add_test(tc, test_slow_reader);
	tcase_add_test(tc, test_big_frames);
	tcase_add_test(tc, test_record_sizes);
	tcase_add_test(tc, test_wrap_stale);
	tcase_add_test(tc, test_full_ring_head);
	tcase_add_test(tc, test_direct_lane);
	tcase_add_test(tc, test_direct_order);
	tcase_add_test(tc, test_direct_switch);
	tc = new_tcase(s, "lane");
	tcase_add_test(tc, test_lane_open);
	tcase_add_test(tc, test_lane_full);
	tcase_add_loop_test(tc, test_lane_wake, 0, 2);
	tcase_add_test(tc, test_lane_thread);
	tc = new_tcase(s, "untrusted");
	tcase_add_loop_test(tc, test_poke, 0, (int)ARRAY_SIZE(pokes));
	tcase_add_test(tc, test_stranger_socket);
	tc = new_tcase(s, "wake");
	tcase_add_loop_test(tc, test_wake, 0, 4);
	tcase_add_loop_test(tc, test_no_lost_wakeup, 0, 2);
	tcase_add_loop_test(tc, test_room_wake, 0, 4);
	tcase_add_test(tc, test_idle_heartbeats);
	tc = new_tcase(s, "epoch");
	tcase_add_test(tc, test_epoch_view);
	tcase_add_test(tc, test_epoch_view_wake);
	tcase_add_test(tc, test_epoch_view_close);
	tcase_add_test(tc, test_epoch_view_mixed);
	tc = new_tcase(s, "death");
	tcase_add_loop_test(tc, test_peer_death, 0, 2);
	tcase_add_test(tc, test_teardown);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(shm_suite());
	int failed;

	srunner_run_all(sr, CK_NORMAL);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
