/* SPDX-License-Identifier: MIT */
/*
 * gpu/ internals: the run-time loaded CUDA and NCCL functions, CUDA error
 * conversion and the driver entry points. Never installed; included only by
 * gpu/ files built with CUDA (and the tests of them).
 */
#ifndef RK_GPU_INT_H
#define RK_GPU_INT_H

#include <errno.h>
#include <stddef.h>

/*
 * The CUDA and NCCL headers are read for types and prototypes only: nothing
 * here links libcuda, libcudart or libnccl, so librankrt loads on a host
 * without them (gpu/load.c opens them at first use).
 */
#include <cuda.h>
#include <cuda_runtime_api.h>
#ifdef RK_HAVE_NCCL
/* nccl.h declares a few functions without prototypes, e.g. ncclGroupStart() */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wstrict-prototypes"
#include <nccl.h>
#pragma GCC diagnostic pop
#endif

#include "rk_gpu.h"
#include "runtime_int.h"

/*
 * The functions gpu/ calls, one X(name) each, resolved by name with dlsym()
 * from the library of the list. Each table member is declared with the type of
 * the header's own prototype (__typeof__), so a call with the wrong arguments
 * is a compile error, as with a direct call. The symbol looked up is the name
 * after macro expansion (RK__XSTR): where a header maps a name (the _ptsz
 * variants under per-thread default streams), the table follows it.
 */
#define RK__CUDART_FNS(X)			\
	X(cudaGetErrorName)			\
	X(cudaGetErrorString)			\
	X(cudaGetDeviceCount)			\
	X(cudaGetDevice)			\
	X(cudaSetDevice)			\
	X(cudaGetDriverEntryPointByVersion)	\
	X(cudaStreamCreateWithFlags)		\
	X(cudaStreamDestroy)			\
	X(cudaStreamGetDevice)			\
	X(cudaStreamSynchronize)		\
	X(cudaStreamWaitEvent)			\
	X(cudaEventCreateWithFlags)		\
	X(cudaEventDestroy)			\
	X(cudaEventRecord)			\
	X(cudaLaunchHostFunc)			\
	X(cudaHostAlloc)			\
	X(cudaHostGetDevicePointer)		\
	X(cudaHostRegister)			\
	X(cudaHostUnregister)			\
	X(cudaFreeHost)

#define RK__NCCL_FNS(X)				\
	X(ncclGetErrorString)			\
	X(ncclGetLastError)			\
	X(ncclGetUniqueId)			\
	X(ncclCommInitRankConfig)		\
	X(ncclCommSplit)			\
	X(ncclCommGetAsyncError)		\
	X(ncclCommFinalize)			\
	X(ncclCommDestroy)			\
	X(ncclCommAbort)

#define RK__STR(x)		#x
#define RK__XSTR(x)		RK__STR(x)
#define RK__FN_MEMBER(f)	__typeof__(f) *f;

/* libcudart.so.<CUDART_VERSION / 1000>: filled once by rk__cuda_load(), then read-only. */
struct rk__cudart_fns {
	RK__CUDART_FNS(RK__FN_MEMBER)
};
extern struct rk__cudart_fns rk__cudart;

#ifdef RK_HAVE_NCCL
/* libnccl.so.<NCCL_MAJOR>: filled once by rk__nccl_load(), then read-only. */
struct rk__nccl_fns {
	RK__NCCL_FNS(RK__FN_MEMBER)
};
extern struct rk__nccl_fns rk__nccl;
#endif

/*
 * rk__cuda_load() - open the CUDA driver (libcuda.so.1) and runtime
 * (libcudart.so.<major of the build>) and fill rk__cudart, once per process.
 * Any thread; the first call does the work, concurrent ones wait for it
 * (pthread_once), later ones return its result. It initialises nothing in
 * CUDA (no driver call is made). Return: 0, or -RK_ENOGPU when a library or
 * one of its symbols cannot be loaded: that is logged once, with dlerror().
 * Every rk__cudart call is made after a 0 from here, on this thread or on one
 * that the caller synchronised with (an object created after it).
 */
int rk__cuda_load(void);

#ifdef RK_HAVE_NCCL
/*
 * rk__nccl_load() - rk__cuda_load(), then open libnccl.so.<major> and fill
 * rk__nccl, once. Return: 0 or -RK_ENOGPU (logged once, as above). Any thread.
 */
int rk__nccl_load(void);

/*
 * rk__nccl_take_id() - @n's NCCL_ID frame from rank @peer, carrying @id (the
 * world hands it over through @n's claim; tests call it directly). Return:
 * RK_BUSY when taken; -EPROTO when it is not from rank 0, on rank 0, or a
 * second one (logged; the first id stays); -EIO when the init call failed
 * (the ready callback has run). Loop thread.
 */
int rk__nccl_take_id(struct rk_nccl *n, int peer, const uint8_t id[RK_WIRE_NCCL_ID_LEN]);
#endif

/* The libraries gpu/load.c opens, in the order it opens them. */
enum rk__gpu_lib {
	RK__GPU_LIB_DRIVER,	/* libcuda.so.1: opened to be present, no symbol taken */
	RK__GPU_LIB_CUDART,	/* rk__cudart */
#ifdef RK_HAVE_NCCL
	RK__GPU_LIB_NCCL,	/* rk__nccl */
#endif
	RK__GPU_LIB__COUNT,
};

/* rk__gpu_soname() - the soname opened for @lib ("libcudart.so.13"), "?" out of range. */
const char *rk__gpu_soname(enum rk__gpu_lib lib);

/*
 * rk__gpu_dl_open() - one step of the loaders: dlopen @lib and resolve its
 * table, with no once-guard and no log (the tests call it to check that every
 * symbol of a table exists in the library). Not thread-safe. Return: 0, or
 * -RK_ENOGPU with dlerror()'s text in @why (@cap bytes, always terminated).
 */
int rk__gpu_dl_open(enum rk__gpu_lib lib, char *why, size_t cap);

/*
 * Convert a cudaError_t once, at the call: log its name and text, return
 * -EIO (0 on success). @what names the call. RK_CUDA(rank, fn, args...)
 * calls rk__cudart.fn(args...) and converts its result.
 */
static inline int rk__cuda_check(int rank, cudaError_t e, const char *what)
{
	if (e == cudaSuccess)
		return 0;
	rk__err(rank, "%s: %s (%s)", what, rk__cudart.cudaGetErrorName(e),
		rk__cudart.cudaGetErrorString(e));
	return -EIO;
}
#define RK_CUDA(rank, fn, ...)							\
	rk__cuda_check((rank), rk__cudart.fn(__VA_ARGS__), #fn "(" #__VA_ARGS__ ")")

/*
 * Driver entry points, typed from cuda.h's prototypes (cuStreamWriteValue64
 * is its _v2, the ABI asked for). They come from the runtime
 * (cudaGetDriverEntryPointByVersion), which hands out the driver's own.
 */
typedef __typeof__(cuStreamWriteValue64) *rk__cu_write_value64_fn;
typedef __typeof__(cuStreamWaitValue64) *rk__cu_wait_value64_fn;
typedef __typeof__(cuDeviceGet) *rk__cu_device_get_fn;
typedef __typeof__(cuDeviceGetAttribute) *rk__cu_device_get_attribute_fn;
typedef __typeof__(cuGetErrorName) *rk__cu_get_error_name_fn;

struct rk__cu_driver {
	rk__cu_write_value64_fn write_value64;		/* NULL when the driver lacks it */
	rk__cu_wait_value64_fn wait_value64;		/* NULL when the driver lacks it */
	rk__cu_device_get_fn device_get;
	rk__cu_device_get_attribute_fn device_get_attribute;
	rk__cu_get_error_name_fn get_error_name;
};

/*
 * The process's driver entry points, looked up once (thread-safe).
 * Return: the table (members NULL where missing, all NULL when CUDA could
 * not be loaded), never NULL.
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
