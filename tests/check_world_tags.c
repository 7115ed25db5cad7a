// SPDX-License-Identifier: MIT
/*
 * check_world_tags: frame tags (WIRE.md, "Frame tags", RK_FRAME_AUTH=on) on two
 * ranks in one process. Over TCP every frame after the handshake carries a
 * tag: frames round-trip through a relay that parses them as tagged; a relay
 * that flips one payload bit (fixing both CRCs, as an attacker would), replays
 * a frame or swaps two makes the receiver fail its link with RK_EFRAMEAUTH,
 * and the frame never reaches the application. Same-host shared memory
 * carries no tags. Ranks that disagree on tags are refused at the handshake.
 */
#define _GNU_SOURCE
#include <fcntl.h>

#include "world_test.h"
#include "link_int.h"

enum attack { A_NONE, A_FLIP, A_REPLAY, A_REORDER };

/* One direction of the relay: bytes read, parsed frame by frame. */
struct relay_dir {
	int from, to;
	uint8_t *buf;
	size_t len, cap;
	unsigned int frames;		/* frames forwarded (or held) */
	unsigned int user;		/* USER frames among them, once armed */
	uint8_t *held;			/* A_REORDER: the first USER frame, held back */
	size_t held_len;
};

/* A man in the middle between a follower and the leader, on loopback. */
struct relay {
	int ls, port, leader_port;
	struct relay_dir f2l, l2f;
	enum attack attack;
	bool armed;			/* attack the leader's next USER frames */
	bool struck;			/* the attack was made */
};

/* Handshake frames each way that carry no tag: HELLO and AUTH from the
 * follower, WELCOME and AUTH from the leader. */
#define UNTAGGED_FRAMES	2

static void relay_listen(struct relay *r, int leader_port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t al = sizeof(a);

	memset(r, 0, sizeof(*r));
	r->leader_port = leader_port;
	r->f2l.from = r->f2l.to = r->l2f.from = r->l2f.to = -1;
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	r->ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	ck_assert_int_ge(r->ls, 0);
	ck_assert_int_eq(bind(r->ls, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(r->ls, 4), 0);
	ck_assert_int_eq(getsockname(r->ls, (struct sockaddr *)&a, &al), 0);
	r->port = ntohs(a.sin_port);
}

static void dir_send(struct relay_dir *d, const uint8_t *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = send(d->to, p, n, MSG_NOSIGNAL);
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0)
			return;		/* that side is gone: what it misses is moot */
		p += w;
		n -= (size_t)w;
	}
}

/* Forward one whole frame @f of @n bytes (@h its header), attacked as armed. */
static void relay_frame(struct relay *r, struct relay_dir *d, const struct rk_wire_hdr *h,
			uint8_t *f, size_t n)
{
	uint8_t *pl = f + RK_WIRE_HDR_LEN;

	d->frames++;
	if (d != &r->l2f || !r->armed || h->type != RK_FRAME_USER) {
		dir_send(d, f, n);
		return;
	}
	d->user++;
	switch (r->attack) {
	case A_FLIP:		/* one bit of the data, both CRCs fixed: only the tag tells */
		if (d->user == 1) {
			pl[h->len - 1] ^= 0x04;
			put32(f + 24, rk_wire_crc32c(0, pl, h->len));
			reseal_hdr(f);
			r->struck = true;
		}
		break;
	case A_REPLAY:
		if (d->user == 1) {
			dir_send(d, f, n);
			r->struck = true;
		}
		break;
	case A_REORDER:
		if (d->user == 1) {
			d->held = malloc(n);
			ck_assert_ptr_nonnull(d->held);
			memcpy(d->held, f, n);
			d->held_len = n;
			return;
		}
		if (d->user == 2) {
			dir_send(d, f, n);
			dir_send(d, d->held, d->held_len);
			r->struck = true;
			return;
		}
		break;
	case A_NONE:
		break;
	}
	dir_send(d, f, n);
}

/* Read what @d's source sent and forward its whole frames; a frame after the
 * handshake must carry its tag (else the parse below would go astray). */
static void relay_dir_step(struct relay *r, struct relay_dir *d)
{
	struct rk_wire_hdr h;
	int64_t total;
	size_t off = 0, n;
	ssize_t got;

	if (d->from < 0)
		return;
	for (;;) {
		if (d->len == d->cap) {
			d->cap = d->cap ? 2 * d->cap : 65536;
			d->buf = realloc(d->buf, d->cap);
			ck_assert_ptr_nonnull(d->buf);
		}
		got = recv(d->from, d->buf + d->len, d->cap - d->len, MSG_DONTWAIT);
		if (got <= 0)
			break;
		d->len += (size_t)got;
	}
	while (d->len - off >= RK_WIRE_HDR_LEN) {
		total = rk_wire_decode_hdr(d->buf + off, d->len - off, RK_WIRE_MAX_PAYLOAD, &h);
		ck_assert_msg(total > 0, "relay: a bad frame header: %s", rk_errname((int)total));
		n = (size_t)total + (d->frames >= UNTAGGED_FRAMES ? RK_WIRE_TAG_LEN : 0);
		if (d->len - off < n)
			break;
		relay_frame(r, d, &h, d->buf + off, n);
		off += n;
	}
	memmove(d->buf, d->buf + off, d->len - off);
	d->len -= off;
}

static void relay_step(struct relay *r)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fc, lc;

	if (r->f2l.from < 0) {
		fc = accept4(r->ls, NULL, NULL, SOCK_CLOEXEC);
		if (fc < 0)
			return;
		a.sin_port = htons((uint16_t)r->leader_port);
		a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
		lc = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		ck_assert_int_ge(lc, 0);
		ck_assert_int_eq(connect(lc, (struct sockaddr *)&a, sizeof(a)), 0);
		r->f2l.from = r->l2f.to = fc;
		r->f2l.to = r->l2f.from = lc;
	}
	relay_dir_step(r, &r->f2l);
	relay_dir_step(r, &r->l2f);
}

static void relay_close(struct relay *r)
{
	if (r->f2l.from >= 0)
		close(r->f2l.from);
	if (r->l2f.from >= 0)
		close(r->l2f.from);
	close(r->ls);
	free(r->f2l.buf);
	free(r->l2f.buf);
	free(r->l2f.held);
}

/* Pump both ranks and the relay until @cond or @ms; the value of @cond. */
#define RELAY_UNTIL(ms, cond, r, n)						\
	({									\
		uint64_t dl_ = rk_test_deadline_ms(ms);				\
		while (!(cond) && rk_test_now_ns() < dl_) {			\
			relay_step(r);						\
			pump(RANKS(&(n)[0], &(n)[1]));				\
		}								\
		(bool)(cond);							\
	})

/* A rank with frame tags on (or off: @tags) and the job's secret. */
static void cfg_tags(struct rk_config *c, int rank, bool tags)
{
	cfg_base(c, rank, 2, 0);
	c->peer_timeout_ns = 2000 * MS;	/* a stalled test thread must not look like a death */
	ck_assert_int_eq(rk_config_set(c, "frame_auth", tags ? "on" : "off", NULL, 0), 0);
}

/* Leader @n[0] and follower @n[1], the follower through @r; both ready. */
static void start_relayed(struct rank *n, struct relay *r, enum attack attack)
{
	struct rk_config c;

	cfg_tags(&c, 0, true);
	rank_start(&n[0], &c);
	relay_listen(r, rk_world_port(n[0].w));
	r->attack = attack;
	cfg_tags(&c, 1, true);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", r->port);
	rank_start(&n[1], &c);
	ck_assert_msg(RELAY_UNTIL(5000, n[0].ready && n[1].ready, r, n), "world not ready");
}

/* Both ends of both links tag (TCP), and a small and a large frame cross each
 * way through a relay that reads every frame after the handshake as tagged. */
START_TEST(test_tagged_round_trip)
{
	struct rank n[2] = { 0 };
	struct relay r;
	struct rk_link *l0, *l1;
	static uint8_t big[200000];

	if (!rk__auth_available())
		return;
	start_relayed(n, &r, A_NONE);
	l0 = rk_world_link(n[0].w, 1);
	l1 = rk_world_link(n[1].w, 0);
	ck_assert(l0->tags && l0->tx_tag && l0->rx_tag);
	ck_assert(l1->tags && l1->tx_tag && l1->rx_tag);
	ck_assert_str_eq(rk_link_transport(l0), "tcp");
	ck_assert_int_eq(send_user(&n[0], 1, TAG_PLAIN, "ping", 4), 0);
	ck_assert_int_eq(send_user(&n[1], 0, TAG_PLAIN, "pong", 4), 0);
	pattern(big, sizeof(big), 7);
	ck_assert_int_eq(send_user(&n[0], 1, TAG_BIG, big, sizeof(big)), 0);
	ck_assert_int_eq(send_user(&n[1], 0, TAG_BIG, big, sizeof(big)), 0);
	ck_assert(RELAY_UNTIL(5000, count_tag(&n[0], TAG_BIG) && count_tag(&n[1], TAG_BIG), &r, n));
	ck_assert_uint_eq(count_tag(&n[0], TAG_PLAIN), 1);
	ck_assert_uint_eq(count_tag(&n[1], TAG_PLAIN), 1);
	ck_assert_uint_eq(n[0].rx_bytes, 4 + sizeof(big));
	ck_assert_uint_eq(n[1].rx_bytes, 4 + sizeof(big));
	ck_assert_uint_eq(n[0].rx_hash, n[1].rx_hash);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	/* the relay parsed every frame after the handshake as tagged */
	ck_assert_uint_ge(r.l2f.frames, UNTAGGED_FRAMES + 2);
	relay_close(&r);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

static const struct {
	const char *name;
	enum attack attack;
	size_t delivered;	/* of the two frames attacked */
} attacks[] = {
	{ "one bit flipped, CRCs fixed", A_FLIP, 0 },
	{ "a frame replayed", A_REPLAY, 1 },
	{ "two frames swapped", A_REORDER, 0 },
};

/* The leader sends two USER frames; the relay attacks them. The follower fails
 * its link with RK_EFRAMEAUTH, and no attacked frame reaches it. */
START_TEST(test_relay_attack)
{
	struct rank n[2] = { 0 };
	struct relay r;

	if (!rk__auth_available())
		return;
	start_relayed(n, &r, attacks[_i].attack);
	ck_assert_int_eq(send_user(&n[0], 1, TAG_PLAIN, "before", 6), 0);
	ck_assert(RELAY_UNTIL(3000, count_tag(&n[1], TAG_PLAIN) == 1, &r, n));
	r.armed = true;
	ck_assert_int_eq(send_user(&n[0], 1, TAG_HI, "the first frame", 15), 0);
	ck_assert_int_eq(send_user(&n[0], 1, TAG_HI, "the second one", 14), 0);
	ck_assert_msg(RELAY_UNTIL(3000, n[1].nerr > 0, &r, n), "%s: the follower took it",
		      attacks[_i].name);
	ck_assert(r.struck);
	ck_assert_int_eq(n[1].errs[0].rank, 0);
	ck_assert_msg(n[1].errs[0].err == -RK_EFRAMEAUTH, "%s: %s", attacks[_i].name,
		      rk_errname(n[1].errs[0].err));
	ck_assert_uint_eq(count_tag(&n[1], TAG_HI), attacks[_i].delivered);
	if (attacks[_i].delivered)
		ck_assert_mem_eq(n[1].rx[n[1].nrx - 1].data + 8, "the first frame", 15);
	/* the leader hears of it: the follower told it, tagged, then closed */
	ck_assert(RELAY_UNTIL(3000, n[0].nerr > 0, &r, n));
	relay_close(&r);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* A follower whose tag policy differs from the leader's is refused by name. */
START_TEST(test_policy_mismatch)
{
	struct rank n[2] = { 0 };
	struct rk_config c;

	if (!rk__auth_available())
		return;
	cfg_tags(&c, 0, _i == 0);
	rank_start(&n[0], &c);
	cfg_tags(&c, 1, _i != 0);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", rk_world_port(n[0].w));
	rank_start(&n[1], &c);
	ck_assert(PUMP_UNTIL(3000, n[1].nerr > 0, &n[0], &n[1]));
	ck_assert_int_eq(n[1].errs[0].rank, 0);
	ck_assert_msg(n[1].errs[0].err == -RK_EAUTH, "%s", rk_errname(n[1].errs[0].err));
	ck_assert_int_eq(n[1].ready, 0);
	ck_assert_ptr_null(rk_world_link(n[0].w, 1));
	ck_assert_uint_ge(log_count(-1, "tags frames (RK_FRAME_AUTH=on)"), 1);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* Same-host shared memory: the link agreed on tags, its TCP frames carried
 * them, and once on the rings neither direction tags. */
START_TEST(test_shm_untagged)
{
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct rk_link *l0, *l1;

	if (!rk__auth_available())
		return;
	cfg_tags(&c, 0, true);
	c.shm = RK_SHM_ON;
	start_world(n, 2, &c);
	l0 = rk_world_link(n[0].w, 1);
	l1 = rk_world_link(n[1].w, 0);
	ck_assert(PUMP_UNTIL(5000, !strcmp(rk_link_transport(l0), "shm") &&
				   !strcmp(rk_link_transport(l1), "shm"), &n[0], &n[1]));
	ck_assert(l0->tags && l1->tags);
	ck_assert(!l0->tx_tag && !l0->rx_tag && !l1->tx_tag && !l1->rx_tag);
	ping_pong(&n[0], &n[1]);
	ping_pong(&n[1], &n[0]);
	ck_assert_int_eq(n[0].nerr + n[1].nerr, 0);
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

static Suite *world_tags_suite(void)
{
	Suite *s = suite_create("world_tags");
	TCase *tc = world_tcase(s, "tags");

	tcase_add_test(tc, test_tagged_round_trip);
	tcase_add_loop_test(tc, test_relay_attack, 0, ARRAY_SIZE(attacks));
	tcase_add_loop_test(tc, test_policy_mismatch, 0, 2);
	tcase_add_test(tc, test_shm_untagged);
	return s;
}

int main(void)
{
	return rk_check_run(world_tags_suite());
}
