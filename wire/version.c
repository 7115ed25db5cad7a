/* SPDX-License-Identifier: MIT */
/*
 * The run-time version. The string is configure's PACKAGE_VERSION, the numbers
 * the header's RK_VERSION_MAJOR/MINOR as this library was compiled; a program
 * compares them with the macros it was compiled with. tests/check_version.c
 * keeps the two sources in agreement.
 */
#include "config.h"
#include "rk_common.h"

const char *rk_version(int *major, int *minor)
{
	if (major)
		*major = RK_VERSION_MAJOR;
	if (minor)
		*minor = RK_VERSION_MINOR;
	return PACKAGE_VERSION;
}
