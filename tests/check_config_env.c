// SPDX-License-Identifier: MIT
/*
 * check_config_env: rk_config_from_env() and rk_config_from_launcher_env()
 * (its precedence table: torchrun, LeaderWorkerSet, PMIx, Open MPI, Slurm
 * with its host lists, RANK/WORLD_SIZE, RK_* winning over them and RK_PORT
 * instead of MASTER_PORT), the secret file,
 * RK_AUTH and the bounds between knobs. Every test starts and ends with no
 * RK_* or launcher variable in the environment (a checked fixture), so they
 * stay isolated with CK_FORK=no too (valgrind runs).
 */
#define _GNU_SOURCE	/* memfd_create() */
#include <sys/mman.h>

#include "config_test.h"

extern char **environ;

/* Remove every variable a test could depend on: RK_*, and the launchers'. */
static void scrub_env(void)
{
	static const char *const prefix[] = {
		"RK_", "OMPI_COMM_WORLD_", "SLURM_", "TORCHELASTIC_", "LWS_", "PMIX_",
	};
	static const char *const launcher[] = { "RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT" };
	char name[256];
	size_t i;
	int again = 1;

	while (again) {
		char **e;

		again = 0;
		for (e = environ; e && *e && !again; e++) {
			const char *eq = strchr(*e, '=');
			size_t n = eq ? (size_t)(eq - *e) : strlen(*e);

			for (i = 0; i < ARRAY_SIZE(prefix) && !again; i++) {
				if (strncmp(*e, prefix[i], strlen(prefix[i])) || n >= sizeof(name))
					continue;
				memcpy(name, *e, n);
				name[n] = '\0';
				unsetenv(name);		/* environ changed: walk it again */
				again = 1;
			}
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
	/* MASTER_PORT is torch's TCPStore's: the leader takes RK_PORT's */
	ck_assert_str_eq(c.leader, "10.0.0.1:18000");

	/* a bare IPv6 address gets brackets */
	c = defaults();
	setenv("MASTER_ADDR", "fd00::2", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "[fd00::2]:18000");
	c = defaults();
	setenv("MASTER_ADDR", "[fd00::3]", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "[fd00::3]:18000");
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

	/* per field: the size still comes from the launcher, and the leader only
	 * from the same launcher (Open MPI names none; MASTER_ADDR is torch's) */
	c = defaults();
	c.rank = 1;
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_int_eq(c.world_size, 8);
	ck_assert_str_eq(c.leader, "");
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
	const char *also, *also_value;	/* a variable that makes var's launcher answer */
} launcher_bad[] = {
	{ "OMPI_COMM_WORLD_RANK", "x", "OMPI_COMM_WORLD_RANK='x': " , NULL, NULL },
	{ "OMPI_COMM_WORLD_RANK", "", "OMPI_COMM_WORLD_RANK='': " , NULL, NULL },
	{ "OMPI_COMM_WORLD_RANK", "-1", "OMPI_COMM_WORLD_RANK='-1': " , NULL, NULL },
	{ "OMPI_COMM_WORLD_SIZE", "0", "OMPI_COMM_WORLD_SIZE='0': " , NULL, NULL },
	{ "SLURM_PROCID", "1 ", "SLURM_PROCID='1 ': " , NULL, NULL },
	{ "SLURM_NTASKS", "70000", "SLURM_NTASKS='70000': ", "SLURM_PROCID", "0" },
	{ "SLURM_STEP_NODELIST", "gpu[01-", "SLURM_STEP_NODELIST='gpu[01-': not a Slurm host list",
	  "SLURM_PROCID", "0" },
	{ "SLURM_JOB_NODELIST", "", "SLURM_JOB_NODELIST='': not a Slurm host list", "SLURM_PROCID",
	  "0" },
	{ "RANK", "one", "RANK='one': " , NULL, NULL },
	{ "RANK", "one", "RANK='one': ", "TORCHELASTIC_RUN_ID", "x" },
	{ "WORLD_SIZE", "4x", "WORLD_SIZE='4x': " , NULL, NULL },
	{ "MASTER_ADDR", "bad host", "MASTER_ADDR='bad host': " , NULL, NULL },
	{ "MASTER_ADDR", "", "MASTER_ADDR='': " , NULL, NULL },
	{ "MASTER_ADDR", "h:1", "MASTER_ADDR='h:1': " , NULL, NULL },
	{ "LWS_WORKER_INDEX", "x", "LWS_WORKER_INDEX='x': " , NULL, NULL },
	{ "LWS_WORKER_INDEX", "-1", "LWS_WORKER_INDEX='-1': " , NULL, NULL },
	{ "LWS_GROUP_SIZE", "0", "LWS_GROUP_SIZE='0': " , NULL, NULL },
	{ "LWS_LEADER_ADDRESS", "bad host", "LWS_LEADER_ADDRESS='bad host': " , NULL, NULL },
	{ "LWS_LEADER_ADDRESS", "", "LWS_LEADER_ADDRESS='': " , NULL, NULL },
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
	if (launcher_bad[_i].also)
		setenv(launcher_bad[_i].also, launcher_bad[_i].also_value, 1);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, launcher_bad[_i].want, strlen(launcher_bad[_i].want)),
		      "'%s' does not start with '%s'", err, launcher_bad[_i].want);
	ck_assert(memcmp(&c, &d, sizeof(c)) == 0);
}
END_TEST

/* MASTER_PORT is never read: neither missing nor malformed matters. */
START_TEST(test_launcher_master_port_unused)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("MASTER_ADDR", "h", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "h:18000");
	c = defaults();
	setenv("MASTER_PORT", "abc", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "h:18000");

	/* RK_PORT names the port, from the environment like every knob */
	c = defaults();
	setenv("RK_PORT", "29501", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.port, 29501);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "h:29501");
	setenv("RK_PORT", "0", 1);
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_PORT='0'", 11), "%s", err);
}
END_TEST

/* srun -> torchrun: the worker of RANK=5 WORLD_SIZE=16 is rank 5 of 16, not Slurm's 0 of 2. */
START_TEST(test_launcher_srun_torchrun)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("SLURM_PROCID", "0", 1);
	setenv("SLURM_NTASKS", "2", 1);
	setenv("SLURM_STEP_NODELIST", "node[1-2]", 1);
	setenv("TORCHELASTIC_RUN_ID", "job7", 1);
	setenv("RANK", "5", 1);
	setenv("WORLD_SIZE", "16", 1);
	setenv("MASTER_ADDR", "node1", 1);
	setenv("MASTER_PORT", "29500", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 5);
	ck_assert_int_eq(c.world_size, 16);
	ck_assert_str_eq(c.leader, "node1:18000");
}
END_TEST

/*
 * Every launcher's variables at once, then the answering one's taken away,
 * one by one: the table's order, each launcher answering as a whole. PMIx
 * with no server here is skipped (one log line) for the next.
 */
START_TEST(test_launcher_precedence)
{
	static const struct {
		const char *gone;	/* unset before this step */
		int rank, size;
		const char *leader;
	} steps[] = {
		{ NULL, 5, 16, "m:18000" },			/* torchrun */
		{ "TORCHELASTIC_RUN_ID", 1, 4, "lws-0.lws:18000" },	/* LeaderWorkerSet */
		{ "LWS_WORKER_INDEX", 2, 8, "" },		/* PMIx skipped: Open MPI */
		{ "OMPI_COMM_WORLD_RANK", 3, 6, "s01:18000" },	/* Slurm */
		{ "SLURM_PROCID", 5, 16, "m:18000" },		/* RANK/WORLD_SIZE */
	};
	char err[256] = "";
	size_t i;

	setenv("TORCHELASTIC_RUN_ID", "x", 1);
	setenv("RANK", "5", 1);
	setenv("WORLD_SIZE", "16", 1);
	setenv("MASTER_ADDR", "m", 1);
	setenv("LWS_LEADER_ADDRESS", "lws-0.lws", 1);
	setenv("LWS_GROUP_SIZE", "4", 1);
	setenv("LWS_WORKER_INDEX", "1", 1);
	setenv("PMIX_RANK", "0", 1);
	setenv("PMIX_NAMESPACE", "no-server-here", 1);
	setenv("OMPI_COMM_WORLD_RANK", "2", 1);
	setenv("OMPI_COMM_WORLD_SIZE", "8", 1);
	setenv("SLURM_PROCID", "3", 1);
	setenv("SLURM_NTASKS", "6", 1);
	setenv("SLURM_JOB_NODELIST", "s[01-06]", 1);
	for (i = 0; i < ARRAY_SIZE(steps); i++) {
		struct rk_config c = defaults();

		if (steps[i].gone)
			unsetenv(steps[i].gone);
		if (!strcmp(steps[i].gone ? steps[i].gone : "", "LWS_WORKER_INDEX")) {
			unsetenv("LWS_LEADER_ADDRESS");
			unsetenv("LWS_GROUP_SIZE");
		}
		if (!strcmp(steps[i].gone ? steps[i].gone : "", "OMPI_COMM_WORLD_RANK"))
			unsetenv("OMPI_COMM_WORLD_SIZE");
		ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%zu: %s",
			      i, err);
		ck_assert_msg(c.rank == steps[i].rank && c.world_size == steps[i].size &&
			      !strcmp(c.leader, steps[i].leader), "step %zu: %d/%d '%s'", i,
			      c.rank, c.world_size, c.leader);
	}
}
END_TEST

/* RK_* set every field: no launcher is read, not even a malformed one. */
START_TEST(test_launcher_all_rk)
{
	struct rk_config c = defaults();
	char err[256] = "";

	c.rank = 1;
	c.world_size = 2;
	strcpy(c.leader, "tcp://mine:1");
	setenv("LWS_WORKER_INDEX", "x", 1);
	setenv("PMIX_RANK", "0", 1);
	setenv("PMIX_NAMESPACE", "no-server-here", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_str_eq(c.leader, "tcp://mine:1");
}
END_TEST

/* LeaderWorkerSet: worker index and group size, several ranks per pod. */
START_TEST(test_launcher_lws)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("LWS_LEADER_ADDRESS", "rk-0.rk.default", 1);
	setenv("LWS_GROUP_SIZE", "2", 1);
	setenv("LWS_WORKER_INDEX", "1", 1);
	setenv("LWS_NAME", "rk", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_int_eq(c.world_size, 2);
	ck_assert_str_eq(c.leader, "rk-0.rk.default:18000");

	/* four ranks a pod: rank = worker x 4 + local, size = group x 4 */
	c = defaults();
	setenv("RK_RANKS_PER_POD", "4", 1);
	setenv("RK_LOCAL_RANK", "3", 1);
	setenv("RK_PORT", "18500", 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 7);
	ck_assert_int_eq(c.world_size, 8);
	ck_assert_str_eq(c.leader, "rk-0.rk.default:18500");

	/* the local rank is needed, and must be below the ranks per pod */
	c = defaults();
	ck_assert_int_eq(rk_config_set(&c, "RK_RANKS_PER_POD", "4", NULL, 0), 0);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(strstr(err, "RK_LOCAL_RANK") && strstr(err, "RK_RANKS_PER_POD=4"), "%s",
		      err);
	ck_assert_int_eq(rk_config_set(&c, "RK_LOCAL_RANK", "4", NULL, 0), 0);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_LOCAL_RANK=4: not below RK_RANKS_PER_POD=4", 45), "%s",
		      err);
	c = defaults();
	ck_assert_int_eq(rk_config_set(&c, "RK_LOCAL_RANK", "1", NULL, 0), 0);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "RK_LOCAL_RANK=1: not below RK_RANKS_PER_POD=1", 45), "%s",
		      err);
	c = defaults();
	ck_assert_int_eq(rk_config_set(&c, "RK_RANKS_PER_POD", "256", NULL, 0), 0);
	ck_assert_int_eq(rk_config_set(&c, "RK_LOCAL_RANK", "0", NULL, 0), 0);
	setenv("LWS_GROUP_SIZE", "257", 1);
	ck_assert_int_eq(rk_config_from_launcher_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_msg(!strncmp(err, "LWS_GROUP_SIZE=257 x RK_RANKS_PER_POD=256", 41), "%s",
		      err);
}
END_TEST

/* Slurm: the leader is the first host of the step's node list, else of the job's. */
START_TEST(test_launcher_slurm_leader)
{
	struct rk_config c = defaults();
	char err[256] = "";

	setenv("SLURM_PROCID", "1", 1);
	setenv("SLURM_NTASKS", "8", 1);
	setenv("SLURM_JOB_NODELIST", "cpu3,gpu[01-04,07]", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_str_eq(c.leader, "cpu3:18000");
	c = defaults();
	setenv("SLURM_STEP_NODELIST", "gpu[01-04,07],cpu3", 1);
	ck_assert_msg(rk_config_from_launcher_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.rank, 1);
	ck_assert_int_eq(c.world_size, 8);
	ck_assert_str_eq(c.leader, "gpu01:18000");
}
END_TEST

static const struct {
	const char *list, *first;	/* first NULL: malformed */
} hostlists[] = {
	{ "gpu[01-04,07],cpu3", "gpu01" },
	{ "cpu3,gpu[01-04,07]", "cpu3" },
	{ "gpu[07,01-04]", "gpu07" },
	{ "node[7]", "node7" },
	{ "node[007-010]x", "node007x" },
	{ "rack[2-3]-n[05-06],login1", "rack2-n05" },
	{ "localhost", "localhost" },
	{ "a.b-c_d", "a.b-c_d" },
	{ "10.0.0.1", "10.0.0.1" },
	{ "", NULL },
	{ ",a", NULL },
	{ "gpu[01-", NULL },
	{ "gpu[]", NULL },
	{ "gpu[a-b]", NULL },
	{ "gpu[1-2-3]", NULL },
	{ "gpu[-2]", NULL },
	{ "gpu[1,]", NULL },
	{ "gpu[1[2]]", NULL },
	{ "gpu]", NULL },
	{ "gpu[1]]", NULL },
	{ "[1-2]", "1" },
	{ "bad host", NULL },
};

START_TEST(test_hostlist_first)
{
	char host[128] = "", err[256] = "";
	int ret = rk__hostlist_first("V", hostlists[_i].list, host, sizeof(host), err, sizeof(err));

	if (hostlists[_i].first) {
		ck_assert_msg(ret == 0, "'%s': %s", hostlists[_i].list, err);
		ck_assert_str_eq(host, hostlists[_i].first);
	} else {
		ck_assert_msg(ret == -RK_ECONFIG, "'%s' gave '%s'", hostlists[_i].list, host);
		ck_assert_msg(!strncmp(err, "V='", 3) && strstr(err, "not a Slurm host list"), "%s",
			      err);
	}
}
END_TEST

/* A host name too long for the buffer is refused, never cut. */
START_TEST(test_hostlist_first_long)
{
	char host[8], err[256] = "";

	ck_assert_int_eq(rk__hostlist_first("V", "gpu[00000-2]", host, sizeof(host), err,
					    sizeof(err)), -RK_ECONFIG);
	ck_assert_int_eq(rk__hostlist_first("V", "gpu[0000-2]", host, sizeof(host), err,
					    sizeof(err)), 0);
	ck_assert_str_eq(host, "gpu0000");
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
	/* a FIFO with no writer: refused at once, not a wait in open() for one */
	{
		char dir[] = "/tmp/check_config-fifo-XXXXXX", fifo[64];

		ck_assert_ptr_nonnull(mkdtemp(dir));
		snprintf(fifo, sizeof(fifo), "%s/key", dir);
		ck_assert_int_eq(mkfifo(fifo, 0600), 0);
		ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", fifo, err, sizeof(err)),
				 -RK_ECONFIG);
		ck_assert_msg(strstr(err, "not a regular file"), "%s", err);
		unlink(fifo);
		rmdir(dir);
	}
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", "", err, sizeof(err)), -RK_ECONFIG);
	ck_assert_int_eq(c.secret_len, 0);
}
END_TEST

/*
 * A secret handed down as an inherited descriptor (rk-launch's memfd): read
 * through /proc/self/fd/N, then close-on-exec, so the rank's children do not
 * inherit the key; still open, so the configuration can be read again.
 */
START_TEST(test_secret_fd_cloexec)
{
	static const char key[] = "0123456789abcdef0123456789abcdef";
	struct rk_config c = defaults();
	char err[512] = "", path[64];
	int fd = memfd_create("check-secret", 0);

	ck_assert_int_ge(fd, 0);
	ck_assert_int_eq(write(fd, key, sizeof(key) - 1), (ssize_t)sizeof(key) - 1);
	ck_assert_int_eq(fchmod(fd, 0600), 0);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", path, err, sizeof(err)), 0);
	ck_assert_uint_eq(c.secret_len, sizeof(key) - 1);
	ck_assert_int_eq(fcntl(fd, F_GETFD) & FD_CLOEXEC, FD_CLOEXEC);
	ck_assert_int_eq(rk_config_set(&c, "RK_SECRET_FILE", path, err, sizeof(err)), 0);
	close(fd);
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

	/* on needs a secret: refused by name here, not at rk_world_create() */
	setenv("RK_AUTH", "on", 1);
	unsetenv("RK_SECRET_FILE");
	c = defaults();
	ck_assert_int_eq(rk_config_from_env(&c, err, sizeof(err)), -RK_ECONFIG);
	ck_assert_str_eq(err, "RK_AUTH=on, but no secret is set: set RK_SECRET_FILE");
	ck_assert_int_eq(c.auth, RK_AUTH_AUTO);
	/* ... from the environment, or set in code first */
	setenv("RK_SECRET_FILE", path, 1);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.auth, RK_AUTH_ON);
	unsetenv("RK_SECRET_FILE");
	c = defaults();
	ck_assert_int_eq(rk_config_set_secret(&c, KEY64, 64), 0);
	ck_assert_msg(rk_config_from_env(&c, err, sizeof(err)) == 0, "%s", err);
	ck_assert_int_eq(c.auth, RK_AUTH_ON);
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
	ck_assert_int_eq(T(&c)->ring.sqpoll_cpu, ncpu - 1);
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

static Suite *config_env_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = rk_tcase(s, "env", TIMEOUT_S, env_setup, env_teardown);
	tcase_add_test(tc, test_env_apply);
	tcase_add_test(tc, test_env_empty);
	tcase_add_test(tc, test_env_unknown);
	tcase_add_test(tc, test_env_ignored_prefixes);
	tcase_add_test(tc, test_env_bad_value);
	tcase_add_test(tc, test_env_tiers);
	tcase_add_loop_test(tc, test_env_tuning_bad, 0, N_TUNING);
	tcase_add_test(tc, test_env_cross_heartbeat);
	tcase_add_test(tc, test_env_cross_rank);

	tc = rk_tcase(s, "secret", TIMEOUT_S, env_setup, env_teardown);
	tcase_add_test(tc, test_secret_file_good);
	tcase_add_loop_test(tc, test_secret_file_bad, 0, ARRAY_SIZE(bad_keys));
	tcase_add_test(tc, test_secret_file_missing);
	tcase_add_test(tc, test_secret_fd_cloexec);
	tcase_add_test(tc, test_secret_set);
	tcase_add_test(tc, test_auth_knob);
	tcase_add_test(tc, test_resident_knob);
	tcase_add_test(tc, test_shm_knob);
	tcase_add_test(tc, test_bounds_between_knobs);

	tc = rk_tcase(s, "launcher", TIMEOUT_S, env_setup, env_teardown);
	tcase_add_test(tc, test_launcher_ompi);
	tcase_add_test(tc, test_launcher_slurm);
	tcase_add_test(tc, test_launcher_torchrun);
	tcase_add_test(tc, test_launcher_rk_wins);
	tcase_add_test(tc, test_launcher_none);
	tcase_add_loop_test(tc, test_launcher_bad, 0, ARRAY_SIZE(launcher_bad));
	tcase_add_test(tc, test_launcher_master_port_unused);
	tcase_add_test(tc, test_launcher_srun_torchrun);
	tcase_add_test(tc, test_launcher_precedence);
	tcase_add_test(tc, test_launcher_all_rk);
	tcase_add_test(tc, test_launcher_lws);
	tcase_add_test(tc, test_launcher_slurm_leader);
	tcase_add_loop_test(tc, test_hostlist_first, 0, ARRAY_SIZE(hostlists));
	tcase_add_test(tc, test_hostlist_first_long);
	tcase_add_test(tc, test_launcher_rank_range);
	return s;
}

int main(void)
{
	return rk_check_run(config_env_suite());
}
