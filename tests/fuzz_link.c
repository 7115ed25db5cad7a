/* SPDX-License-Identifier: MIT */
/*
 * libFuzzer harnesses for the link and world state machines (not the codec
 * alone: tests/fuzz_wire.c does that). One leader world lives for the whole
 * run; each input is one connection accepted on its port, played by an
 * in-memory transport (frames the leader sends are captured, the input's bytes
 * are what it receives), then torn down, so the world is the same for every
 * input.
 *
 *   fuzz_stranger (FUZZ_PEER 0): the connection is a stranger, who does not
 *     know the job's secret. The first byte picks how the rest is read:
 *     bit 0 set, as raw bytes in chunks (any split); clear, as a list of
 *     frames whose CRCs and sequence numbers the harness fills in, so the
 *     fuzzer reaches the handshake's checks rather than the CRC's. Bit 1 set
 *     plays the follower's side instead: a follower world whose leader (the
 *     input) answers its HELLO.
 *   fuzz_peer (FUZZ_PEER 1): the connection completes a real handshake as a
 *     follower holding the secret (the harness answers the leader's proof),
 *     then sends the input, read the same two ways, as an authenticated rank.
 *     The leader tags frames (RK_FRAME_AUTH=on): in the list of frames the
 *     harness seals each one as the follower would (WIRE.md, "Frame tags"),
 *     so the input reaches the frame handlers; raw bytes go as they are.
 *
 * Invariants checked on every input (abort() = a crash for libFuzzer): a
 * stranger never takes a rank or makes the world ready; peer_error() names a
 * rank of the world; frames reach the application only from an authenticated
 * rank whose src_rank matches; the leader's frames a module claims (as a
 * scheduler claims ROUND, ROUND_DONE and its backend's USER tags) reach that
 * claim instead, with the payload as the link decoded it, never the
 * application; every link is freed when its input ends.
 *
 * Built by tests/Makefile.inc with clang -fsanitize=fuzzer,address,undefined
 * over the library's own sources; tests/fuzz-smoke.sh runs both for a bounded
 * time from the seed corpus in tests/fuzz/.
 */
#include "config.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "wire_int.h"

#ifndef FUZZ_PEER
#define FUZZ_PEER 0
#endif

#define CHECK(x)                                                                     \
	do {                                                                         \
		if (!(x)) {                                                          \
			fprintf(stderr, "fuzz_link: %s:%d: %s\n", __FILE__, __LINE__, #x); \
			abort();                                                     \
		}                                                                    \
	} while (0)

#define SIZE	3
#define SESSION	0x66757a7a00000001ull
static const char secret[] = "fuzz_link: the job's secret, 32 bytes or more";

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* ---- an in-memory transport ----------------------------------------------------- */

struct mem_link {
	struct rk_link link;
};

static struct rk_link *g_link;		/* the input's connection, until it is freed */
static uint8_t g_out[1 << 16];		/* what the other side sent it */
static size_t g_out_len;

static void mem_flush(struct rk_link *l)
{
	const uint8_t *p;
	size_t n = rk__link_tx_next(l, &p), take;

	take = n < sizeof(g_out) - g_out_len ? n : sizeof(g_out) - g_out_len;
	memcpy(g_out + g_out_len, p, take);
	g_out_len += take;
	rk__link_tx_done(l, n);
}

static void mem_shutdown(struct rk_link *l)
{
	(void)l;	/* nothing in flight */
}

static void mem_destroy(struct rk_link *l)
{
	if (g_link == l)
		g_link = NULL;
	free(l);
}

static const struct rk__transport_ops mem_ops = {
	.name = "mem",
	.flush = mem_flush,
	.shutdown = mem_shutdown,
	.destroy = mem_destroy,
};

static struct rk_link *mem_new(struct rk_loop *loop, const struct rk__link_owner_ops *oops,
			       void *owner, enum rk__link_state state)
{
	struct mem_link *m = calloc(1, sizeof(*m));

	CHECK(m);
	rk__link_init(&m->link, loop, &mem_ops, oops, owner, state);
	snprintf(m->link.peer_addr, sizeof(m->link.peer_addr), "fuzz");
	g_link = &m->link;
	return &m->link;
}

static int mem_from_fd(struct rk_loop *loop, int fd, void *ctx,
		       const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	(void)ctx;
	close(fd);
	*out = mem_new(loop, oops, owner, RK_LINK_ACCEPTED);
	return 0;
}

static int mem_connect(struct rk_loop *loop, const struct rk__addr *a, void *ctx,
		       const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	(void)a, (void)ctx;
	*out = mem_new(loop, oops, owner, RK_LINK_CONNECTING);
	rk__link_connected(*out);	/* "connected" at once: HELLO goes out */
	return 0;
}

static const struct rk__transport_class mem_class = {
	.scheme = "fuzz",
	.connect = mem_connect,
	.from_fd = mem_from_fd,
};

/* ---- the worlds ------------------------------------------------------------------- */

static struct rk_loop *g_loop, *g_floop;	/* the leader's; the follower's */

/*
 * The loops' clock: still, so that no timer fires and no deadline passes
 * inside an input however loaded the machine, and an input does the same
 * every time it runs (a crash reproduces from its file alone, up to the
 * state earlier inputs leave).
 */
static uint64_t still_clock(void *arg)
{
	(void)arg;
	return 1000000000ull;
}
static struct rk_world *g_world;
static unsigned int g_frames_ok;		/* frames the application got this input */

/* The leader's claim: ROUND, ROUND_DONE, and USER frames tagged below CLAIM_TAGS. */
#define CLAIM_TAGS	0x80000000u

static bool claimed(const struct rk_wire_hdr *h, const uint8_t *payload)
{
	struct rk_wire_user u;

	if (h->type == RK_FRAME_ROUND || h->type == RK_FRAME_ROUND_DONE)
		return true;
	return h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u) &&
	       u.tag < CLAIM_TAGS;
}

static enum rk_activity on_claim(struct rk__claim *c, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, const union rk__wire_payload *p)
{
	union rk__wire_payload q;

	(void)c;
	CHECK(FUZZ_PEER);	/* strangers deliver nothing */
	CHECK(peer > 0 && peer < SIZE && h->src_rank == (uint32_t)peer);
	CHECK(claimed(h, payload));
	/* what the link handed on is the payload's decode */
	CHECK(rk__wire_decode(h->type, payload, h->len, &q) == 0);
	switch (h->type) {
	case RK_FRAME_ROUND:
		CHECK(p->round.round_id == q.round.round_id &&
		      p->round.n_streams == q.round.n_streams &&
		      p->round.n_tok_total == q.round.n_tok_total &&
		      p->round.n_draft_total == q.round.n_draft_total &&
		      p->round.streams == q.round.streams && p->round.tokens == q.round.tokens);
		break;
	case RK_FRAME_ROUND_DONE:
		CHECK(p->done.round_id == q.done.round_id && p->done.status == q.done.status &&
		      p->done.elapsed_ns == q.done.elapsed_ns);
		break;
	default:
		CHECK(p->user.tag == q.user.tag && p->user.len == q.user.len &&
		      p->user.data == q.user.data);
		break;
	}
	g_frames_ok++;
	return RK_BUSY;
}

static struct rk__claim g_claim = {
	.types = 1u << RK_FRAME_ROUND | 1u << RK_FRAME_ROUND_DONE,
	.tag = 0,
	.ntags = CLAIM_TAGS,
	.frame = on_claim,
};

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	(void)arg;
	CHECK(peer >= 0 && peer < rk_world_size(w) && peer != rk_world_rank(w));
	CHECK(h->src_rank == (uint32_t)peer);
	CHECK(rk_wire_decode_payload(h->type, payload, h->len) == 0);
	CHECK(w != g_world || !claimed(h, payload));	/* those went to the claim */
	CHECK(h->type != RK_FRAME_HELLO && h->type != RK_FRAME_WELCOME &&
	      h->type != RK_FRAME_AUTH && h->type != RK_FRAME_HEARTBEAT &&
	      h->type != RK_FRAME_BYE);
	CHECK(FUZZ_PEER || rk_world_rank(w) != 0);	/* strangers deliver nothing */
	g_frames_ok++;
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	(void)arg;
	CHECK(rank >= 0 && rank < rk_world_size(w));
	CHECK(err < 0);
}

static void on_ready(struct rk_world *w, void *arg)
{
	(void)arg;
	CHECK(rk_world_rank(w) != 0);	/* one input never brings all SIZE - 1 followers */
}

static const struct rk_world_ops ops = {
	.ready = on_ready,
	.frame = on_frame,
	.peer_error = on_peer_error,
};

static void fuzz_config(struct rk_config *c, int rank)
{
	rk_config_init(c);
	c->rank = rank;
	c->world_size = SIZE;
	snprintf(c->leader, sizeof(c->leader), "fuzz://127.0.0.1:%d", 40000 + (getpid() % 20000));
	c->session_id = SESSION;
	c->max_frame = 64u << 10;
	c->tx_limit = 1u << 20;
	c->log_level = RK_LOG_ERROR;
	c->connect_timeout_ns = 1000000000ull;
	CHECK(rk_config_set_secret(c, secret, sizeof(secret) - 1) == 0);
	if (FUZZ_PEER)
		CHECK(rk_config_set(c, "frame_auth", "on", NULL, 0) == 0);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
	struct rk_config c;
	int i;

	(void)argc, (void)argv;
	rk__log_set_level(RK_LOG_ERROR);
	CHECK(rk__transport_register(&mem_class) == 0);
	/* the leader listens on a real loopback socket (nothing connects to it) */
	fuzz_config(&c, 0);
	CHECK(rk_loop_create(&c, &g_loop) == 0);
	rk_loop_set_clock(g_loop, still_clock, NULL);
	for (i = 0; rk_world_create(g_loop, &ops, NULL, &g_world); i++) {
		CHECK(i < 50);	/* another port: this one is taken */
		CHECK(rk_loop_destroy(g_loop) == 0);
		snprintf(c.leader, sizeof(c.leader), "fuzz://127.0.0.1:%d", 20000 + (i * 7919 +
			 getpid()) % 40000);
		CHECK(rk_loop_create(&c, &g_loop) == 0);
		rk_loop_set_clock(g_loop, still_clock, NULL);
	}
	CHECK(rk__world_claim(g_world, &g_claim) == 0);
	fuzz_config(&c, 1);
	CHECK(rk_loop_create(&c, &g_floop) == 0);
	rk_loop_set_clock(g_floop, still_clock, NULL);
	return 0;
}

/* ---- feeding ---------------------------------------------------------------------- */

static void pump(struct rk_loop *loop)
{
	int i;

	for (i = 0; i < 3; i++)
		CHECK(rk_loop_run(loop, RK_RUN_NOWAIT) == 0);
}

static bool link_alive(void)
{
	return g_link && g_link->state <= RK_LINK_UP;
}

static void feed(struct rk_loop *loop, const uint8_t *p, size_t n)
{
	if (link_alive())
		rk__link_rx(g_link, p, n);
	pump(loop);
}

/* The follower's frame tags on the input's link, once its handshake is done
 * (fuzz_peer, when the link's frames carry tags): feed_frames() seals with it. */
static struct rk__tagger g_seal;
static bool g_sealing;

/* One frame with right CRCs, sequence number @seq and source @src. */
static size_t frame(uint8_t *out, unsigned int type, unsigned int flags, uint32_t src,
		    uint64_t seq, const uint8_t *payload, uint32_t len)
{
	memcpy(out + RK_WIRE_HDR_LEN, payload, len);
	if (rk_wire_encode_hdr(out, type, flags, src, seq, out + RK_WIRE_HDR_LEN, len) < 0) {
		/* a length or flag the type refuses: send it anyway, CRCs fixed */
		rk__le32_store(out, RK_WIRE_MAGIC);
		out[4] = RK_WIRE_VERSION;
		out[5] = (uint8_t)type;
		rk__le16_store(out + 6, (uint16_t)flags);
		rk__le32_store(out + 8, src);
		rk__le32_store(out + 12, len);
		rk__le64_store(out + 16, seq);
		rk__le32_store(out + 24, rk_wire_crc32c(0, out + RK_WIRE_HDR_LEN, len));
		rk__le32_store(out + 28, rk_wire_crc32c(0, out, 28));
	}
	return RK_WIRE_HDR_LEN + len;
}

/*
 * The input as frames: each is [type % 11][flags][len lo][len hi % 4][tweak] then
 * len payload bytes (fewer if the input ends). tweak bit 0 breaks the sequence
 * number, bit 1 the source rank, bit 2 the payload CRC, bit 3 the tag (when
 * sealing: the tag is made after the other tweaks, under the header's seq).
 */
static void feed_frames(struct rk_loop *loop, const uint8_t *p, size_t n, uint32_t src,
			uint64_t *seq)
{
	static uint8_t f[RK_WIRE_HDR_LEN + 1024 + RK__TAG_LEN];
	uint64_t s;
	unsigned int type, flags, tweak;
	size_t len, m;

	while (n >= 5 && link_alive()) {
		type = p[0] % (RK_FRAME__COUNT + 1);
		flags = p[1] & 0x83;
		len = (size_t)p[2] | (size_t)(p[3] % 4) << 8;
		tweak = p[4];
		p += 5;
		n -= 5;
		if (len > n)
			len = n;
		s = tweak & 1 ? *seq + 3 : *seq;
		m = frame(f, type, flags, tweak & 2 ? src ^ 1 : src, s, p, (uint32_t)len);
		if (tweak & 4)
			f[RK_WIRE_HDR_LEN + len / 2] ^= len ? 0x10 : 0;
		if (g_sealing) {
			CHECK(rk__tag_seal(&g_seal, s, f, m, f + m) == 0);
			if (tweak & 8)
				f[m + tweak % RK__TAG_LEN] ^= 0x01;
			m += RK__TAG_LEN;
		}
		(*seq)++;
		feed(loop, f, m);
		p += len;
		n -= len;
	}
}

/* The input as raw bytes, in chunks of 1..@max bytes taken from the input itself. */
static void feed_raw(struct rk_loop *loop, const uint8_t *p, size_t n, size_t max)
{
	size_t take;

	while (n && link_alive()) {
		take = 1 + (size_t)p[0] % max;
		take = take < n ? take : n;
		feed(loop, p, take);
		p += take;
		n -= take;
	}
}

/* The next whole frame the other side sent, from g_out at *@off. */
static bool next_out(size_t *off, struct rk_wire_hdr *h, const uint8_t **payload)
{
	int64_t total;

	if (*off >= g_out_len)
		return false;
	total = rk_wire_decode_hdr(g_out + *off, g_out_len - *off, RK_WIRE_MAX_PAYLOAD, h);
	CHECK(total > 0 && (size_t)total <= g_out_len - *off);	/* we only send good frames */
	CHECK(rk_wire_check_payload(h, g_out + *off + RK_WIRE_HDR_LEN) == 0);
	*payload = g_out + *off + RK_WIRE_HDR_LEN;
	*off += (size_t)total;
	return true;
}

/* Close the input's link, whatever its state, and let it be freed. */
static void finish(struct rk_loop *loop)
{
	if (g_link)
		rk__link_fail(g_link, -ECONNRESET, false);
	pump(loop);
	CHECK(!g_link);		/* every link is freed when its input ends */
}

static void accept_one(void)
{
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);

	CHECK(fd >= 0);
	g_out_len = 0;
	rk__world_accept(g_world, fd);
	CHECK(g_link && g_link->state == RK_LINK_ACCEPTED);
}

#if FUZZ_PEER
/* Complete a real handshake as rank @rank with the secret. */
static void handshake(uint32_t rank, const uint8_t nonce[RK_WIRE_NONCE_LEN])
{
	bool tags = rk__config_ctuning(rk_loop_config(g_loop))->frame_auth;
	struct rk_wire_hello h = {
		.proto_version = RK_WIRE_VERSION, .world_size = SIZE, .rank = rank,
		.auth = tags ? RK_WIRE_AUTH_TAGS : RK_WIRE_AUTH_HMAC, .session_id = SESSION,
	};
	uint8_t f[RK_WIRE_HDR_LEN + RK_WIRE_HELLO_LEN], t[RK__TRANSCRIPT_LEN], mac[RK_WIRE_MAC_LEN];
	struct rk_wire_hdr hdr;
	const uint8_t *pl;
	size_t off = 0;

	memcpy(h.nonce, nonce, RK_WIRE_NONCE_LEN);
	CHECK(rk_wire_encode_hello(t, RK_WIRE_HELLO_LEN, &h) == RK_WIRE_HELLO_LEN);
	feed(g_loop, f, frame(f, RK_FRAME_HELLO, 0, rank, 0, t, RK_WIRE_HELLO_LEN));
	if (!next_out(&off, &hdr, &pl) || hdr.type != RK_FRAME_WELCOME) {
		struct rk_wire_error e = { 0 };

		if (off && hdr.type == RK_FRAME_ERROR)
			rk_wire_decode_error(pl, hdr.len, &e);
		fprintf(stderr, "fuzz_link: HELLO as rank %u answered with %s %s (link %s, state %d)\n",
			rank, off ? rk_wire_frame_name(hdr.type) : "nothing",
			e.code ? rk_errname(e.code) : "", g_link ? "alive" : "gone",
			g_link ? (int)g_link->state : -1);
		abort();
	}
	memcpy(t + RK_WIRE_HELLO_LEN, pl, RK_WIRE_HELLO_LEN);
	CHECK(next_out(&off, &hdr, &pl) && hdr.type == RK_FRAME_AUTH);
	CHECK(rk__auth_mac((const uint8_t *)secret, sizeof(secret) - 1, RK__AUTH_LEADER, t, mac) == 0);
	CHECK(!memcmp(mac, pl, sizeof(mac)));	/* the leader proved the secret */
	CHECK(rk__auth_mac((const uint8_t *)secret, sizeof(secret) - 1, RK__AUTH_FOLLOWER, t, mac) ==
	      0);
	feed(g_loop, f, frame(f, RK_FRAME_AUTH, 0, rank, 1, mac, sizeof(mac)));
	CHECK(g_link && g_link->state == RK_LINK_UP && g_link->authed);
	CHECK(rk_world_link(g_world, (int)rank) == g_link);
	CHECK(g_link->tags == tags && g_link->rx_tag == tags);
	g_sealing = tags;
	if (tags) {	/* the follower seals with its role's key */
		CHECK(rk__auth_mac((const uint8_t *)secret, sizeof(secret) - 1,
				   RK__AUTH_TAG_FOLLOWER, t, mac) == 0);
		CHECK(rk__tagger_init(&g_seal, mac) == 0);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	uint8_t nonce[RK_WIRE_NONCE_LEN] = { 0 };
	uint32_t rank;
	uint64_t seq = 2;

	if (size < 2)
		return 0;
	rank = 1 + data[0] % (SIZE - 1);
	memcpy(nonce, data, size < sizeof(nonce) ? size : sizeof(nonce));
	g_frames_ok = 0;
	accept_one();
	handshake(rank, nonce);
	if (data[0] & 0x80)
		feed_raw(g_loop, data + 2, size - 2, 1 + data[1] % 64);
	else
		feed_frames(g_loop, data + 2, size - 2, rank, &seq);
	finish(g_loop);
	rk__tagger_fini(&g_seal);
	g_sealing = false;
	CHECK(!rk_world_link(g_world, (int)rank));	/* its rank is free again */
	return 0;
}
#else
/* The follower's side: a follower world whose leader is the input. */
static void follower(const uint8_t *data, size_t size)
{
	struct rk_world *w;
	struct rk_wire_hdr h;
	const uint8_t *pl;
	size_t off = 0;
	uint64_t seq = 0;

	g_out_len = 0;
	CHECK(rk_world_create(g_floop, &ops, NULL, &w) == 0);
	CHECK(g_link && g_link->state == RK_LINK_HELLO_SENT);
	pump(g_floop);		/* the HELLO leaves before the loop waits */
	CHECK(next_out(&off, &h, &pl) && h.type == RK_FRAME_HELLO);
	if (data[0] & 1)
		feed_raw(g_floop, data + 1, size - 1, 1 + data[0] % 97);
	else
		feed_frames(g_floop, data + 1, size - 1, 0, &seq);
	CHECK(rk_world_destroy(w) == 0);
	pump(g_floop);
	CHECK(!g_link);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct rk_world_stats before, after;
	uint64_t seq = 0;

	if (size < 1)
		return 0;
	g_frames_ok = 0;
	if (data[0] & 2) {
		follower(data, size);
		return 0;
	}
	rk_world_stats(g_world, &before, sizeof(before));
	accept_one();
	if (data[0] & 1)
		feed_raw(g_loop, data + 1, size - 1, 1 + data[0] % 61);
	else
		feed_frames(g_loop, data + 1, size - 1, 1 + data[0] % (SIZE - 1), &seq);
	/* a stranger, however it went: no rank, nothing delivered */
	CHECK(!rk_world_link(g_world, 1) && !rk_world_link(g_world, 2));
	CHECK(g_frames_ok == 0);
	finish(g_loop);
	rk_world_stats(g_world, &after, sizeof(after));
	CHECK(after.joined == before.joined);
	CHECK(after.accepted == before.accepted + 1);
	return 0;
}
#endif
