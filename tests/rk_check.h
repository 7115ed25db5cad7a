/* SPDX-License-Identifier: MIT */
/*
 * What every Check suite of the tree shares: a TCase with its timeout and
 * fixture, and the runner that gives make the exit status. Never installed.
 */
#ifndef RK_CHECK_H
#define RK_CHECK_H

#include <check.h>
#include <stdlib.h>

/*
 * A TCase of @s whose tests may each run @timeout_s seconds (Check scales that
 * by CK_TIMEOUT_MULTIPLIER); @setup and @teardown, when given, are a checked
 * fixture: they run in the forked test process, around each test.
 */
static inline TCase *rk_tcase(Suite *s, const char *name, int timeout_s, SFun setup,
			      SFun teardown)
{
	TCase *tc = tcase_create(name);

	tcase_set_timeout(tc, timeout_s);
	if (setup || teardown)
		tcase_add_checked_fixture(tc, setup, teardown);
	suite_add_tcase(s, tc);
	return tc;
}

/*
 * Run @s as CK_VERBOSITY, CK_RUN_SUITE and CK_RUN_CASE say (CK_FORK stays on
 * unless the environment turns it off). Return: EXIT_SUCCESS, or EXIT_FAILURE
 * when a test failed.
 */
static inline int rk_check_run(Suite *s)
{
	SRunner *sr = srunner_create(s);
	int failed;

	srunner_run_all(sr, CK_ENV);
	failed = srunner_ntests_failed(sr);
	srunner_free(sr);
	return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

#endif /* RK_CHECK_H */
