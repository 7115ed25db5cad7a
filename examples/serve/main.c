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
 * (libmicrohttpd): the OpenAI-compatible POST /v1/completions and
 * /v1/chat/completions, GET /v1/models, /metrics, /v1/stats and /health
 * (docs/SERVE.md). Followers run every ROUND they receive until the leader
 * says BYE (or END, below). With --demo the leader generates from built-in
 * prompts instead of serving, prints tokens, hashes and a receipt, and ends
 * the job; with --bench it submits a matrix of closed-loop load straight to
 * the scheduler and prints a receipt per cell. The HTTP server is compiled in
 * only with libmicrohttpd and jansson (RK_HAVE_SERVE_HTTP); --demo and --bench
 * need neither. The backend is the toy model's CPU backend (toy_cpu) or its
 * CUDA backend (toy_cuda, --backend=cuda).
 *
 * Threads, leader: the loop thread owns the world, scheduler and backend.
 * The HTTP library's threads never touch them: they reach the loop only
 * through rk_loop_post() and wait on a request's condvar (http.c).
 *
 * Shutdown (SIGINT/SIGTERM, or a peer's death): the leader owns it. It stops
 * taking requests, stops the scheduler (pending requests end with an error
 * event), runs the loop until every handed-over request and the backend's
 * round are back and every HTTP reply and stream has been sent, stops the HTTP
 * server, tells the followers END (they tear down too: the CUDA backend's NCCL
 * finalize waits for every rank), then destroys backend, scheduler and world
 * (BYE to every peer). A follower stopped by a signal asks the leader to stop
 * the job (MSG_STOP) and runs its rounds until that END, so a signal to any
 * rank, or to all of them, ends the job the same way, every rank with 0.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "serve.h"

void phase(const struct server *srv, const char *what)
{
	if (srv->cfg.log_level >= RK_LOG_DEBUG)
		fprintf(stderr, PROG "[r%d]: %.3f: %s\n", srv->rank, (double)now_ns() / 1e9, what);
}

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

/* Write "round event t_ns" lines to @path.r<rank>, and the first peer failure
 * this rank heard of as "RANK failed t_ns". Return: 0 or -errno. */
static int trace_write(const struct round_trace *tr, const char *path, const struct server *srv)
{
	int rank = srv->rank;
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
	if (srv->err)
		fprintf(f, "%d failed %" PRIu64 "\n", srv->err_rank, srv->err_ns);
	if (ferror(f))
		ret = -EIO;
	if (fclose(f) && !ret)
		ret = -errno;
	return ret;
}

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

static enum rk_activity drain_tick(struct rk_timer *t, uint64_t now)
{
	(void)t;
	(void)now;
	return RK_IDLE; /* the drain looks at its deadlines again */
}

/* True while something the drain waits for is out, until its deadline. */
static bool draining(struct server *srv, uint64_t t0)
{
	uint64_t t = now_ns() - t0;
	bool http = false;

#ifdef RK_HAVE_SERVE_HTTP
	http = t < HTTP_DRAIN_NS && http_busy(srv);
#endif
	/* the scheduler's view too: a leader's round waits for the followers' shares */
	return t < DRAIN_NS &&
	       (posted(srv) || be_busy(srv) || (srv->sched && rk_sched_busy(srv->sched)) || http);
}

/*
 * Stop taking work and let everything in flight come back: requests handed
 * over but not yet submitted (their post callbacks fail them), the backend's
 * round (its worker owns memory until then; the leader's report also waits for
 * the followers' shares: until then the scheduler's memory is the round's,
 * rk_sched_destroy()), and the HTTP replies and streams
 * being sent (each has its error event and [DONE], or its 503, once the
 * scheduler is stopped). Bounded: a round takes milliseconds, after
 * 'stopping' nothing new is posted, and a client that does not read its reply
 * within HTTP_DRAIN_NS is cut off. The loop runs meanwhile (heartbeats, the
 * followers' frames); a tick makes it look at the deadlines.
 */
static void drain(struct server *srv)
{
	const uint64_t t0 = now_ns();
	struct rk_timer tick;
	int ret;

	phase(srv, "drain");
#ifdef RK_HAVE_SERVE_HTTP
	/* first: no client may reconnect after the 503 that 'stopping' brings */
	http_quiesce(srv);
#endif
	pthread_mutex_lock(&srv->mu);
	srv->stopping = true; /* new requests are answered 503 */
	pthread_mutex_unlock(&srv->mu);
	if (srv->sched && srv->rank == 0) {
		rk_sched_stop(srv->sched); /* pending requests: an error event, then done */
		stats_fail_all(srv, -RK_ESTOPPED);
	}
	rk_timer_init(&tick, drain_tick, srv);
	rk_timer_start(srv->loop, &tick, DRAIN_TICK_NS, DRAIN_TICK_NS);
	while (draining(srv, t0)) {
		ret = rk_loop_run(srv->loop, RK_RUN_ONCE);
		if (ret < 0 && ret != -RK_ESTOPPED) /* a second signal: keep draining */
			break;
	}
	rk_timer_stop(&tick);
	if (srv->sched && rk_sched_busy(srv->sched) && !be_busy(srv))
		be_abort(srv); /* a share that did not come in time: fail the round it holds */
	phase(srv, "drained");
	if (srv->rank == 0)
		stats_fail_all(srv, -RK_ESTOPPED); /* waiters posted during the drain */
#ifdef RK_HAVE_SERVE_HTTP
	http_stop(srv); /* every request and stats waiter is done: no handler waits on the loop */
#endif
	end_followers(srv);
}

static enum rk_activity stop_wait_cb(struct rk_timer *t, uint64_t now)
{
	struct server *srv = t->data;

	(void)now;
	fprintf(stderr, PROG "[r%d]: no END from the leader in %llu s: leaving\n", srv->rank,
		DRAIN_NS / 1000000000ull);
	srv->bye = true;
	rk_loop_stop(srv->loop);
	return RK_IDLE;
}

/*
 * Follower, stopped by a signal: the job's shutdown is the leader's (its
 * clients' replies come first, and a follower that left would fail it), so ask
 * the leader to stop (MSG_STOP) and run rounds until its END or BYE, a peer
 * failure, or DRAIN_NS. A second signal changes nothing.
 */
static void follower_stop(struct server *srv)
{
	uint8_t msg[MSG_HDR] = { 0 };
	struct rk_timer t;
	int ret;

	put32(msg, MSG_STOP);
	put32(msg + 8, (uint32_t)rk_loop_signal_stopped(srv->loop));
	if (send_msg(srv, 0, msg, sizeof(msg)))
		return; /* no leader to ask: leave */
	phase(srv, "STOP sent");
	rk_timer_init(&t, stop_wait_cb, srv);
	rk_timer_start(srv->loop, &t, DRAIN_NS, 0);
	while (!srv->bye && !srv->err) {
		ret = rk_loop_run(srv->loop, RK_RUN_DEFAULT);
		if (ret < 0 && ret != -RK_ESTOPPED) /* the ring failed; a signal changes nothing */
			break;
	}
	rk_timer_stop(&t);
}

/* Leader: why it stops, on stdout ("rk-serve: Terminated: stopping"). */
static void say_stopping(const struct server *srv)
{
	int sig = rk_loop_signal_stopped(srv->loop);

	if (sig)
		printf(PROG ": %s: stopping\n", strsignal(sig));
	else if (srv->stop_from)
		printf(PROG ": rank %d: %s: stopping\n", srv->stop_from, strsignal(srv->stop_sig));
	fflush(stdout);
}

int main(int argc, char **argv)
{
	struct server *srv;
	struct rk_sched_config sc;
	struct round_trace trace = { 0 };
	char err[2048]; /* an unknown variable's message lists every known one */
	int ret, rc = 1;

	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return 1;
	rk_timer_init(&srv->pol_timer, policy_retry_cb, srv);
	rk_timer_init(&srv->st_timer, stats_late_cb, srv);
	srv->slow_rank = -1;
	ret = parse_args(argc, argv, &srv->opt);
	if (ret) {
		free(srv);
		return ret == 1 ? 0 : 2;
	}
	if (srv->opt.backend == BACKEND_CUDA) {
		/* before anything starts: a host without CUDA hears it here, by name */
		srv->cm = cuda_module_open(err, sizeof(err));
		if (!srv->cm) {
			fprintf(stderr, PROG ": --backend=cuda: cannot load the CUDA backend: %s\n",
				err);
			free(srv);
			return 2;
		}
	}
	rk_config_init(&srv->cfg);
	srv->cfg.catch_signals = true;
	/* a person follows a server's log: times, and a line per request (RK_* override) */
	srv->cfg.log_time = true;
	srv->cfg.log_level = RK_LOG_INFO;
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
	http_init(); /* before any thread exists */
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
	rk_sched_config_init(&sc);
	sc.max_batch = srv->opt.max_batch;
	sc.draft_k = srv->opt.draft_k;
	sc.draft = serve_draft;
	sc.draft_arg = srv;
	sc.vocab = srv->opt.model.V;
	srv->oracle.p = srv->opt.draft_p;
	srv->oracle.seed = srv->opt.model.seed;
	srv->oracle.V = srv->opt.model.V;
	if (srv->opt.trace_path) {
		sc.trace = trace_round;
		sc.trace_arg = &trace;
	}
	ret = be_sched_create(srv, &sc);
	if (ret) {
		fprintf(stderr, PROG "[r%d]: scheduler: %s\n", srv->rank, rk_strerror(ret));
		goto out_backend;
	}
	rk_sched_set_timeout_cb(srv->sched, on_round_timeout, srv);
	ret = rk_world_wait_ready(srv->world);
	if (ret == -RK_ESTOPPED) {
		rc = 0; /* a signal during the bootstrap: a requested stop */
		goto out_drain;
	}
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
		if (ret == -RK_ESTOPPED && !srv->bye && !srv->err)
			follower_stop(srv);
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
		if (ret == -RK_ESTOPPED)
			say_stopping(srv);
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
			/* a follower's MSG_STOP may have come during the bootstrap */
			ret = srv->stop_from ? 0 : rk_loop_run(srv->loop, RK_RUN_DEFAULT);
			if (ret == -RK_ESTOPPED || srv->stop_from) {
				say_stopping(srv);
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
	if (!rk_sched_destroy(srv->sched))
		srv->sched = NULL; /* its frames now reach on_frame(), which drops them */
	if (srv->opt.trace_path) {
		int tret = trace_write(&trace, srv->opt.trace_path, srv);

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
	 * the loop only while links are live (none at TP1), so this pass is
	 * needed at any world size.
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
	rk_timer_stop(&srv->st_timer);
	/*
	 * rk_loop_destroy() unblocks SIGINT/SIGTERM again, and a repeated one
	 * still pending in the signalfd would then end the process with its
	 * default action; the job is stopping anyway: drop them.
	 */
	signal(SIGINT, SIG_IGN);
	signal(SIGTERM, SIG_IGN);
	rk_loop_destroy(srv->loop);
out_free:
	free(srv->st_ranks);
	pthread_cond_destroy(&srv->cv);
	pthread_mutex_destroy(&srv->mu);
	free(srv);
	return rc;
}
