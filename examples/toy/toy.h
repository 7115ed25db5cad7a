/* SPDX-License-Identifier: MIT */
/*
 * The toy model: a deterministic, tensor-parallel stand-in for an LLM, and its
 * CPU backend for the rankrt scheduler. examples/toy/TOY.md is the exact
 * definition (a GPU port must match it bit for bit); this header is the API.
 *
 * Layers: toy_model/toy_state/toy_pick/toy_table are pure compute (no I/O, no
 * threads, no global state; any thread, one object per thread at a time).
 * toy_cpu is the backend: a worker thread computes, the loop thread talks.
 */
#ifndef TOY_H
#define TOY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rk_gpu.h"
#include "rk_sched.h"

#ifdef __cplusplus
extern "C" {
#endif

#define TOY_DEF_V	256
#define TOY_DEF_H	1024
#define TOY_MAX_H	32768u		/* keeps |logit| below 2^30: int32 never overflows */
#define TOY_MAX_V	(1u << 20)
#define TOY_TOPK_MAX	1024u		/* top_k is clamped to min(top_k, V, TOY_TOPK_MAX) */
#define TOY_TAG		0x544f5900u	/* "TOY": USER frame tag of partial logits */

/* Tensor ids of the counter-based weight hash (TOY.md). */
enum toy_tensor {
	TOY_T_EMBED = 0,	/* E[V][H], values < 2^16 */
	TOY_T_PROJ = 1,		/* W[V][H], signed: -64 .. 63 */
	TOY_T_STATE0 = 2,	/* the initial state h0[H] */
	TOY_T_SAMPLE = 3,	/* the uniform draw of a sampled token */
	TOY_T_DRAFT = 4,	/* the draw of the set-acceptance drafter (toy_oracle_draft()) */
};

/**
 * toy_hash() - value @index of tensor @tensor for model (or sampling) @seed:
 * the (index + 1)-th output of splitmix64 seeded with
 * mix64(seed + (tensor + 1) * 0x9E3779B97F4A7C15). Pure.
 */
uint64_t toy_hash(uint64_t seed, uint64_t tensor, uint64_t index);

/* One rank's shard of the model. Read-only after toy_model_init(). */
struct toy_model {
	uint32_t V, H;
	uint64_t seed;
	uint32_t rank, tp;	/* this shard is rank @rank of @tp */
	uint32_t lo, hi;	/* hidden indices [lo, hi) */
	uint32_t n;		/* hi - lo */
	uint32_t n_pad;		/* n rounded up to 32: rows of W are padded with zeros */
	uint16_t *E;		/* [V][n] */
	int8_t *W;		/* [V][n_pad] */
	uint32_t *h0;		/* [n] the initial state */
};

/**
 * toy_model_init() - generate rank @r's shard of a model with tensor
 * parallelism @T. Return: 0; -EINVAL when V is 0 or above TOY_MAX_V, H is 0,
 * above TOY_MAX_H or not divisible by T, T is 0 or r >= T; -ENOMEM.
 */
int toy_model_init(struct toy_model *m, uint32_t V, uint32_t H, uint64_t seed, uint32_t r,
		   uint32_t T);
void toy_model_fini(struct toy_model *m);

/* A stream's state shard: h[lo..hi) of the model it was made for, and the last token. */
struct toy_state {
	uint32_t *h;	/* [m->n] */
	uint32_t last;	/* the last token folded in; UINT32_MAX while none is */
};

/** toy_state_init() - a fresh state (h0). Return: 0 or -ENOMEM. */
int toy_state_init(const struct toy_model *m, struct toy_state *st);
void toy_state_fini(struct toy_state *st);
/** toy_state_copy() - @dst (initialised) = @src, the last token included. */
void toy_state_copy(const struct toy_model *m, struct toy_state *dst, const struct toy_state *src);
/** toy_state_feed() - fold @token into @st. Return: 0, -EINVAL for token >= V. */
int toy_state_feed(const struct toy_model *m, struct toy_state *st, uint32_t token);

/**
 * toy_partial_logits() - this shard's partial logits for the state @st:
 * @out[v] = sum over i in [lo, hi) of W[v][i] * f[i], for v < V, with the
 * features f[i] = ((h[i] >> 16) & 0xff) - 128 + 2 * ((E[last][i] >> 8) - 128)
 * (the second term is 0 before any token). The sum of every rank's partials
 * (int32, any order) is the TP1 logit.
 */
void toy_partial_logits(const struct toy_model *m, const struct toy_state *st, int32_t *out);

/* The dot-product kernels (integer, so all of them give the same bits). */
enum toy_kernel {
	TOY_KERNEL_C = 0,	/* portable */
	TOY_KERNEL_SSE2 = 1,	/* x86-64 baseline */
	TOY_KERNEL_AVX2 = 2,	/* x86-64 with AVX2 (toy_partial_logits() picks it when present) */
};

/**
 * toy_partial_logits_kernel() - toy_partial_logits() with a chosen kernel
 * (tests and benchmarks). Return: 0, -EOPNOTSUPP when this build or CPU
 * lacks it.
 */
int toy_partial_logits_kernel(const struct toy_model *m, const struct toy_state *st,
			      int32_t *out, enum toy_kernel kernel);

/* A stream's sampling parameters, as a ROUND entry carries them. */
struct toy_sampling {
	uint32_t top_k;		/* 0 = greedy */
	float temperature;	/* <= 0 (or NaN) = greedy */
	float top_p;		/* (0, 1) cuts; anything else keeps all top_k */
	uint64_t seed;
};

/**
 * toy_pick() - the token for full logits @logits[V] of a model with hidden
 * size @H, for the token at absolute position @abs_pos of its stream. Greedy:
 * argmax, the lowest v on ties. Sampled: TOY.md; a function of its arguments
 * only (IEEE double basic operations, no libm transcendental). Pure.
 */
uint32_t toy_pick(uint32_t V, uint32_t H, const int32_t *logits, const struct toy_sampling *s,
		  uint64_t abs_pos);

/**
 * toy_generate_ref() - the reference: generate @n_gen tokens after @prompt at
 * TP1, one token at a time, with no scheduler. Generated token k has absolute
 * position n_prompt + k. Return: 0, -EINVAL (bad model size, empty prompt, a
 * token >= V), -ENOMEM.
 */
int toy_generate_ref(uint32_t V, uint32_t H, uint64_t model_seed, const uint32_t *prompt,
		     uint32_t n_prompt, uint32_t n_gen, const struct toy_sampling *s,
		     uint32_t *out);

/**
 * toy_hash_tokens() - a receipt for a token sequence: SHA-256 of the tokens as
 * little-endian u32, the first 8 bytes in hex (16 chars + NUL). Built without
 * OpenSSL: FNV-1a 64 of the same bytes instead (a different value).
 * Return: 0; -ENOMEM or -EIO from libcrypto (@hex is then "").
 */
int toy_hash_tokens(const uint32_t *t, size_t n, char hex[17]);

/* ---- drafting with a set acceptance rate ---------------------------------------- */

#define TOY_ORACLE_DEF_P 0.7	/* MTP and n-gram drafters accept 60-80% of first positions */

/*
 * A drafter whose proposal for a position is the model's own token there with
 * probability @p, else a wrong one, drawn per position from @seed (so a run is
 * deterministic whatever the rounds look like). It needs the model's tokens
 * ahead of time: the caller hands it the request's reference (toy_generate_ref()).
 * Verification keeps the output exact whatever it proposes. Counters: proposals
 * made and those that were the model's token (their ratio is the measured p).
 * One owner thread.
 */
struct toy_oracle {
	double p;		/* 0..1 */
	uint64_t seed;
	uint32_t V;		/* >= 2 */
	uint64_t proposed, right;
};

/**
 * toy_oracle_draft() - propose up to @k tokens for generated positions @gen,
 * @gen + 1, ... of a stream whose model tokens are @ref[0..@n_ref) (the
 * generated tokens, not the prompt); @stream_key tells streams apart (a
 * request's index or seed). Position q gets @ref[q] when
 * toy_hash(seed ^ mix(stream_key), TOY_T_DRAFT, q) / 2^64 < p, else another
 * token. Return: how many it wrote to @out (0 past @n_ref).
 */
uint32_t toy_oracle_draft(struct toy_oracle *o, const uint32_t *ref, uint32_t n_ref, uint32_t gen,
			  uint64_t stream_key, uint32_t *out, uint32_t k);

/* ---- rounds and the stream table (the backend's compute, without threads) ---- */

/* One stream of a round, copied out of the ROUND view. */
struct toy_rstream {
	uint64_t id;
	uint32_t position;	/* tokens already folded into the stream's state */
	uint32_t n_tokens;	/* inputs, at tok[tok_off..] */
	uint32_t n_draft;	/* drafts, at tok[tok_off + n_tokens..] */
	uint32_t tok_off;
	uint32_t out_off;	/* first of its n_draft + 1 outputs */
	struct toy_sampling s;
};

/* A round, owned (the ROUND view dies when launch() returns). */
struct toy_round {
	uint64_t round_id;
	uint32_t n_streams;
	uint32_t n_tok;		/* inputs and drafts of every stream */
	uint32_t n_out;		/* sum of n_draft + 1 */
	struct toy_rstream *st;
	uint32_t *tok;
	uint32_t st_cap, tok_cap;
};

/**
 * toy_round_copy() - copy @src into @dst (zeroed or used before; its arrays
 * grow as needed). Return: 0; -EINVAL when a token is >= @V or a count
 * overflows; -ENOMEM.
 */
int toy_round_copy(struct toy_round *dst, const struct rk_wire_round *src, uint32_t V);
void toy_round_fini(struct toy_round *r);

/**
 * toy_round_token() - a backend's token(): the pick for output @j of stream
 * @i of round @r, whose full logits are @logits (n_out rows of @V), with
 * hidden size @H. Return: 0 and *@tok; -EINVAL when @i or @j is out of range.
 */
int toy_round_token(const struct toy_round *r, const int32_t *logits, uint32_t V, uint32_t H,
		    uint32_t i, uint32_t j, uint32_t *tok);

/* A stream's committed state on this rank. */
struct toy_entry {
	uint64_t id;
	uint32_t pos;		/* tokens folded into st */
	uint32_t row;		/* an index held while the stream lives (a device state row) */
	bool used;
	uint64_t mark;		/* the last round (table seq) that carried it */
	uint64_t born;		/* the table seq that created it */
	struct toy_state st;	/* without a model (toy_table_init_rows()) only st.last */
};

/* stream id -> committed state, open addressing (linear probing). */
struct toy_table {
	const struct toy_model *m;	/* NULL: positions and rows only */
	uint32_t V;
	struct toy_entry *slot;
	uint32_t cap;		/* a power of two */
	uint32_t count;
	uint64_t seq;		/* rounds executed (attempted) */
	uint32_t rows;		/* rows handed out: count held, the rest in free_rows */
	uint32_t *free_rows;	/* rows of ended streams, reused first */
	uint32_t n_free, free_cap;
	struct toy_state scratch;	/* drafts run here, never on the committed state */
};

/** toy_table_init() - an empty table for model @m (borrowed). Return: 0 or -ENOMEM. */
int toy_table_init(struct toy_table *t, const struct toy_model *m);

/**
 * toy_table_init_rows() - an empty table of vocabulary @V that keeps no
 * states, for a backend that holds them elsewhere: each stream's position,
 * last token (st.last) and row, which indexes its state there (rows below
 * t->rows; an ended stream's row is handed out again). It validates and
 * applies rounds with toy_table_admit(). Return: 0, -EINVAL (V is 0).
 */
int toy_table_init_rows(struct toy_table *t, uint32_t V);
void toy_table_fini(struct toy_table *t);

/**
 * toy_table_exec() - run one round on this rank's shard. First everything is
 * validated and nothing changes on failure: each stream must be known at
 * exactly @position, or unknown with position 0 (it starts fresh); a stream id
 * twice is refused. Then streams of the table absent from @r are retired (the
 * stream rule), and per stream: its inputs are folded into its committed state
 * and the partial logits after the last input are written to output out_off;
 * each draft is folded into a scratch copy and the partials after draft j go
 * to output out_off + 1 + j. @out holds r->n_out * V int32.
 * Return: 0; -EPROTO (position mismatch), -EINVAL (duplicate stream, token >=
 * V, offsets outside the round, a table without a model), -ENOMEM.
 */
int toy_table_exec(struct toy_table *t, const struct toy_round *r, int32_t *out);

/**
 * toy_table_admit() - toy_table_exec() up to the compute: validate @r (the
 * same rules, and nothing changes on failure), create its new streams (born
 * is then t->seq) and retire the streams absent from it. The caller then
 * folds each stream's inputs and advances its entry (toy_table_get()): pos,
 * and st.last in a table without states. Return: as toy_table_exec().
 */
int toy_table_admit(struct toy_table *t, const struct toy_round *r);

/** toy_table_retire() - drop stream @id. Return: 0, or -ENOENT when unknown. */
int toy_table_retire(struct toy_table *t, uint64_t id);
/** toy_table_position() - tokens folded for stream @id, or -ENOENT. */
int64_t toy_table_position(const struct toy_table *t, uint64_t id);
/** toy_table_find() - the entry of @id (valid until the table changes), or NULL. */
const struct toy_entry *toy_table_find(const struct toy_table *t, uint64_t id);
/** toy_table_get() - toy_table_find() for the table's owner, to advance the entry. */
struct toy_entry *toy_table_get(struct toy_table *t, uint64_t id);

/* ---- emulated device time ------------------------------------------------------ */

/*
 * The CPU backend's emulated device (toy_params.device): each round takes a
 * modelled device time and completes the way a GPU round does, through the
 * rankrt notifier on an emulated device (rk_gpu_notifier_create_emu()): the
 * polled word, the wake path after wake_ns, the predictor. The worker still
 * computes the round (the tokens are the toy model's); the device time only
 * decides when the round completes: never before launch + the modelled time,
 * and at the compute's end if that is later. A round's device time is
 * base_ns + per_stream_ns * streams + per_token_ns * tokens, tokens being
 * every stream's inputs and drafts (a drafted round costs what verifying its
 * k + 1 tokens costs). examples/toy/TOY.md, "Emulated device time", has the
 * presets and where their figures come from.
 */
struct toy_device_model {
	bool on;
	uint64_t base_ns;
	uint64_t per_stream_ns;
	uint64_t per_token_ns;
	uint64_t wake_ns;	/* the host-function hop: RK_GPU_EMU_WAKE_NS by default */
};

/**
 * toy_device_preset() - fill @m (on) from a preset name: "8b-h200", "70b-tp8",
 * "1ms", "5ms", "10ms"; wake_ns RK_GPU_EMU_WAKE_NS. Return: 0, -EINVAL for
 * an unknown name (@m unchanged). Pure.
 */
int toy_device_preset(const char *name, struct toy_device_model *m);

/**
 * toy_device_parse() - a preset name, or BASE_US[,PER_STREAM_US,PER_TOKEN_US]
 * (decimal microseconds, fractions allowed; the two per-unit terms default to
 * 0). wake_ns is left as it was (RK_GPU_EMU_WAKE_NS when @m was off). Return:
 * 0, -EINVAL when malformed (@m unchanged). Pure.
 */
int toy_device_parse(const char *spec, struct toy_device_model *m);

/** toy_device_round_ns() - the device time of a round of @streams streams and @tokens tokens. */
uint64_t toy_device_round_ns(const struct toy_device_model *m, uint32_t streams, uint32_t tokens);

/* ---- the CPU backend ----------------------------------------------------------- */

struct toy_params {
	uint32_t V;		/* vocabulary, default TOY_DEF_V */
	uint32_t H;		/* hidden size, the work knob, default TOY_DEF_H */
	uint64_t seed;		/* model seed */
	/*
	 * CPU backend, resident rounds: how long the armed worker spins on the
	 * round epoch before it sleeps on the futex, us (0: it sleeps at once;
	 * UINT32_MAX: always), or TOY_WORKER_SPIN_AUTO (toy_params_init()):
	 * always under RK_WAIT=spin, never under block, and under adaptive
	 * TOY_WORKER_SPIN_US where the affinity mask has two CPUs per rank of
	 * the world (the loop and the worker), else never.
	 */
	uint32_t worker_spin_us;
	/*
	 * Tests only, NULL otherwise. The CPU backend calls @test_hook(
	 * @test_arg, where, region, round id) with TOY_HOOK_LOOP_WINDOW from a
	 * follower's launch() between its two looks at the armed job that will
	 * take the round (took read false, the region not yet read), and with
	 * TOY_HOOK_WORKER_TAKES from the worker just before it marks a round
	 * taken; check_toy_world holds the threads there to open, on purpose, the
	 * window a preemption opens. From the loop and the worker thread.
	 */
	void (*test_hook)(void *arg, int where, const struct rk_epoch *ep, uint64_t round_id);
	void *test_arg;
	/*
	 * Tests only, 0 otherwise (the round watchdog's test hook, rk-serve's
	 * RK_TEST_STALL): the CPU backend's worker, a GPU stream's stand-in,
	 * sits @stall_ms on round @stall_round before computing it, on the
	 * launch path, as a rank stuck in a collective would; the rounds after
	 * it queue behind. toy_cpu_abort() and the teardown end the stall.
	 * With @stall_loop, launch() itself sleeps instead, on the loop thread,
	 * as a backend blocked inside a collective call would: the rank's loop
	 * answers nothing meanwhile.
	 */
	uint64_t stall_round;
	uint64_t stall_ms;
	bool stall_loop;
	/*
	 * CPU backend: emulated device time (off by default). With it on, every
	 * round is launched (resident rounds are off: a GPU round is launched
	 * too) and a follower's partials leave from the loop once the round's
	 * mark is delivered (no lane from the worker).
	 */
	struct toy_device_model device;
	enum rk_gpu_notify_mode device_notify;	/* the emulated notifier's mode, AUTO */
	/* tests only, NULL otherwise: the emulated device's attributes (a manual
	 * device on the loop's injected clock); wake_ns still comes from @device */
	const struct rk_gpu_emu_attr *device_attr;
};

#define TOY_HOOK_LOOP_WINDOW	1
#define TOY_HOOK_WORKER_TAKES	2

#define TOY_WORKER_SPIN_AUTO	(UINT32_MAX - 1)
#define TOY_WORKER_SPIN_US	100u

/**
 * toy_cpus_spare() - whether this thread's affinity mask holds two CPUs per
 * rank of a @size-rank world (each rank's loop and its worker thread) and
 * @mode lets a waiting thread spin (not RK_WAIT_BLOCK). Any thread.
 */
bool toy_cpus_spare(uint32_t size, enum rk_wait_mode mode);

/**
 * toy_resident_on() - whether the CPU backend on a rank of a @size-rank world
 * runs resident rounds under @mode (its scheduler's, rk_sched_resident()) and
 * the wait policy @wait: on is yes, off is no, auto is yes in a world with followers
 * where toy_cpus_spare() (toy.c: the rule it follows). The CUDA backend has
 * no resident rounds: it launches every round whatever @mode. Any thread.
 */
bool toy_resident_on(enum rk_resident_mode mode, uint32_t size, enum rk_wait_mode wait);

/** toy_params_init() - the defaults (V 256, H 1024, seed 1). */
void toy_params_init(struct toy_params *p);

/*
 * The rounds a backend has reported: each report goes to the scheduler the
 * round was launched for (rk_sched_complete()), and is counted here too, so a
 * caller that drives a backend itself (launch() with a NULL scheduler) can
 * read them (toy_cpu_reports(), toy_cuda_reports()).
 */
struct toy_reports {
	uint64_t n;
	uint64_t last_id;
	int last_status;
};

/**
 * toy_report() - count round @round_id's report and hand it to @s (NULL:
 * count only). Call it last: the scheduler may launch the next round from it.
 */
void toy_report(struct toy_reports *r, struct rk_sched *s, uint64_t round_id, int status);
/** toy_reports_get() - the count; the last report's id and status (either may be NULL). */
uint64_t toy_reports_get(const struct toy_reports *r, uint64_t *round_id, int *status);

struct toy_cpu;

struct toy_cpu_stats {
	uint64_t rounds;	/* rounds computed on this rank */
	uint64_t outputs;	/* partial logit vectors computed */
	uint64_t ns_compute;	/* worker time in toy_table_exec() */
	uint64_t frames_rx;	/* leader: partials received */
	uint64_t stale;		/* leader: partials for a round already finished, dropped */
	/* resident rounds (RK_RESIDENT; toy_cpu_resident.c): posted + resident = launches
	 * that ran */
	uint64_t posted;	/* rounds queued to the worker by launch() */
	uint64_t resident;	/* rounds the pre-armed worker took from the epoch region */
	uint64_t resident_sleeps;	/* ...of which it slept on the futex for */
	uint64_t resident_early;	/* ...of which it ran before its launch() (a
					 * follower on the leader's shared region) */
	uint64_t resident_mismatch;	/* armed, but the round took the launch path (a shape
					 * the armed buffers do not fit, no descriptor) */
	uint64_t resident_fallbacks;	/* could not pre-arm (no memory): launch path */
	/* a follower on a same-host link (RK_LANE): who sent its partials */
	uint64_t lane_sent;	/* rounds whose partials the worker sent on the lane */
	uint64_t lane_refused;	/* ...that the lane could not take: the loop sent them */
	/* emulated device time (toy_params.device) */
	uint64_t device_ns;	/* device time launched, the sum of the rounds' */
	uint64_t device_held;	/* rounds whose compute ended first: held for the mark */
	uint64_t device_late;	/* rounds whose mark came first: the compute ran longer */
};

/**
 * toy_cpu_create() - the backend for @w's rank (rank r of rk_world_size(w)
 * holds hidden shard r). Starts one worker thread.
 * Return: 0 and *@out; -EINVAL (bad params, H not divisible by the world
 * size), -ENOMEM, -errno from pthread_create. Loop thread.
 */
int toy_cpu_create(struct rk_world *w, const struct toy_params *p, struct toy_cpu **out);

/**
 * toy_cpu_reports() - toy_reports_get() of the rounds this rank reported (a
 * round's completion; the leader's once every rank's partials are in).
 * toy_cpu_ops.launch() takes a NULL scheduler too.
 */
uint64_t toy_cpu_reports(const struct toy_cpu *b, uint64_t *round_id, int *status);

/**
 * toy_cpu_abort() - a peer failed: the leader fails the round that waits for
 * its partials (reported with -ECONNRESET), and every later launch fails
 * with -ECONNRESET, so no round waits for a dead rank. Loop thread.
 */
void toy_cpu_abort(struct toy_cpu *b);

/**
 * toy_cpu_notifier() - the emulated device's notifier (toy_params.device on),
 * else NULL: rk_gpu_notifier_set_mode() and rk_gpu_notifier_stats() on it.
 * toy_cpu_device() - the emulated device itself, else NULL (tests step a
 * manual one with rk_gpu_emu_run()). Loop thread.
 */
struct rk_gpu_notifier *toy_cpu_notifier(const struct toy_cpu *b);
struct rk_gpu_emu *toy_cpu_device(const struct toy_cpu *b);

/** toy_cpu_busy() - true while the worker holds a launched round. */
bool toy_cpu_busy(const struct toy_cpu *b);
/** toy_cpu_streams() - streams held in the table; meaningful while !toy_cpu_busy(). */
uint32_t toy_cpu_streams(const struct toy_cpu *b);
/** toy_cpu_model() - this rank's shard (read-only). */
const struct toy_model *toy_cpu_model(const struct toy_cpu *b);
void toy_cpu_stats(const struct toy_cpu *b, struct toy_cpu_stats *out);

/**
 * toy_cpu_destroy() - join the worker and free everything. Return: 0, or
 * -EBUSY (nothing freed) while a round is in flight: run the loop until
 * toy_cpu_busy() is false. A scheduler that drives the backend calls it until
 * rk_sched_stop() or rk_sched_destroy() (rk_sched.h: the teardown order).
 * Loop thread, not from a callback of the backend.
 */
int toy_cpu_destroy(struct toy_cpu *b);

/*
 * The backend's ops; ctx is the struct toy_cpu *. Its messages are the
 * followers' partials, USER frames tagged TOY_TAG, which the scheduler hands
 * to .frame: RK_BUSY when taken; -EPROTO when malformed or unexpected (the
 * round it names, if current, fails); -ENOENT for another tag (a caller that
 * drives the backend without a scheduler hands it its USER frames itself).
 */
extern const struct rk_backend_ops toy_cpu_ops;

#ifdef __cplusplus
}
#endif
#endif /* TOY_H */
