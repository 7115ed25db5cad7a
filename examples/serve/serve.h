/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's private header: its options, the server every file works on, the
 * counters the ranks exchange, and what each file offers the others
 * (examples/serve/README.md says which file holds which concern; main.c has
 * the threads and the shutdown). Never installed.
 */
#ifndef RK_SERVE_H
#define RK_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "rankrt.h"
#include "clock.h"
#include "le.h"
#include "toy.h"
#include "cuda_module.h"

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
#define HTTP_DRAIN_NS  (2 * 1000000000ull) /* replies still being sent when the server stops */
#define DRAIN_TICK_NS  (50 * 1000000ull)   /* the drain looks at its deadlines this often */
#define DEF_HTTP_MAX_CONNS 256u
#define MAX_HTTP_CONNS	   65536u
#define HTTP_HARD_CONNS(n) (2 * (n)) /* connections open at most (http.c, "connections") */
#define DEF_HTTP_IDLE_S	   15u
#define HTTP_QUIET_NS	   (1000000000ull) /* an idle connection may be shut down after */
#define HTTP_RETRY_AFTER_S 1u	  /* a 503 from a full server */
#define HTTP_BACKLOG	   65535u /* listen(); the kernel caps it at net.core.somaxconn */
#define HTTP_FD_RESERVE	   256u	  /* descriptors not counted for HTTP connections */
#define HTTP_ACCEPT_RETRY_MS 10	  /* out of descriptors: the acceptor retries after */
#define END_FLUSH_ITER 4u /* loop passes that send END before the backend's teardown */
/* a collection for an HTTP waiter ends without the ranks that did not answer by then
 * (peers.c); --bench and --demo wait for every rank */
#define STATS_WAIT_NS  (1000 * 1000000ull)
/* the leader stops the job when one rank missed this many rounds in a row (peers.c) */
#define ROUND_TIMEOUTS_STOP 3u

enum serve_msg {
	MSG_MODEL = 1,	   /* leader -> followers: V, H, backend, seed (checked) */
	MSG_STATS_REQ = 2, /* leader -> followers: seq */
	MSG_STATS_REP = 3, /* follower -> leader: seq, CPU, loop and backend counters */
	MSG_END = 4,	   /* leader -> followers: the job ends, tear down now */
	MSG_POLICY = 5,	   /* leader -> followers: policy index, wait, notify (--bench-policies) */
	MSG_STOP = 6,	   /* follower -> leader: a signal stopped this rank; stop the job (signo) */
};

#define MSG_HDR	      16u /* kind, reserved, seq or model fields */
#define MODEL_LEN     24u /* kind, V, H, backend, seed */
#define POLICY_LEN    24u /* kind, reserved, policy index, wait mode, notify mode */
#define N_LOOP_CTR    28u /* struct rk_loop_stats, in field order */
#define N_TOY_CTR     3u  /* rounds, outputs, ns_compute (CUDA: ns_round) */
#define STATS_REP_LEN (MSG_HDR + 16u + 8u * (N_LOOP_CTR + N_TOY_CTR) + METRICS_LEN)

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
#define BENCH_POLICIES	5u  /* default, block, spin, poll50, yield1s */
#define BENCH_POL_KNOBS 5u  /* tuning knobs a bench policy sets */
#define POLICY_RETRY_MS 1u  /* a policy switch waits for the last marks this often */

#if defined(RK_HAVE_CUDA) && defined(RK_HAVE_NCCL)
#define HAVE_CUDA_BACKEND 1 /* toy_cuda.c has the real backend, not its stubs */
#endif

struct options {
	struct toy_params model;
	uint32_t max_batch;
	uint32_t draft_k;
	double draft_p; /* --draft-accept: the oracle's p (--bench, --demo); < 0: prompt lookup */
	char http[300];
	bool http_set;
	unsigned int http_max_conns; /* --http-max-conns */
	unsigned int http_idle_s;    /* --http-idle-timeout */
	bool demo;
	enum backend_kind backend;
	enum rk_gpu_notify_mode notify;
	bool graphs;			/* cuda: a CUDA graph per round shape */
	bool graphs_set;
	bool worker_spin_set;
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

/* The backend's counters that /v1/stats reports (toy_cpu's; CUDA's mapped onto them). */
struct be_stats {
	uint64_t rounds, outputs, ns_compute;
};

/* metrics.c: what a rank reports for /metrics beyond /v1/stats' counters. */
#define N_WORLD_CTR  18u /* struct rk_world_stats */
#define N_LINK_CTR   27u /* struct rk_link_stats */
#define N_NOTIFY_CTR 14u /* struct rk_gpu_notifier_stats */
#define N_PEER_ERR   10u /* peer failures by name (metrics.c), the last one "other" */
#define METRICS_LEN  (8u * (N_WORLD_CTR + N_LINK_CTR + N_NOTIFY_CTR + N_PEER_ERR + 1u)) /* + flags */

struct rank_metrics {
	struct rk_world_stats world;
	struct rk_link_stats link; /* follower: its link to the leader */
	bool link_up;
	bool has_notify; /* the CUDA backend's notifier */
	struct rk_gpu_notifier_stats notify;
	uint64_t peer_err[N_PEER_ERR];
};

/* One rank's counters as /v1/stats (and /metrics) report them. */
struct rank_stats {
	bool valid;
	double user_s, sys_s;
	struct rk_loop_stats loop;
	struct be_stats toy;
	struct rank_metrics m;
};

/* metrics.c: the leader's request latencies (loop thread). */
#define N_BUCKETS 20u
struct hist {
	uint64_t n[N_BUCKETS + 1]; /* per bucket, not cumulative; the last is +Inf */
	uint64_t count;
	double sum;
};

enum finish {
	FINISH_STOP,
	FINISH_LENGTH,
	FINISH_ABORT, /* the client went away */
	FINISH_ERROR,
	FINISH__COUNT,
};

struct req_metrics {
	struct hist ttft, itl, e2e;
	uint64_t finished[FINISH__COUNT];
	uint64_t prompt_tokens, output_tokens;
};

/* One request's times (CLOCK_MONOTONIC ns): t0 written before its post, the rest by the loop. */
struct req_timing {
	uint64_t t0, t_first, t_last;
};

struct server;

/*
 * draft.c: the reference tokens of @req, which the leader knows ahead
 * (--bench, --demo), and a key that tells its stream apart; NULL when unknown.
 */
typedef const uint32_t *(*draft_ref_fn)(void *ctx, const struct rk_request *req,
					uint32_t *n_ref, uint64_t *key);

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
	uint64_t req_total, req_active, req_failed, req_cancelled;
	bool finished; /* HTTP waiters: under srv->mu */
	bool bounded;  /* an HTTP waiter: its collection ends within STATS_WAIT_NS */
};

struct server {
	struct options opt;
	struct rk_config cfg;
	int rank, size;
	struct rk_loop *loop;
	struct rk_world *world;
	struct toy_cpu *cpu; /* the backend: one of these two */
	struct toy_cuda *cuda;
	const struct cuda_module *cm; /* --backend=cuda: toy_cuda's calls, from its module */
	struct rk_sched *sched;
	int err;      /* the first peer failure */
	int err_rank; /* ...the rank it named, and when (CLOCK_MONOTONIC ns) */
	uint64_t err_ns;
	int exit_rc;  /* leader: --bench's exit status when it ran through (3, 4) */
	bool bye;     /* follower: the leader said BYE or END */
	bool leaving; /* our own teardown: peer errors are expected */
	int stop_from; /* leader: the follower whose MSG_STOP stopped the job (0: none) */
	int stop_sig;  /* ...and the signal that stopped it */

	/* leader, loop thread */
	uint64_t req_total, req_active, req_failed, req_cancelled;
	struct stats_wait *st_cur, *st_next; /* collecting now / queued for the next */
	uint64_t st_seq;
	uint32_t st_pending;
	struct rank_stats *st_ranks;
	uint8_t txbuf[8 + STATS_REP_LEN];

	/* --bench-policies: the policy asked for (bench_policies[pol]); a follower's
	 * switch waits for its marks */
	uint32_t pol;
	struct rk_timer pol_timer;
	bool pol_pending;
	bool st_deferred;	   /* follower: a stats request waits for the switch */
	uint8_t st_req[MSG_HDR];

	/* shared with the HTTP threads */
	pthread_mutex_t mu;
	pthread_cond_t cv;   /* stats waiters */
	bool stopping;	     /* under mu: no new posts */
	unsigned int posted; /* under mu: handed to the loop, callback not run yet */

	struct http *http; /* http.c's */
	char http_url[320];

	/* draft.c (leader, loop thread): the oracle and whose references it drafts from */
	struct toy_oracle oracle;
	draft_ref_fn draft_ref;
	void *draft_ctx;

	/* metrics.c (leader, loop thread) */
	struct req_metrics rm;
	uint64_t peer_err[N_PEER_ERR];

	/* the round watchdog's verdicts (peers.c, loop thread): the last one */
	uint64_t slow_round;
	int slow_rank;
	unsigned int slow_streak; /* leader: rounds in a row slow_rank missed */
	struct rk_timer st_timer;  /* leader: a stats collection's bound, STATS_WAIT_NS */
};

/*
 * --bench-policies: the wait policies a bench can switch every rank to
 * (peers.c): a mode and knobs set by name (rk_config_set()) on the
 * configuration the loop was created with.
 */
struct bench_policy {
	const char *name;
	enum rk_wait_mode wait;
	enum rk_gpu_notify_mode notify; /* cuda */
	struct {
		const char *name, *value;
	} knobs[BENCH_POL_KNOBS]; /* up to the first NULL name */
};

extern const struct bench_policy bench_policies[BENCH_POLICIES];

/* ---- small helpers ------------------------------------------------------------- */

#define ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))

/* This process's CPU time, every thread (loop, worker, HTTP). */
static inline void cpu_times(double *user_s, double *sys_s)
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
static inline char tok_char(uint32_t t)
{
	return (char)(t >= 32 && t <= 126 ? t : 32 + t % 95);
}

static inline void tokens_text(const uint32_t *t, uint32_t n, char *out)
{
	uint32_t i;

	for (i = 0; i < n; i++)
		out[i] = tok_char(t[i]);
	out[n] = '\0';
}

/*
 * Leader: why the job ends early: the first peer failure, or -RK_ESTOPPED once
 * a follower asked the job to stop (its own signal arrives as -RK_ESTOPPED
 * from rk_loop_run()). Loop thread.
 */
static inline int job_err(const struct server *srv)
{
	return srv->err ? srv->err : srv->stop_from ? -RK_ESTOPPED : 0;
}

/* ---- main.c: the lifecycle ----------------------------------------------------- */

/* RK_LOG=debug: the lifecycle's steps, so that a stall shows where it is. */
void phase(const struct server *srv, const char *what);

/* ---- args.c: the command line -------------------------------------------------- */

/* Return: 0; 1 after --help; 2 on a usage error (said). */
int parse_args(int argc, char **argv, struct options *o);
#ifdef RK_HAVE_SERVE_HTTP
/* Parse "HOST:PORT" or "[V6]:PORT" into @ss (--http). Return 0 or -EINVAL. */
int parse_listen(const char *s, struct sockaddr_storage *ss, socklen_t *sslen);
#endif

/* ---- backend.c: toy_cpu or toy_cuda (loop thread) ------------------------------ */

const char *backend_name(enum backend_kind k);
int be_create(struct server *srv);
int be_sched_create(struct server *srv, const struct rk_sched_config *sc);
bool be_busy(const struct server *srv);
/* Return: 0, -EBUSY (nothing freed) while a round is in flight, or the CUDA teardown's error. */
int be_destroy(struct server *srv);
/* A peer failed: no collective of this rank may wait for it (CUDA: abort NCCL). */
void be_abort(struct server *srv);
void be_stats(const struct server *srv, struct be_stats *out);
/* --bench, CUDA: how this rank learned of its rounds' completions (on its own stdout). */
void print_notify(const struct server *srv);

/* ---- draft.c: the leader's drafter ------------------------------------------------ */

/* The scheduler's rk_draft_fn; @arg is the server. */
uint32_t serve_draft(void *arg, const struct rk_request *req, const uint32_t *hist, size_t n,
		     uint32_t *out, uint32_t k);
/* From now on, requests whose references @fn knows are the oracle's (NULL: none are). */
void draft_refs(struct server *srv, draft_ref_fn fn, void *ctx);
/* One "drafter:" line: p and the measured rate since the counts @proposed0, @right0. */
void draft_print(const struct server *srv, uint64_t proposed0, uint64_t right0);

/* ---- peers.c: rk-serve's frames between ranks, stats collection (loop thread) -- */

extern const struct rk_world_ops world_ops;
/* One of rk-serve's USER frames to rank @to, or to every follower (-1); as rk_world_send(). */
int send_msg(struct server *srv, int to, const uint8_t *msg, uint32_t len);
/* Leader: begin a collection for the queued waiters (srv->st_next). */
void stats_start(struct server *srv);
/* Fail every waiter, current and queued (shutdown, a dead peer). */
void stats_fail_all(struct server *srv, int err);
/* The collection under way ends without the ranks that have not answered (st_timer). */
enum rk_activity stats_late_cb(struct rk_timer *t, uint64_t now);
/* The scheduler's rk_sched_timeout_cb: log it; the leader stops the job by its rule. */
void on_round_timeout(void *arg, struct rk_sched *s, uint64_t round_id, int rank);
#ifdef RK_HAVE_SERVE_HTTP
/* An HTTP thread's stats waiter reaches the loop. */
enum rk_activity stats_post_cb(struct rk_post *p);
#endif
/* Put bench_policies[srv->pol] into effect. Return: 0, -EBUSY (retry), an error. */
int policy_apply(struct server *srv);
/* Follower: srv->pol_timer's callback, a policy switch that waits for the last marks. */
enum rk_activity policy_retry_cb(struct rk_timer *t, uint64_t now);

/* ---- http.c: the HTTP server (rank 0, its own threads) ------------------------- */

#ifdef RK_HAVE_SERVE_HTTP
/* Before any thread exists. */
void http_init(void);
/* Serve srv->opt.http; srv->http_url says where. Return: 0 or -errno (said). */
int http_start(struct server *srv);
/* Stop accepting (the clients already in the listen backlog are taken first);
 * every reply from here on closes its connection. Before srv->stopping. */
void http_quiesce(struct server *srv);
/* True while a request is being answered (its reply or stream not all sent).
 * After http_quiesce() also while one is arriving, or a connection whose
 * request ended since then is open; the last request to end wakes the loop.
 * Any thread. */
bool http_busy(struct server *srv);
/* Once no request or stats waiter is the loop's: stop every HTTP thread. */
void http_stop(struct server *srv);
#endif

/* ---- demo.c, bench.c: rank 0 instead of HTTP (loop thread) --------------------- */

int demo_run(struct server *srv);
/* A stats waiter of the loop thread's own: stops the loop when done. */
void demo_stats_done(struct stats_wait *w);
/* Return: 0 (srv->exit_rc: 3 or 4 when the receipt disagrees) or an error. */
int bench_run(struct server *srv);

/* ---- metrics.c: /metrics (Prometheus text format) and its counters ------------- */

/* This rank's own part of the report (loop thread). */
void metrics_own(struct server *srv, struct rank_metrics *m);
/* A follower's report in a MSG_STATS_REP: METRICS_LEN bytes. */
void metrics_pack(const struct rank_metrics *m, uint8_t *p);
void metrics_unpack(struct rank_metrics *m, const uint8_t *p);
/* A peer failed with @err: counted by name (loop thread). */
void metrics_peer_error(struct server *srv, int err);
/* Leader, loop thread: @n new tokens of a request at @now, and its end. */
void metrics_req_tokens(struct server *srv, struct req_timing *t, uint32_t n, uint64_t now);
void metrics_req_done(struct server *srv, const struct req_timing *t, uint32_t n_prompt,
		      uint32_t n_out, enum finish f, uint64_t now);
extern const char *const finish_names[FINISH__COUNT];

/*
 * A /metrics collection: the stats collection (every rank's report), and the
 * leader's own figures, copied by metrics_wait_done() on the loop thread,
 * which then calls @signal. Storage: the waiter's, as struct stats_wait.
 */
struct metrics_wait {
	struct stats_wait w;
	void (*signal)(struct stats_wait *w);
	struct req_metrics rm;
	struct rk_link_stats *links; /* [world size]: the leader's link to each rank */
	bool *up;		     /* [world size] */
};

void metrics_wait_done(struct stats_wait *w);
/* The exposition of a finished collection, malloc'd in *@out. Return: 0 or -ENOMEM. */
int metrics_render(const struct server *srv, const struct metrics_wait *m, char **out,
		   size_t *len);

/* ---- openai.c: the OpenAI-compatible shapes (HTTP threads; stop_scan: loop) ---- */

#define MODEL_ID     "rankrt-toy"
#define MAX_MODEL_QUOTE 64u /* bytes of an unknown model's name that its 404 quotes */
#define MAX_STOP     8u
#define MAX_STOP_LEN 64u
#define MAX_STOP_IDS 16u

enum api_kind {
	API_COMPLETION,
	API_CHAT,
};

struct stop_set {
	uint32_t n_str, n_ids;
	char str[MAX_STOP][MAX_STOP_LEN];
	uint32_t len[MAX_STOP];
	uint32_t ids[MAX_STOP_IDS];
};

/*
 * Ends at the first stop string or stop token id in t[from..n), which it
 * excludes (*@hit). Return: how many of the @n tokens may be shown: all but a
 * tail that may still become a stop string (none when @done).
 */
uint32_t stop_scan(const struct stop_set *st, const uint32_t *t, uint32_t n, uint32_t from,
		   bool done, bool *hit);

#ifdef RK_HAVE_SERVE_HTTP
#include <jansson.h>

struct oai_params {
	enum api_kind kind;
	uint32_t *prompt; /* malloc'd: the caller's after a successful parse */
	uint32_t n_prompt;
	uint32_t max_tokens;
	bool max_set;
	double temperature;
	uint32_t top_k;
	double top_p;
	uint64_t seed;
	int32_t draft_k;
	bool stream, include_usage, token_ids;
	struct stop_set stop;
};

/* An error in OpenAI's shape, and its HTTP status. */
struct oai_error {
	unsigned int status;
	const char *type;
	const char *code; /* NULL: null */
	char param[64]; /* "": none */
	char msg[256];
};

/* What every reply object of one request carries. */
struct oai_reply {
	enum api_kind kind;
	uint64_t id;
	int64_t created;
	uint32_t n_prompt;
	bool token_ids;
	bool first; /* chat chunk: the role comes with the first */
};

uint64_t oai_next_id(void);
/* Return: 0; -EINVAL (400, or 404 for an unknown model: @e says which field and why),
 * -ENOMEM (500). */
int oai_parse(const struct server *srv, enum api_kind kind, const char *body, size_t len,
	      struct oai_params *p, struct oai_error *e);
/* Replies; @text: room for @n + 1 characters. NULL without memory. */
json_t *oai_error_json(const struct oai_error *e);
/* Loop thread: what a client is told of a request that failed with @err. */
void oai_fail_msg(const struct server *srv, int err, char *buf, size_t len);
json_t *oai_chunk(const struct oai_reply *r, const uint32_t *t, uint32_t n, const char *finish,
		  char *text);
json_t *oai_usage_chunk(const struct oai_reply *r, uint32_t n_out);
json_t *oai_final(const struct oai_reply *r, const uint32_t *t, uint32_t n, const char *finish,
		  char *text);
json_t *oai_models(const struct server *srv, uint64_t created);
#endif

#endif /* RK_SERVE_H */
