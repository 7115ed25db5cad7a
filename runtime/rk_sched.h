/* SPDX-License-Identifier: MIT */
/*
 * rankrt decode-round scheduling.
 *
 * The leader admits requests (streams) into a running batch between rounds
 * (continuous batching, first come first served, up to max_batch), forms one
 * ROUND per step, broadcasts it, launches its own share through the backend,
 * and when the backend reports the round complete, asks the backend for the
 * model's token at each output, verifies drafted tokens (the longest agreeing
 * prefix is accepted, plus the model's next token), hands each stream's new
 * tokens to its request and retires finished streams. Followers launch every
 * ROUND they receive at once. Nothing here blocks: completions arrive as loop
 * events.
 *
 * Frames. From rk_sched_create() until rk_sched_destroy() the world hands the
 * scheduler its own frames (ROUND, ROUND_DONE, ROUND_WATCH, and the USER frames of its
 * backend's tags, rk_backend_ops.frame) as the link that received them
 * decoded them, once: the world's frame callback (rk_world_ops.frame) never
 * sees them, and a ROUND is decoded once per rank.
 *
 * Stream rules (the contract between leader and followers, see ARCHITECTURE.md):
 * - A stream in the running batch appears in every ROUND until it finishes; a
 *   stream absent from a ROUND is retired on every rank.
 * - A stream's entry carries `position` = the number of tokens already folded
 *   into the model's state on every rank, its new input tokens (the prompt
 *   on the first round; afterwards the tokens accepted in the last round), and
 *   drafted tokens to verify. The model's outputs for a stream are the
 *   predictions after its last input and after each draft: n_draft + 1 tokens.
 *
 * All functions: loop thread, unless stated otherwise.
 *
 * Errors belong to the request that caused them. rk_sched_submit() checks
 * every field of a request and refuses a bad one alone, naming the field in
 * rk_request.err_field. A request that still turns out bad in a round (a field
 * changed after submit, no memory for its history, the backend's token()
 * failing for its stream) fails alone, with its id in the log line; the round
 * and every other request go on. Only a failure of the whole round (a
 * broadcast, launch() or a rank's share failing, or not finishing within the
 * round bound: the round watchdog below) fails the requests in that round;
 * queued requests go on with the next.
 *
 * Callbacks and re-entrancy. The scheduler calls out to the backend (launch,
 * token, retire), to requests (rk_request_cb), to the drafter and to the
 * tracer, always on the loop thread and never before the call that caused it
 * returns to the loop: a request's callback never runs inside the
 * rk_sched_submit() that queued it, and a completion reported from inside
 * launch() is handled from the loop after launch() returns (on the leader: a
 * zero-delay timer), so a backend that completes at once never recurses and
 * the stack stays bounded at any length. What may be called from where:
 * - request callback: rk_sched_submit(), rk_sched_cancel() (of any request,
 *   itself included), rk_sched_stop(), rk_sched_idle/busy/stats(), and the
 *   world's and loop's calls a loop callback may make (rk_runtime.h);
 * - launch(): rk_sched_complete() (for this round too),
 *   rk_sched_round_progress(), and what a request callback may call;
 * - the timeout callback (rk_sched_set_timeout_cb()): what a request callback
 *   may call;
 * - frame(): the same as launch();
 * - token(), retire(), the drafter, the tracer: rk_sched_idle/busy/stats()
 *   only;
 * - rk_sched_destroy() from inside any of these returns -EBUSY and does nothing.
 *
 * Lifetimes and the teardown order (libuv's handle rules are the model: after
 * a close nothing calls into the closed object, and its memory goes when the
 * last request it started is done). A scheduler holds its world and calls
 * its backend; the backend holds the scheduler a round was launched through
 * until it reports that round. So:
 *   1. rk_sched_stop(s): every request fails with -RK_ESTOPPED; from here on
 *      the scheduler calls its backend no more (no launch, token or retire;
 *      frame only while it holds a round) and forms no ROUND; a follower answers each ROUND with a ROUND_DONE
 *      carrying -RK_ESTOPPED. Optional: 3 does it.
 *   2. Optional: run the loop until !rk_sched_busy(s), the backend having
 *      reported every round it holds (a report after the stop only counts;
 *      its messages, rk_backend_ops.frame, still come until then).
 *   3. rk_sched_destroy(s): nothing of the scheduler runs after it; if the
 *      backend still holds a round, the scheduler's memory goes with that
 *      report, which the backend may still make (and nothing else on @s).
 *      A backend whose report waits for its peers' messages gets none after
 *      this: run step 2 first.
 *   4. The backend's own teardown, which says -EBUSY while it holds a round
 *      (toy_cpu_destroy()): run the loop until it is idle. A backend that can
 *      no longer finish a round (a peer died) fails it first (toy_cpu_abort()).
 *   5. rk_world_destroy(w): -EBUSY while any scheduler built on @w exists, so
 *      3 comes first; it delivers no frame, post or timer.
 *   6. rk_loop_destroy(), after one more rk_loop_run(RK_RUN_NOWAIT) if the
 *      backend left posts behind (a GPU notifier's last host functions).
 * 4 may come before 3 once the backend holds no round: rk_sched_destroy()
 * calls no backend op, and after step 1 nothing else does either; without
 * step 1, do not run the loop between the two (a follower would launch the
 * next ROUND into the freed backend).
 */
#ifndef RK_SCHED_H
#define RK_SCHED_H

#include "rk_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct rk_sched;
struct rk_request;

/*
 * What an embedding server implements (the backend). Every rank has one.
 */
struct rk_backend_ops {
	/*
	 * Launch this rank's share of @round for the scheduler @s. Must not
	 * block: enqueue GPU work, or hand CPU work to a worker. Report the
	 * round's completion on this rank exactly once, with
	 * rk_sched_complete(@s, @round->round_id, status) on the loop thread:
	 * from a post sent by the worker, a CUDA host function, or from inside
	 * this call (handled after it returns, never recursively). On the leader,
	 * completion means the outputs can be read with token(). @round is valid
	 * only during the call; @s until the report.
	 * Return: 0, RK_LAUNCH_OFF_LOOP (below), or -errno: the round fails on
	 * every rank, and it must then not be reported. A leader's backend that
	 * finds one stream bad runs the others and fails that stream through
	 * token(); a follower cannot fail one stream alone (its report is the
	 * rank's share as a whole).
	 */
	int (*launch)(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		      unsigned int flags);
	/*
	 * Leader, between completion and the next launch: the model's token at
	 * output @j (0..n_draft) of stream @i (index in the round), greedy or
	 * sampled per the stream's parameters. Return: 0 or -errno; an error
	 * fails stream @i's request alone, with that error (its stream is
	 * retired), and the rest of the round goes on.
	 */
	int (*token)(void *ctx, uint32_t i, uint32_t j, uint32_t *tok);
	/*
	 * Every rank: stream @stream_id ended; drop its state. It may name a
	 * stream this rank never saw (a request that failed before its first
	 * round): ignore it then. May be NULL.
	 */
	void (*retire)(void *ctx, uint64_t stream_id);
	/* RK_BACKEND_* bits (0: none) */
	unsigned int flags;
	/*
	 * Optional: the backend's own messages between ranks (a follower's
	 * partial results for the leader, say), sent as USER frames tagged
	 * @user_tag .. @user_tag + @user_tags - 1 (rk_world_send_user(),
	 * rk_link_reserve(), a lane). On every rank the world hands them to the
	 * scheduler, never to the application's frame callback, and the
	 * scheduler to this, with @msg as the receiving link decoded it (its
	 * data valid during the call), from rank @peer; from rk_sched_create()
	 * until rk_sched_destroy(), and after rk_sched_stop() while the
	 * backend holds a round (rk_sched_busy(): it may wait for them; later
	 * ones are dropped). It may report rounds with rk_sched_complete().
	 * Return: RK_BUSY or RK_IDLE, as a world frame callback would; -errno
	 * when the message is malformed or unexpected: the backend fails what
	 * waited for it, the scheduler logs it. NULL with @user_tags 0: no
	 * USER frame is the backend's.
	 */
	int (*frame)(void *ctx, int peer, const struct rk_wire_user *msg);
	uint32_t user_tag;
	uint32_t user_tags;
	/*
	 * Optional, leader: the round watchdog's question when round @round_id
	 * ran past the leader's bound and no follower reported its own share
	 * late (its loop may be blocked, or it is not what it claims): which
	 * rank's part does this rank's share still wait for? Return that rank
	 * (the lowest, if several; 0 for the leader's own part), or -1 when the
	 * backend cannot tell (a reduction inside a GPU library). NULL: -1.
	 * Called on the loop thread; it must not report rounds.
	 */
	int (*waiting_for)(void *ctx, uint64_t round_id);
};

/*
 * The backend's consumers may take rounds from the leader's shared epoch
 * region (same-host links, "Round epochs" below), which can carry round N
 * before this rank's launch(N): launch(N) must then find a round its
 * consumer already ran (and not run it again), and the backend takes
 * rk_sched_epoch() no earlier than its first launch(). Without the flag a
 * follower keeps a region of its own, published as its loop receives each
 * ROUND (what a GPU consumer registered at creation needs). Implies
 * RK_BACKEND_RESIDENT.
 */
#define RK_BACKEND_SHARED_EPOCH	0x1u

/*
 * The backend has resident consumers: something of its own (a worker thread,
 * a GPU stream pre-armed with a wait) may take a round from rk_sched_epoch()'s
 * region instead of being launched. Only for such a backend does the
 * scheduler keep a region and publish its rounds, as RK_RESIDENT chooses
 * (rk_sched_config.resident); for any other, whatever RK_RESIDENT says, it
 * makes no region, publishes nothing and rk_sched_epoch() is NULL.
 */
#define RK_BACKEND_RESIDENT	0x2u

/*
 * A follower's launch() may return this instead of 0: the round runs without
 * this rank's loop (a resident consumer took it from the shared epoch region
 * and sends the rank's share itself, e.g. on a lane, rk_link_lane_open(3)),
 * so the loop need not stay awake for it: its ROUND is not busy work (no
 * spin window restarts for it, and the link's learned arrival gaps, which
 * predict the next ROUND, leave it out; rk_sched_stats.off_loop_rounds). The
 * backend's own completion post should then report RK_IDLE too. The round is
 * still reported with rk_sched_complete() as any other. On the leader it
 * means 0.
 */
#define RK_LAUNCH_OFF_LOOP	1

struct rk_request;

/*
 * A drafter proposes up to @k tokens to follow @hist (the @n tokens of request
 * @req so far: prompt and generated), so it can keep state per request (its
 * data, id, seed). Called on the leader's loop thread while the scheduler
 * builds a round; it must not call the scheduler. Return: how many it wrote
 * to @out (0..k).
 */
typedef uint32_t (*rk_draft_fn)(void *arg, const struct rk_request *req, const uint32_t *hist,
				size_t n, uint32_t *out, uint32_t k);

/**
 * rk_ngram_draft() - prompt-lookup drafting: find the most recent earlier
 * occurrence of the longest suffix of @hist (3 tokens, then 2, then 1) and
 * propose the up to @k tokens that followed it. Pure; any thread. @arg and
 * @req unused (@req may be NULL).
 */
RK_EXPORT uint32_t rk_ngram_draft(void *arg, const struct rk_request *req, const uint32_t *hist,
				  size_t n, uint32_t *out, uint32_t k);

#define RK_SCHED_MAX_DRAFT 16

/* Round events reported to rk_sched_config.trace. */
enum rk_sched_event {
	RK_SCHED_EV_SENT,	/* leader: the ROUND goes to the links now (stamped just
				 * before its broadcast, which a same-host ring
				 * delivers at once; TCP's send follows at once) */
	RK_SCHED_EV_LAUNCH,	/* any rank: the backend's launch() is about to run */
	RK_SCHED_EV_DONE,	/* any rank: rk_sched_complete() for the round */
};

/*
 * Round tracer: called on the loop thread with a fresh CLOCK_MONOTONIC time in
 * ns. It must be cheap (record, don't print). Comparing times across ranks
 * needs a common clock: ranks on one host, or hosts kept in step (PTP).
 */
typedef void (*rk_sched_trace_fn)(void *arg, uint64_t round_id, enum rk_sched_event ev,
				  uint64_t t_ns);

/*
 * Resident rounds (RK_RESIDENT): the scheduler publishes each round in a
 * mapped epoch region and a backend's pre-armed consumer takes it from there
 * ("Round epochs" below), instead of being launched.
 */
enum rk_resident_mode {
	RK_RESIDENT_AUTO = 0,	/* the region is published; each backend uses it where it
				 * measured better (README "Tuning (may change)") */
	RK_RESIDENT_ON = 1,	/* every backend that can uses it */
	RK_RESIDENT_OFF = 2,	/* no region: the launch path only */
};
/* Only a backend flagged RK_BACKEND_RESIDENT has resident rounds (none: off). */

/*
 * Scheduler settings. Every field's "none" or default is 0, so a zeroed config
 * is the defaults; rk_sched_config_init() writes them out all the same.
 */
struct rk_sched_config {
	uint32_t max_batch;		/* streams per round (0: 8) */
	uint32_t draft_k;		/* default drafted tokens per stream and round, 0 = plain,
					 * at most RK_SCHED_MAX_DRAFT */
	rk_draft_fn draft;		/* drafter (NULL: rk_ngram_draft when draft_k > 0) */
	void *draft_arg;
	rk_sched_trace_fn trace;	/* optional round tracer (NULL: none) */
	void *trace_arg;
	uint32_t vocab;			/* tokens are < vocab: rk_sched_submit() checks the
					 * prompt and stop_token (0: not checked) */
	/*
	 * Resident rounds, for a backend flagged RK_BACKEND_RESIDENT: on or
	 * off here decide; auto (0) takes the loop's RK_RESIDENT, a tuning
	 * knob of the environment (README "Tuning (may change)"), itself auto
	 * by default. rk_sched_resident() says what the scheduler runs.
	 */
	enum rk_resident_mode resident;
};

/** rk_sched_config_init() - the defaults (max_batch 8, plain decoding, no tracer). */
RK_EXPORT void rk_sched_config_init(struct rk_sched_config *cfg);

/* Per-scheduler counters. */
struct rk_sched_stats {
	uint64_t rounds;
	uint64_t tokens;		/* tokens emitted to requests */
	uint64_t drafted;		/* drafted tokens sent for verification */
	uint64_t accepted;		/* drafted tokens accepted */
	uint64_t streams_done;
	uint64_t ns_round_sum;		/* broadcast-to-completion time, summed */
	uint64_t published;		/* rounds published in the epoch region */
	uint64_t resident_fallbacks;	/* no region (it could not be made) or a
					 * publication refused: launch path only */
	/* gauges, leader: now */
	uint64_t queued;		/* requests waiting to join the batch */
	uint64_t running;		/* requests in the batch */
	/* added later, after the fields above (which keep their offsets) */
	uint64_t shared_rounds;		/* rounds in the same-host shared region: the
					 * leader's publications there; a follower's
					 * rounds it left to it (not published here) */
	uint64_t off_loop_rounds;	/* follower: launches that returned
					 * RK_LAUNCH_OFF_LOOP */
	uint64_t round_decodes;		/* ROUND payloads the scheduler decoded itself:
					 * the leader, each round it launches; a
					 * follower none, its link decoded each ROUND
					 * once on arrival and handed it over */
	uint64_t round_timeouts;	/* rounds failed by the round watchdog: the
					 * leader's verdicts, the ones a follower heard */
	uint64_t progress_sent;		/* follower: progress frames to the leader */
	uint64_t round_bound_ns;	/* gauge: how long this rank waits for a round
					 * now (0: no watchdog; rk_sched_round_progress) */
};

/*
 * A request: the caller's storage, owned by the scheduler from a successful
 * rk_sched_submit() until its callback reports done; the caller changes
 * nothing in it meanwhile. The callback gets new tokens (NULL when @n is 0)
 * and, exactly once at the end, done=true with @err: 0; -ECANCELED
 * (rk_sched_cancel()); -RK_ESTOPPED (rk_sched_stop(), rk_sched_destroy());
 * -EINVAL (a field turned bad after submit: err_field names it); -ENOMEM;
 * the backend's token() error for this stream; or the error of the round it
 * was in (a rank's failure, -ENOTCONN from a broken world, ...).
 */
typedef void (*rk_request_cb)(struct rk_request *req, const uint32_t *tokens, uint32_t n,
			      bool done, int err);

/*
 * Start from rk_request_init(): a zeroed request gets stop_token wrong (0 stops
 * at token 0; "none" is -1), draft_k (0 means plain decoding, not the
 * scheduler's default -1) and top_p (0; "no nucleus cut" is 1).
 */
struct rk_request {
	/* public: set before submit; rk_sched_submit() checks each */
	const uint32_t *prompt;		/* not NULL; borrowed until done; tokens < vocab */
	uint32_t prompt_len;		/* >= 1; its first ROUND entry (with RK_SCHED_MAX_DRAFT
					 * drafts) must fit the link's max_frame */
	uint32_t max_tokens;		/* tokens to generate, >= 1; prompt_len + max_tokens
					 * <= UINT32_MAX */
	int64_t stop_token;		/* -1 = none (init), else 0..UINT32_MAX, < vocab */
	uint32_t top_k;			/* 0 = greedy (init) */
	float temperature;		/* finite, >= 0 (init 0) */
	float top_p;			/* finite, 0..1 (init 1) */
	uint64_t seed;
	int32_t draft_k;		/* drafted tokens per round: -1 = the scheduler's
					 * default (init), 0 = plain, up to RK_SCHED_MAX_DRAFT */
	rk_request_cb cb;		/* not NULL */
	void *data;
	/* read-only */
	uint64_t id;			/* stream id, assigned at submit */
	uint32_t generated;
	const char *err_field;		/* the field a refusal or a failure names
					 * ("temperature"), NULL when none; static */
	/* private */
	uint32_t *hist;			/* prompt + generated */
	size_t hist_len, hist_cap;
	uint32_t fed;			/* tokens folded into the model state */
	uint32_t dk;			/* draft_k, the default resolved */
	uint32_t n_in, n_draft;		/* this round's inputs and drafts */
	struct rk_request *next;
	bool queued;
	bool in_batch;
	bool cancelled;
};

/** rk_request_init() - every "none": no prompt, stop_token -1, greedy, top_p 1,
 * the scheduler's draft_k, no callback. Any thread. */
RK_EXPORT void rk_request_init(struct rk_request *req);

/**
 * rk_sched_create() - a scheduler for @world's rank (leader or follower).
 * @ops/@ctx: the backend. @cfg: NULL = defaults. The world is held: it cannot
 * be destroyed before the scheduler. The leader's, on a world that is ready
 * with links that may move to shared memory (tcp://, shm:// between ranks of
 * one host), first runs the loop until every such link is on the rings or
 * has stayed on TCP (bounded by RK_CONNECT_TIMEOUT_MS; the leader's
 * rk_world_wait_ready() does the same), so the first round already goes on
 * the rings and the round-epoch region is known (rk_sched_epoch()). A
 * follower runs nothing here (a ROUND would find no scheduler yet): its link
 * is on the rings before the first ROUND it gets, so it takes the region it
 * has then, here when its link has settled, else at that ROUND; so does a
 * scheduler made before the world is ready. Loop thread, outside its
 * callbacks (inside one nothing is run and the choice waits for the first
 * round). From here the world hands the scheduler its frames (above), so
 * create it (and its backend) before a ROUND can come: before
 * rk_world_wait_ready() on a follower; a frame of its kind that comes
 * while no scheduler exists goes to the world's frame callback.
 * Return: 0 and *@out, -ENOMEM, -EINVAL (no launch, a leader without token,
 * draft_k above RK_SCHED_MAX_DRAFT, resident not one of the modes, a frame op
 * without tags or tags without one, tags past UINT32_MAX), -EBUSY (another
 * scheduler on @world, or another module takes one of the backend's tags).
 */
RK_EXPORT int rk_sched_create(struct rk_world *world, const struct rk_sched_config *cfg,
			      const struct rk_backend_ops *ops, void *ctx, struct rk_sched **out);

/**
 * rk_sched_submit() - leader: queue a request; it joins the batch between
 * rounds, from the loop (its callback never runs inside this call).
 * Every public field is checked, in order; a refusal sets @req->err_field to
 * the field's name and changes nothing else.
 * Return: 0; -EINVAL (a field out of its range above: "prompt", "prompt_len",
 * "max_tokens", "stop_token", "temperature", "top_p", "draft_k", "cb");
 * -RK_ETOOBIG ("prompt_len": its first ROUND would not fit max_frame);
 * -ENOMEM; -EPERM on a follower; -RK_ESTOPPED after rk_sched_stop().
 */
RK_EXPORT int rk_sched_submit(struct rk_sched *s, struct rk_request *req);

/**
 * rk_sched_cancel() - leader: end @req early (its client went away). A queued
 * request ends at once; a running one leaves the batch before the next round
 * (after the round in flight, whose tokens are dropped), so every rank
 * retires it. Its callback runs once more with done=true, err=-ECANCELED:
 * inside this call when no round holds @req, else when that round is done.
 * Return: 0, -ENOENT when @req is not held by this scheduler.
 */
RK_EXPORT int rk_sched_cancel(struct rk_sched *s, struct rk_request *req);

/**
 * rk_sched_complete() - the backend reports that its share of round
 * @round_id (launched through @s) finished on this rank, with @status (0 or
 * -errno), exactly once per launch() that returned 0. Leader: the round's
 * tokens are verified and emitted and the next round starts; reported from
 * inside launch(), that happens from the loop once launch() has returned, in
 * the loop's next timer step (one round per loop iteration: rk_loop_run(3)).
 * Follower: a failure goes back to the leader in a ROUND_DONE (with @status);
 * a success sends nothing. After rk_sched_stop(), or for a round that ended
 * another way (a follower's failure, the round watchdog), the report is only
 * counted.
 */
RK_EXPORT void rk_sched_complete(struct rk_sched *s, uint64_t round_id, int status);

/*
 * The round watchdog. Every rank bounds its share of each round it launches:
 * the bound is the larger of the loop's RK_ROUND_TIMEOUT_MS (a tuning knob,
 * default 10 s; 0 turns the watchdog off) and 10 times the slowest round this
 * rank finished without a progress call (rk_sched_stats.round_bound_ns). A
 * follower whose share is not reported by then tells the leader (a ROUND_DONE
 * with -RK_EROUNDTIMEOUT); the leader waits a quarter of the bound longer,
 * for those reports, and then blames the rank its backend names
 * (rk_backend_ops.waiting_for), or itself when the backend cannot tell.
 * The leader then fails that
 * round alone: its requests end with -RK_EROUNDTIMEOUT, the queued ones go on
 * with the next round, and every rank's timeout callback hears which rank was
 * slow (the leader's verdict reaches each follower in a ROUND_WATCH frame).
 * The slow rank's backend still holds the round: it reports it when it can
 * (only counted, as any report of a round that ended another way), and
 * whether the job goes on is the application's choice (rk-serve stops after
 * 3 timeouts in a row of one rank, docs/SERVE.md).
 */

/*
 * Called on every rank, on the loop thread, when round @round_id failed
 * because rank @rank did not finish its share in time: on the leader before
 * the round's requests fail, on a follower when the leader's verdict comes.
 * It may call what a request callback may (rk_sched_stop(), ...).
 */
typedef void (*rk_sched_timeout_cb)(void *arg, struct rk_sched *s, uint64_t round_id, int rank);

/**
 * rk_sched_set_timeout_cb() - hear the round watchdog's verdicts with @cb
 * (NULL: none), with @arg. Loop thread.
 */
RK_EXPORT void rk_sched_set_timeout_cb(struct rk_sched *s, rk_sched_timeout_cb cb, void *arg);

/**
 * rk_sched_round_progress() - the backend's "still working" on its share of
 * round @round_id (a long prefill): this rank's deadline for it moves to a
 * bound from now, and a follower's leader hears it too (a ROUND_WATCH frame,
 * at most four per bound), so the leader's deadline moves as well. A round
 * with a progress call does not count as the slowest round. Each rank's
 * backend calls it for its own share; one whose share waits for another
 * rank's long work (a collective) calls it too. Loop thread only: a worker
 * thread or a GPU host function posts to the loop (rk_loop_post()) and calls
 * it from there. Call it from launch() or any time before the report.
 * Return: 0 (also when the watchdog is off); -ENOENT when @round_id is not the
 * round this rank holds unreported, or it timed out already.
 */
RK_EXPORT int rk_sched_round_progress(struct rk_sched *s, uint64_t round_id);

/** rk_sched_idle() - leader: true when no request is queued or running. */
RK_EXPORT bool rk_sched_idle(const struct rk_sched *s);

/**
 * rk_sched_busy() - true while this rank's backend holds a round launched
 * through @s that it has not reported with rk_sched_complete() (after
 * rk_sched_destroy(), the scheduler's memory waits for those reports).
 */
RK_EXPORT bool rk_sched_busy(const struct rk_sched *s);

/**
 * rk_sched_stop() - fail every queued and running request with -RK_ESTOPPED
 * (their callbacks run now, or, called from inside a callback of the
 * scheduler, as soon as it returns) and refuse new ones. From here on the
 * scheduler makes no call into its backend (but frame() while the backend
 * holds a round); see the teardown order above.
 */
RK_EXPORT void rk_sched_stop(struct rk_sched *s);

/**
 * rk_sched_stats() - copy the counters and gauges into @out of @size bytes
 * (sizeof(*out)), as rk_loop_stats() does. Return: the bytes written.
 */
RK_EXPORT size_t rk_sched_stats(const struct rk_sched *s, struct rk_sched_stats *out,
				size_t size);

/**
 * rk_sched_resident() - the resident mode @s runs under: its config's
 * resident, or for auto the loop's RK_RESIDENT; RK_RESIDENT_OFF for a backend
 * not flagged RK_BACKEND_RESIDENT. Under auto or on the scheduler publishes
 * its rounds in rk_sched_epoch()'s region (when it could be made); a
 * backend's launch() reads the mode to choose: under auto by its own measured
 * rule, under on whenever it can. NULL @s gives RK_RESIDENT_OFF.
 */
RK_EXPORT enum rk_resident_mode rk_sched_resident(const struct rk_sched *s);

/**
 * rk_sched_destroy() - stop (as rk_sched_stop()), close the epoch region
 * (rk_epoch_close(): a consumer still armed for a next round is released),
 * hand the scheduler's frames back to the world's frame callback (the
 * backend's messages too: a backend that still waits for some reports
 * nothing more), release the world and free.
 * It calls no backend op; after it nothing of the scheduler runs. While the
 * backend still holds a round launched through @s (rk_sched_busy()), the
 * memory is kept until the backend reports it: rk_sched_complete() on @s
 * stays valid for that report only, and touches nothing else. Return: 0;
 * -EBUSY when called from inside one of the scheduler's callbacks (nothing
 * done). NULL is a no-op.
 */
RK_EXPORT int rk_sched_destroy(struct rk_sched *s);

/*
 * Round epochs (resident consumers).
 *
 * A scheduler whose backend has resident consumers (RK_BACKEND_RESIDENT) and
 * whose mode is on or auto (rk_sched_config.resident, else the loop's
 * RK_RESIDENT; rk_sched_resident()) publishes every round it launches into a
 * region of its own, the moment the leader has sent the ROUND or a follower
 * has received it, before launch():
 * the round id as a monotonically increasing epoch, and the ROUND payload
 * itself as the descriptor (streams, positions, inputs, drafts; decode it with
 * rk_wire_decode_round()). A consumer that is already waiting (a worker
 * thread, a GPU stream pre-armed with a wait on the epoch word) starts on the
 * store, without being launched; launch() still runs for every round, and the
 * backend decides there, from the same facts the consumer sees, whether the
 * pre-armed work takes the round or the launch path does.
 *
 * Same host (links on shared memory, a backend with RK_BACKEND_SHARED_EPOCH):
 * the region is the leader's, a sealed memfd that each same-host follower
 * maps read-only; the leader publishes each round there before it sends the
 * ROUND, and a follower's consumers start on that store, without its loop;
 * the follower publishes nothing (rk_sched_stats.shared_rounds). A follower
 * on TCP, or whose backend does not opt in, keeps a region of its own. The
 * shared region is made with the world's same-host links, before any
 * scheduler, where the loop's RK_RESIDENT is not off; every rank's backend
 * should say the same (a leader whose backend has no resident consumers
 * publishes nothing, there either).
 *
 * The region is one page-aligned anonymous mapping (mmap) with this layout,
 * little-endian, offsets in bytes (the epoch, the futex words, the seqlock
 * and the descriptor each start a cache line; nothing in it is a pointer, so
 * the same layout can live in memory that other processes map):
 *   RK_EPOCH_OFF_EPOCH       u64  the last published epoch (0: none); release-stored
 *                                 after the descriptor; the word a GPU waits on
 *   RK_EPOCH_OFF_FUTEX       u32  bumped after every publication and kick (futex word)
 *   RK_EPOCH_OFF_WAITERS     u32  consumers asleep on the futex word
 *   RK_EPOCH_OFF_KICKS       u32  rk_epoch_kick() count
 *   RK_EPOCH_OFF_SEQ         u64  the descriptor's seqlock: odd while it is written
 *   RK_EPOCH_OFF_DESC_EPOCH  u64  the epoch the descriptor belongs to
 *   RK_EPOCH_OFF_DESC_LEN    u32  its length, or RK_EPOCH_NO_DESC when the round
 *                                 was larger than the region (take the launch path)
 *   RK_EPOCH_OFF_DESC_FLAGS  u32  the ROUND's frame flags (RK_FRAME_F_*)
 *   RK_EPOCH_OFF_DESC        the ROUND payload, up to rk_epoch_desc_max() bytes
 * One writer (the scheduler's loop thread); readers on any thread.
 */
#define RK_EPOCH_OFF_EPOCH	0
#define RK_EPOCH_OFF_FUTEX	64
#define RK_EPOCH_OFF_WAITERS	68
#define RK_EPOCH_OFF_KICKS	72
#define RK_EPOCH_OFF_SEQ	128
#define RK_EPOCH_OFF_DESC_EPOCH	136
#define RK_EPOCH_OFF_DESC_LEN	144
#define RK_EPOCH_OFF_DESC_FLAGS	148
#define RK_EPOCH_OFF_DESC	192
#define RK_EPOCH_NO_DESC	0xffffffffu
/* rk_epoch_close(): every wait is met, a GPU's too (cuStreamWaitValue64's GEQ
 * compares (int64_t)(*word - want) >= 0, so the largest epoch is INT64_MAX) */
#define RK_EPOCH_CLOSED		((uint64_t)INT64_MAX)
#define RK_EPOCH_DESC_MAX	(256u << 10)	/* the scheduler's region: ROUNDs up to this */

struct rk_epoch;

/**
 * rk_epoch_create() - a zeroed region (epoch 0) for descriptors up to
 * @desc_max bytes, with one reference. Any thread.
 * Return: 0 and *@out; -EINVAL (@desc_max 0 or above RK_WIRE_MAX_PAYLOAD),
 * -ENOMEM, -errno from mmap.
 */
RK_EXPORT int rk_epoch_create(uint32_t desc_max, struct rk_epoch **out);

/** rk_epoch_hold() - one more reference (a consumer that may outlive the scheduler). */
RK_EXPORT void rk_epoch_hold(struct rk_epoch *e);

/** rk_epoch_release() - drop a reference; the last unmaps the region. NULL is a no-op. */
RK_EXPORT void rk_epoch_release(struct rk_epoch *e);

/**
 * rk_epoch_base() - the mapping (page-aligned) and its length in *@len: what
 * a GPU consumer registers (cuMemHostRegister). Valid while a reference is held.
 */
RK_EXPORT void *rk_epoch_base(const struct rk_epoch *e, size_t *len);

/** rk_epoch_desc_max() - the largest descriptor the region holds. */
RK_EXPORT uint32_t rk_epoch_desc_max(const struct rk_epoch *e);

/**
 * rk_epoch_publish() - the one writer: descriptor @desc (@len bytes, the
 * ROUND payload) and frame @flags of @epoch, then the epoch itself, with
 * release ordering; wakes consumers asleep in rk_epoch_wait() (a system call
 * only when one is). A descriptor larger than the region is not copied: the
 * epoch still moves, and readers are told to take the launch path.
 * Return: 0; -RK_ETOOBIG (published without its descriptor); -EINVAL when
 * @epoch is 0, RK_EPOCH_CLOSED or above, or not above the last one, or the
 * region is closed (nothing published).
 */
RK_EXPORT int rk_epoch_publish(struct rk_epoch *e, uint64_t epoch, uint32_t flags,
			       const void *desc, uint32_t len);

/**
 * rk_epoch_close() - end the region: the epoch becomes RK_EPOCH_CLOSED (every
 * wait, a GPU stream's included, is met; the descriptor says none), and
 * every later rk_epoch_publish() fails with -EINVAL. For a consumer's owner
 * that must release a pre-armed wait that no round will meet (its teardown,
 * a peer's failure); rk_sched_destroy() does it too. The writer's thread.
 */
RK_EXPORT void rk_epoch_close(struct rk_epoch *e);

/** rk_epoch_current() - the last published epoch (acquire). Any thread. */
RK_EXPORT uint64_t rk_epoch_current(const struct rk_epoch *e);

/**
 * rk_epoch_read() - copy the last published descriptor into @buf (@cap
 * bytes), consistent with its epoch (*@epoch) and flags (*@flags); either
 * may be NULL. Any thread; spins while a publication is under way.
 * Return: its length; -ENOENT (nothing published); -RK_ETOOBIG (that round
 * had no descriptor); -ENOSPC (larger than @cap: nothing copied, *@epoch set).
 */
RK_EXPORT int64_t rk_epoch_read(const struct rk_epoch *e, uint64_t *epoch, uint32_t *flags,
				void *buf, uint32_t cap);

/**
 * rk_epoch_wait() - a consumer: wait until the epoch is at least @want,
 * spinning for @spin_ns, then asleep on the futex word. *@kicks is the kick
 * count the caller last saw (start from rk_epoch_kicks(), read before the
 * caller checks its own stop flag). Any thread but the writer's.
 * Return: 0 (reached while spinning), 1 (reached after a sleep), -EINTR
 * (rk_epoch_kick() since *@kicks, which is updated: check your stop flag).
 */
RK_EXPORT int rk_epoch_wait(struct rk_epoch *e, uint64_t want, uint64_t spin_ns,
			    uint32_t *kicks);

/** rk_epoch_kicks() - how many times rk_epoch_kick() was called. Any thread. */
RK_EXPORT uint32_t rk_epoch_kicks(const struct rk_epoch *e);

/**
 * rk_epoch_kick() - end every rk_epoch_wait() under way with -EINTR (a
 * consumer's owner stopping it: set its stop flag first). Any thread.
 */
RK_EXPORT void rk_epoch_kick(struct rk_epoch *e);

/**
 * rk_sched_epoch() - the region @s publishes its rounds in, or NULL
 * (rk_sched_resident() is off, or it could not be made: the launch path
 * then, with one log line and rk_sched_stats.resident_fallbacks). With same-host links and
 * a backend flagged RK_BACKEND_SHARED_EPOCH it is the leader's region, mapped
 * read-only by each follower, whose consumers then see a round as the leader
 * publishes it, without the follower's loop (rk_epoch_publish() on it fails
 * with -EPERM there); the region is fixed from rk_sched_create() on a ready
 * world, else from the first round. Borrowed: the scheduler's
 * reference lasts until rk_sched_destroy(); a consumer that may outlive it
 * takes its own with rk_epoch_hold(). NULL @s gives NULL.
 */
RK_EXPORT struct rk_epoch *rk_sched_epoch(const struct rk_sched *s);

#ifdef __cplusplus
}
#endif
#endif /* RK_SCHED_H */
