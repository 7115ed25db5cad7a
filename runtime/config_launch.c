// SPDX-License-Identifier: MIT
/*
 * rk_config_from_launcher_env(): rank, size and leader from the variables a
 * launcher sets, where the RK_* variables did not.
 *
 * One launcher answers, as a whole: the first one present in launchers[]
 * gives rank, size and leader alike, so a process that torchrun started
 * inside a Slurm step never takes its rank from one and its leader from the
 * other. The RK_* knobs win over it field by field. A launcher that names the
 * leader's host only gets RK_PORT's port: never MASTER_PORT, which torch's
 * TCPStore listens on.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime_int.h"
#include "config_int.h"

extern char **environ;

#define NS_PER_S	1000000000ull

struct launcher {
	const char *name;
	bool (*present)(void);
	/* 0, -RK_ECONFIG with @err, or -EOPNOTSUPP: skip to the next (@err says why) */
	int (*read)(const struct rk_config *c, struct rk__launch_id *id, const char **rank_var,
		    char *err, size_t errlen);
};

static bool env_any(const char *const *vars)
{
	for (; *vars; vars++)
		if (getenv(*vars))
			return true;
	return false;
}

static bool env_prefix(const char *prefix)
{
	size_t n = strlen(prefix);
	char **e;

	for (e = environ; e && *e; e++)
		if (!strncmp(*e, prefix, n))
			return true;
	return false;
}

/* A launcher's integer variable: 0 when absent, 1 when read, -RK_ECONFIG if malformed. */
static int launcher_int(const char *var, long long min, long long max, int *out, char *err,
			size_t errlen)
{
	const char *s = getenv(var);
	long long v;

	if (!s)
		return 0;
	if (rk__parse_int(s, min, max, &v)) {
		rk__seterr(err, errlen, "%s='%.64s': not an integer in [%lld, %lld]", var, s, min,
			   max);
		return -RK_ECONFIG;
	}
	*out = (int)v;
	return 1;
}

static int rank_size(const char *rank, const char *size, struct rk__launch_id *id, char *err,
		     size_t errlen)
{
	int ret = launcher_int(rank, 0, RK__RANK_MAX, &id->rank, err, errlen);

	if (ret >= 0)
		ret = launcher_int(size, 1, RK__WORLD_MAX, &id->world_size, err, errlen);
	return ret < 0 ? ret : 0;
}

/* The leader at @host (from the variable @var) and RK_PORT's @port. */
static int host_leader(const char *var, const char *host, int port, struct rk__launch_id *id,
		       char *err, size_t errlen)
{
	struct rk__addr addr;
	int n;

	/* a bare IPv6 address needs brackets before the port */
	if (strchr(host, ':') && host[0] != '[')
		n = snprintf(id->leader, sizeof(id->leader), "[%s]:%d", host, port);
	else
		n = snprintf(id->leader, sizeof(id->leader), "%s:%d", host, port);
	if (n < 0 || (size_t)n >= sizeof(id->leader) || rk__addr_parse(id->leader, &addr)) {
		rk__seterr(err, errlen, "%s='%.64s': not a host name or address", var, host);
		id->leader[0] = '\0';
		return -RK_ECONFIG;
	}
	return 0;
}

/* ---- torchrun (TORCHELASTIC_* present), and the same variables without it --------- */

static bool torchelastic_present(void)
{
	return env_prefix("TORCHELASTIC_");
}

static bool torch_present(void)
{
	static const char *const vars[] = { "RANK", "WORLD_SIZE", "MASTER_ADDR", NULL };

	return env_any(vars);
}

static int torch_read(const struct rk_config *c, struct rk__launch_id *id,
		      const char **rank_var, char *err, size_t errlen)
{
	const char *host = getenv("MASTER_ADDR");
	int ret;

	*rank_var = "RANK";
	ret = rank_size("RANK", "WORLD_SIZE", id, err, errlen);
	if (!ret && host)
		ret = host_leader("MASTER_ADDR", host, c->port, id, err, errlen);
	return ret;
}

/* ---- LeaderWorkerSet: a group of pods, worker 0 the leader's ---------------------- */

static bool lws_present(void)
{
	static const char *const vars[] = {
		"LWS_LEADER_ADDRESS", "LWS_GROUP_SIZE", "LWS_WORKER_INDEX", NULL
	};

	return env_any(vars);
}

/* rank = worker index x RK_RANKS_PER_POD + RK_LOCAL_RANK; size = group size x per pod */
static int lws_read(const struct rk_config *c, struct rk__launch_id *id, const char **rank_var,
		    char *err, size_t errlen)
{
	const struct rk__tuning *t = rk__config_ctuning(c);
	const char *host = getenv("LWS_LEADER_ADDRESS");
	int worker = -1, group = 0, local = t->local_rank;
	long long per = t->ranks_per_pod;
	int ret;

	*rank_var = "LWS_WORKER_INDEX";
	ret = launcher_int("LWS_WORKER_INDEX", 0, RK__RANK_MAX, &worker, err, errlen);
	if (ret >= 0)
		ret = launcher_int("LWS_GROUP_SIZE", 1, RK__WORLD_MAX, &group, err, errlen);
	if (ret < 0)
		return ret;
	if (local < 0 && per > 1) {
		rk__seterr(err, errlen, "RK_RANKS_PER_POD=%lld under LeaderWorkerSet: set "
			   "RK_LOCAL_RANK to this rank's index in its pod", per);
		return -RK_ECONFIG;
	}
	if (local >= per) {
		rk__seterr(err, errlen, "RK_LOCAL_RANK=%d: not below RK_RANKS_PER_POD=%lld",
			   local, per);
		return -RK_ECONFIG;
	}
	if (local < 0)
		local = 0;
	if (worker >= 0) {
		if (worker * per + local > RK__RANK_MAX) {
			rk__seterr(err, errlen, "LWS_WORKER_INDEX=%d x RK_RANKS_PER_POD=%lld: rank "
				   "above %d", worker, per, RK__RANK_MAX);
			return -RK_ECONFIG;
		}
		id->rank = (int)(worker * per + local);
	}
	if (group) {
		if (group * per > RK__WORLD_MAX) {
			rk__seterr(err, errlen, "LWS_GROUP_SIZE=%d x RK_RANKS_PER_POD=%lld: more "
				   "than %d ranks", group, per, RK__WORLD_MAX);
			return -RK_ECONFIG;
		}
		id->world_size = (int)(group * per);
	}
	return host ? host_leader("LWS_LEADER_ADDRESS", host, c->port, id, err, errlen) : 0;
}

/* ---- PMIx (mpirun of Open MPI 4/5, srun --mpi=pmix): config_pmix.c ---------------- */

static bool pmix_present(void)
{
	return getenv("PMIX_RANK") && getenv("PMIX_NAMESPACE");
}

static int pmix_read(const struct rk_config *c, struct rk__launch_id *id, const char **rank_var,
		     char *err, size_t errlen)
{
	char mine[sizeof(c->leader)], host[256];
	uint64_t s = (c->connect_timeout_ns + NS_PER_S - 1) / NS_PER_S;
	int ret;

	*rank_var = "PMIX_RANK";
	/* what rank 0 posts: its own RK_LEADER, else this host and RK_PORT */
	if (c->leader[0]) {
		snprintf(mine, sizeof(mine), "%s", c->leader);
	} else {
		if (gethostname(host, sizeof(host)) < 0) {
			rk__seterr(err, errlen, "PMIx: gethostname: %s", strerror(errno));
			return -RK_ECONFIG;
		}
		host[sizeof(host) - 1] = '\0';
		ret = host_leader("the host name", host, c->port, id, err, errlen);
		if (ret)
			return ret;
		snprintf(mine, sizeof(mine), "%s", id->leader);
		id->leader[0] = '\0';
	}
	return rk__pmix_exchange(mine, s > 3600 ? 3600 : (unsigned int)s, id, err, errlen);
}

/* ---- Open MPI's own variables ------------------------------------------------------ */

static bool ompi_present(void)
{
	static const char *const vars[] = { "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", NULL };

	return env_any(vars);
}

static int ompi_read(const struct rk_config *c, struct rk__launch_id *id, const char **rank_var,
		     char *err, size_t errlen)
{
	(void)c;
	*rank_var = "OMPI_COMM_WORLD_RANK";
	return rank_size("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", id, err, errlen);
}

/* ---- a Slurm job step's task ------------------------------------------------------- */

/*
 * The first host of a Slurm hostlist: the first element of its first
 * comma-separated item (commas inside brackets do not separate), each
 * bracketed set replaced by its first number as written, so zero padding
 * stays ("gpu[01-04,07],cpu3" -> "gpu01"; "r[2-3]-n[05-06]" -> "r2-n05").
 */
int rk__hostlist_first(const char *var, const char *list, char *host, size_t cap, char *err,
		       size_t errlen)
{
	bool in = false, first = false, range = false;
	size_t n = 0, digits = 0;
	const char *p;

	for (p = list; *p && (in || *p != ','); p++) {
		if (*p == '[') {
			if (in)
				goto bad;
			in = first = true;
			range = false;
			digits = 0;
		} else if (*p == ']' || (in && *p == ',')) {
			if (!in || !digits)
				goto bad;
			in = *p == ',';
			first = false;
			range = false;
			digits = 0;
		} else if (in && *p == '-') {
			if (!digits || range)
				goto bad;
			first = false;
			range = true;
			digits = 0;
		} else if (in && !isdigit((unsigned char)*p)) {
			goto bad;
		} else {
			digits += in;
			if (in && !first)
				continue;
			if (n + 1 >= cap)
				goto bad;
			host[n++] = *p;
		}
	}
	if (in || !n || !rk__name_ok(host, n))
		goto bad;
	host[n] = '\0';
	return 0;
bad:
	rk__seterr(err, errlen, "%s='%.64s': not a Slurm host list", var, list);
	return -RK_ECONFIG;
}

static bool slurm_present(void)
{
	return getenv("SLURM_PROCID");
}

/* The leader: the first host of the step (Slurm puts task 0 there), else of the job. */
static int slurm_read(const struct rk_config *c, struct rk__launch_id *id, const char **rank_var,
		      char *err, size_t errlen)
{
	const char *var = "SLURM_STEP_NODELIST", *list = getenv(var);
	char host[128];
	int ret;

	*rank_var = "SLURM_PROCID";
	ret = rank_size("SLURM_PROCID", "SLURM_NTASKS", id, err, errlen);
	if (ret)
		return ret;
	if (!list) {
		var = "SLURM_JOB_NODELIST";
		list = getenv(var);
	}
	if (!list)
		return 0;
	ret = rk__hostlist_first(var, list, host, sizeof(host), err, errlen);
	return ret ? ret : host_leader(var, host, c->port, id, err, errlen);
}

/* The precedence table: README "Launching" and rk_config_from_launcher_env(3) show it. */
static const struct launcher launchers[] = {
	{ "torchrun", torchelastic_present, torch_read },
	{ "LeaderWorkerSet", lws_present, lws_read },
	{ "PMIx", pmix_present, pmix_read },
	{ "Open MPI", ompi_present, ompi_read },
	{ "Slurm", slurm_present, slurm_read },
	{ "RANK/WORLD_SIZE/MASTER_ADDR", torch_present, torch_read },
};

int rk_config_from_launcher_env(struct rk_config *cfg, char *err, size_t errlen)
{
	struct rk__launch_id id = { .rank = -1, .world_size = 0 };
	struct rk_config c = *cfg;
	const char *rank_var = "RK_RANK", *lrank_var = NULL;
	char msg[320] = "";
	size_t i;
	int ret;

	/* every field set by RK_*: no launcher is asked (nor PMIx started) */
	for (i = 0; i < ARRAY_SIZE(launchers) &&
		    (c.rank < 0 || c.world_size <= 0 || !c.leader[0]); i++) {
		if (!launchers[i].present())
			continue;
		ret = launchers[i].read(&c, &id, &lrank_var, msg, sizeof(msg));
		if (ret == -EOPNOTSUPP) {
			/* with RK_LEADER set the next launcher loses nothing: say so quietly */
			rk__log(c.leader[0] ? RK_LOG_INFO : RK_LOG_WARN, c.rank,
				"%s launcher skipped: %s", launchers[i].name, msg);
			id = (struct rk__launch_id){ .rank = -1, .world_size = 0 };
			continue;
		}
		if (ret < 0) {
			rk__seterr(err, errlen, "%s", msg);
			return ret;
		}
		break;
	}
	if (c.rank < 0 && id.rank >= 0) {
		c.rank = id.rank;
		rank_var = lrank_var;
	}
	if (c.world_size <= 0 && id.world_size > 0)
		c.world_size = id.world_size;
	if (!c.leader[0])
		memcpy(c.leader, id.leader, sizeof(c.leader));
	if (rk__config_check_rank(&c, rank_var, err, errlen))
		return -RK_ECONFIG;
	*cfg = c;
	return 0;
}
