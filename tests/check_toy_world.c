// SPDX-License-Identifier: MIT
/*
 * check_toy_world: the toy model's CPU backend in a world of 1, 2 and 4 ranks
 * as threads over loopback: first with a small scheduler written here
 * (hand-built ROUNDs, drafts right and wrong), then with rk_sched, resident
 * rounds on and off, in mixed worlds and in races; every stream's tokens must
 * equal toy_generate_ref() at TP1.
 *
 * Threads never call Check assertions: they record the failing line and
 * error (T_FAIL()), and the test body asserts after joining them.
 */
#define _GNU_SOURCE
#include "config.h"

#include <arpa/inet.h>
#include <check.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "toy.h"

#define TIMEOUT_S	60
#define SESSION		0x746f790000000001ull

/* ---- the backend in a world of threads ----------------------------------------------------- */

#define BV		256
#define BH		256
#define BSEED		21
#define NSTREAM		3
#define GEN_MAX		40
#define HIST_MAX	64
#define DRAFT_K		3
#define TAG_QUIT	0x71756974u

struct tstream {
	uint64_t id;
	struct toy_sampling s;
	uint32_t prompt[8], n_prompt, n_gen;
	uint32_t ref[GEN_MAX];
	/* leader's scheduling */
	uint32_t hist[HIST_MAX], hist_len, fed, generated;
	uint32_t n_in, n_draft;
	bool done;
	/* rk_sched variant */
	struct rk_request req;
	uint32_t got[GEN_MAX], n_got;
	int done_err, n_done;
};

struct tworld {
	int size;
	bool use_sched;
	enum rk_resident_mode resident;	/* every rank's rk_sched_config.resident */
	int tcp_rank;			/* a follower with RK_SHM=off (0: none) */
	bool race;			/* follower 1 runs race_hook() */
	atomic_uint_fast64_t race_round;	/* the round it holds (0: none yet) */
	atomic_uint_fast64_t race_loop;	/* the loop stands in the window of this round */
	atomic_bool race_past;		/* ...and saw the region move past it there */
	atomic_bool race_timeout;	/* a hold ran into its hang guard */
	atomic_int port;
	struct toy_oracle oracle;	/* the leader's drafter */
	struct tstream s[NSTREAM];
	struct trank {
		struct tworld *tw;
		int rank;
		struct rk_loop *loop;
		struct rk_world *w;
		struct toy_cpu *b;
		struct rk_sched *sched;
		int line, err;			/* where and why it failed; 0 = it did not */
		bool quit;
		int frame_err;			/* first error a frame handler hit */
		uint64_t offered[RK_FRAME__COUNT];	/* frames on_frame() got, by type */
		uint64_t offered_toy;		/* ...of them USER frames tagged TOY_TAG */
		int peer_errs;
		uint64_t completions;		/* the backend's reports seen (no scheduler) */
		uint64_t done_id;
		int done_status;
		uint32_t streams_left;		/* leader: toy_cpu_streams() at the end */
		uint32_t expect_left;		/* leader: streams the next round would retire */
		uint64_t rounds;
		struct toy_cpu_stats stats;
		struct rk_sched_stats sstats;
		struct rk_link_stats link;	/* follower: its link to the leader, at QUIT */
		struct rk_loop_stats lstats;	/* follower: its loop's, at QUIT */
		bool on_shm;			/* ...which was on shared memory */
	} r[4];
};

static void note_err(struct trank *t, int err)
{
	if (err < 0 && !t->frame_err)
		t->frame_err = err;
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct trank *t = arg;
	struct rk_wire_round view;
	struct rk_wire_user u;
	bool user = h->type == RK_FRAME_USER && !rk_wire_decode_user(payload, h->len, &u);
	int ret;

	(void)w;
	/* with a scheduler its frames (ROUND, ROUND_DONE, the partials) go to it */
	t->offered[h->type]++;
	if (user && u.tag == TOY_TAG)
		t->offered_toy++;
	if (!t->b) {
		note_err(t, -EAGAIN);
		return RK_BUSY;
	}
	if (user && u.tag == TOY_TAG) {
		/* no scheduler: the leader hands the partials to its backend itself */
		ret = toy_cpu_ops.frame(t->b, peer, &u);
		note_err(t, ret);
		return RK_BUSY;
	}
	if (h->type == RK_FRAME_ROUND && !t->sched) {
		/* a follower without a scheduler launches what it receives */
		ret = rk_wire_decode_round(payload, h->len, &view);
		if (!ret)
			ret = toy_cpu_ops.launch(t->b, NULL, &view, h->flags);
		note_err(t, ret);
		return RK_BUSY;
	}
	if (user && u.tag == TAG_QUIT)
		t->quit = true;
	return RK_BUSY;
}

static void on_peer_error(struct rk_world *w, int rank, int err, void *arg)
{
	struct trank *t = arg;

	(void)w;
	(void)rank;
	(void)err;
	t->peer_errs++;
}

static const struct rk_world_ops world_ops = {
	.frame = on_frame,
	.peer_error = on_peer_error,
};

/* Before a launch without a scheduler: the reports so far. */
static void mark_reports(struct trank *t)
{
	t->completions = toy_cpu_reports(t->b, NULL, NULL);
}

/* That round was reported (its id and status in done_id, done_status). */
static bool reported(struct trank *t)
{
	return toy_cpu_reports(t->b, &t->done_id, &t->done_status) > t->completions;
}

static int node_create(struct trank *t, uint64_t deadline)
{
	struct rk_config c;

	rk_config_init(&c);
	c.rank = t->rank;
	c.world_size = t->tw->size;
	c.session_id = SESSION;
	c.wait.mode = RK_WAIT_BLOCK;	/* 2 cores, up to 8 threads: never spin */
	if (t->tw->tcp_rank && t->rank == t->tw->tcp_rank)
		c.shm = RK_SHM_OFF;	/* a mixed world: this follower stays on TCP */
	c.peer_timeout_ns = 5000 * MS;
	c.connect_timeout_ns = 10000 * MS;
	return rk_test_join(&c, &t->tw->port, deadline, &world_ops, t, &t->loop, &t->w);
}

/* The test's scheduler: drafts from the reference, some deliberately wrong. */
static uint32_t make_drafts(struct tstream *s, uint32_t round, uint32_t *out)
{
	uint32_t remaining = s->n_gen - s->generated, k, j;

	k = remaining - 1 < DRAFT_K ? remaining - 1 : DRAFT_K;
	if (round % 4 == 2)
		k = 0;
	for (j = 0; j < k; j++) {
		out[j] = s->ref[s->generated + j];
		if (round % 3 == 1 && j == 1)
			out[j] = (out[j] + 1) % BV;	/* rejected here, and the rest after it */
	}
	return k;
}

static int leader_rounds(struct trank *t, uint64_t deadline)
{
	static uint8_t buf[1 << 16];
	struct tworld *tw = t->tw;
	struct rk_wire_stream st[NSTREAM];
	struct tstream *in_round[NSTREAM];
	uint32_t tok[NSTREAM * (HIST_MAX + DRAFT_K)], outs[DRAFT_K + 1];
	struct rk_wire_round view;
	uint32_t n, ntok, i, j, acc, emit, flags, left = NSTREAM, x;
	uint64_t round = 0;
	int64_t len;
	int ret;

	while (left) {
		n = 0;
		ntok = 0;
		flags = 0;
		round++;
		for (i = 0; i < NSTREAM; i++) {
			struct tstream *s = &tw->s[i];

			if (s->done)
				continue;
			s->n_in = s->hist_len - s->fed;
			memcpy(tok + ntok, s->hist + s->fed, s->n_in * 4);
			ntok += s->n_in;
			s->n_draft = make_drafts(s, (uint32_t)round, tok + ntok);
			ntok += s->n_draft;
			st[n] = (struct rk_wire_stream){ .stream_id = s->id, .position = s->fed,
							 .n_tokens = s->n_in,
							 .n_draft = s->n_draft,
							 .top_k = s->s.top_k,
							 .temperature = s->s.temperature,
							 .top_p = s->s.top_p, .seed = s->s.seed };
			flags |= s->n_draft ? RK_FRAME_F_DRAFTED : 0;
			flags |= s->n_in > 1 ? RK_FRAME_F_PREFILL : 0;
			in_round[n++] = s;
		}
		len = rk_wire_encode_round(buf, sizeof(buf), round, st, n, tok);
		if (len < 0)
			return (int)len;
		if (tw->size > 1) {
			ret = rk_world_broadcast(t->w, RK_FRAME_ROUND, flags, buf, (uint32_t)len);
			if (ret)
				return ret;
		}
		ret = rk_wire_decode_round(buf, (size_t)len, &view);
		if (ret)
			return ret;
		mark_reports(t);
		ret = toy_cpu_ops.launch(t->b, NULL, &view, flags);
		if (ret)
			return ret;
		/* nothing to read before the round is complete */
		if (toy_cpu_ops.token(t->b, 0, 0, &x) != -EAGAIN)
			return -EPROTO;
		if (!RUN_UNTIL(t, deadline, reported(t)))
			return -ETIMEDOUT;
		if (t->done_status)
			return t->done_status;
		if (t->done_id != round)
			return -EPROTO;
		if (toy_cpu_ops.token(t->b, n, 0, &x) != -EINVAL ||
		    toy_cpu_ops.token(t->b, 0, in_round[0]->n_draft + 1, &x) != -EINVAL)
			return -EPROTO;
		t->expect_left = 0;
		for (i = 0; i < n; i++) {
			struct tstream *s = in_round[i];
			const uint32_t *draft = tok;

			for (j = 0; j < i; j++)
				draft += in_round[j]->n_in + in_round[j]->n_draft;
			draft += s->n_in;
			for (j = 0; j <= s->n_draft; j++) {
				ret = toy_cpu_ops.token(t->b, i, j, &outs[j]);
				if (ret)
					return ret;
			}
			for (acc = 0; acc < s->n_draft && draft[acc] == outs[acc]; acc++)
				;
			emit = acc + 1;
			if (emit > s->n_gen - s->generated)
				emit = s->n_gen - s->generated;
			memcpy(s->hist + s->hist_len, outs, emit * 4);
			s->hist_len += emit;
			s->generated += emit;
			s->fed += s->n_in;
			if (s->generated == s->n_gen) {
				s->done = true;
				left--;
				/* half by retire(), half by the stream rule alone */
				if (s->id % 2)
					toy_cpu_ops.retire(t->b, s->id);
				else
					t->expect_left++;
			}
		}
	}
	t->rounds = round;
	return 0;
}

static void req_cb(struct rk_request *req, const uint32_t *tokens, uint32_t n, bool done, int err)
{
	struct tstream *s = req->data;

	if (n && s->n_got + n <= GEN_MAX) {	/* tokens is NULL when n is 0 */
		memcpy(s->got + s->n_got, tokens, n * 4);
		s->n_got += n;
	}
	if (done) {
		s->n_done++;
		s->done_err = err;
	}
}

static int leader_sched(struct trank *t, uint64_t deadline)
{
	struct tworld *tw = t->tw;
	uint32_t i, done;
	int ret;

	for (i = 0; i < NSTREAM; i++) {
		struct tstream *s = &tw->s[i];

		rk_request_init(&s->req);
		s->req.prompt = s->prompt;
		s->req.prompt_len = s->n_prompt;
		s->req.max_tokens = s->n_gen;
		s->req.top_k = s->s.top_k;
		s->req.temperature = s->s.temperature;
		s->req.top_p = s->s.top_p;
		s->req.seed = s->s.seed;
		s->req.cb = req_cb;
		s->req.data = s;
		ret = rk_sched_submit(t->sched, &s->req);
		if (ret)
			return ret;
	}
	for (;;) {
		for (i = 0, done = 0; i < NSTREAM; i++)
			done += tw->s[i].n_done;
		if (done == NSTREAM)
			break;
		if (rk_test_now_ns() > deadline)
			return -ETIMEDOUT;
		if (rk_loop_run(t->loop, RK_RUN_ONCE) < 0)
			return -EIO;
	}
	return 0;
}

/*
 * Follower 1's toy_params.test_hook: launch()'s two looks at an armed job
 * (armed_takes()) with the worker's whole round in between, the window a
 * preemption opens. The first round that the worker is about to take is
 * held, whichever thread gets there first: the worker waits until the loop
 * has read took (false) and stands before its region read, and the loop
 * waits there until the leader has published a later round, which it can
 * do only once the worker's share has reached it on the lane.
 */
/* One pause of a hold; false (race_timeout set) once past its hang guard. */
static bool race_pause(struct tworld *tw, uint64_t deadline)
{
	const struct timespec pause = { 0, 20000 };

	if (rk_test_now_ns() > deadline) {
		atomic_store(&tw->race_timeout, true);
		return false;
	}
	nanosleep(&pause, NULL);
	return true;
}

static void race_hook(void *arg, int where, const struct rk_epoch *ep, uint64_t id)
{
	struct tworld *tw = arg;
	uint64_t deadline = rk_test_deadline_ms(20000), held = 0;

	if (!atomic_compare_exchange_strong(&tw->race_round, &held, id) && held != id)
		return;
	if (where == TOY_HOOK_WORKER_TAKES) {
		while (atomic_load(&tw->race_loop) != id)
			if (!race_pause(tw, deadline))
				return;
		return;
	}
	atomic_store(&tw->race_loop, id);
	while (rk_epoch_current(ep) <= id)
		if (!race_pause(tw, deadline))
			return;
	atomic_store(&tw->race_past, true);
}

/*
 * The scheduler worlds' drafter (the leader's): the toy's set-acceptance
 * oracle over each stream's reference, so drafts are right and wrong.
 */
static uint32_t oracle_draft(void *arg, const struct rk_request *req, const uint32_t *hist,
			     size_t n, uint32_t *out, uint32_t k)
{
	const struct tstream *s = req->data;

	(void)hist;
	(void)n;
	return toy_oracle_draft(arg, s->ref, s->n_gen, req->generated, req->seed, out, k);
}

static void *rank_thread(void *arg)
{
	struct trank *t = arg;
	struct tworld *tw = t->tw;
	struct toy_params p;
	struct rk_sched_config sc = { .max_batch = 8, .draft_k = DRAFT_K,
				      .draft = oracle_draft, .draft_arg = &tw->oracle,
				      .resident = tw->resident };
	uint64_t deadline = rk_test_deadline_ms(40000);
	uint8_t quit[8];
	int ret;

	ret = node_create(t, deadline);
	if (ret)
		T_FAIL(t, ret);
	/*
	 * The backend and scheduler exist before the world is ready: a ROUND
	 * can arrive in the same receive as the WELCOME, inside the wait.
	 */
	toy_params_init(&p);
	p.V = BV;
	p.H = BH;
	p.seed = BSEED;
	if (tw->race && t->rank == 1) {
		p.test_hook = race_hook;
		p.test_arg = tw;
	}
	ret = toy_cpu_create(t->w, &p, &t->b);
	if (ret)
		T_FAIL(t, ret);
	if (tw->use_sched) {
		ret = rk_sched_create(t->w, &sc, &toy_cpu_ops, t->b, &t->sched);
		if (ret)
			T_FAIL(t, ret);
	}
	ret = rk_world_wait_ready(t->w);
	if (ret)
		T_FAIL(t, ret);
	if (t->rank == 0) {
		ret = tw->use_sched ? leader_sched(t, deadline) : leader_rounds(t, deadline);
		if (ret)
			T_FAIL(t, ret);
		if (!RUN_UNTIL(t, deadline, !toy_cpu_busy(t->b)))
			T_FAIL(t, -ETIMEDOUT);
		t->streams_left = toy_cpu_streams(t->b);
		if (tw->size > 1) {
			ret = rk_wire_encode_user(quit, sizeof(quit), TAG_QUIT, NULL, 0);
			ret = rk_world_broadcast(t->w, RK_FRAME_USER, 0, quit, (uint32_t)ret);
			if (ret)
				T_FAIL(t, ret);
			/* each follower leaves with BYE */
			if (!RUN_UNTIL(t, deadline, t->peer_errs == tw->size - 1))
				T_FAIL(t, -ETIMEDOUT);
		}
	} else {
		if (!RUN_UNTIL(t, deadline, t->quit))
			T_FAIL(t, -ETIMEDOUT);
		rk_link_stats(rk_world_link(t->w, 0), &t->link, sizeof(t->link));
		rk_loop_stats(t->loop, &t->lstats, sizeof(t->lstats));
		t->on_shm = !strcmp(rk_link_transport(rk_world_link(t->w, 0)), "shm");
	}
out:
	if (t->b) {
		RUN_UNTIL(t, rk_test_deadline_ms(5000), !toy_cpu_busy(t->b));
		toy_cpu_stats(t->b, &t->stats);
		ret = toy_cpu_destroy(t->b);
		if (ret && !t->line) {
			t->line = __LINE__;
			t->err = ret;
		}
	}
	if (t->sched) {
		rk_sched_stats(t->sched, &t->sstats, sizeof(t->sstats));
		rk_sched_destroy(t->sched);
	}
	if (t->w)
		rk_world_destroy(t->w);
	if (t->loop && rk_loop_destroy(t->loop) && !t->line)
		t->line = __LINE__;
	return NULL;
}

static void run_world_ex(int size, bool use_sched, enum rk_resident_mode resident, int tcp_rank,
			 bool race)
{
	static const struct {
		uint32_t prompt[8], n_prompt, n_gen;
		struct toy_sampling s;
	} cfg[NSTREAM] = {
		{ { 1, 2, 3, 4, 5, 6 }, 6, 20, { 0 } },
		{ { 200, 100, 50 }, 3, 25, { 40, 0.9f, 0.9f, 99 } },
		{ { 42 }, 1, 12, { 5, 1.5f, 1.0f, 7 } },
	};
	struct tworld *tw = calloc(1, sizeof(*tw));
	pthread_t th[4];
	int r, i;

	tw->size = size;
	tw->use_sched = use_sched;
	tw->resident = resident;
	tw->tcp_rank = tcp_rank;
	tw->race = race;
	atomic_init(&tw->race_round, 0);
	atomic_init(&tw->race_loop, 0);
	atomic_init(&tw->race_past, false);
	atomic_init(&tw->race_timeout, false);
	atomic_init(&tw->port, 0);
	tw->oracle = (struct toy_oracle){ .p = TOY_ORACLE_DEF_P, .seed = BSEED, .V = BV };
	for (i = 0; i < NSTREAM; i++) {
		struct tstream *s = &tw->s[i];

		s->id = 1000 + (uint64_t)i;
		memcpy(s->prompt, cfg[i].prompt, sizeof(s->prompt));
		s->n_prompt = cfg[i].n_prompt;
		s->n_gen = cfg[i].n_gen;
		s->s = cfg[i].s;
		memcpy(s->hist, s->prompt, s->n_prompt * 4);
		s->hist_len = s->n_prompt;
		ck_assert_int_eq(toy_generate_ref(BV, BH, BSEED, s->prompt, s->n_prompt, s->n_gen,
						  &s->s, s->ref), 0);
	}
	for (r = 0; r < size; r++) {
		tw->r[r].tw = tw;
		tw->r[r].rank = r;
		ck_assert_int_eq(pthread_create(&th[r], NULL, rank_thread, &tw->r[r]), 0);
	}
	for (r = 0; r < size; r++)
		ck_assert_int_eq(pthread_join(th[r], NULL), 0);
	for (r = 0; r < size; r++) {
		struct trank *t = &tw->r[r];

		ck_assert_msg(!t->line, "rank %d failed at line %d: %s", r, t->line,
			      rk_errname(t->err));
		ck_assert_msg(!t->frame_err, "rank %d: frame error %s", r,
			      rk_errname(t->frame_err));
		/*
		 * The application's frame callback gets only its own frames (QUIT):
		 * with a scheduler, the ROUNDs, ROUND_DONEs and partials go to it, as
		 * the link decoded them: a follower's scheduler decodes no ROUND, the
		 * leader's each one it launches (one decode per ROUND per rank).
		 */
		ck_assert_uint_eq(t->offered[RK_FRAME_USER] - t->offered_toy, r ? 1 : 0);
		if (use_sched) {
			ck_assert_uint_eq(t->offered[RK_FRAME_ROUND], 0);
			ck_assert_uint_eq(t->offered[RK_FRAME_ROUND_DONE], 0);
			ck_assert_uint_eq(t->offered_toy, 0);
			ck_assert_uint_eq(t->sstats.round_decodes, r ? 0 : t->sstats.rounds);
		}
		ck_assert_uint_gt(t->stats.rounds, 0);
		if (r)
			ck_assert_uint_eq(t->stats.rounds, tw->r[0].stats.rounds);
		/* which path ran: every round took exactly one */
		ck_assert_uint_eq(t->stats.posted + t->stats.resident, t->stats.rounds);
		ck_assert_uint_le(t->stats.resident_sleeps, t->stats.resident);
		ck_assert_uint_eq(t->stats.resident_fallbacks, 0);
		ck_assert_uint_eq(t->sstats.resident_fallbacks, 0);
		if (!use_sched || resident != RK_RESIDENT_ON) {
			/* no scheduler (no region), or auto/off: the launch path only */
			ck_assert_uint_eq(t->stats.resident, 0);
			ck_assert_uint_eq(t->stats.resident_mismatch, 0);
			/* auto publishes (cheap, nobody waits); off does not; a
			 * follower on the leader's shared region leaves it to the
			 * leader (counted as shared_rounds) */
			ck_assert_uint_eq(t->sstats.published + (r ? t->sstats.shared_rounds : 0),
					  use_sched && resident == RK_RESIDENT_AUTO ?
						  t->sstats.rounds : 0);
		} else {
			/* the first round is launched (nothing was armed before it);
			 * the others are taken from the region unless their shape grew */
			ck_assert_uint_eq(t->sstats.published + (r ? t->sstats.shared_rounds : 0),
					  t->sstats.rounds);
			ck_assert_uint_ge(t->stats.posted, 1);
			ck_assert_uint_eq(t->stats.posted, 1 + t->stats.resident_mismatch);
			ck_assert_uint_gt(t->stats.resident, 0);
			/* whether the worker slept for a round depends on who ran first
			 * (under load every epoch can be out before it looks): only the
			 * bound above, sleeps <= resident rounds, is behaviour */
		}
		/*
		 * Same-host followers whose broadcasts came on the ring were sent the
		 * leader's epoch region: with a scheduler and RK_RESIDENT not off they
		 * take every round from it and publish none; one on TCP (a mixed
		 * world) publishes its own, as does every rank with RK_RESIDENT=off.
		 */
		if (r && use_sched && resident != RK_RESIDENT_OFF && t->link.shm_bcast_frames) {
			ck_assert_uint_eq(t->sstats.shared_rounds, t->sstats.rounds);
			ck_assert_uint_eq(t->sstats.published, 0);
			ck_assert_uint_eq(tw->r[0].sstats.shared_rounds, tw->r[0].sstats.rounds);
		} else if (r) {
			ck_assert_uint_eq(t->sstats.shared_rounds, 0);
			ck_assert_uint_eq(t->stats.resident_early, 0);
		}
		if (r && r == tcp_rank)
			ck_assert_uint_eq(t->link.shm_bcast_frames, 0);
		/*
		 * Who sent the partials: on shared memory the worker, on the lane,
		 * every round once it opened (with a scheduler, the leader settles
		 * the links before its first ROUND: every round); on TCP the loop.
		 * The leader's count of partials received (below) takes both ways.
		 */
		if (r && t->on_shm && use_sched)
			ck_assert_uint_eq(t->stats.lane_sent, t->stats.rounds);
		else if (r && t->on_shm)
			ck_assert_uint_le(t->stats.lane_sent, t->stats.rounds);
		else
			ck_assert_uint_eq(t->stats.lane_sent, 0);
		ck_assert_uint_eq(t->stats.lane_refused, 0);
		/*
		 * A round the worker takes from the region and shares on the lane
		 * runs without the follower's loop (RK_LAUNCH_OFF_LOOP): its ROUND
		 * and its report are not busy work, so such a loop's busy events
		 * come only from the posted rounds (their ROUND and report), QUIT
		 * and the first round before the lane opened.
		 */
		ck_assert_uint_eq(t->sstats.off_loop_rounds,
				  r && t->on_shm && use_sched ? t->stats.resident : 0);
		if (r && t->on_shm && use_sched)
			ck_assert_msg(t->lstats.busy_events <=
					      2 * (t->sstats.rounds - t->sstats.off_loop_rounds) + 2,
				      "rank %d: %llu busy events in %llu rounds, %llu off the loop",
				      r, (unsigned long long)t->lstats.busy_events,
				      (unsigned long long)t->sstats.rounds,
				      (unsigned long long)t->sstats.off_loop_rounds);
		/* a follower sends its partial logits each round, and nothing for a
		 * round that succeeded (no ROUND_DONE): HELLO, the same-host upgrade's
		 * SHM_REQUEST and SHM_ANSWER, and heartbeats aside */
		if (r && use_sched)
			ck_assert_msg(t->link.tx_frames - t->link.heartbeats_tx <= t->stats.rounds + 3,
				      "rank %d sent %llu frames (%llu heartbeats) in %llu rounds", r,
				      (unsigned long long)t->link.tx_frames,
				      (unsigned long long)t->link.heartbeats_tx,
				      (unsigned long long)t->stats.rounds);
	}
	if (race) {
		/* the window was held open as meant: the loop looked at took, then
		 * at a region already past the round the worker ran */
		ck_assert_uint_gt(atomic_load(&tw->race_round), 0);
		ck_assert(!atomic_load(&tw->race_timeout));
		ck_assert(atomic_load(&tw->race_past));
	}
	ck_assert_uint_eq(tw->r[0].stats.frames_rx, (uint64_t)(size - 1) * tw->r[0].stats.rounds);
	ck_assert_uint_eq(tw->r[0].stats.stale, 0);
	for (i = 0; i < NSTREAM; i++) {
		struct tstream *s = &tw->s[i];

		if (use_sched) {
			ck_assert_int_eq(s->n_done, 1);
			ck_assert_int_eq(s->done_err, 0);
			ck_assert_uint_eq(s->n_got, s->n_gen);
			ck_assert_mem_eq(s->got, s->ref, s->n_gen * 4);
		} else {
			ck_assert_uint_eq(s->generated, s->n_gen);
			ck_assert_mem_eq(s->hist + s->n_prompt, s->ref, s->n_gen * 4);
		}
	}
	if (use_sched) {
		/*
		 * Drafted from the oracle, right and wrong, and the outputs above
		 * still equal the plain reference; what the scheduler accepted is
		 * what the oracle got right, at most.
		 */
		ck_assert_uint_gt(tw->oracle.right, 0);
		ck_assert_uint_lt(tw->oracle.right, tw->oracle.proposed);
		ck_assert_uint_eq(tw->r[0].sstats.drafted, tw->oracle.proposed);
		ck_assert_uint_gt(tw->r[0].sstats.accepted, 0);
		ck_assert_uint_le(tw->r[0].sstats.accepted, tw->oracle.right);
	}
	if (!use_sched) {
		/* every drafted stream needed fewer rounds than tokens */
		ck_assert_uint_lt(tw->r[0].rounds, 25);
		/* retired by retire() or, at the next round, by absence */
		ck_assert_uint_eq(tw->r[0].streams_left, tw->r[0].expect_left);
	} else {
		ck_assert_uint_eq(tw->r[0].streams_left, 0);
	}
	free(tw);
}

static void run_world_mode(int size, bool use_sched, enum rk_resident_mode resident)
{
	run_world_ex(size, use_sched, resident, 0, false);
}

static void run_world(int size, bool use_sched)
{
	run_world_mode(size, use_sched, RK_RESIDENT_AUTO);
}

START_TEST(test_backend_rounds)
{
	run_world(1 << _i, false);
}
END_TEST

START_TEST(test_backend_sched)
{
	run_world(1 << _i, true);
}
END_TEST

/*
 * On and off are what they say whatever the world and the machine; auto is
 * toy.c's rule (where it is on is not asserted here, so that changing the
 * rule stays a one-line change), but never true without CPUs to spare (two
 * per rank of the mask, and a policy that may spin), nor at TP1.
 */
START_TEST(test_resident_auto)
{
	static const enum rk_wait_mode waits[] = { RK_WAIT_SPIN, RK_WAIT_ADAPTIVE, RK_WAIT_BLOCK };
	cpu_set_t set;
	uint32_t n, size;
	unsigned int i;

	ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
	n = (uint32_t)CPU_COUNT(&set);
	for (i = 0; i < 3; i++) {
		for (size = 1; size <= n + 1; size++) {
			enum rk_wait_mode wt = waits[i];

			ck_assert(toy_resident_on(RK_RESIDENT_ON, size, wt));
			ck_assert(!toy_resident_on(RK_RESIDENT_OFF, size, wt));
			ck_assert(toy_cpus_spare(size, wt) == (wt != RK_WAIT_BLOCK && n >= 2 * size));
			if (size == 1 || !toy_cpus_spare(size, wt))
				ck_assert(!toy_resident_on(RK_RESIDENT_AUTO, size, wt));
		}
	}
}
END_TEST

/* The same tokens with resident rounds forced on and off, TP1, TP2, TP4. */
START_TEST(test_backend_resident)
{
	run_world_mode(1 << (_i / 2), true, _i % 2 ? RK_RESIDENT_OFF : RK_RESIDENT_ON);
}
END_TEST

/* A mixed world: TP4, follower 3 on TCP with its own region, 1 and 2 on the
 * leader's; the same tokens. */
START_TEST(test_backend_resident_mixed)
{
	run_world_ex(4, true, _i ? RK_RESIDENT_AUTO : RK_RESIDENT_ON, 3, false);
}
END_TEST

/*
 * TP2 on shared memory: follower 1's loop reads took (false), the worker
 * takes and runs the round and its share completes it, and only then does
 * the loop read the region, a later round's by now. The round is the
 * worker's: it runs once, and the tokens are the reference's.
 */
START_TEST(test_backend_resident_took_race)
{
	run_world_ex(2, true, RK_RESIDENT_ON, 0, true);
}
END_TEST

/*
 * A round larger than the pre-armed shape: the armed worker hands it to the
 * launch path, counted once, and the next rounds are resident again.
 */
#define MM_LONG		100	/* prompt tokens: more than the armed ARM_TOKENS */

struct mm_req {
	struct rk_request req;
	uint32_t prompt[MM_LONG], n_prompt, n_gen;
	uint32_t ref[GEN_MAX], got[GEN_MAX], n_got;
	bool done;
	int err;
};

struct mm {
	struct rk_sched *s;
	struct mm_req a, b;
	bool b_in;
	int submit_err;
};

static void mm_cb(struct rk_request *req, const uint32_t *tokens, uint32_t n, bool done, int err)
{
	struct mm *m = req->data;
	struct mm_req *r = req == &m->a.req ? &m->a : &m->b;

	if (n && r->n_got + n <= GEN_MAX) {
		memcpy(r->got + r->n_got, tokens, n * 4);
		r->n_got += n;
	}
	if (done) {
		r->done = true;
		r->err = err;
	}
	/* the long prompt joins a steady decode batch */
	if (r == &m->a && r->n_got >= 5 && !m->b_in) {
		m->b_in = true;
		m->submit_err = rk_sched_submit(m->s, &m->b.req);
	}
}

static void mm_init(struct mm *m, struct mm_req *r, uint32_t n_prompt, uint32_t n_gen,
		    uint32_t salt)
{
	struct toy_sampling greedy = { 0 };
	uint32_t i;

	r->n_prompt = n_prompt;
	r->n_gen = n_gen;
	for (i = 0; i < n_prompt; i++)
		r->prompt[i] = (i * 7 + salt) % BV;
	ck_assert_int_eq(toy_generate_ref(BV, BH, BSEED, r->prompt, n_prompt, n_gen, &greedy,
					  r->ref), 0);
	rk_request_init(&r->req);
	r->req.prompt = r->prompt;
	r->req.prompt_len = n_prompt;
	r->req.max_tokens = n_gen;
	r->req.draft_k = 0;
	r->req.cb = mm_cb;
	r->req.data = m;
}

START_TEST(test_backend_resident_mismatch)
{
	struct tworld *tw = calloc(1, sizeof(*tw));
	struct trank *t = &tw->r[0];
	struct rk_sched_config sc = { .max_batch = 8, .resident = RK_RESIDENT_ON };
	struct mm *m = calloc(1, sizeof(*m));
	uint64_t deadline = rk_test_deadline_ms(30000);
	struct toy_params p;

	tw->size = 1;
	tw->resident = RK_RESIDENT_ON;
	t->tw = tw;
	ck_assert_int_eq(node_create(t, deadline), 0);
	ck_assert_int_eq(rk_world_wait_ready(t->w), 0);
	toy_params_init(&p);
	p.V = BV;
	p.H = BH;
	p.seed = BSEED;
	ck_assert_int_eq(toy_cpu_create(t->w, &p, &t->b), 0);
	ck_assert_int_eq(rk_sched_create(t->w, &sc, &toy_cpu_ops, t->b, &t->sched), 0);
	ck_assert_ptr_nonnull(rk_sched_epoch(t->sched));
	m->s = t->sched;
	mm_init(m, &m->a, 4, 30, 1);
	mm_init(m, &m->b, MM_LONG, 10, 3);
	ck_assert_int_eq(rk_sched_submit(t->sched, &m->a.req), 0);
	ck_assert(RUN_UNTIL(t, deadline, m->a.done && m->b.done));
	ck_assert(RUN_UNTIL(t, deadline, !toy_cpu_busy(t->b)));
	ck_assert_int_eq(m->submit_err, 0);
	ck_assert_int_eq(m->a.err, 0);
	ck_assert_int_eq(m->b.err, 0);
	ck_assert_uint_eq(m->a.n_got, m->a.n_gen);
	ck_assert_uint_eq(m->b.n_got, m->b.n_gen);
	ck_assert_mem_eq(m->a.got, m->a.ref, m->a.n_gen * 4);
	ck_assert_mem_eq(m->b.got, m->b.ref, m->b.n_gen * 4);
	toy_cpu_stats(t->b, &t->stats);
	rk_sched_stats(t->sched, &t->sstats, sizeof(t->sstats));
	/* round 1 (nothing armed) and the round that brought the long prompt */
	ck_assert_uint_eq(t->stats.resident_mismatch, 1);
	ck_assert_uint_eq(t->stats.posted, 2);
	ck_assert_uint_eq(t->stats.resident, t->stats.rounds - 2);
	ck_assert_uint_eq(t->sstats.published, t->sstats.rounds);
	ck_assert_uint_eq(t->stats.rounds, t->sstats.rounds);
	ck_assert_int_eq(rk_sched_destroy(t->sched), 0);
	ck_assert_int_eq(toy_cpu_destroy(t->b), 0);
	ck_assert_int_eq(rk_world_destroy(t->w), 0);
	ck_assert_int_eq(rk_loop_destroy(t->loop), 0);
	free(m);
	free(tw);
}
END_TEST

/* Errors a world of one can show: a bad launch, a round that fails on the worker. */
START_TEST(test_backend_errors)
{
	struct tworld *tw = calloc(1, sizeof(*tw));
	struct trank *t = &tw->r[0];
	struct toy_params p;
	/* an unknown stream at position 3 */
	struct rk_wire_stream st = { .stream_id = 7, .position = 3, .n_tokens = 1 };
	uint32_t tok[2] = { 1, 2 }, x;
	uint8_t buf[256];
	struct rk_wire_round view;
	struct rk_wire_user msg;
	uint8_t user[8 + 16];
	int n;
	uint64_t deadline = rk_test_deadline_ms(10000);
	int64_t len;

	tw->size = 1;
	t->tw = tw;
	ck_assert_int_eq(node_create(t, deadline), 0);
	ck_assert_int_eq(rk_world_wait_ready(t->w), 0);
	toy_params_init(&p);
	p.H = 100;
	p.V = 32;
	ck_assert_int_eq(toy_cpu_create(NULL, &p, &t->b), -EINVAL);
	p.V = 0;
	ck_assert_int_eq(toy_cpu_create(t->w, &p, &t->b), -EINVAL);
	p.V = 32;
	ck_assert_int_eq(toy_cpu_create(t->w, &p, &t->b), 0);
	ck_assert_uint_eq(toy_cpu_model(t->b)->H, 100);

	/* a token outside the vocabulary: refused by launch itself */
	tok[0] = 32;
	st.position = 0;
	len = rk_wire_encode_round(buf, sizeof(buf), 1, &st, 1, tok);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	ck_assert_int_eq(toy_cpu_ops.launch(t->b, NULL, &view, 0), -EINVAL);
	ck_assert(!toy_cpu_busy(t->b));

	/* a position this rank never saw: the round completes with -EPROTO */
	tok[0] = 1;
	st.position = 3;
	len = rk_wire_encode_round(buf, sizeof(buf), 2, &st, 1, tok);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	mark_reports(t);
	ck_assert_int_eq(toy_cpu_ops.launch(t->b, NULL, &view, 0), 0);
	ck_assert(toy_cpu_busy(t->b));
	ck_assert_int_eq(toy_cpu_destroy(t->b), -EBUSY);	/* in flight: nothing freed */
	ck_assert(RUN_UNTIL(t, deadline, reported(t)));
	ck_assert_uint_eq(t->done_id, 2);
	ck_assert_int_eq(t->done_status, -EPROTO);
	ck_assert_int_eq(toy_cpu_ops.token(t->b, 0, 0, &x), -EAGAIN);

	/* then a good round, and retire() of a stream in it while it runs */
	st.position = 0;
	len = rk_wire_encode_round(buf, sizeof(buf), 3, &st, 1, tok);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	mark_reports(t);
	ck_assert_int_eq(toy_cpu_ops.launch(t->b, NULL, &view, 0), 0);
	toy_cpu_ops.retire(t->b, 7);		/* deferred until the worker is done */
	ck_assert(RUN_UNTIL(t, deadline, reported(t)));
	ck_assert_int_eq(t->done_status, 0);
	ck_assert_uint_eq(toy_cpu_streams(t->b), 0);
	ck_assert_int_eq(toy_cpu_ops.token(t->b, 0, 0, &x), 0);
	ck_assert_uint_lt(x, 32);

	/* messages: not ours, and ours where they cannot be (no followers in a world
	 * of 1); a frame of another type never reaches .frame (the world's claims) */
	n = rk_wire_encode_user(user, sizeof(user), 0x1234, NULL, 0);
	ck_assert_int_eq(rk_wire_decode_user(user, (size_t)n, &msg), 0);
	ck_assert_int_eq(toy_cpu_ops.frame(t->b, 1, &msg), -ENOENT);
	n = rk_wire_encode_user(user, sizeof(user), TOY_TAG, buf, 16);
	ck_assert_int_eq(rk_wire_decode_user(user, (size_t)n, &msg), 0);
	ck_assert_int_eq(toy_cpu_ops.frame(t->b, 1, &msg), -EPROTO);

	ck_assert_int_eq(toy_cpu_destroy(t->b), 0);
	ck_assert_int_eq(rk_world_destroy(t->w), 0);
	ck_assert_int_eq(rk_loop_destroy(t->loop), 0);
	free(tw);
}
END_TEST

static Suite *toy_world_suite(void)
{
	Suite *s = suite_create("toy");
	TCase *tc;

	tc = rk_tcase(s, "backend", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_backend_rounds, 0, 3);
	tcase_add_loop_test(tc, test_backend_sched, 0, 3);
	tcase_add_loop_test(tc, test_backend_resident, 0, 6);
	tcase_add_loop_test(tc, test_backend_resident_mixed, 0, 2);
	tcase_add_test(tc, test_backend_resident_took_race);
	tcase_add_test(tc, test_resident_auto);
	tcase_add_test(tc, test_backend_resident_mismatch);
	tcase_add_test(tc, test_backend_errors);
	return s;
}

int main(void)
{
	/* followers leaving with BYE are logged as warnings; CHECK_TOY_VERBOSE=1 shows them */
	rk_log_set_handler(log_quiet, "CHECK_TOY_VERBOSE");
	return rk_check_run(toy_world_suite());
}
