/* SPDX-License-Identifier: MIT */
/*
 * rk-serve: a tensor-parallel decode server for the toy model (examples/toy/TOY.md)
 * on rankrt. Every rank runs it; rank 0 also serves HTTP.
 *
 *   rk-launch --hosts localhost,localhost -- rk-serve [--http 127.0.0.1:8800]
 *   rk-launch --hosts localhost,localhost -- rk-serve --demo
 *   rk-launch --hosts localhost,localhost -- rk-serve --backend=cuda --bench
 *
 * Rank 0 (the leader) runs the scheduler (rk_sched.h) and an HTTP server
 * (libmicrohttpd): POST /v1/completions, GET /v1/stats, GET /health
 * (docs/SERVE.md). Followers run every ROUND they receive until the leader
 * says BYE (or END, below). With --demo the leader generates from built-in
 * prompts instead of serving, prints tokens, hashes and a receipt, and ends
 * the job; with --bench it submits a matrix of closed-loop load straight to
 * the scheduler and prints a receipt per cell. The HTTP server is compiled in
 * only with libmicrohttpd and jansson (RK_HAVE_SERVE_HTTP); --demo and --bench
 * need neither. The backend is the toy model's CPU backend (toy_cpu) or its
 * CUDA backend (toy_cuda, --backend=cuda).
 *
 * Threads, leader: the loop thread owns the world, scheduler and backend. The
 * HTTP library's threads never touch them: they hand a request over with
 * rk_loop_post() (the struct rk_post is inside the request), the loop thread
 * submits it, and token callbacks (loop thread) append to the request's buffer
 * under its mutex and signal its condvar. Each connection has its own thread
 * (MHD_USE_THREAD_PER_CONNECTION), so the content reader may block on that
 * condvar. A request is freed when both sides let go (refcount under its
 * mutex): the scheduler at its done callback, HTTP when the response is
 * destroyed, which also covers a client that hangs up mid-stream.
 *
 * Shutdown (SIGINT/SIGTERM, or a peer's death): stop taking requests, stop the
 * scheduler (pending requests end with an error event), run the loop until
 * every handed-over request and the backend's round are back, stop the HTTP
 * server, tell the followers END (they tear down too: the CUDA backend's NCCL
 * finalize waits for every rank), then destroy backend, scheduler and world
 * (BYE to every peer).
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"
#include "cli.h"
#include "le.h"
#include "toy.h"
#include "toy_cuda.h"

#ifdef RK_HAVE_SERVE_HTTP
#include <jansson.h>
#include <microhttpd.h>

#if MHD_VERSION >= 0x00097002
#define MHD_RESULT enum MHD_Result
#else
#define MHD_RESULT int
#endif
#endif

#define PROG "rk-serve"
/* USER frames of rk-serve itself ("SRV"); the toy backend's are TOY_TAG (0x544f5900) */
#define SERVE_TAG      0x53525600u
#define MAX_BODY       (1u << 20) /* request body bytes */
#define MAX_PROMPT     8192u	  /* prompt tokens */
#define MAX_GEN	       4096u	  /* max_tokens */
#define MAX_BATCH      256u
#define DEF_MAX_TOKENS 16u
#define DEF_TOP_K      40u
#define DRAIN_NS       (10 * 1000000000ull)
#define END_FLUSH_ITER 4u /* loop passes that send END before the backend's teardown */

enum serve_msg {
	MSG_MODEL = 1,	   /* leader -> followers: V, H, backend, seed (checked) */
	MSG_STATS_REQ = 2, /* leader -> followers: seq */
	MSG_STATS_REP = 3, /* follower -> leader: seq, CPU, loop and backend counters */
	MSG_END = 4,	   /* leader -> followers: the job ends, tear down now */
	MSG_POLICY = 5,	   /* leader -> followers: policy index, wait, notify (--bench-policies) */
};

#define MSG_HDR	      16u /* kind, reserved, seq or model fields */
#define MODEL_LEN     24u /* kind, V, H, backend, seed */
#define POLICY_LEN    24u /* kind, reserved, policy index, wait mode, notify mode */
#define N_LOOP_CTR    19u /* struct rk_loop_stats, in field order */
#define N_TOY_CTR     3u  /* rounds, outputs, ns_compute (CUDA: ns_round) */
#define STATS_REP_LEN (MSG_HDR + 16u + 8u * (N_LOOP_CTR + N_TOY_CTR))

enum backend_kind {
	BACKEND_CPU = 0,
	BACKEND_CUDA = 1,
};

/* --bench: the request mix is rk-load's, so the hashes of a mode agree with it */
#define BENCH_MAX_LIST	8u
#define BENCH_MAX_RUNS	16u
#define BENCH_SEED_BASE 1000u
#define BENCH_TOP_K	40u
#define BENCH_TEMP	0.8f
#define BENCH_TOP_P	0.95f
#define BENCH_PROMPT	64u /* longest built-in prompt, in tokens */
#define BENCH_WARM_TOK	16u /* tokens per warm-up request */
#define BENCH_POLICIES	3u  /* default, block, spin */
#define POLICY_RETRY_MS 1u  /* a policy switch waits for the last marks this often */

struct options {
	struct toy_params model;
	uint32_t max_batch;
	uint32_t draft_k;
	char http[300];
	bool http_set;
	bool demo;
	enum backend_kind backend;
	enum rk_gpu_notify_mode notify;
	bool graphs;			/* cuda: a CUDA graph per round shape */
	bool graphs_set;
	bool notify_set;
	int device; /* -1: rank % device count */

	/* --bench (leader) */
	bool bench;
	uint32_t b_streams[BENCH_MAX_LIST], b_n_streams;
	bool b_modes[2];  /* greedy, sampled */
	bool b_drafts[2]; /* plain, drafted */
	uint32_t b_draft_k;
	uint32_t b_requests, b_max_tokens, b_runs, b_idle;
	const char *const *b_prompts;
	uint32_t b_n_prompts;
	const char *b_prompt_set;
	bool b_check_ref;
	bool b_warmup;
	uint32_t b_pol[BENCH_POLICIES], b_n_pol; /* --bench-policies, in order */
	const char *trace_path; /* --trace-rounds: FILE.r<rank> */
};

/* --trace-rounds: the scheduler's round events, kept until exit (loop thread). */
struct round_ev {
	uint64_t round_id, t_ns;
	uint32_t ev;
};

struct round_trace {
	struct round_ev *ev;
	size_t n, cap;
	bool full;
};

#define TRACE_MAX_EVENTS (1u << 22)

static void trace_round(void *arg, uint64_t round_id, enum rk_sched_event ev, uint64_t t_ns)
{
	struct round_trace *tr = arg;

	if (tr->n == tr->cap) {
		size_t cap = tr->cap ? tr->cap * 2 : 4096;
		struct round_ev *p;

		if (cap > TRACE_MAX_EVENTS || !(p = realloc(tr->ev, cap * sizeof(*p)))) {
			tr->full = true;
			return;
		}
		tr->ev = p;
		tr->cap = cap;
	}
	tr->ev[tr->n++] = (struct round_ev){ round_id, t_ns, (uint32_t)ev };
}

/* Write "round event t_ns" lines to @path.r<rank>. Return: 0 or -errno. */
static int trace_write(const struct round_trace *tr, const char *path, int rank)
{
	static const char *const names[] = { "sent", "launch", "done" };
	char name[PATH_MAX];
	FILE *f;
	size_t i;
	int ret = 0;

	snprintf(name, sizeof(name), "%s.r%d", path, rank);
	f = fopen(name, "w");
	if (!f)
		return -errno;
	for (i = 0; i < tr->n; i++)
		fprintf(f, "%" PRIu64 " %s %" PRIu64 "\n", tr->ev[i].round_id,
			tr->ev[i].ev < 3 ? names[tr->ev[i].ev] : "?", tr->ev[i].t_ns);
	if (ferror(f))
		ret = -EIO;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

/* The backend's counters that /v1/stats reports (toy_cpu's; CUDA's mapped onto them). */
struct be_stats {
	uint64_t rounds, outputs, ns_compute;
};

/* One rank's counters as /v1/stats reports them. */
struct rank_stats {
	bool valid;
	double user_s, sys_s;
	struct rk_loop_stats loop;
	struct be_stats toy;
};

struct server;

/*
 * A stats collection waiter. Its storage is the waiter's (an HTTP thread's
 * stack, or the demo's); it is the loop's from rk_loop_post() until done() is
 * called, which must be the loop's last access.
 */
struct stats_wait {
	struct rk_post post;
	struct server *srv;
	struct stats_wait *next;
	void (*done)(struct stats_wait *w);
	/* results, written by the loop thread before done() */
	int err;
	struct rank_stats *ranks; /* [world size], the waiter's */
	struct rk_sched_stats sched;
	uint64_t req_total, req_active, req_failed;
	bool finished; /* HTTP waiters: under srv->mu */
};

/* One completion request from HTTP. */
struct sreq {
	struct rk_request req; /* the loop thread's from post to done */
	struct rk_post post;
	struct server *srv;
	uint32_t *prompt;
	uint32_t n_prompt;
	bool stream;

	pthread_mutex_t mu;
	pthread_cond_t cv;
	/* under mu: written by the loop thread, read by the HTTP thread */
	uint32_t *toks; /* [max_tokens] */
	uint32_t n_toks;
	uint32_t *marks; /* token count after each round with tokens */
	uint32_t n_marks;
	bool done;
	int err;
	int refs; /* the scheduler's and HTTP's */

	/* HTTP thread only: the content reader's state */
	char *text; /* [max_tokens + 1] */
	uint32_t sent_marks;
	char *out;
	size_t out_len, out_off, out_cap;
	bool finished; /* [DONE] is in out */
};

/* What an HTTP connection collects before it answers. */
struct conn {
	char *body;
	size_t len, cap;
	bool too_big;
};

struct server {
	struct options opt;
	struct rk_config cfg;
	int rank, size;
	struct rk_loop *loop;
	struct rk_world *world;
	struct toy_cpu *cpu; /* the backend: one of these two */
	struct toy_cuda *cuda;
	struct rk_sched *sched;
	int err;      /* the first peer failure */
	int exit_rc;  /* leader: --bench's exit status when it ran through (3, 4) */
	bool bye;     /* follower: the leader said BYE or END */
	bool leaving; /* our own teardown: peer errors are expected */

	/* leader, loop thread */
	uint64_t req_total, req_active, req_failed;
	struct stats_wait *st_cur, *st_next; /* collecting now / queued for the next */
	uint64_t st_seq;
	uint32_t st_pending;
	struct rank_stats *st_ranks;
	uint8_t txbuf[8 + STATS_REP_LEN];

	/* --bench-policies: the policy asked for; a follower's switch waits for its marks */
	enum rk_wait_mode pol_wait;
	enum rk_gpu_notify_mode pol_notify;
	struct rk_timer pol_timer;
	bool pol_pending;
	bool st_deferred;	   /* follower: a stats request waits for the switch */
	uint8_t st_req[MSG_HDR];

	/* shared with the HTTP threads */
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* stats waiters */
	bool stopping;	     /* under mu: no new posts */
	unsigned int posted; /* under mu: handed to the loop, callback not run yet */

#ifdef RK_HAVE_SERVE_HTTP
	struct MHD_Daemon *httpd;
#endif
	char http_url[320];
};

/* ---- small helpers ------------------------------------------------------------- */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* This process's CPU time, every thread (loop, worker, HTTP). */
static void cpu_times(double *user_s, double *sys_s)
{
	struct rusage ru;

	getrusage(RUSAGE_SELF, &ru);
	*user_s = (double)ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6;
	*sys_s = (double)ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

/*
 * Token ids as text, one character each: printable ASCII ids (32..126) are
 * themselves, the others fold into that range. Prompts go the other way as
 * byte % V, so printable text of a V >= 127 model round-trips.
 */
static char tok_char(uint32_t t)
{
	return (char)(t >= 32 && t <= 126 ? t : 32 + t % 95);
}

static void tokens_text(const uint32_t *t, uint32_t n, char *out)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		out[i] = tok_char(t[i]);
	out[n] = '\0';
}

/* ---- the backend: toy_cpu or toy_cuda (loop thread) ----------------------------- */

#if defined(RK_HAVE_CUDA) && defined(RK_HAVE_NCCL)
#define HAVE_CUDA_BACKEND 1 /* toy_cuda.c has the real backend, not its stubs */
#endif

static const char *backend_name(enum backend_kind k)
{
	return k == BACKEND_CUDA ? "cuda" : "cpu";
}

static int be_create(struct server *srv)
{
	int ret;

	if (srv->opt.backend == BACKEND_CUDA) {
		ret = toy_cuda_create(srv->world, &srv->opt.model, srv->opt.device,
				      srv->opt.notify, &srv->cuda);
		if (!ret)
			toy_cuda_set_graphs(srv->cuda, srv->opt.graphs);
		return ret;
	}
	return toy_cpu_create(srv->world, &srv->opt.model, &srv->cpu);
}

static int be_sched_create(struct server *srv, const struct rk_sched_config *sc)
{
	int ret;

	if (srv->cuda) {
		ret = rk_sched_create(srv->world, sc, &toy_cuda_ops, srv->cuda, &srv->sched);
		if (!ret)
			toy_cuda_set_sched(srv->cuda, srv->sched);
		return ret;
	}
	ret = rk_sched_create(srv->world, sc, &toy_cpu_ops, srv->cpu, &srv->sched);
	if (!ret)
		toy_cpu_set_sched(srv->cpu, srv->sched);
	return ret;
}

/* Return: as toy_cpu_on_frame()/toy_cuda_on_frame(); -ENOENT when not the backend's. */
static int be_on_frame(struct server *srv, int peer, const struct rk_wire_hdr *h,
		       const uint8_t *payload)
{
	if (srv->cuda)
		return toy_cuda_on_frame(srv->cuda, peer, h, payload);
	if (srv->cpu)
		return toy_cpu_on_frame(srv->cpu, peer, h, payload);
	return -ENOENT;
}

static bool be_busy(const struct server *srv)
{
	if (srv->cuda)
		return toy_cuda_busy(srv->cuda);
	return srv->cpu && toy_cpu_busy(srv->cpu);
}

/* Return: 0, -EBUSY (nothing freed) while a round is in flight, or the CUDA teardown's error. */
static int be_destroy(struct server *srv)
{
	int ret;

	if (srv->cuda) {
		ret = toy_cuda_destroy(srv->cuda);
		if (ret != -EBUSY)
			srv->cuda = NULL;
		return ret;
	}
	ret = toy_cpu_destroy(srv->cpu);
	if (!ret)
		srv->cpu = NULL;
	return ret;
}

/* A peer failed: no collective of this rank may wait for it (CUDA: abort NCCL). */
static void be_abort(struct server *srv)
{
	if (srv->cuda)
		toy_cuda_abort(srv->cuda);
}

static void be_stats(const struct server *srv, struct be_stats *out)
{
	memset(out, 0, sizeof(*out));
	if (srv->cuda) {
		struct toy_cuda_stats cs;

		toy_cuda_stats(srv->cuda, &cs);
		out->rounds = cs.rounds;
		out->outputs = cs.outputs;
		out->ns_compute = cs.ns_round;
	} else if (srv->cpu) {
		struct toy_cpu_stats ts;

		toy_cpu_stats(srv->cpu, &ts);
		out->rounds = ts.rounds;
		out->outputs = ts.outputs;
		out->ns_compute = ts.ns_compute;
	}
}

/* --bench, CUDA: how this rank learned of its rounds' completions (on its own stdout). */
static void print_notify(const struct server *srv)
{
	struct toy_cuda_stats cs;
	const struct rk_gpu_notifier_stats *n = &cs.notify;

	if (!srv->cuda || !srv->opt.bench)
		return;
	toy_cuda_stats(srv->cuda, &cs);
	printf("notify r%d: %s, marks %" PRIu64 " via poll %" PRIu64 " via wake %" PRIu64
	       " predicted (no host function) %" PRIu64 " host function armed late %" PRIu64
	       " bounded samples %" PRIu64 ", a mark %.1f us +- %.1f us, expected after %.1f us\n",
	       srv->rank, rk_gpu_notify_mode_name(srv->opt.notify), n->marks, n->via_poll,
	       n->via_wake, n->predicted, n->wake_armed_late, n->pred_bounded,
	       n->pred_mean_ns / 1e3, n->pred_dev_ns / 1e3, n->pred_q_ns / 1e3);
	if (cs.enqueues) {
		double k = 1e3 * (double)cs.enqueues;

		printf("enqueue r%d: %" PRIu64 " rounds, host us per round: upload %.1f"
		       " kernels+allreduce %.1f copy %.1f mark %.1f (ncclInProgress %" PRIu64
		       ", graphs: %" PRIu64 " captured, %" PRIu64 " rounds)\n",
		       srv->rank, cs.enqueues, (double)cs.ns_upload / k, (double)cs.ns_compute / k,
		       (double)cs.ns_copy / k, (double)cs.ns_mark / k, cs.nccl_inprogress,
		       cs.graph_captures, cs.graph_launches);
	}
	fflush(stdout);
}

/* RK_LOG=debug: the lifecycle's steps, so that a stall shows where it is. */
static void phase(const struct server *srv, const char *what)
{
	if (srv->cfg.log_level >= RK_LOG_DEBUG)
		fprintf(stderr, PROG "[r%d]: %.3f: %s\n", srv->rank, (double)now_ns() / 1e9, what);
}

static void own_stats(struct server *srv, struct rank_stats *rs)
{
	rs->valid = true;
	cpu_times(&rs->user_s, &rs->sys_s);
	rk_loop_stats(srv->loop, &rs->loop);
	be_stats(srv, &rs->toy);
}

/* struct rk_loop_stats <-> N_LOOP_CTR u64, in field order */
static void loop_ctr(struct rk_loop_stats *s, uint64_t **v)
{
	v[0] = &s->iterations;
	v[1] = &s->events;
	v[2] = &s->busy_events;
	v[3] = &s->spin_iters;
	v[4] = &s->timed_waits;
	v[5] = &s->blocks;
	v[6] = &s->wakeups;
	v[7] = &s->posts;
	v[8] = &s->eintr;
	v[9] = &s->ns_spin;
	v[10] = &s->ns_timed;
	v[11] = &s->ns_blocked;
	v[12] = &s->ns_run;
	v[13] = &s->predict_waits;
	v[14] = &s->predict_early;
	v[15] = &s->predict_late;
	v[16] = &s->predict_cut;
	v[17] = &s->ns_oversleep;
	v[18] = &s->predict_margin_ns;
}

static int send_msg(struct server *srv, int to, const uint8_t *msg, uint32_t len)
{
	int n = rk_wire_encode_user(srv->txbuf, sizeof(srv->txbuf), SERVE_TAG, msg, len);

	if (n < 0)
		return n;
	if (to < 0)
		return rk_world_broadcast(srv->world, RK_FRAME_USER, 0, srv->txbuf, (uint32_t)n);
	return rk_world_send(srv->world, to, RK_FRAME_USER, 0, srv->txbuf, (uint32_t)n);
}

/* ---- stats collection (leader, loop thread) ------------------------------------- */

static void stats_start(struct server *srv);

static void stats_finish(struct server *srv, int err)
{
	struct stats_wait *w, *next;
	struct rk_sched_stats ss;

	rk_sched_stats(srv->sched, &ss);
	for (w = srv->st_cur; w; w = next) {
		next = w->next; /* done() may end the waiter's storage */
		w->err = err;
		if (!err) {
			memcpy(w->ranks, srv->st_ranks, (size_t)srv->size * sizeof(*w->ranks));
			w->sched = ss;
			w->req_total = srv->req_total;
			w->req_active = srv->req_active;
			w->req_failed = srv->req_failed;
		}
		w->done(w);
	}
	srv->st_cur = NULL;
	srv->st_pending = 0;
}

/* Fail every waiter, current and queued (shutdown, a dead peer). */
static void stats_fail_all(struct server *srv, int err)
{
	stats_finish(srv, err);
	srv->st_cur = srv->st_next;
	srv->st_next = NULL;
	stats_finish(srv, err);
}

/*
 * Begin a collection for the queued waiters. Waiters that arrive while one
 * runs wait for the next: every answer then postdates their request, which
 * is what a before/after CPU measurement needs.
 */
static void stats_start(struct server *srv)
{
	uint8_t msg[MSG_HDR] = { 0 };
	int ret;

	if (srv->st_cur || !srv->st_next)
		return;
	srv->st_cur = srv->st_next;
	srv->st_next = NULL;
	srv->st_seq++;
	memset(srv->st_ranks, 0, (size_t)srv->size * sizeof(*srv->st_ranks));
	own_stats(srv, &srv->st_ranks[0]);
	srv->st_pending = (uint32_t)srv->size - 1;
	if (!srv->st_pending) {
		stats_finish(srv, 0);
		return;
	}
	put32(msg, MSG_STATS_REQ);
	put64(msg + 8, srv->st_seq);
	ret = send_msg(srv, -1, msg, sizeof(msg));
	if (ret)
		stats_finish(srv, ret);
}

#ifdef RK_HAVE_SERVE_HTTP
/* An HTTP thread's stats waiter reaches the loop. */
static enum rk_activity stats_post_cb(struct rk_post *p)
{
	struct stats_wait *w = p->data;
	struct server *srv = w->srv;
	bool stopping;

	pthread_mutex_lock(&srv->mu);
	srv->posted--;
	stopping = srv->stopping;
	pthread_mutex_unlock(&srv->mu);
	if (stopping || srv->err) {
		w->err = stopping ? -RK_ESTOPPED : srv->err;
		w->done(w);
		return RK_BUSY;
	}
	w->next = srv->st_next;
	srv->st_next = w;
	stats_start(srv);
	return RK_BUSY;
}
#endif

static void stats_reply(struct server *srv, int peer, const uint8_t *d)
{
	struct rank_stats *rs;
	uint64_t *ctr[N_LOOP_CTR];
	uint32_t i;

	if (!srv->st_cur || get64(d + 8) != srv->st_seq)
		return; /* an answer to a collection that failed: stale */
	rs = &srv->st_ranks[peer];
	if (rs->valid)
		return;
	rs->valid = true;
	rs->user_s = (double)get64(d + 16) / 1e6;
	rs->sys_s = (double)get64(d + 24) / 1e6;
	loop_ctr(&rs->loop, ctr);
	for (i = 0; i < N_LOOP_CTR; i++)
		*ctr[i] = get64(d + 32 + 8 * i);
	d += 32 + 8 * N_LOOP_CTR;
	rs->toy.rounds = get64(d);
	rs->toy.outputs = get64(d + 8);
	rs->toy.ns_compute = get64(d + 16);
	if (--srv->st_pending == 0) {
		stats_finish(srv, 0);
		stats_start(srv);
	}
}

/* Follower: answer a stats request with this rank's counters. */
static int stats_answer(struct server *srv, const uint8_t *req)
{
	uint8_t msg[STATS_REP_LEN] = { 0 };
	struct rank_stats rs;
	uint64_t *ctr[N_LOOP_CTR];
	uint32_t i;
	uint8_t *d;

	own_stats(srv, &rs);
	put32(msg, MSG_STATS_REP);
	put64(msg + 8, get64(req + 8));
	put64(msg + 16, (uint64_t)llround(rs.user_s * 1e6));
	put64(msg + 24, (uint64_t)llround(rs.sys_s * 1e6));
	loop_ctr(&rs.loop, ctr);
	for (i = 0; i < N_LOOP_CTR; i++)
		put64(msg + 32 + 8 * i, *ctr[i]);
	d = msg + 32 + 8 * N_LOOP_CTR;
	put64(d, rs.toy.rounds);
	put64(d + 8, rs.toy.outputs);
	put64(d + 16, rs.toy.ns_compute);
	return send_msg(srv, 0, msg, sizeof(msg));
}

/* ---- --bench-policies: three wait policies in one process (loop thread) ---------- */

static const struct bench_policy {
	const char *name;
	enum rk_wait_mode wait;
	enum rk_gpu_notify_mode notify; /* cuda */
} bench_policies[BENCH_POLICIES] = {
	{ "default", RK_WAIT_ADAPTIVE, RK_GPU_NOTIFY_AUTO },
	{ "block", RK_WAIT_BLOCK, RK_GPU_NOTIFY_WAKE },
	{ "spin", RK_WAIT_SPIN, RK_GPU_NOTIFY_POLL },
};

/*
 * Put srv->pol_wait into effect (the configured policy, that mode) and
 * srv->pol_notify on the CUDA notifier. Return: 0; -EBUSY while a mark is
 * outstanding (run the loop, retry); the notifier's error.
 */
static int policy_apply(struct server *srv)
{
	struct rk_wait_policy w = srv->cfg.wait;

	w.mode = srv->pol_wait;
	rk_loop_set_wait(srv->loop, &w);
	return srv->cuda ? toy_cuda_set_notify(srv->cuda, srv->pol_notify) : 0;
}

/* Follower: the switch is done (or failed); answer the stats request it held back. */
static void policy_done(struct server *srv, int ret)
{
	srv->pol_pending = false;
	rk_timer_stop(&srv->pol_timer);
	if (!ret && srv->st_deferred) {
		srv->st_deferred = false;
		ret = stats_answer(srv, srv->st_req);
	}
	if (ret) {
		fprintf(stderr, PROG "[r%d]: --bench-policies: %s\n", srv->rank, rk_strerror(ret));
		srv->err = ret;
		rk_loop_stop(srv->loop);
	}
}

static enum rk_activity policy_retry_cb(struct rk_timer *t, uint64_t now)
{
	struct server *srv = t->data;
	int ret = policy_apply(srv);

	(void)now;
	if (ret == -EBUSY)
		return RK_IDLE;
	policy_done(srv, ret);
	return RK_IDLE;
}

/*
 * Follower: the leader's MSG_POLICY. Frames on the link keep their order, so
 * the next cell's ROUNDs find it in effect; a switch that waits for the last
 * (lazy) marks holds back the stats request that starts the cell.
 */
static void policy_frame(struct server *srv, const uint8_t *d)
{
	int ret;

	srv->pol_wait = (enum rk_wait_mode)get32(d + 16);
	srv->pol_notify = (enum rk_gpu_notify_mode)get32(d + 20);
	ret = policy_apply(srv);
	if (ret != -EBUSY) {
		policy_done(srv, ret);
		return;
	}
	if (!srv->pol_pending) {
		srv->pol_pending = true;
		rk_timer_start(srv->loop, &srv->pol_timer, POLICY_RETRY_MS * 1000000ull,
			       POLICY_RETRY_MS * 1000000ull);
	}
}

/* ---- the world's callbacks (loop thread) ---------------------------------------- */

static enum rk_activity serve_frame(struct server *srv, int peer, const struct rk_wire_user *u)
{
	uint32_t kind;
	int ret;

	if (u->len < MSG_HDR)
		goto bad;
	kind = get32(u->data);
	/*
	 * Stats frames are bookkeeping, not decode work: RK_IDLE, so that a
	 * measurement does not open the spin window that it then measures.
	 */
	if (srv->rank == 0) {
		if (kind != MSG_STATS_REP || u->len != STATS_REP_LEN || peer <= 0 ||
		    peer >= srv->size)
			goto bad;
		stats_reply(srv, peer, u->data);
		return RK_IDLE;
	}
	if (peer != 0)
		goto bad;
	switch (kind) {
	case MSG_MODEL:
		if (u->len != MODEL_LEN || get32(u->data + 12) > BACKEND_CUDA)
			goto bad;
		if (get32(u->data + 4) != srv->opt.model.V ||
		    get32(u->data + 8) != srv->opt.model.H ||
		    get32(u->data + 12) != srv->opt.backend ||
		    get64(u->data + 16) != srv->opt.model.seed) {
			fprintf(stderr,
				PROG "[r%d]: the leader runs --vocab %" PRIu32 " --hidden %" PRIu32
				     " --model-seed %" PRIu64 " --backend %s, this rank --vocab %"
				     PRIu32 " --hidden %" PRIu32 " --model-seed %" PRIu64
				     " --backend %s\n",
				srv->rank, get32(u->data + 4), get32(u->data + 8),
				get64(u->data + 16), backend_name(get32(u->data + 12)),
				srv->opt.model.V, srv->opt.model.H, srv->opt.model.seed,
				backend_name(srv->opt.backend));
			srv->err = -RK_ECONFIG;
			rk_loop_stop(srv->loop);
			return RK_BUSY;
		}
		return RK_BUSY;
	case MSG_POLICY:
		if (u->len != POLICY_LEN || get32(u->data + 16) > RK_WAIT_BLOCK ||
		    get32(u->data + 20) > RK_GPU_NOTIFY_WAKE)
			goto bad;
		policy_frame(srv, u->data);
		return RK_IDLE;
	case MSG_STATS_REQ:
		if (srv->pol_pending) {
			memcpy(srv->st_req, u->data, MSG_HDR);
			srv->st_deferred = true;
			return RK_IDLE;
		}
		ret = stats_answer(srv, u->data);
		if (ret)
			fprintf(stderr, PROG "[r%d]: stats: %s\n", srv->rank, rk_strerror(ret));
		return RK_IDLE;
	case MSG_END:
		/* the leader ends the job: a clean exit, as on its BYE */
		phase(srv, "END from the leader");
		srv->bye = true;
		rk_loop_stop(srv->loop);
		return RK_BUSY;
	default:
		break;
	}
bad:
	fprintf(stderr, PROG "[r%d]: a malformed rk-serve frame from rank %d: dropped\n", srv->rank,
		peer);
	return RK_IDLE;
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct server *srv = arg;
	struct rk_wire_user u;
	int ret;

	(void)w;
	/* backend and scheduler exist before the world can deliver a frame */
	ret = rk_sched_on_frame(srv->sched, peer, h, payload);
	if (ret != -ENOENT)
		return ret < 0 ? RK_BUSY : (enum rk_activity)ret;
	ret = be_on_frame(srv, peer, h, payload);
	if (ret != -ENOENT)
		return RK_BUSY; /* -EPROTO: the backend failed the round, the scheduler says so */
	if (h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u) &&
	    u.tag == SERVE_TAG)
		return serve_frame(srv, peer, &u);
	return RK_IDLE;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct server *srv = arg;

	(void)w;
	if (srv->rank != 0 && rank == 0 && err == -RK_EPEERBYE) {
		if (!srv->bye)
			be_abort(srv); /* BYE without END: the leader's communicator is gone */
		srv->bye = true;       /* the leader ended the job: a clean exit */
		rk_loop_stop(srv->loop);
		return;
	}
	/* no collective of ours may wait for a dead rank, even while we leave */
	be_abort(srv);
	if (srv->leaving)
		return;
	fprintf(stderr, PROG "[r%d]: rank %d failed: %s\n", srv->rank, rank, rk_strerror(err));
	if (!srv->err)
		srv->err = err;
	if (srv->rank == 0)
		stats_fail_all(srv, err);
	rk_loop_stop(srv->loop);
}

static const struct rk_world_ops world_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};

#ifdef RK_HAVE_SERVE_HTTP
/* ---- requests: the loop side ------------------------------------------------------ */

static void sreq_free(struct sreq *r)
{
	pthread_cond_destroy(&r->cv);
	pthread_mutex_destroy(&r->mu);
	free(r->prompt);
	free(r->toks);
	free(r->marks);
	free(r->out);
	free(r->text);
	free(r);
}

/* Drop one side's reference; the last one frees. Any thread. */
static void sreq_put(struct sreq *r)
{
	bool last;

	pthread_mutex_lock(&r->mu);
	last = --r->refs == 0;
	pthread_mutex_unlock(&r->mu);
	if (last)
		sreq_free(r);
}

/* Loop thread: new tokens, and the end. */
static void sreq_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct sreq *r = req->data;
	struct server *srv = r->srv;
	uint32_t room;
	bool orphan;

	pthread_mutex_lock(&r->mu);
	room = r->req.max_tokens - r->n_toks;
	if (n > room)
		n = room;
	if (n) {
		memcpy(r->toks + r->n_toks, t, n * sizeof(*t));
		r->n_toks += n;
		r->marks[r->n_marks++] = r->n_toks;
	}
	if (done) {
		r->done = true;
		r->err = err;
	}
	/* only the scheduler still holds it: the client hung up */
	orphan = !done && r->refs == 1;
	pthread_cond_signal(&r->cv);
	pthread_mutex_unlock(&r->mu);
	if (orphan) {
		/* stop spending rounds on it; the done callback follows */
		rk_sched_cancel(srv->sched, req);
		return;
	}
	if (done) {
		srv->req_active--;
		if (err)
			srv->req_failed++;
		sreq_put(r); /* the scheduler's reference */
	}
}

static enum rk_activity sreq_post_cb(struct rk_post *p)
{
	struct sreq *r = p->data;
	struct server *srv = r->srv;
	int ret;

	pthread_mutex_lock(&srv->mu);
	srv->posted--;
	pthread_mutex_unlock(&srv->mu);
	srv->req_total++;
	srv->req_active++;
	/* after rk_sched_stop() this is -RK_ESTOPPED */
	ret = rk_sched_submit(srv->sched, &r->req);
	if (ret)
		sreq_cb(&r->req, NULL, 0, true, ret);
	return RK_BUSY;
}

/* ---- requests: the HTTP side ------------------------------------------------------ */

struct params {
	uint32_t *prompt;
	uint32_t n_prompt;
	uint32_t max_tokens;
	double temperature;
	uint32_t top_k;
	double top_p;
	uint64_t seed;
	int32_t draft_k;
	bool stream;
};

static int bad(char *err, size_t len, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int bad(char *err, size_t len, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(err, len, fmt, ap);
	va_end(ap);
	return -EINVAL;
}

static int get_int(json_t *v, const char *name, json_int_t lo, json_int_t hi, json_int_t *out,
		   char *err, size_t errlen)
{
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return bad(err, errlen, "%s: expected an integer in [%lld, %lld]", name,
			   (long long)lo, (long long)hi);
	*out = json_integer_value(v);
	return 0;
}

/* Parse and check a completion request. Return 0 or -EINVAL with @err set. */
static int parse_request(const struct server *srv, const char *body, size_t len, struct params *p,
			 char *err, size_t errlen)
{
	const uint32_t V = srv->opt.model.V;
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	json_int_t x;
	size_t i, n;
	int ret = -EINVAL;

	memset(p, 0, sizeof(*p));
	p->max_tokens = DEF_MAX_TOKENS;
	p->top_k = DEF_TOP_K;
	p->top_p = 1.0;
	p->draft_k = -1;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return bad(err, errlen, "bad JSON at line %d column %d: %s", jerr.line, jerr.column,
			   jerr.text);
	if (!json_is_object(root)) {
		bad(err, errlen, "expected a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v) {
		if (!strcmp(key, "prompt")) {
			if (json_is_string(v)) {
				const unsigned char *s =
					(const unsigned char *)json_string_value(v);

				n = json_string_length(v);
				if (!n || n > MAX_PROMPT) {
					bad(err, errlen, "prompt: expected 1 to %u bytes",
					    MAX_PROMPT);
					goto out;
				}
				p->prompt = malloc(n * sizeof(*p->prompt));
				if (!p->prompt)
					goto nomem;
				for (i = 0; i < n; i++)
					p->prompt[i] = s[i] % V;
			} else if (json_is_array(v)) {
				n = json_array_size(v);
				if (!n || n > MAX_PROMPT) {
					bad(err, errlen, "prompt: expected 1 to %u token ids",
					    MAX_PROMPT);
					goto out;
				}
				p->prompt = malloc(n * sizeof(*p->prompt));
				if (!p->prompt)
					goto nomem;
				for (i = 0; i < n; i++) {
					if (get_int(json_array_get(v, i), "prompt[]", 0, V - 1, &x,
						    err, errlen))
						goto out;
					p->prompt[i] = (uint32_t)x;
				}
			} else {
				bad(err, errlen,
				    "prompt: expected a string or an array of token ids");
				goto out;
			}
			p->n_prompt = (uint32_t)n;
		} else if (!strcmp(key, "max_tokens")) {
			if (get_int(v, key, 1, MAX_GEN, &x, err, errlen))
				goto out;
			p->max_tokens = (uint32_t)x;
		} else if (!strcmp(key, "temperature")) {
			if (!json_is_number(v) || !isfinite(json_number_value(v)) ||
			    json_number_value(v) < 0 || json_number_value(v) > 100) {
				bad(err, errlen, "temperature: expected a number in [0, 100]");
				goto out;
			}
			p->temperature = json_number_value(v);
		} else if (!strcmp(key, "top_k")) {
			if (get_int(v, key, 0, TOY_MAX_V, &x, err, errlen))
				goto out;
			p->top_k = (uint32_t)x;
		} else if (!strcmp(key, "top_p")) {
			if (!json_is_number(v) || !(json_number_value(v) > 0) ||
			    json_number_value(v) > 1) {
				bad(err, errlen, "top_p: expected a number in (0, 1]");
				goto out;
			}
			p->top_p = json_number_value(v);
		} else if (!strcmp(key, "seed")) {
			if (get_int(v, key, 0, (json_int_t)INT64_MAX, &x, err, errlen))
				goto out;
			p->seed = (uint64_t)x;
		} else if (!strcmp(key, "draft_k")) {
			if (get_int(v, key, -1, RK_SCHED_MAX_DRAFT, &x, err, errlen))
				goto out;
			p->draft_k = (int32_t)x;
		} else if (!strcmp(key, "stream")) {
			if (!json_is_boolean(v)) {
				bad(err, errlen, "stream: expected true or false");
				goto out;
			}
			p->stream = json_is_true(v);
		} else if (!strcmp(key, "model")) {
			/* OpenAI-style clients send it; there is one model */
		} else {
			bad(err, errlen, "unknown field '%s'", key);
			goto out;
		}
	}
	if (!p->prompt) {
		bad(err, errlen, "prompt: missing");
		goto out;
	}
	ret = 0;
	goto out;
nomem:
	bad(err, errlen, "out of memory");
	ret = -ENOMEM;
out:
	json_decref(root);
	if (ret) {
		free(p->prompt);
		p->prompt = NULL;
	}
	return ret;
}

static struct sreq *sreq_create(struct server *srv, struct params *p)
{
	struct sreq *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->toks = malloc(p->max_tokens * sizeof(*r->toks));
	r->marks = malloc(p->max_tokens * sizeof(*r->marks));
	r->text = malloc(p->max_tokens + 1);
	if (!r->toks || !r->marks || !r->text)
		goto err_free;
	if (pthread_mutex_init(&r->mu, NULL))
		goto err_free;
	if (pthread_cond_init(&r->cv, NULL))
		goto err_mutex;
	r->srv = srv;
	r->prompt = p->prompt; /* ours now */
	p->prompt = NULL;
	r->n_prompt = p->n_prompt;
	r->stream = p->stream;
	r->refs = 2;
	r->req.prompt = r->prompt;
	r->req.prompt_len = r->n_prompt;
	r->req.max_tokens = p->max_tokens;
	r->req.stop_token = -1;
	if (p->temperature > 0) {
		r->req.top_k = p->top_k ? p->top_k : srv->opt.model.V;
		r->req.temperature = (float)p->temperature;
		r->req.top_p = (float)p->top_p;
	}
	r->req.seed = p->seed;
	r->req.draft_k = p->draft_k;
	r->req.cb = sreq_cb;
	r->req.data = r;
	r->post.cb = sreq_post_cb;
	r->post.data = r;
	return r;
err_mutex:
	pthread_mutex_destroy(&r->mu);
err_free:
	free(r->toks);
	free(r->marks);
	free(r->text);
	free(r);
	return NULL;
}

/* Hand @p to the loop unless the server is stopping. Return: 0 or -RK_ESTOPPED. */
static int post_to_loop(struct server *srv, struct rk_post *p)
{
	pthread_mutex_lock(&srv->mu);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->mu);
		return -RK_ESTOPPED;
	}
	srv->posted++;
	pthread_mutex_unlock(&srv->mu);
	rk_loop_post(srv->loop, p);
	return 0;
}

static MHD_RESULT reply(struct MHD_Connection *c, unsigned int status, json_t *body)
{
	struct MHD_Response *resp;
	MHD_RESULT ret;
	char *s = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;

	json_decref(body);
	if (!s)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_COPY);
	free(s);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	ret = MHD_queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

static MHD_RESULT reply_error(struct MHD_Connection *c, unsigned int status, const char *msg)
{
	return reply(c, status, json_pack("{s:s}", "error", msg));
}

static json_t *tokens_json(const uint32_t *t, uint32_t n)
{
	json_t *a = json_array();
	uint32_t i;

	for (i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(t[i]));
	return a;
}

/* Append an SSE event "data: <json>\n\n" to the reader's buffer. */
static int out_event(struct sreq *r, json_t *ev)
{
	char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	size_t n, need;
	int ret = -ENOMEM;

	json_decref(ev);
	if (!s)
		return ret;
	n = strlen(s);
	need = r->out_len + n + 9; /* "data: " s "\n\n" and sprintf's NUL */
	if (need > r->out_cap) {
		char *o = realloc(r->out, need * 2);

		if (!o)
			goto out;
		r->out = o;
		r->out_cap = need * 2;
	}
	r->out_len += (size_t)sprintf(r->out + r->out_len, "data: %s\n\n", s);
	ret = 0;
out:
	free(s);
	return ret;
}

static int out_raw(struct sreq *r, const char *s)
{
	size_t n = strlen(s);

	if (r->out_len + n > r->out_cap) {
		char *o = realloc(r->out, r->out_len + n + 64);

		if (!o)
			return -ENOMEM;
		r->out = o;
		r->out_cap = r->out_len + n + 64;
	}
	memcpy(r->out + r->out_len, s, n);
	r->out_len += n;
	return 0;
}

/*
 * The streaming response's content reader (the connection's own thread, so it
 * may block): one event per round that produced tokens, then [DONE].
 */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sreq *r = cls;
	uint32_t marks, first, last, m;
	bool done;
	int err, ret = 0;
	size_t n;

	(void)pos;
	if (r->out_off == r->out_len) {
		if (r->finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		r->out_off = r->out_len = 0;
		pthread_mutex_lock(&r->mu);
		while (r->sent_marks == r->n_marks && !r->done)
			pthread_cond_wait(&r->cv, &r->mu);
		marks = r->n_marks;
		done = r->done;
		err = r->err;
		pthread_mutex_unlock(&r->mu);
		/* toks[0 .. marks[marks-1]) are written once, before the unlock above */
		for (m = r->sent_marks; m < marks && !ret; m++) {
			first = m ? r->marks[m - 1] : 0;
			last = r->marks[m];
			tokens_text(r->toks + first, last - first, r->text);
			ret = out_event(r, json_pack("{s:o,s:s}", "tokens",
						     tokens_json(r->toks + first, last - first),
						     "text", r->text));
		}
		r->sent_marks = marks;
		if (!ret && done) {
			if (err)
				ret = out_event(r, json_pack("{s:s}", "error", rk_strerror(err)));
			if (!ret)
				ret = out_raw(r, "data: [DONE]\n\n");
			r->finished = true;
		}
		if (ret)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = r->out_len - r->out_off;
	if (n > max)
		n = max;
	memcpy(buf, r->out + r->out_off, n);
	r->out_off += n;
	return (ssize_t)n;
}

static void sse_free(void *cls)
{
	sreq_put(cls); /* HTTP's reference */
}

static MHD_RESULT handle_completion(struct server *srv, struct MHD_Connection *c, struct conn *cn)
{
	struct MHD_Response *resp;
	struct params p;
	struct sreq *r;
	char err[256];
	json_t *body;
	int perr;
	MHD_RESULT ret;

	if (cn->too_big)
		return reply_error(c, 413 /* content too large */, "request body too large");
	perr = parse_request(srv, cn->body ? cn->body : "", cn->len, &p, err, sizeof(err));
	if (perr)
		return reply_error(
			c, perr == -ENOMEM ? MHD_HTTP_INTERNAL_SERVER_ERROR : MHD_HTTP_BAD_REQUEST,
			err);
	r = sreq_create(srv, &p);
	if (!r) {
		free(p.prompt);
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	}
	if (post_to_loop(srv, &r->post)) {
		sreq_free(r);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is stopping");
	}
	if (r->stream) {
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, r,
							 sse_free);
		if (!resp) {
			sreq_put(r);
			return MHD_NO;
		}
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp); /* sse_free() drops our reference */
		return ret;
	}
	/* one JSON reply: this connection's thread waits for the whole request */
	pthread_mutex_lock(&r->mu);
	while (!r->done)
		pthread_cond_wait(&r->cv, &r->mu);
	pthread_mutex_unlock(&r->mu);
	if (r->err) {
		ret = reply_error(c,
				  r->err == -RK_ESTOPPED ? MHD_HTTP_SERVICE_UNAVAILABLE
							 : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  rk_strerror(r->err));
		sreq_put(r);
		return ret;
	}
	tokens_text(r->toks, r->n_toks, r->text);
	body = json_pack("{s:I,s:o,s:s,s:{s:i,s:i}}", "id", (json_int_t)r->req.id, "tokens",
			 tokens_json(r->toks, r->n_toks), "text", r->text, "usage", "prompt_tokens",
			 (int)r->n_prompt, "completion_tokens", (int)r->n_toks);
	sreq_put(r);
	return reply(c, MHD_HTTP_OK, body);
}

static void stats_http_done(struct stats_wait *w)
{
	struct server *srv = w->srv;

	pthread_mutex_lock(&srv->mu);
	w->finished = true;
	pthread_cond_broadcast(&srv->cv);
	pthread_mutex_unlock(&srv->mu);
}

static json_t *loop_json(const struct rk_loop_stats *s)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "iterations",
			 (json_int_t)s->iterations, "events", (json_int_t)s->events, "busy_events",
			 (json_int_t)s->busy_events, "spin_iters", (json_int_t)s->spin_iters,
			 "timed_waits", (json_int_t)s->timed_waits, "blocks", (json_int_t)s->blocks,
			 "wakeups", (json_int_t)s->wakeups, "posts", (json_int_t)s->posts, "spin_s",
			 s->ns_spin / 1e9, "blocked_s", s->ns_blocked / 1e9, "run_s",
			 s->ns_run / 1e9);
}

static MHD_RESULT handle_stats(struct server *srv, struct MHD_Connection *c)
{
	struct stats_wait w = { .srv = srv, .done = stats_http_done };
	json_t *ranks, *body;
	int i;

	w.ranks = calloc((size_t)srv->size, sizeof(*w.ranks));
	if (!w.ranks)
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	w.post.cb = stats_post_cb;
	w.post.data = &w;
	if (post_to_loop(srv, &w.post)) {
		free(w.ranks);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is stopping");
	}
	/* the loop always calls done(): in a collection, or failing it at shutdown */
	pthread_mutex_lock(&srv->mu);
	while (!w.finished)
		pthread_cond_wait(&srv->cv, &srv->mu);
	pthread_mutex_unlock(&srv->mu);
	if (w.err) {
		free(w.ranks);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, rk_strerror(w.err));
	}
	ranks = json_array();
	for (i = 0; ranks && i < srv->size; i++) {
		const struct rank_stats *rs = &w.ranks[i];

		json_array_append_new(ranks, json_pack("{s:i,s:f,s:f,s:f,s:o,s:{s:I,s:I,s:f}}",
						       "rank", i, "cpu_s", rs->user_s + rs->sys_s,
						       "user_s", rs->user_s, "sys_s", rs->sys_s,
						       "loop", loop_json(&rs->loop), "backend",
						       "rounds", (json_int_t)rs->toy.rounds,
						       "outputs", (json_int_t)rs->toy.outputs,
						       "compute_s", rs->toy.ns_compute / 1e9));
	}
	free(w.ranks);
	body = json_pack("{s:i,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:f},s:{s:I,s:I,s:I}}", "world_size",
			 srv->size, "ranks", ranks, "sched", "rounds", (json_int_t)w.sched.rounds,
			 "tokens", (json_int_t)w.sched.tokens, "drafted",
			 (json_int_t)w.sched.drafted, "accepted", (json_int_t)w.sched.accepted,
			 "streams_done", (json_int_t)w.sched.streams_done, "round_s",
			 w.sched.ns_round_sum / 1e9, "requests", "total", (json_int_t)w.req_total,
			 "active", (json_int_t)w.req_active, "failed", (json_int_t)w.req_failed);
	return reply(c, MHD_HTTP_OK, body);
}

static MHD_RESULT handle_health(struct server *srv, struct MHD_Connection *c)
{
	bool stopping;

	pthread_mutex_lock(&srv->mu);
	stopping = srv->stopping;
	pthread_mutex_unlock(&srv->mu);
	return reply(c, stopping ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
		     json_pack("{s:s,s:i,s:i,s:i,s:I,s:i,s:i}", "status",
			       stopping ? "stopping" : "ok", "world_size", srv->size, "vocab",
			       (int)srv->opt.model.V, "hidden", (int)srv->opt.model.H, "model_seed",
			       (json_int_t)srv->opt.model.seed, "max_batch",
			       (int)srv->opt.max_batch, "draft_k", (int)srv->opt.draft_k));
}

/* The access handler (an HTTP connection's thread). */
static MHD_RESULT on_http(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			  const char *version, const char *upload, size_t *upload_size,
			  void **con_cls)
{
	struct server *srv = cls;
	struct conn *cn = *con_cls;
	bool post = !strcmp(method, MHD_HTTP_METHOD_POST);
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET);

	(void)version;
	if (!strcmp(url, "/v1/completions")) {
		if (!post)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
		if (!cn) {
			/* first call: headers only; the body follows in later calls */
			cn = calloc(1, sizeof(*cn));
			if (!cn)
				return MHD_NO;
			*con_cls = cn;
			return MHD_YES;
		}
		if (*upload_size) {
			size_t n = *upload_size;

			*upload_size = 0;
			if (cn->too_big || cn->len + n > MAX_BODY) {
				cn->too_big = true;
				return MHD_YES;
			}
			if (cn->len + n + 1 > cn->cap) {
				size_t cap = (cn->len + n + 1) * 2;
				char *p = realloc(cn->body, cap);

				if (!p)
					return MHD_NO;
				cn->body = p;
				cn->cap = cap;
			}
			memcpy(cn->body + cn->len, upload, n);
			cn->len += n;
			return MHD_YES;
		}
		return handle_completion(srv, c, cn);
	}
	if (!strcmp(url, "/v1/stats") || !strcmp(url, "/health")) {
		if (!get)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
		return url[1] == 'h' ? handle_health(srv, c) : handle_stats(srv, c);
	}
	return reply_error(c, MHD_HTTP_NOT_FOUND, "no such endpoint");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct conn *cn = *con_cls;

	(void)cls;
	(void)c;
	(void)toe;
	if (cn) {
		free(cn->body);
		free(cn);
		*con_cls = NULL;
	}
}

/* Parse "HOST:PORT" or "[V6]:PORT" into @ss. Return 0 or -EINVAL with a message. */
static int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sslen)
{
	char host[256], *end;
	const char *colon, *port;
	struct addrinfo hints = { .ai_socktype = SOCK_STREAM,
				  .ai_flags = AI_PASSIVE | AI_NUMERICSERV };
	struct addrinfo *res;
	unsigned long pn;
	size_t hl;
	int ret;

	if (s[0] == '[') {
		end = strchr(s, ']');
		if (!end || end[1] != ':')
			return -EINVAL;
		hl = (size_t)(end - s - 1);
		port = end + 2;
		s++;
	} else {
		colon = strrchr(s, ':');
		if (!colon)
			return -EINVAL;
		hl = (size_t)(colon - s);
		port = colon + 1;
	}
	if (!hl || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, s, hl);
	host[hl] = '\0';
	errno = 0;
	pn = strtoul(port, &end, 10);
	if (!*port || *end || errno || pn > 65535 || port[0] == '-' || port[0] == '+')
		return -EINVAL;
	ret = getaddrinfo(host, port, &hints, &res);
	if (ret)
		return -EINVAL;
	memcpy(ss, res->ai_addr, res->ai_addrlen);
	*sslen = res->ai_addrlen;
	freeaddrinfo(res);
	return 0;
}

static void http_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* libmicrohttpd's own messages, marked as such (any HTTP thread) */
static void http_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	fputs(PROG ": libmicrohttpd: ", stderr);
	vfprintf(stderr, fmt, ap);
}

static int http_start(struct server *srv)
{
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *info;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	socklen_t sslen;
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_ITC | MHD_USE_ERROR_LOG;

	if (parse_listen(srv->opt.http, &ss, &sslen))
		return -EINVAL; /* checked at startup; cannot happen */
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	/* the logger first, so that it gets every message */
	srv->httpd = MHD_start_daemon(
		flags, 0, NULL, NULL, on_http, srv, MHD_OPTION_EXTERNAL_LOGGER, http_log, srv,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, srv, MHD_OPTION_CONNECTION_LIMIT, 256u, MHD_OPTION_CONNECTION_TIMEOUT,
		60u, MHD_OPTION_END);
	if (!srv->httpd) {
		int err = errno ? errno : EADDRINUSE;

		fprintf(stderr, PROG ": cannot serve HTTP on %s: %s\n", srv->opt.http,
			strerror(err));
		return -err;
	}
	/* port 0 picks a free port: say which */
	info = MHD_get_daemon_info(srv->httpd, MHD_DAEMON_INFO_LISTEN_FD);
	sslen = sizeof(ss);
	if (!info || getsockname(info->listen_fd, (struct sockaddr *)&ss, &sslen) ||
	    getnameinfo((struct sockaddr *)&ss, sslen, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(srv->http_url, sizeof(srv->http_url), "http://%s", srv->opt.http);
		return 0;
	}
	snprintf(srv->http_url, sizeof(srv->http_url),
		 ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", host, port);
	return 0;
}

#endif /* RK_HAVE_SERVE_HTTP */

/* ---- teardown ------------------------------------------------------------------- */

/*
 * Leader: tell every follower that the job ends, so that all ranks tear their
 * backends down together (the CUDA backend's NCCL finalize waits for every
 * rank), then give the frames a few loop passes to leave: the backend's
 * teardown may block without running the loop.
 */
static void end_followers(struct server *srv)
{
	uint8_t msg[MSG_HDR] = { 0 };
	unsigned int i;

	if (srv->rank != 0 || srv->size < 2 || !srv->world || srv->err)
		return;
	put32(msg, MSG_END);
	if (send_msg(srv, -1, msg, sizeof(msg)))
		return; /* a rank is gone: its BYE or failure ends the others */
	for (i = 0; i < END_FLUSH_ITER; i++)
		rk_loop_run(srv->loop, RK_RUN_NOWAIT);
	phase(srv, "END sent");
}

static unsigned int posted(struct server *srv)
{
	unsigned int n;

	pthread_mutex_lock(&srv->mu);
	n = srv->posted;
	pthread_mutex_unlock(&srv->mu);
	return n;
}

/*
 * Stop taking work and let everything in flight come back: requests handed
 * over but not yet submitted (their post callbacks fail them), and the
 * backend's round (its worker owns memory until then). Bounded: a round takes
 * milliseconds, and after 'stopping' nothing new is posted.
 */
static void drain(struct server *srv)
{
	const uint64_t deadline = now_ns() + DRAIN_NS;
	int ret;

	phase(srv, "drain");
	pthread_mutex_lock(&srv->mu);
	srv->stopping = true;
	pthread_mutex_unlock(&srv->mu);
#ifdef RK_HAVE_SERVE_HTTP
	if (srv->httpd) {
		/* stop accepting; connections already open are answered 503 */
		MHD_socket fd = MHD_quiesce_daemon(srv->httpd);

		if (fd != MHD_INVALID_SOCKET)
			close(fd);
	}
#endif
	if (srv->sched && srv->rank == 0) {
		rk_sched_stop(srv->sched); /* pending requests: an error event, then done */
		stats_fail_all(srv, -RK_ESTOPPED);
	}
	while ((posted(srv) || be_busy(srv)) && now_ns() < deadline) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0 && ret != -RK_ESTOPPED) /* a second signal: keep draining */
			break;
	}
	phase(srv, "drained");
	if (srv->rank == 0)
		stats_fail_all(srv, -RK_ESTOPPED); /* waiters posted during the drain */
#ifdef RK_HAVE_SERVE_HTTP
	if (srv->httpd) {
		/* every request and stats waiter is done: no handler waits on the loop */
		MHD_stop_daemon(srv->httpd);
		srv->httpd = NULL;
	}
#endif
	end_followers(srv);
}

/* ---- the demo --------------------------------------------------------------------- */

struct demo_prompt {
	const char *text; /* NULL: the token ids 1..8 */
	uint32_t max_tokens;
	uint32_t top_k; /* 0: greedy */
	float temperature, top_p;
	uint64_t seed;
	int32_t draft_k;
};

static const struct demo_prompt demo_prompts[] = {
	{ "The quick brown fox", 32, 0, 0, 0, 0, 0 },
	{ "The quick brown fox", 32, 0, 0, 0, 0, 4 },
	{ "Once upon a time, in a land far away,", 40, 40, 0.8f, 0.95f, 7, 0 },
	{ "Once upon a time, in a land far away,", 40, 40, 0.8f, 0.95f, 7, 4 },
	{ "abcabcabcabcabcabcabcabc", 32, 0, 0, 0, 0, 8 },
	{ "To be, or not to be, that is the question", 32, 100, 1.2f, 1.0f, 42, 4 },
	{ NULL, 32, 0, 0, 0, 0, 0 },
	{ NULL, 32, 40, 0.8f, 0.95f, 1234, 0 },
};

#define N_DEMO (sizeof(demo_prompts) / sizeof(demo_prompts[0]))

struct demo_req {
	struct rk_request req;
	struct server *srv;
	uint32_t prompt[64];
	uint32_t n_prompt;
	uint32_t toks[64];
	uint32_t n_toks;
	bool done;
	int err;
};

struct demo {
	struct demo_req r[N_DEMO];
	unsigned int left;
	struct stats_wait sw;
	bool stats_done;
};

static void demo_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct demo_req *r = req->data;

	if (n > req->max_tokens - r->n_toks)
		n = req->max_tokens - r->n_toks;
	memcpy(r->toks + r->n_toks, t, n * sizeof(*t));
	r->n_toks += n;
	if (!done)
		return;
	r->done = true;
	r->err = err;
}

static void demo_stats_done(struct stats_wait *w)
{
	w->finished = true;
	rk_loop_stop(w->srv->loop);
}

/* @s between double quotes, with the quotes and backslashes in it escaped */
static void print_quoted(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			putchar('\\');
		putchar(*s);
	}
	putchar('"');
}

static void print_tokens(const uint32_t *t, uint32_t n)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		printf("%s%" PRIu32, i ? " " : "", t[i]);
}

static int demo_run(struct server *srv)
{
	const struct toy_params *mp = &srv->opt.model;
	struct demo *d = calloc(1, sizeof(*d));
	struct rk_sched_stats ss;
	uint32_t i, j, total = 0, n_ok = 0;
	uint64_t t0, t1;
	char hex[17], text[70];
	int ret = 0;
	bool all_done;

	if (!d)
		return -ENOMEM;
	t0 = now_ns();
	for (i = 0; i < N_DEMO; i++) {
		const struct demo_prompt *dp = &demo_prompts[i];
		struct demo_req *r = &d->r[i];

		r->srv = srv;
		if (dp->text) {
			r->n_prompt = (uint32_t)strlen(dp->text);
			for (j = 0; j < r->n_prompt; j++)
				r->prompt[j] = (uint8_t)dp->text[j] % mp->V;
		} else {
			r->n_prompt = 8;
			for (j = 0; j < 8; j++)
				r->prompt[j] = (j + 1) % mp->V;
		}
		r->req.prompt = r->prompt;
		r->req.prompt_len = r->n_prompt;
		r->req.max_tokens = dp->max_tokens;
		r->req.stop_token = -1;
		r->req.top_k = dp->top_k;
		r->req.temperature = dp->temperature;
		r->req.top_p = dp->top_p;
		r->req.seed = dp->seed;
		r->req.draft_k = dp->draft_k;
		r->req.cb = demo_cb;
		r->req.data = r;
		ret = rk_sched_submit(srv->sched, &r->req);
		if (ret) {
			fprintf(stderr, PROG ": submit: %s\n", rk_strerror(ret));
			goto out;
		}
	}
	/* every request is in the batch at once: continuous batching does the rest */
	for (;;) {
		for (i = 0, all_done = true; i < N_DEMO; i++)
			all_done &= d->r[i].done;
		if (all_done || srv->err)
			break;
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			goto out;
	}
	t1 = now_ns();
	if (srv->err) {
		ret = srv->err;
		goto out;
	}
	/* every rank's CPU time, through the same collection /v1/stats uses */
	d->sw.srv = srv;
	d->sw.done = demo_stats_done;
	d->sw.ranks = calloc((size_t)srv->size, sizeof(*d->sw.ranks));
	if (!d->sw.ranks) {
		ret = -ENOMEM;
		goto out;
	}
	srv->st_next = &d->sw;
	stats_start(srv);
	while (!d->sw.finished) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0)
			goto out;
	}

	printf("rk-serve demo: TP%d (%d rank%s), toy model V=%" PRIu32 " H=%" PRIu32
	       " seed=%" PRIu64 ", %u requests batched together\n",
	       srv->size, srv->size, srv->size > 1 ? "s" : "", mp->V, mp->H, mp->seed,
	       (unsigned int)N_DEMO);
	for (i = 0; i < N_DEMO; i++) {
		const struct demo_prompt *dp = &demo_prompts[i];
		struct demo_req *r = &d->r[i];
		struct toy_sampling s = { dp->top_k, dp->temperature, dp->top_p, dp->seed };
		uint32_t ref[64];
		bool match;

		if (r->err) {
			printf("[%u] failed: %s\n", i + 1, rk_strerror(r->err));
			ret = r->err;
			continue;
		}
		/* the same request, one token at a time at TP1, with no scheduler */
		ret = toy_generate_ref(mp->V, mp->H, mp->seed, r->prompt, r->n_prompt, r->n_toks,
				       &s, ref);
		match = !ret && !memcmp(ref, r->toks, r->n_toks * sizeof(*ref));
		n_ok += match;
		total += r->n_toks;
		toy_hash_tokens(r->toks, r->n_toks, hex);
		printf("\n[%u] %s", i + 1, dp->top_k ? "sampled" : "greedy");
		if (dp->top_k)
			printf(" (top_k %" PRIu32 ", temperature %.2g, top_p %.2g, seed %" PRIu64
			       ")",
			       dp->top_k, (double)dp->temperature, (double)dp->top_p, dp->seed);
		if (dp->draft_k)
			printf(", drafted (draft_k %" PRId32 ")", dp->draft_k);
		else
			printf(", plain");
		printf("\n    prompt: ");
		if (dp->text)
			print_quoted(dp->text);
		else
			print_tokens(r->prompt, r->n_prompt);
		printf("\n    tokens: ");
		print_tokens(r->toks, r->n_toks);
		tokens_text(r->toks, r->n_toks, text);
		printf("\n    text:   ");
		print_quoted(text);
		printf("\n    hash:   %s  (%s the TP1 reference)\n", hex,
		       match ? "equals" : "DIFFERS FROM");
	}
	rk_sched_stats(srv->sched, &ss);
	printf("\nreceipt: %u requests, %" PRIu32 " tokens in %.3f s = %.0f tokens/s; "
	       "%" PRIu64 " rounds; drafted %" PRIu64 ", accepted %" PRIu64 "\n",
	       (unsigned int)N_DEMO, total, (double)(t1 - t0) / 1e9,
	       total / ((double)(t1 - t0) / 1e9), ss.rounds, ss.drafted, ss.accepted);
	if (!d->sw.err) {
		printf("cpu_s:");
		for (i = 0; i < (uint32_t)srv->size; i++)
			printf(" r%u=%.3f", i, d->sw.ranks[i].user_s + d->sw.ranks[i].sys_s);
		printf("\n");
	}
	printf("%u of %u requests equal the TP1 reference\n", n_ok, (unsigned int)N_DEMO);
	fflush(stdout);
	ret = n_ok == N_DEMO ? 0 : -EPROTO;
out:
	if (ret) {
		/* requests and the stats waiter may still be the loop's: take them back */
		rk_sched_stop(srv->sched);
		stats_fail_all(srv, ret);
	}
	free(d->sw.ranks);
	free(d);
	return ret;
}

/* ---- --bench: the decode receipt without HTTP (leader, loop thread) ----------------- */

/*
 * rk-load's prompt sets, in its order: request i of a cell is prompt i mod the
 * set with sampling seed 1000 + i in every cell, in rk-load too, so the hash
 * of a mode agrees across cells, runs, backends, wait policies and rk-load.
 */
static const char *const bench_fixed[] = {
	"The quick brown fox jumps over the lazy dog.",
	"Once upon a time, in a land far away,",
	"It was the best of times, it was the worst of times,",
	"Call me Ishmael.",
	"To be, or not to be, that is the question:",
	"All happy families are alike;",
	"The sky above the port was the color of television,",
	"In the beginning",
};

/* Repetitive text: prompt-lookup drafting finds its n-grams. */
static const char *const bench_repeat[] = {
	"abcabcabcabcabcabcabcabcabcabc",
	"one two one two one two one two one two",
	"la la la la la la la la la la la la",
	"0101010101010101010101010101",
};

struct bench_cell {
	uint32_t streams;
	bool sampled, drafted;
};

/* A cell's figures over its runs. */
struct bench_result {
	double tps[BENCH_MAX_RUNS];
	double rounds[BENCH_MAX_RUNS];
	double *cpu;		    /* [BENCH_MAX_RUNS][world size] */
	uint64_t drafted, accepted; /* over every run */
	char hash[17];
	uint32_t runs;
};

/* One closed-loop stream: one request at a time, the next once it is done. */
struct bench_stream {
	struct rk_request req; /* the scheduler's from submit to done */
	uint32_t prompt[BENCH_PROMPT];
	uint32_t *out; /* the request's tokens in the cell's array */
	uint32_t n;
	uint32_t next; /* the request index it runs now */
	bool done;
	int err;
};

struct bench {
	struct server *srv;
	const struct options *o;
	struct bench_stream *st; /* [largest stream count] */
	uint32_t *toks;		 /* [requests * max_tokens], request i at i * max_tokens */
	struct stats_wait sw;
	struct rank_stats *before, *after; /* [world size] */
	struct rk_timer idle_timer;
	bool idle_over;
};

static const char *mode_name(bool sampled)
{
	return sampled ? "sampled" : "greedy";
}

static const char *draft_name(bool drafted)
{
	return drafted ? "drafted" : "plain";
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, uint32_t n)
{
	double t[BENCH_MAX_RUNS];

	memcpy(t, v, n * sizeof(*t));
	qsort(t, n, sizeof(*t), cmp_dbl);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

/* Request @i of a cell, as rk-load sends it and rk-serve's HTTP side maps it. */
static void bench_request(const struct options *o, uint32_t i, bool sampled, bool drafted,
			  uint32_t max_tokens, uint32_t *prompt, struct rk_request *req)
{
	const char *text = o->b_prompts[i % o->b_n_prompts];
	uint32_t j, n = (uint32_t)strlen(text);

	memset(req, 0, sizeof(*req));
	for (j = 0; j < n; j++)
		prompt[j] = (uint8_t)text[j] % o->model.V;
	req->prompt = prompt;
	req->prompt_len = n;
	req->max_tokens = max_tokens;
	req->stop_token = -1;
	if (sampled) {
		req->top_k = BENCH_TOP_K;
		req->temperature = BENCH_TEMP;
		req->top_p = BENCH_TOP_P;
	}
	req->seed = BENCH_SEED_BASE + i;
	req->draft_k = drafted ? (int32_t)o->b_draft_k : 0;
}

static void bench_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct bench_stream *st = req->data;

	if (n > req->max_tokens - st->n)
		n = req->max_tokens - st->n;
	if (n)
		memcpy(st->out + st->n, t, n * sizeof(*t));
	st->n += n;
	if (done) {
		st->done = true;
		st->err = err;
	}
}

static int bench_submit(struct bench *bn, struct bench_stream *st, uint32_t i,
			const struct bench_cell *c, uint32_t max_tokens)
{
	bench_request(bn->o, i, c->sampled, c->drafted, max_tokens, st->prompt, &st->req);
	st->req.cb = bench_cb;
	st->req.data = st;
	st->out = bn->toks + (size_t)i * max_tokens;
	st->n = 0;
	st->next = i;
	st->done = false;
	st->err = 0;
	return rk_sched_submit(bn->srv->sched, &st->req);
}

/* Every rank's counters into @out, through the collection /v1/stats uses. */
static int bench_collect(struct bench *bn, struct rank_stats *out)
{
	struct server *srv = bn->srv;
	struct stats_wait *w = &bn->sw;
	int ret;

	memset(w, 0, sizeof(*w));
	w->srv = srv;
	w->done = demo_stats_done;
	w->ranks = out;
	w->next = srv->st_next;
	srv->st_next = w;
	stats_start(srv);
	while (!w->finished) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0 && !w->finished) {
			stats_fail_all(srv, ret); /* done() runs: the waiter is ours again */
			return ret;
		}
	}
	return w->err;
}

/*
 * Requests 0..@n-1 of @max_tokens each through @c->streams closed-loop
 * streams: stream s sends requests s, s + C, ..., each once the previous one
 * is done (submitted between loop iterations: the scheduler's callbacks must
 * not submit). Tokens land in bn->toks. *@ns: first submit to last done.
 */
static int bench_pass(struct bench *bn, const struct bench_cell *c, uint32_t n,
		      uint32_t max_tokens, uint64_t *ns)
{
	struct server *srv = bn->srv;
	uint32_t s, C = c->streams < n ? c->streams : n, active = 0;
	uint64_t t0 = now_ns();
	int ret = 0;

	for (s = 0; s < C; s++) {
		ret = bench_submit(bn, &bn->st[s], s, c, max_tokens);
		if (ret)
			goto fail;
		active++;
	}
	while (active) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			goto fail; /* a signal, or the ring failed */
		if (srv->err) {
			ret = srv->err;
			goto fail;
		}
		for (s = 0; s < C; s++) {
			struct bench_stream *st = &bn->st[s];

			if (!st->done)
				continue;
			st->done = false;
			active--;
			if (st->err) {
				ret = st->err;
				goto fail;
			}
			if (st->next + C < n) {
				ret = bench_submit(bn, st, st->next + C, c, max_tokens);
				if (ret)
					goto fail;
				active++;
			}
		}
	}
	*ns = now_ns() - t0;
	return 0;
fail:
	/* the requests still queued or running write into bn: the scheduler fails them now */
	rk_sched_stop(srv->sched);
	return ret;
}

/* Every request of the pass against toy_generate_ref() at TP1. Return: 0, -EPROTO, -ENOMEM. */
static int bench_check_ref(struct bench *bn, const struct bench_cell *c)
{
	const struct options *o = bn->o;
	const uint32_t M = o->b_max_tokens;
	uint32_t prompt[BENCH_PROMPT], i, bad = 0, *ref = malloc(M * sizeof(*ref));
	struct rk_request req;
	int ret;

	if (!ref)
		return -ENOMEM;
	for (i = 0; i < o->b_requests; i++) {
		struct toy_sampling s;

		bench_request(o, i, c->sampled, c->drafted, M, prompt, &req);
		s.top_k = req.top_k;
		s.temperature = req.temperature;
		s.top_p = req.top_p;
		s.seed = req.seed;
		ret = toy_generate_ref(o->model.V, o->model.H, o->model.seed, prompt,
				       req.prompt_len, M, &s, ref);
		if (ret || memcmp(ref, bn->toks + (size_t)i * M, M * sizeof(*ref))) {
			fprintf(stderr,
				PROG ": bench: request %" PRIu32 " (%" PRIu32 " streams, %s, %s) "
				     "differs from the TP1 reference\n",
				i, c->streams, mode_name(c->sampled), draft_name(c->drafted));
			bad++;
		}
	}
	free(ref);
	return bad ? -EPROTO : 0;
}

/*
 * One run of a cell: counters around a pass. Return: 0; 3 when the run hashes
 * differently from the cell's first, 4 when a request differs from the TP1
 * reference (--bench-check-ref, first run); < 0 when the pass failed.
 */
static int bench_cell_run(struct bench *bn, const struct bench_cell *c, struct bench_result *cr)
{
	struct server *srv = bn->srv;
	const struct options *o = bn->o;
	const size_t ntok = (size_t)o->b_requests * o->b_max_tokens;
	struct rk_sched_stats s0, s1;
	uint64_t ns;
	char hex[17];
	int r, ret;

	ret = bench_collect(bn, bn->before);
	if (ret)
		return ret;
	rk_sched_stats(srv->sched, &s0);
	ret = bench_pass(bn, c, o->b_requests, o->b_max_tokens, &ns);
	if (ret)
		return ret;
	rk_sched_stats(srv->sched, &s1);
	ret = bench_collect(bn, bn->after);
	if (ret)
		return ret;
	if (toy_hash_tokens(bn->toks, ntok, hex) || !hex[0])
		snprintf(hex, sizeof(hex), "-");
	if (cr->runs && strcmp(hex, cr->hash)) {
		fprintf(stderr, PROG ": bench: %" PRIu32 " streams, %s, %s: run %" PRIu32
				     " hashes %s, run 1 %s\n",
			c->streams, mode_name(c->sampled), draft_name(c->drafted), cr->runs + 1,
			hex, cr->hash);
		return 3;
	}
	memcpy(cr->hash, hex, sizeof(hex));
	cr->tps[cr->runs] = (double)ntok / ((double)ns / 1e9);
	cr->rounds[cr->runs] = (double)(s1.rounds - s0.rounds);
	cr->drafted += s1.drafted - s0.drafted;
	cr->accepted += s1.accepted - s0.accepted;
	for (r = 0; r < srv->size; r++)
		cr->cpu[cr->runs * (uint32_t)srv->size + (uint32_t)r] =
			bn->after[r].user_s + bn->after[r].sys_s -
			(bn->before[r].user_s + bn->before[r].sys_s);
	cr->runs++;
	if (o->b_check_ref && cr->runs == 1) {
		ret = bench_check_ref(bn, c);
		return ret == -EPROTO ? 4 : ret;
	}
	return 0;
}

/*
 * Leader: every rank to policy @p of bench_policies: MSG_POLICY to the
 * followers (they answer the next stats request once it is in effect), then
 * this rank, once its own last marks are in (bounded).
 */
static int bench_policy(struct bench *bn, uint32_t p)
{
	struct server *srv = bn->srv;
	uint8_t msg[POLICY_LEN] = { 0 };
	uint64_t deadline = now_ns() + 5000000000ull;
	int ret;

	srv->pol_wait = bench_policies[p].wait;
	srv->pol_notify = bench_policies[p].notify;
	if (srv->size > 1) {
		put32(msg, MSG_POLICY);
		put64(msg + 8, p);
		put32(msg + 16, (uint32_t)srv->pol_wait);
		put32(msg + 20, (uint32_t)srv->pol_notify);
		ret = send_msg(srv, -1, msg, sizeof(msg));
		if (ret)
			return ret;
	}
	while ((ret = policy_apply(srv)) == -EBUSY && now_ns() < deadline) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
		if (srv->err)
			return srv->err;
	}
	return ret;
}

/* One line per cell (medians over its runs); --bench-policies: "pcell POLICY ...". */
static void bench_print_cell(const struct server *srv, const struct bench_cell *c,
			     const struct bench_result *cr, const char *policy)
{
	double v[BENCH_MAX_RUNS];
	uint32_t q;
	int r;

	if (policy)
		printf("pcell %-7s ", policy);
	else
		printf("cell ");
	printf("%7" PRIu32 "  %-7s  %-7s  %7" PRIu64 "  %10.1f  %7.0f  ", c->streams,
	       mode_name(c->sampled), draft_name(c->drafted),
	       (uint64_t)srv->opt.b_requests * srv->opt.b_max_tokens, median(cr->tps, cr->runs),
	       median(cr->rounds, cr->runs));
	if (cr->drafted)
		printf("%5.1f%%", 100.0 * (double)cr->accepted / (double)cr->drafted);
	else
		printf("%6s", "-");
	printf("  %-16s", cr->hash);
	for (r = 0; r < srv->size; r++) {
		for (q = 0; q < cr->runs; q++)
			v[q] = cr->cpu[q * (uint32_t)srv->size + (uint32_t)r];
		printf("  %9.4f", median(v, cr->runs));
	}
	printf("\n");
	fflush(stdout);
}

/* --bench-policies: the run just done, "prun POLICY streams mode draft tok/s cpu_r0.. hash". */
static void bench_print_run(const struct server *srv, const struct bench_cell *c,
			    const struct bench_result *cr, const char *policy)
{
	uint32_t q = cr->runs - 1;
	int r;

	printf("prun %-7s %7" PRIu32 "  %-7s  %-7s  %10.1f", policy, c->streams,
	       mode_name(c->sampled), draft_name(c->drafted), cr->tps[q]);
	for (r = 0; r < srv->size; r++)
		printf("  %9.4f", cr->cpu[q * (uint32_t)srv->size + (uint32_t)r]);
	printf("  %s\n", cr->hash);
	fflush(stdout);
}

static enum rk_activity bench_idle_cb(struct rk_timer *t, uint64_t now)
{
	struct bench *bn = t->data;

	(void)now;
	bn->idle_over = true;
	rk_loop_stop(bn->srv->loop);
	return RK_IDLE;
}

/* Stay idle @o->b_idle seconds under the loop's policy; print each rank's CPU seconds. */
static int bench_idle(struct bench *bn)
{
	struct server *srv = bn->srv;
	int r, ret;

	ret = bench_collect(bn, bn->before);
	if (ret)
		return ret;
	bn->idle_over = false;
	rk_timer_init(&bn->idle_timer, bench_idle_cb, bn);
	rk_timer_start(srv->loop, &bn->idle_timer, (uint64_t)bn->o->b_idle * 1000000000ull, 0);
	while (!bn->idle_over) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0 || srv->err) {
			rk_timer_stop(&bn->idle_timer);
			return ret < 0 ? ret : srv->err;
		}
	}
	ret = bench_collect(bn, bn->after);
	if (ret)
		return ret;
	printf("idle %" PRIu32 " s: cpu_s", bn->o->b_idle);
	for (r = 0; r < srv->size; r++)
		printf(" r%d=%.4f", r,
		       bn->after[r].user_s + bn->after[r].sys_s -
			       (bn->before[r].user_s + bn->before[r].sys_s));
	printf("\n");
	fflush(stdout);
	return 0;
}

/* CUDA: wait for the NCCL bootstrap, then one untimed pass (connections, buffers). */
static int bench_warmup(struct bench *bn, uint32_t max_streams)
{
	struct server *srv = bn->srv;
	const struct options *o = bn->o;
	struct bench_cell c = { max_streams, false, o->b_drafts[1] };
	uint32_t m = o->b_max_tokens < BENCH_WARM_TOK ? o->b_max_tokens : BENCH_WARM_TOK;
	uint64_t t0 = now_ns(), ns;
	int ret = 0;

	while (srv->cuda && (ret = toy_cuda_ready(srv->cuda)) == 0) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0)
			return ret;
		if (srv->err)
			return srv->err;
	}
	if (ret < 0)
		return ret;
	ret = bench_pass(bn, &c, max_streams < o->b_requests ? max_streams : o->b_requests, m,
			 &ns);
	if (ret)
		return ret;
	printf("# warm-up: ready after %.3f s, %" PRIu32 " streams x %" PRIu32
	       " tokens in %.3f s\n",
	       (double)(now_ns() - t0 - ns) / 1e9, c.streams, m, (double)ns / 1e9);
	fflush(stdout);
	return 0;
}

/*
 * One run of @c into @cr, under bench_policies[@pol] (every rank switched
 * first; -1: the configured policy, no switch); with a policy, its "prun"
 * line. Return: 0, bench_cell_run()'s exit status (> 0), or an error (said).
 */
static int bench_cell_policy(struct bench *bn, const struct bench_cell *c,
			     struct bench_result *cr, int pol)
{
	int ret = 0;

	if (pol >= 0)
		ret = bench_policy(bn, (uint32_t)pol);
	if (ret) {
		fprintf(stderr, PROG ": bench: policy %s: %s\n", bench_policies[pol].name,
			rk_strerror(ret));
		return ret;
	}
	ret = bench_cell_run(bn, c, cr);
	if (ret < 0)
		fprintf(stderr, PROG ": bench: %" PRIu32 " streams, %s, %s: %s\n", c->streams,
			mode_name(c->sampled), draft_name(c->drafted), rk_strerror(ret));
	else if (!ret && pol >= 0)
		bench_print_run(bn->srv, c, cr, bench_policies[pol].name);
	return ret;
}

/*
 * The receipt: every cell (streams x mode x draft) run o->b_runs times,
 * interleaved (a slow spell of the machine spreads over every cell), medians
 * printed one line per cell; the hashes of a mode must agree (exit 3), and
 * with --bench-check-ref every request must equal the TP1 reference (exit 4).
 * --bench-policies: every run of a cell runs under each policy in turn, the
 * order rotating by cell and run, one "prun" line each; the medians follow as
 * "pcell" lines per policy; the hashes must agree across policies too.
 */
static int bench_run(struct server *srv)
{
	const struct options *o = &srv->opt;
	struct bench_cell cells[BENCH_MAX_LIST * 4];
	struct bench_result *cr = NULL;
	struct bench *bn = calloc(1, sizeof(*bn));
	uint32_t n_cells = 0, max_streams = 0, i, s, m, d, run, k, q;
	uint32_t n_pol = o->b_n_pol ? o->b_n_pol : 1, n_res = 0;
	int r, ret = -ENOMEM;

	if (!bn)
		return -ENOMEM;
	bn->srv = srv;
	bn->o = o;
	for (m = 0; m < 2; m++)
		for (d = 0; d < 2; d++)
			for (s = 0; s < o->b_n_streams; s++)
				if (o->b_modes[m] && o->b_drafts[d])
					cells[n_cells++] = (struct bench_cell){ o->b_streams[s],
										m == 1, d == 1 };
	for (s = 0; s < o->b_n_streams; s++)
		if (o->b_streams[s] > max_streams)
			max_streams = o->b_streams[s];
	bn->st = calloc(max_streams, sizeof(*bn->st));
	bn->toks = calloc((size_t)o->b_requests * o->b_max_tokens, sizeof(*bn->toks));
	bn->before = calloc((size_t)srv->size, sizeof(*bn->before));
	bn->after = calloc((size_t)srv->size, sizeof(*bn->after));
	n_res = n_cells * n_pol;
	cr = calloc(n_res, sizeof(*cr));
	if (!bn->st || !bn->toks || !bn->before || !bn->after || !cr)
		goto out;
	for (i = 0; i < n_res; i++) {
		cr[i].cpu = calloc((size_t)BENCH_MAX_RUNS * (size_t)srv->size, sizeof(double));
		if (!cr[i].cpu)
			goto out;
	}

	printf("rk-serve bench: TP%d, backend %s", srv->size, backend_name(o->backend));
	if (o->backend == BACKEND_CUDA)
		printf(" (notify %s, graphs %s, device %d on r0)", rk_gpu_notify_mode_name(o->notify),
		       o->graphs ? "on" : "off", toy_cuda_device(srv->cuda));
	printf(", wait %s (spin_us %" PRIu64 "), toy model V=%" PRIu32 " H=%" PRIu32
	       " seed=%" PRIu64 ", max_batch %" PRIu32 ", %" PRIu32 " requests x %" PRIu32
	       " tokens per cell, prompt set %s, draft_k %" PRIu32 ", %" PRIu32 " run%s\n",
	       rk_wait_mode_name(srv->cfg.wait.mode), srv->cfg.wait.spin_ns / 1000, o->model.V,
	       o->model.H, o->model.seed, o->max_batch, o->b_requests, o->b_max_tokens,
	       o->b_prompt_set, o->b_draft_k, o->b_runs, o->b_runs > 1 ? "s (medians)" : "");
	if (o->b_n_pol) {
		printf("# policies, each run of a cell under each in turn:");
		for (q = 0; q < o->b_n_pol; q++)
			printf(" %s", bench_policies[o->b_pol[q]].name);
		printf("\n");
	}
	fflush(stdout);
	if (o->b_warmup) {
		ret = bench_warmup(bn, max_streams);
		if (ret) {
			fprintf(stderr, PROG ": bench: warm-up: %s\n", rk_strerror(ret));
			goto out;
		}
	}
	printf("#    %7s  %-7s  %-7s  %7s  %10s  %7s  %6s  %-16s", "streams", "mode", "draft",
	       "tokens", "tok/s", "rounds", "accept", "hash");
	for (r = 0; r < srv->size; r++) {
		char name[24];

		snprintf(name, sizeof(name), "cpu_s_r%d", r);
		printf("  %9s", name);
	}
	printf("\n");
	fflush(stdout);
	for (run = 0; run < o->b_runs; run++) {
		for (i = 0; i < n_cells; i++) {
			for (k = 0; k < n_pol; k++) {
				/* no policy always goes first (or always follows the same one) */
				q = (k + i + run) % n_pol;
				ret = bench_cell_policy(bn, &cells[i], &cr[q * n_cells + i],
							o->b_n_pol ? (int)o->b_pol[q] : -1);
				if (ret > 0) {
					srv->exit_rc = ret;
					ret = 0;
				}
				if (ret || srv->exit_rc)
					goto out;
				if (!o->b_n_pol && run + 1 == o->b_runs)
					bench_print_cell(srv, &cells[i], &cr[i], NULL);
			}
		}
	}
	for (q = 0; o->b_n_pol && q < n_pol; q++)
		for (i = 0; i < n_cells; i++)
			bench_print_cell(srv, &cells[i], &cr[q * n_cells + i],
					 bench_policies[o->b_pol[q]].name);
	/* a mode's tokens depend neither on concurrency nor on drafting: its cells agree */
	for (m = 0; m < 2; m++) {
		const char *h0 = NULL;
		uint32_t n = 0;
		bool agree = true;

		for (i = 0; i < n_res; i++) {
			if (cells[i % n_cells].sampled != (m == 1))
				continue;
			if (!h0)
				h0 = cr[i].hash;
			agree &= !strcmp(h0, cr[i].hash);
			n++;
		}
		if (!n)
			continue;
		printf("hash %s %s: %s\n", mode_name(m == 1), h0,
		       agree ? (n > 1 ? "every cell agrees" : "one cell") : "CELLS DISAGREE");
		if (!agree)
			srv->exit_rc = 3;
	}
	if (o->b_check_ref && !srv->exit_rc)
		printf("reference: every request equals toy_generate_ref at TP1\n");
	/* how each rank waited over the whole bench (the predictive wait's counters) */
	if (!bench_collect(bn, bn->after)) {
		for (r = 0; r < srv->size; r++) {
			const struct rk_loop_stats *l = &bn->after[r].loop;

			printf("loop r%d: spin_s %.3f blocked_s %.3f run_s %.3f blocks %" PRIu64
			       " wakeups %" PRIu64 " predict waits %" PRIu64 " early %" PRIu64
			       " late %" PRIu64 " cut %" PRIu64
			       " oversleep avg %.1f us margin %.1f us\n",
			       r, l->ns_spin / 1e9, l->ns_blocked / 1e9, l->ns_run / 1e9, l->blocks,
			       l->wakeups, l->predict_waits, l->predict_early, l->predict_late,
			       l->predict_cut,
			       l->predict_waits ?
				       l->ns_oversleep / 1e3 / (double)l->predict_waits : 0.0,
			       l->predict_margin_ns / 1e3);
		}
	}
	fflush(stdout);
	ret = 0;
	if (o->b_idle && !srv->exit_rc) {
		/* idle under the default policy */
		if (o->b_n_pol) {
			ret = bench_policy(bn, 0);
			if (ret)
				goto out;
		}
		ret = bench_idle(bn);
		if (ret)
			fprintf(stderr, PROG ": bench: idle: %s\n", rk_strerror(ret));
	}
out:
	if (cr)
		for (i = 0; i < n_res; i++)
			free(cr[i].cpu);
	free(cr);
	free(bn->st);
	free(bn->toks);
	free(bn->before);
	free(bn->after);
	free(bn);
	return ret;
}

/* ---- main ------------------------------------------------------------------------- */

#ifdef RK_HAVE_SERVE_HTTP
#define HTTP_BUILD "with its HTTP server"
#else
#define HTTP_BUILD "without its HTTP server (no libmicrohttpd and jansson at configure time)"
#endif
#ifdef HAVE_CUDA_BACKEND
#define CUDA_BUILD "with the CUDA backend"
#else
#define CUDA_BUILD "without the CUDA backend"
#endif

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rk-serve [options]\n"
		"A tensor-parallel decode server for the toy model (examples/toy/TOY.md). Every\n"
		"rank runs it, e.g. rk-launch --hosts localhost,localhost -- rk-serve; rank 0\n"
		"schedules rounds and serves HTTP, the others compute their shard.\n"
		"This build: " HTTP_BUILD ", " CUDA_BUILD ".\n\n"
		"  --http=ADDR:PORT   rank 0 listens here (default 127.0.0.1:8800; port 0: any\n"
		"                     free port, printed at startup)\n"
		"  --demo             instead of serving, generate from built-in prompts, print\n"
		"                     tokens, hashes and a receipt, then end the job\n"
		"  --bench            instead of serving, run the decode receipt (--bench-*\n"
		"                     below) on rank 0, then end the job\n"
		"  --backend=NAME     cpu (default: the toy model's CPU backend, a worker\n"
		"                     thread per rank) or cuda (one GPU per rank, NCCL)\n"
		"  --notify=MODE      cuda: how the loop learns that a round's GPU work is done:\n"
		"                     auto (default: both), poll (a host word the loop reads\n"
		"                     while it spins) or wake (a CUDA host function wakes it)\n"
		"  --cuda-graphs=on|off  cuda: run each round's kernels and allreduce as one\n"
		"                     CUDA graph per round shape (default on)\n"
		"  --device=N         cuda: the GPU (default: rank %% the GPU count)\n"
		"  --vocab=V          vocabulary size (default %u; 1..%u)\n"
		"  --hidden=H         hidden size: the work per output (default %u; 1..%u,\n"
		"                     divisible by the number of ranks)\n"
		"  --model-seed=S     model seed (default 1)\n"
		"  --max-batch=N      streams per round (default 8; 1..%u)\n"
		"  --draft-k=K        drafted tokens per stream and round for requests that do\n"
		"                     not say (default 0 = plain; 0..%u)\n"
		"  -h, --help         this text\n"
		"      --version      print the version and exit\n\n"
		"--bench: every cell (streams x mode x draft) sends N requests of M tokens\n"
		"through C closed-loop streams (stream s sends requests s, s+C, ... each once\n"
		"the previous one is done), submitted straight to the scheduler; request i is\n"
		"rk-load's (prompt i mod the set, seed 1000 + i; sampled: top_k 40,\n"
		"temperature 0.8, top_p 0.95), so a mode hashes the same in every cell and as\n"
		"through rk-load. One line per cell: tokens/s, rounds, acceptance, the token\n"
		"hash over the requests in order, each rank's CPU seconds during the cell.\n"
		"  --bench-streams=LIST      concurrent streams per cell (default 1,4,8)\n"
		"  --bench-modes=LIST        greedy,sampled (default both)\n"
		"  --bench-draft=LIST        plain,drafted (default both)\n"
		"  --bench-draft-k=K         drafted tokens per round in drafted cells\n"
		"                            (default 4)\n"
		"  --bench-requests=N        requests per cell (default 16)\n"
		"  --bench-max-tokens=M      tokens per request (default 64)\n"
		"  --bench-prompt-set=SET    fixed or repeat (default fixed)\n"
		"  --bench-runs=R            runs of every cell, interleaved; medians (default 1)\n"
		"  --bench-idle=S            afterwards stay idle S seconds under the loop's\n"
		"                            policy and print each rank's CPU seconds (default 0)\n"
		"  --bench-check-ref         check every request against the TP1 reference\n"
		"  --bench-no-warmup         no untimed pass before the cells\n"
		"  --bench-policies=LIST     run every cell under each of these wait policies\n"
		"                            in turn, in this one process (default: only the\n"
		"                            configured one): default (the RK_* policy, cuda\n"
		"                            --notify=auto), block (RK_WAIT=block, wake) and\n"
		"                            spin (RK_WAIT=spin, poll); a \"prun\" line per run,\n"
		"                            then \"pcell\" lines of medians; idle: default\n"
		"  --trace-rounds=FILE       every rank records its rounds' events (leader:\n"
		"                            ROUND sent; all: launch, done; CLOCK_MONOTONIC ns)\n"
		"                            and writes them to FILE.r<rank> at exit\n"
		"Exit: 0 (a signal too, except during --bench); 1 on a failure; 2 usage; --bench:\n"
		"3 when the cells of a mode (or the runs of a cell) hash differently, 4 when a\n"
		"request differs from the reference.\n\n"
		"Every rank must be given the same model and backend options. Rank, world size\n"
		"and leader come from RK_* variables (rk-launch sets them), or from mpirun,\n"
		"Slurm or torchrun; without any, rk-serve runs alone (TP1). Every RK_* knob\n"
		"is in README.md (RK_WAIT=adaptive|spin|block: the loop's wait policy); a\n"
		"malformed one is refused by name.\n\n"
		"HTTP (rank 0): POST /v1/completions {\"prompt\": \"text\" or [ids],\n"
		"\"max_tokens\", \"temperature\", \"top_k\", \"top_p\", \"seed\", \"draft_k\",\n"
		"\"stream\"}; GET /v1/stats; GET /health. See docs/SERVE.md.\n",
		TOY_DEF_V, TOY_MAX_V, TOY_DEF_H, TOY_MAX_H, MAX_BATCH, RK_SCHED_MAX_DRAFT);
}

/* --bench-policies=LIST: names of bench_policies, each once. Return 0 or -1 (said). */
static int parse_policies(const char *s, struct options *o)
{
	char buf[64], *tok, *save = NULL;
	uint32_t p, seen = 0;

	o->b_n_pol = 0;
	if (strlen(s) >= sizeof(buf))
		goto bad;
	strcpy(buf, s);
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		for (p = 0; p < BENCH_POLICIES && strcmp(tok, bench_policies[p].name); p++)
			;
		if (p == BENCH_POLICIES || (seen & (1u << p)))
			goto bad;
		seen |= 1u << p;
		o->b_pol[o->b_n_pol++] = p;
	}
	if (o->b_n_pol)
		return 0;
bad:
	fprintf(stderr, PROG ": --bench-policies='%s': expected a list of default, block and "
		"spin, each at most once\n", s);
	o->b_n_pol = 0;
	return -1;
}

static int parse_streams(const char *s, struct options *o)
{
	char buf[128], *tok, *save = NULL;

	if (strlen(s) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", s);
	o->b_n_streams = 0;
	for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *end;
		unsigned long v;

		errno = 0;
		v = strtoul(tok, &end, 10);
		if (o->b_n_streams == BENCH_MAX_LIST || errno || end == tok || *end ||
		    !(tok[0] >= '0' && tok[0] <= '9') || v < 1 || v > MAX_BATCH)
			goto bad;
		o->b_streams[o->b_n_streams++] = (uint32_t)v;
	}
	if (o->b_n_streams)
		return 0;
bad:
	fprintf(stderr, PROG ": --bench-streams='%s': expected up to %u comma-separated counts in "
			     "[1, %u]\n",
		s, BENCH_MAX_LIST, MAX_BATCH);
	return -1;
}

enum {
	OPT_BACKEND = 256,
	OPT_NOTIFY,
	OPT_GRAPHS,
	OPT_DEVICE,
	OPT_BENCH,
	OPT_B_STREAMS,
	OPT_B_MODES,
	OPT_B_DRAFT,
	OPT_B_DRAFT_K,
	OPT_B_REQUESTS,
	OPT_B_MAX_TOKENS,
	OPT_B_PROMPT_SET,
	OPT_B_RUNS,
	OPT_B_IDLE,
	OPT_B_CHECK_REF,
	OPT_B_NO_WARMUP,
	OPT_B_POLICIES,
	OPT_TRACE_ROUNDS,
};

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option opts[] = {
		{ "http", required_argument, NULL, 'H' },
		{ "demo", no_argument, NULL, 'D' },
		{ "vocab", required_argument, NULL, 'v' },
		{ "hidden", required_argument, NULL, 'n' },
		{ "model-seed", required_argument, NULL, 's' },
		{ "max-batch", required_argument, NULL, 'b' },
		{ "draft-k", required_argument, NULL, 'k' },
		{ "backend", required_argument, NULL, OPT_BACKEND },
		{ "notify", required_argument, NULL, OPT_NOTIFY },
		{ "cuda-graphs", required_argument, NULL, OPT_GRAPHS },
		{ "device", required_argument, NULL, OPT_DEVICE },
		{ "bench", no_argument, NULL, OPT_BENCH },
		{ "bench-streams", required_argument, NULL, OPT_B_STREAMS },
		{ "bench-modes", required_argument, NULL, OPT_B_MODES },
		{ "bench-draft", required_argument, NULL, OPT_B_DRAFT },
		{ "bench-draft-k", required_argument, NULL, OPT_B_DRAFT_K },
		{ "bench-requests", required_argument, NULL, OPT_B_REQUESTS },
		{ "bench-max-tokens", required_argument, NULL, OPT_B_MAX_TOKENS },
		{ "bench-prompt-set", required_argument, NULL, OPT_B_PROMPT_SET },
		{ "bench-runs", required_argument, NULL, OPT_B_RUNS },
		{ "bench-idle", required_argument, NULL, OPT_B_IDLE },
		{ "bench-check-ref", no_argument, NULL, OPT_B_CHECK_REF },
		{ "bench-no-warmup", no_argument, NULL, OPT_B_NO_WARMUP },
		{ "bench-policies", required_argument, NULL, OPT_B_POLICIES },
		{ "trace-rounds", required_argument, NULL, OPT_TRACE_ROUNDS },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
#ifdef RK_HAVE_SERVE_HTTP
	struct sockaddr_storage ss;
	socklen_t sslen;
#endif
	uint32_t dev;
	int c, mode;

	toy_params_init(&o->model);
	o->max_batch = 8;
	o->draft_k = 0;
	snprintf(o->http, sizeof(o->http), "127.0.0.1:8800");
	o->backend = BACKEND_CPU;
	o->notify = RK_GPU_NOTIFY_AUTO;
	o->graphs = true;
	o->device = -1;
	o->b_streams[0] = 1;
	o->b_streams[1] = 4;
	o->b_streams[2] = 8;
	o->b_n_streams = 3;
	o->b_modes[0] = o->b_modes[1] = true;
	o->b_drafts[0] = o->b_drafts[1] = true;
	o->b_draft_k = 4;
	o->b_requests = 16;
	o->b_max_tokens = 64;
	o->b_runs = 1;
	o->b_prompts = bench_fixed;
	o->b_n_prompts = sizeof(bench_fixed) / sizeof(bench_fixed[0]);
	o->b_prompt_set = "fixed";
	o->b_warmup = true;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'H':
#ifdef RK_HAVE_SERVE_HTTP
			if (strlen(optarg) >= sizeof(o->http) ||
			    parse_listen(optarg, &ss, &sslen)) {
				fprintf(stderr,
					PROG ": --http='%s': expected HOST:PORT or "
					     "[IPV6]:PORT with a port in [0, 65535]\n",
					optarg);
				return 2;
			}
			snprintf(o->http, sizeof(o->http), "%s", optarg);
			o->http_set = true;
			break;
#else
			fprintf(stderr,
				PROG ": --http: this rk-serve was built without its HTTP server "
				     "(configure found no libmicrohttpd and jansson; see "
				     "--with-serve): use --demo or --bench\n");
			return 2;
#endif
		case 'D':
			o->demo = true;
			break;
		case 'v':
			if (cli_u32(PROG, "vocab", optarg, 1, TOY_MAX_V, &o->model.V))
				return 2;
			break;
		case 'n':
			if (cli_u32(PROG, "hidden", optarg, 1, TOY_MAX_H, &o->model.H))
				return 2;
			break;
		case 's':
			if (cli_u64(PROG, "model-seed", optarg, 0, 0, UINT64_MAX, &o->model.seed))
				return 2;
			break;
		case 'b':
			if (cli_u32(PROG, "max-batch", optarg, 1, MAX_BATCH, &o->max_batch))
				return 2;
			break;
		case 'k':
			if (cli_u32(PROG, "draft-k", optarg, 0, RK_SCHED_MAX_DRAFT, &o->draft_k))
				return 2;
			break;
		case OPT_BACKEND:
			if (!strcmp(optarg, "cpu")) {
				o->backend = BACKEND_CPU;
			} else if (!strcmp(optarg, "cuda")) {
#ifndef HAVE_CUDA_BACKEND
				fprintf(stderr,
					PROG ": --backend=cuda: %s: this rk-serve was built "
					     "without CUDA and NCCL (configure --with-cuda "
					     "--with-nccl)\n",
					rk_strerror(-EOPNOTSUPP));
				return 2;
#endif
				o->backend = BACKEND_CUDA;
			} else {
				fprintf(stderr, PROG ": --backend='%s': expected cpu or cuda\n",
					optarg);
				return 2;
			}
			break;
		case OPT_NOTIFY:
			mode = rk_gpu_notify_mode_parse(optarg);
			if (mode < 0) {
				fprintf(stderr,
					PROG ": --notify='%s': expected auto, poll or wake\n",
					optarg);
				return 2;
			}
			o->notify = (enum rk_gpu_notify_mode)mode;
			o->notify_set = true;
			break;
		case OPT_GRAPHS:
			if (strcmp(optarg, "on") && strcmp(optarg, "off")) {
				fprintf(stderr, PROG ": --cuda-graphs='%s': expected on or off\n",
					optarg);
				return 2;
			}
			o->graphs = !strcmp(optarg, "on");
			o->graphs_set = true;
			break;
		case OPT_DEVICE:
			if (cli_u32(PROG, "device", optarg, 0, 1023, &dev))
				return 2;
			o->device = (int)dev;
			break;
		case OPT_BENCH:
			o->bench = true;
			break;
		case OPT_B_STREAMS:
			if (parse_streams(optarg, o))
				return 2;
			break;
		case OPT_B_MODES:
			if (cli_pair(PROG, "bench-modes", optarg, "greedy", "sampled", o->b_modes))
				return 2;
			break;
		case OPT_B_DRAFT:
			if (cli_pair(PROG, "bench-draft", optarg, "plain", "drafted", o->b_drafts))
				return 2;
			break;
		case OPT_B_DRAFT_K:
			if (cli_u32(PROG, "bench-draft-k", optarg, 1, RK_SCHED_MAX_DRAFT,
				      &o->b_draft_k))
				return 2;
			break;
		case OPT_B_REQUESTS:
			if (cli_u32(PROG, "bench-requests", optarg, 1, 100000, &o->b_requests))
				return 2;
			break;
		case OPT_B_MAX_TOKENS:
			if (cli_u32(PROG, "bench-max-tokens", optarg, 1, MAX_GEN, &o->b_max_tokens))
				return 2;
			break;
		case OPT_B_PROMPT_SET:
			if (!strcmp(optarg, "fixed")) {
				o->b_prompts = bench_fixed;
				o->b_n_prompts = sizeof(bench_fixed) / sizeof(bench_fixed[0]);
				o->b_prompt_set = "fixed";
			} else if (!strcmp(optarg, "repeat")) {
				o->b_prompts = bench_repeat;
				o->b_n_prompts = sizeof(bench_repeat) / sizeof(bench_repeat[0]);
				o->b_prompt_set = "repeat";
			} else {
				fprintf(stderr,
					PROG ": --bench-prompt-set='%s': expected fixed or "
					     "repeat\n",
					optarg);
				return 2;
			}
			break;
		case OPT_B_RUNS:
			if (cli_u32(PROG, "bench-runs", optarg, 1, BENCH_MAX_RUNS, &o->b_runs))
				return 2;
			break;
		case OPT_B_IDLE:
			if (cli_u32(PROG, "bench-idle", optarg, 0, 86400, &o->b_idle))
				return 2;
			break;
		case OPT_B_CHECK_REF:
			o->b_check_ref = true;
			break;
		case OPT_B_NO_WARMUP:
			o->b_warmup = false;
			break;
		case OPT_B_POLICIES:
			if (parse_policies(optarg, o))
				return 2;
			break;
		case OPT_TRACE_ROUNDS:
			if (!*optarg) {
				fprintf(stderr, PROG ": --trace-rounds: expected a file name\n");
				return 2;
			}
			o->trace_path = optarg;
			break;
		case 'h':
			usage(stdout);
			return 1;
		case 'V':
			printf(PROG " (rankrt) %s\n", rk_version(NULL, NULL));
			return 1;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (o->demo + o->bench + o->http_set > 1) {
		fprintf(stderr, PROG ": --http, --demo and --bench exclude each other\n");
		return 2;
	}
	if (o->b_n_pol && (!o->bench || (o->notify_set && o->notify != RK_GPU_NOTIFY_AUTO))) {
		fprintf(stderr, PROG ": --bench-policies needs --bench, and --notify=auto (the "
			"policies switch the notifier's mode)\n");
		return 2;
	}
	if (o->backend != BACKEND_CUDA && (o->notify_set || o->graphs_set || o->device >= 0)) {
		fprintf(stderr, PROG ": --notify, --cuda-graphs and --device apply to "
			"--backend=cuda only\n");
		return 2;
	}
#ifndef RK_HAVE_SERVE_HTTP
	if (!o->demo && !o->bench) {
		fprintf(stderr,
			PROG ": this rk-serve was built without its HTTP server (configure found "
			     "no libmicrohttpd and jansson; see --with-serve): use --demo or "
			     "--bench\n");
		return 2;
	}
#endif
	return 0;
}

int main(int argc, char **argv)
{
	struct server *srv;
	struct rk_sched_config sc = { 0 };
	struct round_trace trace = { 0 };
	char err[256];
	int ret, rc = 1;

	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return 1;
	rk_timer_init(&srv->pol_timer, policy_retry_cb, srv);
	ret = parse_args(argc, argv, &srv->opt);
	if (ret) {
		free(srv);
		return ret == 1 ? 0 : 2;
	}
	rk_config_init(&srv->cfg);
	srv->cfg.catch_signals = true;
	if (rk_config_from_env(&srv->cfg, err, sizeof(err)) ||
	    rk_config_from_launcher_env(&srv->cfg, err, sizeof(err))) {
		fprintf(stderr, PROG ": %s\n", err);
		free(srv);
		return 2;
	}
	if (srv->cfg.rank < 0 && srv->cfg.world_size == 0) {
		/* no launcher: a world of one */
		srv->cfg.rank = 0;
		srv->cfg.world_size = 1;
	}
	if (srv->cfg.rank < 0 || srv->cfg.world_size < 1 || srv->cfg.rank >= srv->cfg.world_size) {
		fprintf(stderr,
			PROG ": rank %d of %d: set both RK_RANK and RK_WORLD_SIZE (or use "
			     "rk-launch)\n",
			srv->cfg.rank, srv->cfg.world_size);
		free(srv);
		return 2;
	}
	srv->rank = srv->cfg.rank;
	srv->size = srv->cfg.world_size;
	if (srv->opt.model.H % (uint32_t)srv->size) {
		fprintf(stderr, PROG ": --hidden=%" PRIu32 " is not divisible by the %d ranks\n",
			srv->opt.model.H, srv->size);
		free(srv);
		return 2;
	}
#ifdef RK_HAVE_SERVE_HTTP
	/* before any thread exists, so no jansson hash seeding races */
	json_object_seed(0);
#endif
	/* a client that hangs up must not kill the server (MHD sends with MSG_NOSIGNAL, too) */
	signal(SIGPIPE, SIG_IGN);
	pthread_mutex_init(&srv->mu, NULL);
	pthread_cond_init(&srv->cv, NULL);
	srv->st_ranks = calloc((size_t)srv->size, sizeof(*srv->st_ranks));
	if (!srv->st_ranks)
		goto out_free;

	/* the loop first: it blocks SIGINT/SIGTERM, and the HTTP threads inherit that */
	ret = rk_loop_create(&srv->cfg, &srv->loop);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: loop: %s\n", srv->rank, rk_strerror(ret));
		goto out_free;
	}
	ret = rk_world_create(srv->loop, &world_ops, srv, &srv->world);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: world: %s\n", srv->rank, rk_strerror(ret));
		goto out_loop;
	}
	/*
	 * NCCL connects the peers of a communicator at its first collective by
	 * default, and toy_cuda waits for that inside launch() without running
	 * the loop; the follower joins only once our ROUND reaches it, which
	 * needs the loop. Connect during the bring-up instead, which the loop
	 * polls while both ranks take part. An explicit setting wins.
	 */
	if (srv->opt.backend == BACKEND_CUDA && srv->size > 1)
		setenv("NCCL_RUNTIME_CONNECT", "0", 0);
	/*
	 * Backend and scheduler before the world is ready: a ROUND can come with
	 * the WELCOME (and the CUDA backend's NCCL bootstrap starts with it).
	 */
	ret = be_create(srv);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: backend %s: %s%s\n", srv->rank,
			backend_name(srv->opt.backend), rk_strerror(ret),
			ret == -ENODEV ? " (no CUDA device)" : "");
		goto out_world;
	}
	sc.max_batch = srv->opt.max_batch;
	sc.draft_k = srv->opt.draft_k;
	if (srv->opt.trace_path) {
		sc.trace = trace_round;
		sc.trace_arg = &trace;
	}
	ret = be_sched_create(srv, &sc);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: scheduler: %s\n", srv->rank, rk_strerror(ret));
		goto out_backend;
	}
	ret = rk_world_wait_ready(srv->world);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: bootstrap: %s\n", srv->rank, rk_strerror(ret));
		goto out_drain;
	}
	if (srv->rank == 0 && srv->size > 1) {
		uint8_t msg[MODEL_LEN] = { 0 };

		put32(msg, MSG_MODEL);
		put32(msg + 4, srv->opt.model.V);
		put32(msg + 8, srv->opt.model.H);
		put32(msg + 12, srv->opt.backend);
		put64(msg + 16, srv->opt.model.seed);
		ret = send_msg(srv, -1, msg, sizeof(msg));
		if (ret) {
			fprintf(stderr, PROG "[r0]: %s\n", rk_strerror(ret));
			goto out_drain;
		}
	}

	if (srv->rank != 0) {
		/* a follower: rounds until the leader's END or BYE, a signal or a failure */
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (srv->err)
			ret = srv->err;
		else if (ret == -RK_ESTOPPED || srv->bye)
			ret = 0;
	} else if (srv->opt.demo) {
		ret = demo_run(srv);
		if (ret)
			fprintf(stderr, PROG "[r0]: demo: %s\n", rk_strerror(ret));
	} else if (srv->opt.bench) {
		ret = bench_run(srv);
		if (ret == -RK_ESTOPPED) {
			printf(PROG ": %s: stopping\n",
			       strsignal(rk_loop_signal_stopped(srv->loop)));
			fflush(stdout);
		}
		if (srv->err)
			ret = srv->err;
	} else {
#ifdef RK_HAVE_SERVE_HTTP
		ret = http_start(srv);
		if (!ret) {
			printf(PROG ": TP%d, toy model V=%" PRIu32 " H=%" PRIu32 " seed=%" PRIu64
				    ", listening on %s\n",
			       srv->size, srv->opt.model.V, srv->opt.model.H, srv->opt.model.seed,
			       srv->http_url);
			fflush(stdout);
			ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
			if (ret == -RK_ESTOPPED) {
				printf(PROG ": %s: stopping\n",
				       strsignal(rk_loop_signal_stopped(srv->loop)));
				fflush(stdout);
				ret = 0;
			}
			if (srv->err)
				ret = srv->err;
		}
#else
		ret = -EOPNOTSUPP; /* parse_args() refused this */
#endif
	}
	rc = ret ? 1 : srv->exit_rc;
	print_notify(srv);
out_drain:
	srv->leaving = true;
	drain(srv);
	ret = be_destroy(srv);
	phase(srv, "backend destroyed");
	if (ret == -EBUSY) {
		/* the backend still owns a round and will report it to the loop: keep both */
		fprintf(stderr, PROG "[r%d]: a round did not finish in %llu s; exiting\n",
			srv->rank, DRAIN_NS / 1000000000ull);
		rk_world_destroy(srv->world);
		return 1;
	}
	if (ret)
		fprintf(stderr, PROG "[r%d]: backend teardown: %s\n", srv->rank,
			rk_strerror(ret));
	rk_sched_destroy(srv->sched);
	if (srv->opt.trace_path) {
		int tret = trace_write(&trace, srv->opt.trace_path, srv->rank);

		if (tret)
			fprintf(stderr, PROG "[r%d]: --trace-rounds: %s\n", srv->rank,
				rk_strerror(tret));
		else if (trace.full)
			fprintf(stderr, PROG "[r%d]: --trace-rounds: only the first %zu events kept\n",
				srv->rank, trace.n);
		free(trace.ev);
	}
	/*
	 * A pass before the world's teardown: it releases the CUDA notifier's
	 * last posts (host functions that ran while the backend was destroyed),
	 * without which rk_loop_destroy() says -EBUSY. The world's teardown runs
	 * the loop only while links are live (none at TP1), so it is still
	 * needed; the BYE linger no longer depends on it (the world refreshes
	 * the loop's clock itself).
	 */
	rk_loop_run(srv->loop, RK_RUN_NOWAIT);
	goto out_world;
out_backend:
	be_destroy(srv);
out_world:
	rk_world_destroy(srv->world); /* BYE to every peer */
	phase(srv, "world destroyed");
out_loop:
	rk_timer_stop(&srv->pol_timer);
	rk_loop_destroy(srv->loop);
out_free:
	free(srv->st_ranks);
	pthread_cond_destroy(&srv->cv);
	pthread_mutex_destroy(&srv->mu);
	free(srv);
	return rc;
}
