/* SPDX-License-Identifier: MIT */
/*
 * What the configuration suites (check_config, check_config_env,
 * check_config_log) share: a config at its defaults, rk_config_print() into a
 * string, and every knob by tier with a value it takes. Never installed.
 */
#ifndef RK_CONFIG_TEST_H
#define RK_CONFIG_TEST_H

#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "runtime_int.h"
#include "rk_check.h"

#define TIMEOUT_S 30
/* a config's tuning tier, for the asserts (a program sets it by name) */
#define T(c) rk__config_tuning(c)

/* A config at its defaults (rk_config_init()). */
static inline struct rk_config defaults(void)
{
	struct rk_config c;

	rk_config_init(&c);
	return c;
}

/* rk_config_print() into a malloc'd string. */
static inline char *print_cfg(const struct rk_config *c)
{
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);

	ck_assert_ptr_nonnull(f);
	rk_config_print(c, f);
	ck_assert_int_eq(fclose(f), 0);
	return buf;
}

/* Does @text hold @line as a whole line? */
static inline int has_line(const char *text, const char *line)
{
	size_t n = strlen(line);
	const char *p = text;

	while ((p = strstr(p, line))) {
		if ((p == text || p[-1] == '\n') && p[n] == '\n')
			return 1;
		p++;
	}
	return 0;
}

/* ---- the two tiers ---------------------------------------------------------------- */

/*
 * Every knob by tier, with both its names and a value it takes (NULL: the
 * secret file, which the secret tests cover). A stable knob is a field of
 * struct rk_config; a tuning knob only a name, held in the private tuning[].
 */
static const struct tier_knob {
	const char *env, *name, *value;
} stable_knobs[] = {
	{ "RK_RANK", "rank", "1" }, { "RK_WORLD_SIZE", "world_size", "2" },
	{ "RK_LEADER", "leader", "127.0.0.1:9" }, { "RK_PORT", "port", "18001" },
	{ "RK_SESSION", "session", "7" },
	{ "RK_SECRET_FILE", "secret_file", NULL }, { "RK_AUTH", "auth", "off" },
	{ "RK_WAIT", "wait", "block" }, { "RK_SPIN_US", "spin_us", "5" },
	{ "RK_SHM", "shm", "off" }, { "RK_MAX_FRAME", "max_frame", "8192" },
	{ "RK_TX_LIMIT", "tx_limit", "1048576" },
	{ "RK_PEER_TIMEOUT_MS", "peer_timeout_ms", "6000" },
	{ "RK_CONNECT_TIMEOUT_MS", "connect_timeout_ms", "100" }, { "RK_LOG", "log", "error" },
	{ "RK_LOG_TIME", "log_time", "1" }, { "RK_SIGNALS", "signals", "1" },
	{ "RK_RDMA_DEV", "rdma_dev", "rxe0" }, { "RK_RDMA_GID", "rdma_gid", "1" },
}, tuning_knobs[] = {
	{ "RK_SPIN_YIELD", "spin_yield", "0" }, { "RK_PREDICT", "predict", "0" },
	{ "RK_PREDICT_MARGIN_US", "predict_margin_us", "30" },
	{ "RK_PREDICT_MIN_US", "predict_min_us", "30" }, { "RK_LEARN", "learn", "0" },
	{ "RK_LEARN_SPIN_MIN_US", "learn_spin_min_us", "500" },
	{ "RK_POLL_US", "poll_us", "50" }, { "RK_POLL_FOR_MS", "poll_for_ms", "50" },
	{ "RK_SQPOLL", "sqpoll", "auto" },
	{ "RK_SQPOLL_CPU", "sqpoll_cpu", "0" }, { "RK_COOP_TASKRUN", "coop_taskrun", "0" },
	{ "RK_DEFER_TASKRUN", "defer_taskrun", "1" },
	{ "RK_RING_ENTRIES", "ring_entries", "512" }, { "RK_RX_BUF_SIZE", "rx_buf_size", "8192" },
	{ "RK_RX_BUF_COUNT", "rx_buf_count", "32" }, { "RK_HEARTBEAT_MS", "heartbeat_ms", "500" },
	{ "RK_HANDSHAKE_MS", "handshake_ms", "700" }, { "RK_RESIDENT", "resident", "off" },
	{ "RK_ROUND_TIMEOUT_MS", "round_timeout_ms", "250" },
	{ "RK_MAX_PENDING", "max_pending", "8" },
	{ "RK_REFUSED_LOG_MS", "refused_log_ms", "100" }, { "RK_FRAME_AUTH", "frame_auth", "1" },
	{ "RK_LOCAL_RANK", "local_rank", "3" }, { "RK_RANKS_PER_POD", "ranks_per_pod", "4" },
	{ "RK_LANE", "lane", "0" },
};
#define N_STABLE ARRAY_SIZE(stable_knobs)
#define N_TUNING ARRAY_SIZE(tuning_knobs)

/* Knob @i of both tiers, stable ones first; *@tuning says which tier. */
static inline const struct tier_knob *tier_knob(size_t i, bool *tuning)
{
	*tuning = i >= N_STABLE;
	return *tuning ? &tuning_knobs[i - N_STABLE] : &stable_knobs[i];
}

#endif /* RK_CONFIG_TEST_H */
