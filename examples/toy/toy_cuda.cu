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
			uint32_t n, uint32_t lo, const uint32_t *gate)
{
	uint32_t k = blockIdx.x * blockDim.x + threadIdx.x, y, j, t, last, h, hd;

	/* launched early behind the plan kernel (programmatic dependent launch):
	 * wait for all of its work, memory included; without one, a no-op */
	if (gate)
		asm volatile("griddepcontrol.wait;" ::: "memory");
	if (k >= n || (gate && *gate))
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
			 uint32_t V, uint32_t n, const uint32_t *gate)
{
	uint32_t lane = threadIdx.x & 31, v = blockIdx.x * ROWS_PER_BLOCK + (threadIdx.x >> 5);
	uint32_t o, k;
	int32_t acc;

	if (gate) {
		if (gate[0])
			return;	/* the whole block: the gate is per kernel */
		n_out = min(n_out, gate[1]);
	}
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

/* Host-mapped memory, read once per use: the host may have stored since. */
__device__ static inline uint32_t ld32(const uint8_t *p)
{
	return *(const volatile uint32_t *)p;
}

__device__ static inline uint64_t ld64(const uint8_t *p)
{
	return *(const volatile uint64_t *)p;
}

/* The epoch: an acquire at system scope, so the descriptor's loads after it
 * (in this thread, and after a barrier in the block's) see what the host
 * stored before it (runtime/epoch.c's release). */
__device__ static inline uint64_t ld_acquire64(const uint64_t *p)
{
	uint64_t v;

	asm volatile("ld.acquire.sys.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
	return v;
}

__device__ static inline uint64_t gtimer(void)
{
	uint64_t t;

	asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
	return t;
}

/* ROUND payload (WIRE.md): u64 round_id, u32 n_streams, u32 0, then 40 bytes a
 * stream (u64 id, u32 position, u32 n_tokens, u32 n_draft, ...), then tokens. */
#define W_HDR 16u
#define W_STREAM 40u
#define TOK_PER_THREAD (TOY_CUDA_TOKWIN_MAX / TOY_CUDA_PLAN_THREADS)

/* The most descriptor bytes the plan kernel copies: the header, the streams
 * and the token window, in 16-byte chunks */
#define DESC_CHUNKS ((W_HDR + TOY_CUDA_PRED_MAX * W_STREAM + 4 * TOY_CUDA_TOKWIN_MAX + 15) / 16)

/* 16 bytes of host-mapped memory in one load, never cached (ld.volatile is a
 * relaxed load at system scope): the host rewrites the region every round */
__device__ static inline uint4 ld128(const uint8_t *p)
{
	uint4 v;

	asm volatile("ld.volatile.global.v4.u32 {%0, %1, %2, %3}, [%4];"
		     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
		     : "l"(p)
		     : "memory");
	return v;
}

/* Fields of the copy in shared memory: a ROUND's u32 fields sit at multiples
 * of 4 and its u64 ones at multiples of 8 (W_HDR and W_STREAM are) */
__device__ static inline uint32_t sh32(const uint8_t *p)
{
	return *(const uint32_t *)p;
}

__device__ static inline uint64_t sh64(const uint8_t *p)
{
	return *(const uint64_t *)p;
}

/*
 * One block of TOY_CUDA_PLAN_THREADS threads. @pred is host-mapped pinned
 * memory the host filled before it pre-armed this kernel (a graph holds its
 * address, so it is read at run time, never cached: the host reuses the slot
 * two arms later); @n, @dmax, @tokwin and @V are fixed for the kernel's graph.
 * Every read over PCIe that does not depend on the round is issued before
 * the wait (the prediction: its latency hides behind the poll). Thread 0
 * waits for the epoch; then the block copies the descriptor's armed extent
 * into shared memory, 16 bytes a thread and load, all loads in flight at
 * once: one round trip to host memory, then everything is compared from
 * shared memory (bitwise ors, no early exit). The host armed it only with
 * @tokwin tokens of stream @n's layout inside the region (rounded up to 16
 * bytes), so a shorter descriptor is read past its end harmlessly (stale
 * bytes, and the length check fails).
 */
__global__ void k_resident_plan(const uint64_t *d_epoch, const uint32_t *d_len,
				const uint8_t *desc, toy_cuda_kpredict *pred, uint32_t n,
				uint32_t dmax, uint32_t tokwin, uint32_t V, toy_cuda_kstream *ks,
				uint32_t *tok, uint32_t *gate)
{
	uint8_t *pp = (uint8_t *)pred;
	__shared__ uint4 sh_desc[DESC_CHUNKS];
	__shared__ uint64_t sh_want, sh_ep, sh_t0, sh_t1;
	__shared__ uint32_t sh_polls, sh_total, sh_nout, sh_len;
	__shared__ uint32_t sh_ntok[TOY_CUDA_PRED_MAX], sh_ndr[TOY_CUDA_PRED_MAX];
	__shared__ uint32_t sh_toff[TOY_CUDA_PRED_MAX], sh_ooff[TOY_CUDA_PRED_MAX];
	__shared__ int bad;
	const uint8_t *sd = (const uint8_t *)sh_desc, *st, *ps;
	uint32_t i = threadIdx.x, r, j, pos = 0, ppos = 0, ntok = 0, ndr = 0, slot = 0, last = 0;
	uint32_t maxtok = 0, dn, polls = 0, nap = 0, c, nchunk;
	uint64_t want, sid = 0, pid = 0, ep, d0, t0;

	/* the fold kernel may be launched now: it waits for this grid's end
	 * (griddepcontrol.wait), so it is resident when the round comes */
	asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
	/* the prediction, before the wait: it does not change once armed */
	if (i < n) {
		ps = pp + offsetof(toy_cuda_kpredict, s) + (size_t)i * sizeof(pred->s[0]);
		pid = ld64(ps);
		ppos = ld32(ps + 8);
		slot = ld32(ps + 12);
		last = ld32(ps + 16);
		maxtok = ld32(ps + 20);
	}
	if (i == 0) {
		t0 = gtimer();
		want = ld64(pp + offsetof(toy_cuda_kpredict, want));
		ep = ld_acquire64(d_epoch);
		while ((int64_t)(ep - want) < 0) {
			if (++polls > TOY_CUDA_POLL_FAST) {
				/* given up by the host: the epoch stays short, so bad */
				if (ld32(pp + offsetof(toy_cuda_kpredict, cancel)))
					break;
				nap = nap ? (nap * 2 > TOY_CUDA_POLL_SLEEP_MAX ?
					     TOY_CUDA_POLL_SLEEP_MAX : nap * 2) : 64;
				__nanosleep(nap);
			}
			ep = ld_acquire64(d_epoch);
		}
		sh_t1 = gtimer();
		sh_t0 = t0;
		sh_want = want;
		sh_ep = ep;
		sh_polls = polls;
		bad = 0;
	}
	__syncthreads();
	/* the descriptor, once: every chunk's load issued before any is used */
	want = sh_want;
	nchunk = (W_HDR + n * W_STREAM + 4 * tokwin + 15) / 16;
	if (i == 0)
		sh_len = *(const volatile uint32_t *)d_len;
	for (c = i; c < nchunk; c += TOY_CUDA_PLAN_THREADS)
		sh_desc[c] = ld128(desc + 16 * (size_t)c);
	__syncthreads();
	if (i < n) {
		st = sd + W_HDR + i * W_STREAM;
		sid = sh64(st);
		pos = sh32(st + 8);
		ntok = sh32(st + 12);
		ndr = sh32(st + 16);
		sh_ntok[i] = ntok;
		sh_ndr[i] = ndr;
	}
	__syncthreads();
	if (i == 0) {
		uint64_t tot = 0, out = 0;

		for (j = 0; j < n; j++) {
			sh_toff[j] = (uint32_t)tot;
			sh_ooff[j] = (uint32_t)out;
			tot += (uint64_t)sh_ntok[j] + sh_ndr[j];
			out += (uint64_t)sh_ndr[j] + 1;
		}
		d0 = sh64(sd);
		dn = sh32(sd + 8);
		sh_total = tot > tokwin ? tokwin : (uint32_t)tot;
		sh_nout = (uint32_t)(out > 0xffffffffu ? 0xffffffffu : out);
		bad |= (sh_ep != want) | (tot > tokwin) |
		       ((uint64_t)sh_len != W_HDR + (uint64_t)n * W_STREAM + 4 * tot) |
		       (d0 != want) | (dn != n);
	}
	__syncthreads();
	if (i < n) {
		if ((sid != pid) | (pos != ppos) | (ntok < 1) | (ntok > maxtok) | (ndr > dmax))
			atomicOr(&bad, 1);
		ks[i].slot = slot;
		ks[i].fresh = 0;
		ks[i].tok_off = sh_toff[i];
		ks[i].n_tokens = ntok;
		ks[i].n_draft = ndr;
		ks[i].out_off = sh_ooff[i];
		ks[i].last_prev = last;
		ks[i].pad = 0;
	}
#pragma unroll
	for (r = 0; r < TOK_PER_THREAD; r++) {
		j = i + r * TOY_CUDA_PLAN_THREADS;
		if (j < sh_total) {
			uint32_t t = sh32(sd + W_HDR + n * W_STREAM + 4 * j);

			if (t >= V)
				atomicOr(&bad, 1);
			tok[j] = t;
		}
	}
	__syncthreads();
	if (i == 0) {
		gate[0] = bad ? 1u : 0u;
		gate[1] = bad ? 0u : sh_nout;
		pred->t_start = sh_t0;
		pred->t_seen = sh_t1;
		pred->t_plan = gtimer();
		pred->polls = sh_polls;
		pred->gate = bad ? 1u : 0u;
		/* every read of the slot is done (their values are used above); the
		 * stamps before it (a release store, no full fence: the grid's end
		 * makes it visible to the fold kernel and the round's mark) */
		asm volatile("st.release.sys.global.u64 [%0], %1;"
			     :
			     : "l"(pp + offsetof(toy_cuda_kpredict, done)), "l"(want)
			     : "memory");
	}
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
	k_round<<<grid, 128, 0, s>>>(ks, n_streams, tok, state, E, h0, f, n, lo, NULL);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_round_gated(struct CUstream_st *s, const struct toy_cuda_kstream *ks,
				      uint32_t n_streams, const uint32_t *tok, uint32_t *state,
				      const uint16_t *E, const uint32_t *h0, int16_t *f,
				      uint32_t n, uint32_t lo, const uint32_t *gate, int pdl)
{
	dim3 grid((n + 127) / 128, min_u(n_streams, MAX_GRID_Y));
	cudaLaunchAttribute at = {};
	cudaLaunchConfig_t cfg = {};
	cudaError_t e;

	if (!n_streams)
		return 0;
	if (pdl) {
		at.id = cudaLaunchAttributeProgrammaticStreamSerialization;
		at.val.programmaticStreamSerializationAllowed = 1;
		cfg.gridDim = grid;
		cfg.blockDim = dim3(128);
		cfg.stream = s;
		cfg.attrs = &at;
		cfg.numAttrs = 1;
		e = cudaLaunchKernelEx(&cfg, k_round, ks, n_streams, tok, state, E, h0, f, n, lo,
				       gate);
		if (e == cudaSuccess)
			return 0;
		(void)cudaGetLastError();	/* not sticky: launch it the plain way */
		if (e == cudaErrorStreamCaptureInvalidated || e == cudaErrorStreamCaptureUnsupported)
			return (int)e;	/* a capture that failed stays failed */
	}
	k_round<<<grid, 128, 0, s>>>(ks, n_streams, tok, state, E, h0, f, n, lo, gate);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_resident_plan(struct CUstream_st *s, const uint64_t *d_epoch,
					const uint32_t *d_len, const uint8_t *desc,
					struct toy_cuda_kpredict *pred, uint32_t n, uint32_t dmax,
					uint32_t tokwin, uint32_t V, struct toy_cuda_kstream *ks,
					uint32_t *tok, uint32_t *gate)
{
	if (!n || n > TOY_CUDA_PRED_MAX || tokwin > TOY_CUDA_TOKWIN_MAX)
		return (int)cudaErrorInvalidValue;
	k_resident_plan<<<1, TOY_CUDA_PLAN_THREADS, 0, s>>>(d_epoch, d_len, desc, pred, n, dmax,
							     tokwin, V, ks, tok, gate);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_logits(struct CUstream_st *s, const int8_t *W, const int16_t *f,
				 int32_t *out, uint32_t n_out, uint32_t V, uint32_t n)
{
	dim3 grid((V + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, min_u(n_out, MAX_GRID_Y));

	if (!n_out)
		return 0;
	k_logits<<<grid, 32 * ROWS_PER_BLOCK, 0, s>>>(W, f, out, n_out, V, n, NULL);
	return (int)cudaGetLastError();
}

extern "C" int toy_cuda_k_logits_gated(struct CUstream_st *s, const int8_t *W, const int16_t *f,
				       int32_t *out, uint32_t n_out, uint32_t V, uint32_t n,
				       const uint32_t *gate)
{
	dim3 grid((V + ROWS_PER_BLOCK - 1) / ROWS_PER_BLOCK, min_u(n_out, MAX_GRID_Y));

	if (!n_out)
		return 0;
	k_logits<<<grid, 32 * ROWS_PER_BLOCK, 0, s>>>(W, f, out, n_out, V, n, gate);
	return (int)cudaGetLastError();
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
		if (++polls > TOY_CUDA_POLL_FAST) {
			nap = nap ? (nap * 2 > TOY_CUDA_POLL_SLEEP_MAX ? TOY_CUDA_POLL_SLEEP_MAX
								       : nap * 2) : 64;
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
