// SPDX-License-Identifier: MIT
/*
 * check_tcp: the TCP link's two paths (runtime/tcp.c): direct recv()/send()
 * while the loop spins, io_uring when it blocks, and the switch between them.
 *
 * The links are made straight from loopback sockets (rk__tcp_link_from_fd(),
 * already up: no world, no handshake, no heartbeat), so each test decides
 * every frame on them. The paths tests play the peer with a raw socket and
 * assert which path carried each frame (rk_link_stats' tcp_* counters); the
 * stress test runs two links' loops on threads of their own, each flipping its
 * wait policy every few frames, with frames of 1 B to 1 MiB both ways, and
 * asserts that every frame arrives once, in order, intact. Nothing here
 * asserts a time: the deadlines only stop a hung test.
 */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime_int.h"
#include "link_int.h"
#include "tcp_int.h"
#include "rk_check.h"
#include "rk_test.h"
#include "wait_int.h"

#define TIMEOUT_S	120

/* ---- a link pair over loopback --------------------------------------------- */

/* Two connected loopback TCP sockets. */
static void tcp_pair(int fds[2])
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	socklen_t len = sizeof(a);
	int ls, one = 1;

	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	ls = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(ls, 0);
	ck_assert_int_eq(bind(ls, (struct sockaddr *)&a, sizeof(a)), 0);
	ck_assert_int_eq(listen(ls, 1), 0);
	ck_assert_int_eq(getsockname(ls, (struct sockaddr *)&a, &len), 0);
	fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	ck_assert_int_ge(fds[0], 0);
	ck_assert_int_eq(connect(fds[0], (struct sockaddr *)&a, sizeof(a)), 0);
	fds[1] = accept4(ls, NULL, NULL, SOCK_CLOEXEC);
	ck_assert_int_ge(fds[1], 0);
	setsockopt(fds[0], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	close(ls);
}

struct side {
	int rank;
	struct rk_loop *loop;
	struct rk_link *link;
	struct rk_timer tick;
	pid_t tid;
	/* what it received */
	uint64_t rx_count;		/* frames, in order and intact */
	uint64_t rx_bytes;
	int bad;			/* first mismatch: 1 order, 2 length, 3 content */
	int failed;			/* the link's failure, 0 = none */
	bool closed;
	/* the stress: what it sends */
	uint64_t tx_count, n_frames;
	uint64_t rng;
	unsigned int flips, flip_left;
	bool fixed;			/* keep the wait policy side_init() set: no flips */
	struct side *peer;
	/* the paths tests: echo every frame, echo_n times (0: once) */
	bool echo;
	unsigned int echo_n;
};

static atomic_uint g_done;		/* stress sides that received all their frames */
static bool g_defer;			/* side_init(): RK_DEFER_TASKRUN rings */

/* xorshift64: the stress's own sequence of lengths and flips */
static uint64_t xorshift_next(uint64_t *s)
{
	uint64_t x = *s;

	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

/* The data byte @i of frame @seq from rank @rank: a chunk moved or swapped shows. */
static uint8_t pattern(int rank, uint64_t seq, size_t i)
{
	uint32_t x = (uint32_t)i * 0x9e3779b1u + (uint32_t)seq * 0x85ebca77u + (uint32_t)rank;

	return (uint8_t)(x ^ (x >> 11) ^ (x >> 23));
}

/* 1 B .. 1 MiB of data, most of them small, a fifth up to 1 MiB. */
static uint32_t frame_len(struct side *s)
{
	uint64_t r = xorshift_next(&s->rng);

	switch (r % 10) {
	case 0:
	case 1:
		return 1 + (uint32_t)((r >> 8) % (1u << 20));
	case 2:
		return 1u << 20;
	case 3:
	case 4:
		return 1 + (uint32_t)((r >> 8) % 65536);
	default:
		return 1 + (uint32_t)((r >> 8) % 300);
	}
}

static int send_frame(struct side *s, uint64_t seq, uint32_t len)
{
	uint8_t *p;
	size_t i;
	int err = 0;

	p = rk_link_reserve(s->link, 8 + len, &err);
	if (!p)
		return err;
	p[0] = (uint8_t)seq;
	p[1] = (uint8_t)(seq >> 8);
	p[2] = (uint8_t)(seq >> 16);
	p[3] = (uint8_t)(seq >> 24);
	memset(p + 4, 0, 4);
	for (i = 0; i < len; i++)
		p[8 + i] = pattern(s->rank, seq, i);
	return rk_link_commit(s->link, RK_FRAME_USER, 0, 8 + len);
}

/* The wait policies a stress side cycles through, every few frames. */
static void flip_wait(struct side *s)
{
	struct rk_wait_policy w;

	if (s->fixed)
		return;
	rk_wait_policy_init(&w);
	rk_test_wait_tuning(s->loop)->predict = false;
	switch (s->flips++ % 4) {
	case 0:
		w.mode = RK_WAIT_SPIN;
		break;
	case 1:
		w.mode = RK_WAIT_BLOCK;
		break;
	case 2:
		w.mode = RK_WAIT_ADAPTIVE;
		w.spin_ns = 0;		/* blocks after every iteration */
		break;
	default:
		w.mode = RK_WAIT_ADAPTIVE;
		w.spin_ns = 50000;
		break;
	}
	rk_loop_set_wait(s->loop, &w);
	s->flip_left = 1 + (unsigned int)(xorshift_next(&s->rng) % 6);
}

static void send_next(struct side *s)
{
	int ret;

	if (s->tx_count >= s->n_frames)
		return;
	ret = send_frame(s, s->tx_count, frame_len(s));
	ck_assert_int_eq(ret, 0);
	s->tx_count++;
}

static enum rk_activity on_frame(struct rk_link *l, const struct rk_wire_hdr *h,
				 const uint8_t *payload, const union rk__wire_payload *dec)
{
	struct side *s = l->owner;
	struct rk_wire_user u;
	size_t i;

	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u)) {
		s->bad = s->bad ? s->bad : 2;
		return RK_BUSY;
	}
	/* the link hands on what it decoded: the same view into the payload */
	ck_assert_uint_eq(dec->user.tag, u.tag);
	ck_assert_uint_eq(dec->user.len, u.len);
	ck_assert_ptr_eq(dec->user.data, u.data);
	if (s->echo) {
		for (i = 0; i < (s->echo_n ? s->echo_n : 1); i++)
			ck_assert_int_eq(rk_link_send(l, RK_FRAME_USER, 0, payload, h->len), 0);
		s->rx_count++;
		return RK_BUSY;
	}
	if (u.tag != (uint32_t)s->rx_count && !s->bad)
		s->bad = 1;
	for (i = 0; i < u.len && !s->bad; i++)
		if (u.data[i] != pattern(s->peer->rank, s->rx_count, i))
			s->bad = 3;
	s->rx_count++;
	s->rx_bytes += u.len;
	if (s->rx_count == s->n_frames)
		atomic_fetch_add(&g_done, 1);
	send_next(s);
	if (!--s->flip_left)
		flip_wait(s);
	return RK_BUSY;
}

static int on_check(struct rk_link *l, const struct rk_wire_hello *h)
{
	(void)l;
	(void)h;
	return 0;
}

static int on_handshake(struct rk_link *l)
{
	(void)l;
	return 0;
}

static void on_failed(struct rk_link *l, int err)
{
	struct side *s = l->owner;

	s->failed = err;
}

static void on_closed(struct rk_link *l)
{
	struct side *s = l->owner;

	s->closed = true;
	s->link = NULL;
}

static const struct rk__link_owner_ops side_ops = {
	.check = on_check,
	.handshake = on_handshake,
	.frame = on_frame,
	.failed = on_failed,
	.closed = on_closed,
};

static enum rk_activity on_tick(struct rk_timer *t, uint64_t now)
{
	(void)t;
	(void)now;
	return RK_IDLE;
}

static void side_init(struct side *s, int rank, int fd, enum rk_wait_mode mode)
{
	struct rk_config c;

	memset(s, 0, sizeof(*s));
	rk_config_init(&c);
	c.rank = rank;
	c.world_size = 2;
	c.catch_signals = false;
	c.wait.mode = mode;
	rk__config_tuning(&c)->wait.predict = false;
	c.wait.spin_ns = mode == RK_WAIT_ADAPTIVE ? 0 : c.wait.spin_ns;
	rk__config_tuning(&c)->ring.defer_taskrun = g_defer;
	s->rank = rank;
	ck_assert_int_eq(rk_loop_create(&c, &s->loop), 0);
	ck_assert_int_eq(rk__tcp_link_from_fd(s->loop, fd, &side_ops, s, RK_LINK_UP, &s->link), 0);
	s->link->peer = 1 - rank;
	s->rng = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
	rk_timer_init(&s->tick, on_tick, s);
}

/* Close the link, let its I/O end, free the loop. */
static void side_fini(struct side *s)
{
	uint64_t deadline = rk_test_deadline_ms(10000);

	rk_timer_stop(&s->tick);
	if (s->link)
		rk__link_close(s->link, false);
	while (!s->closed && rk_test_now_ns() < deadline)
		rk_loop_run(s->loop, RK_RUN_NOWAIT);
	ck_assert(s->closed);
	ck_assert_int_eq(rk_loop_destroy(s->loop), 0);
}

/* ---- the paths, against a raw peer ------------------------------------------ */

struct raw_run {
	struct side *s;
	atomic_bool stop;
	atomic_int tid;
};

static enum rk_activity stop_post(struct rk_post *p)
{
	struct raw_run *r = p->data;

	rk_loop_stop(r->s->loop);
	return RK_IDLE;
}

static void *loop_thread(void *arg)
{
	struct raw_run *r = arg;

	atomic_store(&r->tid, (int)syscall(SYS_gettid));
	while (!atomic_load(&r->stop))
		rk_loop_run(r->s->loop, RK_RUN_DEFAULT);
	return NULL;
}

/* Whether thread @tid sleeps in io_uring_enter(): its loop waits, its ring
 * receive armed before (the loop arms its sources, then enters the wait). */
static bool thread_sleeps(int tid)
{
	char path[64], buf[512], *p;
	FILE *f;
	size_t n;
	long nr;

	snprintf(path, sizeof(path), "/proc/self/task/%d/stat", tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	if (!p || p[1] != ' ' || p[2] != 'S')
		return false;
	snprintf(path, sizeof(path), "/proc/self/task/%d/syscall", tid);
	f = fopen(path, "r");
	if (!f)
		return false;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	nr = strtol(buf, &p, 10);
	return p != buf && nr == SYS_io_uring_enter;
}

static void raw_write(int fd, const uint8_t *p, size_t n)
{
	ssize_t w;

	while (n) {
		w = write(fd, p, n);
		ck_assert_int_gt(w, 0);
		p += w;
		n -= (size_t)w;
	}
}

static void raw_read(int fd, uint8_t *p, size_t n)
{
	ssize_t r;

	while (n) {
		r = read(fd, p, n);
		ck_assert_int_gt(r, 0);
		p += r;
		n -= (size_t)r;
	}
}

#define PATH_FRAMES 40

/*
 * The raw peer (rank 1) sends PATH_FRAMES frames one at a time, each after the
 * @echo_n echoes (each frame's handler sends them) of the last came back, in
 * order; @wait_sleep: only once the loop's thread sleeps in its wait. Return
 * the link's counters.
 */
static void path_run_n(enum rk_wait_mode mode, bool wait_sleep, unsigned int echo_n,
		       struct rk_link_stats *st)
{
	uint8_t frame[RK_WIRE_HDR_LEN + 72], back[sizeof(frame)];
	struct rk_wire_hdr h;
	struct raw_run r = { 0 };
	struct rk_post stop;
	struct side s;
	pthread_t th;
	uint64_t deadline;
	unsigned int k;
	int fds[2], i;

	tcp_pair(fds);
	side_init(&s, 0, fds[1], mode);
	s.echo = true;
	s.echo_n = echo_n;
	r.s = &s;
	ck_assert_int_eq(pthread_create(&th, NULL, loop_thread, &r), 0);
	for (i = 0; i < PATH_FRAMES; i++) {
		uint8_t *pl = frame + RK_WIRE_HDR_LEN;

		ck_assert_int_eq(rk_wire_encode_user(pl, 72, (uint32_t)i, "0123456789abcdef", 16),
				 24);
		ck_assert_int_ge(rk_wire_encode_hdr(frame, RK_FRAME_USER, 0, 1, (uint64_t)i, pl, 24),
				 0);
		if (wait_sleep) {
			deadline = rk_test_deadline_ms(10000);
			while ((!atomic_load(&r.tid) || !thread_sleeps(atomic_load(&r.tid))) &&
			       rk_test_now_ns() < deadline)
				usleep(200);
			ck_assert(thread_sleeps(atomic_load(&r.tid)));
		}
		raw_write(fds[0], frame, RK_WIRE_HDR_LEN + 24);
		for (k = 0; k < echo_n; k++) {
			raw_read(fds[0], back, RK_WIRE_HDR_LEN + 24);
			ck_assert_int_eq(rk_wire_decode_hdr(back, sizeof(back), 1024, &h),
					 RK_WIRE_HDR_LEN + 24);
			ck_assert_uint_eq(h.seq, (uint64_t)i * echo_n + k);
			ck_assert_int_eq(memcmp(back + RK_WIRE_HDR_LEN, pl, 24), 0);
		}
	}
	atomic_store(&r.stop, true);
	rk_post_init(&stop, stop_post, &r);
	rk_loop_post(s.loop, &stop);
	pthread_join(th, NULL);
	ck_assert_int_eq(s.failed, 0);
	ck_assert_uint_eq(s.rx_count, PATH_FRAMES);
	rk_link_stats(s.link, st, sizeof(*st));
	close(fds[0]);
	side_fini(&s);
}

static void path_run(enum rk_wait_mode mode, bool wait_sleep, struct rk_link_stats *st)
{
	path_run_n(mode, wait_sleep, 1, st);
}

/*
 * Spinning: every frame is read and written by a direct syscall, none by the
 * ring; the echo leaves from the send that made it (its handler's commit), no
 * flush.
 */
START_TEST(test_spin_goes_direct)
{
	struct rk_link_stats st;

	path_run(RK_WAIT_SPIN, false, &st);
	ck_assert_uint_eq(st.tcp_rx_direct, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_rx_ring, 0);
	ck_assert_uint_eq(st.tcp_tx_commit, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_direct, 0);
	ck_assert_uint_eq(st.tx_flushes, 0);
	ck_assert_uint_eq(st.tcp_tx_ring, 0);
}
END_TEST

/*
 * A handler that sends three frames: the first leaves from its commit, the
 * other two wait for the iteration's flush and go in one send(), so a burst
 * costs two syscalls, not three; the peer reads all three in order.
 */
START_TEST(test_commit_first_of_iteration)
{
	struct rk_link_stats st;

	path_run_n(RK_WAIT_SPIN, false, 3, &st);
	ck_assert_uint_eq(st.tx_frames, 3 * PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_commit, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_direct, PATH_FRAMES);
	ck_assert_uint_eq(st.tx_flushes, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_ring, 0);
}
END_TEST

/* Adaptive, past its window (0 here): the loop blocks before every frame, so
 * every frame wakes it through the ring receive armed before it slept; the
 * echo, sent while the loop runs, leaves from its commit. */
START_TEST(test_block_wakes_by_ring)
{
	struct rk_link_stats st;

	path_run(RK_WAIT_ADAPTIVE, true, &st);
	ck_assert_uint_eq(st.tcp_rx_ring, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_rx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_commit, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_ring, 0);
}
END_TEST

/* RK_WAIT_BLOCK receives on the ring only (the loop never spins, so no poll
 * reads), and still writes every echo directly, from its commit: a frame the
 * socket takes whole needs no ring send. */
START_TEST(test_wait_block_rx_ring_tx_direct)
{
	struct rk_link_stats st;

	path_run(RK_WAIT_BLOCK, false, &st);
	ck_assert_uint_eq(st.tcp_rx_ring, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_rx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_commit, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_ring, 0);
}
END_TEST

/* ---- RK_DEFER_TASKRUN: the ring bound to the thread that runs the loop --------- */

struct raw_peer {
	int fd;
	struct rk_loop *loop;
	struct rk_post stop;
	int ok;				/* echoes that came back intact */
	int foreign_run;		/* rk_loop_run() from this thread */
	bool run_only;			/* only that run, no frames */
};

static bool raw_io(int fd, uint8_t *p, size_t n, bool wr)
{
	ssize_t r;

	while (n) {
		r = wr ? write(fd, p, n) : read(fd, p, n);
		if (r <= 0)
			return false;
		p += r;
		n -= (size_t)r;
	}
	return true;
}

static enum rk_activity stop_loop_post(struct rk_post *p)
{
	struct raw_peer *r = p->data;

	rk_loop_stop(r->loop);
	return RK_IDLE;
}

/* The raw peer on a helper thread (no ck_assert here: it records, the test
 * asserts): PATH_FRAMES frames, each after the last one's echo, then a stop. */
static void *raw_peer_thread(void *arg)
{
	uint8_t frame[RK_WIRE_HDR_LEN + 72], back[sizeof(frame)];
	struct raw_peer *r = arg;
	struct rk_wire_hdr h;
	int i;

	if (r->run_only) {
		r->foreign_run = rk_loop_run(r->loop, RK_RUN_NOWAIT);
		return NULL;
	}
	for (i = 0; i < PATH_FRAMES; i++) {
		uint8_t *pl = frame + RK_WIRE_HDR_LEN;

		if (rk_wire_encode_user(pl, 72, (uint32_t)i, "0123456789abcdef", 16) != 24 ||
		    rk_wire_encode_hdr(frame, RK_FRAME_USER, 0, 1, (uint64_t)i, pl, 24) < 0 ||
		    !raw_io(r->fd, frame, RK_WIRE_HDR_LEN + 24, true) ||
		    !raw_io(r->fd, back, RK_WIRE_HDR_LEN + 24, false) ||
		    rk_wire_decode_hdr(back, sizeof(back), 1024, &h) != RK_WIRE_HDR_LEN + 24 ||
		    h.seq != (uint64_t)i || memcmp(back + RK_WIRE_HDR_LEN, pl, 24))
			break;
		r->ok++;
	}
	rk_post_init(&r->stop, stop_loop_post, r);
	rk_loop_post(r->loop, &r->stop);
	return NULL;
}

/*
 * RK_WAIT_BLOCK on a SINGLE_ISSUER|DEFER_TASKRUN ring, run on the test's
 * thread: every frame wakes the wait through the deferred task work of the
 * ring receive, every echo goes direct, and the ring is this thread's alone
 * (a run from the peer's thread is refused with -EEXIST, nothing run).
 */
START_TEST(test_defer_block_path)
{
	struct raw_peer r = { 0 };
	struct rk_link_stats st;
	struct rk_loop_stats ls;
	struct side s;
	pthread_t th;
	int fds[2];

	tcp_pair(fds);
	g_defer = true;
	side_init(&s, 0, fds[1], RK_WAIT_BLOCK);
	g_defer = false;
	if (!rk__config_ctuning(rk_loop_config(s.loop))->ring.defer_taskrun) {
		fprintf(stderr, "defer: the kernel refused DEFER_TASKRUN, skipped\n");
		close(fds[0]);
		side_fini(&s);
		return;
	}
	s.echo = true;
	r.fd = fds[0];
	r.loop = s.loop;
	/* the first run binds the ring to this thread; another thread's is refused */
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_NOWAIT), 0);
	r.run_only = true;
	ck_assert_int_eq(pthread_create(&th, NULL, raw_peer_thread, &r), 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(r.foreign_run, -EEXIST);
	r.run_only = false;
	ck_assert_int_eq(pthread_create(&th, NULL, raw_peer_thread, &r), 0);
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_DEFAULT), 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(r.ok, PATH_FRAMES);
	ck_assert_int_eq(s.failed, 0);
	ck_assert_uint_eq(s.rx_count, PATH_FRAMES);
	rk_link_stats(s.link, &st, sizeof(st));
	ck_assert_uint_eq(st.tcp_rx_ring, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_rx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_commit, PATH_FRAMES);
	ck_assert_uint_eq(st.tcp_tx_direct, 0);
	ck_assert_uint_eq(st.tcp_tx_ring, 0);
	rk_loop_stats(s.loop, &ls, sizeof(ls));
	ck_assert_uint_ge(ls.blocks, 1);
	close(fds[0]);
	side_fini(&s);
}
END_TEST

/* Without RK_DEFER_TASKRUN (the default) any one thread at a time may run the loop. */
START_TEST(test_no_defer_any_thread)
{
	struct raw_peer r = { .run_only = true };
	struct side s;
	pthread_t th;
	int fds[2];

	tcp_pair(fds);
	side_init(&s, 0, fds[1], RK_WAIT_BLOCK);
	ck_assert(!rk__config_ctuning(rk_loop_config(s.loop))->ring.defer_taskrun);
	r.loop = s.loop;
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_eq(pthread_create(&th, NULL, raw_peer_thread, &r), 0);
	pthread_join(th, NULL);
	ck_assert_int_eq(r.foreign_run, 0);
	close(fds[0]);
	side_fini(&s);
}
END_TEST

/* ---- the switch under stress --------------------------------------------------- */

#define STRESS_FRAMES	300
#define STRESS_WINDOW	4

static void *stress_thread(void *arg)
{
	struct side *s = arg;
	uint64_t deadline = rk_test_deadline_ms(100000);
	int i;

	s->tid = (pid_t)syscall(SYS_gettid);
	/* a tick wakes a blocked loop to look at g_done */
	rk_timer_start(s->loop, &s->tick, MS, MS);
	flip_wait(s);
	for (i = 0; i < STRESS_WINDOW; i++)
		send_next(s);
	while (atomic_load(&g_done) < 2 && !s->failed && !s->peer->failed &&
	       rk_test_now_ns() < deadline)
		rk_loop_run(s->loop, RK_RUN_ONCE);
	return NULL;
}

/*
 * Both sides send STRESS_FRAMES frames of 1 B .. 1 MiB, a window of them ahead,
 * one more for each frame received. Every frame must arrive once, in order,
 * byte for byte. @run picks the sizes and, when odd, small socket buffers (most
 * large flushes then go out in parts); @fixed: both loops stay in that policy,
 * else they flip it every 1-6 frames (flip_wait()). Returns the links' stats.
 */
static void stress_run(int run, bool fixed, enum rk_wait_mode mode, struct rk_link_stats *sa,
		       struct rk_link_stats *sb)
{
	struct side a, b;
	pthread_t ta, tb;
	int fds[2];

	atomic_store(&g_done, 0);
	tcp_pair(fds);
	if (run % 2) {
		int sz = 32768;

		setsockopt(fds[0], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
		setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
		setsockopt(fds[1], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
	}
	side_init(&a, 0, fds[0], mode);
	side_init(&b, 1, fds[1], mode);
	a.fixed = b.fixed = fixed;
	a.peer = &b;
	b.peer = &a;
	a.n_frames = b.n_frames = STRESS_FRAMES;
	/* each run its own sizes and flips */
	a.rng += 0x2545f4914f6cdd1dull * (uint64_t)run;
	b.rng += 0x2545f4914f6cdd1dull * (uint64_t)run;
	ck_assert_int_eq(pthread_create(&ta, NULL, stress_thread, &a), 0);
	ck_assert_int_eq(pthread_create(&tb, NULL, stress_thread, &b), 0);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	ck_assert_int_eq(a.failed, 0);
	ck_assert_int_eq(b.failed, 0);
	ck_assert_int_eq(a.bad, 0);
	ck_assert_int_eq(b.bad, 0);
	ck_assert_uint_eq(a.rx_count, STRESS_FRAMES);
	ck_assert_uint_eq(b.rx_count, STRESS_FRAMES);
	rk_link_stats(a.link, sa, sizeof(*sa));
	rk_link_stats(b.link, sb, sizeof(*sb));
	ck_assert_uint_eq(sa->rx_frames, STRESS_FRAMES);
	ck_assert_uint_eq(sb->rx_frames, STRESS_FRAMES);
	side_fini(&a);
	side_fini(&b);
}

/*
 * The flips go through spin, block, adaptive blocking at once and adaptive
 * with a short window: every switch of either direction between the direct and
 * the ring path, with receives and sends in flight, partial sends and frames
 * split over many reads. Both paths must have carried bytes both ways (sends
 * go to the ring only for what the socket did not take: with small buffers).
 */
START_TEST(test_switch_stress)
{
	struct rk_link_stats sa, sb;

	stress_run(_i, false, RK_WAIT_SPIN, &sa, &sb);
	ck_assert_uint_gt(sa.tcp_rx_direct + sb.tcp_rx_direct, 0);
	ck_assert_uint_gt(sa.tcp_rx_ring + sb.tcp_rx_ring, 0);
	ck_assert_uint_gt(sa.tcp_tx_direct + sb.tcp_tx_direct, 0);
	ck_assert_uint_gt(sa.tcp_tx_commit + sb.tcp_tx_commit, 0);
	if (_i % 2)
		ck_assert_uint_gt(sa.tcp_tx_ring + sb.tcp_tx_ring, 0);
}
END_TEST

/*
 * RK_WAIT_BLOCK throughout: every byte comes in on the ring receive, every
 * flush writes directly first, and with small socket buffers the part of a
 * large flush the socket did not take goes to a ring send, while the next
 * flush waits for it: the two send paths of one direction never overlap.
 */
START_TEST(test_block_send_stress)
{
	struct rk_link_stats sa, sb;

	stress_run(_i, true, RK_WAIT_BLOCK, &sa, &sb);
	ck_assert_uint_eq(sa.tcp_rx_direct + sb.tcp_rx_direct, 0);
	ck_assert_uint_gt(sa.tcp_rx_ring, 0);
	ck_assert_uint_gt(sb.tcp_rx_ring, 0);
	ck_assert_uint_gt(sa.tcp_tx_direct + sa.tcp_tx_commit, 0);
	ck_assert_uint_gt(sb.tcp_tx_direct + sb.tcp_tx_commit, 0);
	if (_i % 2) {
		ck_assert_uint_gt(sa.tcp_tx_ring, 0);
		ck_assert_uint_gt(sb.tcp_tx_ring, 0);
	}
}
END_TEST

/* ---- a predictive sleep that ends early rehearses the TCP path ---------------- */

struct pw_src {
	struct rk_source src;
	uint64_t expect;	/* injected-clock ns */
};

static int pw_poll(struct rk_source *src, uint64_t now)
{
	(void)src;
	(void)now;
	return 0;
}

static uint64_t pw_expect(struct rk_source *src, uint64_t now)
{
	(void)now;
	return ((struct pw_src *)src->data)->expect;
}

static int pw_arm(struct rk_source *src)
{
	(void)src;
	return 0;
}

static const struct rk_source_ops pw_ops = {
	.name = "predicting", .poll = pw_poll, .arm = pw_arm, .expect = pw_expect };

static uint64_t pw_clock(void *arg)
{
	return *(uint64_t *)arg;
}

/*
 * A loop with one TCP link on its direct path and a source that predicts an
 * event 10 ms ahead, on an injected clock: the loop sleeps until the
 * prediction less the margin; the iteration that wakes there early (the event
 * not in yet) rehearses the TCP path once (_i == 0), never with the rehearsal's
 * ablation bit set (_i == 1, RK__WAIT_OFF_PREWARM: the control); the spin after
 * it does not rehearse again.
 */
START_TEST(test_prewarm_after_predictive_sleep)
{
	bool on = _i == 0;
	struct rk_wait_policy w;
	struct rk_loop_stats st;
	struct pw_src ps = { .src = { .ops = &pw_ops } };
	uint64_t t = 1000ull * 1000 * MS, margin;
	struct side s;
	int fds[2];

	tcp_pair(fds);
	side_init(&s, 0, fds[1], RK_WAIT_ADAPTIVE);
	w = rk_loop_config(s.loop)->wait;
	w.spin_ns = 200 * MS;
	rk_loop_set_wait(s.loop, &w);
	rk_test_wait_tuning(s.loop)->predict = true;
	if (!on)
		rk__loop_wait(s.loop)->off |= RK__WAIT_OFF_PREWARM;
	rk_loop_set_clock(s.loop, pw_clock, &t);
	ps.src.data = &ps;
	ck_assert_int_eq(rk_loop_add_source(s.loop, &ps.src), 0);
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_NOWAIT), 0);
	rk_loop_stats(s.loop, &st, sizeof(st));
	margin = st.predict_margin_ns;
	ps.expect = t + 10 * MS;

	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_ONCE), 0);	/* the sleep */
	rk_loop_stats(s.loop, &st, sizeof(st));
	ck_assert_uint_eq(st.predict_waits, 1);
	ck_assert_uint_eq(st.prewarms, 0);
	t = ps.expect - margin;
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_ONCE), 0);	/* woken early */
	rk_loop_stats(s.loop, &st, sizeof(st));
	ck_assert_uint_eq(st.predict_early, 1);
	ck_assert_uint_eq(st.prewarms, (on ? 1 : 0));
	t = ps.expect - 1;
	ck_assert_int_eq(rk_loop_run(s.loop, RK_RUN_ONCE), 0);	/* spinning to it */
	rk_loop_stats(s.loop, &st, sizeof(st));
	ck_assert_uint_eq(st.predict_waits, 1);
	ck_assert_uint_eq(st.prewarms, (on ? 1 : 0));

	ck_assert_int_eq(rk_loop_remove_source(s.loop, &ps.src), 0);
	rk_loop_set_clock(s.loop, NULL, NULL);
	close(fds[0]);
	side_fini(&s);
}
END_TEST

/* The rehearsal itself: the pair is made at the first call and reused; its
 * bytes come back each time (none pile up in the pair). */
START_TEST(test_rehearse_pair)
{
	int fds[2] = { -1, -1 }, first[2], i, n;

	ck_assert_int_eq(rk__tcp_rehearse(fds), 0);
	ck_assert_int_ge(fds[0], 0);
	ck_assert_int_ge(fds[1], 0);
	first[0] = fds[0];
	first[1] = fds[1];
	for (i = 0; i < 100; i++)
		ck_assert_int_eq(rk__tcp_rehearse(fds), 0);
	ck_assert_int_eq(fds[0], first[0]);
	ck_assert_int_eq(fds[1], first[1]);
	ck_assert_int_eq(ioctl(fds[1], FIONREAD, &n), 0);
	ck_assert_int_eq(n, 0);
	/* a pair whose peer is gone fails, and is closed */
	close(fds[1]);
	fds[1] = open("/dev/null", O_RDONLY);
	ck_assert_int_lt(rk__tcp_rehearse(fds), 0);
	ck_assert_int_eq(fds[0], -1);
	ck_assert_int_eq(fds[1], -1);
}
END_TEST

static Suite *tcp_suite(void)
{
	Suite *s = suite_create("tcp");
	TCase *tc = rk_tcase(s, "paths", TIMEOUT_S, NULL, NULL);

	tcase_add_test(tc, test_spin_goes_direct);
	tcase_add_test(tc, test_commit_first_of_iteration);
	tcase_add_test(tc, test_block_wakes_by_ring);
	tcase_add_test(tc, test_wait_block_rx_ring_tx_direct);
	tcase_add_loop_test(tc, test_switch_stress, 0, 4);
	tcase_add_loop_test(tc, test_block_send_stress, 0, 2);
	tcase_add_test(tc, test_defer_block_path);
	tcase_add_test(tc, test_no_defer_any_thread);
	tcase_add_loop_test(tc, test_prewarm_after_predictive_sleep, 0, 2);
	tcase_add_test(tc, test_rehearse_pair);
	return s;
}

int main(void)
{
	return rk_check_run(tcp_suite());
}
