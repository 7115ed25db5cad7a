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
 * For the tests and benchmarks of gpu/ (check_gpu, bench-resident): an empty
 * kernel (1 thread), one that spins for @ns, one thread that stores @v into
 * host-mapped *@flag (a system-scope store), and one that polls the u64 at
 * host-mapped @d_epoch (a round epoch registered with rk_gpu_epoch_register())
 * until it reaches @want, then stores @v into *@flag.
 */
int toy_cuda_k_empty(struct CUstream_st *s);
int toy_cuda_k_sleep(struct CUstream_st *s, uint64_t ns);
int toy_cuda_k_flag(struct CUstream_st *s, uint64_t *flag, uint64_t v);
int toy_cuda_k_poll_flag(struct CUstream_st *s, const uint64_t *d_epoch, uint64_t want,
			 uint64_t *flag, uint64_t v);

#ifdef __cplusplus
}
#endif
#endif /* TOY_CUDA_K_H */
