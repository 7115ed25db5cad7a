// SPDX-License-Identifier: MIT
/*
 * The toy model's kernels (examples/toy/TOY.md, model v2), bit-exact with
 * examples/toy/toy.c: weights from the same counter hash, the same state fold,
 * the same centred features, exact int32 dot products (integer addition, so
 * the reduction order does not matter). The backend around them is
 * toy_cuda.c; the sums across ranks are an NCCL int32 allreduce there.
 *
 * Only extern "C" launchers leave this file; they return the launch's
 * cudaError_t and never log (the C caller converts it once).
 */
#include <cuda_runtime.h>
#include <stddef.h>
#include <stdint.h>

#include "toy_cuda_k.h"

#define GOLDEN 0x9E3779B97F4A7C15ull
#define STATE_MUL 0x9E3779B1u
#define ROWS_PER_BLOCK 8	/* logits: one warp per vocabulary row */
#define MAX_GRID_Y 65535u
#define POLL_FAST 4096u		/* k_poll_flag: epoch loads back to back, then __nanosleep */
#define POLL_SLEEP_MAX 20000u	/* ns, the longest nap between loads */

__host__ __device__ static inline uint64_t mix64(uint64_t z)
{
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

static uint64_t tensor_base(uint64_t seed, uint64_t tensor)
{
	return mix64(seed + (tensor + 1) * GOLDEN);
}

__global__ void k_weights(uint16_t *E, int8_t *W, uint32_t *h0, uint32_t V, uint32_t H,
			  uint64_t be, uint64_t bw, uint64_t bh, uint32_t lo, uint32_t n)
{
	uint64_t total = (uint64_t)V * n, x, idx;
	uint64_t stride = (uint64_t)gridDim.x * blockDim.x;
	uint32_t v, k;

	for (x = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; x < total; x += stride) {
		v = (uint32_t)(x / n);
		k = (uint32_t)(x % n);
		idx = (uint64_t)v * H + lo + k;		/* the global index, never the shard's */
		E[x] = (uint16_t)(mix64(be + (idx + 1) * GOLDEN) & 0xffff);
		W[x] = (int8_t)((int)(mix64(bw + (idx + 1) * GOLDEN) & 0x7f) - 64);
	}
	for (x = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; x < n; x += stride)
		h0[x] = (uint32_t)mix64(bh + ((uint64_t)lo + x + 1) * GOLDEN);
}

__device__ static inline uint32_t fold(uint32_t h, uint16_t e, uint32_t i)
{
	uint32_t x = h * STATE_MUL + e + i;

	return x ^ (x >> 15);
}

/* f = s + 2e: the state's byte and the last token's embedding byte, centred. */
__device__ static inline int16_t feature(uint32_t h, uint32_t last, const uint16_t *E,
					 uint32_t n, uint32_t k)
{
	int32_t f = (int32_t)((h >> 16) & 0xff) - 128;

	if (last != TOY_CUDA_NO_TOKEN)
		f += 2 * ((int32_t)(E[(size_t)last * n + k] >> 8) - 128);
	return (int16_t)f;
}

/* Thread (k, stream): hidden index lo + k of every stream y, y = blockIdx.y + j*gridDim.y. */
__global__ void k_round(const toy_cuda_kstream *ks, uint32_t n_streams, const uint32_t *tok,
			uint32_t *state, const uint16_t *E, const uint32_t *h0, int16_t *f,
			uint32_t n, uint32_t lo)
{
	uint32_t k = blockIdx.x * blockDim.x + threadIdx.x, y, j, t, last, h, hd;

	if (k >= n)
		return;
	for (y = blockIdx.y; y < n_streams; y += gridDim.y) {
		const toy_cuda_kstream s = ks[y];
		const uint32_t *in = tok + s.tok_off;
		uint32_t *row = state + (size_t)s.slot * n;

		h = s.fresh ? h0[k] : row[k];
		last = s.last_prev;
		for (j = 0; j < s.n_tokens; j++) {
			t = in[j];
			h = fold(h, E[(size_t)t * n + k], lo + k);
			last = t;
		}
		row[k] = h;
		f[(size_t)s.out_off * n + k] = feature(h, last, E, n, k);
		hd = h;
		for (j = 0; j < s.n_draft; j++) {
			t = in[s.n_tokens + j];
			hd = fold(hd, E[(size_t)t * n + k], lo + k);
			f[((size_t)s.out_off + 1 + j) * n + k] = feature(hd, t, E, n, k);
		}
	}
}

/* One warp per (row v, output o); lanes stride over the shard, then a shuffle sum. */
__global__ void k_logits(const int8_t *W, const int16_t *f, int32_t *out, uint32_t n_out,
			 uint32_t V, uint32_t n)
{
	uint32_t lane = threadIdx.x & 31, v = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	uint32_t o, k;
	int32_t acc;

	if (v >= V)
		return;		/* the whole warp: v is per warp */
	for (o = blockIdx.y; o < n_out; o += gridDim.y) {
		const int8_t *w = W + (size_t)v * n;
		const int16_t *fo = f + (size_t)o * n;

		acc = 0;
		for (k = lane; k < n; k += 32)
			acc += (int32_t)w[k] * (int32_t)fo[k];
		for (k = 16; k; k >>= 1)
			acc += __shfl_down_sync(0xffffffffu, acc, k);
		if (!lane)
			out[(size_t)o * V + v] = acc;
	}
}

static unsigned int min_u(uint64_t a, unsigned int b)
{
	return a < b ? (unsigned int)a : b;
}

extern "C" int toy_cuda_k_weights(struct CUstream_st *s, uint16_t *E, int8_t *W, uint32_t *h0,
				  uint32_t V, uint32_t H, uint64_t seed, uint32_t lo, uint32_t n)
{
	uint64_t total = (uint64_t)V * n;
	unsigned int blocks = min_u((total + 255) / 256, 65535u);

	k_weights<<<blocks, 256, 0, s>>>(E, W, h0, V, H, tensor_base(seed, 0), tensor_base(seed, 1),
					 tensor_base(seed, 2), lo, n);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_round(struct CUstream_st *s, const struct toy_cuda_kstream *ks,
				uint32_t n_streams, const uint32_t *tok, uint32_t *state,
				const uint16_t *E, const uint32_t *h0, int16_t *f, uint32_t n,
				uint32_t lo)
{
	dim3 grid((n + 127) / 128, min_u(n_streams, MAX_GRID_Y));

	if (!n_streams)
		return 0;
	k_round<<<grid, 128, 0, s>>>(ks, n_streams, tok, state, E, h0, f, n, lo);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_logits(struct CUstream_st *s, const int8_t *W, const int16_t *f,
				 int32_t *out, uint32_t n_out, uint32_t V, uint32_t n)
{
	dim3 grid((V + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, min_u(n_out, MAX_GRID_Y));

	if (!n_out)
		return 0;
	k_logits<<<grid, 32 * ROWS_PER_BLOCK, 0, s>>>(W, f, out, n_out, V, n);
	return (int)cudaGetLastError();
}

/* ---- for gpu/'s tests and benchmarks (check_gpu, bench-resident) ---- */

/* The epoch: an acquire at system scope, so loads after it see what the host
 * stored before it (runtime/epoch.c's release). */
__device__ static inline uint64_t ld_acquire64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__global__ void k_empty(void)
{
}

__global__ void k_sleep(uint64_t ns)
{
	uint64_t t0, t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
	do {
		__nanosleep(1000);
		asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	} while (t - t0 < ns);
}

__global__ void k_flag(uint64_t *flag, uint64_t v)
{
	*(volatile uint64_t *)flag = v;
	__threadfence_system();
}

__global__ void k_poll_flag(const uint64_t *d_epoch, uint64_t want, uint64_t *flag, uint64_t v)
{
	uint32_t polls = 0, nap = 0;

	while ((int64_t)(ld_acquire64(d_epoch) - want) < 0) {
		if (++polls > POLL_FAST) {
			nap = nap ? (nap * 2 > POLL_SLEEP_MAX ? POLL_SLEEP_MAX : nap * 2) : 64;
			__nanosleep(nap);
		}
	}
	*(volatile uint64_t *)flag = v;
	__threadfence_system();
}

extern "C" int toy_cuda_k_poll_flag(struct CUstream_st *s, const uint64_t *d_epoch,
				    uint64_t want, uint64_t *flag, uint64_t v)
{
	k_poll_flag<<<1, 1, 0, s>>>(d_epoch, want, flag, v);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_flag(struct CUstream_st *s, uint64_t *flag, uint64_t v)
{
	k_flag<<<1, 1, 0, s>>>(flag, v);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_empty(struct CUstream_st *s)
{
	k_empty<<<1, 1, 0, s>>>();
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_sleep(struct CUstream_st *s, uint64_t ns)
{
	k_sleep<<<1, 1, 0, s>>>(ns);
	return (int)cudaGetLastError();
}
