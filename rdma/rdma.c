/* SPDX-License-Identifier: MIT */
/* rdma/: verbs transport. Without rdma-core this file is the -EOPNOTSUPP stub. */
#include "config.h"

#include <errno.h>

#include "rk_rdma.h"

#ifdef RK_HAVE_VERBS
#include <infiniband/verbs.h>

int rk_rdma_probe(void)
{
	struct ibv_device **list;
	int n = 0;

	list = ibv_get_device_list(&n);
	if (!list)
		return errno ? -errno : -ENODEV;
	ibv_free_device_list(list);
	return n;
}
#else
int rk_rdma_probe(void)
{
	return -EOPNOTSUPP;
}
#endif
