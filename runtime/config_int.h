/* SPDX-License-Identifier: MIT */
/*
 * The configuration's internals, shared by its files: the knob table and its
 * parsers (config.c), the launchers' variables (config_launch.c), the secret
 * (config_secret.c) and the address parser (addr.c). Never installed.
 */
#ifndef RK_CONFIG_INT_H
#define RK_CONFIG_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "rk_runtime.h"

#define RK__RANK_MAX	65535	/* RK_RANK, and a launcher's rank */
#define RK__WORLD_MAX	65536	/* RK_WORLD_SIZE, and a launcher's size */

/* snprintf() into @err when there is one (the messages of rk_config_set() and its kin). */
void rk__seterr(char *err, size_t errlen, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
/* Strict signed parse of the whole string within [@min, @max]; 0 or -RK_ECONFIG. */
int rk__parse_int(const char *s, long long min, long long max, long long *out);
/* A host name, an IPv4 address, a device name: letters, digits, '-', '.', '_'; @n > 0. */
bool rk__name_ok(const char *s, size_t n);
/* Rank below the world size when both are set; the message names @rank_var. */
int rk__config_check_rank(const struct rk_config *cfg, const char *rank_var, char *err,
			  size_t errlen);

#endif /* RK_CONFIG_INT_H */
