/* SPDX-License-Identifier: MIT */
/*
 * The notifier's seam (gpu/notifier.c): what it needs from a device, as a
 * small ops table, so one notifier (marks, the polled word, the wake path,
 * the predictor, lazy marks) serves every device. Two devices fill it:
 * CUDA's (gpu/notifier_cuda.c: cuStreamWriteValue64, cudaEventRecord +
 * cudaStreamWaitEvent + cudaLaunchHostFunc on a side stream) and the
 * emulated one's (gpu/emu.c: a device thread that runs timed work items in
 * order). No CUDA header here: notifier.c builds in every configuration.
 * Never installed.
 */
#ifndef RK_NOTIFY_INT_H
#define RK_NOTIFY_INT_H

#include "rk_gpu.h"
#include "runtime_int.h"

/*
 * A device's side of the notifier. @dev is the device's own object, passed
 * back to every op; every op runs on the loop thread. The ops enqueue on the
 * device in call order: "after the work so far" means after everything
 * enqueued on the compute stream before the call (mark() calls write_word()
 * then record(), so a record covers the word write before it).
 */
struct rk__notify_dev_ops {
	const char *name;
	/* Enqueue "store @seq into the word" (release) after the work so far. 0 or -errno. */
	int (*write_word)(void *dev, uint64_t seq);
	/* Record the device's event after the work so far (the word write included). */
	int (*record)(void *dev);
	/*
	 * Enqueue a host function, off the compute stream, that runs once the
	 * event's latest record is done and then calls rk__notify_fire(@token)
	 * on a thread of the device (it may not call back into the device).
	 */
	int (*host_fn)(void *dev, void *token);
	/*
	 * Release the device's side: with @sync_stream, first make sure no word
	 * write is still to come (forced destroy); then make sure every host
	 * function enqueued has run (its post is on the loop), or set
	 * *@hostfn_pending when that cannot be known (the notifier then keeps its
	 * memory forever). Frees the word and @dev. Return: the first error.
	 */
	int (*close)(void *dev, bool sync_stream, bool *hostfn_pending);
};

/*
 * rk__notifier_create() - a notifier on @loop over a device: @ops and @dev
 * (owned by the notifier from a 0 return: its close op runs at destroy),
 * @word the host word the device writes (NULL when @mode is WAKE), @all_paths
 * when the device set up both the word and the host functions (so
 * rk_gpu_notifier_set_mode() may switch). @mode as the device settled it.
 * Return: 0 and *@out; -EINVAL, -ENOMEM, rk_loop_add_source()'s error (then
 * the device is not closed: the caller releases it). Loop thread.
 */
int rk__notifier_create(struct rk_loop *loop, enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb,
			void *arg, const struct rk__notify_dev_ops *ops, void *dev, uint64_t *word,
			bool all_paths, struct rk_gpu_notifier **out);

/*
 * rk__notify_fire() - a host function's body: post the mark @token names to
 * its loop (lock-free, no allocation; wakes a sleeping loop). Any thread; the
 * notifier outlives it (its close op waits for host functions).
 */
void rk__notify_fire(void *token);

/* rk__notifier_rank() - the rank of the notifier's loop, for logs. */
int rk__notifier_rank(const struct rk_gpu_notifier *n);

#endif /* RK_NOTIFY_INT_H */
