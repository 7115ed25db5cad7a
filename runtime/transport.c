/* SPDX-License-Identifier: MIT */
/*
 * The transport classes: a small table of address schemes, filled by each
 * transport's module from a constructor (tcp.c, rdma/rdma.c), read by the
 * world and by the address parser. A handful of entries: a linear scan.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "runtime_int.h"

#define MAX_CLASSES 8

static const struct rk__transport_class *classes[MAX_CLASSES];

int rk__transport_register(const struct rk__transport_class *c)
{
	size_t i;

	if (rk__transport_find(c->scheme))
		return -EEXIST;
	for (i = 0; i < MAX_CLASSES; i++) {
		if (!classes[i]) {
			classes[i] = c;
			return 0;
		}
	}
	return -ENOSPC;
}

void rk__transport_unregister(const struct rk__transport_class *c)
{
	size_t i;

	for (i = 0; i < MAX_CLASSES; i++)
		if (classes[i] == c)
			classes[i] = NULL;
}

const struct rk__transport_class *rk__transport_find(const char *scheme)
{
	size_t i;

	for (i = 0; i < MAX_CLASSES; i++)
		if (classes[i] && !strcmp(classes[i]->scheme, scheme))
			return classes[i];
	return NULL;
}
