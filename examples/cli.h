/* SPDX-License-Identifier: MIT */
/*
 * Strict command-line value parsing shared by the example programs: the whole
 * string, no sign or blank, range-checked; a bad value is refused by the
 * option's name ("rk-load: --requests='x': expected an integer in [1, 100000]").
 */
#ifndef RK_EXAMPLES_CLI_H
#define RK_EXAMPLES_CLI_H

#include <errno.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* @base: 10, or 0 to accept 0x-hex too (seeds). Return: 0 or -1 (reported). */
static inline int cli_u64(const char *prog, const char *name, const char *s, int base,
			  uint64_t min, uint64_t max, uint64_t *out)
{
	unsigned long long v;
	char *end;

	errno = 0;
	v = strtoull(s, &end, base);
	if (errno || end == s || *end || s[0] == '-' || s[0] == '+' || s[0] == ' ' || v < min ||
	    v > max) {
		fprintf(stderr, "%s: --%s='%s': expected an integer in [%" PRIu64 ", %" PRIu64 "]\n",
			prog, name, s, min, max);
		return -1;
	}
	*out = v;
	return 0;
}

static inline int cli_u32(const char *prog, const char *name, const char *s, uint32_t min,
			  uint32_t max, uint32_t *out)
{
	uint64_t v;

	if (cli_u64(prog, name, s, 10, min, max, &v))
		return -1;
	*out = (uint32_t)v;
	return 0;
}

/*
 * The next element of a comma-separated list at *@p (a copy the caller may
 * write), or NULL at its end; "" for an empty element ("1,,2", ",1", "1,"),
 * which every list refuses (strtok would skip it).
 */
static inline char *cli_next(char **p)
{
	return *p ? strsep(p, ",") : NULL;
}

/*
 * "N[,N...]": up to @cap integers in [@min, @max] into @out, *@n of them.
 * Return: 0 or -1 (reported).
 */
static inline int cli_u32_list(const char *prog, const char *name, const char *s, uint32_t min,
			       uint32_t max, uint32_t *out, uint32_t cap, uint32_t *n)
{
	char buf[128], *p = buf, *tok, *end;
	unsigned long v;

	*n = 0;
	if (strlen(s) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", s);
	while ((tok = cli_next(&p))) {
		errno = 0;
		v = strtoul(tok, &end, 10);
		if (*n == cap || errno || end == tok || *end || !(tok[0] >= '0' && tok[0] <= '9') ||
		    v < min || v > max)
			goto bad;
		out[(*n)++] = (uint32_t)v;
	}
	return 0;
bad:
	fprintf(stderr, "%s: --%s='%s': expected up to %" PRIu32 " comma-separated integers in "
			"[%" PRIu32 ", %" PRIu32 "]\n",
		prog, name, s, cap, min, max);
	return -1;
}

/* "a", "b" or "a,b" of the two names @n0/@n1 into @on[2]. Return: 0 or -1 (reported). */
static inline int cli_pair(const char *prog, const char *name, const char *s, const char *n0,
			   const char *n1, bool *on)
{
	char buf[64], *p = buf, *tok;

	on[0] = on[1] = false;
	if (strlen(s) >= sizeof(buf))
		goto bad;
	snprintf(buf, sizeof(buf), "%s", s);
	while ((tok = cli_next(&p))) {
		if (!strcmp(tok, n0))
			on[0] = true;
		else if (!strcmp(tok, n1))
			on[1] = true;
		else
			goto bad;
	}
	if (on[0] || on[1])
		return 0;
bad:
	fprintf(stderr, "%s: --%s='%s': expected %s, %s or %s,%s\n", prog, name, s, n0, n1, n0, n1);
	return -1;
}

#endif /* RK_EXAMPLES_CLI_H */
