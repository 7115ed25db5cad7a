/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's metrics: GET /metrics in the Prometheus text exposition format
 * (docs/SERVE.md lists every name). Each rank's loop, link, world (handshake
 * refusals), backend and notifier counters travel to the leader in its answer
 * to the stats collection (MSG_STATS_REP, peers.c), so that one scrape sees
 * every rank, each series labelled with its rank; the scheduler's counters and
 * the request latency histograms are the leader's. Names follow vLLM's where
 * it has an equivalent (vllm:time_to_first_token_seconds is
 * rankrt_time_to_first_token_seconds: Prometheus reserves ':' for recording
 * rules).
 *
 * One table per counter struct gives the name, type and help of each field
 * and its place in the struct; the same table packs the field into a
 * follower's report and prints it, so a field cannot be sent without being
 * shown, and a struct that grows stops the build until its table does.
 */
#define _GNU_SOURCE
#include "config.h"

#include <assert.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

enum mtype {
	COUNTER,
	GAUGE,
};

/* One field of a counter struct as a Prometheus series. */
struct mdef {
	const char *name;  /* the family; consecutive entries of one family share it */
	const char *label; /* an extra label of this entry, "key=\"value\"", or NULL */
	const char *help;
	enum mtype type;
	uint16_t off;
	uint8_t size;	  /* 4 or 8 bytes */
	bool is_signed;
	double scale;	  /* ns counters shown in seconds: 1e-9; else 1 */
};

#define F8(st, f)  offsetof(st, f), 8, false
#define F4(st, f)  offsetof(st, f), 4, false
#define FS8(st, f) offsetof(st, f), 8, true

#define LOOP(f) F8(struct rk_loop_stats, f)
static const struct mdef loop_defs[] = {
	{ "rankrt_loop_iterations_total", NULL, "Loop iterations.", COUNTER, LOOP(iterations), 1 },
	{ "rankrt_loop_events_total", NULL, "Frames, other completions, timer firings, posts and "
	  "source events handled.", COUNTER, LOOP(events), 1 },
	{ "rankrt_loop_busy_events_total", NULL, "Events that restarted the busy (spin) window.",
	  COUNTER, LOOP(busy_events), 1 },
	{ "rankrt_loop_spin_iterations_total", NULL, "Spin iterations that found nothing.",
	  COUNTER, LOOP(spin_iters), 1 },
	{ "rankrt_loop_blocks_total", NULL, "Blocking waits entered.", COUNTER, LOOP(blocks), 1 },
	{ "rankrt_loop_wakeups_total", NULL, "Blocking waits ended by a cross-thread wake.",
	  COUNTER, LOOP(wakeups), 1 },
	{ "rankrt_loop_posts_total", NULL, "Posts delivered to the loop.", COUNTER, LOOP(posts),
	  1 },
	{ "rankrt_loop_eintr_total", NULL, "Waits interrupted by a signal.", COUNTER, LOOP(eintr),
	  1 },
	{ "rankrt_loop_wait_seconds_total", "state=\"spin\"", "Time the loop spent waiting, by "
	  "how it waited.", COUNTER, LOOP(ns_spin), 1e-9 },
	{ "rankrt_loop_wait_seconds_total", "state=\"blocked\"", NULL, COUNTER, LOOP(ns_blocked),
	  1e-9 },
	{ "rankrt_loop_run_seconds_total", NULL, "Time spent in handlers.", COUNTER, LOOP(ns_run),
	  1e-9 },
	{ "rankrt_loop_predict_waits_total", NULL, "Sleeps until a predicted event less the "
	  "margin.", COUNTER, LOOP(predict_waits), 1 },
	{ "rankrt_loop_predict_outcomes_total", "outcome=\"early\"", "Predictive sleeps by "
	  "outcome: woke before the event, found it already there, or ended by another event.",
	  COUNTER, LOOP(predict_early), 1 },
	{ "rankrt_loop_predict_outcomes_total", "outcome=\"late\"", NULL, COUNTER,
	  LOOP(predict_late), 1 },
	{ "rankrt_loop_predict_outcomes_total", "outcome=\"cut\"", NULL, COUNTER,
	  LOOP(predict_cut), 1 },
	{ "rankrt_loop_oversleep_seconds_total", NULL, "How late the timed wakes came, summed.",
	  COUNTER, LOOP(ns_oversleep), 1e-9 },
	{ "rankrt_loop_predict_margin_seconds", NULL, "The predictive wait's margin in use now.",
	  GAUGE, LOOP(predict_margin_ns), 1e-9 },
	{ "rankrt_loop_learn_waits_total", NULL, "Predictive sleeps for a link's learned gaps.",
	  COUNTER, LOOP(learn_waits), 1 },
	{ "rankrt_loop_learn_holds_total", NULL, "Learned sleeps cut by other busy work (that "
	  "link's predictions held off).", COUNTER, LOOP(learn_holds), 1 },
	{ "rankrt_loop_window_cuts_total", NULL, "Spin windows ended early by the learned window.",
	  COUNTER, LOOP(window_cuts), 1 },
	{ "rankrt_loop_spin_window_seconds", NULL, "The spin window in use now (learned).",
	  GAUGE, LOOP(spin_window_ns), 1e-9 },
	{ "rankrt_loop_prewarms_total", NULL, "TCP rehearsals after predictive sleeps.",
	  COUNTER, LOOP(prewarms), 1 },
	{ "rankrt_loop_spin_seconds_total", "for=\"predict\"", "Spin time by what it waited "
	  "for: the rest of a predicted event's margin, or the spin window after busy work.",
	  COUNTER, LOOP(ns_spin_predict), 1e-9 },
	{ "rankrt_loop_spin_seconds_total", "for=\"window\"", NULL, COUNTER,
	  LOOP(ns_spin_window), 1e-9 },
	{ "rankrt_loop_learn_woken_total", NULL, "A link's bursts first seen right after a sleep "
	  "(they waited for a wake).", COUNTER, LOOP(learn_woken), 1 },
	{ "rankrt_loop_predict_overslept_total", NULL, "Late predictive sleeps whose timer woke "
	  "at or after its deadline (the rest were woken by their event).", COUNTER,
	  LOOP(predict_overslept), 1 },
	{ "rankrt_loop_learn_overdue_total", NULL, "A link's bursts that came after its learned "
	  "overdue point.", COUNTER, LOOP(learn_overdue), 1 },
	{ "rankrt_loop_learn_restarts_total", NULL, "Times a link's learner started over on a new "
	  "pace.", COUNTER, LOOP(learn_restarts), 1 },
};
_Static_assert(ARRAY_SIZE(loop_defs) == N_LOOP_CTR &&
	       sizeof(struct rk_loop_stats) == 8 * N_LOOP_CTR,
	       "struct rk_loop_stats changed: update loop_defs");

#define BE(f) F8(struct be_stats, f)
static const struct mdef be_defs[] = {
	{ "rankrt_backend_rounds_total", NULL, "Rounds the toy backend ran on this rank.",
	  COUNTER, BE(rounds), 1 },
	{ "rankrt_backend_outputs_total", NULL, "Outputs (logit rows) it computed.", COUNTER,
	  BE(outputs), 1 },
	{ "rankrt_backend_compute_seconds_total", NULL, "Its compute time (CUDA: launch to "
	  "completion).", COUNTER, BE(ns_compute), 1e-9 },
};
_Static_assert(ARRAY_SIZE(be_defs) == N_TOY_CTR && sizeof(struct be_stats) == 8 * N_TOY_CTR,
	       "struct be_stats changed: update be_defs");

#define WORLD(f) F8(struct rk_world_stats, f)
#define REFUSED(cause, f)                                                                    \
	{ "rankrt_handshake_refused_total", "cause=\"" cause "\"", NULL, COUNTER, WORLD(f), 1 }
static const struct mdef world_defs[] = {
	{ "rankrt_world_accepted_total", NULL, "Connections accepted on the leader's port.",
	  COUNTER, WORLD(accepted), 1 },
	{ "rankrt_world_joined_total", NULL, "Followers that completed the handshake.", COUNTER,
	  WORLD(joined), 1 },
	{ "rankrt_world_handshakes_pending", NULL, "Handshakes in progress now.", GAUGE,
	  WORLD(pending), 1 },
	{ "rankrt_world_handshakes_pending_max", NULL, "The most handshakes in progress at once.",
	  GAUGE, WORLD(pending_max), 1 },
	{ "rankrt_handshake_refused_total", "cause=\"magic\"", "Connections dropped before their "
	  "handshake completed, by cause (rk_world_stats).", COUNTER, WORLD(refused_magic), 1 },
	REFUSED("version", refused_version),
	REFUSED("frame", refused_frame),
	REFUSED("job", refused_job),
	REFUSED("rank", refused_rank),
	REFUSED("auth", refused_auth),
	REFUSED("timeout", refused_timeout),
	REFUSED("evicted", refused_evicted),
	REFUSED("closed", refused_closed),
	REFUSED("other", refused_other),
	{ "rankrt_handshake_refusals_log_suppressed_total", NULL, "Refusals counted but not "
	  "logged one by one.", COUNTER, WORLD(log_suppressed), 1 },
	{ "rankrt_world_shm_links_total", "kind=\"moved\"", "Links by what the same-host check "
	  "found: moved to shared memory, remote (another host or namespace), fallback (same "
	  "host, stayed on TCP).", COUNTER, WORLD(shm_links), 1 },
	{ "rankrt_world_shm_links_total", "kind=\"remote\"", NULL, COUNTER, WORLD(shm_remote), 1 },
	{ "rankrt_world_shm_links_total", "kind=\"fallback\"", NULL, COUNTER, WORLD(shm_fallback),
	  1 },
};
_Static_assert(ARRAY_SIZE(world_defs) == N_WORLD_CTR &&
	       sizeof(struct rk_world_stats) == 8 * N_WORLD_CTR,
	       "struct rk_world_stats changed: update world_defs");

#define LINK(f) F8(struct rk_link_stats, f)
static const struct mdef link_defs[] = {
	{ "rankrt_link_frames_total", "direction=\"tx\"", "Frames sent and received on the link "
	  "to the peer.", COUNTER, LINK(tx_frames), 1 },
	{ "rankrt_link_frames_total", "direction=\"rx\"", NULL, COUNTER, LINK(rx_frames), 1 },
	{ "rankrt_link_bytes_total", "direction=\"tx\"", "Bytes sent and received on the link.",
	  COUNTER, LINK(tx_bytes), 1 },
	{ "rankrt_link_bytes_total", "direction=\"rx\"", NULL, COUNTER, LINK(rx_bytes), 1 },
	{ "rankrt_link_flushes_total", NULL, "Send operations submitted (frames are batched).",
	  COUNTER, LINK(tx_flushes), 1 },
	{ "rankrt_link_heartbeats_total", "direction=\"tx\"", "Heartbeats sent and received.",
	  COUNTER, LINK(heartbeats_tx), 1 },
	{ "rankrt_link_heartbeats_total", "direction=\"rx\"", NULL, COUNTER, LINK(heartbeats_rx),
	  1 },
	{ "rankrt_link_tx_queued_max_bytes", NULL, "High-water mark of unsent bytes.", GAUGE,
	  LINK(tx_queued_max), 1 },
	{ "rankrt_link_roce_sends_total", "kind=\"all\"", "roce:// links: SEND work requests "
	  "posted, of them inline and credit-only.", COUNTER, LINK(tx_sends), 1 },
	{ "rankrt_link_roce_sends_total", "kind=\"inline\"", NULL, COUNTER, LINK(tx_inline), 1 },
	{ "rankrt_link_roce_sends_total", "kind=\"credit\"", NULL, COUNTER, LINK(tx_credit_msgs),
	  1 },
	{ "rankrt_link_roce_credit_stalls_total", NULL, "roce:// links: flushes that stopped for "
	  "want of peer receive credits.", COUNTER, LINK(credit_stalls), 1 },
	{ "rankrt_link_roce_cq_total", "kind=\"poll\"", "roce:// links: CQ polls that found "
	  "completions, and completion-channel events.", COUNTER, LINK(cq_polls), 1 },
	{ "rankrt_link_roce_cq_total", "kind=\"event\"", NULL, COUNTER, LINK(cq_events), 1 },
};
/* rnr_errors and credits_min: below, as errors and a gauge */
#define N_LINK_TABLE 14u
_Static_assert(ARRAY_SIZE(link_defs) == N_LINK_TABLE, "link_defs");
static const struct mdef link_more_defs[] = {
	{ "rankrt_link_errors_total", "error=\"rnr\"", "Link errors by name: roce:// "
	  "receiver-not-ready completions (must stay 0).", COUNTER, LINK(rnr_errors), 1 },
	{ "rankrt_link_roce_credits_min", NULL, "roce:// links: the lowest send-credit count "
	  "seen.", GAUGE, FS8(struct rk_link_stats, credits_min), 1 },
	{ "rankrt_link_shm_bcast_frames_total", NULL, "shm links: frames that went through the "
	  "world's broadcast ring.", COUNTER, LINK(shm_bcast_frames), 1 },
	{ "rankrt_link_shm_wakes_total", NULL, "shm links: wake-ups this side made because the "
	  "peer slept.", COUNTER, LINK(shm_wakes), 1 },
	{ "rankrt_link_shm_sleeps_total", NULL, "shm links: times this side announced a sleep "
	  "before blocking.", COUNTER, LINK(shm_sleeps), 1 },
	{ "rankrt_link_shm_ring_full_total", NULL, "shm links: flushes stopped by a full ring.",
	  COUNTER, LINK(shm_ring_full), 1 },
	{ "rankrt_link_tcp_io_total", "path=\"direct\",direction=\"rx\"", "tcp links: reads "
	  "and writes that moved bytes, by path (direct: a syscall from a poll or a flush; "
	  "commit: one from the send that made the frame; ring: io_uring).", COUNTER,
	  LINK(tcp_rx_direct), 1 },
	{ "rankrt_link_tcp_io_total", "path=\"ring\",direction=\"rx\"", NULL, COUNTER,
	  LINK(tcp_rx_ring), 1 },
	{ "rankrt_link_tcp_io_total", "path=\"direct\",direction=\"tx\"", NULL, COUNTER,
	  LINK(tcp_tx_direct), 1 },
	{ "rankrt_link_tcp_io_total", "path=\"ring\",direction=\"tx\"", NULL, COUNTER,
	  LINK(tcp_tx_ring), 1 },
	{ "rankrt_link_tcp_io_total", "path=\"commit\",direction=\"tx\"", NULL, COUNTER,
	  LINK(tcp_tx_commit), 1 },
	{ "rankrt_link_shm_tx_direct_total", NULL, "shm links: frames published into the ring "
	  "by the send that encoded them, without a flush.", COUNTER, LINK(shm_tx_direct), 1 },
	{ "rankrt_link_shm_lane_rx_total", NULL, "shm links, leader: frames that came on the "
	  "follower's lane (sent by its worker threads, not its loop).", COUNTER,
	  LINK(shm_lane_rx), 1 },
};
_Static_assert(N_LINK_TABLE + ARRAY_SIZE(link_more_defs) == N_LINK_CTR &&
	       sizeof(struct rk_link_stats) == 8 * N_LINK_CTR,
	       "struct rk_link_stats changed: update link_defs");

#define NOTE(f)	 F8(struct rk_gpu_notifier_stats, f)
#define NOTE4(f) F4(struct rk_gpu_notifier_stats, f)
static const struct mdef notify_defs[] = {
	{ "rankrt_notifier_marks_total", NULL, "GPU notifier: marks enqueued.", COUNTER,
	  NOTE(marks), 1 },
	{ "rankrt_notifier_delivered_total", "via=\"poll\"", "GPU notifier: marks delivered, by "
	  "how the loop learned of them.", COUNTER, NOTE(via_poll), 1 },
	{ "rankrt_notifier_delivered_total", "via=\"wake\"", NULL, COUNTER, NOTE(via_wake), 1 },
	{ "rankrt_notifier_wake_late_total", NULL, "GPU notifier: host-function posts that found "
	  "their mark delivered.", COUNTER, NOTE(wake_late), 1 },
	{ "rankrt_notifier_refused_total", NULL, "GPU notifier: marks refused (all slots in "
	  "flight).", COUNTER, NOTE(refused), 1 },
	{ "rankrt_notifier_outstanding", NULL, "GPU notifier: marks not yet delivered.", GAUGE,
	  NOTE4(outstanding), 1 },
	{ "rankrt_notifier_outstanding_max", NULL, "GPU notifier: the most marks outstanding.",
	  GAUGE, NOTE4(max_outstanding), 1 },
	{ "rankrt_notifier_predicted_total", NULL, "GPU notifier: marks enqueued without a host "
	  "function (auto).", COUNTER, NOTE(predicted), 1 },
	{ "rankrt_notifier_wake_armed_late_total", NULL, "GPU notifier: host functions enqueued "
	  "for an overdue mark.", COUNTER, NOTE(wake_armed_late), 1 },
	{ "rankrt_notifier_pred_bounded_total", NULL, "GPU notifier: deliveries seen after a gap.",
	  COUNTER, NOTE(pred_bounded), 1 },
	{ "rankrt_notifier_mark_seconds", "stat=\"mean\"", "GPU notifier: a mark's duration as "
	  "predicted: mean, mean deviation, low quantile.", GAUGE, NOTE(pred_mean_ns), 1e-9 },
	{ "rankrt_notifier_mark_seconds", "stat=\"deviation\"", NULL, GAUGE, NOTE(pred_dev_ns),
	  1e-9 },
	{ "rankrt_notifier_mark_seconds", "stat=\"quantile\"", NULL, GAUGE, NOTE(pred_q_ns),
	  1e-9 },
	{ "rankrt_notifier_lazy_sleeps_total", NULL, "GPU notifier: lazy bounded sleeps that "
	  "armed nothing.", COUNTER, NOTE(lazy_sleeps), 1 },
};
_Static_assert(ARRAY_SIZE(notify_defs) == N_NOTIFY_CTR &&
	       sizeof(struct rk_gpu_notifier_stats) == 8 * (N_NOTIFY_CTR - 1),
	       "struct rk_gpu_notifier_stats changed: update notify_defs");

/* Peer failures (the world's peer_error callback), by rk_errname(). */
static const char *const peer_err_names[N_PEER_ERR] = {
	"RK_EPEERDEAD", "RK_EPEERBYE", "RK_EPEEREXIT", "RK_ESLOWPEER", "RK_ESHMRING",
	"ECONNRESET",	"EPROTO",      "EBADMSG",      "ETIMEDOUT",    "other",
};

const char *const finish_names[FINISH__COUNT] = {
	[FINISH_STOP] = "stop",
	[FINISH_LENGTH] = "length",
	[FINISH_ABORT] = "abort",
	[FINISH_ERROR] = "error",
};

/* Bucket bounds (seconds): vLLM's, with finer ones below for a toy model's microseconds. */
static const double ttft_le[N_BUCKETS] = {
	0.0001, 0.0005, 0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,
	0.25,	0.5,	0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0,
};
static const double itl_le[N_BUCKETS] = {
	0.00001, 0.00005, 0.0001, 0.0005, 0.001, 0.005, 0.01, 0.025, 0.05, 0.075,
	0.1,	 0.15,	  0.2,	  0.3,	  0.4,	 0.5,	0.75, 1.0,   2.5,  5.0,
};
static const double e2e_le[N_BUCKETS] = {
	0.001, 0.005, 0.01, 0.05, 0.1,	0.3,  0.5,  0.8,  1.0,	 1.5,
	2.0,   2.5,   5.0,  10.0, 15.0, 20.0, 30.0, 60.0, 120.0, 240.0,
};

/* ---- a rank's report ---------------------------------------------------------------- */

static uint64_t field_get(const struct mdef *d, const void *base)
{
	const uint8_t *p = (const uint8_t *)base + d->off;
	uint32_t v4;
	uint64_t v8;

	if (d->size == 4) {
		memcpy(&v4, p, 4);
		return v4;
	}
	memcpy(&v8, p, 8);
	return v8;
}

static void field_set(const struct mdef *d, void *base, uint64_t v)
{
	uint8_t *p = (uint8_t *)base + d->off;
	uint32_t v4 = (uint32_t)v;

	if (d->size == 4)
		memcpy(p, &v4, 4);
	else
		memcpy(p, &v, 8);
}

static uint8_t *pack(const struct mdef *t, size_t n, const void *base, uint8_t *p)
{
	size_t i;

	for (i = 0; i < n; i++, p += 8)
		put64(p, field_get(&t[i], base));
	return p;
}

static const uint8_t *unpack(const struct mdef *t, size_t n, void *base, const uint8_t *p)
{
	size_t i;

	for (i = 0; i < n; i++, p += 8)
		field_set(&t[i], base, get64(p));
	return p;
}

void metrics_own(struct server *srv, struct rank_metrics *m)
{
	struct rk_link *l = srv->rank ? rk_world_link(srv->world, 0) : NULL;

	memset(m, 0, sizeof(*m));
	rk_world_stats(srv->world, &m->world, sizeof(m->world));
	if (l) {
		rk_link_stats(l, &m->link, sizeof(m->link));
		m->link_up = rk_link_up(l);
	}
	if (srv->cuda) {
		struct toy_cuda_stats cs;

		srv->cm->stats(srv->cuda, &cs);
		m->notify = cs.notify;
		m->has_notify = true;
	} else if (srv->cpu && toy_cpu_notifier(srv->cpu)) {
		/* --device-time: the emulated device's notifier */
		rk_gpu_notifier_stats(toy_cpu_notifier(srv->cpu), &m->notify, sizeof(m->notify));
		m->has_notify = true;
	}
	memcpy(m->peer_err, srv->peer_err, sizeof(m->peer_err));
}

void metrics_pack(const struct rank_metrics *m, uint8_t *p)
{
	uint8_t *end = p + METRICS_LEN;
	uint32_t i;

	p = pack(world_defs, ARRAY_SIZE(world_defs), &m->world, p);
	p = pack(link_defs, ARRAY_SIZE(link_defs), &m->link, p);
	p = pack(link_more_defs, ARRAY_SIZE(link_more_defs), &m->link, p);
	p = pack(notify_defs, ARRAY_SIZE(notify_defs), &m->notify, p);
	put64(p, m->link_up | (uint64_t)m->has_notify << 1);
	p += 8;
	for (i = 0; i < N_PEER_ERR; i++, p += 8)
		put64(p, m->peer_err[i]);
	(void)end;
	assert(p == end);
}

void metrics_unpack(struct rank_metrics *m, const uint8_t *p)
{
	uint64_t flags;
	uint32_t i;

	memset(m, 0, sizeof(*m));
	p = unpack(world_defs, ARRAY_SIZE(world_defs), &m->world, p);
	p = unpack(link_defs, ARRAY_SIZE(link_defs), &m->link, p);
	p = unpack(link_more_defs, ARRAY_SIZE(link_more_defs), &m->link, p);
	p = unpack(notify_defs, ARRAY_SIZE(notify_defs), &m->notify, p);
	flags = get64(p);
	m->link_up = flags & 1;
	m->has_notify = flags & 2;
	p += 8;
	for (i = 0; i < N_PEER_ERR; i++, p += 8)
		m->peer_err[i] = get64(p);
}

void metrics_peer_error(struct server *srv, int err)
{
	const char *name = rk_errname(err);
	uint32_t i;

	for (i = 0; i < N_PEER_ERR - 1 && strcmp(name, peer_err_names[i]); i++)
		;
	srv->peer_err[i]++;
}

/* ---- request latencies (leader, loop thread) ----------------------------------------- */

static void observe(struct hist *h, const double *le, double v)
{
	uint32_t i;

	for (i = 0; i < N_BUCKETS && v > le[i]; i++)
		;
	h->n[i]++;
	h->count++;
	h->sum += v;
}

/*
 * A round's tokens arrive together: the first one is the time to first token,
 * each later one gets an equal share of the time since the last delivery.
 */
void metrics_req_tokens(struct server *srv, struct req_timing *t, uint32_t n, uint64_t now)
{
	uint32_t i;

	if (!n)
		return;
	if (!t->t_first) {
		t->t_first = now;
		observe(&srv->rm.ttft, ttft_le, (double)(now - t->t0) / 1e9);
		n--;
	} else {
		for (i = 0; i < n; i++)
			observe(&srv->rm.itl, itl_le, (double)(now - t->t_last) / 1e9 / n);
	}
	t->t_last = now;
}

void metrics_req_done(struct server *srv, const struct req_timing *t, uint32_t n_prompt,
		      uint32_t n_out, enum finish f, uint64_t now)
{
	srv->rm.finished[f]++;
	srv->rm.prompt_tokens += n_prompt;
	srv->rm.output_tokens += n_out;
	if (f == FINISH_STOP || f == FINISH_LENGTH)
		observe(&srv->rm.e2e, e2e_le, (double)(now - t->t0) / 1e9);
}

/* ---- the exposition ------------------------------------------------------------------ */

void metrics_wait_done(struct stats_wait *w)
{
	struct metrics_wait *m = (struct metrics_wait *)w;
	struct server *srv = w->srv;
	struct rk_link *l;
	int r;

	if (!w->err) {
		m->rm = srv->rm;
		for (r = 1; r < srv->size; r++) {
			l = rk_world_link(srv->world, r);
			m->up[r] = l && rk_link_up(l);
			if (l)
				rk_link_stats(l, &m->links[r], sizeof(m->links[r]));
		}
	}
	m->signal(w); /* the waiter's storage may end here */
}

static void family(FILE *f, const struct mdef *d)
{
	if (d->help)
		fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", d->name, d->help, d->name,
			d->type == COUNTER ? "counter" : "gauge");
}

static void value(FILE *f, const struct mdef *d, const void *base)
{
	uint64_t v = field_get(d, base);

	if (d->is_signed)
		fprintf(f, " %lld\n", (long long)v);
	else if (d->scale != 1)
		fprintf(f, " %.9g\n", (double)v * d->scale);
	else
		fprintf(f, " %llu\n", (unsigned long long)v);
}

/* One series: name{rank="R"[,peer="P"][,label]} value. */
static void series(FILE *f, const struct mdef *d, int rank, int peer, const void *base)
{
	fprintf(f, "%s{rank=\"%d\"", d->name, rank);
	if (peer >= 0)
		fprintf(f, ",peer=\"%d\"", peer);
	if (d->label)
		fprintf(f, ",%s", d->label);
	fputc('}', f);
	value(f, d, base);
}

/* The bases of one table's structs, per rank (NULL: that rank has none). */
typedef const void *(*base_fn)(const struct metrics_wait *m, int rank);

static const void *base_loop(const struct metrics_wait *m, int r)
{
	return &m->w.ranks[r].loop;
}

static const void *base_be(const struct metrics_wait *m, int r)
{
	return &m->w.ranks[r].toy;
}

static const void *base_world(const struct metrics_wait *m, int r)
{
	return &m->w.ranks[r].m.world;
}

static const void *base_notify(const struct metrics_wait *m, int r)
{
	return m->w.ranks[r].m.has_notify ? &m->w.ranks[r].m.notify : NULL;
}

/* Where the family of t[@i] ends: its entries are consecutive. */
static size_t family_end(const struct mdef *t, size_t n, size_t i)
{
	size_t j;

	for (j = i + 1; j < n && !strcmp(t[j].name, t[i].name); j++)
		;
	return j;
}

/* Every family of @t, every rank's series of it in rank order. */
static void per_rank(FILE *f, const struct server *srv, const struct metrics_wait *m,
		     const struct mdef *t, size_t n, base_fn base)
{
	size_t i, j, k;
	int r;

	for (i = 0; i < n; i = j) {
		j = family_end(t, n, i);
		family(f, &t[i]);
		for (r = 0; r < srv->size; r++)
			for (k = i; k < j && base(m, r); k++)
				series(f, &t[k], r, -1, base(m, r));
	}
}

/* Link families: the leader's link to each follower, each follower's to the leader. */
static void per_link(FILE *f, const struct server *srv, const struct metrics_wait *m,
		     const struct mdef *t, size_t n)
{
	size_t i, j, k;
	int r;

	for (i = 0; i < n; i = j) {
		j = family_end(t, n, i);
		family(f, &t[i]);
		for (r = 1; r < srv->size; r++)
			for (k = i; k < j; k++)
				series(f, &t[k], 0, r, &m->links[r]);
		for (r = 1; r < srv->size; r++)
			for (k = i; k < j; k++)
				series(f, &t[k], r, 0, &m->w.ranks[r].m.link);
	}
}

/* A leader's series: its rank and the model, as vLLM labels its own. */
#define LEAD "{rank=\"0\",model_name=\"" MODEL_ID "\"}"

static void histogram(FILE *f, const char *name, const char *help, const struct hist *h,
		      const double *le)
{
	uint64_t cum = 0;
	uint32_t i;

	fprintf(f, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
	for (i = 0; i < N_BUCKETS; i++) {
		cum += h->n[i];
		fprintf(f, "%s_bucket{rank=\"0\",model_name=\"" MODEL_ID "\",le=\"%g\"} %llu\n",
			name, le[i], (unsigned long long)cum);
	}
	fprintf(f, "%s_bucket{rank=\"0\",model_name=\"" MODEL_ID "\",le=\"+Inf\"} %llu\n",
		name, (unsigned long long)h->count);
	fprintf(f, "%s_sum" LEAD " %.9f\n%s_count" LEAD " %llu\n", name, h->sum, name,
		(unsigned long long)h->count);
}

static void one(FILE *f, const char *name, const char *type, const char *help, uint64_t v)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s %s\n%s" LEAD " %llu\n", name, help, name, type, name,
		(unsigned long long)v);
}

static void one_s(FILE *f, const char *name, const char *help, uint64_t ns)
{
	fprintf(f, "# HELP %s %s\n# TYPE %s counter\n%s" LEAD " %.9f\n", name, help, name, name,
		ns / 1e9);
}

static void leader(FILE *f, const struct metrics_wait *m)
{
	const struct rk_sched_stats *s = &m->w.sched;
	const struct req_metrics *rm = &m->rm;
	int i;

	one(f, "rankrt_num_requests_running", "gauge",
	    "Requests in the running batch (vLLM: num_requests_running).", s->running);
	one(f, "rankrt_num_requests_waiting", "gauge",
	    "Requests waiting to join the batch (vLLM: num_requests_waiting).", s->queued);
	one(f, "rankrt_sched_rounds_total", "counter", "Decode rounds the scheduler ran.",
	    s->rounds);
	one(f, "rankrt_sched_round_timeouts_total", "counter",
	    "Rounds the round watchdog failed: a rank did not finish its share within the round "
	    "bound (RK_EROUNDTIMEOUT).", s->round_timeouts);
	fprintf(f, "# HELP rankrt_sched_round_bound_seconds How long the leader waits for a round "
		   "now (RK_ROUND_TIMEOUT_MS or 10x the slowest round, and a quarter more; 0: no "
		   "watchdog).\n# TYPE rankrt_sched_round_bound_seconds gauge\n"
		   "rankrt_sched_round_bound_seconds" LEAD " %.3f\n", s->round_bound_ns / 1e9);
	one_s(f, "rankrt_sched_round_seconds_total",
	      "Broadcast-to-completion time of the rounds, summed.", s->ns_round_sum);
	one(f, "rankrt_sched_streams_done_total", "counter", "Streams retired.",
	    s->streams_done);
	one(f, "rankrt_sched_rounds_published_total", "counter",
	    "Rounds published in the epoch region (resident rounds).", s->published);
	one(f, "rankrt_sched_rounds_shared_total", "counter",
	    "Rounds in the same-host shared epoch region: the leader's publications there, a "
	    "follower's rounds left to it.", s->shared_rounds);
	one(f, "rankrt_sched_rounds_off_loop_total", "counter",
	    "Follower: rounds its backend ran without the loop (RK_LAUNCH_OFF_LOOP: a resident "
	    "consumer that shares on the lane).", s->off_loop_rounds);
	one(f, "rankrt_sched_resident_fallbacks_total", "counter",
	    "Rounds that took the launch path: no epoch region, or a publication refused.",
	    s->resident_fallbacks);
	one(f, "rankrt_generation_tokens_total", "counter",
	    "Tokens generated (vLLM: generation_tokens_total).", s->tokens);
	one(f, "rankrt_spec_decode_num_draft_tokens_total", "counter",
	    "Drafted tokens sent for verification (vLLM: spec_decode_num_draft_tokens_total).",
	    s->drafted);
	one(f, "rankrt_spec_decode_num_accepted_tokens_total", "counter",
	    "Drafted tokens accepted (vLLM: spec_decode_num_accepted_tokens_total).",
	    s->accepted);
	one(f, "rankrt_prompt_tokens_total", "counter",
	    "Prompt tokens of finished HTTP requests (vLLM: prompt_tokens_total).",
	    rm->prompt_tokens);
	one(f, "rankrt_request_generation_tokens_total", "counter",
	    "Tokens returned to finished HTTP requests, stops excluded.",
	    rm->output_tokens);
	fprintf(f, "# HELP rankrt_request_success_total Finished HTTP requests by finish reason "
		   "(vLLM: request_success_total; abort: the client went away).\n"
		   "# TYPE rankrt_request_success_total counter\n");
	for (i = FINISH_STOP; i <= FINISH_ABORT; i++)
		fprintf(f, "rankrt_request_success_total{rank=\"0\",model_name=\"" MODEL_ID
			   "\",finished_reason=\"%s\"} %llu\n",
			finish_names[i], (unsigned long long)rm->finished[i]);
	one(f, "rankrt_request_failure_total", "counter",
	    "HTTP requests that ended with an error (a rank failed, the server stopped).",
	    rm->finished[FINISH_ERROR]);
	histogram(f, "rankrt_time_to_first_token_seconds",
		  "Time from a request's arrival to its first token (vLLM: "
		  "time_to_first_token_seconds).", &rm->ttft, ttft_le);
	histogram(f, "rankrt_inter_token_latency_seconds",
		  "Time between a request's tokens; a round's tokens share its interval (vLLM: "
		  "inter_token_latency_seconds).", &rm->itl, itl_le);
	histogram(f, "rankrt_e2e_request_latency_seconds",
		  "Time from a request's arrival to its last token, for requests that finished "
		  "(vLLM: e2e_request_latency_seconds).", &rm->e2e, e2e_le);
}

int metrics_render(const struct server *srv, const struct metrics_wait *m, char **out,
		   size_t *len)
{
	FILE *f = open_memstream(out, len);
	const struct rank_stats *rs = m->w.ranks;
	uint32_t i;
	int r;

	if (!f)
		return -ENOMEM;
	fprintf(f, "# HELP rankrt_info The model and the world this server runs.\n"
		   "# TYPE rankrt_info gauge\n"
		   "rankrt_info{model_name=\"" MODEL_ID "\",world_size=\"%d\",vocab=\"%u\","
		   "hidden=\"%u\",backend=\"%s\"} 1\n",
		srv->size, srv->opt.model.V, srv->opt.model.H, backend_name(srv->opt.backend));
	leader(f, m);
	fprintf(f, "# HELP rankrt_rank_answered Whether the rank answered this scrape's stats "
		   "request in time (0: its counters below are zeros).\n"
		   "# TYPE rankrt_rank_answered gauge\n");
	for (r = 0; r < srv->size; r++)
		fprintf(f, "rankrt_rank_answered{rank=\"%d\"} %d\n", r, rs[r].valid ? 1 : 0);
	fprintf(f, "# HELP rankrt_process_cpu_seconds_total CPU time of the rank's process, every "
		   "thread.\n# TYPE rankrt_process_cpu_seconds_total counter\n");
	for (r = 0; r < srv->size; r++)
		fprintf(f, "rankrt_process_cpu_seconds_total{rank=\"%d\",mode=\"user\"} %.6f\n"
			   "rankrt_process_cpu_seconds_total{rank=\"%d\",mode=\"system\"} %.6f\n",
			r, rs[r].user_s, r, rs[r].sys_s);
	per_rank(f, srv, m, loop_defs, ARRAY_SIZE(loop_defs), base_loop);
	per_rank(f, srv, m, be_defs, ARRAY_SIZE(be_defs), base_be);
	per_rank(f, srv, m, world_defs, ARRAY_SIZE(world_defs), base_world);
	per_rank(f, srv, m, notify_defs, ARRAY_SIZE(notify_defs), base_notify);
	if (srv->size > 1) {
		fprintf(f, "# HELP rankrt_link_up Whether the link to the peer is up.\n"
			   "# TYPE rankrt_link_up gauge\n");
		for (r = 1; r < srv->size; r++)
			fprintf(f, "rankrt_link_up{rank=\"0\",peer=\"%d\"} %d\n", r, m->up[r]);
		for (r = 1; r < srv->size; r++)
			fprintf(f, "rankrt_link_up{rank=\"%d\",peer=\"0\"} %d\n", r,
				rs[r].m.link_up);
		per_link(f, srv, m, link_defs, ARRAY_SIZE(link_defs));
		per_link(f, srv, m, link_more_defs, ARRAY_SIZE(link_more_defs));
	}
	fprintf(f, "# HELP rankrt_peer_errors_total Peer failures this rank saw, by error "
		   "name.\n# TYPE rankrt_peer_errors_total counter\n");
	for (r = 0; r < srv->size; r++)
		for (i = 0; i < N_PEER_ERR; i++)
			fprintf(f, "rankrt_peer_errors_total{rank=\"%d\",error=\"%s\"} %llu\n", r,
				peer_err_names[i], (unsigned long long)rs[r].m.peer_err[i]);
	if (fclose(f)) {
		free(*out);
		*out = NULL;
		return -ENOMEM;
	}
	return 0;
}
