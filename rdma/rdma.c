/* SPDX-License-Identifier: MIT */
/*
 * rdma/: the device probe, the roce:// option resolution shared by both
 * builds, and, without rdma-core, the -EOPNOTSUPP stubs of the verbs
 * transport (rdma/verbs.c is built only with --with-verbs).
 */
#include "config.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "rk_rdma.h"
#include "rdma_int.h"

int rk__verbs_opts_resolve(struct rk_loop *loop, const struct rk__addr *a, struct rk__verbs_opts *o)
{
	const struct rk_config *cfg = rk_loop_config(loop);

	memset(o, 0, sizeof(*o));
	o->gid = -1;
	o->port = 1;
	/* RK_LEADER was checked when it was set; a config filled in by hand
	 * (rk_config_init + strcpy) is checked here, before any device work */
	if (rk__roce_query_parse(a->query, o->dev, sizeof(o->dev), &o->gid)) {
		rk__err(cfg->rank, "roce address %s:%u: query '%s' is not dev=NAME&gid=N", a->host,
			a->port, a->query);
		return -RK_ECONFIG;
	}
	if (cfg->rdma_dev[0])
		memcpy(o->dev, cfg->rdma_dev, sizeof(o->dev));
	if (cfg->rdma_gid >= 0)
		o->gid = cfg->rdma_gid;
	if (!o->dev[0]) {
		rk__err(cfg->rank,
			"roce address %s:%u: no RDMA device: set RK_RDMA_DEV or put "
			"dev=NAME in the address",
			a->host, a->port);
		return -RK_ECONFIG;
	}
	if (o->gid < 0)
		o->gid = 0;
	return 0;
}

#ifdef RK_HAVE_VERBS
#include "verbs_int.h"

int rk_rdma_probe(void)
{
	struct ibv_device **list;
	int n = 0, ret;

	ret = rk__verbs_load(NULL);
	if (ret)
		return ret;
	errno = 0;
	list = rk__ibv.get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENODEV;
	rk__ibv.free_device_list(list);
	return n;
}
#else
int rk_rdma_probe(void)
{
	return -EOPNOTSUPP;
}

int rk__verbs_prepare(struct rk_loop *loop, const struct rk__addr *a, struct rk__verbs_opts *o)
{
	int ret = rk__verbs_opts_resolve(loop, a, o);

	if (ret)
		return ret;
	rk__err(rk_loop_config(loop)->rank,
		"roce://%s:%u: rankrt was built without verbs (configure --with-verbs, "
		"needs libibverbs); use a tcp:// address",
		a->host, a->port);
	return -EOPNOTSUPP;
}

int rk__verbs_link_from_fd(struct rk_loop *loop, int fd, const struct rk__verbs_opts *o,
			   const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	(void)loop, (void)fd, (void)o, (void)oops, (void)owner, (void)out;
	return -EOPNOTSUPP;
}

int rk__verbs_connect(struct rk_loop *loop, const struct rk__addr *a,
		      const struct rk__verbs_opts *o, const struct rk__link_owner_ops *oops,
		      void *owner, struct rk_link **out)
{
	(void)loop, (void)a, (void)o, (void)oops, (void)owner, (void)out;
	return -EOPNOTSUPP;
}
#endif

/* ---- the roce:// class ------------------------------------------------------------ */

static int roce_prepare(struct rk_loop *loop, const struct rk__addr *a, void **ctx)
{
	struct rk__verbs_opts *o = calloc(1, sizeof(*o));
	int ret;

	if (!o)
		return -ENOMEM;
	/* the device is checked here, once, so a wrong one fails at start, by name */
	ret = rk__verbs_prepare(loop, a, o);
	if (ret) {
		free(o);
		return ret;
	}
	*ctx = o;
	return 0;
}

static void roce_release(void *ctx)
{
	free(ctx);
}

static int roce_connect(struct rk_loop *loop, const struct rk__addr *a, void *ctx,
			const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	return rk__verbs_connect(loop, a, ctx, oops, owner, out);
}

static int roce_from_fd(struct rk_loop *loop, int fd, void *ctx,
			const struct rk__link_owner_ops *oops, void *owner, struct rk_link **out)
{
	return rk__verbs_link_from_fd(loop, fd, ctx, oops, owner, out);
}

static const struct rk__transport_class roce_class = {
	.scheme = "roce",
	.prepare = roce_prepare,
	.release = roce_release,
	.connect = roce_connect,
	.from_fd = roce_from_fd,
};

/* Also the symbol a static link names (rankrt.pc's Libs.private) to keep this
 * object, whose only way in is this constructor. */
void rk__roce_transport_register(void);
void __attribute__((constructor)) rk__roce_transport_register(void)
{
	rk__transport_register(&roce_class);
}
