/* SPDX-License-Identifier: MIT */
/*
 * gpu/: the device probe, the driver entry points, and the -EOPNOTSUPP stubs
 * of everything that a build without CUDA (or without NCCL) compiles out.
 * The notifier is gpu/notifier.c (its CUDA device gpu/notifier_cuda.c, the
 * emulated one gpu/emu.c), the NCCL bootstrap gpu/nccl.c, the loading
 * of the CUDA and NCCL libraries at run time gpu/load.c.
 */
#include "config.h"

#include <errno.h>
#include <stddef.h>
#include <string.h>

#include "rk_gpu.h"

const char *rk_gpu_notify_mode_name(enum rk_gpu_notify_mode mode)
{
	switch (mode) {
	case RK_GPU_NOTIFY_AUTO:
		return "auto";
	case RK_GPU_NOTIFY_POLL:
		return "poll";
	case RK_GPU_NOTIFY_WAKE:
		return "wake";
	}
	return "?";
}

int rk_gpu_notify_mode_parse(const char *s)
{
	if (!s)
		return -EINVAL;
	if (!strcmp(s, "auto"))
		return RK_GPU_NOTIFY_AUTO;
	if (!strcmp(s, "poll"))
		return RK_GPU_NOTIFY_POLL;
	if (!strcmp(s, "wake"))
		return RK_GPU_NOTIFY_WAKE;
	return -EINVAL;
}

#ifdef RK_HAVE_CUDA
#include <pthread.h>

#include "gpu_int.h"

int rk_gpu_probe(void)
{
	int n = 0, ret;

	ret = rk__cuda_load();
	if (ret)
		return ret;
	if (rk__cudart.cudaGetDeviceCount(&n) != cudaSuccess || n == 0)
		return -ENODEV;
	return n;
}

/* Read-only after the once-initialisation: the rare justified global. */
static struct rk__cu_driver g_drv;
static pthread_once_t g_drv_once = PTHREAD_ONCE_INIT;

/*
 * The ABI version asked for: 12.0 gives the _v2 stream memory operations (the
 * ones cuda.h maps cuStreamWriteValue64 to since 11.7) and works on every
 * driver that runs CUDA 12 or 13 code.
 */
#define DRV_ABI 12000

static void *entry(const char *sym)
{
	enum cudaDriverEntryPointQueryResult q = cudaDriverEntryPointSymbolNotFound;
	void *fn = NULL;

	if (rk__cudart.cudaGetDriverEntryPointByVersion(sym, &fn, DRV_ABI, cudaEnableDefault, &q) !=
		    cudaSuccess ||
	    q != cudaDriverEntryPointSuccess)
		return NULL;
	return fn;
}

static void drv_load(void)
{
	if (rk__cuda_load())
		return;		/* no runtime to ask: every entry stays NULL */
	g_drv.write_value64 = (rk__cu_write_value64_fn)entry("cuStreamWriteValue64");
	g_drv.wait_value64 = (rk__cu_wait_value64_fn)entry("cuStreamWaitValue64");
	g_drv.device_get = (rk__cu_device_get_fn)entry("cuDeviceGet");
	g_drv.device_get_attribute =
		(rk__cu_device_get_attribute_fn)entry("cuDeviceGetAttribute");
	g_drv.get_error_name = (rk__cu_get_error_name_fn)entry("cuGetErrorName");
}

const struct rk__cu_driver *rk__cu_driver(void)
{
	pthread_once(&g_drv_once, drv_load);
	return &g_drv;
}

int rk__cu_check(int rank, CUresult r, const char *what)
{
	const struct rk__cu_driver *d = rk__cu_driver();
	const char *name = NULL;

	if (r == CUDA_SUCCESS)
		return 0;
	if (d->get_error_name)
		d->get_error_name(r, &name);
	rk__err(rank, "%s: CUresult %d (%s)", what, (int)r, name ? name : "?");
	return -EIO;
}

int rk__cu_can_write64(int rank, int dev)
{
	const struct rk__cu_driver *d = rk__cu_driver();
	CUdevice cd;
	int v = 0, ret;

	if (!d->write_value64 || !d->device_get || !d->device_get_attribute)
		return 0;
	ret = rk__cu_check(rank, d->device_get(&cd, dev), "cuDeviceGet");
	if (ret)
		return ret;
	ret = rk__cu_check(rank,
			   d->device_get_attribute(&v, CU_DEVICE_ATTRIBUTE_CAN_USE_64_BIT_STREAM_MEM_OPS,
						   cd),
			   "cuDeviceGetAttribute(CAN_USE_64_BIT_STREAM_MEM_OPS)");
	if (ret)
		return ret;
	return v ? 1 : 0;
}

#else /* !RK_HAVE_CUDA */

int rk_gpu_probe(void)
{
	return -EOPNOTSUPP;
}

int rk_gpu_epoch_register(struct rk_epoch *e, int cuda_device, struct rk_gpu_epoch **out)
{
	(void)e;
	(void)cuda_device;
	(void)out;
	return -EOPNOTSUPP;
}

void *rk_gpu_epoch_device_ptr(const struct rk_gpu_epoch *g)
{
	(void)g;
	return NULL;
}

int rk_gpu_epoch_wait(struct rk_gpu_epoch *g, struct CUstream_st *stream, uint64_t want)
{
	(void)g;
	(void)stream;
	(void)want;
	return -EOPNOTSUPP;
}

int rk_gpu_epoch_unregister(struct rk_gpu_epoch **g)
{
	if (g)
		*g = NULL;
	return 0;
}

int rk_gpu_notifier_create(struct rk_loop *loop, struct CUstream_st *stream,
			   enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb, void *arg,
			   struct rk_gpu_notifier **out)
{
	(void)loop;
	(void)stream;
	(void)mode;
	(void)cb;
	(void)arg;
	if (out)
		*out = NULL;
	return -EOPNOTSUPP;
}

#endif /* RK_HAVE_CUDA */

#ifndef RK_HAVE_NCCL
int rk_nccl_create(struct rk_world *w, int cuda_device, rk_nccl_ready_cb ready, void *arg,
		   struct rk_nccl **out)
{
	(void)w;
	(void)cuda_device;
	(void)ready;
	(void)arg;
	if (out)
		*out = NULL;
	return -EOPNOTSUPP;
}

void rk_nccl_busy(struct rk_nccl *n, bool busy)
{
	(void)n;
	(void)busy;
}

void rk_nccl_set_error_cb(struct rk_nccl *n, rk_nccl_error_cb cb, void *arg)
{
	(void)n;
	(void)cb;
	(void)arg;
}

void rk_nccl_set_release_cb(struct rk_nccl *n, rk_nccl_release_cb cb, void *arg)
{
	(void)n;
	(void)cb;
	(void)arg;
}

int rk_nccl_state(const struct rk_nccl *n)
{
	(void)n;
	return -EOPNOTSUPP;
}

int rk_nccl_progress(struct rk_nccl *n)
{
	(void)n;
	return -EOPNOTSUPP;
}

void *rk_nccl_comm(const struct rk_nccl *n)
{
	(void)n;
	return NULL;
}

int rk_nccl_device(const struct rk_nccl *n)
{
	(void)n;
	return -EOPNOTSUPP;
}

int rk_nccl_abort(struct rk_nccl *n)
{
	(void)n;
	return 0;
}

int rk_nccl_destroy(struct rk_nccl *n)
{
	(void)n;
	return 0;
}
#endif /* !RK_HAVE_NCCL */
