/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's rank protocol (loop thread): the world's callbacks, and the USER
 * frames of rk-serve itself (SERVE_TAG) between the leader and its followers:
 * the model check, stats requests and answers (rank 0 collects every rank's
 * counters for /v1/stats, the demo and the bench), the wait-policy switch of
 * --bench-policies, and END.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "serve.h"

static void own_stats(struct server *srv, struct rank_stats *rs)
{
	rs->valid = true;
	cpu_times(&rs->user_s, &rs->sys_s);
	rk_loop_stats(srv->loop, &rs->loop, sizeof(rs->loop));
	be_stats(srv, &rs->toy);
	metrics_own(srv, &rs->m);
}

/*
 * struct rk_loop_stats <-> N_LOOP_CTR u64, in field order: the layout of a
 * MSG_STATS_REP between ranks. A counter added to the struct stops the build
 * here until it is listed below and N_LOOP_CTR counts it.
 */
_Static_assert(sizeof(struct rk_loop_stats) == N_LOOP_CTR * sizeof(uint64_t),
	       "struct rk_loop_stats changed: update loop_ctr() and N_LOOP_CTR");

static void loop_ctr(struct rk_loop_stats *s, uint64_t **v)
{
	v[0] = &s->iterations;
	v[1] = &s->events;
	v[2] = &s->busy_events;
	v[3] = &s->spin_iters;
	v[4] = &s->blocks;
	v[5] = &s->wakeups;
	v[6] = &s->posts;
	v[7] = &s->eintr;
	v[8] = &s->ns_spin;
	v[9] = &s->ns_blocked;
	v[10] = &s->ns_run;
	v[11] = &s->predict_waits;
	v[12] = &s->predict_early;
	v[13] = &s->predict_late;
	v[14] = &s->predict_cut;
	v[15] = &s->ns_oversleep;
	v[16] = &s->predict_margin_ns;
	v[17] = &s->learn_waits;
	v[18] = &s->learn_holds;
	v[19] = &s->window_cuts;
	v[20] = &s->spin_window_ns;
	v[21] = &s->prewarms;
	v[22] = &s->ns_spin_predict;
	v[23] = &s->ns_spin_window;
	v[24] = &s->learn_woken;
	v[25] = &s->predict_overslept;
	v[26] = &s->learn_overdue;
	v[27] = &s->learn_restarts;
}

int send_msg(struct server *srv, int to, const uint8_t *msg, uint32_t len)
{
	int n;

	if (to >= 0)
		return rk_world_send_user(srv->world, to, SERVE_TAG, msg, len);
	n = rk_wire_encode_user(srv->txbuf, sizeof(srv->txbuf), SERVE_TAG, msg, len);
	if (n < 0)
		return n;
	return rk_world_broadcast(srv->world, RK_FRAME_USER, 0, srv->txbuf, (uint32_t)n);
}

/* ---- stats collection (leader, loop thread) ------------------------------------- */

static void stats_finish(struct server *srv, int err)
{
	struct stats_wait *w, *next;
	struct rk_sched_stats ss;

	rk_sched_stats(srv->sched, &ss, sizeof(ss));
	for (w = srv->st_cur; w; w = next) {
		next = w->next; /* done() may end the waiter's storage */
		w->err = err;
		if (!err) {
			memcpy(w->ranks, srv->st_ranks, (size_t)srv->size * sizeof(*w->ranks));
			w->sched = ss;
			w->req_total = srv->req_total;
			w->req_active = srv->req_active;
			w->req_failed = srv->req_failed;
			w->req_cancelled = srv->req_cancelled;
		}
		w->done(w);
	}
	srv->st_cur = NULL;
	srv->st_pending = 0;
	rk_timer_stop(&srv->st_timer);
}

void stats_fail_all(struct server *srv, int err)
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
void stats_start(struct server *srv)
{
	uint8_t msg[MSG_HDR] = { 0 };
	struct stats_wait *w;
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
	/* a rank whose loop is blocked, or a peer that is no rk-serve, holds no scrape */
	for (w = srv->st_cur; w && !w->bounded; w = w->next)
		;
	if (w)
		rk_timer_start(srv->loop, &srv->st_timer, STATS_WAIT_NS, 0);
	put32(msg, MSG_STATS_REQ);
	put64(msg + 8, srv->st_seq);
	ret = send_msg(srv, -1, msg, sizeof(msg));
	if (ret)
		stats_finish(srv, ret);
}

enum rk_activity stats_late_cb(struct rk_timer *t, uint64_t now)
{
	struct server *srv = t->data;
	int r;

	(void)now;
	if (!srv->st_cur)
		return RK_IDLE;
	for (r = 1; r < srv->size; r++)
		if (!srv->st_ranks[r].valid)
			fprintf(stderr,
				PROG "[r0]: stats: rank %d did not answer in %llu ms: left out\n", r,
				STATS_WAIT_NS / 1000000);
	stats_finish(srv, 0);
	stats_start(srv);
	return RK_IDLE;
}

#ifdef RK_HAVE_SERVE_HTTP
enum rk_activity stats_post_cb(struct rk_post *p)
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
	w->bounded = true;
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
	metrics_unpack(&rs->m, d + 8 * N_TOY_CTR);
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
	metrics_pack(&rs.m, d + 8 * N_TOY_CTR);
	return send_msg(srv, 0, msg, sizeof(msg));
}

/* ---- --bench-policies: several wait policies in one process (loop thread) ------- */

/*
 * rankrt's policies (default: the RK_* one; block; spin) and two baselines
 * that are not rankrt's: poll50, the seed experiment's timed polls (a 50 us
 * ring wait, then a look again, for 50 ms after the last busy event, then
 * block); yield1s, vLLM's rule (spin, sched_yield() at every empty
 * iteration, for 1 s after the last busy event, then block; nothing learned
 * or predicted).
 */
const struct bench_policy bench_policies[BENCH_POLICIES] = {
	{ "default", RK_WAIT_ADAPTIVE, RK_GPU_NOTIFY_AUTO, { { NULL } } },
	{ "block", RK_WAIT_BLOCK, RK_GPU_NOTIFY_WAKE, { { NULL } } },
	{ "spin", RK_WAIT_SPIN, RK_GPU_NOTIFY_POLL, { { NULL } } },
	{ "poll50", RK_WAIT_ADAPTIVE, RK_GPU_NOTIFY_AUTO,
	  { { "RK_SPIN_US", "0" }, { "RK_PREDICT", "0" }, { "RK_LEARN", "0" },
	    { "RK_POLL_US", "50" }, { "RK_POLL_FOR_MS", "50" } } },
	{ "yield1s", RK_WAIT_ADAPTIVE, RK_GPU_NOTIFY_AUTO,
	  { { "RK_SPIN_US", "1000000" }, { "RK_SPIN_YIELD", "1" }, { "RK_PREDICT", "0" },
	    { "RK_LEARN", "0" } } },
};

/*
 * Put bench_policies[srv->pol] into effect: the configured policy, that mode
 * and those knobs, and its notify mode on the CUDA notifier (or the emulated
 * device's, cpu with --device-time). Every policy starts from the
 * configuration the loop was created with, so none leaves a knob behind for
 * the next. Return: 0; -EBUSY while a mark is outstanding
 * (run the loop, retry); -RK_ECONFIG for a knob the library refused; the
 * notifier's error.
 */
int policy_apply(struct server *srv)
{
	const struct bench_policy *bp = &bench_policies[srv->pol];
	struct rk_config c = srv->cfg;
	char err[160];
	unsigned int i;
	int ret;

	c.wait.mode = bp->wait;
	for (i = 0; i < BENCH_POL_KNOBS && bp->knobs[i].name; i++) {
		ret = rk_config_set(&c, bp->knobs[i].name, bp->knobs[i].value, err, sizeof(err));
		if (ret) {
			fprintf(stderr, PROG "[r%d]: --bench-policies=%s: %s\n", srv->rank,
				bp->name, err);
			return ret == -ENOENT ? -RK_ECONFIG : ret;
		}
	}
	ret = rk_loop_set_wait_config(srv->loop, &c);
	if (ret)
		return ret;
	if (srv->cuda)
		return srv->cm->set_notify(srv->cuda, bp->notify);
	/* --device-time: the emulated device's notifier, the same switch */
	if (srv->cpu && toy_cpu_notifier(srv->cpu))
		return rk_gpu_notifier_set_mode(toy_cpu_notifier(srv->cpu), bp->notify);
	return 0;
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

enum rk_activity policy_retry_cb(struct rk_timer *t, uint64_t now)
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

	srv->pol = (uint32_t)get64(d + 8);
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

/*
 * Leader: a signal stopped follower @peer, which asks the job to stop: stop as
 * on our own signal, so that clients get their replies and every rank exits 0
 * (the follower keeps running rounds until our END). Ignored once stopping.
 */
static void stop_asked(struct server *srv, int peer, int sig)
{
	if (srv->leaving || srv->stop_from)
		return;
	srv->stop_from = peer;
	srv->stop_sig = sig;
	phase(srv, "STOP from a follower");
	rk_loop_stop(srv->loop);
}

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
		if (peer <= 0 || peer >= srv->size)
			goto bad;
		if (kind == MSG_STOP && u->len == MSG_HDR) {
			stop_asked(srv, peer, (int)get32(u->data + 8));
			return RK_BUSY;
		}
		if (kind != MSG_STATS_REP || u->len != STATS_REP_LEN)
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
		/* the index is this rank's table's too: the mode and notify check it */
		if (u->len != POLICY_LEN || get64(u->data + 8) >= BENCH_POLICIES ||
		    get32(u->data + 16) != bench_policies[get64(u->data + 8)].wait ||
		    get32(u->data + 20) != bench_policies[get64(u->data + 8)].notify)
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

/*
 * rk-serve's own frames. The scheduler takes its frames (ROUND, ROUND_DONE,
 * the backend's partials) and the NCCL bootstrap its NCCL_ID before they get
 * here; what else comes (a frame of theirs once they are gone) is dropped.
 */
static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct server *srv = arg;
	struct rk_wire_user u;

	(void)w;
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
	metrics_peer_error(srv, err);
	if (srv->leaving)
		return;
	if (!srv->err) {
		srv->err_ns = now_ns();	/* --trace-rounds records it */
		srv->err_rank = rank;
		srv->err = err;
	}
	fprintf(stderr, PROG "[r%d]: rank %d failed: %s\n", srv->rank, rank, rk_strerror(err));
	if (srv->rank == 0)
		stats_fail_all(srv, err);
	rk_loop_stop(srv->loop);
}

void on_round_timeout(void *arg, struct rk_sched *s, uint64_t round_id, int rank)
{
	struct server *srv = arg;

	(void)s;
	fprintf(stderr, PROG "[r%d]: round %" PRIu64 ": rank %d did not finish its share in time "
		"(RK_EROUNDTIMEOUT)\n", srv->rank, round_id, rank);
	/* the same rank, and no round done between */
	if (rank == srv->slow_rank && round_id == srv->slow_round + 1)
		srv->slow_streak++;
	else
		srv->slow_streak = 1;
	srv->slow_round = round_id;
	srv->slow_rank = rank;
	if (srv->rank != 0 || srv->slow_streak < ROUND_TIMEOUTS_STOP || srv->err)
		return;
	fprintf(stderr, PROG "[r0]: rank %d missed %u rounds in a row: stopping the job\n", rank,
		srv->slow_streak);
	rk_sched_stop(s); /* the queue ends with RK_ESTOPPED, after this round's requests */
	be_abort(srv);	  /* the round it holds waits for that rank */
	srv->err_ns = now_ns();
	srv->err_rank = rank;
	srv->err = -RK_EROUNDTIMEOUT;
	stats_fail_all(srv, srv->err);
	rk_loop_stop(srv->loop);
}

const struct rk_world_ops world_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};
