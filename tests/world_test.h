/* SPDX-License-Identifier: MIT */
/*
 * What the world suites (check_world, check_world_link, check_world_fail,
 * check_world_strangers) share: their ranks' configuration, a world started in
 * the test's thread, and raw sockets that play hand-driven or hostile peers,
 * with frames crafted through the wire API. Never installed.
 *
 * Most tests run every rank's loop in the test's own thread, one RK_RUN_NOWAIT
 * iteration each in turn (pump()), so assertions need no locks. Ports:
 * rk__addr_parse() refuses port 0, so the leader takes a port that a throwaway
 * socket just got from the kernel, and retries on -EADDRINUSE. Every test ends
 * with rk_world_destroy() and rk_loop_destroy() returning 0.
 *
 * CHECK_WORLD_VERBOSE=1 prints rankrt's log lines. RK_TEST_SHM=auto runs the
 * suites with same-host links allowed (tests/world-shm.sh): links then move to
 * shared memory after their handshake; the default keeps them on TCP.
 * RK_TEST_TAGS=on turns frame tags on (tests/world-tags.sh).
 */
#ifndef RK_WORLD_TEST_H
#define RK_WORLD_TEST_H

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include "rank_test.h"

#define TIMEOUT_S	30
#define SESSION		0x72616e6b72740001ull
#define SECRET		"check_world: the job's secret, 32+ bytes"
#define WRONG_SECRET	"check_world: a stranger's guess, 32 bytes"

/* Worlds authenticate whenever this build can (it has OpenSSL): the default. */
static bool g_auth;

/* The links' transport: TCP, or same-host shared memory (RK_TEST_SHM=auto). */
static inline enum rk_shm_mode test_shm(void)
{
	const char *s = getenv("RK_TEST_SHM");

	if (!s || !strcmp(s, "off"))
		return RK_SHM_OFF;
	if (!strcmp(s, "auto"))
		return RK_SHM_AUTO;
	ck_abort_msg("RK_TEST_SHM='%s': want auto or off", s);
	return RK_SHM_OFF;
}

/* Frame tags on every link (RK_TEST_TAGS=on, tests/world-tags.sh: the suites
 * whose peers are all ranks, not raw sockets that speak untagged frames). */
static inline bool test_tags(void)
{
	const char *s = getenv("RK_TEST_TAGS");

	if (!s || !strcmp(s, "off"))
		return false;
	if (!strcmp(s, "on"))
		return true;
	ck_abort_msg("RK_TEST_TAGS='%s': want on or off", s);
	return false;
}

/* ---- the log: what the leader said of strangers ----------------------------------- */

/* Checked fixture: runs in the test's process, creates no ring. */
static inline void world_setup(void)
{
	log_capture_start("CHECK_WORLD_VERBOSE");
}

/* Its teardown: rankrt's log back to stderr. */
static inline void world_teardown(void)
{
	log_capture_stop();
}

/* A TCase of the world suites: their timeout, the log captured. */
static inline TCase *world_tcase(Suite *s, const char *name)
{
	return rk_tcase(s, name, TIMEOUT_S, world_setup, world_teardown);
}

/* "refused a connection ... before its handshake" lines */
static inline unsigned int log_dropped(void)
{
	return log_count(-1, "refused a connection");
}

/* "refused N more connections ..." lines */
static inline unsigned int log_summaries(void)
{
	return log_count(-1, "more connections in the last");
}

/* Lines that held a byte of a secret. */
static inline unsigned int log_leaks(void)
{
	return log_count(-1, "secret, 32+") + log_count(-1, "guess, 32");
}

/* ---- a world in this thread ---------------------------------------------------------- */

/* A rank of the world suites: TCP unless RK_TEST_SHM says, authenticated where it can be. */
static inline void cfg_base(struct rk_config *c, int rank, int size, int port)
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
	if (g_auth && test_tags())
		ck_assert_int_eq(rk_config_set(c, "frame_auth", "on", NULL, 0), 0);
}

/*
 * Start the leader and followers 1..@nreal-1 of a world of @tmpl->world_size
 * ranks in this thread, and pump until every follower (and the leader, when
 * every rank is here) is ready. Return the leader's port.
 */
static inline int start_world(struct rank *n, int nreal, const struct rk_config *tmpl)
{
	struct rank *ns[8];
	struct rk_config c = *tmpl;
	uint64_t deadline = rk_test_deadline_ms(5000);
	int i, port, all;

	ck_assert_int_le(nreal, 8);
	c.rank = 0;
	rank_start(&n[0], &c);
	port = rk_world_port(n[0].w);
	ck_assert_int_gt(port, 0);
	ns[0] = &n[0];
	for (i = 1; i < nreal; i++) {
		c = *tmpl;
		c.rank = i;
		snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
		rank_start(&n[i], &c);
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
		pump(ns, (size_t)nreal);
	}
	return port;
}

/* A USER frame each way between @a and @b, both delivered. */
static inline void ping_pong(struct rank *a, struct rank *b)
{
	size_t ca = count_tag(a, TAG_PLAIN), cb = count_tag(b, TAG_PLAIN);

	ck_assert_int_eq(send_user(a, b->rank, TAG_PLAIN, "ping", 4), 0);
	ck_assert_int_eq(send_user(b, a->rank, TAG_PLAIN, "pong", 4), 0);
	ck_assert_msg(PUMP_UNTIL(3000, count_tag(a, TAG_PLAIN) > ca && count_tag(b, TAG_PLAIN) > cb,
				 a, b),
		      "ping-pong between ranks %d and %d did not complete", a->rank, b->rank);
}

/* Pseudo-random bytes from @seed. */
static inline void pattern(uint8_t *p, size_t n, uint32_t seed)
{
	size_t i;

	for (i = 0; i < n; i++) {
		seed = seed * 1103515245u + 12345u;
		p[i] = (uint8_t)(seed >> 16);
	}
}

/* ---- raw sockets: hostile or hand-driven peers -------------------------------------- */

/* A peer played by hand over a plain socket: what it read, and its send sequence. */
struct raw {
	int fd;
	uint8_t *buf;
	size_t len, cap;
	bool eof;
	int err;
	uint64_t seq;
	size_t discarded;	/* bytes raw_wait_eof() threw away */
};

/* Little-endian stores, for fields written by hand. */
static inline void put32(uint8_t *p, uint32_t v)
{
	p[0] = (uint8_t)v;
	p[1] = (uint8_t)(v >> 8);
	p[2] = (uint8_t)(v >> 16);
	p[3] = (uint8_t)(v >> 24);
}

static inline void put64(uint8_t *p, uint64_t v)
{
	put32(p, (uint32_t)v);
	put32(p + 4, (uint32_t)(v >> 32));
}

/* A HELLO/WELCOME payload with any field values (the encoder refuses some); no
 * authentication, a fixed nonce. */
static inline void hello_payload(uint8_t out[RK_WIRE_HELLO_LEN], uint32_t proto,
				 uint32_t size, uint32_t rank, uint64_t session)
{
	memset(out, 0, RK_WIRE_HELLO_LEN);
	put32(out, proto);
	put32(out + 4, size);
	put32(out + 8, rank);
	put64(out + 16, session);
	memset(out + 32, 0x5a, RK_WIRE_NONCE_LEN);
}

/* A frame into @out (32 + @len bytes). */
static inline size_t make_frame(uint8_t *out, unsigned int type, unsigned int flags,
				uint32_t src, uint64_t seq, const void *payload, uint32_t len)
{
	if (len)
		memcpy(out + RK_WIRE_HDR_LEN, payload, len);
	ck_assert_int_eq(rk_wire_encode_hdr(out, type, flags, src, seq, out + RK_WIRE_HDR_LEN, len),
			 RK_WIRE_HDR_LEN);
	return RK_WIRE_HDR_LEN + (size_t)len;
}

/* Rewrite the header CRC after editing header bytes. */
static inline void reseal_hdr(uint8_t *frame)
{
	put32(frame + 28, rk_wire_crc32c(0, frame, 28));
}

/* Connect @r to the leader's @port on 127.0.0.1 from @src (a loopback address;
 * NULL: the kernel's choice), receive buffer @rcvbuf (0: the default). */
static inline void raw_connect_from(struct raw *r, int port, const char *src, int rcvbuf)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	struct sockaddr_in b = { .sin_family = AF_INET };

	memset(r, 0, sizeof(*r));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	r->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(r->fd, 0);
	if (src) {
		ck_assert_int_eq(inet_pton(AF_INET, src, &b.sin_addr), 1);
		ck_assert_int_eq(bind(r->fd, (struct sockaddr *)&b, sizeof(b)), 0);
	}
	if (rcvbuf)
		ck_assert_int_eq(setsockopt(r->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf,
					    sizeof(rcvbuf)), 0);
	/* The kernel completes the handshake from the backlog: no loop needs to run. */
	ck_assert_int_eq(connect(r->fd, (struct sockaddr *)&a, sizeof(a)), 0);
	r->cap = 65536;
	r->buf = malloc(r->cap);
	ck_assert_ptr_nonnull(r->buf);
}

/* Connect @r to the leader's @port on loopback, receive buffer @rcvbuf (0: the default). */
static inline void raw_connect(struct raw *r, int port, int rcvbuf)
{
	raw_connect_from(r, port, NULL, rcvbuf);
}

/* Close @r's socket and free what it read. */
static inline void raw_close(struct raw *r)
{
	if (r->fd >= 0)
		close(r->fd);
	r->fd = -1;
	free(r->buf);
	r->buf = NULL;
}

/* Send @n bytes, all of them (a stranger's bytes need not be frames). */
static inline void raw_send(struct raw *r, const void *p, size_t n)
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
static inline void raw_send_frame(struct raw *r, unsigned int type, unsigned int flags,
				  uint32_t src, const void *payload, uint32_t len)
{
	uint8_t *f = malloc(RK_WIRE_HDR_LEN + (size_t)len);

	ck_assert_ptr_nonnull(f);
	raw_send(r, f, make_frame(f, type, flags, src, r->seq++, payload, len));
	free(f);
}

/* Take what the socket holds, without blocking. */
static inline void raw_poll(struct raw *r)
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
static inline int raw_pop(struct raw *r, struct rk_wire_hdr *h, uint8_t *pl, size_t cap)
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
static inline int raw_next(struct raw *r, struct rank **ns, size_t nn, unsigned int ms,
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
		pump(ns, nn);
	}
}

/* Pump until the leader closes @r (discarding what arrives). Return the ms it took. */
static inline uint64_t raw_wait_eof(struct raw *r, struct rank **ns, size_t nn, unsigned int ms)
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
		pump(ns, nn);
	}
}

/* Expect an ERROR frame with @code for the link itself from rank @src, then EOF. */
static inline void raw_expect_error_from(struct raw *r, struct rank **ns, size_t nn, int code,
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
static inline void raw_expect_error(struct raw *r, struct rank **ns, size_t nn, int code)
{
	raw_expect_error_from(r, ns, nn, code, 0);
}

/* A HELLO payload as a follower of @size would send it; @auth says whether it
 * claims to authenticate, @nonce_byte fills its nonce. */
static inline void raw_hello(uint8_t out[RK_WIRE_HELLO_LEN], uint32_t rank, uint32_t size,
			     bool auth, uint8_t nonce_byte)
{
	hello_payload(out, RK_WIRE_VERSION, size, rank, SESSION);
	put32(out + 12, auth ? RK_WIRE_AUTH_HMAC : RK_WIRE_AUTH_NONE);
	memset(out + 32, nonce_byte, RK_WIRE_NONCE_LEN);
}

/* The proof of @which over HELLO @hello and WELCOME @welcome, with @key. */
static inline void raw_proof(const char *key, enum rk__auth_label which, const uint8_t *hello,
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
static inline void raw_join_key(struct raw *r, struct rank **ns, size_t nn, uint32_t rank,
				uint32_t size, const char *key, uint8_t *hello_out,
				uint8_t *auth_out)
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
static inline void raw_join(struct raw *r, struct rank **ns, size_t nn, uint32_t rank,
			    uint32_t size)
{
	raw_join_key(r, ns, nn, rank, size, SECRET, NULL, NULL);
}

#endif /* RK_WORLD_TEST_H */
