/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CUDA backend (toy_cuda.h). The kernels are toy_cuda.cu.
 *
 * Ownership: launch() validates the round against a host mirror of the
 * stream table (ids, positions, last tokens, state rows) and updates it at
 * once, exactly as toy_table_exec() would; the GPU work it enqueues is
 * stream-ordered, so later rounds, retire() and state-row reuse may follow
 * immediately. Each round is a job with its own pinned buffers (the uploaded
 * plan, and on the leader the summed logits), owned by the GPU from launch to
 * the notifier's callback; the leader keeps the last completed job for
 * token() until the next launch. Device buffers are shared by every round:
 * the stream orders their reuse, and they grow with stream-ordered
 * cudaMallocAsync/cudaFreeAsync.
 *
 * Resident rounds (RK_RESIDENT=on; rk_sched.h "Round epochs"). While round N
 * runs, launch(N) pre-arms N+1 on the stream: one graph per shape (stream
 * count, draft bound) and slot (or its work one call at a time without
 * graphs): a plan kernel that waits for the scheduler's epoch to reach N+1
 * by polling the region registered with CUDA (or, TOY_CUDA_WAIT_STREAM,
 * behind a cuStreamWaitValue64 on it, rk_gpu_epoch_wait()), reads N+1's
 * descriptor from the mapped region and compares it with the prediction (the
 * same streams at their next positions, each with 1 to 1 + its drafts in N
 * inputs and at most the most drafts seen), which the host wrote into one of
 * two alternating host-mapped slots, writing the kstreams, tokens, output
 * count and a gate word, then the fold kernel (launched early behind it,
 * programmatic dependent launch) and the logits kernel, which return at once
 * when the gate says the round is not the predicted one; at TP1 also the
 * leader's copy into the slot's logits buffer, and the mark, with a job made
 * ready for the round. So after the host stores the epoch no host call stands
 * between the GPU and the round's completion: the arm's calls run while N+1
 * computes. launch(N+1) checks the same facts on the host: a match applies
 * the round to the mirror (TP > 1: and enqueues the allreduce, the leader's
 * copy, the mark); a mismatch (counted) leaves the pre-armed kernels to exit
 * (at TP1 their job is void: its mark frees it) and launches the round as
 * usual, behind them in stream order. The collective is never pre-armed: it
 * cannot be cancelled, so ranks that disagreed about arming would call it a
 * different number of times. A wait that no round will meet (teardown, an
 * abort, a launch from elsewhere) is released with rk_epoch_close() and the
 * slot's cancel word: a same-host follower's region is its read-only view of
 * the leader's (RK_BACKEND_SHARED_EPOCH), whose epoch only the leader moves,
 * so the leader's one store starts every follower's pre-armed round, and only
 * the cancel word can end a follower's wait. A stream wait cannot read it, so
 * on a view the plan kernel's poll is the only wait (--cuda-resident-wait is
 * then kernel).
 */
#include "config.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "toy_cuda.h"

#if defined(RK_HAVE_CUDA) && defined(RK_HAVE_NCCL)
#include <cuda_runtime_api.h>
/* nccl.h declares a few functions without prototypes, e.g. ncclGroupStart() */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop

#include "toy_cuda_k.h"

#define NO_TOKEN	TOY_CUDA_NO_TOKEN
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

struct entry {
	uint64_t id;
	uint32_t pos;		/* tokens folded into the row */
	uint32_t last;		/* the last of them, NO_TOKEN if none */
	uint32_t slot;		/* state row */
	uint64_t mark;		/* the last plan that carried it */
	uint64_t born;		/* the plan that created it */
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
	const int32_t *logits;	/* leader: where the round's logits land (logits_h, or
				 * a resident slot's buffer) */
	enum { JOB_LAUNCHED, JOB_ARMED, JOB_VOID } state;	/* resident rounds */
	bool marked;		/* its mark is enqueued (before launch when pre-armed) */
	bool res;		/* it ran on pre-armed kernels (their stamps are in slot rslot) */
	unsigned int rslot;
	struct job *next;
};

struct toy_cuda {
	struct rk_world *w;
	struct rk_loop *loop;
	uint32_t rank, size;
	int dev;
	uint32_t V, H, n, lo;
	uint64_t seed;
	cudaStream_t stream;
	struct rk_gpu_notifier *notif;
	struct rk_nccl *nccl;		/* TP > 1 */
	struct toy_reports reports;
	int failed;			/* sticky: the device state no longer matches the mirror */

	/* device memory */
	uint16_t *dE;
	int8_t *dW;
	uint32_t *dh0;
	uint32_t *dstate;		/* [state_cap][n] */
	uint32_t state_cap;
	void *din;
	size_t din_cap;
	int16_t *df;
	size_t df_cap;
	int32_t *dlog;
	size_t dlog_cap;

	/* the host mirror of the stream table */
	struct entry *ent;
	uint32_t n_ent, ent_cap;
	uint32_t *free_rows;
	uint32_t n_free, free_cap;
	uint32_t next_row;
	uint64_t seq;

	/* CUDA graphs of the round shapes seen twice (toy_cuda_set_graphs) */
	bool graphs;
	struct gslot gs[GRAPH_SLOTS];
	uint64_t gtick;

	/* jobs */
	struct job *free_jobs;
	struct job *wait_head, *wait_tail;	/* planned, waiting for NCCL */
	unsigned int inflight;			/* launched, not yet reported */
	struct job *cur;			/* leader: the last completed round */

	/* resident rounds (the top of the file) */
	bool res_on;				/* RK_RESIDENT=on */
	enum toy_cuda_res_wait res_wait;	/* how a pre-armed round waits */
	uint32_t res_dmax;			/* drafts a stream may carry: the most seen */
	uint32_t arm_dmax;			/* ...when the armed round was armed */
	bool res_pdl;				/* the fold kernel launched early behind the
						 * plan kernel (TOY_CUDA_PDL=0: not) */
	bool res_logged;
	struct rk_epoch *ep;			/* the region registered (gep holds it) */
	struct rk_gpu_epoch *gep;
	uint32_t *dgate;			/* [0] 0: the pre-armed round is the predicted
					 * one; [1] its outputs */
	bool armed;				/* the stream waits for the next epoch */
	bool armed_ok;				/* ...and all of its kernels are enqueued */
	unsigned int rslot;			/* the slot of the last arm (they alternate) */
	struct toy_cuda_kpredict *pred_h[2];	/* pinned, mapped: the plan kernel reads it */
	struct toy_cuda_kpredict *pred_d[2];	/* ...at this device address */
	int32_t *rlog_h[2];			/* pinned, TP1: pre-armed rounds' logits */
	size_t rlog_cap[2];
	cudaGraphExec_t rg[2][TOY_CUDA_PRED_MAX + 1];	/* the pre-armed work, per slot
							 * and stream count */
	bool rg_failed[2][TOY_CUDA_PRED_MAX + 1];
	uint32_t rg_dmax[2][TOY_CUDA_PRED_MAX + 1];	/* the draft bound rg was captured for */
	uint64_t t_done;			/* the last completion callback (phases) */
	uint64_t g_last_plan, g_last_round;	/* the last resident round's t_plan, id */
	struct job *ajob;			/* TP1: the pre-armed round's job, marked */
	struct job *void_head;			/* pre-marked jobs of rounds launched instead */

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

/* The end of round @round_id on this rank. Call last: it may re-enter launch(). */
static void report(struct toy_cuda *b, struct rk_sched *s, uint64_t round_id, int status)
{
	toy_report(&b->reports, s, round_id, status);
}

/* ---- memory ------------------------------------------------------------------------ */

/* The graphs of the pre-armed work in slot @k (they hold its buffers' addresses). */
static void res_graphs_drop(struct toy_cuda *b, unsigned int k)
{
	unsigned int n;

	for (n = 0; n <= TOY_CUDA_PRED_MAX; n++) {
		if (b->rg[k][n])
			cudaGraphExecDestroy(b->rg[k][n]);
		b->rg[k][n] = NULL;
		b->rg_failed[k][n] = false;
	}
}

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
	res_graphs_drop(b, 0);
	res_graphs_drop(b, 1);
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

static int grow(void **p, uint32_t *cap, uint32_t need, size_t size)
{
	uint32_t c;
	void *q;

	if (need <= *cap)
		return 0;
	c = need < 16 ? 16 : need * 2;
	q = realloc(*p, (size_t)c * size);
	if (!q)
		return -ENOMEM;
	*p = q;
	*cap = c;
	return 0;
}

/* ---- the mirror of the stream table ----------------------------------------------- */

static struct entry *find(struct toy_cuda *b, uint64_t id)
{
	uint32_t i;

	for (i = 0; i < b->n_ent; i++)
		if (b->ent[i].id == id)
			return &b->ent[i];
	return NULL;
}

/* Remove entry @i; its row is free for a later round (stream order protects it). */
static void remove_at(struct toy_cuda *b, uint32_t i)
{
	b->free_rows[b->n_free++] = b->ent[i].slot;
	b->ent[i] = b->ent[--b->n_ent];
}

static uint32_t row_get(struct toy_cuda *b)
{
	return b->n_free ? b->free_rows[--b->n_free] : b->next_row++;
}

static void rollback(struct toy_cuda *b, uint64_t seq)
{
	uint32_t i = 0;

	while (i < b->n_ent) {
		if (b->ent[i].born == seq)
			remove_at(b, i);
		else
			i++;
	}
}

/*
 * Validate @job's round against the mirror and apply it (toy_table_exec()'s
 * rules: nothing changes on failure), writing the upload into job->in_h.
 * Return: 0, -EPROTO (position mismatch), -EINVAL (duplicate stream, bad
 * offsets), -ENOMEM, -EIO.
 */
static int plan(struct toy_cuda *b, struct job *job)
{
	const struct toy_round *r = &job->r;
	struct toy_cuda_kstream *ks;
	uint64_t seq = b->seq + 1;
	uint32_t i, rows;
	struct entry *e;
	size_t len;
	int ret;

	/* every allocation first, so the mirror changes only once nothing can fail */
	len = (size_t)r->n_streams * sizeof(*ks) + (size_t)r->n_tok * sizeof(uint32_t);
	ret = hgrow(b, (void **)&job->in_h, &job->in_cap, len);
	if (!ret)
		ret = grow((void **)&b->ent, &b->ent_cap, b->n_ent + r->n_streams, sizeof(*b->ent));
	/* rows in use plus free never exceed next_row; new streams add at most n_streams */
	rows = b->next_row + r->n_streams;
	if (!ret)
		ret = grow((void **)&b->free_rows, &b->free_cap, rows, sizeof(*b->free_rows));
	if (!ret && rows > b->state_cap)
		ret = state_reserve(b, rows);
	if (ret)
		return ret;
	b->seq = seq;

	/* 1: known streams: at exactly their position, once each */
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];

		if ((uint64_t)s->tok_off + s->n_tokens + s->n_draft > r->n_tok ||
		    (uint64_t)s->out_off + s->n_draft + 1 > r->n_out ||
		    (uint64_t)s->position + s->n_tokens > UINT32_MAX)
			return -EINVAL;
		e = find(b, s->id);
		if (!e) {
			if (s->position)
				return -EPROTO;	/* this rank never saw its earlier tokens */
			continue;
		}
		if (e->mark == seq)
			return -EINVAL;
		if (e->pos != s->position)
			return -EPROTO;
		e->mark = seq;
	}
	/* 2: new streams (a second new entry with one id is a duplicate) */
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];

		e = find(b, s->id);
		if (e && e->born != seq)
			continue;
		if (e) {
			rollback(b, seq);
			return -EINVAL;
		}
		e = &b->ent[b->n_ent++];
		e->id = s->id;
		e->pos = 0;
		e->last = NO_TOKEN;
		e->slot = row_get(b);
		e->mark = seq;
		e->born = seq;
	}
	/* 3: the stream rule: absent streams have ended */
	for (i = 0; i < b->n_ent;) {
		if (b->ent[i].mark != seq)
			remove_at(b, i);
		else
			i++;
	}
	/* 4: the upload, and the mirror after this round (drafts never commit) */
	ks = (struct toy_cuda_kstream *)job->in_h;
	for (i = 0; i < r->n_streams; i++) {
		const struct toy_rstream *s = &r->st[i];

		e = find(b, s->id);
		ks[i] = (struct toy_cuda_kstream){
			.slot = e->slot,
			.fresh = e->born == seq,
			.tok_off = s->tok_off,
			.n_tokens = s->n_tokens,
			.n_draft = s->n_draft,
			.out_off = s->out_off,
			.last_prev = e->last,
		};
		e->pos += s->n_tokens;
		if (s->n_tokens)
			e->last = r->tok[s->tok_off + s->n_tokens - 1];
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

/* After a round's kernels (and allreduce): the leader's copy of the logits, the mark. */
static int enqueue_tail(struct toy_cuda *b, struct job *job, size_t nlog)
{
	uint64_t t2 = now_ns(), t3;
	int ret = 0;

	if (b->rank == 0)
		ret = CU(b, cudaMemcpyAsync(job->logits_h, b->dlog, nlog * sizeof(int32_t),
					    cudaMemcpyDeviceToHost, b->stream));
	job->logits = job->logits_h;
	t3 = now_ns();
	if (!ret)
		ret = rk_gpu_notifier_mark(b->notif, (uint64_t)(uintptr_t)job);
	job->marked = !ret;
	b->stats.enqueues++;
	b->stats.ns_copy += t3 - t2;
	b->stats.ns_mark += now_ns() - t3;
	return ret;
}

/* Enqueue a planned round: upload, fold + features, logits, allreduce, copy, mark. */
static int enqueue(struct toy_cuda *b, struct job *job)
{
	const struct toy_round *r = &job->r;
	size_t nlog = (size_t)r->n_out * b->V;
	uint64_t t0 = now_ns(), t1, t2;
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
	if (!ret)
		ret = enqueue_tail(b, job, nlog);
	else
		b->stats.enqueues++;
	b->stats.ns_upload += t1 - t0;
	b->stats.ns_compute += t2 - t1;
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
	job->state = JOB_LAUNCHED;
	job->marked = false;
	job->res = false;
	job->logits = NULL;
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

/*
 * A resident round's GPU phases, from its plan kernel's stamps in slot
 * job->rslot (written before the slot's done word, which the round's
 * completion follows; the slot is armed again only after the next launch).
 */
static void res_stamps(struct toy_cuda *b, const struct job *job)
{
	const struct toy_cuda_kpredict *p = b->pred_h[job->rslot];
	uint64_t t0 = p->t_start, t1 = p->t_seen, t2 = p->t_plan;

	if (p->want != job->r.round_id || t1 < t0 || t2 < t1)
		return;
	b->stats.n_gpu++;
	b->stats.ns_gpu_wait += t1 - t0;
	b->stats.ns_gpu_plan += t2 - t1;
	b->stats.polls += p->polls;
	if (b->g_last_round && job->r.round_id == b->g_last_round + 1 && t0 >= b->g_last_plan) {
		b->stats.n_gpu_rest++;
		b->stats.ns_gpu_rest += t0 - b->g_last_plan;
	}
	b->g_last_plan = t2;
	b->g_last_round = job->r.round_id;
}

/* The end of a round on this rank: hand it back (loop thread). */
static void finish(struct toy_cuda *b, struct job *job, int status)
{
	struct rk_sched *s = job->s;
	uint64_t id = job->r.round_id, t = now_ns();

	b->inflight--;
	if (b->nccl && !b->inflight)
		rk_nccl_busy(b->nccl, false);	/* report() may launch: busy again */
	b->stats.rounds++;
	b->stats.outputs += job->r.n_out;
	b->stats.ns_round += t - job->t_launch;
	if (job->res) {
		b->stats.n_round_res++;
		b->stats.ns_round_res += t - job->t_launch;
		if (!status)
			res_stamps(b, job);
	} else {
		b->stats.n_round_launch++;
		b->stats.ns_round_launch += t - job->t_launch;
	}
	b->t_done = t;
	job->status = status;
	if (b->rank == 0) {
		if (b->cur)
			job_put(b, b->cur);
		b->cur = job;
	} else {
		job_put(b, job);
	}
	report(b, s, id, status);	/* last: it may launch the next round */
}

static void res_mark_unlaunched(struct toy_cuda *b, struct job *job);

static enum rk_activity on_mark(struct rk_gpu_notifier *n, uint64_t cookie, void *arg)
{
	struct toy_cuda *b = arg;
	struct job *job = (struct job *)(uintptr_t)cookie;
	int status = 0;

	(void)n;
	if (job->state != JOB_LAUNCHED) {
		res_mark_unlaunched(b, job);
		return RK_BUSY;
	}
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

/* ---- resident rounds (the top of the file) ------------------------------------------ */

static void res_fallback(struct toy_cuda *b, const char *why, int err)
{
	if (!b->res_logged)
		fprintf(stderr, "toy_cuda[r%u]: resident rounds fall back to the launch path: %s%s%s\n",
			b->rank, why, err ? ": " : "", err ? rk_strerror(err) : "");
	b->res_logged = true;
	b->stats.resident_fallbacks++;
}

/* A job whose mark is enqueued but whose round was launched elsewhere: freed by its mark. */
static void res_void(struct toy_cuda *b, struct job *job)
{
	job->state = JOB_VOID;
	job->next = b->void_head;
	b->void_head = job;
}

/* The pre-armed round's job, if any, is no longer the round's. */
static void res_drop_job(struct toy_cuda *b)
{
	struct job *job = b->ajob;

	b->ajob = NULL;
	if (!job)
		return;
	if (job->marked)
		res_void(b, job);	/* its mark comes: on_mark() frees it */
	else
		job_put(b, job);
}

/*
 * The mark of a job that was never launched: a void one (freed here), or the
 * pre-armed round's. That one's wait was met by the region's close (the
 * scheduler stopped: the plan kernel shut the gate), or by a round published
 * and never launched, whose kernels may have folded a round the mirror never
 * saw: then the backend fails for good.
 */
static void res_mark_unlaunched(struct toy_cuda *b, struct job *job)
{
	struct job **pp;

	if (job->state == JOB_ARMED) {
		if (rk_epoch_current(b->ep) != RK_EPOCH_CLOSED) {
			fprintf(stderr, "toy_cuda[r%u]: a pre-armed round completed before its "
				"launch\n", b->rank);
			b->failed = -EPROTO;
		}
		b->ajob = NULL;
		b->armed = false;
		b->armed_ok = false;
		job_put(b, job);
		return;
	}
	for (pp = &b->void_head; *pp; pp = &(*pp)->next) {
		if (*pp == job) {
			*pp = job->next;
			break;
		}
	}
	job_put(b, job);
}

/* A pre-armed wait that no round will meet: release it (the gate stays shut). */
static void disarm(struct toy_cuda *b)
{
	if (b->armed) {
		if (b->ep && rk_epoch_current(b->ep) < b->pred_h[b->rslot]->want) {
			res_fallback(b, "a pre-armed round was not published: the region is closed",
				     0);
			rk_epoch_close(b->ep);
		}
		/*
		 * And the slot's own word, which a kernel still waiting reads as
		 * it naps: the close above does not reach the device when the
		 * region is the leader's (a view; rk_epoch_current() then says
		 * closed once our scheduler closed it). Release: after the
		 * slot's other stores, as the epoch's would be.
		 */
		__atomic_store_n(&b->pred_h[b->rslot]->cancel, 1u, __ATOMIC_RELEASE);
	}
	b->armed = false;
	b->armed_ok = false;
	res_drop_job(b);
}

/* The slot buffers of resident rounds, once: the predictions (mapped), TP1's
 * logits (@nout outputs). */
static int res_slots(struct toy_cuda *b, unsigned int k, uint32_t nout)
{
	size_t need = (size_t)nout * b->V * sizeof(int32_t), cap;
	void *q;
	int ret;

	if (!b->pred_h[k]) {
		ret = CU(b, cudaHostAlloc((void **)&b->pred_h[k], sizeof(*b->pred_h[k]),
					  cudaHostAllocMapped));
		if (ret)
			return ret;
		ret = CU(b, cudaHostGetDevicePointer((void **)&b->pred_d[k], b->pred_h[k], 0));
		if (ret) {
			cudaFreeHost(b->pred_h[k]);
			b->pred_h[k] = NULL;
			return ret;
		}
		memset(b->pred_h[k], 0, sizeof(*b->pred_h[k]));
	}
	if (b->size > 1 || need <= b->rlog_cap[k])
		return 0;
	/* the slot's last pre-armed round has completed (arm()'s TP1 rule); graphs hold it */
	cap = need * 2;
	ret = CU(b, cudaHostAlloc(&q, cap, cudaHostAllocDefault));
	if (ret)
		return ret;
	if (b->rlog_h[k])
		cudaFreeHost(b->rlog_h[k]);
	b->rlog_h[k] = q;
	b->rlog_cap[k] = cap;
	res_graphs_drop(b, k);
	return 0;
}

/* A pre-armed round of @n streams with at most @dmax drafts each: the tokens
 * the plan kernel reads (inputs up to 1 + dmax, then dmax drafts), the
 * outputs its graph computes and copies. */
static uint32_t res_tokwin(uint32_t n, uint32_t dmax)
{
	return n * (2 * dmax + 1);
}

static uint32_t res_nout(uint32_t n, uint32_t dmax)
{
	return n * (dmax + 1);
}

/*
 * The pre-armed work of @n streams (at most @dmax drafts each) in slot @k:
 * the plan kernel (which waits for the epoch itself, or passes at once after
 * a stream wait), the gated fold and logits, and at TP1 the leader's copy of
 * the most outputs the shape can have (a failure after the first kernel is
 * sticky: a half-enqueued round cannot be launched again). Return: 0, or the
 * error and *@any whether anything went in.
 */
static int res_compute(struct toy_cuda *b, uint32_t n, uint32_t dmax, unsigned int k, bool *any)
{
	uint8_t *base = rk_gpu_epoch_device_ptr(b->gep);
	size_t kl = (size_t)n * sizeof(struct toy_cuda_kstream);
	uint32_t nout = res_nout(n, dmax);
	struct toy_cuda_kstream *ks = b->din;
	const uint32_t *tok = (const uint32_t *)((uint8_t *)b->din + kl);
	int ret;

	*any = false;
	ret = CU(b, toy_cuda_k_resident_plan(b->stream,
					     (const uint64_t *)(base + RK_EPOCH_OFF_EPOCH),
					     (const uint32_t *)(base + RK_EPOCH_OFF_DESC_LEN),
					     base + RK_EPOCH_OFF_DESC, b->pred_d[k], n, dmax,
					     res_tokwin(n, dmax), b->V, ks, (uint32_t *)tok,
					     b->dgate));
	if (ret)
		return ret;
	*any = true;
	ret = CU(b, toy_cuda_k_round_gated(b->stream, ks, n, tok, b->dstate, b->dE, b->dh0, b->df,
					   b->n, b->lo, b->dgate, b->res_pdl));
	if (!ret)
		ret = CU(b, toy_cuda_k_logits_gated(b->stream, b->dW, b->df, b->dlog, nout, b->V,
						    b->n, b->dgate));
	if (!ret && b->size == 1)
		ret = CU(b, cudaMemcpyAsync(b->rlog_h[k], b->dlog, (size_t)nout * b->V * sizeof(int32_t),
					    cudaMemcpyDeviceToHost, b->stream));
	return ret;
}

/* The graph of res_compute(@n, @dmax, @k), captured on first use; NULL: enqueue it eagerly. */
static cudaGraphExec_t res_graph(struct toy_cuda *b, uint32_t n, uint32_t dmax, unsigned int k)
{
	enum cudaStreamCaptureStatus cs;
	cudaGraph_t graph = NULL;
	bool any;
	int ret;

	if (!b->graphs || b->rg_failed[k][n])
		return NULL;
	if (b->rg[k][n] && b->rg_dmax[k][n] == dmax)
		return b->rg[k][n];
	if (b->rg[k][n])
		cudaGraphExecDestroy(b->rg[k][n]);	/* the draft bound grew */
	b->rg[k][n] = NULL;
	ret = CU(b, cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeThreadLocal));
	if (!ret) {
		ret = res_compute(b, n, dmax, k, &any);
		if (CU(b, cudaStreamEndCapture(b->stream, &graph)) && !ret)
			ret = -EIO;
	}
	if (!ret)
		ret = CU(b, cudaGraphInstantiate(&b->rg[k][n], graph, 0));
	if (graph)
		cudaGraphDestroy(graph);
	if (ret || cudaStreamIsCapturing(b->stream, &cs) || cs != cudaStreamCaptureStatusNone) {
		fprintf(stderr, "toy_cuda[r%u]: no graph for pre-armed rounds of %u streams: "
			"eager\n", b->rank, n);
		b->rg_failed[k][n] = true;
		b->rg[k][n] = NULL;
		return NULL;
	}
	b->rg_dmax[k][n] = dmax;
	b->stats.arm_captures++;
	return b->rg[k][n];
}

static void arm_skip(struct toy_cuda *b, enum toy_cuda_skip why)
{
	b->stats.arm_skipped++;
	b->stats.arm_skip[why]++;
}

/*
 * After launch(@r) (round N, on the stream): pre-arm round N+1 as predicted
 * from @r, for the scheduler @s's region: the same streams, at the positions
 * the mirror holds after N, each with 1 to 1 + (its drafts in N) inputs and
 * at most dmax drafts (the most any round carried so far). In stream order:
 * at TOY_CUDA_WAIT_STREAM a wait on the epoch; then one graph (or its
 * kernels) whose plan kernel reads the prediction from slot k's mapped
 * memory (TOY_CUDA_WAIT_KERNEL: it polls the epoch first), and at TP1 the
 * leader's copy and the mark too, so the round completes with no host call
 * after the epoch is published. Slots alternate; a slot is reused once the
 * plan kernel of its last arm has read it (it says so in the slot), and at
 * TP1 with this round the only one in flight (the logits buffer). Nothing
 * happens when the backend cannot (RK_RESIDENT not on, NCCL not up, too many
 * streams or tokens: counted in arm_skip); a failure to register or to
 * enqueue is one log line and a counter. Its host time is stats.ns_arm.
 */
static int arm_try(struct toy_cuda *b, struct rk_sched *s, const struct rk_wire_round *r)
{
	struct rk_epoch *ep = rk_sched_epoch(s);
	uint32_t i, n = r->n_streams, dmax = b->res_dmax;
	unsigned int k = b->rslot ^ 1;
	struct toy_cuda_kpredict *pred;
	struct rk_wire_stream ws;
	uint64_t t0 = now_ns();
	const struct entry *e;
	cudaGraphExec_t g;
	struct job *job = NULL;
	bool any = false;
	int64_t ext;
	int ret;

	if (!b->res_on || !ep || b->armed || b->failed)
		return -1;
	if (b->wait_head || (b->size > 1 && rk_nccl_state(b->nccl) != 1))
		return TOY_CUDA_SKIP_OTHER;
	if (!n || n > TOY_CUDA_PRED_MAX)
		return TOY_CUDA_SKIP_SHAPE;
	/* the draft bound: the most drafts a stream carried so far (it only grows) */
	for (i = 0; i < n; i++) {
		rk_wire_round_stream(r, i, &ws);
		if (ws.n_draft > dmax)
			dmax = ws.n_draft;
	}
	if (dmax > (TOY_CUDA_TOKWIN_MAX - 1) / 2 || res_tokwin(n, dmax) > TOY_CUDA_TOKWIN_MAX)
		return TOY_CUDA_SKIP_SHAPE;
	b->res_dmax = dmax;
	/* TP1: the previous round has completed, so the slot's logits buffer is
	 * free (a void job uses the other slot: its mark comes first, in order) */
	if (b->size == 1 && b->inflight != 1)
		return TOY_CUDA_SKIP_BUSY;
	/* the plan kernel of the slot's last arm has read it */
	pred = b->pred_h[k];
	if (pred && __atomic_load_n(&pred->done, __ATOMIC_ACQUIRE) != pred->want)
		return TOY_CUDA_SKIP_BUSY;
	if (!b->gep) {
		if (b->stats.resident_fallbacks)
			return TOY_CUDA_SKIP_OTHER;	/* the launch path for good */
		ret = rk_gpu_epoch_register(ep, b->dev, &b->gep);
		if (ret) {
			res_fallback(b, "the epoch region cannot be registered with CUDA", ret);
			return TOY_CUDA_SKIP_OTHER;
		}
		b->ep = ep;
	} else if (ep != b->ep) {
		return TOY_CUDA_SKIP_OTHER;	/* another scheduler's rounds */
	}
	for (i = 0; i < n; i++) {
		rk_wire_round_stream(r, i, &ws);
		if (!find(b, ws.stream_id))
			return TOY_CUDA_SKIP_STREAM;	/* a retire dropped it */
	}
	/* the plan kernel reads the predicted round's largest extent of the region
	 * in 16-byte chunks, whatever was published */
	ext = rk_wire_round_size(n, res_tokwin(n, dmax));
	if (ext < 0 || ((uint64_t)ext + 15) / 16 * 16 > rk_epoch_desc_max(ep))
		return TOY_CUDA_SKIP_REGION;
	ret = res_slots(b, k, res_nout(n, dmax));
	if (!ret)
		ret = dgrow(b, &b->din, &b->din_cap,
			    (size_t)n * sizeof(struct toy_cuda_kstream) +
				    (size_t)res_tokwin(n, dmax) * sizeof(uint32_t));
	if (!ret)
		ret = dgrow(b, (void **)&b->df, &b->df_cap,
			    (size_t)res_nout(n, dmax) * b->n * sizeof(int16_t));
	if (!ret)
		ret = dgrow(b, (void **)&b->dlog, &b->dlog_cap,
			    (size_t)res_nout(n, dmax) * b->V * sizeof(int32_t));
	if (!ret && b->size == 1) {
		job = job_get(b);
		if (!job)
			ret = -ENOMEM;
	}
	if (ret) {
		if (job)
			job_put(b, job);
		res_fallback(b, "cannot pre-arm", ret);
		return TOY_CUDA_SKIP_OTHER;
	}
	/* the slot's last reader is done (above): plain stores, the epoch's
	 * release store orders them before the kernel can pass its wait */
	pred = b->pred_h[k];
	pred->want = r->round_id + 1;
	pred->n = n;
	pred->V = b->V;
	pred->t_start = pred->t_seen = pred->t_plan = 0;
	pred->polls = 0;
	pred->gate = 0;
	pred->cancel = 0;
	for (i = 0; i < n; i++) {
		rk_wire_round_stream(r, i, &ws);
		e = find(b, ws.stream_id);
		pred->s[i].id = e->id;
		pred->s[i].position = e->pos;
		pred->s[i].slot = e->slot;
		pred->s[i].last_prev = e->last;
		pred->s[i].max_tok = ws.n_draft + 1;
	}
	g = res_graph(b, n, dmax, k);		/* captured before the wait: nothing runs */
	if (b->res_wait == TOY_CUDA_WAIT_STREAM) {
		ret = rk_gpu_epoch_wait(b->gep, b->stream, pred->want);
		if (ret == -EROFS)
			ret = 0;	/* the leader's region: the plan kernel polls it */
		else if (!ret)
			b->armed = true;	/* the stream waits from here: disarm() if never met */
		if (ret) {
			if (job)
				job_put(b, job);
			pred->done = pred->want;	/* no kernel reads the slot */
			res_fallback(b, "cuStreamWaitValue64", ret);
			return TOY_CUDA_SKIP_OTHER;
		}
	}
	b->rslot = k;
	b->arm_dmax = dmax;
	if (g) {
		ret = CU(b, cudaGraphLaunch(g, b->stream));
		any = !ret;	/* a graph launch that failed enqueued nothing */
		b->stats.arm_graphs += any;
	} else {
		ret = res_compute(b, n, dmax, k, &any);
	}
	if (any)
		b->armed = true;	/* the plan kernel waits: disarm() if never met */
	if (ret) {
		if (job)
			job_put(b, job);
		if (any) {
			b->failed = ret;	/* half a round is in the stream */
		} else {
			pred->done = pred->want;	/* no kernel reads the slot */
			res_fallback(b, "cannot pre-arm the kernels", ret);
			return TOY_CUDA_SKIP_OTHER;
		}
		return -1;	/* not armed_ok: launch(N+1) takes the launch path */
	}
	if (job) {
		/* TP1: the mark too; refused, launch(N+1) enqueues it */
		job->state = JOB_ARMED;
		job->logits = b->rlog_h[k];
		job->marked = !rk_gpu_notifier_mark(b->notif, (uint64_t)(uintptr_t)job);
		b->ajob = job;
	}
	b->armed_ok = true;
	b->stats.arms++;
	b->stats.arm_drafted += dmax > 0;
	b->stats.ns_arm += now_ns() - t0;
	return -1;
}

/* arm_try(), and why it armed nothing (counted), if it says */
static void arm(struct toy_cuda *b, struct rk_sched *s, const struct rk_wire_round *r)
{
	int why = arm_try(b, s, r);

	if (why >= 0)
		arm_skip(b, (enum toy_cuda_skip)why);
}

/* Round @round is the pre-armed one: the plan kernel decides the same from the region. */
static bool pred_matches(const struct toy_cuda *b, struct rk_sched *s,
			 const struct rk_wire_round *round)
{
	const struct toy_cuda_kpredict *pred = b->pred_h[b->rslot];
	int64_t len = rk_wire_round_size(round->n_streams, round->n_tok_total);
	uint32_t i, dmax = b->arm_dmax;
	struct rk_wire_stream ws;

	if (!b->armed_ok || rk_sched_epoch(s) != b->ep || round->round_id != pred->want ||
	    round->n_streams != pred->n || round->n_tok_total > res_tokwin(pred->n, dmax) ||
	    rk_epoch_current(b->ep) != round->round_id || len < 0 ||
	    (uint64_t)len > rk_epoch_desc_max(b->ep))
		return false;
	for (i = 0; i < round->n_streams; i++) {
		rk_wire_round_stream(round, i, &ws);
		if (ws.stream_id != pred->s[i].id || ws.position != pred->s[i].position ||
		    ws.n_tokens < 1 || ws.n_tokens > pred->s[i].max_tok || ws.n_draft > dmax)
			return false;
	}
	for (i = 0; i < round->n_tok_total; i++)
		if (rk_wire_round_token(round, i) >= b->V)
			return false;
	return true;
}

/*
 * The pre-armed kernels compute @round (they may be running already): apply
 * it to the mirror as plan() would, and enqueue what follows them (TP > 1:
 * the allreduce, the leader's copy, the mark; TP1: nothing, unless the mark
 * was refused at arm time). A failure here is sticky: the device has moved
 * on. Return: 0 or -errno.
 */
static int resident_launch(struct toy_cuda *b, struct rk_sched *s,
			   const struct rk_wire_round *round)
{
	uint64_t seq = b->seq + 1, t0 = now_ns();
	const struct toy_rstream *rs;
	struct entry *e;
	struct job *job;
	size_t nlog;
	uint32_t i;
	int ret;

	b->armed = false;
	b->armed_ok = false;
	job = b->ajob ? b->ajob : job_get(b);
	b->ajob = NULL;
	if (!job)
		return b->failed = -ENOMEM;
	ret = toy_round_copy(&job->r, round, b->V);
	nlog = (size_t)job->r.n_out * b->V;
	if (!ret && b->rank == 0 && b->size > 1)
		ret = hgrow(b, (void **)&job->logits_h, &job->logits_cap, nlog * sizeof(int32_t));
	if (ret) {
		if (job->marked)
			res_void(b, job);
		else
			job_put(b, job);
		return b->failed = ret;
	}
	if (b->rank == 0) {
		if (b->cur)
			job_put(b, b->cur);
		b->cur = NULL;
	}
	b->seq = seq;
	for (i = 0; i < job->r.n_streams; i++) {
		rs = &job->r.st[i];
		e = find(b, rs->id);
		if (!e) {
			if (job->marked)
				res_void(b, job);
			else
				job_put(b, job);
			return b->failed = -EPROTO;
		}
		e->mark = seq;
		e->pos += rs->n_tokens;		/* drafts never commit */
		e->last = job->r.tok[rs->tok_off + rs->n_tokens - 1];	/* n_tokens >= 1 */
	}
	job->state = JOB_LAUNCHED;
	job->res = true;
	job->rslot = b->rslot;
	job->t_launch = t0;
	job->status = 0;
	job->s = s;
	b->inflight++;
	if (b->nccl)
		rk_nccl_busy(b->nccl, true);
	if (b->size > 1) {
		ret = allreduce(b, nlog);
		b->stats.ns_compute += now_ns() - t0;
		if (!ret)
			ret = enqueue_tail(b, job, nlog);
	} else if (!job->marked) {
		ret = rk_gpu_notifier_mark(b->notif, (uint64_t)(uintptr_t)job);
		job->marked = !ret;
	}
	if (ret) {
		b->failed = ret;
		b->inflight--;
		job_put(b, job);
		return ret;
	}
	b->stats.resident++;
	return 0;
}

/* ---- the ops -------------------------------------------------------------------------- */

static int cuda_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		       unsigned int flags)
{
	struct toy_cuda *b = ctx;
	uint64_t turn = b->t_done ? now_ns() - b->t_done : 0;
	struct job *job;
	int ret, st = 1;

	(void)flags;
	b->t_done = 0;
	if (b->failed)
		return b->failed;
	if (b->size > 1) {
		st = rk_nccl_state(b->nccl);
		if (st < 0)
			return st;
	}
	if (b->armed) {
		if (pred_matches(b, s, round)) {
			b->stats.n_turn_res += turn > 0;
			b->stats.ns_turn_res += turn;
			ret = resident_launch(b, s, round);
			if (!ret)
				arm(b, s, round);
			return ret;
		}
		/* the plan kernel shuts the gate too: the kernels exit, this round is
		 * launched behind them */
		b->stats.resident_mismatch++;
		disarm(b);
	}
	b->stats.n_turn_launch += turn > 0;
	b->stats.ns_turn_launch += turn;
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
			return ret;
		}
		arm(b, s, round);
		return 0;
	}
	b->stats.waited++;
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
	return toy_round_token(&job->r, job->logits, b->V, b->H, i, j, tok);
}

static void cuda_retire(void *ctx, uint64_t stream_id)
{
	struct toy_cuda *b = ctx;
	uint32_t i;

	for (i = 0; i < b->n_ent; i++) {
		if (b->ent[i].id == stream_id) {
			remove_at(b, i);
			return;
		}
	}
}

const struct rk_backend_ops toy_cuda_ops = {
	.launch = cuda_launch,
	.token = cuda_token,
	.retire = cuda_retire,
	.flags = RK_BACKEND_SHARED_EPOCH,
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
	b->w = w;
	b->loop = rk_world_loop(w);
	b->rank = (uint32_t)rank;
	b->size = (uint32_t)size;
	b->dev = device;
	b->V = p->V;
	b->H = p->H;
	b->seed = p->seed;
	b->n = p->H / b->size;
	b->lo = b->rank * b->n;
	vn = (size_t)b->V * b->n;

	ret = CU(b, cudaSetDevice(device));
	if (ret)
		goto err_free;
	ret = CU(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
	if (ret)
		goto err_free;
	b->res_on = toy_resident_on(TOY_BACKEND_CUDA, rk_loop_config(b->loop)->resident, b->size,
				    rk_loop_config(b->loop)->wait.mode);
	/* a debugging switch, not a knob: docs/GPU.md */
	b->res_pdl = !getenv("TOY_CUDA_PDL") || strcmp(getenv("TOY_CUDA_PDL"), "0");
	ret = CU(b, cudaMalloc((void **)&b->dgate, 2 * sizeof(*b->dgate)));
	if (!ret)
		ret = CU(b, cudaMalloc((void **)&b->dE, vn * sizeof(*b->dE)));
	if (!ret)
		ret = CU(b, cudaMalloc((void **)&b->dW, vn));
	if (!ret)
		ret = CU(b, cudaMalloc((void **)&b->dh0, (size_t)b->n * sizeof(*b->dh0)));
	if (!ret)
		ret = CU(b, toy_cuda_k_weights(b->stream, b->dE, b->dW, b->dh0, b->V, b->H, b->seed,
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
	cudaFree(b->dgate);
	cudaFree(b->dh0);
	cudaFree(b->dW);
	cudaFree(b->dE);
	cudaStreamDestroy(b->stream);
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

void toy_cuda_set_resident_wait(struct toy_cuda *b, enum toy_cuda_res_wait how)
{
	b->res_wait = how;
}

int toy_cuda_set_notify(struct toy_cuda *b, enum rk_gpu_notify_mode mode)
{
	return b->notif ? rk_gpu_notifier_set_mode(b->notif, mode) : -EOPNOTSUPP;
}

int toy_cuda_on_frame(struct toy_cuda *b, int peer, const struct rk_wire_hdr *h,
		      const uint8_t *payload)
{
	if (!b->nccl)
		return -ENOENT;
	return rk_nccl_on_frame(b->nccl, peer, h, payload);
}

void toy_cuda_abort(struct toy_cuda *b)
{
	disarm(b);	/* no later round will meet a pre-armed wait */
	if (b->nccl)
		rk_nccl_abort(b->nccl);
}

bool toy_cuda_busy(const struct toy_cuda *b)
{
	return b->inflight > 0;
}

uint32_t toy_cuda_streams(const struct toy_cuda *b)
{
	return b->n_ent;
}

int toy_cuda_device(const struct toy_cuda *b)
{
	return b->dev;
}

const int32_t *toy_cuda_logits(const struct toy_cuda *b, uint32_t out)
{
	if (b->rank != 0 || !b->cur || b->cur->status || out >= b->cur->r.n_out)
		return NULL;
	return b->cur->logits + (size_t)out * b->V;
}

void toy_cuda_stats(const struct toy_cuda *b, struct toy_cuda_stats *out)
{
	*out = b->stats;
	rk_gpu_notifier_stats(b->notif, &out->notify);
}

int toy_cuda_destroy(struct toy_cuda *b)
{
	struct job *job;
	unsigned int k;
	int ret = 0, r;

	if (!b)
		return 0;
	if (b->inflight)
		return -EBUSY;
	cudaSetDevice(b->dev);
	disarm(b);	/* before the stream is synchronised: its wait ends */
	graphs_drop(b);
	/* the marks of pre-armed rounds that were launched instead: not waited for */
	ret = rk_gpu_notifier_destroy(b->notif, b->void_head != NULL);
	r = CU(b, cudaStreamSynchronize(b->stream));
	ret = ret ? ret : r;
	r = rk_gpu_epoch_unregister(&b->gep);
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
	while ((job = b->void_head)) {
		b->void_head = job->next;
		job_free(job);
	}
	for (k = 0; k < 2; k++) {
		if (b->pred_h[k])
			cudaFreeHost(b->pred_h[k]);
		if (b->rlog_h[k])
			cudaFreeHost(b->rlog_h[k]);
	}
	cudaFree(b->din);
	cudaFree(b->df);
	cudaFree(b->dlog);
	cudaFree(b->dstate);
	cudaFree(b->dgate);
	cudaFree(b->dh0);
	cudaFree(b->dW);
	cudaFree(b->dE);
	cudaStreamDestroy(b->stream);
	free(b->ent);
	free(b->free_rows);
	free(b);
	return ret;
}

#else /* no CUDA or no NCCL: the backend does not exist, callers still link */

int toy_cuda_create(struct rk_world *w, const struct toy_params *p, int device,
		    enum rk_gpu_notify_mode mode, struct toy_cuda **out)
{
	(void)w;
	(void)p;
	(void)device;
	(void)mode;
	if (out)
		*out = NULL;
	return -EOPNOTSUPP;
}

int toy_cuda_ready(const struct toy_cuda *b)
{
	(void)b;
	return -EOPNOTSUPP;
}

uint64_t toy_cuda_reports(const struct toy_cuda *b, uint64_t *round_id, int *status)
{
	(void)b;
	if (round_id)
		*round_id = 0;
	if (status)
		*status = 0;
	return 0;
}

int toy_cuda_on_frame(struct toy_cuda *b, int peer, const struct rk_wire_hdr *h,
		      const uint8_t *payload)
{
	(void)b;
	(void)peer;
	(void)h;
	(void)payload;
	return -ENOENT;
}

void toy_cuda_abort(struct toy_cuda *b)
{
	(void)b;
}

void toy_cuda_set_graphs(struct toy_cuda *b, bool on)
{
	(void)b;
	(void)on;
}

void toy_cuda_set_resident_wait(struct toy_cuda *b, enum toy_cuda_res_wait how)
{
	(void)b;
	(void)how;
}

int toy_cuda_set_notify(struct toy_cuda *b, enum rk_gpu_notify_mode mode)
{
	(void)b;
	(void)mode;
	return -EOPNOTSUPP;
}

bool toy_cuda_busy(const struct toy_cuda *b)
{
	(void)b;
	return false;
}

uint32_t toy_cuda_streams(const struct toy_cuda *b)
{
	(void)b;
	return 0;
}

int toy_cuda_device(const struct toy_cuda *b)
{
	(void)b;
	return -EOPNOTSUPP;
}

const int32_t *toy_cuda_logits(const struct toy_cuda *b, uint32_t out)
{
	(void)b;
	(void)out;
	return NULL;
}

void toy_cuda_stats(const struct toy_cuda *b, struct toy_cuda_stats *out)
{
	(void)b;
	memset(out, 0, sizeof(*out));
}

int toy_cuda_destroy(struct toy_cuda *b)
{
	(void)b;
	return 0;
}

static int stub_launch(void *ctx, struct rk_sched *s, const struct rk_wire_round *round,
		       unsigned int flags)
{
	(void)ctx;
	(void)s;
	(void)round;
	(void)flags;
	return -EOPNOTSUPP;
}

const struct rk_backend_ops toy_cuda_ops = {
	.launch = stub_launch,
};
#endif
