/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CUDA backend (toy_cuda.h). The kernels are toy_cuda.cu;
 * toy_cuda_stub.c stands in for both in a build without CUDA or NCCL.
 *
 * Ownership: launch() validates the round against a host mirror of the
 * stream table and applies it at once: a struct toy_table without states
 * (toy_table_init_rows()), so the round passes the same toy_table_admit() as
 * the CPU backend's, and each stream's row indexes its state in device
 * memory. The GPU work it enqueues is stream-ordered, so later rounds,
 * retire() and row reuse may follow immediately. Each round is a job with its
 * own pinned buffers (the uploaded plan, and on the leader the summed
 * logits), owned by the GPU from launch to the notifier's callback; the
 * leader keeps the last completed job for token() until the next launch.
 * Device buffers are shared by every round: the stream orders their reuse,
 * and they grow with stream-ordered cudaMallocAsync/cudaFreeAsync.
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cuda_runtime_api.h>
/* nccl.h declares a few functions without prototypes, e.g. ncclGroupStart() */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "clock.h"
#include "toy_cuda.h"
#include "toy_cuda_k.h"

#define INPROGRESS_S	30	/* bound of the wait for an ncclInProgress collective */
#define GRAPH_SLOTS	16	/* round shapes with a CUDA graph (least recently used goes) */

/*
 * A round shape (streams, outputs): the kernels' grids and arguments and the
 * allreduce's count depend on nothing else, so one captured graph serves
 * every round of that shape until a device buffer moves.
 */
struct gslot {
	uint32_t n_streams, n_out;
	uint32_t seen;		/* rounds of this shape so far */
	bool failed;		/* capture failed: this shape runs eagerly */
	cudaGraphExec_t exec;
	uint64_t used;		/* LRU tick */
};

struct job {
	struct toy_cuda *b;
	struct rk_sched *s;	/* the round's completion target (NULL: only counted) */
	struct toy_round r;
	int status;
	uint64_t t_launch;
	uint8_t *in_h;		/* pinned: kstreams, then tokens */
	size_t in_cap, in_len;
	int32_t *logits_h;	/* pinned, leader: n_out * V summed logits */
	size_t logits_cap;	/* elements */
	struct job *next;
};

struct toy_cuda {
	struct rk_loop *loop;
	uint32_t rank, size;
	int dev;
	uint32_t V, H, n, lo;
	cudaStream_t stream;
	struct rk_gpu_notifier *notif;
	struct rk_nccl *nccl;		/* TP > 1 */
	struct toy_reports reports;
	int failed;			/* sticky: the device state no longer matches the mirror */

	/* device memory */
	uint16_t *dE;
	int8_t *dW;
	uint32_t *dh0;
	uint32_t *dstate;		/* [state_cap][n]: the states, a row per stream */
	uint32_t state_cap;
	void *din;
	size_t din_cap;
	int16_t *df;
	size_t df_cap;
	int32_t *dlog;
	size_t dlog_cap;

	struct toy_table tab;		/* the host mirror of the stream table: no states */

	/* CUDA graphs of the round shapes seen twice (toy_cuda_set_graphs) */
	bool graphs;
	struct gslot gs[GRAPH_SLOTS];
	uint64_t gtick;

	/* jobs */
	struct job *free_jobs;
	struct job *wait_head, *wait_tail;	/* planned, waiting for NCCL */
	unsigned int inflight;			/* launched, not yet reported */
	struct job *cur;			/* leader: the last completed round */

	struct toy_cuda_stats stats;
};

/* CUDA and NCCL errors are converted once, here: logged, then -EIO (-ENOMEM). */
static int cuda_check(const struct toy_cuda *b, int e, const char *what)
{
	if (!e)
		return 0;
	fprintf(stderr, "toy_cuda[r%u]: %s: %s (%s)\n", b->rank, what,
		cudaGetErrorName((cudaError_t)e), cudaGetErrorString((cudaError_t)e));
	return e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}
#define CU(b, call) cuda_check((b), (int)(call), #call)

static int nccl_check(const struct toy_cuda *b, ncclResult_t r, const char *what)
{
	if (r == ncclSuccess)
		return 0;
	fprintf(stderr, "toy_cuda[r%u]: %s: %s\n", b->rank, what, ncclGetErrorString(r));
	return -EIO;
}

/* ---- memory ------------------------------------------------------------------------ */

/* A device buffer moved: every graph holds the old address. */
static void graphs_drop(struct toy_cuda *b)
{
	unsigned int i;

	for (i = 0; i < GRAPH_SLOTS; i++) {
		/* an exec still in flight is freed once it completes (CUDA's rule) */
		if (b->gs[i].exec)
			cudaGraphExecDestroy(b->gs[i].exec);
		b->gs[i] = (struct gslot){ 0 };
	}
}

/* Grow a device buffer in stream order (the old one is freed after its last use). */
static int dgrow(struct toy_cuda *b, void **p, size_t *cap, size_t need)
{
	size_t c;
	void *q;
	int ret;

	if (need <= *cap)
		return 0;
	c = need < 65536 ? 65536 : need * 2;
	ret = CU(b, cudaMallocAsync(&q, c, b->stream));
	if (ret)
		return ret;
	if (*p)
		cudaFreeAsync(*p, b->stream);
	*p = q;
	*cap = c;
	graphs_drop(b);
	return 0;
}

/* Grow the state pool to at least @rows rows, copying the rows in stream order. */
static int state_reserve(struct toy_cuda *b, uint32_t rows)
{
	uint32_t cap = b->state_cap ? b->state_cap : 16;
	size_t row = (size_t)b->n * sizeof(uint32_t);
	uint32_t *q;
	int ret;

	if (rows <= b->state_cap)
		return 0;
	while (cap < rows)
		cap *= 2;
	ret = CU(b, cudaMallocAsync((void **)&q, cap * row, b->stream));
	if (ret)
		return ret;
	if (b->dstate) {
		ret = CU(b, cudaMemcpyAsync(q, b->dstate, b->state_cap * row,
					    cudaMemcpyDeviceToDevice, b->stream));
		if (ret) {
			cudaFreeAsync(q, b->stream);
			return ret;
		}
		cudaFreeAsync(b->dstate, b->stream);
	}
	b->dstate = q;
	b->state_cap = cap;
	graphs_drop(b);
	return 0;
}

/* Grow a pinned host buffer; only for a job the GPU no longer uses. */
static int hgrow(struct toy_cuda *b, void **p, size_t *cap, size_t need_bytes)
{
	size_t c;
	void *q;
	int ret;

	if (need_bytes <= *cap)
		return 0;
	c = need_bytes < 65536 ? 65536 : need_bytes * 2;
	ret = CU(b, cudaHostAlloc(&q, c, cudaHostAllocDefault));
	if (ret)
		return ret;
	if (*p)
		cudaFreeHost(*p);
	*p = q;
	*cap = c;
	return 0;
}

/* ---- the mirror of the stream table ----------------------------------------------- */

/*
 * Validate @job's round and apply it to the mirror (toy_table_admit(): nothing
 * changes on failure), writing the upload into job->in_h: a kstream per
 * stream, its row and the last token folded before this round, then the
 * round's tokens. Return: 0, -EPROTO (position mismatch), -EINVAL (duplicate
 * stream, bad offsets), -ENOMEM, -EIO.
 */
static int plan(struct toy_cuda *b, struct job *job)
{
	const struct toy_round *r = &job->r;
	struct toy_cuda_kstream *ks;
	struct toy_entry *e;
	uint32_t i, rows;
	size_t len;
	int ret;

	/* the buffers first, so a failure leaves the mirror as it was */
	len = (size_t)r->n_streams * sizeof(*ks) + (size_t)r->n_tok * sizeof(uint32_t);
	ret = hgrow(b, (void **)&job->in_h, &job->in_cap, len);
	/* new streams take a free row or the next one: at most n_streams more */
	rows = b->tab.rows + r->n_streams;
	if (!ret && rows > b->state_cap)
		ret = state_reserve(b, rows);
	if (!ret)
		ret = toy_table_admit(&b->tab, r);
	if (ret)
		return ret;
	/* the upload, and the mirror after this round (drafts never commit) */
	ks = (struct toy_cuda_kstream *)job->in_h;
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];

		e = toy_table_get(&b->tab, s->id);
		ks[i] = (struct toy_cuda_kstream){
			.slot = e->row,
			.fresh = e->born == b->tab.seq,
			.tok_off = s->tok_off,
			.n_tokens = s->n_tokens,
			.n_draft = s->n_draft,
			.out_off = s->out_off,
			.last_prev = e->st.last,
		};
		e->pos += s->n_tokens;
		if (s->n_tokens)
			e->st.last = r->tok[s->tok_off + s->n_tokens - 1];
	}
	memcpy(job->in_h + (size_t)r->n_streams * sizeof(*ks), r->tok,
	       (size_t)r->n_tok * sizeof(uint32_t));
	job->in_len = len;
	return 0;
}

/* ---- the GPU work of a round ----------------------------------------------------- */

/*
 * A non-blocking communicator may answer ncclInProgress (e.g. while it sets up
 * connections on first use); the stream must not get more work until its
 * state is ncclSuccess (NCCL's rule), so wait for that here, bounded.
 */
static int nccl_settle(struct toy_cuda *b, ncclComm_t comm, ncclResult_t r, const char *what)
{
	ncclResult_t as = ncclInProgress;
	uint64_t until;

	if (r != ncclInProgress)
		return nccl_check(b, r, what);
	b->stats.nccl_inprogress++;
	until = now_ns() + INPROGRESS_S * 1000000000ull;
	while (now_ns() < until) {
		r = ncclCommGetAsyncError(comm, &as);
		if (r != ncclSuccess)
			return nccl_check(b, r, "ncclCommGetAsyncError");
		if (as != ncclInProgress)
			return nccl_check(b, as, what);
		nanosleep(&(struct timespec){ .tv_nsec = 20000 }, NULL);
	}
	fprintf(stderr, "toy_cuda[r%u]: %s: still in progress after %d s\n", b->rank, what,
		INPROGRESS_S);
	return -ETIMEDOUT;
}

static int allreduce(struct toy_cuda *b, size_t count)
{
	ncclComm_t comm = rk_nccl_comm(b->nccl);

	if (!comm)
		return rk_nccl_state(b->nccl) < 0 ? rk_nccl_state(b->nccl) : -ENOTCONN;
	return nccl_settle(b, comm,
			   ncclAllReduce(b->dlog, b->dlog, count, ncclInt32, ncclSum, comm,
					 b->stream),
			   "ncclAllReduce");
}

/* The fold and logits kernels, and the allreduce: the part of a round a graph can hold. */
static int compute(struct toy_cuda *b, const struct toy_round *r, size_t nlog)
{
	size_t ks_len = (size_t)r->n_streams * sizeof(struct toy_cuda_kstream);
	int ret;

	ret = CU(b, toy_cuda_k_round(b->stream, b->din, r->n_streams,
				     (const uint32_t *)((const uint8_t *)b->din + ks_len),
				     b->dstate, b->dE, b->dh0, b->df, b->n, b->lo));
	if (!ret)
		ret = CU(b, toy_cuda_k_logits(b->stream, b->dW, b->df, b->dlog, r->n_out, b->V, b->n));
	if (!ret && b->size > 1)
		ret = allreduce(b, nlog);
	return ret;
}

/*
 * The graph slot of @r's shape: NULL on its first round (most shapes of a
 * prefill never come back) and for a shape whose capture failed; else the
 * slot, with an exec captured now if it has none yet. Captured with the
 * stream in thread-local capture mode: nothing runs, the round's work is
 * recorded; a failure ends the capture and that shape stays eager.
 */
static struct gslot *graph_for(struct toy_cuda *b, const struct toy_round *r, size_t nlog)
{
	struct gslot *g = NULL, *lru = &b->gs[0];
	enum cudaStreamCaptureStatus cs;
	cudaGraph_t graph = NULL;
	unsigned int i;
	int ret;

	for (i = 0; i < GRAPH_SLOTS; i++) {
		if (b->gs[i].seen && b->gs[i].n_streams == r->n_streams &&
		    b->gs[i].n_out == r->n_out) {
			g = &b->gs[i];
			break;
		}
		if (b->gs[i].used < lru->used)
			lru = &b->gs[i];
	}
	if (!g) {
		if (lru->exec)
			cudaGraphExecDestroy(lru->exec);
		*lru = (struct gslot){ .n_streams = r->n_streams, .n_out = r->n_out };
		g = lru;
	}
	g->used = ++b->gtick;
	if (g->seen++ == 0 || g->failed)
		return NULL;
	if (g->exec)
		return g;
	ret = CU(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
	if (!ret) {
		ret = compute(b, r, nlog);
		/* ends the capture whatever happened inside it */
		if (CU(b, cudaStreamEndCapture(b->stream, &graph)) && !ret)
			ret = -EIO;
	}
	if (!ret)
		ret = CU(b, cudaGraphInstantiate(&g->exec, graph, 0));
	if (graph)
		cudaGraphDestroy(graph);
	if (ret || cudaStreamIsCapturing(b->stream, &cs) || cs != cudaStreamCaptureStatusNone) {
		fprintf(stderr, "toy_cuda[r%u]: no graph for %u streams, %u outputs: eager\n",
			b->rank, r->n_streams, r->n_out);
		g->failed = true;
		g->exec = NULL;
		return NULL;
	}
	b->stats.graph_captures++;
	return g;
}

/* Enqueue a planned round: upload, fold + features, logits, allreduce, copy, mark. */
static int enqueue(struct toy_cuda *b, struct job *job)
{
	const struct toy_round *r = &job->r;
	size_t nlog = (size_t)r->n_out * b->V;
	uint64_t t0 = now_ns(), t1, t2, t3;
	struct gslot *g = NULL;
	int ret;

	ret = CU(b, cudaSetDevice(b->dev));
	if (!ret)
		ret = dgrow(b, &b->din, &b->din_cap, job->in_len);
	if (!ret)
		ret = dgrow(b, (void **)&b->df, &b->df_cap, (size_t)r->n_out * b->n * sizeof(int16_t));
	if (!ret)
		ret = dgrow(b, (void **)&b->dlog, &b->dlog_cap, nlog * sizeof(int32_t));
	if (!ret && b->rank == 0)
		ret = hgrow(b, (void **)&job->logits_h, &job->logits_cap, nlog * sizeof(int32_t));
	if (ret)
		return ret;
	ret = CU(b, cudaMemcpyAsync(b->din, job->in_h, job->in_len, cudaMemcpyHostToDevice,
				    b->stream));
	t1 = now_ns();
	/* no comm: aborted or going, so its release hook has dropped the graphs */
	if (!ret && b->graphs && r->n_streams && r->n_out && (b->size == 1 || rk_nccl_comm(b->nccl)))
		g = graph_for(b, r, nlog);
	if (!ret && g) {
		ret = CU(b, cudaGraphLaunch(g->exec, b->stream));
		if (!ret)
			b->stats.graph_launches++;
	} else if (!ret) {
		ret = compute(b, r, nlog);
	}
	t2 = now_ns();
	if (!ret && b->rank == 0)
		ret = CU(b, cudaMemcpyAsync(job->logits_h, b->dlog, nlog * sizeof(int32_t),
					    cudaMemcpyDeviceToHost, b->stream));
	t3 = now_ns();
	if (!ret)
		ret = rk_gpu_notifier_mark(b->notif, (uint64_t)(uintptr_t)job);
	b->stats.enqueues++;
	b->stats.ns_upload += t1 - t0;
	b->stats.ns_compute += t2 - t1;
	b->stats.ns_copy += t3 - t2;
	b->stats.ns_mark += now_ns() - t3;
	return ret;
}

/*
 * A round that failed validation on this rank still joins the allreduce (with
 * zeros), so the other ranks' collective never waits for it; the round fails
 * through the scheduler.
 */
static void join_with_zeros(struct toy_cuda *b, uint32_t n_out)
{
	size_t nlog = (size_t)n_out * b->V;

	if (b->size < 2 || !rk_nccl_comm(b->nccl) || !nlog)
		return;
	if (!dgrow(b, (void **)&b->dlog, &b->dlog_cap, nlog * sizeof(int32_t)) &&
	    !CU(b, cudaMemsetAsync(b->dlog, 0, nlog * sizeof(int32_t), b->stream)))
		allreduce(b, nlog);
}

/* ---- jobs ---------------------------------------------------------------------------- */

static struct job *job_get(struct toy_cuda *b)
{
	struct job *job = b->free_jobs;

	if (job) {
		b->free_jobs = job->next;
	} else {
		job = calloc(1, sizeof(*job));
		if (!job)
			return NULL;
		job->b = b;
	}
	job->next = NULL;
	return job;
}

static void job_put(struct toy_cuda *b, struct job *job)
{
	job->next = b->free_jobs;
	b->free_jobs = job;
}

static void job_free(struct job *job)
{
	toy_round_fini(&job->r);
	if (job->in_h)
		cudaFreeHost(job->in_h);
	if (job->logits_h)
		cudaFreeHost(job->logits_h);
	free(job);
}

/* The end of a round on this rank: hand it back (loop thread). */
static void finish(struct toy_cuda *b, struct job *job, int status)
{
	struct rk_sched *s = job->s;
	uint64_t id = job->r.round_id;

	b->inflight--;
	if (b->nccl && !b->inflight)
		rk_nccl_busy(b->nccl, false);	/* toy_report() may launch: busy again */
	b->stats.rounds++;
	b->stats.outputs += job->r.n_out;
	b->stats.ns_round += now_ns() - job->t_launch;
	job->status = status;
	if (b->rank == 0) {
		if (b->cur)
			job_put(b, b->cur);
		b->cur = job;
	} else {
		job_put(b, job);
	}
	toy_report(&b->reports, s, id, status);	/* last: it may launch */
}

static enum rk_activity on_mark(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct toy_cuda *b = arg;
	struct job *job = (struct job *)(uintptr_t)cookie;
	int status = 0;

	(void)n;
	/* after an abort the collective's results are garbage */
	if (b->size > 1 && rk_nccl_state(b->nccl) < 0)
		status = rk_nccl_state(b->nccl);
	finish(b, job, status);
	return RK_BUSY;
}

/* NCCL came up (or failed): start or fail the rounds that waited for it. */
static void on_nccl_ready(struct rk_nccl *nc, int status, void *arg)
{
	struct toy_cuda *b = arg;
	struct job *job, *next;
	int ret;

	(void)nc;
	job = b->wait_head;
	b->wait_head = b->wait_tail = NULL;
	for (; job; job = next) {
		next = job->next;
		job->next = NULL;
		ret = status ? status : b->failed;
		if (!ret) {
			ret = enqueue(b, job);
			if (ret)
				b->failed = ret;	/* later launches fail: order stays whole */
		}
		if (ret)
			finish(b, job, ret);
	}
}

/* NCCL is about to abort or destroy the communicator: it waits for our graphs to go. */
static void on_nccl_release(struct rk_nccl *nc, void *arg)
{
	struct toy_cuda *b = arg;

	(void)nc;
	/* after this rk_nccl_comm() is NULL (abort) or the backend is going (destroy),
	 * so enqueue() captures nothing more */
	graphs_drop(b);
}

static void on_nccl_error(struct rk_nccl *nc, int err, void *arg)
{
	struct toy_cuda *b = arg;

	(void)nc;
	fprintf(stderr, "toy_cuda[r%u]: NCCL failed (%s): rounds in flight fail\n", b->rank,
		rk_strerror(err));
}

/* ---- the ops -------------------------------------------------------------------------- */

static int cuda_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		       unsigned int flags)
{
	struct toy_cuda *b = ctx;
	struct job *job;
	int ret, st = 1;

	(void)flags;
	if (b->failed)
		return b->failed;
	if (b->size > 1) {
		st = rk_nccl_state(b->nccl);
		if (st < 0)
			return st;
	}
	job = job_get(b);
	if (!job)
		return -ENOMEM;
	ret = toy_round_copy(&job->r, round, b->V);
	if (ret) {
		job_put(b, job);
		return ret;
	}
	if (b->rank == 0) {
		/* token() is done with the previous round once the next launches */
		if (b->cur)
			job_put(b, b->cur);
		b->cur = NULL;
	}
	ret = plan(b, job);
	if (ret) {
		join_with_zeros(b, job->r.n_out);
		job_put(b, job);
		return ret;
	}
	job->t_launch = now_ns();
	job->status = 0;
	job->s = s;
	b->inflight++;
	if (b->nccl)
		rk_nccl_busy(b->nccl, true);	/* watch NCCL's async errors while it works */
	if (st == 1 && !b->wait_head) {
		ret = enqueue(b, job);
		if (ret) {
			b->failed = ret;	/* the mirror is ahead of the device now */
			b->inflight--;
			job_put(b, job);
		}
		return ret;
	}
	if (b->wait_tail)
		b->wait_tail->next = job;
	else
		b->wait_head = job;
	b->wait_tail = job;
	return 0;
}

static int cuda_token(void *ctx, uint32_t i, uint32_t j, uint32_t *tok)
{
	struct toy_cuda *b = ctx;
	const struct job *job = b->cur;

	if (b->rank != 0)
		return -EPERM;
	if (!job || job->status)
		return -EAGAIN;
	return toy_round_token(&job->r, job->logits_h, b->V, b->H, i, j, tok);
}

static void cuda_retire(void *ctx, uint64_t stream_id)
{
	struct toy_cuda *b = ctx;

	toy_table_retire(&b->tab, stream_id);	/* -ENOENT: already gone, fine */
}

const struct rk_backend_ops toy_cuda_ops = {
	.launch = cuda_launch,
	.token = cuda_token,
	.retire = cuda_retire,
};

/* ---- lifetime --------------------------------------------------------------------------- */

int toy_cuda_create(struct rk_world *w, const struct toy_params *p, int device,
		    enum rk_gpu_notify_mode mode, struct toy_cuda **out)
{
	struct toy_params def;
	struct toy_cuda *b;
	int ret, rank, size, ndev = 0;
	size_t vn;

	if (!w || !out)
		return -EINVAL;
	if (!p) {
		toy_params_init(&def);
		p = &def;
	}
	rank = rk_world_rank(w);
	size = rk_world_size(w);
	if (rank < 0 || size <= 0 || rank >= size || !p->V || p->V > TOY_MAX_V || !p->H ||
	    p->H > TOY_MAX_H || p->H % (uint32_t)size)
		return -EINVAL;
	if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev <= 0)
		return -ENODEV;
	if (device < 0)
		device = rank % ndev;
	if (device >= ndev)
		return -ENODEV;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	b->loop = rk_world_loop(w);
	b->rank = (uint32_t)rank;
	b->size = (uint32_t)size;
	b->dev = device;
	b->V = p->V;
	b->H = p->H;
	b->n = p->H / b->size;
	b->lo = b->rank * b->n;
	vn = (size_t)b->V * b->n;

	ret = toy_table_init_rows(&b->tab, b->V);
	if (ret)
		goto err_free;
	ret = CU(b, cudaSetDevice(device));
	if (ret)
		goto err_table;
	ret = CU(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
	if (ret)
		goto err_table;
	ret = CU(b, cudaMalloc((void **)&b->dE, vn * sizeof(*b->dE)));
	if (!ret)
		ret = CU(b, cudaMalloc((void **)&b->dW, vn));
	if (!ret)
		ret = CU(b, cudaMalloc((void **)&b->dh0, (size_t)b->n * sizeof(*b->dh0)));
	if (!ret)
		ret = CU(b, toy_cuda_k_weights(b->stream, b->dE, b->dW, b->dh0, b->V, b->H, p->seed,
					       b->lo, b->n));
	if (!ret)
		ret = CU(b, cudaStreamSynchronize(b->stream));
	if (ret)
		goto err_mem;
	ret = rk_gpu_notifier_create(b->loop, b->stream, mode, on_mark, b, &b->notif);
	if (ret)
		goto err_mem;
	/* a follower's share reaches the leader through the allreduce: nobody here
	 * waits for its completion, so the loop sleeps until the next ROUND */
	if (b->rank != 0)
		rk_gpu_notifier_set_lazy(b->notif, true);
	if (b->size > 1) {
		ret = rk_nccl_create(w, device, on_nccl_ready, b, &b->nccl);
		if (ret)
			goto err_notif;
		rk_nccl_set_error_cb(b->nccl, on_nccl_error, b);
		rk_nccl_set_release_cb(b->nccl, on_nccl_release, b);
	}
	*out = b;
	return 0;
err_notif:
	rk_gpu_notifier_destroy(b->notif, true);
err_mem:
	cudaFree(b->dh0);
	cudaFree(b->dW);
	cudaFree(b->dE);
	cudaStreamDestroy(b->stream);
err_table:
	toy_table_fini(&b->tab);
err_free:
	free(b);
	return ret;
}

int toy_cuda_ready(const struct toy_cuda *b)
{
	if (b->failed)
		return b->failed;
	return b->size > 1 ? rk_nccl_state(b->nccl) : 1;
}

uint64_t toy_cuda_reports(const struct toy_cuda *b, uint64_t *round_id, int *status)
{
	return toy_reports_get(&b->reports, round_id, status);
}

void toy_cuda_set_graphs(struct toy_cuda *b, bool on)
{
	if (!on)
		graphs_drop(b);
	b->graphs = on;
}

int toy_cuda_set_notify(struct toy_cuda *b, enum rk_gpu_notify_mode mode)
{
	return b->notif ? rk_gpu_notifier_set_mode(b->notif, mode) : -EOPNOTSUPP;
}

void toy_cuda_abort(struct toy_cuda *b)
{
	if (b->nccl)
		rk_nccl_abort(b->nccl);
}

bool toy_cuda_busy(const struct toy_cuda *b)
{
	return b->inflight > 0;
}

uint32_t toy_cuda_streams(const struct toy_cuda *b)
{
	return b->tab.count;
}

int toy_cuda_device(const struct toy_cuda *b)
{
	return b->dev;
}

const int32_t *toy_cuda_logits(const struct toy_cuda *b, uint32_t out)
{
	if (b->rank != 0 || !b->cur || b->cur->status || out >= b->cur->r.n_out)
		return NULL;
	return b->cur->logits_h + (size_t)out * b->V;
}

void toy_cuda_stats(const struct toy_cuda *b, struct toy_cuda_stats *out)
{
	*out = b->stats;
	rk_gpu_notifier_stats(b->notif, &out->notify, sizeof(out->notify));
}

int toy_cuda_destroy(struct toy_cuda *b)
{
	struct job *job;
	int ret = 0, r;

	if (!b)
		return 0;
	if (b->inflight)
		return -EBUSY;
	cudaSetDevice(b->dev);
	graphs_drop(b);
	ret = rk_gpu_notifier_destroy(b->notif, false);
	r = CU(b, cudaStreamSynchronize(b->stream));
	ret = ret ? ret : r;
	if (b->nccl) {
		r = rk_nccl_destroy(b->nccl);
		ret = ret ? ret : r;
	}
	if (b->cur)
		job_put(b, b->cur);
	while ((job = b->free_jobs)) {
		b->free_jobs = job->next;
		job_free(job);
	}
	cudaFree(b->din);
	cudaFree(b->df);
	cudaFree(b->dlog);
	cudaFree(b->dstate);
	cudaFree(b->dh0);
	cudaFree(b->dW);
	cudaFree(b->dE);
	cudaStreamDestroy(b->stream);
	toy_table_fini(&b->tab);
	free(b);
	return ret;
}
