// SPDX-License-Identifier: MIT
/*
 * rk_config_from_launcher_env(): rank, size and leader from the variables
 * OpenMPI, Slurm and torchrun set, where the RK_* variables did not.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime_int.h"
#include "config_int.h"

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

static int launcher_leader(struct rk_config *c, char *err, size_t errlen)
{
	const char *host = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
	struct rk__addr addr;
	uint64_t p;
	int n;

	if (!host)
		return 0;
	if (!port) {
		rk__seterr(err, errlen, "MASTER_ADDR is set but MASTER_PORT is not");
		return -RK_ECONFIG;
	}
	if (rk__parse_u64(port, 1, 65535, &p)) {
		rk__seterr(err, errlen, "MASTER_PORT='%.64s': not a port in [1, 65535]", port);
		return -RK_ECONFIG;
	}
	/* a bare IPv6 address needs brackets before the port */
	if (strchr(host, ':') && host[0] != '[')
		n = snprintf(c->leader, sizeof(c->leader), "[%s]:%" PRIu64, host, p);
	else
		n = snprintf(c->leader, sizeof(c->leader), "%s:%" PRIu64, host, p);
	if (n < 0 || (size_t)n >= sizeof(c->leader) || rk__addr_parse(c->leader, &addr)) {
		rk__seterr(err, errlen, "MASTER_ADDR='%.64s': not a host name or address", host);
		return -RK_ECONFIG;
	}
	return 0;
}

int rk_config_from_launcher_env(struct rk_config *cfg, char *err, size_t errlen)
{
	static const struct {
		const char *rank, *size;
	} launchers[] = {
		{ "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE" },
		{ "SLURM_PROCID", "SLURM_NTASKS" },
		{ "RANK", "WORLD_SIZE" },
	};
	struct rk_config c = *cfg;
	const char *rank_var = "RK_RANK";
	size_t i;
	int ret;

	for (i = 0; i < ARRAY_SIZE(launchers); i++) {
		if (c.rank < 0) {
			ret = launcher_int(launchers[i].rank, 0, RK__RANK_MAX, &c.rank, err,
					   errlen);
			if (ret < 0)
				return ret;
			if (ret)
				rank_var = launchers[i].rank;
		}
		if (c.world_size <= 0) {
			ret = launcher_int(launchers[i].size, 1, RK__WORLD_MAX, &c.world_size,
					   err, errlen);
			if (ret < 0)
				return ret;
		}
	}
	if (!c.leader[0]) {
		ret = launcher_leader(&c, err, errlen);
		if (ret < 0)
			return ret;
	}
	if (rk__config_check_rank(&c, rank_var, err, errlen))
		return -RK_ECONFIG;
	*cfg = c;
	return 0;
}
