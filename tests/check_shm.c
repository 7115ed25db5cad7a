// SPDX-License-Identifier: MIT
/*
 * check_shm: same-host links (runtime/shm*.c): two or more ranks of one host
 * move their tcp:// links to shared-memory rings after the handshake, or stay
 * on TCP (RK_SHM=off, no shared memory, no authentication); a peer's memory is
 * not trusted (rings and sockets written as a buggy or hostile peer could);
 * a same-host peer's death, and teardowns that leave nothing behind. The
 * broadcast ring, the lane and wake-ups are check_shm_bcast's,
 * check_shm_lane's and check_shm_wake's.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <ifaddrs.h>
#include <signal.h>
#include <stddef.h>
#include <sys/un.h>

#include "shm_test.h"

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
		ck_assert_uint_eq(r[1].rx[i].ulen, 16 + i % 200);
		ck_assert_uint_eq(r[0].rx[i].seq, i);
		ck_assert_uint_eq(r[0].rx[i].ulen, 16 + i % 300);
	}
	link_stats(&r[0], 1, &ls);
	ck_assert_uint_eq(ls.shm_ring_full, 0);
	ck_assert_int_eq(r[0].nerr + r[1].nerr, 0);
	stop(r, 2);
}
END_TEST

/*
 * The loop's events count every frame it handles, also those its spin takes
 * from a shared-memory ring (no completion carries them): 2000 frames to the
 * leader are at least 2000 of its events, and its busy events never exceed
 * its events.
 */
START_TEST(test_loop_events)
{
	struct rank r[2] = { 0 };
	struct rk_loop_stats a, b;
	uint32_t i;

	start(r, 2, NULL);
	rk_loop_stats(r[0].loop, &a, sizeof(a));
	for (i = 0; i < 2000; i++) {
		ck_assert_int_eq(send_seq(&r[1], 0, TAG_SEQ, i, 16), 0);
		if (i % 100 == 99)
			PUMP_UNTIL(1, false, &r[0], &r[1]);
	}
	ck_assert(PUMP_UNTIL(10000, r[0].nrx == 2000, &r[0], &r[1]));
	rk_loop_stats(r[0].loop, &b, sizeof(b));
	ck_assert_msg(b.events - a.events >= 2000, "%llu events for 2000 frames",
		      (unsigned long long)(b.events - a.events));
	ck_assert_uint_ge(b.busy_events - a.busy_events, 2000);
	ck_assert_uint_le(b.busy_events, b.events);
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
	ck_assert_uint_eq(log_stays_tcp(), 0);
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
	ck_assert(PUMP_UNTIL(5000, log_stays_tcp() >= 3, &r[0], &r[1], &r[2]));
	ck_assert_uint_eq(log_stays_tcp(), 3);
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
		ck_assert_uint_eq(log_eventfd_links(), 2);
	else if (log_futex_links() != 2)
		ck_assert_uint_eq(log_eventfd_links(), 2);	/* a kernel before 6.7 */
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
		ck_assert_int_eq(r[0].errs[0].err, -RK_ENOSHM);
		ck_assert_int_eq(r[1].errs[0].err, -RK_ENOSHM);
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
	ck_assert_msg(reader->errs[0].err == pc->expect, "%s: the reader failed with %s",
		      pc->name, rk_errname(reader->errs[0].err));
	/* the reader tells the writer why: its world reports the same code */
	ck_assert_msg(writer->errs[0].err == pc->expect, "%s: the writer heard %s",
		      pc->name, rk_errname(writer->errs[0].err));
	ck_assert_uint_eq(reader->nrx, 0);	/* nothing of it reached the application */
	stop(r, 2);
}
END_TEST

/* ---- a same-host peer's death ---------------------------------------------------- */

/* The follower in a child process: up on shared memory, then it dies. With
 * @hold (a pipe), a grandchild keeps its sockets open, so only its pidfd tells;
 * the grandchild's pid goes down the pipe for the test to kill. */
static int child_main(void *arg, int port)
{
	int hold = *(int *)arg;
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
	int gfd[2], pfd, hold, st;
	pid_t pid, g = -1;
	bool held = _i == 1;

	ck_assert_int_eq(pipe(gfd), 0);
	hold = held ? gfd[1] : -1;
	pid = fork_follower(child_main, &hold, &pfd);
	close(gfd[1]);
	cfg_base(&c, 0, 2);
	rank_start(&r, &c);
	give_port(pfd, rk_world_port(r.w));
	ck_assert(PUMP_UNTIL(20000, r.nrx == 1, &r));
	ck_assert(on_shm(&r, 1));
	ck_assert_int_eq(send_seq(&r, 1, TAG_SEQ, 2, 8), 0);
	ck_assert(PUMP_UNTIL(20000, r.nerr, &r));
	ck_assert_int_eq(r.errs[0].rank, 1);
	if (held) {
		/* the socket is still open (the grandchild has it): only the pidfd told */
		ck_assert_int_eq(read(gfd[0], &g, sizeof(g)), (ssize_t)sizeof(g));
		ck_assert_msg(r.errs[0].err == -RK_EPEEREXIT, "peer_error %s",
			      rk_errname(r.errs[0].err));
	} else {
		ck_assert_msg(r.errs[0].err == -RK_EPEEREXIT || r.errs[0].err == -ECONNRESET,
			      "peer_error %s", rk_errname(r.errs[0].err));
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

/* The segment sockets named like ours, from /proc/net/unix, as a stranger sees
 * them: "@rankrt-shm-..." (abstract) or "/dir/rankrt-shm-..." (a path). */
static int find_shm_sockets(char names[][108], int max)
{
	FILE *f = fopen("/proc/net/unix", "r");
	char line[512];
	int n = 0;

	if (!f)
		return 0;
	while (n < max && fgets(line, sizeof(line), f)) {
		char *p = strstr(line, "rankrt-shm-");

		if (p) {
			while (p > line && p[-1] != ' ')
				p--;
			p[strcspn(p, "\n ")] = '\0';
			snprintf(names[n++], 108, "%.107s", p);
		}
	}
	fclose(f);
	return n;
}

/* Connect to a socket as find_shm_sockets() names it. Return: the socket, or -errno. */
static int connect_named(const char *name)
{
	struct sockaddr_un sa = { .sun_family = AF_UNIX };
	socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(name));
	int fd = socket(AF_UNIX, SOCK_SEQPACKET, 0);

	if (name[0] == '@')
		snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "%s", name + 1);
	else
		snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", name), len++;
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, len) < 0) {
		int err = -errno;

		if (fd >= 0)
			close(fd);
		return err;
	}
	return fd;
}

/* Pump both ranks, one at a time and looking after each, until the leader's
 * segment socket shows: a stranger comes in as soon as the leader listens,
 * before the follower has run again. */
static void wait_offer(struct rank *r, char names[][108])
{
	int i, n = 0;

	for (i = 0; i < 200000 && !n; i++) {
		pump((struct rank *[]){ &r[i % 2] }, 1);
		n = find_shm_sockets(names, 8);
	}
	ck_assert_int_gt(n, 0);
}

static void pair_create(struct rank r[2])
{
	struct rk_config c;

	cfg_base(&c, 0, 2);
	ck_assert_int_eq(rank_create(&r[0], &c), 0);
	cfg_base(&c, 1, 2);
	snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d", rk_world_port(r[0].w));
	ck_assert_int_eq(rank_create(&r[1], &c), 0);
}

/* A process that is not the follower connects to the offered socket first: it
 * gets no descriptor, and the follower's link still moves. */
START_TEST(test_stranger_socket)
{
	struct rank r[2] = { 0 };
	char names[8][108];
	int st, sv[2];
	pid_t pid;

	pair_create(r);
	wait_offer(r, names);
	ck_assert_int_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, sv), 0);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		char data[16], cbuf[256];
		struct iovec iov = { data, sizeof(data) };
		struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf,
				    .msg_controllen = sizeof(cbuf) };
		int fd = connect_named(names[0]);
		ssize_t got;

		if (fd < 0)	/* gone already: nothing to steal */
			_exit(fd == -ECONNREFUSED || fd == -ENOENT ? 0 : 5);
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
	/* a socket in a directory leaves with the offer */
	if (names[0][0] == '/')
		ck_assert_int_ne(access(names[0], F_OK), 0);
	stop(r, 2);
}
END_TEST

/* Another user cannot even connect to the offer's socket (it lives in a
 * directory only the job's user may enter), so no one else can fill its queue
 * and push the link back to TCP. Needs root, to become another user. */
START_TEST(test_other_user_socket)
{
	struct rank r[2] = { 0 };
	char names[8][108];
	int st;
	pid_t pid;

	if (geteuid() != 0) {
		printf("skipped: becoming another user needs root\n");
		return;
	}
	pair_create(r);
	wait_offer(r, names);
	ck_assert_msg(names[0][0] == '/', "the offer's socket is abstract: %s", names[0]);
	pid = fork();
	ck_assert_int_ge(pid, 0);
	if (pid == 0) {
		int fd;

		if (setgid(65534) || setuid(65534))
			_exit(4);
		fd = connect_named(names[0]);
		_exit(fd == -EACCES ? 0 : 5);
	}
	ck_assert_int_eq(waitpid(pid, &st, 0), pid);
	ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "other user: status %#x", st);
	ck_assert(PUMP_UNTIL(10000, on_shm(&r[0], 1) && on_shm(&r[1], 0), &r[0], &r[1]));
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

static Suite *shm_suite(void)
{
	Suite *s = suite_create("shm");
	TCase *tc;

	tc = shm_tcase(s, "upgrade");
	tcase_add_test(tc, test_upgrade);
	tcase_add_test(tc, test_loop_events);
	tcase_add_test(tc, test_off);
	tcase_add_test(tc, test_fallback);
	tcase_add_loop_test(tc, test_eventfd_path, 0, 2);
	tcase_add_loop_test(tc, test_required, 0, 2);
	tcase_add_test(tc, test_unauthenticated);
	tcase_add_test(tc, test_class);
	tc = shm_tcase(s, "untrusted");
	tcase_add_loop_test(tc, test_poke, 0, (int)ARRAY_SIZE(pokes));
	tcase_add_test(tc, test_stranger_socket);
	tcase_add_test(tc, test_other_user_socket);
	tc = shm_tcase(s, "death");
	tcase_add_loop_test(tc, test_peer_death, 0, 2);
	tcase_add_test(tc, test_teardown);
	return s;
}

int main(void)
{
	return rk_check_run(shm_suite());
}
