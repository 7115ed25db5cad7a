// SPDX-License-Identifier: MIT
/*
 * check_toy_device: the toy CPU backend's emulated device time
 * (toy_params.device): the model and its presets, then a TP2 world whose two
 * ranks run in this thread on one injected clock, each with a manual
 * emulated device stepped by hand. A round completes at its modelled time,
 * not before, and on the leader not before every rank's share is done (the
 * follower's device is the slower one here); its token is still the toy's.
 *
 * Behaviour only: device time is the fake clock's, never the wall clock's
 * (the worker's compute and the link's frames take real time: the test pumps
 * until they are in, with a hang guard).
 */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rankrt.h"
#include "rk_check.h"
#include "rk_test.h"
#include "toy.h"

#define TIMEOUT_S	60
#define SESSION		0x746f790000000d01ull
#define TV		64
#define TH		128
#define TSEED		5

/* ---- the model ------------------------------------------------------------------------- */

START_TEST(test_presets)
{
	struct toy_device_model m = { 0 };

	ck_assert_int_eq(toy_device_preset("8b-h200", &m), 0);
	ck_assert(m.on);
	ck_assert_uint_eq(m.base_ns, 3500 * 1000);
	ck_assert_uint_eq(m.wake_ns, RK_GPU_EMU_WAKE_NS);
	/* batch 1, one token: ~3.5 ms, within the public 3-6 ms a token */
	ck_assert_uint_ge(toy_device_round_ns(&m, 1, 1), 3000 * 1000);
	ck_assert_uint_le(toy_device_round_ns(&m, 1, 1), 6000 * 1000);
	/* a drafted round costs what verifying its k + 1 tokens costs */
	ck_assert_uint_eq(toy_device_round_ns(&m, 1, 5) - toy_device_round_ns(&m, 1, 1),
			  4 * m.per_token_ns);
	ck_assert_int_eq(toy_device_preset("70b-tp8", &m), 0);
	ck_assert_uint_ge(toy_device_round_ns(&m, 1, 1), 9000 * 1000);
	ck_assert_uint_le(toy_device_round_ns(&m, 1, 1), 11000 * 1000);
	ck_assert_int_eq(toy_device_preset("5ms", &m), 0);
	ck_assert_uint_eq(toy_device_round_ns(&m, 8, 40), 5000 * 1000);
	ck_assert_int_eq(toy_device_preset("8b-h100", &m), -EINVAL);
	ck_assert_uint_eq(m.base_ns, 5000 * 1000);	/* unchanged */
	ck_assert_int_eq(toy_device_preset(NULL, &m), -EINVAL);
}
END_TEST

static const char *const bad_specs[] = {
	"", ",", "1,2", "1,2,3,4", "x", "1ms2", "-1", "+1", " 1", "1,,2", "1,2,", "1e9",
	"nan", "inf", "1,-2,3",
};

START_TEST(test_parse_bad)
{
	struct toy_device_model m = { 0 };

	ck_assert_msg(toy_device_parse(bad_specs[_i], &m) == -EINVAL, "'%s' taken", bad_specs[_i]);
	ck_assert(!m.on);
}
END_TEST

START_TEST(test_parse)
{
	struct toy_device_model m = { 0 };

	ck_assert_int_eq(toy_device_parse("250", &m), 0);
	ck_assert(m.on);
	ck_assert_uint_eq(m.base_ns, 250 * 1000);
	ck_assert_uint_eq(m.per_stream_ns + m.per_token_ns, 0);
	ck_assert_uint_eq(m.wake_ns, RK_GPU_EMU_WAKE_NS);
	m.wake_ns = 5000;	/* kept: --device-wake-us may come first */
	ck_assert_int_eq(toy_device_parse("1000,2.5,0.5", &m), 0);
	ck_assert_uint_eq(m.base_ns, 1000 * 1000);
	ck_assert_uint_eq(m.per_stream_ns, 2500);
	ck_assert_uint_eq(m.per_token_ns, 500);
	ck_assert_uint_eq(m.wake_ns, 5000);
	ck_assert_uint_eq(toy_device_round_ns(&m, 2, 6), 1000 * 1000 + 5000 + 3000);
	ck_assert_int_eq(toy_device_parse("1ms", &m), 0);
	ck_assert_uint_eq(m.base_ns, 1000 * 1000);
	ck_assert_uint_eq(m.wake_ns, 5000);
}
END_TEST

/* ---- a TP2 world in this thread ------------------------------------------------------- */

struct fclock {
	uint64_t t;
	bool frozen;
};

/* Real time until the test freezes it; then only the test moves it. */
static uint64_t fclock_now(void *arg)
{
	struct fclock *c = arg;

	return c->frozen ? c->t : rk_test_now_ns();
}

struct drank {
	int rank;
	struct rk_loop *loop;
	struct rk_world *w;
	struct toy_cpu *b;
	bool ready;
	int frame_err;
};

static void on_ready(struct rk_world *w, void *arg)
{
	struct drank *d = arg;

	(void)w;
	d->ready = true;
}

static enum rk_activity on_frame(struct rk_world *w, int peer, const struct rk_wire_hdr *h,
				 const uint8_t *payload, void *arg)
{
	struct drank *d = arg;
	struct rk_wire_user u;
	int ret;

	(void)w;
	if (h->type != RK_FRAME_USER || rk_wire_decode_user(payload, h->len, &u) || !d->b)
		return RK_IDLE;
	ret = toy_cpu_ops.frame(d->b, peer, &u);	/* the leader's reduction */
	if (ret < 0 && !d->frame_err)
		d->frame_err = ret;
	return RK_BUSY;
}

static const struct rk_world_ops dops = {
	.ready = on_ready,
	.frame = on_frame,
};

static void pump(struct drank *r)
{
	ck_assert_int_ge(rk_loop_run(r[0].loop, RK_RUN_NOWAIT), 0);
	ck_assert_int_ge(rk_loop_run(r[1].loop, RK_RUN_NOWAIT), 0);
}

#define PUMP_UNTIL(r, cond)							\
	do {									\
		uint64_t dl_ = rk_test_deadline_ms(10000);			\
		while (!(cond)) {						\
			ck_assert_msg(rk_test_now_ns() < dl_, "hang: " #cond);	\
			pump(r);						\
		}								\
	} while (0)

static struct toy_cpu_stats cstats(const struct drank *d)
{
	struct toy_cpu_stats s;

	toy_cpu_stats(d->b, &s);
	return s;
}

static struct rk_gpu_notifier_stats nstats(const struct drank *d)
{
	struct rk_gpu_notifier_stats s;

	rk_gpu_notifier_stats(toy_cpu_notifier(d->b), &s, sizeof(s));
	return s;
}

/*
 * The leader's device takes 1 ms, the follower's 3 ms (its share is the slow
 * one). The leader's round completes at 3 ms, once the follower's partials,
 * sent after its mark, are in: not at 1 ms, when its own share is done.
 */
START_TEST(test_tp2_waits_for_every_share)
{
	static const uint64_t dev_ns[2] = { 1 * MS, 3 * MS };
	struct fclock fc = { 0 };
	struct drank r[2] = { { .rank = 0 }, { .rank = 1 } };
	struct rk_gpu_emu_attr ea;
	struct rk_config c;
	struct toy_params p;
	struct rk_wire_stream st = { .stream_id = 11, .position = 0, .n_tokens = 3 };
	uint32_t tok[3] = { 4, 9, 2 }, ref, x;
	uint8_t buf[256];
	struct rk_wire_round view;
	uint64_t t0, id;
	int64_t len;
	int i, status;

	for (i = 0; i < 2; i++) {
		rk_config_init(&c);
		c.rank = i;
		c.world_size = 2;
		c.session_id = SESSION;
		c.wait.mode = RK_WAIT_SPIN;	/* pumped with RK_RUN_NOWAIT */
		c.peer_timeout_ns = 5000 * MS;
		if (i == 0)
			snprintf(c.leader, sizeof(c.leader), "127.0.0.1:0");
		else
			snprintf(c.leader, sizeof(c.leader), "127.0.0.1:%d",
				 rk_world_port(r[0].w));
		ck_assert_int_eq(rk_test_create(&c, &dops, &r[i], &r[i].loop, &r[i].w), 0);
		rk_loop_set_clock(r[i].loop, fclock_now, &fc);
	}
	PUMP_UNTIL(r, r[0].ready && r[1].ready && rk_world_link(r[0].w, 1));

	/* from here device time is the test's */
	fc.t = rk_test_now_ns();
	fc.frozen = true;
	t0 = fc.t;
	rk_gpu_emu_attr_init(&ea);
	ea.clock = fclock_now;
	ea.clock_arg = &fc;
	ea.manual = true;
	for (i = 0; i < 2; i++) {
		toy_params_init(&p);
		p.V = TV;
		p.H = TH;
		p.seed = TSEED;
		p.device.on = true;
		p.device.base_ns = dev_ns[i];
		p.device.wake_ns = RK_GPU_EMU_WAKE_NS;
		p.device_notify = RK_GPU_NOTIFY_POLL;
		p.device_attr = &ea;
		ck_assert_int_eq(toy_cpu_create(r[i].w, &p, &r[i].b), 0);
		ck_assert_ptr_nonnull(toy_cpu_device(r[i].b));
	}

	len = rk_wire_encode_round(buf, sizeof(buf), 1, &st, 1, tok);
	ck_assert_int_gt(len, 0);
	ck_assert_int_eq(rk_wire_decode_round(buf, (size_t)len, &view), 0);
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(toy_cpu_ops.launch(r[i].b, NULL, &view, 0), 0);

	/* both computes finish at once (real time), and are held for their devices */
	PUMP_UNTIL(r, cstats(&r[0]).device_held == 1 && cstats(&r[1]).device_held == 1);
	ck_assert_uint_eq(toy_cpu_reports(r[0].b, NULL, NULL), 0);
	ck_assert_uint_eq(toy_cpu_reports(r[1].b, NULL, NULL), 0);

	/* just before the leader's time: still nothing */
	fc.t = t0 + dev_ns[0] - 1;
	for (i = 0; i < 2; i++)
		ck_assert_int_eq(rk_gpu_emu_run(toy_cpu_device(r[i].b)), 0);
	pump(r);
	ck_assert_uint_eq(toy_cpu_reports(r[0].b, NULL, NULL), 0);

	/* the leader's share is done; the round waits for the follower's */
	fc.t = t0 + dev_ns[0];
	ck_assert_int_eq(rk_gpu_emu_run(toy_cpu_device(r[0].b)), 1);
	ck_assert_int_eq(rk_gpu_emu_run(toy_cpu_device(r[1].b)), 0);
	PUMP_UNTIL(r, nstats(&r[0]).via_poll == 1);
	for (i = 0; i < 100; i++)
		pump(r);
	ck_assert_uint_eq(toy_cpu_reports(r[0].b, NULL, NULL), 0);
	ck_assert_uint_eq(toy_cpu_reports(r[1].b, NULL, NULL), 0);
	ck_assert_uint_eq(cstats(&r[0]).frames_rx, 0);
	ck_assert_int_eq(toy_cpu_ops.token(r[0].b, 0, 0, &x), -EAGAIN);

	fc.t = t0 + dev_ns[1] - 1;
	ck_assert_int_eq(rk_gpu_emu_run(toy_cpu_device(r[1].b)), 0);
	pump(r);
	ck_assert_uint_eq(toy_cpu_reports(r[1].b, NULL, NULL), 0);

	/* the follower's share: its partials go, and the leader's round completes */
	fc.t = t0 + dev_ns[1];
	ck_assert_int_eq(rk_gpu_emu_run(toy_cpu_device(r[1].b)), 1);
	PUMP_UNTIL(r, toy_cpu_reports(r[0].b, NULL, NULL) == 1);
	ck_assert_uint_eq(toy_cpu_reports(r[1].b, &id, &status), 1);
	ck_assert_uint_eq(id, 1);
	ck_assert_int_eq(status, 0);
	ck_assert_uint_eq(toy_cpu_reports(r[0].b, &id, &status), 1);
	ck_assert_uint_eq(id, 1);
	ck_assert_int_eq(status, 0);
	ck_assert_int_eq(r[0].frame_err, 0);
	ck_assert_uint_eq(cstats(&r[0]).frames_rx, 1);

	/* the token is still the toy model's (TP1 reference) */
	ck_assert_int_eq(toy_cpu_ops.token(r[0].b, 0, 0, &x), 0);
	ck_assert_int_eq(toy_generate_ref(TV, TH, TSEED, tok, 3, 1, &(struct toy_sampling){ 0 },
					  &ref), 0);
	ck_assert_uint_eq(x, ref);

	for (i = 0; i < 2; i++) {
		struct rk_gpu_notifier_stats ns = nstats(&r[i]);
		struct toy_cpu_stats cs = cstats(&r[i]);

		ck_assert_uint_eq(ns.marks, 1);
		ck_assert_uint_eq(ns.via_poll, 1);	/* POLL, the loops spun */
		ck_assert_uint_eq(ns.via_wake, 0);
		ck_assert_uint_eq(cs.device_ns, dev_ns[i]);
		ck_assert_uint_eq(cs.device_held, 1);
		ck_assert_uint_eq(cs.device_late, 0);
		ck_assert_uint_eq(cs.resident, 0);	/* off with a device */
		ck_assert_uint_eq(cs.lane_sent, 0);	/* partials leave after the mark */
	}

	for (i = 1; i >= 0; i--) {
		ck_assert_int_eq(toy_cpu_destroy(r[i].b), 0);
		r[i].b = NULL;
	}
	pump(r);
	for (i = 1; i >= 0; i--) {
		ck_assert_int_eq(rk_world_destroy(r[i].w), 0);
		ck_assert_int_eq(rk_loop_destroy(r[i].loop), 0);
	}
}
END_TEST

int main(void)
{
	Suite *s = suite_create("toy_device");
	TCase *tc = rk_tcase(s, "model", TIMEOUT_S, NULL, NULL);

	tcase_add_test(tc, test_presets);
	tcase_add_loop_test(tc, test_parse_bad, 0, (int)(sizeof(bad_specs) / sizeof(bad_specs[0])));
	tcase_add_test(tc, test_parse);
	tc = rk_tcase(s, "world", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_tp2_waits_for_every_share);
	return rk_check_run(s);
}
