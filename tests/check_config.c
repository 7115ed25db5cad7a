// SPDX-License-Identifier: MIT
/*
 * check_config: the RK_* knob table and strict parsing: the defaults and
 * rk_config_print(), rk_config_set() with good and malformed values, names,
 * units and messages, the stable and tuning tiers, address parsing and the
 * small helpers. The environment and launcher readers and the secret are
 * check_config_env's, logging check_config_log's.
 */
#include "config_test.h"

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
	ck_assert(!T(&c)->ring.sqpoll);
	ck_assert(!T(&c)->ring.sqpoll_auto);
	ck_assert(T(&c)->wait.learn);
	ck_assert_uint_eq(T(&c)->wait.learn_spin_min_ns, RK_DEF_LEARN_SPIN_MIN_US * 1000ull);
	ck_assert_uint_eq(T(&c)->wait.poll_ns, 0);	/* a benchmark's baseline: off */
	ck_assert_uint_eq(T(&c)->wait.poll_for_ns, 0);
	ck_assert_int_eq(T(&c)->ring.sqpoll_cpu, -1);
	ck_assert(T(&c)->ring.coop_taskrun);
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
		"RK_PORT=18000\n"
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
		"# RK_LOCAL_RANK unset\n"
		"RK_RANKS_PER_POD=1\n"
		"RK_SPIN_YIELD=64\n"
		"RK_PREDICT=1\n"
		"RK_PREDICT_MARGIN_US=20\n"
		"RK_PREDICT_MIN_US=20\n"
		"RK_LEARN=1\n"
		"RK_LEARN_SPIN_MIN_US=1000\n"
		"RK_POLL_US=0\n"
		"RK_POLL_FOR_MS=0\n"
		"RK_SQPOLL=0\n"
		"RK_SQPOLL_CPU=-1\n"
		"RK_COOP_TASKRUN=1\n"
		"RK_DEFER_TASKRUN=0\n"
		"RK_RING_ENTRIES=256\n"
		"RK_RX_BUF_SIZE=16384\n"
		"RK_RX_BUF_COUNT=64\n"
		"RK_HEARTBEAT_MS=1000\n"
		"RK_HANDSHAKE_MS=2000\n"
		"RK_ROUND_TIMEOUT_MS=10000\n"
		"RK_RESIDENT=auto\n"
		"RK_MAX_PENDING=1024\n"
		"RK_REFUSED_LOG_MS=10000\n"
		"RK_FRAME_AUTH=0\n"
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
		{ "RK_POLL_US", "50" }, { "RK_POLL_FOR_MS", "50" },
		{ "RK_COOP_TASKRUN", "off" }, { "RK_RING_ENTRIES", "1024" },
		{ "RK_RX_BUF_SIZE", "65536" }, { "RK_RX_BUF_COUNT", "128" },
		{ "RK_MAX_FRAME", "8192" }, { "RK_TX_LIMIT", "1048576" },
		{ "RK_HEARTBEAT_MS", "100" }, { "RK_PEER_TIMEOUT_MS", "1000" },
		{ "RK_CONNECT_TIMEOUT_MS", "2000" }, { "RK_HANDSHAKE_MS", "300" },
		{ "RK_LOG", "debug" }, { "RK_LOG_TIME", "on" }, { "RK_SIGNALS", "true" },
		{ "RK_RDMA_DEV", "mlx5_0" }, { "RK_RDMA_GID", "3" }, { "RK_PORT", "29501" },
		{ "RK_LOCAL_RANK", "2" }, { "RK_RANKS_PER_POD", "8" },
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
	{ "RK_PORT", "1", "RK_PORT=1" },
	{ "port", "65535", "RK_PORT=65535" },
	{ "RK_LOCAL_RANK", "0", "RK_LOCAL_RANK=0" },
	{ "RK_RANKS_PER_POD", "256", "RK_RANKS_PER_POD=256" },
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
	{ "RK_POLL_US", "0", "RK_POLL_US=0" },
	{ "RK_POLL_US", "1000000", "RK_POLL_US=1000000" },
	{ "poll_us", "50", "RK_POLL_US=50" },
	{ "RK_POLL_FOR_MS", "0", "RK_POLL_FOR_MS=0" },
	{ "RK_POLL_FOR_MS", "3600000", "RK_POLL_FOR_MS=3600000" },
	{ "poll_for_ms", "50", "RK_POLL_FOR_MS=50" },
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
	"RK_LEARN_SPIN_MIN_US", "RK_POLL_US", "RK_POLL_FOR_MS",
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
	{ "RK_PORT", "0" }, { "RK_PORT", "65536" }, { "RK_PORT", "29500x" },
	{ "RK_LOCAL_RANK", "-1" }, { "RK_LOCAL_RANK", "65536" },
	{ "RK_RANKS_PER_POD", "0" }, { "RK_RANKS_PER_POD", "257" },
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
	{ "RK_POLL_US", "1000001" }, { "RK_POLL_US", "50us" }, { "RK_POLL_US", "off" },
	{ "RK_POLL_FOR_MS", "3600001" }, { "RK_POLL_FOR_MS", "50ms" },
	{ "RK_POLL_FOR_MS", "0.5" },
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
	ck_assert_int_eq(rk_config_set(&c, "RK_POLL_US", "50", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->wait.poll_ns, 50000);
	ck_assert_int_eq(rk_config_set(&c, "poll_for_ms", "50", NULL, 0), 0);
	ck_assert_uint_eq(T(&c)->wait.poll_for_ns, 50000000);
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
	ck_assert_int_eq(T(&c)->ring.sqpoll_cpu, 0);
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
	ck_assert_uint_eq(N_STABLE, 19);
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

static Suite *config_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = rk_tcase(s, "defaults", TIMEOUT_S, NULL, NULL);
	tcase_add_test(tc, test_defaults);
	tcase_add_test(tc, test_wait_mode_name);
	tcase_add_test(tc, test_print_defaults);
	tcase_add_test(tc, test_print_roundtrip);

	tc = rk_tcase(s, "set", TIMEOUT_S, NULL, NULL);
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

	tc = rk_tcase(s, "addr", TIMEOUT_S, NULL, NULL);
	tcase_add_loop_test(tc, test_addr_good, 0, ARRAY_SIZE(addr_good));
	tcase_add_test(tc, test_addr_bad);
	tcase_add_test(tc, test_addr_lengths);
	tcase_add_test(tc, test_parse_u64);
	tcase_add_test(tc, test_fnv1a64);
	return s;
}

int main(void)
{
	return rk_check_run(config_suite());
}
