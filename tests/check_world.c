// SPDX-License-Identifier: MIT
/*
 * check_world: links and the star world over real TCP sockets on loopback.
 *
 * Most tests run every rank's loop in the test's own thread, one
 * RK_RUN_NOWAIT iteration each in turn (pump_once()), so assertions need no
 * locks; the world-of-4 test gives each rank its own thread and blocking
 * waits; the process tests fork a follower that builds its own loop after the
 * fork (a ring is never shared across fork). Hostile peers are plain sockets
 * driven by the test ("raw"), with frames crafted through the wire API.
 *
 * Ports: rk__addr_parse() refuses port 0, so the leader takes a port that a
 * throwaway socket just got from the kernel, and retries on -EADDRINUSE.
 * Rings are only created inside test bodies (never in fixtures); every test
 * ends with rk_world_destroy() and rk_loop_destroy() returning 0.
 *
 * CHECK_WORLD_VERBOSE=1 prints rankrt's log lines. RK_TEST_SHM=auto runs the
 * suite with same-host links allowed (tests/world-shm.sh): links then move to
 * shared memory after their handshake; the default keeps them on TCP.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
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

#include "runtime_int.h"
#include "link_int.h"
#include "tcp_int.h"
#include "rk_test.h"
#include "rk_rdma.h"

#define TIMEOUT_S	30
#define SESSION		0x72616e6b72740001ull
#define SECRET		"check_world: the job's secret, 32+ bytes"
#define WRONG_SECRET	"check_world: a stranger's guess, 32 bytes"

/* Worlds authenticate whenever this build can (it has OpenSSL): the default. */
static bool g_auth;

/* The links' transport: TCP, or same-host shared memory (RK_TEST_SHM=auto). */
static enum rk_shm_mode test_shm(void)
{
	const char *s = getenv("RK_TEST_SHM");

	if (!s || !strcmp(s, "off"))
		return RK_SHM_OFF;
	if (!strcmp(s, "auto"))
		return RK_SHM_AUTO;
	ck_abort_msg("RK_TEST_SHM='%s': want auto or off", s);
	return RK_SHM_OFF;
}
#define MAX_ERRS	16

enum { TAG_PLAIN = 1, TAG_HI, TAG_BURST, TAG_SEQ, TAG_ECHO, TAG_REPLY, TAG_QUIT, TAG_DIE,
       TAG_ALL, TAG_ACK, TAG_BIG };

#define BURST_FRAMES 10000


/* ---- log capture ---------------------------------------------------------------- */

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static unsigned int g_log_dropped;	/* "refused a connection ... before its handshake" */
static unsigned int g_log_lines;
static unsigned int g_log_summaries;	/* "refused N more connections ..." */
static bool g_log_leak;			/* a line held a byte of the secret */
static bool g_log_verbose;

static void log_capture(int level, int rank, const char *msg, void *arg)
{
	(void)arg;
	pthread_mutex_lock(&g_log_lock);
	g_log_lines++;
	if (strstr(msg, "refused a connection"))
		g_log_dropped++;
	if (strstr(msg, "more connections in the last"))
		g_log_summaries++;
	if (strstr(msg, "secret, 32+") || strstr(msg, "guess, 32"))
		g_log_leak = true;
	pthread_mutex_unlock(&g_log_lock);
	if (g_log_verbose)
		fprintf(stderr, "    [%d] r%d %s\n", level, rank, msg);
}

static unsigned int log_summaries(void)
{
	unsigned int n;

	pthread_mutex_lock(&g_log_lock);
	n = g_log_summaries;
	pthread_mutex_unlock(&g_log_lock);
	return n;
}

static unsigned int log_dropped(void)
{
	unsigned int n;

	pthread_mutex_lock(&g_log_lock);
	n = g_log_dropped;
	pthread_mutex_unlock(&g_log_lock);
	return n;
}

/* Checked fixture: runs in the test's process, creates no ring. */
static void log_setup(void)
{
	g_log_verbose = getenv("CHECK_WORLD_VERBOSE") != NULL;
	g_log_dropped = g_log_lines = g_log_summaries = 0;
	g_log_leak = false;
	rk_log_set_handler(log_capture, NULL);
	rk__log_set_level(RK_LOG_INFO);
}

static void log_teardown(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
}

/* ---- a rank: its loop, its world, what it saw ------------------------------------- */

struct rxframe {
	int peer;
	uint8_t type;
	uint16_t flags;
	uint32_t len;
	uint64_t seq;
	uint8_t *data;		/* a copy of the payload */
};

struct node;
typedef void (*frame_hook)(struct node *n, int peer, const struct rk_wire_hdr *h,
			   const uint8_t *payload);

struct node {
	struct rk_loop *loop;
	struct rk_world *w;
	int rank;
	int ready;		/* ready callbacks */
	bool send_on_ready;	/* send TAG_HI to every peer from the ready callback */
	int ready_send;		/* first error those sends returned */
	int nerr;		/* peer_error callbacks */
	struct {
		int rank, err;
		uint64_t t;
	} errs[MAX_ERRS];
	struct rxframe *rx;
	size_t nrx, rxcap;
	frame_hook hook;
	int hook_err;		/* first error a hook's send returned */
	bool quit;
};

static int send_user(struct node *n, int to, uint32_t tag, const void *data, uint32_t len)
{
	uint8_t *buf = malloc((size_t)len + 8);
	int m, ret;

	if (!buf)
		return -ENOMEM;
	m = rk_wire_encode_user(buf, (size_t)len + 8, tag, data, len);
	ret = m < 0 ? m : rk_world_send(n->w, to, RK_FRAME_USER, 0, buf, (uint32_t)m);
	free(buf);
	return ret;
}

static void on_ready(struct rk_world *w, void *arg)
{
	struct node *n = arg;
	int r, ret;

	n->ready++;
	if (!n->send_on_ready)
		return;
	for (r = 0; r < rk_world_size(w); r++) {
		if (r == n->rank || (n->rank != 0 && r != 0))
			continue;
		ret = send_user(n, r, TAG_HI, "hi", 2);
		if (ret && !n->ready_send)
			n->ready_send = ret;
	}
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct node *n = arg;
	struct rxframe *f;

	(void)w;
	if (n->nrx == n->rxcap) {
		size_t cap = n->rxcap ? n->rxcap * 2 : 64;
		struct rxframe *p = realloc(n->rx, cap * sizeof(*p));

		if (!p)
			abort();
		n->rx = p;
		n->rxcap = cap;
	}
	f = &n->rx[n->nrx++];
	f->peer = peer;
	f->type = h->type;
	f->flags = h->flags;
	f->len = h->len;
	f->seq = h->seq;
	f->data = malloc(h->len ? h->len : 1);
	if (!f->data)
		abort();
	memcpy(f->data, payload, h->len);
	if (n->hook)
		n->hook(n, peer, h, payload);
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct node *n = arg;

	(void)w;
	if (n->nerr < MAX_ERRS) {
		n->errs[n->nerr].rank = rank;
		n->errs[n->nerr].err = err;
		n->errs[n->nerr].t = rk_test_now_ns();
	}
	n->nerr++;
}

static const struct rk_world_ops node_ops = {
	.ready = on_ready,
	.frame = on_frame,
	.peer_error = on_peer_error,
};

static uint32_t frame_tag(const struct rxframe *f)
{
	struct rk_wire_user u;

	if (f->type != RK_FRAME_USER || rk_wire_decode_user(f->data, f->len, &u))
		return 0;
	return u.tag;
}

static size_t count_tag(const struct node *n, uint32_t tag)
{
	size_t i, c = 0;

	for (i = 0; i < n->nrx; i++)
		c += frame_tag(&n->rx[i]) == tag;
	return c;
}

static void cfg_base(struct rk_config *c, int rank, int size, int port)
{
	rk_config_init(c);
	c->rank = rank;
	c->world_size = size;
	snprintf(c->leader, sizeof(c->leader), "127.0.0.1:%d", port);
	c->session_id = SESSION;
	rk__config_tuning(c)->heartbeat_ns = 20 * MS;
	c->peer_timeout_ns = 200 * MS * rk_test_slow();
	rk__config_tuning(c)->handshake_timeout_ns = 300 * MS * rk_test_slow();
	c->connect_timeout_ns = 5000 * MS;
	c->max_frame = 4u << 20;
	c->wait.spin_ns = 1 * MS;	/* the machine is shared: block soon */
	c->log_level = RK_LOG_INFO;
	c->shm = test_shm();
	g_auth = rk__auth_available();
	if (g_auth)
		ck_assert_int_eq(rk_config_set_secret(c, SECRET, strlen(SECRET)), 0);
}

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

/* A port the kernel just handed out (nothing listens on it once we return). */
/*
 * Create the loop and the world of @n from @tmpl. A leader (rank 0) configured
 * on "127.0.0.1:0" takes a free port instead, and another one if a concurrent
 * test took it first. No Check assertions: threads and forked children use it
 * too. Return 0 or an error.
 */
static int node_create(struct node *n, const struct rk_config *tmpl)
{
	struct rk_config c = *tmpl;
	int ret, port, tries = 0;

	n->rank = c.rank;
	for (;;) {
		if (c.rank == 0 && c.world_size > 1 && !strcmp(c.leader, "127.0.0.1:0")) {
			port = rk_test_free_port();
			if (port < 0)
				return port;
			snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
		}
		ret = rk_loop_create(&c, &n->loop);
		if (ret)
			return ret;
		ret = rk_world_create(n->loop, &node_ops, n, &n->w);
		if (!ret)
			return 0;
		rk_loop_destroy(n->loop);
		n->loop = NULL;
		n->w = NULL;
		if (c.rank != 0 || ret != -EADDRINUSE || ++tries == 10)
			return ret;
	}
}

/* Destroy the world and the loop; return the first failure (0 = nothing leaked). */
static int node_close(struct node *n)
{
	int ret = 0, r;

	if (n->w) {
		ret = rk_world_destroy(n->w);
		n->w = NULL;
	}
	if (n->loop) {
		r = rk_loop_destroy(n->loop);
		if (r && !ret)
			ret = r;
		n->loop = NULL;
	}
	return ret;
}

/* Free what the node recorded. */
static void node_free(struct node *n)
{
	size_t i;

	for (i = 0; i < n->nrx; i++)
		free(n->rx[i].data);
	free(n->rx);
	n->rx = NULL;
	n->nrx = n->rxcap = 0;
}

static void node_start(struct node *n, const struct rk_config *c)
{
	ck_assert_int_eq(node_create(n, c), 0);
}

static void node_stop(struct node *n)
{
	ck_assert_int_eq(node_close(n), 0);
	node_free(n);
}

/* One NOWAIT iteration of every loop; nap briefly when none had a completion. */
static void pump_once(struct node **ns, size_t nn)
{
	struct rk_loop_stats a, b;
	uint64_t ev = 0;
	size_t i;

	for (i = 0; i < nn; i++) {
		rk_loop_stats(ns[i]->loop, &a, sizeof(a));
		ck_assert_int_eq(rk_loop_run(ns[i]->loop, RK_RUN_NOWAIT), 0);
		rk_loop_stats(ns[i]->loop, &b, sizeof(b));
		ev += b.events - a.events;
	}
	if (!ev)
		usleep(100);
}

/* Pump the listed nodes until @cond holds or @ms passed; the value of @cond. */
#define PUMP_UNTIL(ms, cond, ...)						\
	({									\
		struct node *ns_[] = { __VA_ARGS__ };				\
		uint64_t dl_ = rk_test_deadline_ms(ms);					\
		while (!(cond) && rk_test_now_ns() < dl_)				\
			pump_once(ns_, ARRAY_SIZE(ns_));			\
		(bool)(cond);							\
	})
#define PUMP_FOR(ms, ...) ((void)PUMP_UNTIL(ms, false, __VA_ARGS__))
#define NODES(...) (struct node *[]){ __VA_ARGS__ }, ARRAY_SIZE(((struct node *[]){ __VA_ARGS__ }))

/*
 * Start the leader and followers 1..@nreal-1 of a world of @tmpl->world_size
 * ranks in this thread, and pump until every follower (and the leader, when
 * every rank is here) is ready. Return the leader's port.
 */
static int start_world(struct node *n, int nreal, const struct rk_config *tmpl)
{
	struct node *ns[8];
	struct rk_config c = *tmpl;
	uint64_t deadline = rk_test_deadline_ms(5000);
	int i, port, all;

	ck_assert_int_le(nreal, 8);
	c.rank = 0;
	node_start(&n[0], &c);
	port = rk_world_port(n[0].w);
	ck_assert_int_gt(port, 0);
	ns[0] = &n[0];
	for (i = 1; i < nreal; i++) {
		c = *tmpl;
		c.rank = i;
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
		node_start(&n[i], &c);
		ns[i] = &n[i];
	}
	for (;;) {
		all = nreal < tmpl->world_size || n[0].ready;
		/* a follower is ready once the leader proved itself; the leader takes
		 * it a moment later, when the follower's proof is in */
		for (i = 1; i < nreal; i++)
			all = all && n[i].ready && rk_world_link(n[0].w, i);
		if (all)
			break;
		ck_assert_msg(rk_test_now_ns() < deadline, "world not ready after 5 s");
		pump_once(ns, (size_t)nreal);
	}
	return port;
}

/* A USER frame each way between @a and @b, both delivered. */
static void ping_pong(struct node *a, struct node *b)
{
	size_t ca = count_tag(a, TAG_PLAIN), cb = count_tag(b, TAG_PLAIN);

	ck_assert_int_eq(send_user(a, b->rank, TAG_PLAIN, "ping", 4), 0);
	ck_assert_int_eq(send_user(b, a->rank, TAG_PLAIN, "pong", 4), 0);
	ck_assert_msg(PUMP_UNTIL(3000, count_tag(a, TAG_PLAIN) > ca && count_tag(b, TAG_PLAIN) > cb,
				 a, b),
		      "ping-pong between ranks %d and %d did not complete", a->rank, b->rank);
}

/* ---- raw sockets: hostile or hand-driven peers -------------------------------------- */

struct raw {
	int fd;
	uint8_t *buf;
	size_t len, cap;
	bool eof;
	int err;
	uint64_t seq;
	size_t discarded;	/* bytes raw_wait_eof() threw away */
};

static void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* A HELLO/WELCOME payload with any field values (the encoder refuses some); no
 * authentication, a fixed nonce. */
static void hello_payload(uint8_t out[RK_WIRE_HELLO_LEN], uint32_t proto, uint32_t size,
			  uint32_t rank, uint64_t session)
{
	memset(out, 0, RK_WIRE_HELLO_LEN);
	put32(out, proto);
	put32(out + 4, size);
	put32(out + 8, rank);
	put64(out + 16, session);
	memset(out + 32, 0x5a, RK_WIRE_NONCE_LEN);
}

/* A frame into @out (32 + @len bytes). */
static size_t make_frame(uint8_t *out, unsigned int type, unsigned int flags, uint32_t src,
			 uint64_t seq, const void *payload, uint32_t len)
{
	if (len)
		memcpy(out + RK_WIRE_HDR_LEN, payload, len);
	ck_assert_int_eq(rk_wire_encode_hdr(out, type, flags, src, seq, out + RK_WIRE_HDR_LEN, len),
			 RK_WIRE_HDR_LEN);
	return RK_WIRE_HDR_LEN + (size_t)len;
}

/* Rewrite the header CRC after editing header bytes. */
static void reseal_hdr(uint8_t *frame)
{
	put32(frame + 28, rk_wire_crc32c(0, frame, 28));
}

static void raw_connect(struct raw *r, int port, int rcvbuf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	memset(r, 0, sizeof(*r));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->fd, 0);
	if (rcvbuf)
		ck_assert_int_eq(setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
					    sizeof(rcvbuf)), 0);
	/* The kernel completes the handshake from the backlog: no loop needs to run. */
	ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	r->cap = 65536;
	r->buf = malloc(r->cap);
	ck_assert_ptr_nonnull(r->buf);
}

static void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	free(r->buf);
	r->buf = NULL;
}

static void raw_send(struct raw *r, const void *p, size_t n)
{
	const uint8_t *b = p;
	ssize_t w;

	while (n) {
		w = send(r->fd, b, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		ck_assert_msg(w > 0, "raw send: %s", strerror(errno));
		b += w;
		n -= (size_t)w;
	}
}

/* Send one frame with the next sequence number. */
static void raw_send_frame(struct raw *r, unsigned int type, unsigned int flags, uint32_t src,
			   const void *payload, uint32_t len)
{
	uint8_t *f = malloc(RK_WIRE_HDR_LEN + (size_t)len);

	ck_assert_ptr_nonnull(f);
	raw_send(r, f, make_frame(f, type, flags, src, r->seq++, payload, len));
	free(f);
}

/* Take what the socket holds, without blocking. */
static void raw_poll(struct raw *r)
{
	ssize_t n;

	while (!r->eof) {
		if (r->len == r->cap) {
			r->cap *= 2;
			r->buf = realloc(r->buf, r->cap);
			ck_assert_ptr_nonnull(r->buf);
		}
		n = recv(r->fd, r->buf + r->len, r->cap - r->len, MSG_DONTWAIT);
		if (n > 0) {
			r->len += (size_t)n;
		} else if (n == 0) {
			r->eof = true;
		} else if (errno == EAGAIN || errno == EWOULDBLOCK) {
			break;
		} else if (errno != EINTR) {
			r->err = -errno;
			r->eof = true;
		}
	}
}

/* One complete, valid frame from the buffer: 1 (@h, @pl filled), 0 (not yet). */
static int raw_pop(struct raw *r, struct rk_wire_hdr *h, uint8_t *pl, size_t cap)
{
	int64_t total;

	raw_poll(r);
	total = rk_wire_decode_hdr(r->buf, r->len, RK_WIRE_MAX_PAYLOAD, h);
	if (total == -EAGAIN || (total > 0 && (size_t)total > r->len))
		return 0;
	ck_assert_msg(total > 0, "raw: the leader sent a bad frame: %s", rk_errname((int)total));
	ck_assert_int_eq(rk_wire_check_payload(h, r->buf + RK_WIRE_HDR_LEN), 0);
	ck_assert_uint_le(h->len, cap);
	memcpy(pl, r->buf + RK_WIRE_HDR_LEN, h->len);
	memmove(r->buf, r->buf + total, r->len - (size_t)total);
	r->len -= (size_t)total;
	return 1;
}

/* Pump until @r yields a frame that is not a HEARTBEAT (1) or reaches EOF (0). */
static int raw_next(struct raw *r, struct node **ns, size_t nn, unsigned int ms,
		    struct rk_wire_hdr *h, uint8_t *pl, size_t cap)
{
	uint64_t deadline = rk_test_deadline_ms(ms);

	for (;;) {
		if (raw_pop(r, h, pl, cap)) {
			if (h->type == RK_FRAME_HEARTBEAT)
				continue;
			return 1;
		}
		if (r->eof)
			return 0;
		ck_assert_msg(rk_test_now_ns() < deadline, "raw: no frame and no EOF within %u ms", ms);
		pump_once(ns, nn);
	}
}

/* Pump until the leader closes @r (discarding what arrives). Return the ms it took. */
static uint64_t raw_wait_eof(struct raw *r, struct node **ns, size_t nn, unsigned int ms)
{
	uint64_t t0 = rk_test_now_ns(), deadline = rk_test_deadline_ms(ms);

	for (;;) {
		raw_poll(r);
		r->discarded += r->len;
		r->len = 0;
		if (r->eof)
			return (rk_test_now_ns() - t0) / MS;
		ck_assert_msg(rk_test_now_ns() < deadline, "raw: the leader kept the socket open %u ms",
			      ms);
		pump_once(ns, nn);
	}
}

/* Expect an ERROR frame with @code for the link itself from rank @src, then EOF. */
static void raw_expect_error_from(struct raw *r, struct node **ns, size_t nn, int code,
				  uint32_t src)
{
	uint8_t pl[512];
	struct rk_wire_hdr h;
	struct rk_wire_error e;

	ck_assert_msg(raw_next(r, ns, nn, 3000, &h, pl, sizeof(pl)) == 1,
		      "raw: EOF without an ERROR frame (want %s)", rk_errname(code));
	ck_assert_msg(h.type == RK_FRAME_ERROR, "raw: got %s, want ERROR",
		      rk_wire_frame_name(h.type));
	ck_assert_uint_eq(h.src_rank, src);
	ck_assert_int_eq(rk_wire_decode_error(pl, h.len, &e), 0);
	ck_assert_msg(e.code == code, "ERROR carries %s, want %s", rk_errname(e.code),
		      rk_errname(code));
	ck_assert_uint_eq(e.rank, RK_WIRE_RANK_NONE);
	raw_wait_eof(r, ns, nn, 3000);
}

/* Expect an ERROR frame with @code from the leader, then EOF. */
static void raw_expect_error(struct raw *r, struct node **ns, size_t nn, int code)
{
	raw_expect_error_from(r, ns, nn, code, 0);
}

/* A HELLO payload as a follower of @size would send it; @auth says whether it
 * claims to authenticate, @nonce_byte fills its nonce. */
static void raw_hello(uint8_t out[RK_WIRE_HELLO_LEN], uint32_t rank, uint32_t size, bool auth,
		      uint8_t nonce_byte)
{
	hello_payload(out, RK_WIRE_VERSION, size, rank, SESSION);
	put32(out + 12, auth ? RK_WIRE_AUTH_HMAC : RK_WIRE_AUTH_NONE);
	memset(out + 32, nonce_byte, RK_WIRE_NONCE_LEN);
}

/* The proof of @which over HELLO @hello and WELCOME @welcome, with @key. */
static void raw_proof(const char *key, enum rk__auth_label which, const uint8_t *hello,
		      const uint8_t *welcome, uint8_t mac[RK_WIRE_MAC_LEN])
{
	uint8_t t[RK__TRANSCRIPT_LEN];

	memcpy(t, hello, RK_WIRE_HELLO_LEN);
	memcpy(t + RK_WIRE_HELLO_LEN, welcome, RK_WIRE_HELLO_LEN);
	ck_assert_int_eq(rk__auth_mac((const uint8_t *)key, strlen(key), which, t, mac), 0);
}

/*
 * Join as @rank: send HELLO, check the WELCOME (and, when worlds authenticate,
 * the leader's proof), answer with our proof made with @key. @hello_out and
 * @auth_out (either may be NULL) receive the frames sent, for replays.
 */
static void raw_join_key(struct raw *r, struct node **ns, size_t nn, uint32_t rank, uint32_t size,
			 const char *key, uint8_t *hello_out, uint8_t *auth_out)
{
	uint8_t hello[RK_WIRE_HELLO_LEN], pl[64], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];
	struct rk_wire_hdr h;
	struct rk_wire_hello wl;

	raw_hello(hello, rank, size, g_auth, (uint8_t)(0x40 + rank));
	raw_send_frame(r, RK_FRAME_HELLO, 0, rank, hello, sizeof(hello));
	ck_assert_int_eq(raw_next(r, ns, nn, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_msg(h.type == RK_FRAME_WELCOME, "raw: got %s, want WELCOME",
		      rk_wire_frame_name(h.type));
	ck_assert_uint_eq(h.seq, 0);
	ck_assert_uint_eq(h.src_rank, 0);
	ck_assert_int_eq(rk_wire_decode_hello(pl, h.len, &wl), 0);
	ck_assert_uint_eq(wl.rank, 0);
	ck_assert_uint_eq(wl.world_size, size);
	ck_assert_uint_eq(wl.session_id, SESSION);
	ck_assert_uint_eq(wl.proto_version, RK_WIRE_VERSION);
	ck_assert_uint_eq(wl.auth, g_auth ? RK_WIRE_AUTH_HMAC : RK_WIRE_AUTH_NONE);
	memcpy(welcome, pl, sizeof(welcome));
	if (hello_out)
		memcpy(hello_out, hello, sizeof(hello));
	if (!g_auth)
		return;
	ck_assert_int_eq(raw_next(r, ns, nn, 3000, &h, pl, sizeof(pl)), 1);
	ck_assert_uint_eq(h.type, RK_FRAME_AUTH);
	ck_assert_uint_eq(h.seq, 1);
	/* the leader proved the secret: its proof is ours to check too */
	raw_proof(SECRET, RK__AUTH_LEADER, hello, welcome, mac);
	ck_assert_mem_eq(pl, mac, sizeof(mac));
	raw_proof(key, RK__AUTH_FOLLOWER, hello, welcome, mac);
	raw_send_frame(r, RK_FRAME_AUTH, 0, rank, mac, sizeof(mac));
	if (auth_out)
		memcpy(auth_out, mac, sizeof(mac));
}

/* Join as @rank with the job's secret. */
static void raw_join(struct raw *r, struct node **ns, size_t nn, uint32_t rank, uint32_t size)
{
	raw_join_key(r, ns, nn, rank, size, SECRET, NULL, NULL);
}

/* ---- 1. two loops in one process ---------------------------------------------------- */

static void pattern(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
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

static void check_received(const struct node *n, int from, const struct sent *s, size_t ns,
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
		if (i)
			ck_assert_uint_gt(f->seq, last_seq);	/* heartbeats may sit between */
		last_seq = f->seq;
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
	struct node n[2] = { 0 };
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

	node_stop(&n[1]);
	node_stop(&n[0]);
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
	struct node n[2] = { 0 };
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
	node_stop(&n[1]);
	ck_assert_ptr_null(b.c.world);
	rk__world_unclaim(&b.c);
	node_stop(&n[0]);
}
END_TEST

/* The ready callback is where a server sends its first frames. */
START_TEST(test_send_from_ready)
{
	struct node n[3] = { 0 };
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
		node_stop(&n[i]);
}
END_TEST

/*
 * rk__loop_flush_now() sends queued frames from inside a handler: the peer
 * gets them though the sender's loop never runs again (the scheduler sends a
 * ROUND so before the leader's own launch).
 */
START_TEST(test_flush_now)
{
	struct node n[2] = { 0 };
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
		pump_once(NODES(&n[0], &n[1]));
		rk_loop_stats(n[0].loop, &b, sizeof(b));
	} while (b.events != a.events);
	before = count_tag(&n[1], TAG_PLAIN);
	ck_assert_int_eq(send_user(&n[0], 1, TAG_PLAIN, "now", 3), 0);
	rk__loop_flush_now(n[0].loop);
	rk__loop_flush_now(n[0].loop);	/* nothing queued: no-op */
	ck_assert_msg(PUMP_UNTIL(2000, count_tag(&n[1], TAG_PLAIN) > before, &n[1]),
		      "the frame did not leave without the sender's loop");
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* Leader: a TAG_BURST frame makes it queue BURST_FRAMES frames in this one callback. */
static void burst_hook(struct node *n, int peer, const struct rk_wire_hdr *h, const uint8_t *p)
{
	uint8_t buf[12];
	uint32_t i;
	int m, ret;

	(void)h;
	(void)p;
	if (frame_tag(&n->rx[n->nrx - 1]) != TAG_BURST)
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
	struct node n[2] = { 0 };
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
	node_stop(&n[0]);
	node_stop(&n[1]);
}
END_TEST

START_TEST(test_reserve_commit)
{
	struct node n[2] = { 0 };
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
	node_stop(&n[0]);
	node_stop(&n[1]);
}
END_TEST

START_TEST(test_big_frames)
{
	struct node n[2] = { 0 };
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
	node_stop(&n[0]);
	node_stop(&n[1]);
}
END_TEST

/* ---- 2. a world of 4, one thread per rank ------------------------------------------- */

struct tworld {
	atomic_int port;
	uint64_t heartbeat_ns;	/* 0: cfg_base's */
	struct trank {
		struct node n;
		int rank;
		int line;	/* where it failed, 0 = it did not */
		int err;
		int wait_ret;
		int destroy_ret;
		struct tworld *tw;
	} r[4];
};

static void *rank_thread(void *arg)
{
	struct trank *t = arg;
	struct node *n = &t->n;
	struct rk_config c;
	uint64_t deadline = rk_test_deadline_ms(15000);
	int ret, port, i;

	cfg_base(&c, t->rank, 4, 0);
	c.peer_timeout_ns = 2000 * MS;
	if (t->tw->heartbeat_ns) {
		/* no timer for a minute: every wake must come from the events waited for */
		rk__config_tuning(&c)->heartbeat_ns = t->tw->heartbeat_ns;
		rk__config_tuning(&c)->handshake_timeout_ns = t->tw->heartbeat_ns;
		c.peer_timeout_ns = 2 * t->tw->heartbeat_ns;
	}
	if (t->rank) {
		while (!(port = atomic_load(&t->tw->port)) && rk_test_now_ns() < deadline)
			usleep(1000);
		if (!port)
			T_FAIL(t, -ETIMEDOUT);
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	}
	ret = node_create(n, &c);
	if (ret)
		T_FAIL(t, ret);
	if (t->rank == 0)
		atomic_store(&t->tw->port, rk_world_port(n->w));
	t->wait_ret = rk_world_wait_ready(n->w);
	if (t->wait_ret)
		T_FAIL(t, t->wait_ret);
	if (t->rank == 0) {
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
		ret = send_user(n, 0, TAG_ACK, &t->rank, sizeof(t->rank));
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(n, deadline, count_tag(n, TAG_QUIT) == 1))
			T_FAIL(t, -ETIMEDOUT);
	}
out:
	t->destroy_ret = node_close(n);
	return NULL;
}

START_TEST(test_world_of_4)
{
	struct tworld tw;
	pthread_t th[4];
	struct rk_wire_user u;
	bool acked[4] = { false };
	size_t i, k;
	int r;

	memset(&tw, 0, sizeof(tw));
	atomic_init(&tw.port, 0);
	/* _i 1: the bootstrap, the frames and the BYEs wake blocked loops by
	 * themselves (a wait that missed one would sleep until the next timer, a
	 * minute away, past this test's timeout) */
	tw.heartbeat_ns = _i ? 60000 * MS : 0;
	for (r = 0; r < 4; r++) {
		tw.r[r].rank = r;
		tw.r[r].tw = &tw;
		ck_assert_int_eq(pthread_create(&th[r], NULL, rank_thread, &tw.r[r]), 0);
	}
	for (r = 0; r < 4; r++)
		ck_assert_int_eq(pthread_join(th[r], NULL), 0);
	for (r = 0; r < 4; r++) {
		struct trank *t = &tw.r[r];

		ck_assert_msg(!t->line, "rank %d failed at line %d: %s", r, t->line,
			      rk_errname(t->err));
		ck_assert_int_eq(t->wait_ret, 0);
		ck_assert_int_eq(t->destroy_ret, 0);
		ck_assert_int_eq(t->n.ready, 1);
	}
	for (r = 1; r < 4; r++) {
		struct node *n = &tw.r[r].n;

		/* a sibling leaving with BYE is not reported to the other followers */
		ck_assert_int_eq(n->nerr, 0);
		for (i = 0; i < (size_t)n->nerr; i++) {
			ck_assert_int_eq(n->errs[i].err, -RK_EPEERBYE);
			ck_assert(n->errs[i].rank >= 1 && n->errs[i].rank <= 3 &&
				  n->errs[i].rank != r);
		}
		for (i = 0, k = 0; i < n->nrx; i++) {
			if (frame_tag(&n->rx[i]) != TAG_ALL)
				continue;
			k++;
			ck_assert_int_eq(n->rx[i].peer, 0);
			ck_assert_int_eq(rk_wire_decode_user(n->rx[i].data, n->rx[i].len, &u), 0);
			ck_assert_uint_eq(u.len, 3);
			ck_assert_mem_eq(u.data, "all", 3);
		}
		ck_assert_uint_eq(k, 1);
	}
	for (i = 0; i < tw.r[0].n.nrx; i++) {
		const struct rxframe *f = &tw.r[0].n.rx[i];

		if (frame_tag(f) != TAG_ACK)
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
	ck_assert_int_eq(tw.r[0].n.nerr, 3);
	memset(acked, 0, sizeof(acked));
	for (i = 0; i < 3; i++) {
		ck_assert_int_eq(tw.r[0].n.errs[i].err, -RK_EPEERBYE);
		r = tw.r[0].n.errs[i].rank;
		ck_assert(r >= 1 && r <= 3 && !acked[r]);
		acked[r] = true;
	}
	for (r = 0; r < 4; r++)
		node_free(&tw.r[r].n);
}
END_TEST

/* ---- 3-5. a follower in another process --------------------------------------------- */

/* The child's reactions: echo TAG_ECHO, leave on TAG_QUIT, die on TAG_DIE. */
static void child_hook(struct node *n, int peer, const struct rk_wire_hdr *h, const uint8_t *p)
{
	struct rk_wire_user u;
	int ret;

	if (h->type != RK_FRAME_USER || rk_wire_decode_user(p, h->len, &u))
		return;
	switch (u.tag) {
	case TAG_ECHO:
		ret = send_user(n, peer, TAG_REPLY, u.data, u.len);
		if (ret && !n->hook_err)
			n->hook_err = ret;
		break;
	case TAG_QUIT:
		n->quit = true;
		break;
	case TAG_DIE:
		_exit(0);	/* abruptly: no BYE, no close by us */
	default:
		break;
	}
}

/* A follower's life in its process; 0 = all well. */
static int child_run(struct node *n, const struct rk_config *c)
{
	if (node_create(n, c))
		return 10;
	n->hook = child_hook;
	if (rk_world_wait_ready(n->w))
		return 11;
	while (!n->quit) {
		if (rk_loop_run(n->loop, RK_RUN_ONCE) < 0)
			return 12;
		if (n->nerr)
			return 13;
		if (n->hook_err)
			return 14;
	}
	if (rk_world_destroy(n->w))
		return 15;
	n->w = NULL;
	if (n->nerr)
		return 16;
	if (rk_loop_destroy(n->loop))
		return 17;
	n->loop = NULL;
	return 0;
}

/* A follower process: its own loop, made after the fork. Its exit status. */
static int child_main(int rank, int size, int port, uint64_t peer_timeout)
{
	struct node n = { 0 };
	struct rk_config c;
	int ret;

	alarm((unsigned int)(20 * rk_test_slow()));	/* never outlive a failed test */
	cfg_base(&c, rank, size, port);
	c.peer_timeout_ns = peer_timeout;
	ret = child_run(&n, &c);
	node_free(&n);
	return ret;
}

/* Fork a follower; it waits for the leader's port on *@port_fd (see give_port()). */
static pid_t spawn_follower(int rank, int size, uint64_t peer_timeout, int *port_fd)
{
	int p[2], port = 0;
	pid_t pid;

	ck_assert_int_eq(pipe(p), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		close(p[1]);
		if (read(p[0], &port, sizeof(port)) != (ssize_t)sizeof(port))
			_exit(9);	/* the test died first */
		close(p[0]);
		_exit(child_main(rank, size, port, peer_timeout));
	}
	close(p[0]);
	*port_fd = p[1];
	return pid;
}

static void give_port(int fd, int port)
{
	ck_assert_int_gt(port, 0);
	ck_assert_int_eq(write(fd, &port, sizeof(port)), (ssize_t)sizeof(port));
	close(fd);
}

/* Pump until @pid exits; its wait status. */
static int reap_child(pid_t pid, struct node **ns, size_t nn, unsigned int ms)
{
	uint64_t deadline = rk_test_deadline_ms(ms);
	int st;
	pid_t r;

	for (;;) {
		r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		ck_assert_int_eq(r, 0);
		ck_assert_msg(rk_test_now_ns() < deadline, "child %d still running after %u ms", pid, ms);
		pump_once(ns, nn);
	}
}

START_TEST(test_two_processes)
{
	struct node n = { 0 };
	struct rk_config c;
	struct rk_wire_user u;
	uint8_t *buf;
	uint32_t len, k = 0;
	size_t i;
	int fd, st;
	pid_t pid;

	pid = spawn_follower(1, 2, 2000 * MS, &fd);
	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	node_start(&n, &c);
	give_port(fd, rk_world_port(n.w));
	ck_assert(PUMP_UNTIL(5000, n.ready, &n));

	/* frames of many sizes and one of 1 MiB, echoed back in order */
	buf = malloc(1u << 20);
	ck_assert_ptr_nonnull(buf);
	for (k = 0; k <= 100; k++) {
		len = k == 100 ? (1u << 20) - 8 : k * 40;
		pattern(buf, len, k);
		ck_assert_int_eq(send_user(&n, 1, TAG_ECHO, buf, len), 0);
	}
	ck_assert(PUMP_UNTIL(10000, count_tag(&n, TAG_REPLY) == 101, &n));
	for (i = 0, k = 0; i < n.nrx; i++) {
		if (frame_tag(&n.rx[i]) != TAG_REPLY)
			continue;
		len = k == 100 ? (1u << 20) - 8 : k * 40;
		pattern(buf, len, k);
		ck_assert_int_eq(rk_wire_decode_user(n.rx[i].data, n.rx[i].len, &u), 0);
		ck_assert_uint_eq(u.len, len);
		ck_assert_mem_eq(u.data, buf, len);
		k++;
	}
	free(buf);

	/* the follower leaves cleanly: BYE, and nothing worse */
	ck_assert_int_eq(send_user(&n, 1, TAG_QUIT, NULL, 0), 0);
	ck_assert(PUMP_UNTIL(5000, n.nerr >= 1, &n));
	ck_assert_int_eq(n.errs[0].rank, 1);
	ck_assert_msg(n.errs[0].err == -RK_EPEERBYE, "peer_error %s",
		      rk_errname(n.errs[0].err));
	st = reap_child(pid, NODES(&n), 5000);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	PUMP_FOR(100, &n);
	ck_assert_int_eq(n.nerr, 1);
	ck_assert_ptr_null(rk_world_link(n.w, 1));
	ck_assert_int_eq(rk_world_failed(n.w), -RK_EPEERBYE);
	node_stop(&n);
}
END_TEST

/* A world of 3; rank 1 is a process that dies: _exit() (0) or SIGKILL (1). */
START_TEST(test_peer_closes)
{
	struct node n[3] = { 0 };
	struct rk_config c;
	int fd, st, port, err;
	pid_t pid;

	pid = spawn_follower(1, 3, 2000 * MS, &fd);
	cfg_base(&c, 0, 3, 0);
	/* long: a prompt report can only come from the closed socket */
	c.peer_timeout_ns = 2000 * MS;
	node_start(&n[0], &c);
	port = rk_world_port(n[0].w);
	give_port(fd, port);
	c.rank = 2;
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	node_start(&n[2], &c);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[2].ready, &n[0], &n[2]));
	ping_pong(&n[0], &n[2]);

	if (_i == 0)
		ck_assert_int_eq(send_user(&n[0], 1, TAG_DIE, NULL, 0), 0);
	else
		ck_assert_int_eq(kill(pid, SIGKILL), 0);
	ck_assert(PUMP_UNTIL(3000, n[0].nerr && n[2].nerr, &n[0], &n[2]));
	err = n[0].errs[0].err;
	ck_assert_int_eq(n[0].errs[0].rank, 1);
	/* the socket's end, or on a same-host link the process's (its pidfd);
	 * the peer timeout would say -RK_EPEERDEAD */
	ck_assert_msg(err == -ECONNRESET || err == -EPIPE ||
		      (test_shm() != RK_SHM_OFF && err == -RK_EPEEREXIT), "leader: peer_error %s",
		      rk_errname(err));
	/* the leader told the other follower which rank died */
	ck_assert_int_eq(n[2].errs[0].rank, 1);
	ck_assert_int_eq(n[2].errs[0].err, err);
	/* ...and the survivors still talk */
	ck_assert(rk_link_up(rk_world_link(n[2].w, 0)));
	ck_assert(rk_link_up(rk_world_link(n[0].w, 2)));
	ping_pong(&n[0], &n[2]);
	st = reap_child(pid, NODES(&n[0], &n[2]), 5000);
	if (_i == 0)
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	else
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %#x", st);
	ck_assert_int_eq(n[0].nerr, 1);
	ck_assert_int_eq(n[2].nerr, 1);
	node_stop(&n[2]);
	node_stop(&n[0]);
}
END_TEST

/*
 * One pump of @n; *@t_last becomes the time before it when it took in a frame
 * from @peer (a count of @rx frames): no later than that frame's arrival as
 * the loop saw it, however late this thread runs.
 */
static void pump_track_rx(struct node *n, int peer, uint64_t *rx, uint64_t *t_last)
{
	struct rk_link_stats ls;
	struct rk_link *l;
	uint64_t t = rk_test_now_ns();

	pump_once(NODES(n));
	l = n->nerr ? NULL : rk_world_link(n->w, peer);
	if (!l)
		return;
	rk_link_stats(l, &ls, sizeof(ls));
	if (ls.rx_frames != *rx) {
		*rx = ls.rx_frames;
		*t_last = t;
	}
}

/* A follower that stops running (SIGSTOP) is declared dead after peer_timeout. */
START_TEST(test_peer_silent)
{
	struct node n = { 0 };
	struct rk_config c;
	uint64_t t_last = 0, rx = 0, el, deadline;
	int fd, st;
	pid_t pid;

	/* the follower's own timeout long: were it 200 ms, a leader thread that
	 * the machine starves that long would make it leave on its own (exit
	 * status 13, not the SIGKILL below) */
	pid = spawn_follower(1, 2, 2000 * MS, &fd);
	cfg_base(&c, 0, 2, 0);		/* peer_timeout 200 ms */
	node_start(&n, &c);
	give_port(fd, rk_world_port(n.w));
	ck_assert(PUMP_UNTIL(5000, n.ready, &n));
	/* heartbeats keep an idle link alive well past peer_timeout */
	deadline = rk_test_deadline_ms(500);
	while (rk_test_now_ns() < deadline)
		pump_track_rx(&n, 1, &rx, &t_last);
	ck_assert_int_eq(n.nerr, 0);

	ck_assert_int_eq(kill(pid, SIGSTOP), 0);
	deadline = rk_test_deadline_ms(10000);
	while (!n.nerr) {
		ck_assert_msg(rk_test_now_ns() < deadline, "not declared dead after 10 s");
		pump_track_rx(&n, 1, &rx, &t_last);
	}
	ck_assert_uint_gt(t_last, 0);
	el = (n.errs[0].t - t_last) / MS;
	ck_assert_int_eq(n.errs[0].rank, 1);
	ck_assert_msg(n.errs[0].err == -RK_EPEERDEAD, "peer_error %s", rk_errname(n.errs[0].err));
	/* not before peer_timeout of silence, counted from the last frame in */
	ck_assert_msg(n.errs[0].t - t_last >= c.peer_timeout_ns,
		      "declared dead %llu ms after its last frame", (unsigned long long)el);
	ck_assert_int_eq(kill(pid, SIGKILL), 0);
	st = reap_child(pid, NODES(&n), 5000);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %#x", st);
	ck_assert_int_eq(n.nerr, 1);
	node_stop(&n);
}
END_TEST

/* ---- 6. strangers on the leader's port ---------------------------------------------- */

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
	struct node n[2] = { 0 };
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
		raw_expect_error(&r, NODES(&n[0], &n[1]), g->want);
	} else {
		raw_wait_eof(&r, NODES(&n[0], &n[1]), 3000);
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
	ck_assert(PUMP_UNTIL(1000, log_dropped() > dropped, &n[0], &n[1]));

	ping_pong(&n[0], &n[1]);
	ck_assert_ptr_eq(rk_world_link(n[0].w, 1), l);
	ck_assert(rk_link_up(l));
	ck_assert_int_eq(n[0].nerr, 0);
	ck_assert_int_eq(n[1].nerr, 0);
	ck_assert_int_eq(rk_world_failed(n[0].w), 0);
	raw_close(&r);
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* Many silent sockets: the leader bounds them (RK_MAX_PENDING, 64) and drops the rest. */
START_TEST(test_pending_flood)
{
	enum { FLOOD = 80 };
	struct node n[2] = { 0 };
	struct rk_config c;
	struct raw *r;
	struct rk_world_stats ws;
	int port, i, closed = 0;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 2000 * MS;
	rk__config_tuning(&c)->handshake_timeout_ns = 2000 * MS;
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
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* ---- 7. bad frames on an established link ------------------------------------------- */

enum { B_SEQ, B_TYPE, B_TOOBIG, B_PAYCRC, B_HELLO, B_SRC, B_FLAGS, B_RESERVED };

static const struct badframe {
	const char *name;
	int kind;
	int want;
} badframes[] = {
	{ "sequence gap", B_SEQ, -RK_ESEQ },
	{ "unknown type", B_TYPE, -RK_ETYPE },
	{ "length past max_frame", B_TOOBIG, -RK_ETOOBIG },
	{ "payload CRC", B_PAYCRC, -RK_EPAYCRC },
	{ "second HELLO", B_HELLO, -RK_EHANDSHAKE },
	{ "another src_rank", B_SRC, -RK_ERANK },
	{ "undefined flag", B_FLAGS, -RK_EFLAGS },
	{ "USER reserved field", B_RESERVED, -RK_ERESERVED },
};

START_TEST(test_bad_frame)
{
	const struct badframe *b = &badframes[_i];
	static const uint8_t user8[8] = { TAG_PLAIN, 0, 0, 0, 0, 0, 0, 0 };
	struct node n[2] = { 0 };
	struct rk_config c;
	struct raw r;
	uint8_t f[256], hello[RK_WIRE_HELLO_LEN], *big;
	int port, i;

	cfg_base(&c, 0, 3, 0);
	c.peer_timeout_ns = 5000 * MS;	/* the raw rank sends no heartbeats */
	c.max_frame = 64u << 10;
	port = start_world(n, 2, &c);
	raw_connect(&r, port, 0);
	raw_join(&r, NODES(&n[0], &n[1]), 2, 3);
	ck_assert(PUMP_UNTIL(3000, n[0].ready, &n[0], &n[1]));
	/* a good frame first: the raw rank is a working member */
	raw_send_frame(&r, RK_FRAME_USER, 0, 2, user8, sizeof(user8));
	ck_assert(PUMP_UNTIL(3000, n[0].nrx == 1, &n[0], &n[1]));
	ck_assert_int_eq(n[0].rx[0].peer, 2);
	ping_pong(&n[0], &n[1]);

	switch (b->kind) {
	case B_SEQ:
		raw_send(&r, f, make_frame(f, RK_FRAME_USER, 0, 2, r.seq + 5, user8, 8));
		break;
	case B_TYPE:
		make_frame(f, RK_FRAME_USER, 0, 2, r.seq, user8, 8);
		f[5] = RK_FRAME__COUNT + 3;
		reseal_hdr(f);
		raw_send(&r, f, RK_WIRE_HDR_LEN + 8);
		break;
	case B_TOOBIG:
		big = calloc(1, RK_WIRE_HDR_LEN + c.max_frame + 1);
		ck_assert_ptr_nonnull(big);
		make_frame(big, RK_FRAME_USER, 0, 2, r.seq, big + RK_WIRE_HDR_LEN,
			   c.max_frame + 1);
		raw_send(&r, big, RK_WIRE_HDR_LEN + 4096);	/* the header decides */
		free(big);
		break;
	case B_PAYCRC:
		make_frame(f, RK_FRAME_USER, 0, 2, r.seq, user8, 8);
		f[RK_WIRE_HDR_LEN + 7] ^= 0x40;
		raw_send(&r, f, RK_WIRE_HDR_LEN + 8);
		break;
	case B_HELLO:
		hello_payload(hello, RK_WIRE_VERSION, 3, 2, SESSION);
		raw_send(&r, f, make_frame(f, RK_FRAME_HELLO, 0, 2, r.seq, hello, sizeof(hello)));
		break;
	case B_SRC:
		raw_send(&r, f, make_frame(f, RK_FRAME_USER, 0, 1, r.seq, user8, 8));
		break;
	case B_FLAGS:
		make_frame(f, RK_FRAME_USER, 0, 2, r.seq, user8, 8);
		f[6] = 0x80;
		reseal_hdr(f);
		raw_send(&r, f, RK_WIRE_HDR_LEN + 8);
		break;
	case B_RESERVED:
		memcpy(hello, user8, 8);
		hello[5] = 1;
		raw_send(&r, f, make_frame(f, RK_FRAME_USER, 0, 2, r.seq, hello, 8));
		break;
	}
	raw_expect_error(&r, NODES(&n[0], &n[1]), b->want);
	ck_assert(PUMP_UNTIL(3000, n[0].nerr && n[1].nerr, &n[0], &n[1]));
	ck_assert_int_eq(n[0].nerr, 1);
	ck_assert_int_eq(n[0].errs[0].rank, 2);
	ck_assert_msg(n[0].errs[0].err == b->want, "leader: peer_error %s, want %s",
		      rk_errname(n[0].errs[0].err), rk_errname(b->want));
	/* rank 1 hears about rank 2 from the leader, and only that */
	for (i = 0; i < n[1].nerr; i++) {
		ck_assert_int_eq(n[1].errs[i].rank, 2);
		ck_assert_int_eq(n[1].errs[i].err, b->want);
	}
	for (i = 1; i < (int)n[0].nrx; i++)
		ck_assert_int_ne(n[0].rx[i].peer, 2);	/* the bad frame was not delivered */
	ck_assert_ptr_null(rk_world_link(n[0].w, 2));
	ck_assert(rk_link_up(rk_world_link(n[0].w, 1)));
	ck_assert(rk_link_up(rk_world_link(n[1].w, 0)));
	ping_pong(&n[0], &n[1]);
	raw_close(&r);
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* ---- 8. a peer that never reads ----------------------------------------------------- */

START_TEST(test_slow_peer)
{
	struct node n = { 0 };
	struct rk_config c;
	struct rk_link_stats st = { 0 };
	struct rk_link *l;
	struct raw r;
	uint8_t *payload;
	uint64_t sent = 0;
	uint32_t len = 16u << 10;
	int port, ret = 0;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 5000 * MS;	/* the raw rank sends no heartbeats */
	c.tx_limit = 256u << 10;
	port = start_world(&n, 1, &c);
	raw_connect(&r, port, 4096);
	raw_join(&r, NODES(&n), 1, 2);
	ck_assert(PUMP_UNTIL(3000, n.ready, &n));

	payload = calloc(1, len);
	ck_assert_ptr_nonnull(payload);
	payload[0] = TAG_PLAIN;
	while ((l = rk_world_link(n.w, 1))) {
		rk_link_stats(l, &st, sizeof(st));
		ret = rk_world_send(n.w, 1, RK_FRAME_USER, 0, payload, len);
		if (ret)
			break;
		sent += len;
		ck_assert_msg(sent < (64u << 20), "64 MiB queued to a peer that does not read");
		pump_once(NODES(&n));
	}
	ck_assert_msg(ret == -RK_ESLOWPEER, "send: %s", rk_errname(ret));
	ck_assert_uint_le(st.tx_queued_max, c.tx_limit);
	ck_assert_uint_ge(st.tx_queued_max, c.tx_limit - len - RK_WIRE_HDR_LEN);
	ck_assert_int_eq(n.nerr, 1);
	ck_assert_int_eq(n.errs[0].rank, 1);
	ck_assert_int_eq(n.errs[0].err, -RK_ESLOWPEER);
	ck_assert_ptr_null(rk_world_link(n.w, 1));
	ck_assert_int_eq(rk_world_send(n.w, 1, RK_FRAME_USER, 0, payload, 8), -ENOTCONN);
	free(payload);
	/* the leader closes the socket (after what the kernel already holds) */
	raw_wait_eof(&r, NODES(&n), 5000);
	raw_close(&r);
	node_stop(&n);
}
END_TEST

/*
 * A link that failed and is still flushing its ERROR frame behind megabytes
 * the peer never reads is no longer in the world's rank table, yet
 * rk_world_destroy() must cut it after the grace period and return.
 */
START_TEST(test_destroy_cuts_flushing_link)
{
	struct node n = { 0 };
	struct rk_config c;
	struct raw r;
	uint8_t *payload;
	uint32_t len = 64u << 10, i;
	uint64_t t0;
	int port;

	cfg_base(&c, 0, 2, 0);
	c.peer_timeout_ns = 5000 * MS;	/* the raw rank sends no heartbeats */
	port = start_world(&n, 1, &c);
	raw_connect(&r, port, 4096);
	raw_join(&r, NODES(&n), 1, 2);
	ck_assert(PUMP_UNTIL(3000, n.ready, &n));

	payload = calloc(1, len);
	ck_assert_ptr_nonnull(payload);
	payload[0] = TAG_PLAIN;
	for (i = 0; i < 64; i++) {	/* 4 MiB the peer will never read */
		ck_assert_int_eq(rk_world_send(n.w, 1, RK_FRAME_USER, 0, payload, len), 0);
		pump_once(NODES(&n));
	}
	free(payload);
	/* a frame out of sequence: the leader fails the link and queues an ERROR
	 * behind everything still unsent */
	r.seq += 5;
	raw_send_frame(&r, RK_FRAME_USER, 0, 1, (const uint8_t[8]){ 0 }, 8);
	ck_assert(PUMP_UNTIL(3000, n.nerr, &n));
	ck_assert_int_eq(n.errs[0].err, -RK_ESEQ);
	ck_assert_ptr_null(rk_world_link(n.w, 1));

	t0 = rk_test_now_ns();
	node_stop(&n);		/* must not wait for the peer to read */
	ck_assert_uint_lt((rk_test_now_ns() - t0) / MS, 2000);
	raw_close(&r);
}
END_TEST

/* ---- 9. bootstrap ------------------------------------------------------------------- */

/* A follower started first keeps retrying and joins when the leader appears. */
START_TEST(test_follower_first)
{
	struct node n[2] = { 0 };
	struct rk_config c;
	int port = rk_test_free_port();

	ck_assert_int_gt(port, 0);
	cfg_base(&c, 1, 2, port);
	c.peer_timeout_ns = 2000 * MS;
	node_start(&n[1], &c);
	PUMP_FOR(200, &n[1]);
	ck_assert_int_eq(n[1].ready, 0);
	ck_assert_int_eq(n[1].nerr, 0);
	ck_assert_int_eq(rk_world_failed(n[1].w), 0);
	c.rank = 0;
	node_start(&n[0], &c);
	ck_assert_int_eq(rk_world_port(n[0].w), port);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[1].ready, &n[0], &n[1]));
	ping_pong(&n[0], &n[1]);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* No leader: -RK_ETIMEOUT after connect_timeout, whatever the heartbeat period. */
static const uint64_t no_leader_hb_ms[] = { 20, 1000 };

START_TEST(test_no_leader)
{
	struct node n = { 0 };
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
	node_start(&n, &c);
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
	node_stop(&n);
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
	struct node n = { 0 };
	struct rk_world *w = NULL;
	struct rk_loop *loop;
	struct rk_config c;

	cfg_base(&c, b->rank, b->size, 0);
	snprintf(c.leader, sizeof(c.leader), "%s", b->leader);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	/* 0: no such device with verbs, built without verbs otherwise */
	ck_assert_int_eq(rk_world_create(loop, &node_ops, &n, &w),
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
	struct node n = { 0 };
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
	ck_assert_int_eq(rk_world_create(loop, &node_ops, &n, &w), -EADDRINUSE);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	close(fd);

	/* two leaders on one port */
	cfg_base(&c, 0, 2, 0);
	node_start(&n, &c);
	port = rk_world_port(n.w);
	cfg_base(&c, 0, 2, port);
	ck_assert_int_eq(rk_loop_create(&c, &loop), 0);
	ck_assert_int_eq(rk_world_create(loop, &node_ops, &n, &w), -EADDRINUSE);
	ck_assert_int_eq(rk_loop_destroy(loop), 0);
	node_stop(&n);
}
END_TEST

START_TEST(test_world_of_one)
{
	struct node n = { 0 };
	struct rk_config c;

	cfg_base(&c, 0, 1, 0);
	c.leader[0] = '\0';
	node_start(&n, &c);
	ck_assert_int_eq(n.ready, 1);
	ck_assert_int_eq(rk_world_wait_ready(n.w), 0);
	ck_assert_int_eq(rk_world_broadcast(n.w, RK_FRAME_USER, 0, "12345678", 8), 0);
	ck_assert_int_eq(rk_world_send(n.w, 0, RK_FRAME_USER, 0, "12345678", 8), -ENOTCONN);
	ck_assert_int_eq(rk_world_port(n.w), -ENOTCONN);
	node_stop(&n);
}
END_TEST

/* ---- 9. trust: strangers who know the port but not the secret ---------------------- */

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

/* Pump until the leader's world reports @rank failed (peer_error). */
static bool saw_error_for(const struct node *n, int rank)
{
	int i;

	for (i = 0; i < n->nerr && i < MAX_ERRS; i++)
		if (n->errs[i].rank == rank)
			return true;
	return false;
}

/*
 * A world of 3 whose rank 2 has not joined yet: a stranger tries to take that
 * rank (or another) without the secret. It is refused with RK_EAUTH or
 * RK_ERANK, holds no rank meanwhile, the counters say why, nothing leaks into
 * the log, and the real rank 2 then joins.
 */
START_TEST(test_stranger)
{
	const struct stranger *g = &strangers[_i];
	struct node n[3] = { 0 };
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
		ck_assert_int_eq(node_create(&n[0], &c), -EOPNOTSUPP);
		return;
	}
	c.peer_timeout_ns = 5000 * MS;	/* raw peers send no heartbeats */
	port = start_world(n, 2, &c);
	ck_assert_int_eq(n[0].ready, 0);
	rk_world_stats(n[0].w, &st0, sizeof(st0));

	if (g->kind == S_REPLAY) {
		/* first a real handshake as rank 2, recorded; then rank 2 goes away */
		raw_connect(&rec, port, 0);
		raw_join_key(&rec, NODES(&n[0], &n[1]), 2, 3, SECRET, rec_hello, rec_auth);
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
		ck_assert_int_eq(raw_next(&r, NODES(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
		memcpy(welcome, pl, sizeof(welcome));
		ck_assert_int_eq(raw_next(&r, NODES(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
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
		raw_expect_error(&r, NODES(&n[0], &n[1]), g->want);
	} else {
		/* it never proves anything: dropped when its handshake time is up */
		ck_assert_int_eq(raw_next(&r, NODES(&n[0], &n[1]), 3000, &h, pl, sizeof(pl)), 1);
		ck_assert_uint_eq(h.type, RK_FRAME_WELCOME);
		ck_assert_ptr_null(rk_world_link(n[0].w, 2));	/* it holds no rank */
		raw_wait_eof(&r, NODES(&n[0], &n[1]), 3000);
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
	node_start(&n[2], &c);
	ck_assert(PUMP_UNTIL(5000, n[2].ready && rk_world_link(n[0].w, 2), &n[0], &n[1], &n[2]));
	ping_pong(&n[0], &n[2]);
	ck_assert(!g_log_leak);
	node_stop(&n[2]);
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* A stranger mid-handshake for rank 2 does not keep the real rank 2 out. */
START_TEST(test_stranger_holds_no_rank)
{
	struct node n[3] = { 0 };
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
	node_start(&n[2], &c);
	if (!g_auth) {
		/* without a secret nothing tells them apart: the first HELLO wins */
		ck_assert(PUMP_UNTIL(3000, n[2].nerr > 0, &n[0], &n[1], &n[2]));
		ck_assert_int_eq(n[2].errs[0].err, -RK_ERANK);
	} else {
		ck_assert(PUMP_UNTIL(5000, n[0].ready && n[2].ready, &n[0], &n[1], &n[2]));
		ping_pong(&n[0], &n[2]);
	}
	raw_close(&r);
	node_stop(&n[2]);
	node_stop(&n[1]);
	node_stop(&n[0]);
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
static void fake_leader_accept(struct fake_leader *f, struct node *n, uint8_t *hello)
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
		pump_once(&n, 1);
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
	struct node n = { 0 };
	struct fake_leader f;
	struct rk_config c;
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];

	if (!rk__auth_available())
		return;
	fake_leader_listen(&f);
	cfg_base(&c, 1, 2, f.port);
	node_start(&n, &c);
	fake_leader_accept(&f, &n, hello);
	ck_assert_uint_eq(hello[12], RK_WIRE_AUTH_HMAC);
	raw_hello(welcome, 0, 2, _i == 0, 0x33);
	raw_send_frame(&f.r, RK_FRAME_WELCOME, 0, 0, welcome, sizeof(welcome));
	if (_i == 0) {	/* a proof made with a guess */
		raw_proof(WRONG_SECRET, RK__AUTH_LEADER, hello, welcome, mac);
		raw_send_frame(&f.r, RK_FRAME_AUTH, 0, 0, mac, sizeof(mac));
	}			/* else: it claims to use no secret */
	raw_expect_error_from(&f.r, NODES(&n), -RK_EAUTH, 1);
	ck_assert(PUMP_UNTIL(3000, n.nerr > 0, &n));
	ck_assert_int_eq(n.errs[0].rank, 0);
	ck_assert_msg(n.errs[0].err == -RK_EAUTH, "peer_error %s", rk_errname(n.errs[0].err));
	ck_assert_int_eq(n.ready, 0);
	raw_close(&f.r);
	close(f.ls);
	node_stop(&n);
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
	struct node n = { 0 };
	struct fake_leader f;
	struct rk_config c;
	struct rk_wire_hdr h;
	uint8_t hello[RK_WIRE_HELLO_LEN], welcome[RK_WIRE_HELLO_LEN], mac[RK_WIRE_MAC_LEN];
	uint8_t pl[512];
	int m;

	fake_leader_listen(&f);
	cfg_base(&c, 1, 2, f.port);
	node_start(&n, &c);
	fake_leader_accept(&f, &n, hello);
	raw_hello(welcome, 0, 2, g_auth, 0x34);
	raw_send_frame(&f.r, RK_FRAME_WELCOME, 0, 0, welcome, sizeof(welcome));
	if (g_auth) {
		raw_proof(SECRET, RK__AUTH_LEADER, hello, welcome, mac);
		raw_send_frame(&f.r, RK_FRAME_AUTH, 0, 0, mac, sizeof(mac));
		ck_assert_int_eq(raw_next(&f.r, NODES(&n), 3000, &h, pl, sizeof(pl)), 1);
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
	node_stop(&n);
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
	struct node n[2] = { 0 };
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
	raw_expect_error(&r, NODES(&n[0], &n[1]), b->want);
	rk_world_stats(n[0].w, &ws, sizeof(ws));
	ck_assert_uint_eq(ws.refused_timeout, 0);	/* the header's answer, not the timeout's */
	raw_close(&r);
	ping_pong(&n[0], &n[1]);
	node_stop(&n[1]);
	node_stop(&n[0]);
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
	struct node n[2] = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	struct raw *r;
	int port, i, closed;

	cfg_base(&c, 0, 2, 0);
	/* only eviction may close them */
	rk__config_tuning(&c)->handshake_timeout_ns = 30000 * MS;
	rk__config_tuning(&c)->max_pending = 16;
	node_start(&n[0], (c.rank = 0, &c));
	port = rk_world_port(n[0].w);
	r = calloc(IDLE, sizeof(*r));
	ck_assert_ptr_nonnull(r);
	for (i = 0; i < IDLE; i++) {
		raw_connect(&r[i], port, 0);
		if (i % 16 == 15)
			PUMP_FOR(2, &n[0]);	/* the accept queue holds 128 */
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
	node_start(&n[1], &c);
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
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/*
 * A flood of refusals costs one log line, then one summary line per
 * RK_REFUSED_LOG_MS with the counts; the counters hold every one.
 */
START_TEST(test_refusal_log_rate)
{
	enum { FLOOD = 100 };
	struct node n = { 0 };
	struct rk_config c;
	struct rk_world_stats st;
	unsigned int lines0;
	uint64_t t0, el;
	struct raw r;
	int port, i;

	cfg_base(&c, 0, 2, 0);
	rk__config_tuning(&c)->refused_log_ns = 300 * MS;
	node_start(&n, &c);
	port = rk_world_port(n.w);
	lines0 = log_dropped();
	t0 = rk_test_now_ns();
	for (i = 0; i < FLOOD; i++) {
		raw_connect(&r, port, 0);
		raw_send(&r, "GET / HTTP/1.0\r\n\r\n", 18);
		raw_wait_eof(&r, NODES(&n), 3000);
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
	node_stop(&n);
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
	struct node n[2] = { 0 };
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
	node_start(&n[0], &c);
	c.rank = 1;
	snprintf(c.leader, sizeof(c.leader), "dummy://127.0.0.1:%d", rk_world_port(n[0].w));
	node_start(&n[1], &c);
	ck_assert(PUMP_UNTIL(5000, n[0].ready && n[1].ready, &n[0], &n[1]));
	ping_pong(&n[0], &n[1]);
	ck_assert_uint_ge(g_dummy_connects, 1);
	ck_assert_uint_ge(g_dummy_accepts, 1);
	ck_assert_uint_eq(g_dummy_prepared, 2);
	node_stop(&n[1]);
	node_stop(&n[0]);
	ck_assert_uint_eq(g_dummy_released, 2);
	rk__transport_unregister(&dummy_class);
	ck_assert_ptr_null(rk__transport_find("dummy"));
}
END_TEST

/* ---- application messages and the world's teardown (rk_world_send_user, destroy) ---- */

/* The caller's bytes, any bytes, arrive as they were sent; the link stays up. */
START_TEST(test_send_user)
{
	struct node n[2] = { 0 };
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
	for (i = 0; i < n[1].nrx && frame_tag(&n[1].rx[i]) != 0xab12; i++)
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
	node_stop(&n[1]);
	node_stop(&n[0]);
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
	struct node n[2] = { 0 };
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
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* rk_world_destroy() from inside one of the loop's callbacks refuses; the world lives on. */
struct destroy_cb {
	struct rk_timer t;
	struct node *n;
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
	struct node n[2] = { 0 };
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
	node_stop(&n[1]);
	node_stop(&n[0]);
}
END_TEST

/* ---- the suite ---------------------------------------------------------------------- */

static TCase *new_tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, TIMEOUT_S);
	tcase_add_checked_fixture(tc, log_setup, log_teardown);
	suite_add_tcase(s, tc);
	return tc;
}

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

static Suite *world_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc;

	tc = new_tcase(s, "link");
	tcase_add_test(tc, test_heartbeat_every_tick);
	tcase_add_test(tc, test_frames_both_ways);
	tcase_add_test(tc, test_frame_claims);
	tcase_add_test(tc, test_send_from_ready);
	tcase_add_test(tc, test_flush_now);
	tcase_add_test(tc, test_burst);
	tcase_add_test(tc, test_reserve_commit);
	tcase_add_test(tc, test_big_frames);

	tc = new_tcase(s, "threads");
	tcase_add_loop_test(tc, test_world_of_4, 0, 2);

	tc = new_tcase(s, "process");
	tcase_add_test(tc, test_two_processes);
	tcase_add_loop_test(tc, test_peer_closes, 0, 2);
	tcase_add_test(tc, test_peer_silent);

	tc = new_tcase(s, "strangers");
	tcase_add_loop_test(tc, test_garbage, 0, ARRAY_SIZE(garbage));
	tcase_add_test(tc, test_pending_flood);

	tc = new_tcase(s, "trust");
	tcase_add_loop_test(tc, test_stranger, 0, ARRAY_SIZE(strangers));
	tcase_add_test(tc, test_stranger_holds_no_rank);
	tcase_add_loop_test(tc, test_follower_refuses_fake_leader, 0, 2);
	tcase_add_loop_test(tc, test_error_rank_checked, 0, 3);
	tcase_add_loop_test(tc, test_stranger_big_frame, 0, ARRAY_SIZE(big_frames));
	tcase_add_test(tc, test_pending_evict);
	tcase_add_test(tc, test_refusal_log_rate);
	tcase_add_test(tc, test_transport_class);

	tc = new_tcase(s, "bad_frames");
	tcase_add_loop_test(tc, test_bad_frame, 0, ARRAY_SIZE(badframes));
	tcase_add_test(tc, test_slow_peer);
	tcase_add_test(tc, test_destroy_cuts_flushing_link);

	tc = new_tcase(s, "bootstrap");
	tcase_add_test(tc, test_follower_first);
	tcase_add_loop_test(tc, test_no_leader, 0, ARRAY_SIZE(no_leader_hb_ms));
	tcase_add_loop_test(tc, test_bad_config, 0, ARRAY_SIZE(bad_cfgs));
	tcase_add_test(tc, test_port_in_use);
	tcase_add_test(tc, test_world_of_one);

	tc = new_tcase(s, "app_and_teardown");
	tcase_add_test(tc, test_send_user);
	tcase_add_test(tc, test_destroy_runs_nothing_else);
	tcase_add_test(tc, test_destroy_from_callback);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(world_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
