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
	 * Launch this rank's share of @round. Must not block: enqueue GPU work,
	 * or hand CPU work to a worker. Report the round's completion on this
	 * rank with rk_sched_complete() (loop thread), e.g. from a post sent by
	 * the worker or a CUDA host function. On the leader, completion means the
	 * outputs can be read with token(). @round is valid only during the call.
	 * Return: 0, or -errno (the round fails on every rank).
	 */
	int (*launch)(void *ctx, const struct rk_wire_round *round, unsigned int flags);
	/*
	 * Leader, between completion and the next launch: the model's token at
	 * output @j (0..n_draft) of stream @i (index in the round), greedy or
	 * sampled per the stream's parameters. Return: 0 or -errno.
	 */
	int (*token)(void *ctx, uint32_t i, uint32_t j, uint32_t *tok);
	/* Every rank: stream @stream_id ended; drop its state. May be NULL. */
	void (*retire)(void *ctx, uint64_t stream_id);
};

/*
 * A drafter proposes up to @k tokens to follow @hist (the stream's tokens so
 * far: prompt and generated). Return: how many it wrote to @out (0..k).
 */
typedef uint32_t (*rk_draft_fn)(void *arg, const uint32_t *hist, size_t n, uint32_t *out,
				uint32_t k);

/**
 * rk_ngram_draft() - prompt-lookup drafting: find the most recent earlier
 * occurrence of the longest suffix of @hist (3 tokens, then 2, then 1) and
 * propose the up to @k tokens that followed it. Pure; any thread. @arg unused.
 */
RK_EXPORT uint32_t rk_ngram_draft(void *arg, const uint32_t *hist, size_t n, uint32_t *out,
				  uint32_t k);

#define RK_SCHED_MAX_DRAFT 16

/* Round events reported to rk_sched_config.trace. */
enum rk_sched_event {
	RK_SCHED_EV_SENT,	/* leader: the ROUND is handed to the kernel now */
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

struct rk_sched_config {
	uint32_t max_batch;		/* streams per round (default 8) */
	uint32_t draft_k;		/* default drafted tokens per stream and round, 0 = plain,
					 * at most RK_SCHED_MAX_DRAFT */
	rk_draft_fn draft;		/* drafter (default rk_ngram_draft when draft_k > 0) */
	void *draft_arg;
	rk_sched_trace_fn trace;	/* optional round tracer (NULL: none) */
	void *trace_arg;
};

/* Per-scheduler counters. */
struct rk_sched_stats {
	uint64_t rounds;
	uint64_t tokens;		/* tokens emitted to requests */
	uint64_t drafted;		/* drafted tokens sent for verification */
	uint64_t accepted;		/* drafted tokens accepted */
	uint64_t streams_done;
	uint64_t ns_round_sum;		/* broadcast-to-completion time, summed */
};

/*
 * A request: the caller's storage, owned by the scheduler from
 * rk_sched_submit() until its callback reports done.
 */
typedef void (*rk_request_cb)(struct rk_request *req, const uint32_t *tokens, uint32_t n,
			      bool done, int err);

struct rk_request {
	/* public: set before submit */
	const uint32_t *prompt;		/* borrowed until done */
	uint32_t prompt_len;		/* >= 1 */
	uint32_t max_tokens;		/* tokens to generate */
	int64_t stop_token;		/* -1 = none */
	uint32_t top_k;			/* 0 = greedy */
	float temperature;
	float top_p;
	uint64_t seed;
	int32_t draft_k;		/* drafted tokens per round: -1 = the scheduler's
					 * default, 0 = plain, up to RK_SCHED_MAX_DRAFT */
	rk_request_cb cb;		/* new tokens (NULL when n is 0); done=true exactly
					 * once at the end */
	void *data;
	/* read-only */
	uint64_t id;			/* stream id, assigned at submit */
	uint32_t generated;
	/* private */
	uint32_t *hist;			/* prompt + generated */
	size_t hist_len, hist_cap;
	uint32_t fed;			/* tokens folded into the model state */
	uint32_t n_in, n_draft;		/* this round's inputs and drafts */
	struct rk_request *next;
	bool in_batch;
	bool cancelled;
};

/**
 * rk_sched_create() - a scheduler for @world's rank (leader or follower).
 * @ops/@ctx: the backend. @cfg: NULL = defaults.
 * Return: 0 and *@out, -ENOMEM, -EINVAL.
 */
RK_EXPORT int rk_sched_create(struct rk_world *world, const struct rk_sched_config *cfg,
			      const struct rk_backend_ops *ops, void *ctx, struct rk_sched **out);

/**
 * rk_sched_on_frame() - hand a frame from the world's frame callback to the
 * scheduler. Return: RK_BUSY/RK_IDLE when it was a scheduler frame (ROUND,
 * ROUND_DONE), -ENOENT when it is not (the caller handles it).
 */
RK_EXPORT int rk_sched_on_frame(struct rk_sched *s, int peer, const struct rk_wire_hdr *h,
				const uint8_t *payload);

/**
 * rk_sched_submit() - leader: queue a request; it joins the batch between
 * rounds. Return: 0, -EINVAL (empty prompt, no callback, draft_k out of range),
 * -EPERM on a follower,
 * -RK_ESTOPPED after rk_sched_stop().
 */
RK_EXPORT int rk_sched_submit(struct rk_sched *s, struct rk_request *req);

/**
 * rk_sched_cancel() - leader: end @req early (its client went away). A queued
 * request ends at once; a running one leaves the batch before the next round
 * (after the round in flight, whose tokens are dropped), so every rank
 * retires it. Its callback runs once more with done=true, err=-ECANCELED.
 * Return: 0, -ENOENT when @req is not held by this scheduler.
 */
RK_EXPORT int rk_sched_cancel(struct rk_sched *s, struct rk_request *req);

/**
 * rk_sched_complete() - the backend reports that its share of round
 * @round_id finished on this rank, with @status (0 or -errno). Leader: the
 * round's tokens are verified and emitted and the next round starts.
 * Follower: a failure goes back to the leader in a ROUND_DONE (with
 * @status); a success sends nothing.
 */
RK_EXPORT void rk_sched_complete(struct rk_sched *s, uint64_t round_id, int status);

/** rk_sched_idle() - leader: true when no request is queued or running. */
RK_EXPORT bool rk_sched_idle(const struct rk_sched *s);

/**
 * rk_sched_stop() - fail every queued and running request with -RK_ESTOPPED
 * (their callbacks run) and refuse new ones.
 */
RK_EXPORT void rk_sched_stop(struct rk_sched *s);

RK_EXPORT void rk_sched_stats(const struct rk_sched *s, struct rk_sched_stats *out);

/** rk_sched_destroy() - free; requests still held get -RK_ESTOPPED first. */
RK_EXPORT void rk_sched_destroy(struct rk_sched *s);

#ifdef __cplusplus
}
#endif
#endif /* RK_SCHED_H */
