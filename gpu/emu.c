/* SPDX-License-Identifier: MIT */
/*
 * An emulated device, for benchmarks and tests (rk_gpu.h): the compute stream
 * is a timeline, not a thread that runs work. Every item is placed when it is
 * enqueued: work ends at max(busy_until, now) + duration; a mark's word write
 * and an event record happen at max(busy_until, now), when the work before
 * them ends; a host function runs at max(its event's record, now) + wake_ns.
 * Both kinds are enqueued in time order (busy_until and the clock only grow),
 * so each waits in a FIFO and the device thread (or rk_gpu_emu_run()) does the
 * head of each once the clock passes its time, the word writes first.
 *
 * The notifier (gpu/notifier.c) drives it through struct rk__notify_dev_ops,
 * exactly as it drives CUDA: one struct emu_dev per notifier holds its word
 * and its event's latest record.
 *
 * Locking: one mutex per emulator guards the timeline and the FIFOs; the
 * device thread writes words and calls rk__notify_fire() under it, so close()
 * holding it knows that no host function of its notifier runs or will run.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <time.h>

#include "notify_int.h"

#define QCAP 1024u	/* events of each kind in flight (per emulator) */

struct emu_dev;

struct ev {
	uint64_t when;
	struct emu_dev *owner;
	uint64_t seq;		/* a word write: the value */
	void *token;		/* a host function: its rk__notify_fire() token */
};

struct fifo {
	struct ev e[QCAP];
	unsigned int head, n;
};

struct rk_gpu_emu {
	pthread_mutex_t mu;
	pthread_cond_t cv;		/* the thread: a new event, or stop */
	pthread_t thr;
	bool threaded, stop;
	uint64_t (*clock)(void *arg);
	void *clock_arg;
	uint64_t wake_ns;
	uint64_t busy_until;		/* device time when the work so far ends */
	unsigned int devs;		/* notifiers created on it */
	struct fifo words, hostfns;
};

/* One notifier's side of the device. */
struct emu_dev {
	uint64_t word __attribute__((aligned(64)));	/* the notifier's polled word */
	struct rk_gpu_emu *e;
	uint64_t rec_at;		/* the event's latest record (device time) */
};

/* The default clock: the loop's (CLOCK_MONOTONIC). */
static uint64_t mono_ns(void *arg)
{
	(void)arg;
	return rk__now_ns();
}

static uint64_t max64(uint64_t a, uint64_t b)
{
	return a > b ? a : b;
}

static int push(struct fifo *f, const struct ev *ev)
{
	if (f->n == QCAP)
		return -EAGAIN;
	f->e[(f->head + f->n) % QCAP] = *ev;
	f->n++;
	return 0;
}

static const struct ev *peek(const struct fifo *f)
{
	return f->n ? &f->e[f->head] : NULL;
}

static void pop(struct fifo *f)
{
	f->head = (f->head + 1) % QCAP;
	f->n--;
}

/*
 * Under mu: do what is due at @now, word writes first (a host function runs
 * after its mark's word is visible, as CUDA's after the stream's earlier
 * work). Return how many ran.
 */
static int fire(struct rk_gpu_emu *e, uint64_t now)
{
	const struct ev *ev;
	int n = 0;

	while ((ev = peek(&e->words)) && ev->when <= now) {
		/* pairs with the notifier's acquire load of the word */
		__atomic_store_n(&ev->owner->word, ev->seq, __ATOMIC_RELEASE);
		pop(&e->words);
		n++;
	}
	while ((ev = peek(&e->hostfns)) && ev->when <= now) {
		rk__notify_fire(ev->token);	/* lock-free push, maybe one eventfd write */
		pop(&e->hostfns);
		n++;
	}
	return n;
}

/* Under mu: the time of the next event, UINT64_MAX for none. */
static uint64_t next_at(const struct rk_gpu_emu *e)
{
	const struct ev *w = peek(&e->words), *h = peek(&e->hostfns);
	uint64_t t = UINT64_MAX;

	if (w)
		t = w->when;
	if (h && h->when < t)
		t = h->when;
	return t;
}

static void *device_main(void *arg)
{
	struct rk_gpu_emu *e = arg;
	struct timespec ts;
	uint64_t next, now, at;

	/* a device's times are microseconds: the default 50 us timer slack would blur them */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	pthread_mutex_lock(&e->mu);
	while (!e->stop) {
		now = e->clock(e->clock_arg);
		fire(e, now);
		next = next_at(e);
		if (next == UINT64_MAX) {
			pthread_cond_wait(&e->cv, &e->mu);
			continue;
		}
		/* the condition variable waits on CLOCK_MONOTONIC; the clock may be another */
		now = e->clock(e->clock_arg);
		if (next <= now)
			continue;
		at = mono_ns(NULL) + (next - now);
		ts.tv_sec = (time_t)(at / 1000000000ull);
		ts.tv_nsec = (long)(at % 1000000000ull);
		pthread_cond_timedwait(&e->cv, &e->mu, &ts);
	}
	pthread_mutex_unlock(&e->mu);
	return NULL;
}

/* ---- the notifier's device ops --------------------------------------------------- */

static int emu_write_word(void *p, uint64_t seq)
{
	struct emu_dev *d = p;
	struct rk_gpu_emu *e = d->e;
	struct ev ev = { .owner = d, .seq = seq };
	int ret;

	pthread_mutex_lock(&e->mu);
	ev.when = max64(e->busy_until, e->clock(e->clock_arg));
	ret = push(&e->words, &ev);
	if (!ret && e->threaded)
		pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return ret;
}

static int emu_record(void *p)
{
	struct emu_dev *d = p;
	struct rk_gpu_emu *e = d->e;

	pthread_mutex_lock(&e->mu);
	d->rec_at = max64(e->busy_until, e->clock(e->clock_arg));
	pthread_mutex_unlock(&e->mu);
	return 0;
}

static int emu_host_fn(void *p, void *token)
{
	struct emu_dev *d = p;
	struct rk_gpu_emu *e = d->e;
	struct ev ev = { .owner = d, .token = token };
	int ret;

	pthread_mutex_lock(&e->mu);
	ev.when = max64(d->rec_at, e->clock(e->clock_arg)) + e->wake_ns;
	ret = push(&e->hostfns, &ev);
	if (!ret && e->threaded)
		pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	return ret;
}

/* Under mu: drop @d's pending word writes (nobody reads the word after close). */
static void drop_words(struct fifo *f, const struct emu_dev *d)
{
	unsigned int i, k = 0;
	struct ev keep;

	for (i = 0; i < f->n; i++) {
		keep = f->e[(f->head + i) % QCAP];
		if (keep.owner != d)
			f->e[(f->head + k++) % QCAP] = keep;
	}
	f->n = k;
}

/* Under mu: run @d's pending host functions now, as a synchronize of the side stream would. */
static void flush_hostfns(struct fifo *f, const struct emu_dev *d)
{
	unsigned int i, k = 0;
	struct ev ev;

	for (i = 0; i < f->n; i++) {
		ev = f->e[(f->head + i) % QCAP];
		if (ev.owner == d)
			rk__notify_fire(ev.token);
		else
			f->e[(f->head + k++) % QCAP] = ev;
	}
	f->n = k;
}

static int emu_close(void *p, bool sync_stream, bool *hostfn_pending)
{
	struct emu_dev *d = p;
	struct rk_gpu_emu *e = d->e;

	(void)sync_stream;	/* the word writes are dropped either way */
	*hostfn_pending = false;
	pthread_mutex_lock(&e->mu);
	drop_words(&e->words, d);
	flush_hostfns(&e->hostfns, d);
	e->devs--;
	pthread_mutex_unlock(&e->mu);
	free(d);
	return 0;
}

static const struct rk__notify_dev_ops emu_ops = {
	.name = "emu",
	.write_word = emu_write_word,
	.record = emu_record,
	.host_fn = emu_host_fn,
	.close = emu_close,
};

/* ---- the API ------------------------------------------------------------------------ */

void rk_gpu_emu_attr_init(struct rk_gpu_emu_attr *a)
{
	memset(a, 0, sizeof(*a));
	a->wake_ns = RK_GPU_EMU_WAKE_NS;
}

int rk_gpu_emu_create(const struct rk_gpu_emu_attr *a, struct rk_gpu_emu **out)
{
	struct rk_gpu_emu_attr def;
	pthread_condattr_t ca;
	struct rk_gpu_emu *e;
	int ret;

	if (!out)
		return -EINVAL;
	if (!a) {
		rk_gpu_emu_attr_init(&def);
		a = &def;
	}
	e = calloc(1, sizeof(*e));
	if (!e)
		return -ENOMEM;
	e->clock = a->clock ? a->clock : mono_ns;
	e->clock_arg = a->clock_arg;
	e->wake_ns = a->wake_ns;
	e->threaded = !a->manual;
	ret = -pthread_mutex_init(&e->mu, NULL);
	if (ret)
		goto err_free;
	ret = -pthread_condattr_init(&ca);
	if (ret)
		goto err_mutex;
	pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
	ret = -pthread_cond_init(&e->cv, &ca);
	pthread_condattr_destroy(&ca);
	if (ret)
		goto err_mutex;
	if (e->threaded) {
		ret = -pthread_create(&e->thr, NULL, device_main, e);
		if (ret)
			goto err_cond;
	}
	*out = e;
	return 0;
err_cond:
	pthread_cond_destroy(&e->cv);
err_mutex:
	pthread_mutex_destroy(&e->mu);
err_free:
	free(e);
	return ret;
}

int rk_gpu_emu_launch(struct rk_gpu_emu *e, uint64_t duration_ns, uint64_t *end)
{
	if (!e)
		return -EINVAL;
	pthread_mutex_lock(&e->mu);
	e->busy_until = max64(e->busy_until, e->clock(e->clock_arg)) + duration_ns;
	if (end)
		*end = e->busy_until;
	pthread_mutex_unlock(&e->mu);
	return 0;
}

int rk_gpu_emu_run(struct rk_gpu_emu *e)
{
	int n;

	if (!e || e->threaded)
		return -EINVAL;
	pthread_mutex_lock(&e->mu);
	n = fire(e, e->clock(e->clock_arg));
	pthread_mutex_unlock(&e->mu);
	return n;
}

int rk_gpu_emu_destroy(struct rk_gpu_emu *e)
{
	if (!e)
		return 0;
	pthread_mutex_lock(&e->mu);
	if (e->devs) {
		pthread_mutex_unlock(&e->mu);
		return -EBUSY;
	}
	e->stop = true;
	pthread_cond_signal(&e->cv);
	pthread_mutex_unlock(&e->mu);
	if (e->threaded)
		pthread_join(e->thr, NULL);
	pthread_cond_destroy(&e->cv);
	pthread_mutex_destroy(&e->mu);
	free(e);
	return 0;
}

int rk_gpu_notifier_create_emu(struct rk_loop *loop, struct rk_gpu_emu *e,
			       enum rk_gpu_notify_mode mode, rk_gpu_done_cb cb, void *arg,
			       struct rk_gpu_notifier **out)
{
	struct emu_dev *d;
	int ret;

	if (!loop || !e || !cb || !out)
		return -EINVAL;
	d = aligned_alloc(64, sizeof(*d));
	if (!d)
		return -ENOMEM;
	memset(d, 0, sizeof(*d));
	d->e = e;
	pthread_mutex_lock(&e->mu);
	e->devs++;
	pthread_mutex_unlock(&e->mu);
	ret = rk__notifier_create(loop, mode, cb, arg, &emu_ops, d, &d->word, true, out);
	if (ret) {
		pthread_mutex_lock(&e->mu);
		e->devs--;
		pthread_mutex_unlock(&e->mu);
		free(d);
	}
	return ret;
}
