// SPDX-License-Identifier: MIT
/*
 * check_world_fail: how a world over loopback TCP (or shared memory,
 * RK_TEST_SHM=auto) sees its peers fail: a follower in a forked process that
 * leaves, dies (_exit, SIGKILL) or stops (SIGSTOP); a member that sends a bad
 * frame on an established link; a peer that never reads, and a destroy that
 * cuts a link still flushing to it.
 */
#define _GNU_SOURCE
#include <signal.h>

#include "world_test.h"

/* ---- a follower in another process ------------------------------------------------- */

/* The child's own reaction, besides the echo: die on TAG_DIE. */
static void child_hook(struct rank *n, int peer, const struct rk_wire_hdr *h, const uint8_t *p)
{
	struct rk_wire_user u;

	(void)n;
	(void)peer;
	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(p, h->len, &u) && u.tag == TAG_DIE)
		_exit(0);	/* abruptly: no BYE, no close by us */
}

/* A follower's life in its process: echo TAG_PING, leave on TAG_QUIT; 0 = all well. */
static int child_run(struct rank *n, const struct rk_config *c)
{
	if (rank_create(n, c))
		return 10;
	n->echo = true;
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

struct follower {
	int rank, size;
	uint64_t peer_timeout;
};

/* A follower process: its own loop, made after the fork. Its exit status. */
static int child_main(void *arg, int port)
{
	const struct follower *f = arg;
	struct rank n = { 0 };
	struct rk_config c;
	int ret;

	alarm((unsigned int)(20 * rk_test_slow()));	/* never outlive a failed test */
	cfg_base(&c, f->rank, f->size, port);
	c.peer_timeout_ns = f->peer_timeout;
	ret = child_run(&n, &c);
	rank_free(&n);
	return ret;
}

/* Fork a follower; it waits for the leader's port on *@port_fd (see give_port()). */
static pid_t spawn_follower(int rank, int size, uint64_t peer_timeout, int *port_fd)
{
	struct follower f = { rank, size, peer_timeout };

	return fork_follower(child_main, &f, port_fd);
}

START_TEST(test_two_processes)
{
	struct rank n = { 0 };
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
	rank_start(&n, &c);
	give_port(fd, rk_world_port(n.w));
	ck_assert(PUMP_UNTIL(5000, n.ready, &n));

	/* frames of many sizes and one of 1 MiB, echoed back in order */
	buf = malloc(1u << 20);
	ck_assert_ptr_nonnull(buf);
	for (k = 0; k <= 100; k++) {
		len = k == 100 ? (1u << 20) - 8 : k * 40;
		pattern(buf, len, k);
		ck_assert_int_eq(send_user(&n, 1, TAG_PING, buf, len), 0);
	}
	ck_assert(PUMP_UNTIL(10000, count_tag(&n, TAG_PONG) == 101, &n));
	for (i = 0, k = 0; i < n.nrx; i++) {
		if (n.rx[i].tag != TAG_PONG)
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
	st = reap_child(pid, RANKS(&n), 5000);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	PUMP_FOR(100, &n);
	ck_assert_int_eq(n.nerr, 1);
	ck_assert_ptr_null(rk_world_link(n.w, 1));
	ck_assert_int_eq(rk_world_failed(n.w), -RK_EPEERBYE);
	rank_stop(&n);
}
END_TEST

/* A world of 3; rank 1 is a process that dies: _exit() (0) or SIGKILL (1). */
START_TEST(test_peer_closes)
{
	struct rank n[3] = { 0 };
	struct rk_config c;
	int fd, st, port, err;
	pid_t pid;

	pid = spawn_follower(1, 3, 2000 * MS, &fd);
	cfg_base(&c, 0, 3, 0);
	/* long: a prompt report can only come from the closed socket */
	c.peer_timeout_ns = 2000 * MS;
	rank_start(&n[0], &c);
	port = rk_world_port(n[0].w);
	give_port(fd, port);
	c.rank = 2;
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", port);
	rank_start(&n[2], &c);
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
	st = reap_child(pid, RANKS(&n[0], &n[2]), 5000);
	if (_i == 0)
		ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x", st);
	else
		ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %#x", st);
	ck_assert_int_eq(n[0].nerr, 1);
	ck_assert_int_eq(n[2].nerr, 1);
	rank_stop(&n[2]);
	rank_stop(&n[0]);
}
END_TEST

/*
 * One pump of @n; *@t_last becomes the time before it when it took in a frame
 * from @peer (a count of @rx frames): no later than that frame's arrival as
 * the loop saw it, however late this thread runs.
 */
static void pump_track_rx(struct rank *n, int peer, uint64_t *rx, uint64_t *t_last)
{
	struct rk_link_stats ls;
	struct rk_link *l;
	uint64_t t = rk_test_now_ns();

	pump(RANKS(n));
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
	struct rank n = { 0 };
	struct rk_config c;
	uint64_t t_last = 0, rx = 0, el, deadline;
	int fd, st;
	pid_t pid;

	/* the follower's own timeout long: were it 200 ms, a leader thread that
	 * the machine starves that long would make it leave on its own (exit
	 * status 13, not the SIGKILL below) */
	pid = spawn_follower(1, 2, 2000 * MS, &fd);
	cfg_base(&c, 0, 2, 0);		/* peer_timeout 200 ms */
	rank_start(&n, &c);
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
	st = reap_child(pid, RANKS(&n), 5000);
	ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL, "child status %#x", st);
	ck_assert_int_eq(n.nerr, 1);
	rank_stop(&n);
}
END_TEST

/* ---- bad frames on an established link ---------------------------------------------- */

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
	struct rank n[2] = { 0 };
	struct rk_config c;
	struct raw r;
	uint8_t f[256], hello[RK_WIRE_HELLO_LEN], *big;
	int port, i;

	cfg_base(&c, 0, 3, 0);
	c.peer_timeout_ns = 5000 * MS;	/* the raw rank sends no heartbeats */
	c.max_frame = 64u << 10;
	port = start_world(n, 2, &c);
	raw_connect(&r, port, 0);
	raw_join(&r, RANKS(&n[0], &n[1]), 2, 3);
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
		/* the encoder refuses it too: edit a good frame, then its CRCs */
		make_frame(f, RK_FRAME_USER, 0, 2, r.seq, user8, 8);
		f[RK_WIRE_HDR_LEN + 5] = 1;
		put32(f + 24, rk_wire_crc32c(0, f + RK_WIRE_HDR_LEN, 8));
		reseal_hdr(f);
		raw_send(&r, f, RK_WIRE_HDR_LEN + 8);
		break;
	}
	raw_expect_error(&r, RANKS(&n[0], &n[1]), b->want);
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
	rank_stop(&n[1]);
	rank_stop(&n[0]);
}
END_TEST

/* ---- a peer that never reads -------------------------------------------------------- */

START_TEST(test_slow_peer)
{
	struct rank n = { 0 };
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
	raw_join(&r, RANKS(&n), 1, 2);
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
		pump(RANKS(&n));
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
	raw_wait_eof(&r, RANKS(&n), 5000);
	raw_close(&r);
	rank_stop(&n);
}
END_TEST

/*
 * A link that failed and is still flushing its ERROR frame behind megabytes
 * the peer never reads is no longer in the world's rank table, yet
 * rk_world_destroy() must cut it after the grace period and return.
 */
START_TEST(test_destroy_cuts_flushing_link)
{
	struct rank n = { 0 };
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
	raw_join(&r, RANKS(&n), 1, 2);
	ck_assert(PUMP_UNTIL(3000, n.ready, &n));

	payload = calloc(1, len);
	ck_assert_ptr_nonnull(payload);
	payload[0] = TAG_PLAIN;
	/* a USER payload the receiver would refuse is refused here, the link kept */
	payload[4] = 1;
	ck_assert_int_eq(rk_world_send(n.w, 1, RK_FRAME_USER, 0, payload, 8), -RK_ERESERVED);
	payload[4] = 0;
	ck_assert_ptr_nonnull(rk_world_link(n.w, 1));
	for (i = 0; i < 64; i++) {	/* 4 MiB the peer will never read */
		ck_assert_int_eq(rk_world_send(n.w, 1, RK_FRAME_USER, 0, payload, len), 0);
		pump(RANKS(&n));
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
	rank_stop(&n);		/* must not wait for the peer to read */
	ck_assert_uint_lt((rk_test_now_ns() - t0) / MS, 2000);
	raw_close(&r);
}
END_TEST

static Suite *world_fail_suite(void)
{
	Suite *s = suite_create("world");
	TCase *tc;

	tc = world_tcase(s, "process");
	tcase_add_test(tc, test_two_processes);
	tcase_add_loop_test(tc, test_peer_closes, 0, 2);
	tcase_add_test(tc, test_peer_silent);

	tc = world_tcase(s, "bad_frames");
	tcase_add_loop_test(tc, test_bad_frame, 0, ARRAY_SIZE(badframes));
	tcase_add_test(tc, test_slow_peer);
	tcase_add_test(tc, test_destroy_cuts_flushing_link);
	return s;
}

int main(void)
{
	return rk_check_run(world_fail_suite());
}
