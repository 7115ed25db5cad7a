/* SPDX-License-Identifier: MIT */
/*
 * rankrt GPU: CUDA stream completion notifications and the NCCL bootstrap.
 *
 * Built only with --with-cuda (the CUDA notifier) and --with-nccl (the NCCL
 * part); the notifier on an emulated device (rk_gpu_emu_create()) is built in
 * every configuration. Otherwise every call returns -EOPNOTSUPP (the pointer getters NULL; the
 * release calls 0), so programs build and link in every configuration. No CUDA or NCCL header is
 * included here: a stream is a struct CUstream_st * (cudaStream_t and CUstream
 * are both that pointer), a communicator is handed out as void *.
 *
 * librankrt links no CUDA or NCCL library: a build with them opens the CUDA
 * driver (libcuda.so.1), the runtime (libcudart.so.<major of the build>) and
 * NCCL (libnccl.so.2) with dlopen at the first rk_gpu_probe(),
 * rk_gpu_notifier_create() or rk_nccl_create(), through the dynamic loader's
 * usual search (LD_LIBRARY_PATH, the ld.so cache). On a host without them
 * librankrt still loads and its CPU paths run; those three calls return
 * -RK_ENOGPU (the notifier and rk_gpu_probe() need the driver and the runtime,
 * rk_nccl_create() NCCL too), and a warning naming the library and the
 * loader's reason is logged once per process. A program that links libcudart
 * or libnccl itself shares the same copy with rankrt (same soname), so its
 * streams and communicators are rankrt's.
 *
 * Threads: everything here belongs to the loop thread of the loop it was
 * created on, except rk_gpu_probe() (any thread). CUDA errors are logged once
 * with the CUDA/NCCL string and returned as -EIO. docs/GPU.md has the design
 * and the measurements.
 */
#ifndef RK_GPU_H
#define RK_GPU_H

#include <stdbool.h>
#include "rk_common.h"
#include "rk_runtime.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st;

/**
 * rk_gpu_probe() - count the CUDA devices this process can use.
 * Return: the count (> 0), -ENODEV when the driver reports none (or fails),
 * -RK_ENOGPU when the CUDA driver or runtime library cannot be loaded (logged
 * once), -EOPNOTSUPP when rankrt was built without CUDA. Any thread.
 * Note: this initialises CUDA in the calling process (fork after it is unsafe).
 */
RK_EXPORT int rk_gpu_probe(void);

/* ---- round epochs on the GPU (resident consumers) ------------------------------- */

struct rk_epoch;		/* rk_sched.h: the scheduler's round epochs */
struct rk_gpu_epoch;

/**
 * rk_gpu_epoch_register() - make the epoch region @e (rk_sched_epoch())
 * visible to CUDA device @cuda_device: cudaHostRegister (mapped, portable)
 * of the whole page-aligned region, so a stream can wait on its epoch word
 * and kernels can read the descriptor through rk_gpu_epoch_device_ptr(). It
 * holds a reference on @e until rk_gpu_epoch_unregister(). A same-host
 * follower's region (rk_sched_epoch() of a backend with
 * RK_BACKEND_SHARED_EPOCH) is its read-only view of the leader's: it is
 * registered read-only (cudaHostRegisterReadOnly), so the leader's one store
 * reaches this device with no CPU of this process in the way; kernels only
 * read it.
 * Return: 0 and *@out; -EOPNOTSUPP (built without CUDA, or the driver lacks
 * 64-bit stream memory operations: cuStreamWaitValue64), -RK_ENOGPU, -ENOMEM,
 * -EIO (CUDA, logged). The caller falls back to launching (its own log line
 * and counter). Loop thread.
 */
RK_EXPORT int rk_gpu_epoch_register(struct rk_epoch *e, int cuda_device,
				    struct rk_gpu_epoch **out);

/**
 * rk_gpu_epoch_device_ptr() - the device address of the region's first byte
 * (add the RK_EPOCH_OFF_* offsets of rk_sched.h); NULL without CUDA.
 */
RK_EXPORT void *rk_gpu_epoch_device_ptr(const struct rk_gpu_epoch *g);

/**
 * rk_gpu_epoch_wait() - pre-arm @stream: the work enqueued after this call
 * runs once the region's epoch is at least @want (cuStreamWaitValue64, GEQ,
 * from the driver table of gpu/load.c). The stream stays blocked until then:
 * its owner ends a wait that will never be met with rk_epoch_close() before
 * synchronising the stream. Return: 0; -EOPNOTSUPP; -EROFS on a follower's
 * view of the leader's region (nothing enqueued: closing a view cannot end
 * the wait, so poll the epoch word from a kernel, which can also read a word
 * of the caller's own to give up); -EIO (logged). Loop thread.
 */
RK_EXPORT int rk_gpu_epoch_wait(struct rk_gpu_epoch *g, struct CUstream_st *stream,
				uint64_t want);

/**
 * rk_gpu_epoch_unregister() - undo rk_gpu_epoch_register() (no stream may
 * still wait on the region: synchronise them first) and drop its reference;
 * *@g becomes NULL. Return: 0, or -EIO (logged; the reference is dropped
 * anyway). NULL or *@g NULL: 0. Loop thread.
 */
RK_EXPORT int rk_gpu_epoch_unregister(struct rk_gpu_epoch **g);

/* ---- stream notifications ------------------------------------------------------- */

/*
 * How a notifier learns that the work before a mark is done:
 * - POLL: the stream writes the mark's sequence number into host-mapped memory
 *   (cuStreamWriteValue64); the loop reads it in its source poll. Lowest
 *   latency, but nothing wakes a blocked loop: while marks are outstanding the
 *   source keeps the loop from blocking (it spins until they are delivered).
 * - WAKE: a host function (cudaLaunchHostFunc) on a side stream, ordered after
 *   the mark by an event, posts to the loop (rk_loop_post); it wakes a blocked
 *   loop. Costs a CUDA worker thread hop (docs/GPU.md has the figure).
 * - AUTO: both; whichever sees a mark first delivers it. Once the notifier
 *   can predict how long a mark takes (after a few marks), marks enqueue the
 *   word only, and the loop sleeps until shortly before the predicted time
 *   (RK_PREDICT, rk_source_ops.expect) and spins for the rest; a mark that
 *   becomes overdue gets its host function when the loop wants to block.
 * POLL predicts too (the loop sleeps as in AUTO, and spins once overdue).
 */
enum rk_gpu_notify_mode {
	RK_GPU_NOTIFY_AUTO = 0,
	RK_GPU_NOTIFY_POLL = 1,
	RK_GPU_NOTIFY_WAKE = 2,
};

/* Marks that may be outstanding at once (a mark beyond it gets -EAGAIN). */
#define RK_GPU_NOTIFY_SLOTS 256

struct rk_gpu_notifier;

/*
 * A mark is done. Runs on the loop thread, exactly once per mark, in mark
 * order, from whichever path saw it first. It may call rk_gpu_notifier_mark()
 * (and launch more work), but not rk_gpu_notifier_destroy() on @n. Return
 * RK_BUSY (real work done) or RK_IDLE.
 */
typedef enum rk_activity (*rk_gpu_done_cb)(struct rk_gpu_notifier *n, uint64_t cookie,
					   void *arg);

struct rk_gpu_notifier_stats {
	uint64_t marks;			/* marks enqueued */
	uint64_t via_poll;		/* delivered because the loop saw the word */
	uint64_t via_wake;		/* delivered by a host function's post */
	uint64_t wake_late;		/* host-function posts that found their mark delivered */
	uint64_t refused;		/* marks refused with -EAGAIN (all slots in flight) */
	uint32_t outstanding;		/* marks not yet delivered */
	uint32_t max_outstanding;
	uint64_t predicted;		/* AUTO marks enqueued without a host function */
	uint64_t wake_armed_late;	/* host functions enqueued for an overdue mark */
	uint64_t pred_bounded;		/* deliveries seen after a gap (upper bounds only) */
	uint64_t pred_mean_ns;		/* the predictor: a mark's duration, mean */
	uint64_t pred_dev_ns;		/* ...and mean deviation */
	uint64_t pred_q_ns;		/* ...and its low quantile: the expected duration */
	uint64_t lazy_sleeps;		/* lazy: bounded sleeps that armed nothing for a mark */
};

/**
 * rk_gpu_notifier_create() - a completion source for @stream on @loop.
 * @stream: the compute stream (NULL = the legacy default stream); the
 *          notifier never synchronizes it except in a forced destroy.
 * @mode: see enum rk_gpu_notify_mode. AUTO falls back to WAKE (and logs it)
 *        when the device cannot do 64-bit stream memory operations.
 * @cb, @arg: the done callback.
 * The notifier allocates one host-mapped word, a side stream (non-blocking,
 * on the stream's device) and an event, and attaches a loop source.
 * Return: 0 and *@out; -RK_ENOGPU (the CUDA driver or runtime library cannot
 * be loaded; checked first, *@out NULL); -EINVAL (NULL loop/cb/out, unknown
 * mode); -EOPNOTSUPP (built without CUDA, or POLL on a device without 64-bit
 * stream memory operations, or the driver lacks cuStreamWriteValue64);
 * -ENOMEM; -EIO (a CUDA call failed, logged). Loop thread; the calling
 * thread's current CUDA device is left as it was.
 */
RK_EXPORT int rk_gpu_notifier_create(struct rk_loop *loop, struct CUstream_st *stream,
				     enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb, void *arg,
				     struct rk_gpu_notifier **out);

/**
 * rk_gpu_notifier_mark() - enqueue "done" after the work already on the
 * stream; the callback gets @cookie once it has finished.
 * Return: 0; -EAGAIN when RK_GPU_NOTIFY_SLOTS marks are outstanding (or their
 * host functions have not been delivered yet): run the loop and retry;
 * -ESHUTDOWN after a failed mark; -EIO when CUDA refused the work (logged).
 * After -EIO the mark may or may not be delivered and the notifier refuses
 * new marks: destroy it (forced). Loop thread; the stream's device need not
 * be current.
 */
RK_EXPORT int rk_gpu_notifier_mark(struct rk_gpu_notifier *n, uint64_t cookie);

/**
 * rk_gpu_notifier_set_lazy() - say whether anything on this rank waits for
 * these marks promptly. Lazy marks (@lazy true) are for work whose completion
 * nobody waits on here, e.g. a tensor-parallel follower's share of a round,
 * which reaches the leader through the collective: the source then gives the
 * loop no prediction for them (it neither wakes early nor spins for them), and
 * a wait with a timeout arms nothing for them (they are delivered when the
 * loop next runs: its timeout, or any other event). A wait without a timeout
 * still arms the wake path (AUTO), so delivery stays bounded; POLL keeps such
 * a wait from starting. Default: not lazy. Takes effect for the
 * next wait. Loop thread.
 */
RK_EXPORT void rk_gpu_notifier_set_lazy(struct rk_gpu_notifier *n, bool lazy);

/**
 * rk_gpu_notifier_set_mode() - switch between AUTO, POLL and WAKE at run time,
 * e.g. to compare them in one process. Only a notifier created AUTO has what
 * every mode needs (the host word and the side stream), and only while no
 * mark is outstanding: a mark keeps the paths it was enqueued with.
 * Return: 0; -EINVAL (no such mode); -EOPNOTSUPP (not created AUTO, or AUTO
 * fell back to WAKE); -EBUSY (marks outstanding: run the loop and retry).
 * Loop thread.
 */
RK_EXPORT int rk_gpu_notifier_set_mode(struct rk_gpu_notifier *n, enum rk_gpu_notify_mode mode);

/** rk_gpu_notifier_outstanding() - marks enqueued and not yet delivered. */
RK_EXPORT unsigned int rk_gpu_notifier_outstanding(const struct rk_gpu_notifier *n);

/** rk_gpu_notifier_mode() - the mode in effect (AUTO may have become WAKE). */
RK_EXPORT enum rk_gpu_notify_mode rk_gpu_notifier_mode(const struct rk_gpu_notifier *n);

/** rk_gpu_notifier_stats() - copy the counters into @out of @size bytes (sizeof(*out)), as
 * rk_loop_stats() does. Return: the bytes of counters written. Loop thread. */
RK_EXPORT size_t rk_gpu_notifier_stats(const struct rk_gpu_notifier *n,
				       struct rk_gpu_notifier_stats *out, size_t size);

/**
 * rk_gpu_notifier_destroy() - release the notifier.
 * Without @force: -EBUSY (nothing changes) while marks are outstanding.
 * With @force: outstanding marks are dropped (no callback runs for them) after
 * the compute stream is synchronized (so abort an NCCL communicator first if a
 * collective on it may hang).
 * Then the side stream is synchronized, so every host function has run, and
 * the CUDA resources are freed. Posts those host functions queued on the loop
 * are still owned by the loop: the notifier's remaining memory and its source
 * are released when the loop next drains them, so run the loop once more
 * (rk_loop_destroy() reports -EBUSY until then). Return: 0, -EBUSY, or the
 * first CUDA error (-EIO; everything is released anyway). NULL is a no-op.
 * Loop thread, not from the notifier's own callback.
 */
RK_EXPORT int rk_gpu_notifier_destroy(struct rk_gpu_notifier *n, bool force);

/* ---- an emulated device, for benchmarks and tests ------------------------------- */

/*
 * An emulated device: a compute stream whose work items take a given device
 * time, run in order, and a notifier on it that is the CUDA notifier (the
 * same marks, polled word, wake path, predictor and lazy marks: gpu/notifier.c)
 * with the device side emulated. Built in every configuration (no CUDA).
 * Device time follows the emulator's clock (CLOCK_MONOTONIC, the loop's, by
 * default): work launched at t on an idle device of duration d ends at t + d,
 * and behind earlier work otherwise. A mark's word is written when the work
 * before it ends; a host function (the wake path) runs wake_ns after its mark
 * is done (or after it was enqueued, if later), then posts to the loop.
 *
 * RK_GPU_EMU_WAKE_NS: the host-function hop measured on an H200 (docs/GPU.md,
 * "Stream notifications"): host function -> eventfd -> blocked read is 32.3 us
 * at p50, the raw word (cuStreamWriteValue64 seen by a spinning reader) 9.0 us;
 * the difference, 23 us, is what the wake path costs on top of the word. The
 * emulated word itself costs nothing extra.
 */
#define RK_GPU_EMU_WAKE_NS	23000ull

struct rk_gpu_emu;

struct rk_gpu_emu_attr {
	uint64_t wake_ns;		/* a host function's cost (default RK_GPU_EMU_WAKE_NS) */
	/* device time, ns (NULL: CLOCK_MONOTONIC); tests pass the loop's injected clock */
	uint64_t (*clock)(void *arg);
	void *clock_arg;
	/*
	 * false: a device thread makes the word writes and runs the host functions
	 * at their times. true: no thread; rk_gpu_emu_run() does what is due by
	 * the clock (tests step the device by hand).
	 */
	bool manual;
};

/** rk_gpu_emu_attr_init() - the defaults: wake_ns RK_GPU_EMU_WAKE_NS, CLOCK_MONOTONIC, a thread. */
RK_EXPORT void rk_gpu_emu_attr_init(struct rk_gpu_emu_attr *a);

/**
 * rk_gpu_emu_create() - an emulated device (@a NULL: the defaults), for
 * benchmarks and tests. Starts its device thread unless @a->manual. The
 * caller owns *@out and releases it with rk_gpu_emu_destroy(); @a is copied.
 * Return: 0 and *@out; -EINVAL (NULL @out); -ENOMEM; -errno from
 * pthread_create. Any thread.
 */
RK_EXPORT int rk_gpu_emu_create(const struct rk_gpu_emu_attr *a, struct rk_gpu_emu **out);

/**
 * rk_gpu_emu_launch() - enqueue work of @duration_ns device time on the
 * compute stream, behind the work already there. Nothing runs on the host:
 * the device is only busy until then. Return: 0 and the device time at which
 * this work ends in *@end (may be NULL); -EINVAL (NULL @e). Any thread.
 */
RK_EXPORT int rk_gpu_emu_launch(struct rk_gpu_emu *e, uint64_t duration_ns, uint64_t *end);

/**
 * rk_gpu_emu_run() - a manual device: make the word writes and run the host
 * functions due by the clock now, in time order. Return: how many ran (0 when
 * nothing was due); -EINVAL (NULL @e, or a device with its own thread). Any
 * thread; the host functions post to their loops (rk_loop_post()).
 */
RK_EXPORT int rk_gpu_emu_run(struct rk_gpu_emu *e);

/**
 * rk_gpu_emu_destroy() - stop the device thread and free @e. Return: 0;
 * -EBUSY (nothing changes) while a notifier is still created on it: destroy
 * those first. NULL: 0. Any thread, not a device's host function.
 */
RK_EXPORT int rk_gpu_emu_destroy(struct rk_gpu_emu *e);

/**
 * rk_gpu_notifier_create_emu() - rk_gpu_notifier_create() on the emulated
 * device @e instead of a CUDA stream: every mark covers the work launched on
 * @e before it (rk_gpu_emu_launch()); the word and the host functions are the
 * emulator's (see above). Every notifier call works on it as on CUDA's
 * (rk_gpu_notifier_set_mode() included: it has every path). The caller owns
 * *@out (rk_gpu_notifier_destroy()); @e is borrowed and must outlive it
 * (rk_gpu_emu_destroy() says -EBUSY until then).
 * Return: 0 and *@out; -EINVAL (NULL @loop, @e, @cb or @out, unknown mode);
 * -ENOMEM. Loop thread.
 */
RK_EXPORT int rk_gpu_notifier_create_emu(struct rk_loop *loop, struct rk_gpu_emu *e,
					 enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb,
					 void *arg, struct rk_gpu_notifier **out);

/** rk_gpu_notify_mode_name() - "auto", "poll", "wake" ("?" out of range). */
RK_EXPORT const char *rk_gpu_notify_mode_name(enum rk_gpu_notify_mode mode);
/** rk_gpu_notify_mode_parse() - "auto"/"poll"/"wake" to the mode, or -EINVAL. */
RK_EXPORT int rk_gpu_notify_mode_parse(const char *s);

/* ---- NCCL bootstrap -------------------------------------------------------------- */

struct rk_nccl;

/*
 * The communicator is ready (@status 0; rk_nccl_comm() is valid) or failed to
 * come up (@status < 0: -EIO from NCCL, -ECONNRESET after rk_nccl_abort(), the
 * world's failure). Called once, on the loop thread.
 */
typedef void (*rk_nccl_ready_cb)(struct rk_nccl *n, int status, void *arg);
/*
 * A ready communicator failed asynchronously (ncclCommGetAsyncError reported an
 * error: logged, -EIO). The communicator has already been aborted, so no
 * collective of this rank hangs. Called at most once, on the loop thread.
 */
typedef void (*rk_nccl_error_cb)(struct rk_nccl *n, int err, void *arg);

/* Polling periods of the loop timer that drives a communicator. */
#define RK_NCCL_INIT_POLL_MS	1	/* while waiting for the world and the non-blocking init */
#define RK_NCCL_WATCH_MS	100	/* while ready: the async-error watch (a peer's death is
					 * seen sooner on the rank links, which abort the comm) */

/**
 * rk_nccl_create() - bring up one NCCL communicator over @w's ranks (NCCL rank
 * = world rank), on CUDA device @cuda_device.
 * The leader calls ncclGetUniqueId and, once every follower's link is up,
 * broadcasts it in an NCCL_ID frame; a follower waits for that frame, which
 * the world hands to the communicator from this call until rk_nccl_destroy()
 * (never to the world's frame callback; a second one, or one on the leader,
 * is logged and dropped). Every rank then starts a non-blocking
 * ncclCommInitRankConfig (config.blocking = 0) which a loop timer polls with
 * ncclCommGetAsyncError until it leaves ncclInProgress, then splits a child
 * communicator with config.blocking = 1 off it, polled the same way; the loop
 * never stalls. Collectives go to the child (rk_nccl_comm()): they enqueue
 * inline instead of on a thread NCCL creates per call. Requires
 * NCCL_RUNTIME_CONNECT=0, so that no collective connects (and blocks) at
 * first use.
 * @ready (may be NULL) reports the outcome. Call it before the world is
 * ready on a follower (the leader's id may arrive with the WELCOME; one that
 * comes while no communicator exists goes to the world's frame callback); a
 * world that fails before the communicator is up fails it too.
 * Return: 0 and *@out; -RK_ENOGPU (the CUDA driver, runtime or NCCL library
 * cannot be loaded; checked first, *@out NULL); -EINVAL; -EOPNOTSUPP (built
 * without NCCL); -EBUSY (another communicator of @w takes its NCCL_ID);
 * -ENOMEM; -EIO (cudaSetDevice or ncclGetUniqueId failed, logged). Loop
 * thread; makes @cuda_device the thread's current device.
 */
RK_EXPORT int rk_nccl_create(struct rk_world *w, int cuda_device, rk_nccl_ready_cb ready,
			     void *arg, struct rk_nccl **out);

/**
 * rk_nccl_busy() - tell whether collectives of the communicator are in flight.
 * Once ready, ncclCommGetAsyncError is watched every RK_NCCL_WATCH_MS only
 * while busy (and once more after), so an idle rank gets no wake-ups from it;
 * a peer's death while idle still comes through the world (rk_nccl_abort()).
 * Default: not busy. Loop thread; any state.
 */
RK_EXPORT void rk_nccl_busy(struct rk_nccl *n, bool busy);

/** rk_nccl_set_error_cb() - where asynchronous errors go (NULL = only logged). */
RK_EXPORT void rk_nccl_set_error_cb(struct rk_nccl *n, rk_nccl_error_cb cb, void *arg);

/*
 * The communicator is about to be aborted or destroyed (ncclCommAbort,
 * ncclCommFinalize): release what holds it. NCCL waits inside those calls
 * until every CUDA graph that captured one of its collectives has been
 * destroyed, so an owner that captures collectives destroys its graphs here
 * (an exec still running is freed by CUDA once it ends, which the abort
 * brings about). Called on the loop thread, at most once, before the abort
 * or destroy of a communicator that came up; make no rk_nccl call from it.
 */
typedef void (*rk_nccl_release_cb)(struct rk_nccl *n, void *arg);

/**
 * rk_nccl_set_release_cb() - set the hook above (NULL: none). Loop thread;
 * set it before the first collective is captured.
 */
RK_EXPORT void rk_nccl_set_release_cb(struct rk_nccl *n, rk_nccl_release_cb cb, void *arg);

/**
 * rk_nccl_state() - 1 when ready, 0 while coming up, or the failure (< 0):
 * the ready callback's status, -EIO after an async error, -ECONNRESET after
 * rk_nccl_abort(). Loop thread.
 */
RK_EXPORT int rk_nccl_state(const struct rk_nccl *n);

/**
 * rk_nccl_progress() - poll the init (or the error watch) once now, instead of
 * waiting for the timer; may run the ready or error callback.
 * Return: rk_nccl_state() afterwards. Loop thread.
 */
RK_EXPORT int rk_nccl_progress(struct rk_nccl *n);

/**
 * rk_nccl_comm() - the ncclComm_t (as void *) for collectives while ready,
 * else NULL: the blocking child, whose collectives return once enqueued.
 */
RK_EXPORT void *rk_nccl_comm(const struct rk_nccl *n);
/** rk_nccl_device() - the CUDA device of the communicator. */
RK_EXPORT int rk_nccl_device(const struct rk_nccl *n);

/**
 * rk_nccl_abort() - ncclCommAbort the communicator (at any stage of its
 * bring-up), so that no collective of this rank hangs on a dead peer: call it
 * from the world's peer_error. In-flight kernels of the communicator end
 * (their results are garbage). A pending ready callback runs with
 * -ECONNRESET. Idempotent. Return: 0, or -EIO when NCCL reported an error
 * (logged; the communicator is gone anyway). Loop thread.
 */
RK_EXPORT int rk_nccl_abort(struct rk_nccl *n);

/**
 * rk_nccl_destroy() - a ready communicator is finalized (ncclCommFinalize:
 * the child's returns once its work is flushed, so synchronize the stream of
 * its collectives first; the parent's is polled for at most 5 s: this is the
 * one place that blocks) and destroyed;
 * anything else is aborted. No callback runs; NCCL_ID frames go to the
 * world's frame callback again. NULL is a no-op.
 * Return: 0 or -EIO (logged; everything is released anyway). Loop thread.
 */
RK_EXPORT int rk_nccl_destroy(struct rk_nccl *n);

#ifdef __cplusplus
}
#endif
#endif /* RK_GPU_H */
