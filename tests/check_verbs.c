/* SPDX-License-Identifier: MIT */
/*
 * check_verbs: roce:// links (rdma/verbs.c) on real verbs devices.
 *
 *   RK_TEST_RDMA_A=rxeA,1,10.91.1.1 RK_TEST_RDMA_B=rxeB,1,10.91.1.2 check_verbs
 *
 * Each variable is "device,gid-index,ip"; A is the leader (it listens on its
 * ip), B the follower. Unset, or a device that does not open: exit 77 (skip).
 * Soft-RoCE counts as hardware (tests/softroce/verbs-softroce.sh runs this in a qemu guest).
 *
 * Two worlds run on two threads of one process (one loop each), except the
 * peer-death test, which forks the follower so that it can be killed.
 * CHECK_VERBS_VERBOSE=1 prints rankrt's log lines and the link counters;
 * CHECK_VERBS_MODE=block (spin, adaptive) runs the frames test in that mode only.
 */
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "rdma_int.h"
#include "wire_int.h"
#include "rk_rdma.h"
#include "rk_check.h"

#define TIMEOUT_S 240
#define SECRET "check_verbs: the pair's test secret, 32+ bytes"

enum { TAG_DATA = 1, TAG_DONE, TAG_ACK };

struct dev_spec {
	char dev[RK_RDMA_DEV_MAX];
	int gid;
	char ip[64];
};

static struct dev_spec g_a, g_b;
static bool g_verbose;

static void log_fn(int level, int rank, const char *msg, void *arg)
{
	(void)arg;
	if (g_verbose)
		fprintf(stderr, "[%d r%d] %s\n", level, rank, msg);
}

static uint64_t fnv_update(uint64_t h, const uint8_t *p, size_t n)
{
	while (n--) {
		h ^= *p++;
		h *= 0x100000001b3ull;
	}
	return h;
}

#define FNV_INIT 0xcbf29ce484222325ull

/* ---- a node: one rank's loop and world on its own thread ----------------------- */

struct node {
	/* set up by the test */
	int rank;
	enum rk_wait_mode mode;
	const struct dev_spec *dev; /* this rank's device end */
	char leader[256];
	uint64_t tx_target; /* frames to send */
	uint32_t tx_size;   /* fixed payload size, 0 = varying 1..200 */
	bool quiet_done;    /* the peer-death follower: never finish */
	bool leave_at_once; /* destroy the world right after queueing the frames */

	/* state */
	struct rk_loop *loop;
	struct rk_world *w;
	pthread_t th;
	uint8_t *buf;  /* an encoded frame */
	uint8_t *data; /* a payload */
	const char *transport;
	uint64_t tx_n, tx_hash;
	bool done_sent, acked;
	uint64_t rx_n, rx_hash, rx_bytes;
	bool peer_done, peer_ok;
	int peer_err;
	uint64_t t_peer_err;
	int ret;
	struct rk_link_stats st;
	struct rk_loop_stats lst;
	bool stats_ok;
};

static uint32_t frame_size(const struct node *n, uint64_t i)
{
	return n->tx_size ? n->tx_size : (uint32_t)(i * 37 % 200) + 1;
}

static void fill(uint8_t *p, uint32_t len, uint64_t i, int rank)
{
	uint32_t j;

	for (j = 0; j < len; j++)
		p[j] = (uint8_t)(i * 131 + j * 7 + (uint64_t)rank * 29 + (j >> 8));
}

static int send_user(struct node *n, uint32_t tag, const void *data, uint32_t len)
{
	int k = rk_wire_encode_user(n->buf, (size_t)len + 16, tag, data, len);

	if (k < 0)
		return k;
	return rk_world_send(n->w, n->rank ? 0 : 1, RK_FRAME_USER, 0, n->buf, (uint32_t)k);
}

/* The link's counters, while it exists (the peer's BYE may free it before the
 * thread looks at the end). */
static void snap_stats(struct node *n)
{
	struct rk_link *l = rk_world_link(n->w, n->rank ? 0 : 1);

	if (l) {
		rk_link_stats(l, &n->st, sizeof(n->st));
		n->transport = rk_link_transport(l);
		n->stats_ok = true;
	}
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct node *n = arg;
	struct rk_wire_user u;
	uint64_t v[2];

	(void)w;
	(void)peer;
	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u))
		return RK_IDLE;
	switch (u.tag) {
	case TAG_DATA:
		n->rx_hash = fnv_update(n->rx_hash, u.data, u.len);
		n->rx_n++;
		n->rx_bytes += u.len;
		break;
	case TAG_DONE:
		memcpy(v, u.data, sizeof(v));
		n->peer_done = true;
		n->peer_ok = v[0] == n->rx_n && v[1] == n->rx_hash;
		send_user(n, TAG_ACK, NULL, 0);
		break;
	case TAG_ACK:
		n->acked = true;
		break;
	}
	snap_stats(n);
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct node *n = arg;

	(void)w;
	(void)rank;
	if (n->peer_done && n->acked)
		return; /* the peer finished and left */
	if (!n->peer_err) {
		n->peer_err = err;
		n->t_peer_err = rk__now_ns();
	}
}

static const struct rk_world_ops node_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};

static void node_config(struct node *n, struct rk_config *c)
{
	rk_config_init(c);
	c->rank = n->rank;
	c->world_size = 2;
	snprintf(c->leader, sizeof(c->leader), "%s", n->leader);
	snprintf(c->rdma_dev, sizeof(c->rdma_dev), "%s", n->dev->dev);
	c->rdma_gid = n->dev->gid;
	c->wait.mode = n->mode;
	c->connect_timeout_ns = 60000000000ull;
	c->peer_timeout_ns = 20000000000ull; /* TCG guests stall: only real failures */
	rk__config_tuning(c)->heartbeat_ns = 1000000000ull;
	c->log_level = g_verbose ? RK_LOG_DEBUG : RK_LOG_WARN;
	/* the guests' addresses are not loopback: authenticate, as such worlds must */
	if (rk__auth_available())
		ck_assert_int_eq(rk_config_set_secret(c, SECRET, sizeof(SECRET) - 1), 0);
	else
		c->auth = RK_AUTH_OFF;
}

static int node_start(struct node *n)
{
	struct rk_config c;
	int ret;

	node_config(n, &c);
	n->rx_hash = n->tx_hash = FNV_INIT;
	n->buf = malloc((1u << 20) + 64);
	n->data = malloc(1u << 20);
	if (!n->buf || !n->data)
		return -ENOMEM;
	ret = rk_loop_create(&c, &n->loop);
	if (ret)
		return ret;
	ret = rk_world_create(n->loop, &node_ops, n, &n->w);
	if (ret) {
		rk_loop_destroy(n->loop);
		n->loop = NULL;
	}
	return ret;
}

/* Send a few frames per iteration (1..8, rotating): many small sends. */
static void node_send_some(struct node *n)
{
	uint8_t *data = n->data;
	uint64_t k = n->tx_n % 8 + 1;
	uint64_t v[2];

	while (k-- && n->tx_n < n->tx_target) {
		uint32_t len = frame_size(n, n->tx_n);

		fill(data, len, n->tx_n, n->rank);
		if (send_user(n, TAG_DATA, data, len))
			return;
		n->tx_hash = fnv_update(n->tx_hash, data, len);
		n->tx_n++;
	}
	if (n->tx_n == n->tx_target && !n->done_sent && !n->quiet_done) {
		v[0] = n->tx_n;
		v[1] = n->tx_hash;
		if (!send_user(n, TAG_DONE, v, sizeof(v)))
			n->done_sent = true;
	}
}

static void node_finish(struct node *n)
{
	snap_stats(n);
	rk_loop_stats(n->loop, &n->lst, sizeof(n->lst));
	if (g_verbose)
		fprintf(stderr, "r%d: destroying the world\n", n->rank);
	rk_world_destroy(n->w);
	if (g_verbose)
		fprintf(stderr, "r%d: world destroyed\n", n->rank);
	n->ret = rk_loop_destroy(n->loop);
	free(n->buf);
	free(n->data);
}

static void *node_main(void *arg)
{
	struct node *n = arg;
	uint64_t deadline = rk__now_ns() + (TIMEOUT_S - 20) * 1000000000ull;
	int ret;

	ret = rk_world_wait_ready(n->w);
	if (ret) {
		n->ret = ret;
		rk_world_destroy(n->w);
		rk_loop_destroy(n->loop);
		free(n->buf);
		free(n->data);
		return NULL;
	}
	while (!n->peer_err && rk__now_ns() < deadline) {
		bool more = n->tx_n < n->tx_target;

		if (n->done_sent && n->acked && n->peer_done)
			break; /* both streams checked by their receivers */
		node_send_some(n);
		if (n->leave_at_once && n->tx_n == n->tx_target)
			break; /* what is queued must still leave, then BYE */
		/* with frames left to send, never block: the loop's own wait is
		 * exercised while waiting for the peer's frames and ACK */
		ret = rk_loop_run(n->loop, more ? RK_RUN_NOWAIT : RK_RUN_ONCE);
		if (ret < 0)
			break;
	}
	node_finish(n);
	return NULL;
}

static int g_port;

static void pair_init(struct node *a, struct node *b, enum rk_wait_mode mode)
{
	memset(a, 0, sizeof(*a));
	memset(b, 0, sizeof(*b));
	g_port = 20000 + (int)(getpid() % 20000);
	a->rank = 0;
	b->rank = 1;
	a->dev = &g_a;
	b->dev = &g_b;
	a->mode = b->mode = mode;
	snprintf(a->leader, sizeof(a->leader), "roce://%s:%d?dev=%s&gid=%d", g_a.ip, g_port,
		 g_a.dev, g_a.gid);
	memcpy(b->leader, a->leader, sizeof(b->leader));
}

static void pair_run(struct node *a, struct node *b)
{
	ck_assert_int_eq(node_start(a), 0);
	ck_assert_int_eq(node_start(b), 0);
	ck_assert_int_eq(pthread_create(&a->th, NULL, node_main, a), 0);
	ck_assert_int_eq(pthread_create(&b->th, NULL, node_main, b), 0);
	if (g_verbose) {
		struct timespec ts;
		int i;

		/* a stuck pair shows where it stands (racy reads: debugging only) */
		for (i = 0; i < 1000; i++) {
			clock_gettime(CLOCK_REALTIME, &ts);
			ts.tv_sec += 5;
			if (pthread_timedjoin_np(a->th, NULL, &ts) == 0)
				break;
			fprintf(stderr,
				"stuck? a: tx %llu rx %llu done %d ack %d peer_done %d | "
				"b: tx %llu rx %llu done %d ack %d peer_done %d\n",
				(unsigned long long)a->tx_n, (unsigned long long)a->rx_n,
				a->done_sent, a->acked, a->peer_done, (unsigned long long)b->tx_n,
				(unsigned long long)b->rx_n, b->done_sent, b->acked, b->peer_done);
		}
	} else {
		pthread_join(a->th, NULL);
	}
	pthread_join(b->th, NULL);
}

static void assert_clean(const struct node *n, const struct node *peer)
{
	ck_assert_msg(n->ret == 0, "rank %d: %s", n->rank, rk_strerror(n->ret));
	ck_assert_msg(n->peer_err == 0, "rank %d: peer error %s", n->rank,
		      rk_strerror(n->peer_err));
	ck_assert(n->stats_ok);
	ck_assert_uint_eq(n->rx_n, peer->tx_target);
	ck_assert_msg(n->peer_done && n->peer_ok, "rank %d: %llu frames, hash mismatch or no DONE",
		      n->rank, (unsigned long long)n->rx_n);
	ck_assert_uint_eq(n->rx_hash, peer->tx_hash);
	ck_assert_uint_eq(n->st.rnr_errors, 0);
	ck_assert_int_ge(n->st.credits_min, 0);
	ck_assert_uint_gt(n->st.tx_sends, 0);
	ck_assert_uint_gt(n->st.cq_polls, 0);
	if (g_verbose)
		fprintf(stderr,
			"r%d: frames tx %llu rx %llu, sends %llu (inline %llu, credit-only %llu), "
			"credit stalls %llu, credits_min %lld, cq polls %llu, cq events %llu, "
			"blocks %llu\n",
			n->rank, (unsigned long long)n->st.tx_frames,
			(unsigned long long)n->st.rx_frames, (unsigned long long)n->st.tx_sends,
			(unsigned long long)n->st.tx_inline,
			(unsigned long long)n->st.tx_credit_msgs,
			(unsigned long long)n->st.credit_stalls, (long long)n->st.credits_min,
			(unsigned long long)n->st.cq_polls, (unsigned long long)n->st.cq_events,
			(unsigned long long)n->lst.blocks);
}

/* ---- tests --------------------------------------------------------------------- */

static const enum rk_wait_mode modes[] = { RK_WAIT_ADAPTIVE, RK_WAIT_SPIN, RK_WAIT_BLOCK };

/* Handshake, then frames both ways, in every wait mode. */
START_TEST(test_frames_both_ways)
{
	const char *only = getenv("CHECK_VERBS_MODE");
	struct node a, b;

	if (only && strcmp(only, rk_wait_mode_name(modes[_i])))
		return; /* debugging one mode */
	pair_init(&a, &b, modes[_i]);
	a.tx_target = 2000;
	b.tx_target = 2000;
	pair_run(&a, &b);
	assert_clean(&a, &b);
	assert_clean(&b, &a);
	ck_assert_str_eq(a.transport, "roce");
	ck_assert_str_eq(b.transport, "roce");
	ck_assert_uint_gt(a.st.tx_inline + b.st.tx_inline, 0); /* small frames inline */
	if (modes[_i] == RK_WAIT_BLOCK) {
		/* the arm path: the loops blocked and completions woke them */
		ck_assert_uint_gt(a.lst.blocks + b.lst.blocks, 0);
		ck_assert_uint_gt(a.st.cq_events + b.st.cq_events, 0);
	}
	if (modes[_i] == RK_WAIT_SPIN)
		ck_assert_uint_eq(a.lst.blocks + b.lst.blocks, 0);
}
END_TEST

/* A 1 MiB frame each way, chunked into buffer-sized sends, intact. */
START_TEST(test_big_frame)
{
	struct node a, b;

	pair_init(&a, &b, RK_WAIT_ADAPTIVE);
	a.tx_target = b.tx_target = 1;
	a.tx_size = b.tx_size = 1u << 20;
	pair_run(&a, &b);
	assert_clean(&a, &b);
	assert_clean(&b, &a);
	ck_assert_uint_eq(a.rx_bytes, 1u << 20);
	ck_assert_uint_eq(b.rx_bytes, 1u << 20);
	ck_assert_uint_ge(b.st.tx_sends, (1u << 20) / RK_VB_BUF_SIZE);
	fprintf(stderr, "big frame: 1 MiB each way intact (hashes %016llx, %016llx), %llu and "
			"%llu sends, RNR errors %llu\n",
		(unsigned long long)a.rx_hash, (unsigned long long)b.rx_hash,
		(unsigned long long)a.st.tx_sends, (unsigned long long)b.st.tx_sends,
		(unsigned long long)(a.st.rnr_errors + b.st.rnr_errors));
}
END_TEST

/* 100,000 small frames one way: intact, in order, no RNR, credits never negative. */
START_TEST(test_burst)
{
	struct node a, b;

	pair_init(&a, &b, RK_WAIT_ADAPTIVE);
	b.tx_target = 100000;
	pair_run(&a, &b);
	assert_clean(&a, &b);
	assert_clean(&b, &a);
	ck_assert_uint_eq(b.st.rnr_errors, 0);
	ck_assert_int_ge(b.st.credits_min, 0);
	/* the receipt: printed on every run */
	fprintf(stderr, "burst: %llu frames intact (hash %016llx) in %llu sends, %llu credit "
			"stalls, lowest credits %lld, RNR errors %llu\n",
		(unsigned long long)a.rx_n, (unsigned long long)a.rx_hash,
		(unsigned long long)b.st.tx_sends, (unsigned long long)b.st.credit_stalls,
		(long long)b.st.credits_min, (unsigned long long)b.st.rnr_errors);
}
END_TEST

/*
 * A rank that queues a 1 MiB frame (more chunks than send slots) and leaves at
 * once: the closing link drains the frame, then BYE, so the peer gets both,
 * not a reset. Fails when a FAILED (closing) link stops restarting its stalled
 * flush on send completions and returned credits.
 */
START_TEST(test_leave_after_big_frame)
{
	struct node a, b;

	pair_init(&a, &b, RK_WAIT_ADAPTIVE);
	b.tx_target = 1;
	b.tx_size = 1u << 20;
	b.quiet_done = true;
	b.leave_at_once = true;
	pair_run(&a, &b);
	ck_assert_int_eq(b.ret, 0);
	ck_assert_uint_eq(a.rx_n, 1);
	ck_assert_uint_eq(a.rx_bytes, 1u << 20);
	ck_assert_uint_eq(a.rx_hash, b.tx_hash);
	ck_assert_msg(a.peer_err == -RK_EPEERBYE, "the leader saw %s, not the follower's BYE",
		      rk_errname(a.peer_err));
	fprintf(stderr, "leave after 1 MiB: frame intact (hash %016llx), then %s\n",
		(unsigned long long)a.rx_hash, rk_errname(a.peer_err));
}
END_TEST

/* ---- strangers on the side channel -------------------------------------------- */

static int raw_connect(const char *ip, int port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	uint64_t deadline = rk__now_ns() + 20000000000ull;
	int fd;

	inet_pton(AF_INET, ip, &sa.sin_addr);
	while (rk__now_ns() < deadline) {
		fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0)
			return -errno;
		if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0)
			return fd;
		close(fd);
		usleep(20000);
	}
	return -ETIMEDOUT;
}

/* Read until the leader closes the socket; return the ms it took, -1 if it did not. */
static int wait_closed(int fd, int limit_ms)
{
	uint64_t t0 = rk__now_ns();
	struct pollfd p = { .fd = fd, .events = POLLIN };
	char b[256];
	ssize_t r;

	while ((int)((rk__now_ns() - t0) / 1000000) < limit_ms) {
		if (poll(&p, 1, 100) <= 0)
			continue;
		r = read(fd, b, sizeof(b));
		if (r == 0 || (r < 0 && errno == ECONNRESET))
			return (int)((rk__now_ns() - t0) / 1000000);
	}
	return -1;
}

static const struct garbage {
	const char *name;
	int kind;
} garbage[] = {
	{ "wrong magic", 0 },
	{ "truncated blob, then EOF", 1 },
	{ "newer version", 2 },
	{ "blob, then junk instead of READY", 3 },
};

/* A stranger's bytes fail its own connection only: the real follower joins after. */
START_TEST(test_side_channel_garbage)
{
	const struct garbage *g = &garbage[_i];
	struct node a, b;
	uint8_t blob[RK_VB_BLOB_LEN + 8];
	int fd, ms;

	pair_init(&a, &b, RK_WAIT_ADAPTIVE);
	a.tx_target = b.tx_target = 10;
	ck_assert_int_eq(node_start(&a), 0);
	ck_assert_int_eq(pthread_create(&a.th, NULL, node_main, &a), 0);

	fd = raw_connect(g_a.ip, g_port);
	ck_assert_int_ge(fd, 0);
	memset(blob, 0, sizeof(blob));
	rk__le32_store(blob + RK_VB_OFF_MAGIC, RK_VB_MAGIC);
	rk__le16_store(blob + RK_VB_OFF_VERSION, RK_VB_VERSION);
	rk__le16_store(blob + RK_VB_OFF_LEN, RK_VB_BLOB_LEN);
	rk__le32_store(blob + RK_VB_OFF_QPN, 0x123);
	blob[RK_VB_OFF_MTU] = 3;
	blob[RK_VB_OFF_GID + 15] = 1;
	rk__le32_store(blob + RK_VB_OFF_RXDEPTH, 16);
	rk__le32_store(blob + RK_VB_OFF_BUFSIZE, 4096);
	switch (g->kind) {
	case 0:
		memset(blob, 'X', RK_VB_BLOB_LEN);
		ck_assert_int_eq(write(fd, blob, RK_VB_BLOB_LEN), RK_VB_BLOB_LEN);
		break;
	case 1:
		ck_assert_int_eq(write(fd, blob, 20), 20);
		shutdown(fd, SHUT_WR);
		break;
	case 2:
		rk__le16_store(blob + RK_VB_OFF_VERSION, RK_VB_VERSION + 1);
		ck_assert_int_eq(write(fd, blob, RK_VB_BLOB_LEN), RK_VB_BLOB_LEN);
		break;
	case 3:
		/* a real-looking QP (it goes nowhere), then not READY */
		blob[RK_VB_BLOB_LEN] = 'Z';
		ck_assert_int_eq(write(fd, blob, RK_VB_BLOB_LEN + 1), RK_VB_BLOB_LEN + 1);
		break;
	}
	ms = wait_closed(fd, 10000);
	close(fd);
	ck_assert_msg(ms >= 0, "%s: the leader kept the connection", g->name);

	/* the world is untouched: the real follower joins and frames flow */
	ck_assert_int_eq(node_start(&b), 0);
	ck_assert_int_eq(pthread_create(&b.th, NULL, node_main, &b), 0);
	pthread_join(a.th, NULL);
	pthread_join(b.th, NULL);
	assert_clean(&a, &b);
	assert_clean(&b, &a);
}
END_TEST

/* The follower dies (SIGKILL, no BYE): the leader hears of it from the connection. */
START_TEST(test_peer_death)
{
	struct node a, b;
	uint64_t t_kill, deadline;
	pid_t pid;
	int status;

	pair_init(&a, &b, RK_WAIT_ADAPTIVE);
	/* fork before this process opens any device: registered memory and fork() */
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		b.tx_target = 5;
		b.quiet_done = true; /* never finishes: killed */
		if (node_start(&b))
			_exit(3);
		if (rk_world_wait_ready(b.w))
			_exit(4);
		for (;;) {
			node_send_some(&b);
			rk_loop_run(b.loop, RK_RUN_ONCE);
		}
	}
	a.tx_target = 0;
	ck_assert_int_eq(node_start(&a), 0);
	ck_assert_int_eq(rk_world_wait_ready(a.w), 0);
	deadline = rk__now_ns() + 30000000000ull;
	while (a.rx_n < 5 && rk__now_ns() < deadline)
		rk_loop_run(a.loop, RK_RUN_ONCE);
	ck_assert_uint_eq(a.rx_n, 5);
	t_kill = rk__now_ns();
	kill(pid, SIGKILL);
	waitpid(pid, &status, 0);
	deadline = t_kill + 5000000000ull;
	while (!a.peer_err && rk__now_ns() < deadline)
		rk_loop_run(a.loop, RK_RUN_ONCE);
	ck_assert_msg(a.peer_err != 0, "no peer error within 5 s of the kill");
	/* heard from the connection, not from the 20 s peer timeout */
	ck_assert_msg(a.peer_err != -RK_EPEERDEAD, "peer death found by the timeout");
	if (g_verbose)
		fprintf(stderr, "peer death reported after %llu ms: %s\n",
			(unsigned long long)((a.t_peer_err - t_kill) / 1000000),
			rk_strerror(a.peer_err));
	node_finish(&a);
	ck_assert_int_eq(a.ret, 0);
}
END_TEST

static Suite *verbs_suite(void)
{
	Suite *s = suite_create("verbs");
	TCase *tc = rk_tcase(s, "links", TIMEOUT_S, NULL, NULL);

	tcase_add_loop_test(tc, test_frames_both_ways, 0, ARRAY_SIZE(modes));
	tcase_add_test(tc, test_big_frame);
	tcase_add_test(tc, test_burst);
	tcase_add_test(tc, test_leave_after_big_frame);

	tc = rk_tcase(s, "failures", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_side_channel_garbage, 0, ARRAY_SIZE(garbage));
	tcase_add_test(tc, test_peer_death);
	return s;
}

static int parse_spec(const char *var, struct dev_spec *d)
{
	const char *s = getenv(var);
	char buf[160], *dev, *gid, *ip, *save = NULL;

	if (!s || !*s)
		return -ENOENT;
	snprintf(buf, sizeof(buf), "%s", s);
	dev = strtok_r(buf, ",", &save);
	gid = strtok_r(NULL, ",", &save);
	ip = strtok_r(NULL, ",", &save);
	if (!dev || !gid || !ip || strlen(dev) >= sizeof(d->dev) || strlen(ip) >= sizeof(d->ip)) {
		fprintf(stderr, "check_verbs: %s='%s': expected dev,gid,ip\n", var, s);
		return -EINVAL;
	}
	snprintf(d->dev, sizeof(d->dev), "%s", dev);
	d->gid = atoi(gid);
	snprintf(d->ip, sizeof(d->ip), "%s", ip);
	return 0;
}

/* Open both devices once (through the transport's own check) or skip. */
static bool devices_open(void)
{
	struct rk__verbs_opts o;
	struct rk__addr addr;
	struct rk_loop *loop;
	struct rk_config c;
	char s[256];
	bool ok = true;
	int i;

	for (i = 0; i < 2; i++) {
		const struct dev_spec *d = i ? &g_b : &g_a;

		rk_config_init(&c);
		c.rank = i;
		if (rk_loop_create(&c, &loop))
			return false;
		snprintf(s, sizeof(s), "roce://%s:1?dev=%s&gid=%d", d->ip, d->dev, d->gid);
		if (rk__addr_parse(s, &addr) || rk__verbs_prepare(loop, &addr, &o))
			ok = false;
		rk_loop_destroy(loop);
	}
	return ok;
}

int main(void)
{
	g_verbose = getenv("CHECK_VERBS_VERBOSE") != NULL;
	rk_log_set_handler(log_fn, NULL);
	if (g_verbose)
		rk__log_set_level(RK_LOG_DEBUG);
	if (parse_spec("RK_TEST_RDMA_A", &g_a) || parse_spec("RK_TEST_RDMA_B", &g_b)) {
		printf("check_verbs: RK_TEST_RDMA_A/RK_TEST_RDMA_B (dev,gid,ip) not set: "
		       "skipped\n");
		return 77;
	}
	if (rk_rdma_probe() <= 0 || !devices_open()) {
		printf("check_verbs: %s or %s does not open: skipped\n", g_a.dev, g_b.dev);
		return 77;
	}
	return rk_check_run(verbs_suite());
}
