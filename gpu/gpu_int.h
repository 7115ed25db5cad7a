/* SPDX-License-Identifier: MIT */
/*
 * gpu/ internals: CUDA error conversion and the driver entry points. Never
 * installed; included only by gpu/ files built with CUDA.
 */
#ifndef RK_GPU_INT_H
#define RK_GPU_INT_H

#include <errno.h>

/*
 * cuda.h is read for its types only. libcuda is never linked (the driver is
 * absent on build machines): the few driver functions needed are looked up
 * at run time through cudart (cudaGetDriverEntryPointByVersion).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>

#include "rk_gpu.h"
#include "runtime_int.h"

/*
 * Convert a cudaError_t once, at the call: log its name and text, return
 * -EIO (0 on success). @what names the call.
 */
static inline int rk__cuda_check(int rank, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	rk__err(rank, "%s: %s (%s)", what, cudaGetErrorName(e), cudaGetErrorString(e));
	return -EIO;
}
#define RK_CUDA(rank, call) rk__cuda_check((rank), (call), #call)

/* Driver entry points, with our own typedefs (cudaTypedefs.h is not needed). */
typedef CUresult (*rk__cu_write_value64_fn)(CUstream stream, CUdeviceptr addr, cuuint64_t value,
					    unsigned int flags);
typedef CUresult (*rk__cu_device_get_fn)(CUdevice *dev, int ordinal);
typedef CUresult (*rk__cu_device_get_attribute_fn)(int *pi, CUdevice_attribute attrib,
						   CUdevice dev);
typedef CUresult (*rk__cu_get_error_name_fn)(CUresult error, const char **str);

struct rk__cu_driver {
	rk__cu_write_value64_fn write_value64;		/* NULL when the driver lacks it */
	rk__cu_device_get_fn device_get;
	rk__cu_device_get_attribute_fn device_get_attribute;
	rk__cu_get_error_name_fn get_error_name;
};

/*
 * The process's driver entry points, looked up once (thread-safe).
 * Return: the table (members NULL where missing), never NULL.
 */
const struct rk__cu_driver *rk__cu_driver(void);

/* Convert a CUresult: log it by name, return -EIO (0 on success). */
int rk__cu_check(int rank, CUresult r, const char *what);

/*
 * Whether CUDA device @dev can run 64-bit stream memory operations
 * (cuStreamWriteValue64). Return: 1, 0, or -EIO.
 */
int rk__cu_can_write64(int rank, int dev);

#endif /* RK_GPU_INT_H */
