/* SPDX-License-Identifier: MIT */
/*
 * The CUDA device of the stream notifier (gpu/notifier.c has the design):
 * the word is host-mapped pinned memory written by cuStreamWriteValue64 on
 * the compute stream; the wake path is cudaEventRecord on the compute stream,
 * cudaStreamWaitEvent on a side stream and cudaLaunchHostFunc there. Built
 * only with CUDA.
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>

#include "gpu_int.h"
#include "notify_int.h"

struct cuda_dev {
	int rank;
	int dev;
	cudaStream_t stream;
	cudaStream_t side;		/* wake path: waits on ev, runs host functions */
	cudaEvent_t ev;
	uint64_t *word;			/* host-mapped pinned memory */
	CUdeviceptr dword;
	rk__cu_write_value64_fn write64;
};

/* Make @dev current, remembering the previous device in *@old. */
static int dev_enter(int rank, int dev, int *old)
{
	int ret = RK_CUDA(rank, cudaGetDevice, old);

	if (!ret && *old != dev)
		ret = RK_CUDA(rank, cudaSetDevice, dev);
	return ret;
}

static void dev_leave(int rank, int dev, int old)
{
	if (old >= 0 && old != dev)
		RK_CUDA(rank, cudaSetDevice, old);
}

static int cuda_write_word(void *p, uint64_t seq)
{
	struct cuda_dev *d = p;

	return rk__cu_check(d->rank,
			    d->write64((CUstream)d->stream, d->dword, seq,
				       CU_STREAM_WRITE_VALUE_DEFAULT),
			    "cuStreamWriteValue64");
}

static int cuda_record(void *p)
{
	struct cuda_dev *d = p;

	return RK_CUDA(d->rank, cudaEventRecord, d->ev, d->stream);
}

/* On a CUDA worker thread: no CUDA call, no blocking, no allocation. */
static void CUDART_CB cuda_host_fn(void *token)
{
	rk__notify_fire(token);
}

static int cuda_host_fn_enqueue(void *p, void *token)
{
	struct cuda_dev *d = p;
	int ret = RK_CUDA(d->rank, cudaStreamWaitEvent, d->side, d->ev, 0);

	if (!ret)
		ret = RK_CUDA(d->rank, cudaLaunchHostFunc, d->side, cuda_host_fn, token);
	return ret;
}

static int cuda_close(void *p, bool sync_stream, bool *hostfn_pending)
{
	struct cuda_dev *d = p;
	int ret, r, old = -1;

	ret = dev_enter(d->rank, d->dev, &old);
	if (sync_stream) {
		r = RK_CUDA(d->rank, cudaStreamSynchronize, d->stream);
		ret = ret ? ret : r;
	}
	if (d->side) {
		/* every host function has run: their posts are on the loop's inbox */
		r = RK_CUDA(d->rank, cudaStreamSynchronize, d->side);
		if (r) {
			*hostfn_pending = true;
			ret = ret ? ret : r;
		}
		r = RK_CUDA(d->rank, cudaEventDestroy, d->ev);
		ret = ret ? ret : r;
		r = RK_CUDA(d->rank, cudaStreamDestroy, d->side);
		ret = ret ? ret : r;
	}
	if (d->word) {
		r = RK_CUDA(d->rank, cudaFreeHost, d->word);
		ret = ret ? ret : r;
	}
	dev_leave(d->rank, d->dev, old);
	free(d);
	return ret;
}

static const struct rk__notify_dev_ops cuda_ops = {
	.name = "cuda",
	.write_word = cuda_write_word,
	.record = cuda_record,
	.host_fn = cuda_host_fn_enqueue,
	.close = cuda_close,
};

int rk_gpu_notifier_create(struct rk_loop *loop, struct CUstream_st *stream,
			   enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb, void *arg,
			   struct rk_gpu_notifier **out)
{
	enum rk_gpu_notify_mode eff = mode;
	struct cuda_dev *d;
	void *dptr = NULL;
	int ret, old = -1, can;
	bool use_poll, use_wake;

	ret = rk__cuda_load();
	if (ret) {
		if (out)
			*out = NULL;
		return ret;
	}
	if (!loop || !cb || !out ||
	    (mode != RK_GPU_NOTIFY_AUTO && mode != RK_GPU_NOTIFY_POLL &&
	     mode != RK_GPU_NOTIFY_WAKE))
		return -EINVAL;
	d = calloc(1, sizeof(*d));
	if (!d)
		return -ENOMEM;
	d->rank = rk__loop_rank(loop);
	d->stream = stream;
	use_poll = mode != RK_GPU_NOTIFY_WAKE;
	use_wake = mode != RK_GPU_NOTIFY_POLL;

	ret = RK_CUDA(d->rank, cudaGetDevice, &old);
	if (ret)
		goto err_free;
	d->dev = old;
	if (stream) {
		ret = RK_CUDA(d->rank, cudaStreamGetDevice, stream, &d->dev);
		if (ret)
			goto err_free;
	}
	ret = dev_enter(d->rank, d->dev, &old);
	if (ret)
		goto err_free;

	if (use_poll) {
		can = rk__cu_can_write64(d->rank, d->dev);
		if (can < 0) {
			ret = can;
			goto err_dev;
		}
		if (!can && mode == RK_GPU_NOTIFY_POLL) {
			rk__err(d->rank, "gpu notifier: device %d has no 64-bit stream memory "
				"operations (or the driver lacks cuStreamWriteValue64)", d->dev);
			ret = -EOPNOTSUPP;
			goto err_dev;
		}
		if (!can) {
			rk__warn(d->rank, "gpu notifier: device %d has no 64-bit stream memory "
				 "operations: wake path only", d->dev);
			use_poll = false;
			eff = RK_GPU_NOTIFY_WAKE;
		}
	}
	if (use_poll) {
		d->write64 = rk__cu_driver()->write_value64;
		ret = RK_CUDA(d->rank, cudaHostAlloc, (void **)&d->word, 64,
			      cudaHostAllocMapped | cudaHostAllocPortable);
		if (ret)
			goto err_dev;
		__atomic_store_n(d->word, 0, __ATOMIC_RELEASE);
		ret = RK_CUDA(d->rank, cudaHostGetDevicePointer, &dptr, d->word, 0);
		if (ret)
			goto err_word;
		d->dword = (CUdeviceptr)(uintptr_t)dptr;
	}
	if (use_wake) {
		ret = RK_CUDA(d->rank, cudaStreamCreateWithFlags, &d->side, cudaStreamNonBlocking);
		if (ret)
			goto err_word;
		ret = RK_CUDA(d->rank, cudaEventCreateWithFlags, &d->ev, cudaEventDisableTiming);
		if (ret)
			goto err_side;
	}
	ret = rk__notifier_create(loop, eff, cb, arg, &cuda_ops, d, d->word,
				  d->word && d->side, out);
	if (ret)
		goto err_event;
	dev_leave(d->rank, d->dev, old);
	return 0;
err_event:
	if (d->ev)
		rk__cudart.cudaEventDestroy(d->ev);
err_side:
	if (d->side)
		rk__cudart.cudaStreamDestroy(d->side);
err_word:
	if (d->word)
		rk__cudart.cudaFreeHost(d->word);
err_dev:
	dev_leave(d->rank, d->dev, old);
err_free:
	free(d);
	return ret;
}
