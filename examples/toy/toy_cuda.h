/* SPDX-License-Identifier: MIT */
/*
 * The toy model's CUDA backend: struct rk_backend_ops on one GPU per rank,
 * bit-identical tokens to the CPU backend (toy_cpu) at any tensor-parallel
 * degree. examples/toy/TOY.md defines the model; docs/GPU.md describes the design.
 *
 * Per round, on the rank's stream: upload the round (streams and tokens), fold
 * the inputs into per-stream states kept in device memory and compute the
 * features after the inputs and after each draft (one kernel), the partial
 * logits of this rank's hidden shard (one kernel), ncclAllReduce(int32, sum)
 * across the ranks (TP > 1), then on the leader a copy of the summed logits
 * into pinned host memory, then a notifier mark. The mark's callback reports
 * the round; token() picks with the same host toy_pick() as the CPU backend.
 *
 * Built with CUDA and NCCL only; otherwise toy_cuda_stub.c stands in and
 * toy_cuda_create() returns -EOPNOTSUPP (so callers build in every
 * configuration). It has no resident rounds (no RK_BACKEND_RESIDENT: the
 * scheduler keeps no epoch region for it): every round is launched.
 *
 * Threads: everything on the loop thread of the world's loop. The backend
 * makes its CUDA device current on that thread.
 */
#ifndef TOY_CUDA_H
#define TOY_CUDA_H

#include "rk_gpu.h"
#include "toy.h"

#ifdef __cplusplus
extern "C" {
#endif

struct toy_cuda;

struct toy_cuda_stats {
	uint64_t rounds;		/* rounds completed on this rank */
	uint64_t outputs;		/* logit vectors computed */
	uint64_t ns_round;		/* launch() to the completion callback, summed */
	uint64_t nccl_inprogress;	/* collectives that returned ncclInProgress (waited for) */
	/* host time of the enqueue, summed over the rounds (where a round's CPU goes) */
	uint64_t enqueues;		/* rounds enqueued */
	uint64_t ns_upload;		/* buffers, cudaMemcpyAsync of the plan */
	uint64_t ns_compute;		/* the kernels and ncclAllReduce, or their graph (and
					 * any ncclInProgress wait or capture) */
	uint64_t ns_copy;		/* leader: the logits' copy to the host */
	uint64_t ns_mark;		/* rk_gpu_notifier_mark() */
	uint64_t graph_captures;	/* round shapes captured into a CUDA graph */
	uint64_t graph_launches;	/* rounds whose compute ran as a graph */
	struct rk_gpu_notifier_stats notify;
};

/**
 * toy_cuda_create() - the backend for @w's rank (rank r of rk_world_size(w)
 * holds hidden shard r), on CUDA device @device (-1: rank % device count).
 * Generates the shard's weights on the device (waits for it), creates a
 * stream and a notifier (@mode), and with more than one rank starts the NCCL
 * bootstrap (rk_nccl_create: the leader sends NCCL_ID once every follower is
 * connected, so this may be called before the world is ready). Rounds
 * launched before NCCL is up wait for it.
 * Return: 0 and *@out; -EINVAL (bad params, H not divisible by the world
 * size); -ENODEV (no CUDA device); -EOPNOTSUPP (built without CUDA or NCCL);
 * -ENOMEM; -EIO (CUDA/NCCL, logged). Loop thread.
 */
int toy_cuda_create(struct rk_world *w, const struct toy_params *p, int device,
		    enum rk_gpu_notify_mode mode, struct toy_cuda **out);

/**
 * toy_cuda_ready() - 1 when rounds run at once (TP1, or NCCL is up), 0 while
 * the NCCL bootstrap is in progress, < 0 when it failed or was aborted.
 */
int toy_cuda_ready(const struct toy_cuda *b);

/**
 * toy_cuda_reports() - toy_reports_get() of the rounds this rank reported.
 * toy_cuda_ops.launch() takes a NULL scheduler too.
 */
uint64_t toy_cuda_reports(const struct toy_cuda *b, uint64_t *round_id, int *status);

/**
 * toy_cuda_set_graphs() - run a round's kernels and allreduce as one CUDA
 * graph per round shape (streams, outputs), captured the second time a shape
 * comes (default off: every round enqueues them one by one). rk-serve turns
 * it on (one rank per process); the test suite runs two ranks in one process
 * and turns it on only where it tests it (docs/GPU.md says why).
 * Up to 16 shapes keep a graph; a device buffer that grows drops them all.
 * The upload, the leader's copy and the mark stay outside the graph (their
 * host buffers and sequence numbers change every round). Loop thread.
 */
void toy_cuda_set_graphs(struct toy_cuda *b, bool on);

/**
 * toy_cuda_set_notify() - rk_gpu_notifier_set_mode() on the backend's notifier:
 * 0, -EBUSY (a mark outstanding: run the loop, retry), -EOPNOTSUPP (not
 * created AUTO, or no CUDA). Lazy marks (followers) stay lazy. Loop thread.
 */
int toy_cuda_set_notify(struct toy_cuda *b, enum rk_gpu_notify_mode mode);

/**
 * toy_cuda_abort() - a peer failed: abort the NCCL communicator so that no
 * collective of this rank hangs (call it from the world's peer_error). Rounds
 * in flight then complete with -ECONNRESET, later launches fail with it.
 */
void toy_cuda_abort(struct toy_cuda *b);

/** toy_cuda_busy() - true while a launched round has not been reported back. */
bool toy_cuda_busy(const struct toy_cuda *b);
/** toy_cuda_streams() - streams whose state the backend holds. */
uint32_t toy_cuda_streams(const struct toy_cuda *b);
/** toy_cuda_device() - the CUDA device in use. */
int toy_cuda_device(const struct toy_cuda *b);
/**
 * toy_cuda_logits() - leader, after a round completed: the summed logits of
 * output @out (V int32, valid until the next launch), or NULL.
 */
const int32_t *toy_cuda_logits(const struct toy_cuda *b, uint32_t out);
void toy_cuda_stats(const struct toy_cuda *b, struct toy_cuda_stats *out);

/**
 * toy_cuda_destroy() - free everything. Return: 0, -EBUSY (nothing freed)
 * while a round is in flight: run the loop until toy_cuda_busy() is false.
 * With TP > 1 the communicator is finalized, which waits (up to 5 s) for the
 * other ranks to finalize too: destroy every rank's backend at about the same
 * time, or toy_cuda_abort() first for a purely local teardown. Afterwards run
 * the loop once more (rk_loop_run(RK_RUN_NOWAIT); rk_world_destroy() delivers
 * no post) before rk_loop_destroy(): the notifier's last posts are released
 * there. A scheduler that drives the backend calls it until rk_sched_stop() or
 * rk_sched_destroy() (rk_sched.h: the teardown order). Loop thread.
 */
int toy_cuda_destroy(struct toy_cuda *b);

/* The backend's ops; ctx is the struct toy_cuda *. */
extern const struct rk_backend_ops toy_cuda_ops;

#ifdef __cplusplus
}
#endif
#endif /* TOY_CUDA_H */
