// SPDX-License-Identifier: MIT
/*
 * check_sched_epoch: round epochs (rk_epoch_*): publication and reads, a
 * same-host follower's read-only view and its bell, consumer threads that see
 * every descriptor whole, and which backends get resident rounds.
 */
#define _GNU_SOURCE	/* memfd_create() */
#include <pthread.h>
#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include "sched_test.h"

/* ---- round epochs ------------------------------------------------------------------ */

/* A same-host follower's view of the leader's region (rk__epoch_map()): the
 * words of its link segment, here plain memory the "leader" rings. */
struct view_waiter {
	struct rk_epoch *e;
	uint64_t want;
	int ret;
};

static void *view_wait_thread(void *arg)
{
	struct view_waiter *w = arg;
	uint32_t kicks = rk_epoch_kicks(w->e);

	w->ret = rk_epoch_wait(w->e, w->want, 0, &kicks);	/* no spin: it sleeps */
	return NULL;
}

static void until_asleep(_Atomic uint32_t *waiters)
{
	/* the consumer counted itself: a wake from here on reaches it */
	while (!atomic_load(waiters))
		sched_yield();
}

START_TEST(test_epoch_view_sees_writer)
{
	static _Atomic uint32_t waiters, bell;
	uint8_t desc[16] = { 1, 2, 3, 4, 5, 6, 7, 8 }, out[16];
	struct rk_epoch *w, *v;
	uint64_t ep;
	uint32_t fl;
	size_t len;
	void *base;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(sizeof(desc), &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc) + 4096, &waiters, &bell, &v), -RK_EFIELD);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc), &waiters, &bell, &v), 0);
	/* nothing is iterated between the writer's store and the view's load */
	ck_assert_int_eq(rk_epoch_publish(w, 7, 0x3, desc, 8), 0);
	ck_assert_uint_eq(rk_epoch_current(v), 7);
	ck_assert_int_eq(rk_epoch_read(v, &ep, &fl, out, sizeof(out)), 8);
	ck_assert_uint_eq(ep, 7);
	ck_assert_uint_eq(fl, 0x3);
	ck_assert_mem_eq(out, desc, 8);
	/* the view is a reader: it publishes nothing, and cannot be made writable */
	ck_assert_int_eq(rk_epoch_publish(v, 8, 0, desc, 8), -EPERM);
	base = rk_epoch_base(v, &len);
	ck_assert_int_eq(mprotect(base, len, PROT_READ | PROT_WRITE), -1);
	ck_assert_int_eq(errno, EACCES);
	ck_assert_int_eq(rk__epoch_bell_add(v, &waiters, &bell), -EINVAL);
	rk_epoch_release(v);
	close(fd);
	rk_epoch_release(w);
}
END_TEST

START_TEST(test_epoch_view_unsealed)
{
	static _Atomic uint32_t waiters, bell;
	struct rk_epoch *v;
	int fd = memfd_create("unsealed", MFD_CLOEXEC);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(ftruncate(fd, 4096), 0);
	/* a region its sender could still write, or resize under us, is refused */
	ck_assert_int_eq(rk__epoch_map(fd, 16, &waiters, &bell, &v), -EPERM);
	close(fd);
}
END_TEST

/* @how: 0 the writer publishes, 1 the view closes, 2 the view kicks, 3 the writer closes */
START_TEST(test_epoch_view_wakes)
{
	static _Atomic uint32_t waiters, bell;
	uint8_t desc[8] = { 9 };
	struct view_waiter vw = { .want = 1 };
	struct rk_epoch *w, *v;
	pthread_t t;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(sizeof(desc), &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, sizeof(desc), &waiters, &bell, &v), 0);
	close(fd);
	ck_assert_int_eq(rk__epoch_bell_add(w, &waiters, &bell), 0);
	vw.e = v;
	ck_assert_int_eq(pthread_create(&t, NULL, view_wait_thread, &vw), 0);
	until_asleep(&waiters);
	switch (_i) {
	case 0:
		ck_assert_int_eq(rk_epoch_publish(w, 1, 0, desc, sizeof(desc)), 0);
		break;
	case 1:
		rk_epoch_close(v);
		break;
	case 2:
		rk_epoch_kick(v);
		break;
	case 3:
		rk_epoch_close(w);
		break;
	}
	ck_assert_int_eq(pthread_join(t, NULL), 0);
	switch (_i) {
	case 0:
		ck_assert_int_eq(vw.ret, 1);	/* it slept, and the publication woke it */
		ck_assert_uint_eq(rk_epoch_current(v), 1);
		break;
	case 1:
		ck_assert_int_ge(vw.ret, 0);
		ck_assert_uint_eq(rk_epoch_current(v), RK_EPOCH_CLOSED);
		ck_assert_uint_eq(rk_epoch_current(w), 0);	/* the writer's is not ours */
		ck_assert_int_eq(rk_epoch_read(v, NULL, NULL, NULL, 0), -RK_ETOOBIG);
		break;
	case 2:
		ck_assert_int_eq(vw.ret, -EINTR);
		ck_assert_uint_eq(rk_epoch_kicks(w), 0);
		break;
	case 3:
		ck_assert_int_ge(vw.ret, 0);
		ck_assert_uint_eq(rk_epoch_current(v), RK_EPOCH_CLOSED);
		break;
	}
	ck_assert_uint_eq(atomic_load(&waiters), 0);
	rk__epoch_bell_del(w, &bell);
	rk_epoch_release(v);
	rk_epoch_release(w);
}
END_TEST

/* Nobody asleep: a publication rings no bell (and makes no system call). */
START_TEST(test_epoch_view_quiet)
{
	static _Atomic uint32_t waiters, bell;
	struct rk_epoch *w, *v;
	int fd;

	ck_assert_int_eq(rk__epoch_create_fd(8, &fd, &w), 0);
	ck_assert_int_eq(rk__epoch_map(fd, 8, &waiters, &bell, &v), 0);
	close(fd);
	ck_assert_int_eq(rk__epoch_bell_add(w, &waiters, &bell), 0);
	ck_assert_int_eq(rk_epoch_publish(w, 1, 0, "x", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 0);
	atomic_store(&waiters, 1);	/* as a consumer on its way to sleep */
	ck_assert_int_eq(rk_epoch_publish(w, 2, 0, "y", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 1);
	atomic_store(&waiters, 0);
	rk__epoch_bell_del(w, &bell);
	ck_assert_int_eq(rk_epoch_publish(w, 3, 0, "z", 1), 0);
	ck_assert_uint_eq(atomic_load(&bell), 1);
	rk_epoch_release(v);
	rk_epoch_release(w);
}
END_TEST

START_TEST(test_epoch_publish_read)
{
	struct rk_epoch *e;
	uint8_t desc[64], out[64];
	uint64_t ep = 99;
	uint32_t fl = 0, kicks;
	size_t len = 0;
	uint8_t *base;

	ck_assert_int_eq(rk_epoch_create(0, &e), -EINVAL);
	ck_assert_int_eq(rk_epoch_create(RK_WIRE_MAX_PAYLOAD + 1u, &e), -EINVAL);
	ck_assert_int_eq(rk_epoch_create(sizeof(desc), &e), 0);
	base = rk_epoch_base(e, &len);
	/* its own page-aligned mapping, the layout of rk_sched.h */
	ck_assert_uint_eq((uintptr_t)base % (uintptr_t)sysconf(_SC_PAGESIZE), 0);
	ck_assert_uint_ge(len, RK_EPOCH_OFF_DESC + sizeof(desc));
	ck_assert_uint_eq(rk_epoch_desc_max(e), sizeof(desc));
	ck_assert_uint_eq(rk_epoch_current(e), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, &fl, out, sizeof(out)), -ENOENT);

	memset(desc, 0xa5, sizeof(desc));
	ck_assert_int_eq(rk_epoch_publish(e, 0, 0, desc, 8), -EINVAL);
	ck_assert_int_eq(rk_epoch_publish(e, 3, 0x5, desc, 8), 0);
	ck_assert_uint_eq(rk_epoch_current(e), 3);
	ck_assert_uint_eq(*(uint64_t *)(void *)(base + RK_EPOCH_OFF_EPOCH), 3);
	ck_assert_uint_eq(*(uint32_t *)(void *)(base + RK_EPOCH_OFF_DESC_LEN), 8);
	ck_assert_int_eq(rk_epoch_read(e, &ep, &fl, out, sizeof(out)), 8);
	ck_assert_uint_eq(ep, 3);
	ck_assert_uint_eq(fl, 0x5);
	ck_assert_mem_eq(out, desc, 8);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, 4), -ENOSPC);
	/* epochs only grow */
	ck_assert_int_eq(rk_epoch_publish(e, 3, 0, desc, 8), -EINVAL);
	ck_assert_int_eq(rk_epoch_publish(e, 2, 0, desc, 8), -EINVAL);
	ck_assert_uint_eq(rk_epoch_current(e), 3);
	/* too large: the epoch moves, the readers are told to take the launch path */
	ck_assert_int_eq(rk_epoch_publish(e, 4, 0, desc, sizeof(desc) + 1), -RK_ETOOBIG);
	ck_assert_uint_eq(rk_epoch_current(e), 4);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, sizeof(out)), -RK_ETOOBIG);
	ck_assert_uint_eq(ep, 4);
	ck_assert_int_eq(rk_epoch_publish(e, 5, 0, NULL, 0), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, NULL, 0), 0);
	ck_assert_int_eq(rk_epoch_publish(e, RK_EPOCH_CLOSED, 0, NULL, 0), -EINVAL);

	/* reached already: no wait; a kick ends a wait that would not be */
	kicks = rk_epoch_kicks(e);
	ck_assert_int_eq(rk_epoch_wait(e, 5, 0, &kicks), 0);
	rk_epoch_kick(e);
	ck_assert_int_eq(rk_epoch_wait(e, 6, 0, &kicks), -EINTR);
	ck_assert_uint_eq(kicks, rk_epoch_kicks(e));
	/* closed: every wait is met, nothing more is published */
	rk_epoch_close(e);
	ck_assert_uint_eq(rk_epoch_current(e), RK_EPOCH_CLOSED);
	ck_assert_int_eq(rk_epoch_wait(e, 1000000, 0, &kicks), 0);
	ck_assert_int_eq(rk_epoch_read(e, &ep, NULL, out, sizeof(out)), -RK_ETOOBIG);
	ck_assert_uint_eq(ep, RK_EPOCH_CLOSED);
	ck_assert_int_eq(rk_epoch_publish(e, 6, 0, desc, 8), -EINVAL);
	/* a GPU's GEQ compares signed differences: closed meets any epoch */
	ck_assert_int_ge((int64_t)(RK_EPOCH_CLOSED - 1000000), 0);
	rk_epoch_close(e);	/* twice: a no-op */
	rk_epoch_hold(e);
	rk_epoch_release(e);
	rk_epoch_release(e);
	rk_epoch_release(NULL);
}
END_TEST

/*
 * Resident rounds only for a backend with resident consumers: one without
 * RK_BACKEND_RESIDENT gets no region and no publication, whatever the mode
 * (the loop's RK_RESIDENT auto or on, the config's on); one with it (or with
 * RK_BACKEND_SHARED_EPOCH, which implies it) has every round published under
 * auto and on and none under off; the config's on or off wins over the
 * loop's RK_RESIDENT, its auto takes it.
 */
static const struct rcase {
	unsigned int flags;
	const char *loop;		/* RK_RESIDENT */
	enum rk_resident_mode cfg;	/* rk_sched_config.resident */
	enum rk_resident_mode want;	/* rk_sched_resident() */
} rcases[] = {
	{ 0, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ 0, "on", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ 0, "auto", RK_RESIDENT_ON, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_AUTO },
	{ RK_BACKEND_RESIDENT, "on", RK_RESIDENT_AUTO, RK_RESIDENT_ON },
	{ RK_BACKEND_RESIDENT, "off", RK_RESIDENT_AUTO, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "on", RK_RESIDENT_OFF, RK_RESIDENT_OFF },
	{ RK_BACKEND_RESIDENT, "off", RK_RESIDENT_ON, RK_RESIDENT_ON },
	{ RK_BACKEND_SHARED_EPOCH, "auto", RK_RESIDENT_AUTO, RK_RESIDENT_AUTO },
};

START_TEST(test_resident_needs_consumers)
{
	const struct rcase *c = &rcases[_i];
	struct rk_backend_ops ops = fake_ops;
	struct rk_sched_config sc = { .max_batch = 1, .vocab = VOC, .resident = c->cfg };
	struct rk_sched_stats st;
	struct rk_config cfg;
	struct fake f;
	int pending = 1;

	memset(&f, 0, sizeof(f));
	rk_config_init(&cfg);
	cfg.rank = 0;
	cfg.world_size = 1;
	ck_assert_int_eq(rk_config_set(&cfg, "RK_RESIDENT", c->loop, NULL, 0), 0);
	ops.flags = c->flags;
	ck_assert_int_eq(rk_loop_create(&cfg, &f.loop), 0);
	ck_assert_int_eq(rk_world_create(f.loop, NULL, NULL, &f.world), 0);
	sc.resident = (enum rk_resident_mode)3;
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &ops, &f, &f.sched), -EINVAL);
	sc.resident = c->cfg;
	ck_assert_int_eq(rk_sched_create(f.world, &sc, &ops, &f, &f.sched), 0);
	ck_assert_int_eq(rk_sched_resident(f.sched), c->want);
	g_pending = &pending;
	out_init(&g_a[0], &f, prompts[0], 8);
	ck_assert_int_eq(rk_sched_submit(f.sched, &g_a[0].req), 0);
	while (pending)
		ck_assert_int_ge(rk_loop_run(f.loop, RK_RUN_DEFAULT), 0);
	rk_sched_stats(f.sched, &st, sizeof(st));
	ck_assert_uint_eq(st.rounds, 8);
	ck_assert_uint_eq(st.resident_fallbacks, 0);
	if (c->want == RK_RESIDENT_OFF) {
		ck_assert_ptr_null(rk_sched_epoch(f.sched));
		ck_assert_uint_eq(st.published, 0);
	} else {
		ck_assert_ptr_nonnull(rk_sched_epoch(f.sched));
		ck_assert_uint_eq(st.published, st.rounds);
		ck_assert_uint_eq(rk_epoch_current(rk_sched_epoch(f.sched)), st.rounds);
	}
	fake_teardown(&f);
}
END_TEST

#define EP_ROUNDS	2000
#define EP_LEN		256

struct ep_consumer {
	struct rk_epoch *e;
	uint64_t spin_ns;
	uint64_t seen, torn, slept, skipped;
	atomic_uint_fast64_t done;	/* the last epoch consumed */
};

/* Each epoch's descriptor is EP_LEN bytes of (uint8_t)epoch: a torn copy shows. */
static void *ep_consume(void *arg)
{
	struct ep_consumer *c = arg;
	uint8_t buf[EP_LEN];
	uint32_t kicks = rk_epoch_kicks(c->e);
	uint64_t want = 1, ep;
	int64_t n;
	int ret, i;

	while (want <= EP_ROUNDS) {
		ret = rk_epoch_wait(c->e, want, c->spin_ns, &kicks);
		if (ret < 0)
			continue;
		c->slept += ret == 1;
		n = rk_epoch_read(c->e, &ep, NULL, buf, sizeof(buf));
		if (n != EP_LEN || ep < want) {
			c->torn++;
			break;
		}
		for (i = 0; i < EP_LEN; i++)
			if (buf[i] != (uint8_t)ep)
				c->torn++;
		c->skipped += ep - want;
		c->seen++;
		want = ep + 1;
		atomic_store(&c->done, ep);
	}
	return NULL;
}

/*
 * A consumer thread that waits on the epoch sees every descriptor whole. _i:
 * 0 in lock step, spinning; 1 in lock step, never spinning (a sleeping one is
 * woken by each publication); both see every epoch. 2: a publisher that does
 * not wait; the consumer may skip epochs, never tear one.
 */
START_TEST(test_epoch_consumer)
{
	struct ep_consumer c = { .spin_ns = _i == 1 ? 0 : 1000000 };
	uint8_t desc[EP_LEN];
	pthread_t th;
	uint64_t r;

	ck_assert_int_eq(rk_epoch_create(EP_LEN, &c.e), 0);
	atomic_init(&c.done, 0);
	ck_assert_int_eq(pthread_create(&th, NULL, ep_consume, &c), 0);
	for (r = 1; r <= EP_ROUNDS; r++) {
		memset(desc, (int)(uint8_t)r, sizeof(desc));
		ck_assert_int_eq(rk_epoch_publish(c.e, r, 0, desc, sizeof(desc)), 0);
		/* lock step: the next round waits for this one, as a decode's does */
		while (_i < 2 && atomic_load(&c.done) < r)
			sched_yield();
	}
	ck_assert_int_eq(pthread_join(th, NULL), 0);
	ck_assert_uint_eq(c.torn, 0);
	ck_assert_uint_eq(atomic_load(&c.done), EP_ROUNDS);
	ck_assert_uint_eq(c.seen + c.skipped, EP_ROUNDS);
	if (_i < 2)
		ck_assert_uint_eq(c.skipped, 0);
	if (_i == 1)
		ck_assert_uint_gt(c.slept, 0);	/* no spin: it slept for some */
	rk_epoch_release(c.e);
}
END_TEST

static Suite *sched_epoch_suite(void)
{
	Suite *s = suite_create("sched");
	TCase *tc;

	tc = rk_tcase(s, "epoch", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_epoch_publish_read);
	tcase_add_test(tc, test_epoch_view_sees_writer);
	tcase_add_test(tc, test_epoch_view_unsealed);
	tcase_add_loop_test(tc, test_epoch_view_wakes, 0, 4);
	tcase_add_test(tc, test_epoch_view_quiet);
	tcase_add_loop_test(tc, test_epoch_consumer, 0, 3);
	tcase_add_loop_test(tc, test_resident_needs_consumers, 0, ARRAY_SIZE(rcases));
	return s;
}

int main(void)
{
	return rk_check_run(sched_epoch_suite());
}
