/* SPDX-License-Identifier: MIT */
/*
 * Drafting: the scheduler's default drafter, prompt lookup (rk_sched.h).
 * Pure, on any thread.
 */
#include "config.h"

#include "rk_sched.h"

uint32_t rk_ngram_draft(void *arg, const struct rk_request *req, const uint32_t *hist, size_t n,
			uint32_t *out, uint32_t k)
{
	size_t g, j, m, c;

	(void)arg;
	(void)req;
	for (g = 3; g >= 1; g--) {
		if (n < g + 1)
			continue;
		/* the most recent earlier occurrence of the last g tokens */
		for (j = n - g; j-- > 0;) {
			for (m = 0; m < g && hist[j + m] == hist[n - g + m]; m++)
				;
			if (m < g)
				continue;
			for (c = 0; c < k && j + g + c < n; c++)
				out[c] = hist[j + g + c];
			if (c)
				return (uint32_t)c;
		}
	}
	return 0;
}
