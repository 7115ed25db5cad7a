// SPDX-License-Identifier: MIT
/*
 * check_version: rk_version() against the header's RK_VERSION_MAJOR/MINOR and
 * configure's PACKAGE_VERSION, so that neither can be bumped without the other.
 */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "rk_common.h"
#include "rk_check.h"

#define TIMEOUT_S 30

START_TEST(test_version_numbers)
{
	int major = -1, minor = -1;

	rk_version(&major, &minor);
	ck_assert_int_eq(major, RK_VERSION_MAJOR);
	ck_assert_int_eq(minor, RK_VERSION_MINOR);
}
END_TEST

START_TEST(test_version_string)
{
	const char *v = rk_version(NULL, NULL);
	char prefix[32];

	ck_assert_ptr_nonnull(v);
	ck_assert_str_eq(v, PACKAGE_VERSION);
	/* "MAJOR.MINOR.PATCH": the string starts with the header's numbers */
	snprintf(prefix, sizeof(prefix), "%d.%d.", RK_VERSION_MAJOR, RK_VERSION_MINOR);
	ck_assert_msg(!strncmp(v, prefix, strlen(prefix)),
		      "PACKAGE_VERSION %s (configure.ac) does not start with %s (rk_common.h)", v,
		      prefix);
	ck_assert_str_ne(v + strlen(prefix), "");
	ck_assert_uint_eq(strspn(v + strlen(prefix), "0123456789"), strlen(v + strlen(prefix)));
}
END_TEST

START_TEST(test_version_static)
{
	int major;

	/* one static string, whichever pointers are passed */
	ck_assert_ptr_eq(rk_version(NULL, NULL), rk_version(&major, NULL));
}
END_TEST

static Suite *version_suite(void)
{
	Suite *s = suite_create("version");
	TCase *tc = rk_tcase(s, "version", TIMEOUT_S, NULL, NULL);

	tcase_add_test(tc, test_version_numbers);
	tcase_add_test(tc, test_version_string);
	tcase_add_test(tc, test_version_static);
	return s;
}

int main(void)
{
	return rk_check_run(version_suite());
}
