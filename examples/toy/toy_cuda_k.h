/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CUDA kernels (toy_cuda.cu), as the host code sees them.
 * Shared by C (toy_cuda.c, tests) and CUDA C++ (toy_cuda.cu), so it includes
 * nothing but <stdint.h>. Every launcher enqueues on @s and returns the
 * cudaError_t of the launch (0 = cudaSuccess); the caller converts it.
 * Built only with CUDA and NCCL.
 */
#ifndef TOY_CUDA_K_H
#define TOY_CUDA_K_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

#define TOY_CUDA_NO_TOKEN UINT32_MAX

/*
 * One stream of a round, as uploaded to the device (32 bytes, then the
 * round's tokens follow the array). @slot: its state row in the state pool;
 * @fresh: start from h0 instead of the row; @last_prev: the last token folded
 * in before this round (TOY_CUDA_NO_TOKEN if none). Outputs out_off ..
 * out_off + n_draft: after the inputs, then after each draft (TOY.md).
 */
struct toy_cuda_kstream {
	uint32_t slot;
	uint32_t fresh;
	uint32_t tok_off;
	uint32_t n_tokens;
	uint32_t n_draft;
	uint32_t out_off;
	uint32_t last_prev;
	uint32_t pad;
};

/* The shard's weights: E[V][n] (uint16), W[V][n] (int8), h0[n], for hidden [lo, lo + n). */
int toy_cuda_k_weights(struct CUstream_st *s, uint16_t *E, int8_t *W, uint32_t *h0, uint32_t V,
		       uint32_t H, uint64_t seed, uint32_t lo, uint32_t n);

/*
 * Fold every stream's inputs into its state row (committed), and write the
 * features f[out][n] (int16) after the inputs and after each draft (drafts
 * are folded into a register copy, never the row).
 */
int toy_cuda_k_round(struct CUstream_st *s, const struct toy_cuda_kstream *ks,
		     uint32_t n_streams, const uint32_t *tok, uint32_t *state, const uint16_t *E,
		     const uint32_t *h0, int16_t *f, uint32_t n, uint32_t lo);

/* out[o][v] = sum over k < n of W[v][k] * f[o][k], int32 (exact). */
int toy_cuda_k_logits(struct CUstream_st *s, const int8_t *W, const int16_t *f, int32_t *out,
		      uint32_t n_out, uint32_t V, uint32_t n);

/*
 * Resident rounds (toy_cuda.c): the round the host predicts after this one
 * (the same streams, each with 1..max_tok inputs and at most @dmax drafts).
 * The host writes it into host-mapped pinned memory before it pre-arms the
 * plan kernel, which reads it there when it runs: a graph of the pre-armed
 * kernels serves every round of a shape (stream count, draft bound).
 */
#define TOY_CUDA_PRED_MAX 64u		/* streams */
#define TOY_CUDA_PLAN_THREADS 256u	/* the plan kernel's block */
#define TOY_CUDA_TOKWIN_MAX 2048u	/* tokens it reads (8 per thread) */
#define TOY_CUDA_POLL_FAST 4096u	/* epoch loads back to back, then __nanosleep */
#define TOY_CUDA_POLL_SLEEP_MAX 20000u	/* ns, the longest nap between loads */

struct toy_cuda_kpredict {
	uint64_t want;		/* its round id: the epoch the round waits for */
	uint64_t done;		/* the plan kernel stores @want here once it has read
				 * the slot (the host may then reuse it) */
	uint32_t n;		/* streams, <= TOY_CUDA_PRED_MAX (the kernel takes its own) */
	uint32_t V;
	/* written by the plan kernel before @done (%globaltimer, ns): when it
	 * started, when it saw the epoch reach @want, when its checks were done */
	uint64_t t_start, t_seen, t_plan;
	uint32_t polls;		/* epoch loads that found it short of @want */
	uint32_t gate;		/* its verdict: 0 the round is the predicted one */
	uint32_t cancel;	/* the host: not 0, give up the wait (gate 1) */
	uint32_t pad;
	struct {
		uint64_t id;
		uint32_t position;	/* tokens folded before it */
		uint32_t slot;
		uint32_t last_prev;
		uint32_t max_tok;	/* inputs it may carry (1 + the drafts it had) */
	} s[TOY_CUDA_PRED_MAX];
};

/*
 * The pre-armed round's first kernel. Wait until the u64 epoch at @d_epoch
 * (host-mapped) reaches @pred->want: it polls the word (acquire, system
 * scope; TOY_CUDA_POLL_FAST loads back to back, then naps growing to
 * TOY_CUDA_POLL_SLEEP_MAX ns), so a stream that already waited for it
 * (cuStreamWaitValue64) passes at once; while it naps it also reads
 * @pred->cancel, and gives up (gate[0] = 1) once the host has set it: a
 * follower's region is the leader's, which the follower cannot close. Then
 * read the round's descriptor (@d_len: its u32 length, @desc the ROUND payload; rk_sched.h's layout) and
 * compare it with *@pred (a device address of host-mapped memory, read when
 * the kernel runs) for @n streams, at most @dmax drafts a stream, vocabulary
 * @V, reading at most @tokwin tokens. It matches: write the kstreams and
 * tokens (ks, then tok), gate[0] = 0 and gate[1] = the outputs. It does not:
 * gate[0] = 1, and the gated kernels after it return at once. Either way it
 * then stores the stamps, then @pred->want into @pred->done. One block.
 */
int toy_cuda_k_resident_plan(struct CUstream_st *s, const uint64_t *d_epoch,
			     const uint32_t *d_len, const uint8_t *desc,
			     struct toy_cuda_kpredict *pred, uint32_t n, uint32_t dmax,
			     uint32_t tokwin, uint32_t V, struct toy_cuda_kstream *ks,
			     uint32_t *tok, uint32_t *gate);

/*
 * toy_cuda_k_round() and toy_cuda_k_logits() that return at once when gate[0]
 * is not 0; the logits kernel's grid covers @n_out outputs, and it computes
 * the first gate[1] of them (the plan kernel's count). @pdl: launch the fold
 * kernel as a programmatic dependent of the kernel before it (the plan
 * kernel, which lets it launch at its start): its blocks are resident and
 * wait (griddepcontrol.wait) for the plan kernel's end, memory included,
 * instead of being launched after it; a launch that refuses the attribute
 * is made the plain way (inside a stream capture that failed, the error).
 */
int toy_cuda_k_round_gated(struct CUstream_st *s, const struct toy_cuda_kstream *ks,
			   uint32_t n_streams, const uint32_t *tok, uint32_t *state,
			   const uint16_t *E, const uint32_t *h0, int16_t *f, uint32_t n,
			   uint32_t lo, const uint32_t *gate, int pdl);
int toy_cuda_k_logits_gated(struct CUstream_st *s, const int8_t *W, const int16_t *f,
			    int32_t *out, uint32_t n_out, uint32_t V, uint32_t n,
			    const uint32_t *gate);

/* Benchmarks and tests: an empty kernel (1 thread), and one that spins for @ns. */
int toy_cuda_k_empty(struct CUstream_st *s);
/* Benchmarks: one thread stores @v into host-mapped *@flag (a system-scope store). */
int toy_cuda_k_flag(struct CUstream_st *s, uint64_t *flag, uint64_t v);
int toy_cuda_k_sleep(struct CUstream_st *s, uint64_t ns);
/* Benchmarks: one thread polls the u64 at host-mapped @d_epoch as the plan
 * kernel does until it reaches @want, then stores @v into *@flag. */
int toy_cuda_k_poll_flag(struct CUstream_st *s, const uint64_t *d_epoch, uint64_t want,
			 uint64_t *flag, uint64_t v);

#ifdef __cplusplus
}
#endif
#endif /* TOY_CUDA_K_H */
