/* SPDX-License-Identifier: MIT */
/*
 * Round epochs: the scheduler's last round, published where a consumer that
 * is already waiting can see it (rk_sched.h, "Round epochs").
 *
 * The region is its own page-aligned anonymous mapping, so it can be
 * registered with CUDA (cudaHostRegister) whole, and a later same-host
 * broadcast ring can offer the same layout in memory that every process maps
 * (nothing in the region is a pointer, and the futex operations are the
 * process-shared ones). One writer (the scheduler, on its loop thread), any
 * number of readers on any thread.
 *
 * Ordering. The descriptor is a seqlock (Linux's write_seqcount): the writer
 * makes seq odd, fences (release), writes the descriptor, then release-stores
 * seq even; a reader acquire-loads seq, copies, fences (acquire) and keeps the
 * copy only when seq is even and unchanged. The epoch word is release-stored
 * after seq turns even, so a consumer that acquire-waits on the epoch (a CPU
 * thread, or a GPU's cuStreamWaitValue on the mapped word) finds the
 * descriptor of that epoch or a later one. The futex word is bumped after
 * the epoch; the writer then issues a seq_cst fence and wakes only when a
 * waiter has announced itself (pairs with the waiter's increment of 'waiters',
 * seq_cst fence, re-check of the epoch): either the writer sees the waiter,
 * or the waiter sees the new epoch, so a wake is never lost and a publication
 * with nobody asleep costs no system call.
 */
#include "config.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime_int.h"
#include "memfd_int.h"
#include "rk_sched.h"

struct rk__epoch_bell {
	_Atomic uint32_t *waiters;	/* a reader's consumers asleep (rk__epoch_map()) */
	_Atomic uint32_t *bell;		/* the futex word they sleep on */
};

struct rk_epoch {
	uint8_t *base;		/* the mapping, RK_EPOCH_OFF_DESC + desc_max rounded to pages */
	size_t len;
	uint32_t desc_max;
	atomic_uint refs;
	/*
	 * A reader's view of another process's region (rk__epoch_map()): the
	 * mapping is read-only, so the futex word its consumers sleep on and
	 * the count of sleepers are in memory this process may write (its link
	 * segment), and its kicks and its close are its own. NULL in the writer.
	 */
	_Atomic uint32_t *vbell;
	_Atomic uint32_t *vwaiters;
	_Atomic uint32_t vkicks;
	atomic_bool vclosed;
	void *vown;		/* a mapping holding vbell/vwaiters, unmapped with the view */
	size_t vown_len;
	/* the writer: readers' words it rings after each publication (loop thread) */
	struct rk__epoch_bell bells[RK__EPOCH_MAX_BELLS];
	unsigned int nbells;
};

_Static_assert(RK_EPOCH_OFF_FUTEX % 64 == 0 && RK_EPOCH_OFF_SEQ % 64 == 0 &&
		       RK_EPOCH_OFF_DESC % 64 == 0,
	       "each word the writer and the readers share has its own cache line");

static inline _Atomic uint64_t *w64(const struct rk_epoch *e, size_t off)
{
	return (_Atomic uint64_t *)(void *)(e->base + off);
}

static inline _Atomic uint32_t *w32(const struct rk_epoch *e, size_t off)
{
	return (_Atomic uint32_t *)(void *)(e->base + off);
}

static inline _Atomic uint32_t *futex_word(const struct rk_epoch *e)
{
	return e->vbell ? e->vbell : w32(e, RK_EPOCH_OFF_FUTEX);
}

static inline _Atomic uint32_t *waiters_word(const struct rk_epoch *e)
{
	return e->vbell ? e->vwaiters : w32(e, RK_EPOCH_OFF_WAITERS);
}

static inline _Atomic uint32_t *kicks_word(const struct rk_epoch *e)
{
	return e->vbell ? (_Atomic uint32_t *)&e->vkicks : w32(e, RK_EPOCH_OFF_KICKS);
}

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
	__builtin_ia32_pause();
#elif defined(__aarch64__)
	__asm__ __volatile__("yield" ::: "memory");
#endif
}

/* The region's length: the header lines and @desc_max bytes, in whole pages. */
static size_t region_len(uint32_t desc_max)
{
	long page = sysconf(_SC_PAGESIZE);

	if (page <= 0)
		page = 4096;
	return ((size_t)RK_EPOCH_OFF_DESC + desc_max + (size_t)page - 1) & ~((size_t)page - 1);
}

int rk_epoch_create(uint32_t desc_max, struct rk_epoch **out)
{
	struct rk_epoch *e;
	size_t len;
	int ret;

	if (!out || !desc_max || desc_max > RK_WIRE_MAX_PAYLOAD)
		return -EINVAL;
	len = region_len(desc_max);
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (e->base == MAP_FAILED) {
		ret = -errno;
		goto err_free;
	}
	/* the mapping starts zeroed: epoch 0 (none), seq 0, no descriptor */
	e->len = len;
	e->desc_max = desc_max;
	atomic_init(&e->refs, 1);
	*out = e;
	return 0;
err_free:
	free(e);
	return ret;
}

void rk_epoch_hold(struct rk_epoch *e)
{
	atomic_fetch_add_explicit(&e->refs, 1, memory_order_relaxed);
}

void rk_epoch_release(struct rk_epoch *e)
{
	if (!e)
		return;
	/* acq_rel: every holder's last access happens before the unmap */
	if (atomic_fetch_sub_explicit(&e->refs, 1, memory_order_acq_rel) != 1)
		return;
	munmap(e->base, e->len);
	if (e->vown)
		munmap(e->vown, e->vown_len);
	free(e);
}

void *rk_epoch_base(const struct rk_epoch *e, size_t *len)
{
	if (len)
		*len = e->len;
	return e->base;
}

uint32_t rk_epoch_desc_max(const struct rk_epoch *e)
{
	return e->desc_max;
}

static void futex_wake_all(_Atomic uint32_t *word)
{
	/* process-shared (no FUTEX_PRIVATE_FLAG): the region may be mapped by others */
	syscall(SYS_futex, (uint32_t *)word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/*
 * The futex word changed: wake whoever announced a sleep. @bells: also the
 * readers' sleepers (rk__epoch_bell_add()): on a publication and a close, which
 * run on the writer's loop thread, the only one that edits the bell list and
 * the only one before whose rk__epoch_bell_del() a bell's memory stays mapped;
 * not on a kick, which may come from any thread and means nothing to a reader
 * (a view counts its own kicks).
 */
static void bump_and_wake(struct rk_epoch *e, bool bells)
{
	unsigned int i;

	atomic_fetch_add_explicit(futex_word(e), 1, memory_order_release);
	/* pairs with the waiter's seq_cst fence between its 'waiters' increment
	 * and its last look at the epoch (rk_epoch_wait()) */
	atomic_thread_fence(memory_order_seq_cst);
	if (atomic_load_explicit(waiters_word(e), memory_order_relaxed))
		futex_wake_all(futex_word(e));
	if (!bells)
		return;
	/* a reader's sleepers, after the same fence: either we see its count,
	 * or it sees the new epoch; its bell moves only when someone sleeps
	 * (release: the epoch before the bell, for a waiter that reads the new
	 * bell before it sleeps) */
	for (i = 0; i < e->nbells; i++) {
		if (!atomic_load_explicit(e->bells[i].waiters, memory_order_relaxed))
			continue;
		atomic_fetch_add_explicit(e->bells[i].bell, 1, memory_order_release);
		futex_wake_all(e->bells[i].bell);
	}
}

int rk_epoch_publish(struct rk_epoch *e, uint64_t epoch, uint32_t flags, const void *desc,
		     uint32_t len)
{
	_Atomic uint64_t *seq = w64(e, RK_EPOCH_OFF_SEQ);
	uint64_t s;
	bool fits = len <= e->desc_max;

	if (e->vbell)
		return -EPERM;
	if (!epoch || epoch >= RK_EPOCH_CLOSED ||
	    epoch <= atomic_load_explicit(w64(e, RK_EPOCH_OFF_EPOCH), memory_order_relaxed))
		return -EINVAL;
	s = atomic_load_explicit(seq, memory_order_relaxed);
	atomic_store_explicit(seq, s + 1, memory_order_relaxed);
	/* the odd seq is visible before any descriptor byte (pairs with the
	 * reader's acquire fence before its second look at seq) */
	atomic_thread_fence(memory_order_release);
	*(uint64_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_EPOCH) = epoch;
	*(uint32_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_LEN) = fits ? len : RK_EPOCH_NO_DESC;
	*(uint32_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_FLAGS) = flags;
	if (fits && len)
		memcpy(e->base + RK_EPOCH_OFF_DESC, desc, len);
	/* the descriptor before the even seq (pairs with the reader's acquire load) */
	atomic_store_explicit(seq, s + 2, memory_order_release);
	/* and before the epoch (pairs with a waiter's acquire load of it) */
	atomic_store_explicit(w64(e, RK_EPOCH_OFF_EPOCH), epoch, memory_order_release);
	bump_and_wake(e, true);
	return fits ? 0 : -RK_ETOOBIG;
}

uint64_t rk_epoch_current(const struct rk_epoch *e)
{
	/* pairs with the release store in rk_epoch_close() of a view */
	if (e->vbell && atomic_load_explicit(&e->vclosed, memory_order_acquire))
		return RK_EPOCH_CLOSED;
	/* pairs with the release store in rk_epoch_publish() */
	return atomic_load_explicit(w64(e, RK_EPOCH_OFF_EPOCH), memory_order_acquire);
}

int64_t rk_epoch_read(const struct rk_epoch *e, uint64_t *epoch, uint32_t *flags, void *buf,
		      uint32_t cap)
{
	_Atomic uint64_t *seq = w64(e, RK_EPOCH_OFF_SEQ);
	uint64_t s1, s2, ep;
	uint32_t len, fl;

	for (;;) {
		/* pairs with the writer's release store of the even seq */
		s1 = atomic_load_explicit(seq, memory_order_acquire);
		if (s1 & 1) {
			relax();	/* a publication is under way: it takes a memcpy */
			continue;
		}
		ep = *(const volatile uint64_t *)(const void *)(e->base + RK_EPOCH_OFF_DESC_EPOCH);
		len = *(const volatile uint32_t *)(const void *)(e->base + RK_EPOCH_OFF_DESC_LEN);
		fl = *(const volatile uint32_t *)(const void *)(e->base + RK_EPOCH_OFF_DESC_FLAGS);
		if (len != RK_EPOCH_NO_DESC && len <= e->desc_max && len <= cap && buf)
			memcpy(buf, e->base + RK_EPOCH_OFF_DESC, len);
		/* the copy before the second look (pairs with the writer's release fence) */
		atomic_thread_fence(memory_order_acquire);
		s2 = atomic_load_explicit(seq, memory_order_relaxed);
		if (s1 == s2)
			break;
	}
	if (e->vbell && atomic_load_explicit(&e->vclosed, memory_order_acquire)) {
		ep = RK_EPOCH_CLOSED;	/* as the writer's rk_epoch_close() leaves it */
		len = RK_EPOCH_NO_DESC;
		fl = 0;
	} else if (!s1) {
		return -ENOENT;		/* nothing published yet */
	}
	if (epoch)
		*epoch = ep;
	if (flags)
		*flags = fl;
	if (len == RK_EPOCH_NO_DESC)
		return -RK_ETOOBIG;
	if (len > cap || (!buf && len))
		return -ENOSPC;
	return len;
}

uint32_t rk_epoch_kicks(const struct rk_epoch *e)
{
	return atomic_load_explicit(kicks_word(e), memory_order_acquire);
}

void rk_epoch_kick(struct rk_epoch *e)
{
	/* release: what the kicker stored before (a stop flag) is seen by the
	 * waiter that sees the new count */
	atomic_fetch_add_explicit(kicks_word(e), 1, memory_order_release);
	bump_and_wake(e, false);
}

int rk_epoch_wait(struct rk_epoch *e, uint64_t want, uint64_t spin_ns, uint32_t *kicks)
{
	_Atomic uint32_t *fw = futex_word(e);
	_Atomic uint32_t *waiters = waiters_word(e);
	uint64_t t0 = 0;
	uint32_t f, k0 = *kicks, k;
	unsigned int i;
	bool slept = false;

	/* spin: a consumer that is already waiting reacts within a cache miss */
	for (i = 0;; i++) {
		if (rk_epoch_current(e) >= want)
			return 0;
		k = rk_epoch_kicks(e);
		if (k != k0) {
			*kicks = k;
			return -EINTR;
		}
		if (!spin_ns)
			break;
		if ((i & 63) == 0) {
			uint64_t now = rk__now_ns();

			if (!t0)
				t0 = now;
			else if (now - t0 >= spin_ns)
				break;
		}
		relax();
	}
	/* then sleep on the futex word until it moves */
	for (;;) {
		f = atomic_load_explicit(fw, memory_order_acquire);
		atomic_fetch_add_explicit(waiters, 1, memory_order_relaxed);
		/* pairs with bump_and_wake()'s fence: the publisher sees us, or we
		 * see its epoch (or kick) below */
		atomic_thread_fence(memory_order_seq_cst);
		if (rk_epoch_current(e) >= want || rk_epoch_kicks(e) != k0) {
			atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
			break;
		}
		/* returns at once when the word is no longer f (-EAGAIN) */
		syscall(SYS_futex, (uint32_t *)fw, FUTEX_WAIT, f, NULL, NULL, 0);
		atomic_fetch_sub_explicit(waiters, 1, memory_order_relaxed);
		slept = true;
	}
	if (rk_epoch_current(e) >= want)
		return slept ? 1 : 0;
	*kicks = rk_epoch_kicks(e);
	return -EINTR;
}

void rk_epoch_close(struct rk_epoch *e)
{
	_Atomic uint64_t *seq = w64(e, RK_EPOCH_OFF_SEQ);
	uint64_t s;

	if (e->vbell) {
		/* this process's consumers only; the writer's region is not ours */
		atomic_store_explicit(&e->vclosed, true, memory_order_release);
		bump_and_wake(e, false);
		return;
	}
	if (atomic_load_explicit(w64(e, RK_EPOCH_OFF_EPOCH), memory_order_relaxed) ==
	    RK_EPOCH_CLOSED)
		return;
	s = atomic_load_explicit(seq, memory_order_relaxed);
	atomic_store_explicit(seq, s + 1, memory_order_relaxed);
	atomic_thread_fence(memory_order_release);	/* as in rk_epoch_publish() */
	*(uint64_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_EPOCH) = RK_EPOCH_CLOSED;
	*(uint32_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_LEN) = RK_EPOCH_NO_DESC;
	*(uint32_t *)(void *)(e->base + RK_EPOCH_OFF_DESC_FLAGS) = 0;
	atomic_store_explicit(seq, s + 2, memory_order_release);
	atomic_store_explicit(w64(e, RK_EPOCH_OFF_EPOCH), RK_EPOCH_CLOSED, memory_order_release);
	bump_and_wake(e, true);
}

/* ---- a region other processes map (same-host links) ------------------------------ */

uint32_t rk__epoch_sleepers(const struct rk_epoch *e)
{
	return atomic_load_explicit(waiters_word(e), memory_order_relaxed);
}

uint32_t rk__epoch_desc_bound(uint32_t max_frame)
{
	uint32_t d = max_frame < RK_WIRE_MAX_PAYLOAD ? max_frame : RK_WIRE_MAX_PAYLOAD;

	return d < RK_EPOCH_DESC_MAX ? d : RK_EPOCH_DESC_MAX;
}

int rk__epoch_create_fd(uint32_t desc_max, int *fdp, struct rk_epoch **out)
{
	struct rk_epoch *e;
	size_t len;
	int fd, ret;

	if (!out || !fdp || !desc_max || desc_max > RK_WIRE_MAX_PAYLOAD)
		return -EINVAL;
	len = region_len(desc_max);
	fd = (int)syscall(SYS_memfd_create, "rankrt-epoch", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)len) < 0) {
		ret = -errno;
		goto err_close;
	}
	e = calloc(1, sizeof(*e));
	if (!e) {
		ret = -ENOMEM;
		goto err_close;
	}
	e->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (e->base == MAP_FAILED) {
		ret = -errno;
		goto err_free;
	}
	/* after our own writable mapping: no later mapping may write */
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE |
					   F_SEAL_SEAL) < 0) {
		ret = -errno;
		goto err_unmap;
	}
	e->len = len;
	e->desc_max = desc_max;
	atomic_init(&e->refs, 1);
	*fdp = fd;
	*out = e;
	return 0;
err_unmap:
	munmap(e->base, len);
err_free:
	free(e);
err_close:
	close(fd);
	return ret;
}

int rk__epoch_map(int fd, uint32_t desc_max, _Atomic uint32_t *waiters, _Atomic uint32_t *bell,
		  struct rk_epoch **out)
{
	struct rk_epoch *e;
	size_t len;
	int ret;

	if (!out || !waiters || !bell || !desc_max || desc_max > RK_WIRE_MAX_PAYLOAD)
		return -EINVAL;
	len = region_len(desc_max);
	/* -EPERM: someone else could still write it */
	ret = rk__memfd_check(fd, len, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_FUTURE_WRITE);
	if (ret)
		return ret;
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->base = mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0);
	if (e->base == MAP_FAILED) {
		ret = -errno;
		free(e);
		return ret;
	}
	e->len = len;
	e->desc_max = desc_max;
	e->vbell = bell;
	e->vwaiters = waiters;
	atomic_init(&e->refs, 1);
	*out = e;
	return 0;
}

int rk__epoch_bell_add(struct rk_epoch *e, _Atomic uint32_t *waiters, _Atomic uint32_t *bell)
{
	if (e->vbell || !waiters || !bell)
		return -EINVAL;
	if (e->nbells == RK__EPOCH_MAX_BELLS)
		return -ENOSPC;
	e->bells[e->nbells].waiters = waiters;
	e->bells[e->nbells].bell = bell;
	e->nbells++;
	return 0;
}

void rk__epoch_bell_del(struct rk_epoch *e, _Atomic uint32_t *bell)
{
	unsigned int i;

	for (i = 0; i < e->nbells; i++) {
		if (e->bells[i].bell != bell)
			continue;
		e->bells[i] = e->bells[--e->nbells];
		return;
	}
}

bool rk__epoch_is_view(const struct rk_epoch *e)
{
	return e->vbell != NULL;
}

void rk__epoch_own(struct rk_epoch *e, void *map, size_t len)
{
	e->vown = map;
	e->vown_len = len;
}
