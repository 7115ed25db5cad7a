/* SPDX-License-Identifier: MIT */
/*
 * The scheduler's round epochs (rk_sched.h), registered with CUDA so a stream
 * pre-armed with cuStreamWaitValue64 starts on the host's store of the epoch,
 * and kernels read the round's descriptor from the same mapping (rk_gpu.h).
 * Built only with CUDA.
 *
 * Ordering: the host release-stores the descriptor, then the epoch
 * (runtime/epoch.c). Host stores reach the device over PCIe in order, so the
 * kernels after the wait, which read the descriptor through the mapping
 * (uncached system memory), see the descriptor of the epoch they waited for
 * or a later one; they check its epoch field themselves.
 */
#include "config.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>

#include "gpu_int.h"
#include "rk_sched.h"
#include "runtime_int.h"

struct rk_gpu_epoch {
	struct rk_epoch *e;
	void *base;		/* host */
	void *dptr;		/* device */
	int dev;
	bool view;		/* a same-host follower's read-only view of the leader's */
};

int rk_gpu_epoch_register(struct rk_epoch *e, int cuda_device, struct rk_gpu_epoch **out)
{
	const struct rk__cu_driver *d;
	struct rk_gpu_epoch *g;
	size_t len;
	int ret;

	if (!e || !out)
		return -EINVAL;
	ret = rk__cuda_load();
	if (ret)
		return ret;
	d = rk__cu_driver();
	if (!d->wait_value64)
		return -EOPNOTSUPP;
	ret = rk__cu_can_write64(-1, cuda_device);	/* the 64-bit stream memory ops */
	if (ret <= 0)
		return ret < 0 ? ret : -EOPNOTSUPP;
	g = calloc(1, sizeof(*g));
	if (!g)
		return -ENOMEM;
	g->dev = cuda_device;
	g->base = rk_epoch_base(e, &len);
	g->view = rk__epoch_is_view(e);
	ret = RK_CUDA(-1, cudaSetDevice, cuda_device);
	if (ret)
		goto err_free;
	/* a view is mapped read-only: so must the device's mapping be */
	ret = RK_CUDA(-1, cudaHostRegister, g->base, len,
		      cudaHostRegisterMapped | cudaHostRegisterPortable |
			      (g->view ? cudaHostRegisterReadOnly : 0));
	if (ret)
		goto err_free;
	ret = RK_CUDA(-1, cudaHostGetDevicePointer, &g->dptr, g->base, 0);
	if (ret)
		goto err_unregister;
	rk_epoch_hold(e);
	g->e = e;
	*out = g;
	return 0;
err_unregister:
	rk__cudart.cudaHostUnregister(g->base);
err_free:
	free(g);
	return ret;
}

void *rk_gpu_epoch_device_ptr(const struct rk_gpu_epoch *g)
{
	return g ? g->dptr : NULL;
}

int rk_gpu_epoch_wait(struct rk_gpu_epoch *g, struct CUstream_st *stream, uint64_t want)
{
	const struct rk__cu_driver *d = rk__cu_driver();

	if (!g || !d->wait_value64)
		return -EOPNOTSUPP;
	if (g->view)
		return -EROFS;	/* rk_epoch_close() of a view could not end the wait */
	return rk__cu_check(-1, d->wait_value64(stream,
						(CUdeviceptr)(uintptr_t)g->dptr + RK_EPOCH_OFF_EPOCH,
						want, CU_STREAM_WAIT_VALUE_GEQ),
			    "cuStreamWaitValue64(epoch)");
}

int rk_gpu_epoch_unregister(struct rk_gpu_epoch **gp)
{
	struct rk_gpu_epoch *g = gp ? *gp : NULL;
	int ret;

	if (!g)
		return 0;
	*gp = NULL;
	ret = RK_CUDA(-1, cudaHostUnregister, g->base);
	rk_epoch_release(g->e);
	free(g);
	return ret;
}
