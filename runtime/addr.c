// SPDX-License-Identifier: MIT
/*
 * Leader addresses: "host:port", "[v6]:port", "scheme://host:port?query"
 * split into their parts and checked whole (a scheme needs a registered
 * transport class), and a roce:// query's dev= and gid=.
 */
#include <arpa/inet.h>
#include <ctype.h>
#include <stdbool.h>
#include <string.h>

#include "runtime_int.h"
#include "config_int.h"

/* A host name, an IPv4 address or an IPv6 zone: letters, digits, '-', '.', '_'. */
bool rk__name_ok(const char *h, size_t n)
{
	size_t i;

	for (i = 0; i < n; i++)
		if (!isalnum((unsigned char)h[i]) && h[i] != '-' && h[i] != '.' && h[i] != '_')
			return false;
	return n > 0;
}

/* Between brackets: an IPv6 address with an optional "%zone". */
static bool host_ok(const char *h, size_t n, bool bracketed)
{
	const char *pct = bracketed ? memchr(h, '%', n) : NULL;
	size_t addr_len = pct ? (size_t)(pct - h) : n;
	char v6[INET6_ADDRSTRLEN];
	struct in6_addr a6;

	if (!bracketed)
		return rk__name_ok(h, n);
	if (pct && !rk__name_ok(pct + 1, n - addr_len - 1))
		return false;
	if (addr_len >= sizeof(v6))
		return false;
	memcpy(v6, h, addr_len);
	v6[addr_len] = '\0';
	return inet_pton(AF_INET6, v6, &a6) == 1;
}

int rk__addr_parse(const char *s, struct rk__addr *out)
{
	struct rk__addr a;
	const char *p, *host, *host_end, *port, *q;
	char portbuf[8];
	uint64_t v;
	size_t n, i;
	bool bracketed;

	if (!s)
		return -RK_ECONFIG;
	memset(&a, 0, sizeof(a));
	p = strstr(s, "://");
	if (p) {
		n = (size_t)(p - s);
		if (n == 0 || n >= sizeof(a.scheme))
			return -RK_ECONFIG;
		memcpy(a.scheme, s, n);
		if (!rk__transport_find(a.scheme))
			return -RK_ECONFIG;	/* no transport class has this scheme */
		s = p + 3;
	} else {
		strcpy(a.scheme, "tcp");
	}

	bracketed = *s == '[';
	if (bracketed) {
		host = s + 1;
		host_end = strchr(host, ']');
		if (!host_end || host_end[1] != ':')
			return -RK_ECONFIG;
		port = host_end + 2;
	} else {
		host = s;
		host_end = strchr(host, ':');
		if (!host_end)
			return -RK_ECONFIG;
		port = host_end + 1;
	}
	n = (size_t)(host_end - host);
	if (n == 0 || n >= sizeof(a.host))
		return -RK_ECONFIG;
	if (!host_ok(host, n, bracketed))
		return -RK_ECONFIG;
	memcpy(a.host, host, n);

	q = strchr(port, '?');
	n = q ? (size_t)(q - port) : strlen(port);
	if (n == 0 || n >= sizeof(portbuf))
		return -RK_ECONFIG;
	memcpy(portbuf, port, n);
	portbuf[n] = '\0';
	if (rk__parse_u64(portbuf, 1, 65535, &v))
		return -RK_ECONFIG;
	a.port = (uint16_t)v;

	if (q) {
		q++;
		n = strlen(q);
		if (n == 0 || n >= sizeof(a.query))
			return -RK_ECONFIG;
		for (i = 0; i < n; i++)
			if (!isalnum((unsigned char)q[i]) && !strchr("=&-_.:,", q[i]))
				return -RK_ECONFIG;
		memcpy(a.query, q, n);
	}
	*out = a;
	return 0;
}

int rk__roce_query_parse(const char *query, char *dev, size_t devlen, int *gid)
{
	const char *p = query, *amp, *eq;
	char val[64];
	uint64_t v;
	size_t klen, vlen;

	while (p && *p) {
		amp = strchr(p, '&');
		eq = strchr(p, '=');
		if (!eq || (amp && eq > amp))
			return -RK_ECONFIG;
		klen = (size_t)(eq - p);
		vlen = amp ? (size_t)(amp - eq - 1) : strlen(eq + 1);
		if (vlen == 0 || vlen >= sizeof(val))
			return -RK_ECONFIG;
		memcpy(val, eq + 1, vlen);
		val[vlen] = '\0';
		if (klen == 3 && !strncmp(p, "dev", 3)) {
			if (!rk__name_ok(val, vlen) || vlen >= devlen)
				return -RK_ECONFIG;
			memcpy(dev, val, vlen + 1);
		} else if (klen == 3 && !strncmp(p, "gid", 3)) {
			if (rk__parse_u64(val, 0, 255, &v))
				return -RK_ECONFIG;
			*gid = (int)v;
		} else {
			return -RK_ECONFIG;
		}
		p = amp ? amp + 1 : NULL;
		if (p && !*p)
			return -RK_ECONFIG;	/* a trailing '&' */
	}
	return 0;
}
