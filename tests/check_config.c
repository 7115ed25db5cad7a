// SPDX-License-Identifier: MIT
/*
 * check_config: the RK_* knob table, strict parsing, the environment and
 * launcher readers, address parsing and logging.
 *
 * Tests that touch the environment or the log state reset it in a checked
 * fixture, so they stay isolated with CK_FORK=no too (valgrind runs).
 */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <sys/stat.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "runtime_int.h"

#define TIMEOUT_S 30
/* a config's tuning tier, for the asserts (a program sets it by name) */
#define T(c) rk__config_tuning(c)

extern char **environ;

static struct rk_config defaults(void)
{
	struct rk_config c;

	rk_config_init(&c);
	return c;
}

/* rk_config_print() into a malloc'd string. */
static char *print_cfg(const struct rk_config *c)
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
static int has_line(const char *text, const char *line)
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

/* Remove every variable a test could depend on: RK_*, and the launchers'. */
static void scrub_env(void)
{
	static const char *const launcher[] = {
		"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS",
		"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
	};
	char name[256];
	size_t i;
	int again = 1;

	while (again) {
		char **e;

		again = 0;
		for (e = environ; e && *e; e++) {
			const char *eq = strchr(*e, '=');
			size_t n = eq ? (size_t)(eq - *e) : strlen(*e);

			if (strncmp(*e, "RK_", 3) || n >= sizeof(name))
				continue;
			memcpy(name, *e, n);
			name[n] = '\0';
			unsetenv(name);		/* environ changed: walk it again */
			again = 1;
			break;
		}
	}
	for (i = 0; i < ARRAY_SIZE(launcher); i++)
		unsetenv(launcher[i]);
}

static void env_setup(void)
{
	scrub_env();
	rk__log_set_level(RK_LOG_WARN);
}

static void env_teardown(void)
{
	scrub_env();
	rk__log_set_level(RK_LOG_WARN);
}

/* ---- defaults ------------------------------------------------------------ */

START_TEST(test_defaults)
{
	struct rk_config c;

	memset(&c, 0xa5, sizeof(c));
	rk_config_init(&c);
	ck_assert_int_eq(c.rank, -1);
	ck_assert_int_eq(c.world_size, 0);
	ck_assert_str_eq(c.leader, "");
	ck_assert_uint_eq(c.session_id, 0);
	ck_assert_int_eq(c.wait.mode, RK_WAIT_ADAPTIVE);
	ck_assert_uint_eq(c.wait.spin_ns, 20000000ull);
	ck_assert_uint_eq(c.wait.spin_ns, RK_DEF_SPIN_US * 1000ull);
	ck_assert(!T(&c)->wait.sqpoll);
	ck_assert(!T(&c)->wait.sqpoll_auto);
	ck_assert(T(&c)->wait.learn);
	ck_assert_uint_eq(T(&c)->wait.learn_spin_min_ns, RK_DEF_LEARN_SPIN_MIN_US * 1000ull);
	ck_assert_int_eq(T(&c)->wait.sqpoll_cpu, -1);
	ck_assert(T(&c)->wait.coop_taskrun);
	ck_assert_uint_eq(T(&c)->ring_entries, RK_DEF_RING_ENTRIES);
	ck_assert_uint_eq(T(&c)->rx_buf_size, RK_DEF_RX_BUF_SIZE);
	ck_assert_uint_eq(T(&c)->rx_buf_count, RK_DEF_RX_BUF_COUNT);
	ck_assert_uint_eq(c.max_frame, RK_DEF_MAX_FRAME);
	ck_assert_uint_eq(c.tx_limit, RK_DEF_TX_LIMIT);
	ck_assert_uint_eq(T(&c)->heartbeat_ns, RK_DEF_HEARTBEAT_MS * 1000000ull);
	ck_assert_uint_eq(c.peer_timeout_ns, RK_DEF_PEER_TIMEOUT_MS * 1000000ull);
	ck_assert_uint_eq(c.connect_timeout_ns, RK_DEF_CONNECT_MS * 1000000ull);
	ck_assert_uint_eq(T(&c)->handshake_timeout_ns, RK_DEF_HANDSHAKE_MS * 1000000ull);
	ck_assert_int_eq(c.log_level, RK_LOG_WARN);
	ck_assert(!c.log_time);
	ck_assert(!c.catch_signals);
}
END_TEST

START_TEST(test_wait_mode_name)
{
	ck_assert_str_eq(rk_wait_mode_name(RK_WAIT_ADAPTIVE), "adaptive");
	ck_assert_str_eq(rk_wait_mode_name(RK_WAIT_SPIN), "spin");
	ck_assert_str_eq(rk_wait_mode_name(RK_WAIT_BLOCK), "block");
	ck_assert_ptr_nonnull(rk_wait_mode_name((enum rk_wait_mode)7));
}
END_TEST

START_TEST(test_print_defaults)
{
	static const char *const want =
		"# RK_RANK unset\n"
		"# RK_WORLD_SIZE unset\n"
		"# RK_LEADER unset\n"
		"RK_SESSION=0x0\n"
		"RK_WAIT=adaptive\n"
		"RK_SPIN_US=20000\n"
		"RK_MAX_FRAME=4194304\n"
		"RK_TX_LIMIT=67108864\n"
		"RK_PEER_TIMEOUT_MS=5000\n"
		"RK_CONNECT_TIMEOUT_MS=30000\n"
		"RK_LOG=warn\n"
		"RK_LOG_TIME=0\n"
		"RK_SIGNALS=0\n"
		"# RK_RDMA_DEV unset\n"
		"# RK_RDMA_GID unset\n"
		"RK_AUTH=auto\n"
		"# RK_SECRET_FILE unset\n"
		"RK_SHM=auto\n"
		"# tuning (may change)\n"
		"RK_SPIN_YIELD=64\n"
		"RK_PREDICT=1\n"
		"RK_PREDICT_MARGIN_US=20\n"
		"RK_PREDICT_MIN_US=20\n"
		"RK_LEARN=1\n"
		"RK_LEARN_SPIN_MIN_US=1000\n"
		"RK_SQPOLL=0\n"
		"RK_SQPOLL_CPU=-1\n"
		"RK_COOP_TASKRUN=1\n"
		"RK_DEFER_TASKRUN=0\n"
		"RK_RING_ENTRIES=256\n"
		"RK_RX_BUF_SIZE=16384\n"
		"RK_RX_BUF_COUNT=64\n"
		"RK_HEARTBEAT_MS=1000\n"
		"RK_HANDSHAKE_MS=2000\n"
		"RK_RESIDENT=auto\n"
		"RK_MAX_PENDING=64\n"
		"RK_REFUSED_LOG_MS=10000\n"
		"RK_LANE=1\n";
	struct rk_config c = defaults();
	char *out = print_cfg(&c);

	ck_assert_str_eq(out, want);
	free(out);
}
END_TEST

/* Printed lines, fed back through rk_config_set(), rebuild the same config. */
START_TEST(test_print_roundtrip)
{
	static const char *const set[][2] = {
		{ "RK_RANK", "3" }, { "RK_WORLD_SIZE", "8" },
		{ "RK_LEADER", "roce://10.0.0.1:7000?dev=rxe0&gid=1" },
		{ "RK_SESSION", "0xdeadbeefcafe" }, { "RK_WAIT", "block" },
		{ "RK_SPIN_US", "123" }, { "RK_PREDICT_MARGIN_US", "35" },
		{ "RK_PREDICT_MIN_US", "7" }, { "RK_SQPOLL", "auto" }, { "RK_SQPOLL_CPU", "5" },
		{ "RK_LEARN", "off" }, { "RK_LEARN_SPIN_MIN_US", "250" },
		{ "RK_COOP_TASKRUN", "off" }, { "RK_RING_ENTRIES", "1024" },
		{ "RK_RX_BUF_SIZE", "65536" }, { "RK_RX_BUF_COUNT", "128" },
		{ "RK_MAX_FRAME", "8192" }, { "RK_TX_LIMIT", "1048576" },
		{ "RK_HEARTBEAT_MS", "100" }, { "RK_PEER_TIMEOUT_MS", "1000" },
		{ "RK_CONNECT_TIMEOUT_MS", "2000" }, { "RK_HANDSHAKE_MS", "300" },
		{ "RK_LOG", "debug" }, { "RK_LOG_TIME", "on" }, { "RK_SIGNALS", "true" },
		{ "RK_RDMA_DEV", "mlx5_0" }, { "RK_RDMA_GID", "3" },
	};
	struct rk_config a = defaults(), b = defaults();
	char err[256], *out, *line, *save = NULL;
	size_t i;

	for (i = 0; i < ARRAY_SIZE(set); i++)
		ck_assert_msg(rk_config_set(&a, set[i][0], set[i][1], err, sizeof(err)) == 0,
			      "%s", err);
	out = print_cfg(&a);
	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		char *eq = strchr(line, '=');

		if (!strcmp(line, "# RK_SECRET_FILE unset"))
			continue;	/* a secret is never printed, so it cannot round-trip */
		if (!strcmp(line, "# tuning (may change)"))
			continue;	/* the tuning tier's block starts */
		ck_assert_msg(eq && line[0] != '#', "line '%s'", line);
		*eq = '\0';
		ck_assert_msg(rk_config_set(&b, line, eq + 1, err, sizeof(err)) == 0, "%s", err);
	}
	free(out);
	ck_assert(memcmp(&a, &b, sizeof(a)) == 0);
}
END_TEST

/* ---- rk_config_set: good values -------------------------------------------- */

static const struct {
	const char *name, *value, *printed;
} good[] = {
	{ "RK_RANK", "0", "RK_RANK=0" },
	{ "RK_RANK", "65535", "RK_RANK=65535" },
	{ "rank", "007", "RK_RANK=7" },
	{ "RK_WORLD_SIZE", "1", "RK_WORLD_SIZE=1" },
	{ "world_size", "65536", "RK_WORLD_SIZE=65536" },
	{ "RK_LEADER", "node1:29500", "RK_LEADER=node1:29500" },
	{ "RK_LEADER", "tcp://10.1.2.3:1", "RK_LEADER=tcp://10.1.2.3:1" },
	{ "RK_LEADER", "[::1]:65535", "RK_LEADER=[::1]:65535" },
	{ "leader", "roce://h-1.x:9?dev=rxe0&gid=1", "RK_LEADER=roce://h-1.x:9?dev=rxe0&gid=1" },
	{ "RK_LEADER", "roce://h:9?gid=0&dev=rxeB", "RK_LEADER=roce://h:9?gid=0&dev=rxeB" },
	{ "RK_LEADER", "roce://h:9", "RK_LEADER=roce://h:9" },
	{ "RK_RDMA_DEV", "rxeB", "RK_RDMA_DEV=rxeB" },
	{ "rdma_dev", "mlx5_0.x-1", "RK_RDMA_DEV=mlx5_0.x-1" },
	{ "RK_RDMA_GID", "0", "RK_RDMA_GID=0" },
	{ "rdma_gid", "255", "RK_RDMA_GID=255" },
	{ "RK_SESSION", "0", "RK_SESSION=0x0" },
	{ "RK_SESSION", "18446744073709551615", "RK_SESSION=0xffffffffffffffff" },
	{ "RK_SESSION", "0xABCdef0123456789", "RK_SESSION=0xabcdef0123456789" },
	{ "session", "255", "RK_SESSION=0xff" },
	{ "RK_WAIT", "spin", "RK_WAIT=spin" },
	{ "RK_WAIT", "block", "RK_WAIT=block" },
	{ "wait", "adaptive", "RK_WAIT=adaptive" },
	{ "RK_SPIN_US", "0", "RK_SPIN_US=0" },
	{ "RK_SPIN_US", "60000000", "RK_SPIN_US=60000000" },
	{ "spin_us", "5", "RK_SPIN_US=5" },
	{ "RK_SQPOLL", "1", "RK_SQPOLL=1" },
	{ "RK_SQPOLL", "yes", "RK_SQPOLL=1" },
	{ "RK_SQPOLL", "TRUE", "RK_SQPOLL=1" },
	{ "sqpoll", "on", "RK_SQPOLL=1" },
	{ "RK_SQPOLL", "auto", "RK_SQPOLL=auto" },
	{ "RK_SQPOLL", "AUTO", "RK_SQPOLL=auto" },
	{ "RK_LEARN", "0", "RK_LEARN=0" },
	{ "learn", "on", "RK_LEARN=1" },
	{ "RK_LEARN_SPIN_MIN_US", "0", "RK_LEARN_SPIN_MIN_US=0" },
	{ "RK_LEARN_SPIN_MIN_US", "60000000", "RK_LEARN_SPIN_MIN_US=60000000" },
	{ "RK_SQPOLL_CPU", "-1", "RK_SQPOLL_CPU=-1" },
	{ "RK_SQPOLL_CPU", "4095", "RK_SQPOLL_CPU=4095" },
	{ "RK_COOP_TASKRUN", "0", "RK_COOP_TASKRUN=0" },
	{ "RK_COOP_TASKRUN", "no", "RK_COOP_TASKRUN=0" },
	{ "RK_COOP_TASKRUN", "false", "RK_COOP_TASKRUN=0" },
	{ "coop_taskrun", "off", "RK_COOP_TASKRUN=0" },
	{ "RK_RING_ENTRIES", "8", "RK_RING_ENTRIES=8" },
	{ "RK_RING_ENTRIES", "32768", "RK_RING_ENTRIES=32768" },
	{ "RK_RX_BUF_SIZE", "4096", "RK_RX_BUF_SIZE=4096" },
	{ "RK_RX_BUF_SIZE", "1048576", "RK_RX_BUF_SIZE=1048576" },
	{ "RK_RX_BUF_SIZE", "5000", "RK_RX_BUF_SIZE=5000" },
	{ "RK_RX_BUF_COUNT", "1", "RK_RX_BUF_COUNT=1" },
	{ "RK_RX_BUF_COUNT", "32768", "RK_RX_BUF_COUNT=32768" },
	{ "RK_MAX_FRAME", "4096", "RK_MAX_FRAME=4096" },
	{ "RK_MAX_FRAME", "16777216", "RK_MAX_FRAME=16777216" },
	{ "RK_TX_LIMIT", "65536", "RK_TX_LIMIT=65536" },
	{ "RK_TX_LIMIT", "1099511627776", "RK_TX_LIMIT=1099511627776" },
	{ "RK_HEARTBEAT_MS", "1", "RK_HEARTBEAT_MS=1" },
	{ "RK_HEARTBEAT_MS", "60000", "RK_HEARTBEAT_MS=60000" },
	{ "RK_PEER_TIMEOUT_MS", "10", "RK_PEER_TIMEOUT_MS=10" },
	{ "RK_PEER_TIMEOUT_MS", "3600000", "RK_PEER_TIMEOUT_MS=3600000" },
	{ "RK_CONNECT_TIMEOUT_MS", "1", "RK_CONNECT_TIMEOUT_MS=1" },
	{ "RK_HANDSHAKE_MS", "1", "RK_HANDSHAKE_MS=1" },
	{ "RK_LOG", "error", "RK_LOG=error" },
	{ "RK_LOG", "info", "RK_LOG=info" },
	{ "RK_LOG", "3", "RK_LOG=debug" },
	{ "log", "0", "RK_LOG=error" },
	{ "RK_LOG_TIME", "yes", "RK_LOG_TIME=1" },
	{ "log_time", "0", "RK_LOG_TIME=0" },
	{ "RK_SIGNALS", "1", "RK_SIGNALS=1" },
	{ "signals", "Yes", "RK_SIGNALS=1" },
};

START_TEST(test_set_good)
{
	struct rk_config c = defaults();
	char err[256] = "", *out;
	int ret;

	ret = rk_config_set(&c, good[_i].name, good[_i].value, err, sizeof(err));
	ck_assert_msg(ret == 0, "%s='%s' -> %d (%s)", good[_i].name, good[_i].value, ret, err);
	out = print_cfg(&c);
	ck_assert_msg(has_line(out, good[_i].printed), "'%s' not in:\n%s", good[_i].printed, out);
	free(out);
}
END_TEST

/* ---- rk_config_set: malformed values ----------------------------------------- */

static const char *const all_knobs[] = {
	"RK_RANK", "RK_WORLD_SIZE", "RK_LEADER", "RK_SESSION", "RK_WAIT", "RK_SPIN_US",
	"RK_SQPOLL", "RK_SQPOLL_CPU", "RK_COOP_TASKRUN",
	"RK_DEFER_TASKRUN",
	"RK_RING_ENTRIES", "RK_RX_BUF_SIZE", "RK_RX_BUF_COUNT", "RK_MAX_FRAME", "RK_TX_LIMIT",
	"RK_HEARTBEAT_MS", "RK_PEER_TIMEOUT_MS", "RK_CONNECT_TIMEOUT_MS", "RK_HANDSHAKE_MS",
	"RK_LOG", "RK_LOG_TIME", "RK_SIGNALS", "RK_RDMA_GID", "RK_RESIDENT", "RK_LEARN",
	"RK_LEARN_SPIN_MIN_US",
};

/* Malformed for every knob (RK_SQPOLL_CPU takes -1, so it gets -2 instead). */
static const char *const generic_bad[] = {
	"", "abc", "12x", "-1", " 5", "5 ", "+5", "99999999999999999999", "0x", "1\n", "1.5",
};

static void assert_refused(const char *name, const char *value)
{
	struct rk_config c = defaults(), d = defaults();
	char err[512] = "", want[256];
	int ret;

	ret = rk_config_set(&c, name, value, err, sizeof(err));
	ck_assert_msg(ret == -RK_ECONFIG, "%s='%s' accepted (%d)", name, value, ret);
	snprintf(want, sizeof(want), "%s='%s': ", name, value);
	ck_assert_msg(!strncmp(err, want, strlen(want)), "'%s' does not start with '%s'", err,
		      want);
	ck_assert_msg(memcmp(&c, &d, sizeof(c)) == 0, "%s='%s' changed the config", name, value);
}

START_TEST(test_set_bad_generic)
{
	const char *name = all_knobs[_i / ARRAY_SIZE(generic_bad)];
	const char *value = generic_bad[_i % ARRAY_SIZE(generic_bad)];

	if (!strcmp(name, "RK_SQPOLL_CPU") && !strcmp(value, "-1"))
		value = "-2";
	assert_refused(name, value);
}
END_TEST

static const struct {
	const char *name, *value;
} bad[] = {
	{ "RK_RANK", "65536" }, { "RK_RANK", "-0x1" }, { "RK_RANK", "--1" },
	{ "RK_RANK", "-" }, { "RK_RANK", "9223372036854775808" },
	{ "RK_WORLD_SIZE", "0" }, { "RK_WORLD_SIZE", "65537" },
	{ "RK_SESSION", "0x1g" }, { "RK_SESSION", "0x11112222333344445" },
	{ "RK_SESSION", "18446744073709551616" }, { "RK_SESSION", "-5" },
	{ "RK_SESSION", "0X" }, { "RK_SESSION", "x10" },
	{ "RK_WAIT", "Spin" }, { "RK_WAIT", "busy" }, { "RK_WAIT", "adaptive " },
	{ "RK_WAIT", "0" }, { "RK_WAIT", "blockx" },
	{ "RK_SPIN_US", "60000001" }, { "RK_SPIN_US", "18446744073709551615" },
	{ "RK_PREDICT", "yes please" }, { "RK_PREDICT", "2" },
	{ "RK_PREDICT_MARGIN_US", "1000001" }, { "RK_PREDICT_MARGIN_US", "-1" },
	{ "RK_PREDICT_MIN_US", "0" }, { "RK_PREDICT_MIN_US", "20us" },
	{ "RK_SQPOLL", "2" }, { "RK_SQPOLL", "maybe" }, { "RK_SQPOLL", "yess" },
	{ "RK_SQPOLL", "y" }, { "RK_SQPOLL", "01" }, { "RK_SQPOLL", "autox" },
	{ "RK_SQPOLL", "auto " },
	{ "RK_LEARN", "2" }, { "RK_LEARN", "learn" },
	{ "RK_LEARN_SPIN_MIN_US", "60000001" }, { "RK_LEARN_SPIN_MIN_US", "1ms" },
	{ "RK_SQPOLL_CPU", "-2" }, { "RK_SQPOLL_CPU", "4096" },
	{ "RK_COOP_TASKRUN", "nope" }, { "RK_SIGNALS", "enable" },
	{ "RK_RING_ENTRIES", "100" }, { "RK_RING_ENTRIES", "4" }, { "RK_RING_ENTRIES", "0" },
	{ "RK_RING_ENTRIES", "65536" }, { "RK_RING_ENTRIES", "255" },
	{ "RK_RX_BUF_SIZE", "4095" }, { "RK_RX_BUF_SIZE", "1048577" },
	{ "RK_RX_BUF_COUNT", "0" }, { "RK_RX_BUF_COUNT", "3" }, { "RK_RX_BUF_COUNT", "65536" },
	{ "RK_MAX_FRAME", "4095" }, { "RK_MAX_FRAME", "16777217" },
	{ "RK_TX_LIMIT", "65535" }, { "RK_TX_LIMIT", "0" }, { "RK_TX_LIMIT", "1099511627777" },
	{ "RK_HEARTBEAT_MS", "0" }, { "RK_HEARTBEAT_MS", "60001" },
	{ "RK_PEER_TIMEOUT_MS", "9" }, { "RK_PEER_TIMEOUT_MS", "3600001" },
	{ "RK_CONNECT_TIMEOUT_MS", "0" }, { "RK_CONNECT_TIMEOUT_MS", "3600001" },
	{ "RK_HANDSHAKE_MS", "0" }, { "RK_HANDSHAKE_MS", "600001" },
	{ "RK_LOG", "4" }, { "RK_LOG", "WARN" }, { "RK_LOG", "warning" }, { "RK_LOG", "-1" },
	{ "RK_LOG", "trace" },
	/* leader addresses */
	{ "RK_LEADER", "localhost" }, { "RK_LEADER", "host:" }, { "RK_LEADER", ":80" },
	{ "RK_LEADER", "host:0" }, { "RK_LEADER", "host:65536" }, { "RK_LEADER", "host:80x" },
	{ "RK_LEADER", "host:-80" }, { "RK_LEADER", "host:+80" },
	{ "RK_LEADER", "http://h:80" }, { "RK_LEADER", "TCP://h:80" }, { "RK_LEADER", "tcp://" },
	{ "RK_LEADER", "tcp://h" }, { "RK_LEADER", "tcp:/h:80" }, { "RK_LEADER", "://h:80" },
	{ "RK_LEADER", "[::1]" }, { "RK_LEADER", "[::1]80" }, { "RK_LEADER", "::1:80" },
	{ "RK_LEADER", "[]:80" }, { "RK_LEADER", "[h:1]:80" }, { "RK_LEADER", "[::1%]:80" },
	{ "RK_LEADER", "[::1%a b]:80" }, { "RK_LEADER", "[1.2.3.4]:80" }, { "RK_LEADER", "[::1:80" },
	{ "RK_LEADER", "h:80?" },
	{ "RK_LEADER", "ho st:80" }, { "RK_LEADER", "h/x:80" }, { "RK_LEADER", "h:80:81" },
	{ "RK_LEADER", "roce://h:1?dev=rxe0 gid=1" }, { "RK_LEADER", "user@h:80" },
	{ "RK_RDMA_DEV", "" }, { "RK_RDMA_DEV", "rxe 0" }, { "RK_RDMA_DEV", "rxe/0" },
	{ "RK_RDMA_DEV", "0123456789012345678901234567890123456789012345678901234567890123" },
	{ "RK_RDMA_GID", "-1" }, { "RK_RDMA_GID", "256" }, { "RK_RDMA_GID", "1x" },
	{ "RK_RDMA_GID", "" },
};

START_TEST(test_set_bad)
{
	assert_refused(bad[_i].name, bad[_i].value);
}
END_TEST

/* Addresses the parser splits but the knob refuses: a roce:// query takes
 * dev= and gid= only, each well formed; tcp takes none. */
static const char *const bad_query[] = {
	"roce://h:1?dev=rxe0&gid=256", "roce://h:1?gid=x", "roce://h:1?dev=",
	"roce://h:1?dev=rxe0&", "roce://h:1?port=1", "roce://h:1?dev", "roce://h:1?&dev=a",
	"roce://h:1?dev=a:b", "roce://h:1?gid=1=2", "tcp://h:1?dev=rxe0", "h:1?gid=1",
};

START_TEST(test_set_bad_query)
{
	struct rk__addr a;

	ck_assert_int_eq(rk__addr_parse(bad_query[_i], &a), 0);
	assert_refused("RK_LEADER", bad_query[_i]);
}
END_TEST

/* ---- rk_config_set: names, units, messages ---------------------------------- */

START_TEST(test_set_units)
{
	struct rk_config c = defaults();

	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_US", "7", NULL, 0), 0);
	ck_assert_uint_eq(c.wait.spin_ns, 7000);
	ck_assert_int_eq(rk_config_set(&c, "learn_spin_min_us", "60000000", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->wait.learn_spin_min_ns, 60000000000ull);
	ck_assert_int_eq(rk_config_set(&c, "RK_PREDICT_MIN_US", "3", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->wait.predict_min_ns, 3000);
	ck_assert_int_eq(rk_config_set(&c, "RK_HEARTBEAT_MS", "3", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->heartbeat_ns, 3000000);
	ck_assert_int_eq(rk_config_set(&c, "RK_PEER_TIMEOUT_MS", "3600000", NULL, 0), 0);
	ck_assert_uint_eq(c.peer_timeout_ns, 3600000000000ull);
	ck_assert_int_eq(rk_config_set(&c, "connect_timeout_ms", "12", NULL, 0), 0);
	ck_assert_uint_eq(c.connect_timeout_ns, 12000000);
	ck_assert_int_eq(rk_config_set(&c, "handshake_ms", "13", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->handshake_timeout_ns, 13000000);
	ck_assert_int_eq(rk_config_set(&c, "RK_RING_ENTRIES", "64", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->ring_entries, 64);
	ck_assert_int_eq(rk_config_set(&c, "RK_MAX_FRAME", "16777216", NULL, 0), 0);
	ck_assert_uint_eq(c.max_frame, RK_WIRE_MAX_PAYLOAD);
	ck_assert_int_eq(rk_config_set(&c, "RK_TX_LIMIT", "1099511627776", NULL, 0), 0);
	ck_assert_uint_eq(c.tx_limit, 1ull << 40);
	ck_assert_int_eq(rk_config_set(&c, "RK_SESSION", "0x10", NULL, 0), 0);
	ck_assert_uint_eq(c.session_id, 16);
	ck_assert_int_eq(rk_config_set(&c, "RK_SESSION", "10", NULL, 0), 0);
	ck_assert_uint_eq(c.session_id, 10);
	ck_assert_int_eq(rk_config_set(&c, "RK_WAIT", "spin", NULL, 0), 0);
	ck_assert_int_eq(c.wait.mode, RK_WAIT_SPIN);
	ck_assert_int_eq(rk_config_set(&c, "RK_LOG", "info", NULL, 0), 0);
	ck_assert_int_eq(c.log_level, RK_LOG_INFO);
	ck_assert_int_eq(rk_config_set(&c, "RK_SIGNALS", "on", NULL, 0), 0);
	ck_assert(c.catch_signals);
	ck_assert_int_eq(rk_config_set(&c, "RK_SQPOLL_CPU", "-0", NULL, 0), 0);
	ck_assert_int_eq(T(&c)->wait.sqpoll_cpu, 0);
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", "[fe80::1%eth0]:5", NULL, 0), 0);
	ck_assert_str_eq(c.leader, "[fe80::1%eth0]:5");
}
END_TEST

START_TEST(test_set_messages)
{
	struct rk_config c = defaults(), d = defaults();
	char err[256], small[8];

	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_US", "12x", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_SPIN_US='12x': not an unsigned integer in [0, 60000000]");
	/* the short name reports the variable's name */
	ck_assert_int_eq(rk_config_set(&c, "spin_us", "abc", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_SPIN_US='abc': not an unsigned integer in [0, 60000000]");
	ck_assert_int_eq(rk_config_set(&c, "RK_RING_ENTRIES", "100", err, sizeof(err)),
			 -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_RING_ENTRIES='100': not a power of two in [8, 32768]");
	ck_assert_int_eq(rk_config_set(&c, "RK_WAIT", "busy", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_WAIT='busy': not one of adaptive, spin, block");
	ck_assert_int_eq(rk_config_set(&c, "RK_RANK", "-1", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_RANK='-1': not an integer in [0, 65535]");

	/* unknown names, case-sensitive */
	ck_assert_int_eq(rk_config_set(&c, "RK_NOPE", "1", err, sizeof(err)), -ENOENT);
	ck_assert_str_eq(err, "unknown setting 'RK_NOPE'");
	ck_assert_int_eq(rk_config_set(&c, "rk_spin_us", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rk_config_set(&c, "SPIN_US", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_U", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_USX", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rk_config_set(&c, "", "1", err, sizeof(err)), -ENOENT);
	ck_assert_int_eq(rk_config_set(&c, NULL, "1", err, sizeof(err)), -ENOENT);

	/* no err buffer, a tiny one, a NULL value */
	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_US", "x", NULL, 0), -RK_ECONFIG);
	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_US", "x", small, sizeof(small)), -RK_ECONFIG);
	ck_assert_str_eq(small, "RK_SPIN");
	ck_assert_int_eq(rk_config_set(&c, "RK_SPIN_US", NULL, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_int_eq(rk_config_set(&c, "RK_NOPE", "1", NULL, 0), -ENOENT);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

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
	{ "RK_LEADER", "leader", "127.0.0.1:9" }, { "RK_SESSION", "session", "7" },
	{ "RK_SECRET_FILE", "secret_file", NULL }, { "RK_AUTH", "auth", "on" },
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
	{ "RK_LEARN_SPIN_MIN_US", "learn_spin_min_us", "500" }, { "RK_SQPOLL", "sqpoll", "auto" },
	{ "RK_SQPOLL_CPU", "sqpoll_cpu", "0" }, { "RK_COOP_TASKRUN", "coop_taskrun", "0" },
	{ "RK_DEFER_TASKRUN", "defer_taskrun", "1" },
	{ "RK_RING_ENTRIES", "ring_entries", "512" }, { "RK_RX_BUF_SIZE", "rx_buf_size", "8192" },
	{ "RK_RX_BUF_COUNT", "rx_buf_count", "32" }, { "RK_HEARTBEAT_MS", "heartbeat_ms", "500" },
	{ "RK_HANDSHAKE_MS", "handshake_ms", "700" }, { "RK_RESIDENT", "resident", "off" },
	{ "RK_MAX_PENDING", "max_pending", "8" },
	{ "RK_REFUSED_LOG_MS", "refused_log_ms", "100" }, { "RK_LANE", "lane", "0" },
};
#define N_STABLE ARRAY_SIZE(stable_knobs)
#define N_TUNING ARRAY_SIZE(tuning_knobs)

static const struct tier_knob *tier_knob(size_t i, bool *tuning)
{
	*tuning = i >= N_STABLE;
	return *tuning ? &tuning_knobs[i - N_STABLE] : &stable_knobs[i];
}

/*
 * Each knob of either tier: both names set it, and rk_config_print() shows
 * it in its tier's block (the stable knobs before "# tuning (may change)",
 * the tuning tier after); a malformed value is refused by name and changes
 * nothing; a tuning knob leaves every public field as it was.
 */
START_TEST(test_tier_knob)
{
	bool tuning;
	const struct tier_knob *k = tier_knob((size_t)_i, &tuning);
	struct rk_config c = defaults(), d = defaults();
	char err[512] = "", want[128], *out, *at, *sep;

	assert_refused(k->env, "a b");
	/* by its short name too, and the message names the variable */
	ck_assert_int_eq(rk_config_set(&c, k->name, "a b", err, sizeof(err)), -RK_ECONFIG);
	snprintf(want, sizeof(want), "%s='a b': ", k->env);
	ck_assert_msg(!strncmp(err, want, strlen(want)), "'%s' does not start with '%s'", err,
		      want);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	if (!k->value)
		return;
	ck_assert_msg(rk_config_set(&c, k->env, k->value, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(rk_config_set(&d, k->name, k->value, err, sizeof(err)) == 0, "%s", err);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	d = defaults();
	ck_assert_msg(memcmp(&c, &d, sizeof(c)) != 0, "%s=%s changed nothing", k->env, k->value);
	ck_assert_msg(memcmp(&c, &d, offsetof(struct rk_config, tuning)) == 0 || !tuning,
		      "tuning knob %s changed a public field", k->env);
	ck_assert_msg(memcmp(c.tuning, d.tuning, sizeof(c.tuning)) == 0 || tuning,
		      "stable knob %s changed the tuning tier", k->env);
	out = print_cfg(&c);
	snprintf(want, sizeof(want), "\n%s=", k->env);
	at = strstr(out, want);
	sep = strstr(out, "\n# tuning (may change)\n");
	ck_assert_ptr_nonnull(sep);
	if (!at && !strncmp(out, want + 1, strlen(want) - 1))
		at = out;
	ck_assert_msg(at, "%s not printed:\n%s", k->env, out);
	ck_assert_msg(tuning ? at > sep : at < sep, "%s printed in the wrong block:\n%s", k->env,
		      out);
	free(out);
}
END_TEST

/* The tiers hold every knob the table has, each once, and no other. */
START_TEST(test_tier_count)
{
	struct rk_config c = defaults();
	char *out = print_cfg(&c), *line, *save = NULL;
	size_t n = 0, i;

	for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
		bool found = false;

		if (!strcmp(line, "# tuning (may change)"))
			continue;
		for (i = 0; i < N_STABLE + N_TUNING; i++) {
			bool tuning;
			const struct tier_knob *k = tier_knob(i, &tuning);
			size_t len = strlen(k->env);

			if (!strncmp(line, k->env, len) && line[len] == '=')
				found = true;
			if (!strncmp(line, "# ", 2) && !strncmp(line + 2, k->env, len) &&
			    line[2 + len] == ' ')
				found = true;
		}
		ck_assert_msg(found, "printed knob not in the tier lists: %s", line);
		n++;
	}
	free(out);
	ck_assert_uint_eq(n, N_STABLE + N_TUNING);
	ck_assert_uint_eq(N_STABLE, 18);
}
END_TEST

/*
 * rk_config_create() gives what rk_config_init() gives, without the caller
 * knowing sizeof(struct rk_config); rk_config_destroy() takes NULL. A config
 * that no init filled (zeroed, or only its public fields copied) is refused
 * by rk_loop_create() and rk_config_from_env(), by what is missing.
 */
START_TEST(test_create_destroy)
{
	struct rk_config *c = NULL, d = defaults(), z;
	struct rk_loop *loop;
	char err[256] = "";

	ck_assert_int_eq(rk_config_create(&c), 0);
	ck_assert_ptr_nonnull(c);
	ck_assert(memcmp(c, &d, sizeof(d)) == 0);
	ck_assert_int_eq(rk_config_set(c, "RK_HEARTBEAT_MS", "250", err, sizeof(err)), 0);
	ck_assert_int_eq(rk_config_set_secret(c, "0123456789abcdef0123456789abcdef", 32), 0);
	rk_config_destroy(c);
	rk_config_destroy(NULL);

	memset(&z, 0, sizeof(z));
	z.peer_timeout_ns = d.peer_timeout_ns;
	z.connect_timeout_ns = d.connect_timeout_ns;
	z.max_frame = d.max_frame;
	z.tx_limit = d.tx_limit;
	ck_assert_int_eq(rk__config_check(&z, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "rk_config_init()"), "%s", err);
	ck_assert_int_eq(rk_config_from_env(&z, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_int_eq(rk_loop_create(&z, &loop), -RK_ECONFIG);
}
END_TEST

/* ---- rk_config_from_env ------------------------------------------------------- */

START_TEST(test_env_apply)
{
	struct rk_config c = defaults();
	char err[1024] = "";

	setenv("RK_SPIN_US", "100", 1);
	setenv("RK_WAIT", "spin", 1);
	setenv("RK_LEADER", "tcp://leader:29500", 1);
	setenv("RK_RANK", "2", 1);
	setenv("RK_WORLD_SIZE", "4", 1);
	setenv("RK_SESSION", "0x2a", 1);
	setenv("RK_LOG", "debug", 1);
	setenv("RKX", "junk", 1);		/* not RK_: not ours */
	setenv("XRK_SPIN_US", "junk", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(c.wait.spin_ns, 100000);
	ck_assert_int_eq(c.wait.mode, RK_WAIT_SPIN);
	ck_assert_str_eq(c.leader, "tcp://leader:29500");
	ck_assert_int_eq(c.rank, 2);
	ck_assert_int_eq(c.world_size, 4);
	ck_assert_uint_eq(c.session_id, 42);
	ck_assert_int_eq(c.log_level, RK_LOG_DEBUG);
	ck_assert_int_eq(rk__log_level(), RK_LOG_DEBUG);
	unsetenv("RKX");
	unsetenv("XRK_SPIN_US");
}
END_TEST

START_TEST(test_env_empty)
{
	struct rk_config c = defaults(), d = defaults();

	rk__log_set_level(RK_LOG_DEBUG);
	ck_assert_int_eq(rk_config_from_env(&c, NULL, 0), 0);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	ck_assert_int_eq(rk__log_level(), RK_LOG_WARN);	/* the config's level applies */
}
END_TEST

START_TEST(test_env_unknown)
{
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "";

	setenv("RK_SPIN_US", "5", 1);
	setenv("RK_SPINUS", "5", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "unknown variable RK_SPINUS (known: RK_RANK ", 43), "%s",
		      err);
	ck_assert_msg(strstr(err, " RK_SPIN_US ") && strstr(err, " RK_LANE)"), "%s",
		      err);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);	/* nothing applied */

	/* short names are for rk_config_set() only; RK_ alone is unknown too */
	unsetenv("RK_SPINUS");
	setenv("RK_", "1", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "unknown variable RK_ (known:", 28), "%s", err);
	/* a small buffer still gets a terminated prefix */
	ck_assert_int_eq(rk_config_from_env(&c, err, 20), -RK_ECONFIG);
	ck_assert_str_eq(err, "unknown variable RK");
	ck_assert_int_eq(rk_config_from_env(&c, NULL, 0), -RK_ECONFIG);
}
END_TEST

START_TEST(test_env_ignored_prefixes)
{
	struct rk_config c = defaults();
	char err[1024] = "";

	setenv("RK_BENCH_ITERS", "1000", 1);
	setenv("RK_BENCH_", "x", 1);
	setenv("RK_TEST_SEED", "not a number", 1);
	setenv("RK_SPIN_US", "9", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(c.wait.spin_ns, 9000);

	/* only the prefixes with their underscore */
	setenv("RK_TESTING", "1", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_TESTING"), "%s", err);
	unsetenv("RK_TESTING");
	setenv("RK_BENCH", "1", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "unknown variable RK_BENCH ", 26), "%s", err);
}
END_TEST

START_TEST(test_env_bad_value)
{
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "";

	rk__log_set_level(RK_LOG_INFO);
	setenv("RK_SPIN_US", "5", 1);
	setenv("RK_LOG", "debug", 1);
	setenv("RK_WAIT", "bogus", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_WAIT='bogus': not one of adaptive, spin, block");
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	ck_assert_int_eq(rk__log_level(), RK_LOG_INFO);	/* untouched on failure */

	setenv("RK_WAIT", "", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_WAIT='': not one of adaptive, spin, block");
}
END_TEST

/* Every knob of both tiers from the environment: applied as rk_config_set() applies it. */
START_TEST(test_env_tiers)
{
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "";
	size_t i;

	for (i = 0; i < N_STABLE + N_TUNING; i++) {
		bool tuning;
		const struct tier_knob *k = tier_knob(i, &tuning);

		if (!k->value)
			continue;
		setenv(k->env, k->value, 1);
		ck_assert_msg(rk_config_set(&d, k->env, k->value, err, sizeof(err)) == 0, "%s",
			      err);
	}
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

/* A malformed tuning knob in the environment is refused by name, as a stable one. */
START_TEST(test_env_tuning_bad)
{
	const struct tier_knob *k = &tuning_knobs[_i];
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "", want[128];

	setenv("RK_SPIN_US", "5", 1);
	setenv(k->env, "a b", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	snprintf(want, sizeof(want), "%s='a b': ", k->env);
	ck_assert_msg(!strncmp(err, want, strlen(want)), "'%s' does not start with '%s'", err,
		      want);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

START_TEST(test_env_cross_heartbeat)
{
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "";

	setenv("RK_HEARTBEAT_MS", "1000", 1);
	setenv("RK_PEER_TIMEOUT_MS", "1000", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_PEER_TIMEOUT_MS=1000: must be greater than RK_HEARTBEAT_MS=1000");
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);

	/* against the default peer timeout (5000 ms) */
	unsetenv("RK_PEER_TIMEOUT_MS");
	setenv("RK_HEARTBEAT_MS", "6000", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_PEER_TIMEOUT_MS"), "%s", err);

	setenv("RK_PEER_TIMEOUT_MS", "6001", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(T(&c)->heartbeat_ns, 6000000000ull);
	ck_assert_uint_eq(c.peer_timeout_ns, 6001000000ull);
}
END_TEST

START_TEST(test_env_cross_rank)
{
	struct rk_config c = defaults(), d = defaults();
	char err[1024] = "";

	setenv("RK_RANK", "4", 1);
	setenv("RK_WORLD_SIZE", "4", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_RANK=4", 9), "%s", err);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);

	setenv("RK_RANK", "3", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 3);

	/* only checked when both are set */
	c = defaults();
	unsetenv("RK_WORLD_SIZE");
	setenv("RK_RANK", "9", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 9);
	ck_assert_int_eq(c.world_size, 0);
}
END_TEST

/* ---- rk_config_from_launcher_env ----------------------------------------------- */

START_TEST(test_launcher_ompi)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("SLURM_PROCID", "5", 1);
	setenv("SLURM_NTASKS", "6", 1);
	setenv("RANK", "1", 1);
	setenv("WORLD_SIZE", "3", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 2);
	ck_assert_int_eq(c.world_size, 8);
	ck_assert_str_eq(c.leader, "");
}
END_TEST

START_TEST(test_launcher_slurm)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("SLURM_PROCID", "5", 1);
	setenv("SLURM_NTASKS", "6", 1);
	setenv("RANK", "1", 1);
	setenv("WORLD_SIZE", "3", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 5);
	ck_assert_int_eq(c.world_size, 6);
}
END_TEST

START_TEST(test_launcher_torchrun)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("RANK", "1", 1);
	setenv("WORLD_SIZE", "3", 1);
	setenv("MASTER_ADDR", "10.0.0.1", 1);
	setenv("MASTER_PORT", "29500", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_int_eq(c.world_size, 3);
	ck_assert_str_eq(c.leader, "10.0.0.1:29500");

	/* a bare IPv6 address gets brackets */
	c = defaults();
	setenv("MASTER_ADDR", "fd00::2", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "[fd00::2]:29500");
	c = defaults();
	setenv("MASTER_ADDR", "[fd00::3]", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "[fd00::3]:29500");
}
END_TEST

/* RK_* values (already in the config) win over every launcher. */
START_TEST(test_launcher_rk_wins)
{
	struct rk_config c = defaults();
	char err[256] = "";

	c.rank = 0;
	c.world_size = 2;
	strcpy(c.leader, "tcp://mine:1");
	setenv("OMPI_COMM_WORLD_RANK", "1", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("MASTER_ADDR", "other", 1);
	setenv("MASTER_PORT", "2", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 0);
	ck_assert_int_eq(c.world_size, 2);
	ck_assert_str_eq(c.leader, "tcp://mine:1");

	/* per field: the size still comes from the launcher */
	c = defaults();
	c.rank = 1;
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_int_eq(c.world_size, 8);
	ck_assert_str_eq(c.leader, "other:2");
}
END_TEST

START_TEST(test_launcher_none)
{
	struct rk_config c = defaults(), d = defaults();

	ck_assert_int_eq(rk_config_from_launcher_env(&c, NULL, 0), 0);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

static const struct {
	const char *var, *value, *want;	/* want: the start of the message */
} launcher_bad[] = {
	{ "OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_RANK='x': " },
	{ "OMPI_COMM_WORLD_RANK", "", "OMPI_COMM_WORLD_RANK='': " },
	{ "OMPI_COMM_WORLD_RANK", "-1", "OMPI_COMM_WORLD_RANK='-1': " },
	{ "OMPI_COMM_WORLD_SIZE", "0", "OMPI_COMM_WORLD_SIZE='0': " },
	{ "SLURM_PROCID", "1 ", "SLURM_PROCID='1 ': " },
	{ "SLURM_NTASKS", "70000", "SLURM_NTASKS='70000': " },
	{ "RANK", "one", "RANK='one': " },
	{ "WORLD_SIZE", "4x", "WORLD_SIZE='4x': " },
	{ "MASTER_PORT", "abc", "MASTER_PORT='abc': " },
	{ "MASTER_PORT", "0", "MASTER_PORT='0': " },
	{ "MASTER_PORT", "65536", "MASTER_PORT='65536': " },
	{ "MASTER_ADDR", "bad host", "MASTER_ADDR='bad host': " },
	{ "MASTER_ADDR", "", "MASTER_ADDR='': " },
	{ "MASTER_ADDR", "h:1", "MASTER_ADDR='h:1': " },
};

START_TEST(test_launcher_bad)
{
	struct rk_config c = defaults(), d = defaults();
	char err[256] = "";

	/* a valid torchrun environment, then one variable spoiled */
	setenv("RANK", "0", 1);
	setenv("WORLD_SIZE", "2", 1);
	setenv("MASTER_ADDR", "h", 1);
	setenv("MASTER_PORT", "1", 1);
	setenv(launcher_bad[_i].var, launcher_bad[_i].value, 1);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, launcher_bad[_i].want, strlen(launcher_bad[_i].want)),
		      "'%s' does not start with '%s'", err, launcher_bad[_i].want);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

START_TEST(test_launcher_missing_port)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("MASTER_ADDR", "h", 1);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "MASTER_PORT"), "%s", err);
	ck_assert_str_eq(c.leader, "");
}
END_TEST

START_TEST(test_launcher_rank_range)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("SLURM_PROCID", "4", 1);
	setenv("SLURM_NTASKS", "4", 1);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "SLURM_PROCID=4", 14), "%s", err);
	ck_assert_int_eq(c.rank, -1);

	/* the world size from the launcher checks a rank from RK_RANK */
	c = defaults();
	c.rank = 7;
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_RANK=7", 9), "%s", err);
}
END_TEST

/* ---- addresses and helpers ------------------------------------------------------ */

static const struct {
	const char *in, *scheme, *host;
	unsigned int port;
	const char *query;
} addr_good[] = {
	{ "h:1", "tcp", "h", 1, "" },
	{ "localhost:29500", "tcp", "localhost", 29500, "" },
	{ "tcp://10.0.0.1:65535", "tcp", "10.0.0.1", 65535, "" },
	{ "roce://192.168.1.2:7000?dev=rxe0&gid=1", "roce", "192.168.1.2", 7000,
	  "dev=rxe0&gid=1" },
	{ "roce://n1:7000", "roce", "n1", 7000, "" },
	{ "[::1]:80", "tcp", "::1", 80, "" },
	{ "tcp://[fe80::1%eth0]:80", "tcp", "fe80::1%eth0", 80, "" },
	{ "roce://[fd00::1]:9?dev=mlx5_0", "roce", "fd00::1", 9, "dev=mlx5_0" },
	{ "node-1.cluster_a.local:0080", "tcp", "node-1.cluster_a.local", 80, "" },
	{ "tcp://h:1?k=v", "tcp", "h", 1, "k=v" },
	{ "shm://127.0.0.1:29500", "shm", "127.0.0.1", 29500, "" },
};

START_TEST(test_addr_good)
{
	struct rk__addr a;

	memset(&a, 0xa5, sizeof(a));
	ck_assert_msg(rk__addr_parse(addr_good[_i].in, &a) == 0, "'%s' refused",
		      addr_good[_i].in);
	ck_assert_str_eq(a.scheme, addr_good[_i].scheme);
	ck_assert_str_eq(a.host, addr_good[_i].host);
	ck_assert_uint_eq(a.port, addr_good[_i].port);
	ck_assert_str_eq(a.query, addr_good[_i].query);
}
END_TEST

START_TEST(test_addr_bad)
{
	struct rk__addr a, b;
	size_t i;
	int n = 0;

	memset(&a, 0x5a, sizeof(a));
	b = a;
	for (i = 0; i < ARRAY_SIZE(bad); i++) {
		if (strcmp(bad[i].name, "RK_LEADER"))
			continue;
		ck_assert_msg(rk__addr_parse(bad[i].value, &a) == -RK_ECONFIG, "'%s' accepted",
			      bad[i].value);
		ck_assert(memcmp(&a, &b, sizeof(a)) == 0);
		n++;
	}
	for (i = 0; i < ARRAY_SIZE(generic_bad); i++)
		ck_assert_int_eq(rk__addr_parse(generic_bad[i], &a), -RK_ECONFIG);
	ck_assert_int_eq(rk__addr_parse(NULL, &a), -RK_ECONFIG);
	ck_assert_int_gt(n, 20);
}
END_TEST

/* The host and query buffers' limits, and RK_LEADER through rk_config_set(). */
START_TEST(test_addr_lengths)
{
	struct rk_config c = defaults();
	struct rk__addr a;
	char s[512];

	memset(s, 'h', 127);
	strcpy(s + 127, ":80");
	ck_assert_int_eq(rk__addr_parse(s, &a), 0);
	ck_assert_uint_eq(strlen(a.host), 127);
	memset(s, 'h', 128);
	strcpy(s + 128, ":80");
	ck_assert_int_eq(rk__addr_parse(s, &a), -RK_ECONFIG);
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", s, NULL, 0), -RK_ECONFIG);

	strcpy(s, "roce://");
	memset(s + 7, 'a', 127);
	strcpy(s + 134, ":65535?");
	memset(s + 141, 'q', 95);
	s[236] = '\0';
	ck_assert_int_eq(rk__addr_parse(s, &a), 0);
	ck_assert_uint_eq(strlen(a.query), 95);
	/* the parser splits it; the knob refuses a query that is not dev=/gid= */
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", s, NULL, 0), -RK_ECONFIG);
	memcpy(s + 141, "dev=", 4);
	memset(s + 145, 'd', 63);
	memcpy(s + 208, "&gid=255&dev=a&gid=", 19);
	memset(s + 227, '9', 9);
	s[236] = '\0';
	ck_assert_int_eq(rk__addr_parse(s, &a), 0);
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", s, NULL, 0), -RK_ECONFIG); /* gid */
	memcpy(s + 227, "1&dev=abc", 9);
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", s, NULL, 0), 0);
	ck_assert_str_eq(c.leader, s);
	strcpy(s + 236, "q");
	ck_assert_int_eq(rk__addr_parse(s, &a), -RK_ECONFIG);
}
END_TEST

START_TEST(test_parse_u64)
{
	uint64_t v = 77;

	ck_assert_int_eq(rk__parse_u64("0", 0, 10, &v), 0);
	ck_assert_uint_eq(v, 0);
	ck_assert_int_eq(rk__parse_u64("18446744073709551615", 0, UINT64_MAX, &v), 0);
	ck_assert_uint_eq(v, UINT64_MAX);
	ck_assert_int_eq(rk__parse_u64("00042", 42, 42, &v), 0);
	ck_assert_uint_eq(v, 42);
	v = 77;
	ck_assert_int_eq(rk__parse_u64("18446744073709551616", 0, UINT64_MAX, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("99999999999999999999", 0, UINT64_MAX, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64(NULL, 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("+1", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("-1", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64(" 1", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("1 ", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("0x1", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("11", 0, 10, &v), -RK_ECONFIG);
	ck_assert_int_eq(rk__parse_u64("4", 5, 10, &v), -RK_ECONFIG);
	ck_assert_uint_eq(v, 77);	/* untouched on error */
}
END_TEST

START_TEST(test_fnv1a64)
{
	ck_assert_uint_eq(rk__fnv1a64("", 0), 0xcbf29ce484222325ull);
	ck_assert_uint_eq(rk__fnv1a64("a", 1), 0xaf63dc4c8601ec8cull);
	ck_assert_uint_eq(rk__fnv1a64("foobar", 6), 0x85944171f73967e8ull);
}
END_TEST

/* ---- logging ------------------------------------------------------------------ */

struct captured {
	int calls;
	int level;
	int rank;
	char msg[2048];
};

static void capture(int level, int rank, const char *msg, void *arg)
{
	struct captured *c = arg;

	c->calls++;
	c->level = level;
	c->rank = rank;
	snprintf(c->msg, sizeof(c->msg), "%s", msg);
	errno = EBADF;		/* rk__log must not leak this */
}

static void log_setup(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
}

static void log_teardown(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
	rk__log_set_time(false);
}

START_TEST(test_log_handler)
{
	struct captured c = { 0 };

	rk_log_set_handler(capture, &c);
	rk__log(RK_LOG_ERROR, 5, "link %d: %s", 3, "reset");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.level, RK_LOG_ERROR);
	ck_assert_int_eq(c.rank, 5);
	ck_assert_str_eq(c.msg, "link 3: reset");

	rk__warn(-1, "no rank yet\n");		/* a trailing newline is dropped */
	ck_assert_int_eq(c.calls, 2);
	ck_assert_int_eq(c.level, RK_LOG_WARN);
	ck_assert_int_eq(c.rank, -1);
	ck_assert_str_eq(c.msg, "no rank yet");

	rk__log(RK_LOG_WARN, 0, "%s", "");
	ck_assert_int_eq(c.calls, 3);
	ck_assert_str_eq(c.msg, "");
}
END_TEST

START_TEST(test_log_threshold)
{
	struct captured c = { 0 };

	rk_log_set_handler(capture, &c);
	ck_assert_int_eq(rk__log_level(), RK_LOG_WARN);
	rk__info(1, "dropped");
	rk__dbg(1, "dropped");
	ck_assert_int_eq(c.calls, 0);
	rk__warn(1, "kept");
	ck_assert_int_eq(c.calls, 1);

	rk__log_set_level(RK_LOG_ERROR);
	rk__warn(1, "dropped");
	ck_assert_int_eq(c.calls, 1);
	rk__err(1, "kept");
	ck_assert_int_eq(c.calls, 2);

	rk__log_set_level(RK_LOG_DEBUG);
	rk__dbg(2, "d%d", 4);
	ck_assert_int_eq(c.calls, 3);
	ck_assert_int_eq(c.level, RK_LOG_DEBUG);
	ck_assert_str_eq(c.msg, "d4");

	/* out-of-range levels clamp */
	rk__log_set_level(99);
	ck_assert_int_eq(rk__log_level(), RK_LOG_DEBUG);
	rk__log_set_level(-5);
	ck_assert_int_eq(rk__log_level(), RK_LOG_ERROR);
}
END_TEST

/* Run @fn with stderr on a pipe and return what it wrote (malloc'd). */
static char *capture_stderr(void (*fn)(void))
{
	int fds[2], saved;
	char *buf = calloc(1, 8192);
	ssize_t n;
	size_t len = 0;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pipe(fds), 0);
	saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fds[1], STDERR_FILENO), 0);
	close(fds[1]);
	fn();
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);	/* closes the pipe's write end */
	close(saved);
	while ((n = read(fds[0], buf + len, 8191 - len)) > 0)
		len += (size_t)n;
	close(fds[0]);
	return buf;
}

static void log_hello(void)
{
	rk__warn(3, "hello");
}

static void log_two(void)
{
	rk__err(-1, "x %d", 5);
	rk__info(0, "dropped");
	rk__warn(65535, "%s", "last");
}

static void log_errno(void)
{
	errno = EAGAIN;
	rk__warn(0, "y");
	ck_assert_int_eq(errno, EAGAIN);
}

static void log_long(void)
{
	char big[5000];

	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	rk__warn(1, "%s", big);
}

START_TEST(test_log_errno)
{
	struct captured c = { 0 };
	int saved, full, ret;
	char *out;

	rk_log_set_handler(capture, &c);
	errno = EAGAIN;
	rk__warn(0, "x");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(errno, EAGAIN);
	rk_log_set_handler(NULL, NULL);
	out = capture_stderr(log_errno);
	ck_assert_str_eq(out, "rankrt[r0] warn: y\n");
	free(out);

	/* a failing write (ENOSPC) does not leak either */
	saved = dup(STDERR_FILENO);
	full = open("/dev/full", O_WRONLY);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(full, 0);
	ck_assert_int_ge(dup2(full, STDERR_FILENO), 0);
	errno = EAGAIN;
	rk__warn(0, "z");
	ret = errno;
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(full);
	ck_assert_int_eq(ret, EAGAIN);
}
END_TEST

START_TEST(test_log_stderr)
{
	char *out = capture_stderr(log_hello);

	ck_assert_str_eq(out, "rankrt[r3] warn: hello\n");
	free(out);
	out = capture_stderr(log_two);
	ck_assert_str_eq(out, "rankrt[-] error: x 5\nrankrt[r65535] warn: last\n");
	free(out);
}
END_TEST

START_TEST(test_log_truncate)
{
	char *out = capture_stderr(log_long);
	size_t n = strlen(out);

	ck_assert_uint_eq(n, 1024);
	ck_assert(!strncmp(out, "rankrt[r1] warn: zzz", 20));
	ck_assert_str_eq(out + n - 5, "z...\n");
	ck_assert(strchr(out, '\n') == out + n - 1);
	free(out);
}
END_TEST

static void log_app(void)
{
	rk_log(RK_LOG_WARN, 2, "rk-serve", "request %d done", 7);
	rk_log(RK_LOG_INFO, 2, "rk-serve", "dropped");
	rk_log(RK_LOG_ERROR, -1, NULL, "no tag");
}

/* rk_log(): an application's lines, its tag, the threshold, the handler. */
START_TEST(test_log_app)
{
	struct captured c = { 0 };
	char *out = capture_stderr(log_app);

	ck_assert_str_eq(out, "rk-serve[r2] warn: request 7 done\nrankrt[-] error: no tag\n");
	free(out);
	rk_log_set_handler(capture, &c);
	rk_log(RK_LOG_WARN, 4, "app", "x%s", "y");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.rank, 4);
	ck_assert_str_eq(c.msg, "xy");
}
END_TEST

static void log_timed(void)
{
	rk__warn(1, "timed");
}

/* RK_LOG_TIME: "YYYY-MM-DDTHH:MM:SS.uuuuuuZ " before the tag, the handler gets the message alone. */
START_TEST(test_log_time)
{
	struct captured c = { 0 };
	struct rk_config cfg = defaults();
	char err[256] = "", *out;
	int Y, M, D, h, m, sec, us, n = 0;
	time_t before = time(NULL);

	setenv("RK_LOG_TIME", "1", 1);
	ck_assert_msg(rk_config_from_env(&cfg, err, sizeof(err)) == 0, "%s", err);
	unsetenv("RK_LOG_TIME");
	ck_assert(cfg.log_time);
	out = capture_stderr(log_timed);
	ck_assert_int_eq(sscanf(out, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ %n", &Y, &M, &D, &h, &m, &sec,
				&us, &n), 7);
	ck_assert_int_eq(n, 28);
	ck_assert_str_eq(out + n, "rankrt[r1] warn: timed\n");
	ck_assert_int_ge(Y, 1900 + gmtime(&before)->tm_year);
	free(out);
	rk_log_set_handler(capture, &c);
	rk__warn(1, "alone");
	ck_assert_str_eq(c.msg, "alone");
	rk_log_set_handler(NULL, NULL);

	/* and off again: the next from_env without it applies the default */
	ck_assert_int_eq(rk_config_set(&cfg, "RK_LOG_TIME", "0", NULL, 0), 0);
	ck_assert_msg(rk_config_from_env(&cfg, err, sizeof(err)) == 0, "%s", err);
	out = capture_stderr(log_timed);
	ck_assert_str_eq(out, "rankrt[r1] warn: timed\n");
	free(out);
}
END_TEST

/* NULL restores the default stderr path. */
START_TEST(test_log_handler_reset)
{
	struct captured c = { 0 };
	char *out;

	rk_log_set_handler(capture, &c);
	rk_log_set_handler(NULL, NULL);
	out = capture_stderr(log_hello);
	ck_assert_str_eq(out, "rankrt[r3] warn: hello\n");
	ck_assert_int_eq(c.calls, 0);
	free(out);
}
END_TEST

/* ---- the secret, RK_AUTH, and the bounds between knobs ---------------------- */

#define KEY64 "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

/* A file of @len bytes of @fill (and a newline if @nl) with @mode; its path in @path. */
static void key_file(char *path, size_t cap, mode_t mode, size_t len, char fill, bool nl)
{
	char *buf = malloc(len + 1);
	int fd;

	ck_assert_ptr_nonnull(buf);
	memset(buf, fill, len);
	buf[len] = '\n';
	snprintf(path, cap, "/tmp/check_config-key-%d-XXXXXX", (int)getpid());
	fd = mkstemp(path);
	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, buf, len + nl), (ssize_t)(len + nl));
	ck_assert_int_eq(fchmod(fd, mode), 0);
	close(fd);
	free(buf);
}

START_TEST(test_secret_file_good)
{
	struct rk_config c = defaults();
	char path[128], err[512] = "", *out;

	key_file(path, sizeof(path), 0600, 64, 'k', true);
	ck_assert_msg(rk_config_set(&c, "RK_SECRET_FILE", path, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(c.secret_len, 64);	/* the newline is not the key's */
	ck_assert_int_eq(c.secret[0], 'k');
	ck_assert_int_eq(c.secret[63], 'k');
	out = print_cfg(&c);
	ck_assert_msg(has_line(out, "# RK_SECRET_FILE: a secret of 64 bytes is set"), "%s", out);
	ck_assert_ptr_null(strstr(out, "kkkk"));	/* never a byte of it */
	ck_assert_ptr_null(strstr(out, path));
	free(out);
	unlink(path);

	/* 0400 is fine too, and the short name; exactly RK_SECRET_MIN bytes, no newline */
	key_file(path, sizeof(path), 0400, RK_SECRET_MIN, 'x', false);
	ck_assert_int_eq(rk_config_set(&c, "secret_file", path, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.secret_len, RK_SECRET_MIN);
	unlink(path);

	/* the environment reads it too */
	key_file(path, sizeof(path), 0600, RK_SECRET_MAX, 'y', true);
	setenv("RK_SECRET_FILE", path, 1);
	c = defaults();
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_uint_eq(c.secret_len, RK_SECRET_MAX);
	unlink(path);
}
END_TEST

static const struct bad_key {
	const char *name;
	mode_t mode;
	size_t len;
	const char *want;	/* in the message */
} bad_keys[] = {
	{ "group-readable", 0640, 64, "mode 0640 lets group or others" },
	{ "world-readable", 0604, 64, "mode 0604 lets group or others" },
	{ "group-writable", 0620, 64, "mode 0620 lets group or others" },
	{ "too short", 0600, RK_SECRET_MIN - 1, "holds 31 bytes, a secret needs at least 32" },
	{ "empty", 0600, 0, "holds 0 bytes" },
	{ "too long", 0600, RK_SECRET_MAX + 1, "longer than 512 bytes" },
};

START_TEST(test_secret_file_bad)
{
	const struct bad_key *b = &bad_keys[_i];
	struct rk_config c = defaults(), d = defaults();
	char path[128], err[512] = "";

	key_file(path, sizeof(path), b->mode, b->len, 'S', true);
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", path, err, sizeof(err)),
			 -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_SECRET_FILE='", 16) && strstr(err, path) &&
		      strstr(err, b->want), "%s: %s", b->name, err);
	ck_assert_ptr_null(strstr(err, "SSSS"));
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);

	/* from the environment: refused by name, nothing applied */
	setenv("RK_SECRET_FILE", path, 1);
	setenv("RK_SPIN_US", "7", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_SECRET_FILE") && strstr(err, b->want), "%s", err);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
	unlink(path);
}
END_TEST

START_TEST(test_secret_file_missing)
{
	struct rk_config c = defaults();
	char err[512] = "";

	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", "/nonexistent/rk-key", err,
				       sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "'/nonexistent/rk-key': cannot open it"), "%s", err);
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", "/tmp", err, sizeof(err)),
			 -RK_ECONFIG);
	ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", "", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_int_eq(c.secret_len, 0);
}
END_TEST

START_TEST(test_secret_set)
{
	struct rk_config c = defaults();
	char key[RK_SECRET_MAX + 1];

	memset(key, 'z', sizeof(key));
	ck_assert_int_eq(rk_config_set_secret(&c, key, RK_SECRET_MIN - 1), -RK_ECONFIG);
	ck_assert_int_eq(rk_config_set_secret(&c, key, RK_SECRET_MAX + 1), -RK_ECONFIG);
	ck_assert_int_eq(rk_config_set_secret(&c, NULL, 40), -RK_ECONFIG);
	ck_assert_uint_eq(c.secret_len, 0);
	ck_assert_int_eq(rk_config_set_secret(&c, key, 40), 0);
	ck_assert_uint_eq(c.secret_len, 40);
	ck_assert_int_eq(rk_config_set_secret(&c, NULL, 0), 0);
	ck_assert_uint_eq(c.secret_len, 0);
	ck_assert_int_eq(c.secret[0], 0);	/* wiped */
}
END_TEST

START_TEST(test_auth_knob)
{
	struct rk_config c = defaults();
	char path[128], err[512] = "";

	ck_assert_int_eq(c.auth, RK_AUTH_AUTO);
	ck_assert_int_eq(rk_config_set(&c, "RK_AUTH", "on", err, sizeof(err)), 0);
	ck_assert_int_eq(c.auth, RK_AUTH_ON);
	ck_assert_int_eq(rk_config_set(&c, "auth", "off", err, sizeof(err)), 0);
	ck_assert_int_eq(c.auth, RK_AUTH_OFF);
	ck_assert_int_eq(rk_config_set(&c, "RK_AUTH", "yes", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_AUTH='yes': not one of auto, on, off");

	/* off and a secret contradict each other: refused, naming both */
	key_file(path, sizeof(path), 0600, 64, 'k', true);
	setenv("RK_AUTH", "off", 1);
	setenv("RK_SECRET_FILE", path, 1);
	c = defaults();
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_AUTH=off") && strstr(err, "RK_SECRET_FILE"), "%s", err);
	unlink(path);
}
END_TEST

START_TEST(test_resident_knob)
{
	struct rk_config c = defaults();
	char err[512] = "";

	ck_assert_int_eq(T(&c)->resident, RK_RESIDENT_AUTO);
	ck_assert_int_eq(rk_config_set(&c, "RK_RESIDENT", "off", err, sizeof(err)), 0);
	ck_assert_int_eq(T(&c)->resident, RK_RESIDENT_OFF);
	ck_assert_int_eq(rk_config_set(&c, "resident", "on", err, sizeof(err)), 0);
	ck_assert_int_eq(T(&c)->resident, RK_RESIDENT_ON);
	ck_assert_int_eq(rk_config_set(&c, "RK_RESIDENT", "1", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_RESIDENT='1': not one of auto, on, off");
	ck_assert_int_eq(T(&c)->resident, RK_RESIDENT_ON);
	setenv("RK_RESIDENT", "off", 1);
	c = defaults();
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), 0);
	ck_assert_int_eq(T(&c)->resident, RK_RESIDENT_OFF);
	unsetenv("RK_RESIDENT");
}
END_TEST

/* RK_SHM: auto, on, off; off contradicts an shm:// leader. */
START_TEST(test_shm_knob)
{
	struct rk_config c = defaults();
	char err[512] = "";

	ck_assert_int_eq(c.shm, RK_SHM_AUTO);
	ck_assert_int_eq(rk_config_set(&c, "RK_SHM", "on", err, sizeof(err)), 0);
	ck_assert_int_eq(c.shm, RK_SHM_ON);
	ck_assert_int_eq(rk_config_set(&c, "shm", "off", err, sizeof(err)), 0);
	ck_assert_int_eq(c.shm, RK_SHM_OFF);
	ck_assert_int_eq(rk_config_set(&c, "RK_SHM", "1", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_SHM='1': not one of auto, on, off");
	ck_assert_int_eq(c.shm, RK_SHM_OFF);	/* untouched by the refusal */

	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", "shm://127.0.0.1:9", err, sizeof(err)), 0);
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_SHM=off") && strstr(err, "shm://127.0.0.1:9"), "%s", err);
	c.shm = RK_SHM_ON;
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), 0);
	c.shm = (enum rk_shm_mode)3;
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_SHM=3"), "%s", err);
	/* shm:// takes no query, as tcp:// */
	ck_assert_int_eq(rk_config_set(&c, "RK_LEADER", "shm://h:1?dev=x", err, sizeof(err)),
			 -RK_ECONFIG);
}
END_TEST

START_TEST(test_bounds_between_knobs)
{
	struct rk_config c = defaults();
	char err[512] = "";
	long ncpu = sysconf(_SC_NPROCESSORS_CONF);
	char cpu[32];

	/* a receive pool of 32 GiB: refused by name before anything is allocated */
	setenv("RK_RX_BUF_COUNT", "32768", 1);
	setenv("RK_RX_BUF_SIZE", "1048576", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_RX_BUF_COUNT=32768 x RK_RX_BUF_SIZE=1048576") &&
		      strstr(err, "32768 MiB"), "%s", err);
	T(&c)->rx_buf_count = 32768;
	T(&c)->rx_buf_size = 1u << 20;
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), -RK_ECONFIG);
	T(&c)->rx_buf_count = 1024;		/* 1 GiB: the most a loop may take */
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), 0);
	unsetenv("RK_RX_BUF_COUNT");
	unsetenv("RK_RX_BUF_SIZE");

	/* an SQPOLL CPU this machine does not have */
	c = defaults();
	snprintf(cpu, sizeof(cpu), "%ld", ncpu);
	setenv("RK_SQPOLL_CPU", cpu, 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_SQPOLL_CPU=", 14) && strstr(err, "this machine has CPUs"),
		      "%s", err);
	snprintf(cpu, sizeof(cpu), "%ld", ncpu - 1);
	setenv("RK_SQPOLL_CPU", cpu, 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(T(&c)->wait.sqpoll_cpu, ncpu - 1);
	unsetenv("RK_SQPOLL_CPU");

	/* a hand-filled config is held to the same rules at rk_loop_create() */
	c = defaults();
	T(&c)->rx_buf_count = 32768;
	T(&c)->rx_buf_size = 1u << 20;
	{
		struct rk_loop *loop;

		ck_assert_int_eq(rk_loop_create(&c, &loop), -RK_ECONFIG);
	}
	c = defaults();
	c.secret_len = 5;
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), -RK_ECONFIG);
	c = defaults();
	T(&c)->max_pending = 0;
	ck_assert_int_eq(rk__config_check(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_MAX_PENDING=0: a leader must admit at least one connection");
}
END_TEST

/* ---- the suite ---------------------------------------------------------------- */

static TCase *tcase(Suite *s, const char *name)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, TIMEOUT_S);
	suite_add_tcase(s, tc);
	return tc;
}

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = tcase(s, "defaults");
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_wait_mode_name);
	tcase_add_test(tc, test_print_defaults);
	tcase_add_test(tc, test_print_roundtrip);

	tc = tcase(s, "set");
	tcase_add_loop_test(tc, test_set_good, 0, ARRAY_SIZE(good));
	tcase_add_loop_test(tc, test_set_bad_generic, 0,
			    ARRAY_SIZE(all_knobs) * ARRAY_SIZE(generic_bad));
	tcase_add_loop_test(tc, test_set_bad, 0, ARRAY_SIZE(bad));
	tcase_add_loop_test(tc, test_set_bad_query, 0, ARRAY_SIZE(bad_query));
	tcase_add_test(tc, test_set_units);
	tcase_add_test(tc, test_set_messages);
	tcase_add_loop_test(tc, test_tier_knob, 0, N_STABLE + N_TUNING);
	tcase_add_test(tc, test_tier_count);
	tcase_add_test(tc, test_create_destroy);

	tc = tcase(s, "env");
	tcase_add_checked_fixture(tc, env_setup, env_teardown);
	tcase_add_test(tc, test_env_apply);
	tcase_add_test(tc, test_env_empty);
	tcase_add_test(tc, test_env_unknown);
	tcase_add_test(tc, test_env_ignored_prefixes);
	tcase_add_test(tc, test_env_bad_value);
	tcase_add_test(tc, test_env_tiers);
	tcase_add_loop_test(tc, test_env_tuning_bad, 0, N_TUNING);
	tcase_add_test(tc, test_env_cross_heartbeat);
	tcase_add_test(tc, test_env_cross_rank);

	tc = tcase(s, "secret");
	tcase_add_checked_fixture(tc, env_setup, env_teardown);
	tcase_add_test(tc, test_secret_file_good);
	tcase_add_loop_test(tc, test_secret_file_bad, 0, ARRAY_SIZE(bad_keys));
	tcase_add_test(tc, test_secret_file_missing);
	tcase_add_test(tc, test_secret_set);
	tcase_add_test(tc, test_auth_knob);
	tcase_add_test(tc, test_resident_knob);
	tcase_add_test(tc, test_shm_knob);
	tcase_add_test(tc, test_bounds_between_knobs);

	tc = tcase(s, "launcher");
	tcase_add_checked_fixture(tc, env_setup, env_teardown);
	tcase_add_test(tc, test_launcher_ompi);
	tcase_add_test(tc, test_launcher_slurm);
	tcase_add_test(tc, test_launcher_torchrun);
	tcase_add_test(tc, test_launcher_rk_wins);
	tcase_add_test(tc, test_launcher_none);
	tcase_add_loop_test(tc, test_launcher_bad, 0, ARRAY_SIZE(launcher_bad));
	tcase_add_test(tc, test_launcher_missing_port);
	tcase_add_test(tc, test_launcher_rank_range);

	tc = tcase(s, "addr");
	tcase_add_loop_test(tc, test_addr_good, 0, ARRAY_SIZE(addr_good));
	tcase_add_test(tc, test_addr_bad);
	tcase_add_test(tc, test_addr_lengths);
	tcase_add_test(tc, test_parse_u64);
	tcase_add_test(tc, test_fnv1a64);

	tc = tcase(s, "log");
	tcase_add_checked_fixture(tc, log_setup, log_teardown);
	tcase_add_test(tc, test_log_handler);
	tcase_add_test(tc, test_log_threshold);
	tcase_add_test(tc, test_log_errno);
	tcase_add_test(tc, test_log_stderr);
	tcase_add_test(tc, test_log_truncate);
	tcase_add_test(tc, test_log_handler_reset);
	tcase_add_test(tc, test_log_app);
	tcase_add_test(tc, test_log_time);
	return s;
}

int main(void)
{
	SRunner *sr = srunner_create(config_suite());
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
