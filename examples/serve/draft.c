/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's drafter (leader, loop thread). Requests whose tokens the leader
 * knows ahead (--bench's and --demo's: each computes its requests' TP1
 * references) are drafted by the toy's set-acceptance oracle, which proposes
 * the model's own token with probability --draft-accept, as MTP or n-gram
 * drafters accept 60-80% of first positions; every other request (HTTP) by
 * prompt lookup. Verification keeps either exact.
 */
#define _GNU_SOURCE
#include "config.h"

#include <inttypes.h>
#include <stdio.h>

#include "serve.h"

uint32_t serve_draft(void *arg, const struct rk_request *req, const uint32_t *hist, size_t n,
		     uint32_t *out, uint32_t k)
{
	struct server *srv = arg;
	const uint32_t *ref = NULL;
	uint32_t n_ref = 0;
	uint64_t key = 0;

	if (srv->draft_ref && srv->opt.draft_p >= 0)
		ref = srv->draft_ref(srv->draft_ctx, req, &n_ref, &key);
	if (!ref)
		return rk_ngram_draft(NULL, req, hist, n, out, k);
	return toy_oracle_draft(&srv->oracle, ref, n_ref, req->generated, key, out, k);
}

void draft_refs(struct server *srv, draft_ref_fn fn, void *ctx)
{
	srv->draft_ref = fn;
	srv->draft_ctx = ctx;
}

void draft_print(const struct server *srv, uint64_t proposed0, uint64_t right0)
{
	uint64_t proposed = srv->oracle.proposed - proposed0, right = srv->oracle.right - right0;

	if (srv->opt.draft_p < 0) {
		printf("drafter: prompt lookup (--draft-accept=ngram)\n");
		return;
	}
	printf("drafter: the model's own token with p %.2f per position (--draft-accept); "
	       "measured %.3f over %" PRIu64 " proposals\n",
	       srv->opt.draft_p, proposed ? (double)right / (double)proposed : 0.0, proposed);
}
