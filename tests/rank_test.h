/* SPDX-License-Identifier: MIT */
/*
 * A rank of a test world, for every suite that builds worlds over loopback
 * (check_world*, check_shm*, check_sched_world): its loop and world and what
 * their callbacks saw; pumping ranks from the test's own thread; ranks on
 * threads of their own and followers in forked processes; rankrt's log lines
 * captured for the test to count. Never installed.
 *
 * Rings are only made inside test bodies (never in unchecked fixtures): a ring
 * is never shared across fork.
 */
#ifndef RK_RANK_TEST_H
#define RK_RANK_TEST_H

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "runtime_int.h"
#include "rk_check.h"
#include "rk_test.h"

/* The USER tags the suites' frames carry; the ones a rank answers are below. */
enum { TAG_PLAIN = 1, TAG_HI, TAG_BURST, TAG_SEQ, TAG_PING, TAG_PONG, TAG_QUIT, TAG_DIE,
       TAG_ALL, TAG_ACK, TAG_BIG };

#define RANK_ERRS	16

/* A frame a rank's callback got. */
struct rxframe {
	int peer;
	uint8_t type;
	uint16_t flags;
	uint32_t len;		/* the payload's */
	uint64_t hdr_seq;	/* the header's sequence number */
	uint32_t tag;		/* a USER frame's tag; 0 for any other */
	uint32_t ulen;		/* ...its data's length */
	uint32_t seq;		/* ...its first 4 data bytes, where it has them */
	uint8_t *data;		/* a copy of the payload, when the suite keeps them */
};

struct rank;
typedef void (*rank_frame_hook)(struct rank *r, int peer, const struct rk_wire_hdr *h,
				const uint8_t *payload);
typedef void (*rank_error_hook)(struct rank *r, int rank, int err);

/*
 * A rank: its loop and world, and what its callbacks saw. Besides recording
 * every frame, its frame callback answers TAG_PING with TAG_PONG (when @echo),
 * counts TAG_PONG, and takes TAG_QUIT as the end; those two stop its loop, as
 * does a peer error, so a rank on its own thread returns from RK_RUN_DEFAULT.
 */
struct rank {
	struct rk_loop *loop;
	struct rk_world *w;
	int rank;
	int ready;		/* ready callbacks */
	bool send_on_ready;	/* send TAG_HI to its peers from the ready callback */
	int ready_send;		/* ...the first error those sends returned */
	int nerr;		/* peer_error callbacks, the first RANK_ERRS of them in errs */
	struct {
		int rank, err;
		uint64_t t;	/* rk_test_now_ns() when it came */
	} errs[RANK_ERRS];
	struct rxframe *rx;
	size_t nrx, rxcap;
	uint64_t rx_bytes;	/* USER data received, all of it */
	uint64_t rx_hash;	/* FNV-1a over the data of TAG_BIG frames, in order */
	uint32_t seq_next;	/* TAG_SEQ frames: the next one expected */
	unsigned int disorder;	/* ...how many came out of order */
	uint64_t nseq;		/* ...and how many came */
	unsigned int npong;
	bool echo;		/* answer TAG_PING with TAG_PONG */
	bool quit;		/* a TAG_QUIT came */
	rank_frame_hook hook;	/* the test's own reaction to a frame, after the above */
	rank_error_hook on_error;	/* ...and to a peer error */
	int hook_err;		/* the first error a reaction's send returned */
};

/*
 * Whether ranks keep a copy of every payload (the world suites compare them);
 * the shm suites, which move hundreds of megabytes, keep none.
 */
static bool g_rank_keep_data = true;

/* A USER frame from @r to @to, encoded here and sent with rk_world_send(). */
static inline int send_user(struct rank *r, int to, uint32_t tag, const void *data, uint32_t len)
{
	uint8_t *buf = malloc((size_t)len + 8);
	int m, ret;

	if (!buf)
		return -ENOMEM;
	m = rk_wire_encode_user(buf, (size_t)len + 8, tag, data, len);
	ret = m < 0 ? m : rk_world_send(r->w, to, RK_FRAME_USER, 0, buf, (uint32_t)m);
	free(buf);
	return ret;
}

/* rank_ops: a rank's world callbacks, recording what they are given and reacting as said above. */
static inline void rank_on_ready(struct rk_world *w, void *arg)
{
	struct rank *r = arg;
	int to, ret;

	r->ready++;
	if (!r->send_on_ready)
		return;
	for (to = 0; to < rk_world_size(w); to++) {
		if (to == r->rank || (r->rank != 0 && to != 0))
			continue;
		ret = send_user(r, to, TAG_HI, "hi", 2);
		if (ret && !r->ready_send)
			r->ready_send = ret;
	}
}

/* Append a record of this frame to @r->rx (its payload copied when g_rank_keep_data). */
static inline struct rxframe *rank_record(struct rank *r, int peer, const struct rk_wire_hdr *h,
					  const uint8_t *payload)
{
	struct rxframe *f;

	if (r->nrx == r->rxcap) {
		size_t cap = r->rxcap ? r->rxcap * 2 : 64;
		struct rxframe *p = realloc(r->rx, cap * sizeof(*p));

		if (!p)
			abort();
		r->rx = p;
		r->rxcap = cap;
	}
	f = &r->rx[r->nrx++];
	memset(f, 0, sizeof(*f));
	f->peer = peer;
	f->type = h->type;
	f->flags = h->flags;
	f->len = h->len;
	f->hdr_seq = h->seq;
	if (g_rank_keep_data) {
		f->data = malloc(h->len ? h->len : 1);
		if (!f->data)
			abort();
		memcpy(f->data, payload, h->len);
	}
	return f;
}

static inline enum rk_activity rank_on_frame(struct rk_world *w, int peer,
					     const struct rk_wire_hdr *h, const uint8_t *payload,
					     void *arg)
{
	struct rank *r = arg;
	struct rxframe *f = rank_record(r, peer, h, payload);
	struct rk_wire_user u;
	int ret;

	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u)) {
		f->tag = u.tag;
		f->ulen = u.len;
		if (u.len >= 4)
			memcpy(&f->seq, u.data, 4);
		r->rx_bytes += u.len;
		switch (u.tag) {
		case TAG_BIG:
			r->rx_hash = rk__fnv1a64(u.data, u.len) ^ (r->rx_hash * 31);
			break;
		case TAG_SEQ:
			if (u.len < 4)
				break;
			r->disorder += f->seq != r->seq_next;
			r->seq_next = f->seq + 1;
			r->nseq++;
			break;
		case TAG_PING:
			if (!r->echo)
				break;
			ret = rk_world_send_user(w, peer, TAG_PONG, u.data, u.len);
			if (ret && !r->hook_err)
				r->hook_err = ret;
			break;
		case TAG_PONG:
			r->npong++;
			rk_loop_stop(r->loop);
			break;
		case TAG_QUIT:
			r->quit = true;
			rk_loop_stop(r->loop);
			break;
		}
	}
	if (r->hook)
		r->hook(r, peer, h, payload);
	return RK_BUSY;
}

static inline void rank_on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct rank *r = arg;

	(void)w;
	if (r->nerr < RANK_ERRS) {
		r->errs[r->nerr].rank = rank;
		r->errs[r->nerr].err = err;
		r->errs[r->nerr].t = rk_test_now_ns();
	}
	r->nerr++;
	if (r->on_error)
		r->on_error(r, rank, err);
	rk_loop_stop(r->loop);	/* a thread's run ends on it */
}

static const struct rk_world_ops rank_ops = {
	.ready = rank_on_ready,
	.frame = rank_on_frame,
	.peer_error = rank_on_peer_error,
};

/* Frames of tag @tag that @r got. */
static inline size_t count_tag(const struct rank *r, uint32_t tag)
{
	size_t i, c = 0;

	for (i = 0; i < r->nrx; i++)
		c += r->rx[i].tag == tag;
	return c;
}

/* Frames of type @type that @r got. */
static inline size_t count_type(const struct rank *r, unsigned int type)
{
	size_t i, c = 0;

	for (i = 0; i < r->nrx; i++)
		c += r->rx[i].type == type;
	return c;
}

/* Whether @r heard that rank @rank failed. */
static inline bool saw_error_for(const struct rank *r, int rank)
{
	int i;

	for (i = 0; i < r->nerr && i < RANK_ERRS; i++)
		if (r->errs[i].rank == rank)
			return true;
	return false;
}

/* The transport @r's link to @peer is on now ("tcp", "shm"), or "" without a link. */
static inline const char *rank_transport(const struct rank *r, int peer)
{
	struct rk_link *l = rk_world_link(r->w, peer);

	return l ? rk_link_transport(l) : "";
}

/*
 * Create @r's loop and world from @c (rk_test_create(): a leader on "…:0"
 * takes a free port). No Check assertions: threads and forked children use it.
 * Return: 0 or the error.
 */
static inline int rank_create(struct rank *r, const struct rk_config *c)
{
	r->rank = c->rank;
	return rk_test_create(c, &rank_ops, r, &r->loop, &r->w);
}

/* rank_create() for a rank on a thread of a world of threads (rk_test_join()). */
static inline int rank_join(struct rank *r, const struct rk_config *c, atomic_int *port,
			    uint64_t deadline)
{
	r->rank = c->rank;
	return rk_test_join(c, port, deadline, &rank_ops, r, &r->loop, &r->w);
}

/* Destroy @r's world and loop; the first failure (0: nothing leaked). */
static inline int rank_close(struct rank *r)
{
	int ret = 0, e;

	if (r->w) {
		ret = rk_world_destroy(r->w);
		r->w = NULL;
	}
	if (r->loop) {
		e = rk_loop_destroy(r->loop);
		if (e && !ret)
			ret = e;
		r->loop = NULL;
	}
	return ret;
}

/* Free what @r recorded. */
static inline void rank_free(struct rank *r)
{
	size_t i;

	for (i = 0; i < r->nrx; i++)
		free(r->rx[i].data);
	free(r->rx);
	r->rx = NULL;
	r->nrx = r->rxcap = 0;
}

/* rank_create(), asserting it worked. */
static inline void rank_start(struct rank *r, const struct rk_config *c)
{
	int ret = rank_create(r, c);

	ck_assert_msg(ret == 0, "rank %d: %s", c->rank, rk_errname(ret));
}

/* Close @r, asserting nothing leaked, and free what it recorded. */
static inline void rank_stop(struct rank *r)
{
	ck_assert_int_eq(rank_close(r), 0);
	rank_free(r);
}

/* ---- pumping ranks from the test's thread ------------------------------------------- */

/*
 * One RK_RUN_NOWAIT iteration of each listed rank that has a loop (the test
 * decides who runs when: a rank not pumped is one that stopped reading); a
 * short nap when none had an event.
 */
static inline void pump(struct rank *const *rs, size_t n)
{
	struct rk_loop_stats a, b;
	uint64_t ev = 0;
	size_t i;

	for (i = 0; i < n; i++) {
		if (!rs[i] || !rs[i]->loop)
			continue;
		rk_loop_stats(rs[i]->loop, &a, sizeof(a));
		ck_assert_int_eq(rk_loop_run(rs[i]->loop, RK_RUN_NOWAIT), 0);
		rk_loop_stats(rs[i]->loop, &b, sizeof(b));
		ev += b.events - a.events;
	}
	if (!ev)
		usleep(50);
}

/* The listed ranks as pump()'s two arguments. */
#define RANKS(...) (struct rank *[]){ __VA_ARGS__ }, ARRAY_SIZE(((struct rank *[]){ __VA_ARGS__ }))

/* Pump the listed ranks until @cond holds or @ms passed (scaled); the value of @cond. */
#define PUMP_UNTIL(ms, cond, ...)						\
	({									\
		struct rank *rs_[] = { __VA_ARGS__ };				\
		uint64_t dl_ = rk_test_deadline_ms(ms);				\
		while (!(cond) && rk_test_now_ns() < dl_)			\
			pump(rs_, ARRAY_SIZE(rs_));				\
		(bool)(cond);							\
	})
/* Pump the listed ranks for @ms, whatever happens. */
#define PUMP_FOR(ms, ...) ((void)PUMP_UNTIL(ms, false, __VA_ARGS__))

/* ---- ranks on threads of their own -------------------------------------------------- */

/*
 * A rank on a thread of its own, in a world of threads that meet on *@port.
 * The thread makes no Check assertion: it fails with T_FAIL(), and
 * run_rank_threads() asserts, after joining them all, that none did.
 */
struct rank_thread {
	struct rank r;
	atomic_int *port;	/* the leader's, once it listens */
	int line, err;		/* where and why it failed; 0: it did not */
	void *arg;		/* the test's */
};

/* Run @fn on a thread for each of @t[0..@n) (rank i), join them, assert none failed. */
static inline void run_rank_threads(struct rank_thread *t, int n, void *(*fn)(void *),
				    atomic_int *port)
{
	pthread_t th[16];
	int i;

	ck_assert_int_le(n, 16);
	atomic_init(port, 0);
	for (i = 0; i < n; i++) {
		t[i].r.rank = i;
		t[i].port = port;
		ck_assert_int_eq(pthread_create(&th[i], NULL, fn, &t[i]), 0);
	}
	for (i = 0; i < n; i++)
		ck_assert_int_eq(pthread_join(th[i], NULL), 0);
	for (i = 0; i < n; i++)
		ck_assert_msg(!t[i].line, "rank %d failed at line %d: %s", i, t[i].line,
			      rk_errname(t[i].err));
}

/* ---- followers in forked processes --------------------------------------------------- */

/*
 * Fork a process that runs @fn(@arg, port) once the test gives it the leader's
 * port (give_port() on *@port_fd) and exits with what @fn returns. The child
 * makes its own loop: a ring is never shared across fork.
 */
static inline pid_t fork_follower(int (*fn)(void *arg, int port), void *arg, int *port_fd)
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
		_exit(fn(arg, port));
	}
	close(p[0]);
	*port_fd = p[1];
	return pid;
}

/* Hand the forked follower behind @fd the leader's @port (fork_follower()). */
static inline void give_port(int fd, int port)
{
	ck_assert_int_gt(port, 0);
	ck_assert_int_eq(write(fd, &port, sizeof(port)), (ssize_t)sizeof(port));
	close(fd);
}

/* Pump the listed ranks until @pid exits, for @ms at most; its wait status. */
static inline int reap_child(pid_t pid, struct rank *const *rs, size_t n, unsigned int ms)
{
	uint64_t deadline = rk_test_deadline_ms(ms);
	int st;
	pid_t r;

	for (;;) {
		r = waitpid(pid, &st, WNOHANG);
		if (r == pid)
			return st;
		ck_assert_int_eq(r, 0);
		ck_assert_msg(rk_test_now_ns() < deadline, "child %d still running after %u ms",
			      pid, ms);
		pump(rs, n);
	}
}

/* ---- rankrt's log, captured --------------------------------------------------------- */

/* A line rankrt logged, and the lines so far (under g_log_lock: any thread may log). */
struct log_line {
	int level, rank;
	char *msg;
};

static pthread_mutex_t g_log_lock = PTHREAD_MUTEX_INITIALIZER;
static struct log_line *g_log;
static size_t g_log_n, g_log_cap;
static bool g_log_verbose;

/* The handler log_capture_start() installs: keep the line, print it when verbose. */
static inline void log_capture(int level, int rank, const char *msg, void *arg)
{
	struct log_line *p;

	(void)arg;
	pthread_mutex_lock(&g_log_lock);
	if (g_log_n == g_log_cap) {
		g_log_cap = g_log_cap ? 2 * g_log_cap : 64;
		p = realloc(g_log, g_log_cap * sizeof(*p));
		if (!p)
			abort();
		g_log = p;
	}
	g_log[g_log_n].level = level;
	g_log[g_log_n].rank = rank;
	g_log[g_log_n].msg = strdup(msg);
	if (!g_log[g_log_n++].msg)
		abort();
	pthread_mutex_unlock(&g_log_lock);
	if (g_log_verbose)
		fprintf(stderr, "    [%d] r%d %s\n", level, rank, msg);
}

/*
 * Capture rankrt's lines from here on, at RK_LOG_INFO and above, printing them
 * too when the environment has @verbose_env: a checked fixture's setup.
 */
static inline void log_capture_start(const char *verbose_env)
{
	g_log_verbose = getenv(verbose_env) != NULL;
	rk_log_set_handler(log_capture, NULL);
	rk__log_set_level(RK_LOG_INFO);
}

/* Back to stderr at RK_LOG_WARN, the lines forgotten: the fixture's teardown. */
static inline void log_capture_stop(void)
{
	size_t i;

	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
	pthread_mutex_lock(&g_log_lock);
	for (i = 0; i < g_log_n; i++)
		free(g_log[i].msg);
	free(g_log);
	g_log = NULL;
	g_log_n = g_log_cap = 0;
	pthread_mutex_unlock(&g_log_lock);
}

/* The lines captured so far at @level (-1: any) that hold @needle. Any thread. */
static inline unsigned int log_count(int level, const char *needle)
{
	unsigned int n = 0;
	size_t i;

	pthread_mutex_lock(&g_log_lock);
	for (i = 0; i < g_log_n; i++)
		n += (level < 0 || g_log[i].level == level) && strstr(g_log[i].msg, needle);
	pthread_mutex_unlock(&g_log_lock);
	return n;
}

#endif /* RK_RANK_TEST_H */
