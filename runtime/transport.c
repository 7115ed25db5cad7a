/* SPDX-License-Identifier: MIT */
/*
 * The transport classes: a small table of address schemes, filled by each
 * transport's module from a constructor (tcp.c, shm_upgrade.c, rdma/rdma.c)
 * and read by the address parser (config.c), and a world's binding to the
 * classes of its address (NCCL's transport table: the world asks these
 * functions, never a transport by name). A handful of entries: a linear scan.
 *
 * A class with @over takes over the links of the class of that scheme: a
 * world of the @over scheme (tcp://) runs the first such class's hooks on its
 * links, which may move (the same-host upgrade), and a world of the taking
 * class's own scheme (shm://) has its links made by the @over class, every
 * one of them to move. The class's prepare() tells the two apart by the
 * address's scheme.
 *
 * Everything here goes through the classes' pointers: this file calls no other
 * module, so the address parser below the links may read the table.
 */
#include "config.h"

#include <errno.h>
#include <string.h>

#include "runtime_int.h"
#include "link_int.h"

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

/* The first class that takes over the links of @c, or @c itself. */
static const struct rk__transport_class *taker_of(const struct rk__transport_class *c)
{
	size_t i;

	for (i = 0; i < MAX_CLASSES; i++)
		if (classes[i] && classes[i]->over && !strcmp(classes[i]->over, c->scheme))
			return classes[i];
	return c;
}

int rk__transport_open(struct rk_loop *loop, const struct rk__addr *a, struct rk__transport *t)
{
	const struct rk__transport_class *c = rk__transport_find(a->scheme);
	int ret;

	memset(t, 0, sizeof(*t));
	if (!c) {
		rk__err(-1, "no transport class for %s://", a->scheme);
		return -RK_ECONFIG;
	}
	if (c->over) {
		t->make = rk__transport_find(c->over);
		t->run = c;
		if (!t->make || t->make->over) {
			rk__err(-1, "%s:// rides %s://, which this build lacks",
				c->scheme, c->over);
			memset(t, 0, sizeof(*t));
			return -RK_ECONFIG;
		}
	} else {
		t->make = c;
		t->run = taker_of(c);
	}
	if (t->make->prepare) {
		ret = t->make->prepare(loop, a, &t->make_ctx);
		if (ret)
			goto err;
	}
	if (t->run == t->make) {
		t->run_ctx = t->make_ctx;
	} else if (t->run->prepare) {
		ret = t->run->prepare(loop, a, &t->run_ctx);
		if (ret)
			goto err_release;
	}
	return 0;

err_release:
	if (t->make->release)
		t->make->release(t->make_ctx);
err:
	memset(t, 0, sizeof(*t));
	return ret;
}

void rk__transport_close(struct rk__transport *t)
{
	if (t->run && t->run != t->make && t->run->release)
		t->run->release(t->run_ctx);
	if (t->make && t->make->release)
		t->make->release(t->make_ctx);
	memset(t, 0, sizeof(*t));
}

int rk__transport_connect(const struct rk__transport *t, struct rk_loop *loop,
			  const struct rk__addr *a, const struct rk__link_owner_ops *oops,
			  void *owner, struct rk_link **out)
{
	int ret = t->make->connect(loop, a, t->make_ctx, oops, owner, out);

	if (!ret) {
		(*out)->tclass = t->run;
		(*out)->tctx = t->run_ctx;
	}
	return ret;
}

int rk__transport_accept(const struct rk__transport *t, struct rk_loop *loop, int fd,
			 const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	int ret = t->make->from_fd(loop, fd, t->make_ctx, oops, owner, out);

	if (!ret) {
		(*out)->tclass = t->run;
		(*out)->tctx = t->run_ctx;
	}
	return ret;
}

bool rk__transport_settled(const struct rk__transport *t, const struct rk_link *l)
{
	return !t->run || !t->run->settled || t->run->settled(t->run_ctx, l);
}

int rk__transport_broadcast(const struct rk__transport *t, unsigned int type, unsigned int flags,
			    const void *payload, uint32_t len, uint8_t *done)
{
	if (!t->run || !t->run->broadcast)
		return 0;
	return t->run->broadcast(t->run_ctx, type, flags, payload, len, done);
}

void rk__transport_stats(const struct rk__transport *t, struct rk_world_stats *st)
{
	if (t->run && t->run->stats)
		t->run->stats(t->run_ctx, st);
}

struct rk_epoch *rk__transport_epoch(const struct rk__transport *t)
{
	return t->run && t->run->epoch ? t->run->epoch(t->run_ctx) : NULL;
}

struct rk_epoch *rk__transport_link_epoch(const struct rk__transport *t, const struct rk_link *l)
{
	return t->run && t->run->link_epoch ? t->run->link_epoch(t->run_ctx, l) : NULL;
}
