/* SPDX-License-Identifier: MIT */
/*
 * rdma/ internals of a build with verbs: the run-time loaded libibverbs
 * functions (rdma/verbs_load.c). Never installed; included only by rdma/ files
 * built with verbs (and the tests of them).
 */
#ifndef RK_VERBS_INT_H
#define RK_VERBS_INT_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/*
 * verbs.h is read for types, prototypes and its inline data-path calls
 * (ibv_post_send, ibv_poll_cq, ... go through the context's ops and name no
 * symbol): nothing here links libibverbs, so librankrt loads on a host
 * without rdma-core.
 */
#include <infiniband/verbs.h>

/*
 * The libibverbs functions rdma/ calls, X(name) for ibv_<name>, resolved with
 * dlsym(). A member is declared with the type of the header's prototype
 * (__typeof__), so a call with wrong arguments does not compile. Members drop
 * the ibv_ prefix because verbs.h defines some names as function-like macros
 * (ibv_query_port, ibv_reg_mr, ibv_get_device_list) that would rewrite a
 * call through a member of the same name.
 */
#define RK__IBV_FNS(X)			\
	X(get_device_list)		\
	X(free_device_list)		\
	X(get_device_name)		\
	X(open_device)			\
	X(close_device)			\
	X(query_port)			\
	X(query_gid)			\
	X(alloc_pd)			\
	X(dealloc_pd)			\
	X(create_comp_channel)		\
	X(destroy_comp_channel)		\
	X(create_cq)			\
	X(destroy_cq)			\
	X(get_cq_event)			\
	X(ack_cq_events)		\
	X(create_qp)			\
	X(destroy_qp)			\
	X(modify_qp)			\
	X(reg_mr)			\
	X(dereg_mr)			\
	X(port_state_str)		\
	X(wc_status_str)

#define RK__IBV_MEMBER(f)	__typeof__(ibv_##f) *f;
/* libibverbs.so.1: filled once by rk__verbs_load(), then read-only. */
struct rk__ibv_fns {
	RK__IBV_FNS(RK__IBV_MEMBER)
};
#undef RK__IBV_MEMBER
extern struct rk__ibv_fns rk__ibv;

/*
 * rk__verbs_load() - open libibverbs.so.1 and fill rk__ibv, once per process
 * (first use of roce:// or rk_rdma_probe()). Any thread; concurrent callers
 * wait for the first (pthread_once). Logs nothing: the caller names the
 * address. Return: 0, or -RK_ENOVERBS with dlerror()'s text in *@why (static,
 * never NULL) when the library or one of its functions is missing.
 * Every rk__ibv call is made after a 0 from here.
 */
int rk__verbs_load(const char **why);

/*
 * ibv_query_port() as verbs.h's inline has it: the provider's extended op
 * where there is one, else the exported function with the compat layout
 * (a prefix of struct ibv_port_attr).
 */
static inline int rk__ibv_query_port(struct ibv_context *ctx, uint8_t port,
				     struct ibv_port_attr *pa)
{
	struct verbs_context *vctx = verbs_get_ctx_op(ctx, query_port);

	if (vctx)
		return vctx->query_port(ctx, port, pa, sizeof(*pa));
	memset(pa, 0, sizeof(*pa));
	return rk__ibv.query_port(ctx, port, (struct _compat_ibv_port_attr *)pa);
}

#endif /* RK_VERBS_INT_H */
