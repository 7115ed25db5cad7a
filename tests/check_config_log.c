// SPDX-License-Identifier: MIT
/*
 * check_config_log: rankrt's log (runtime/log.c): the handler and what it is
 * given, the threshold, errno left as it was, the default stderr lines and
 * their truncation, an application's own lines (rk_log()), and RK_LOG_TIME.
 * The log state is reset in a checked fixture, so the tests stay isolated
 * with CK_FORK=no too (valgrind runs).
 */
#include "config_test.h"

/* ---- logging ------------------------------------------------------------------ */

struct captured {
	int calls;
	int level;
	int rank;
	char msg[2048];
};

static void capture(int level, int rank, const char *msg, void *arg)
{
	struct captured *c = arg;

	c->calls++;
	c->level = level;
	c->rank = rank;
	snprintf(c->msg, sizeof(c->msg), "%s", msg);
	errno = EBADF;		/* rk__log must not leak this */
}

static void log_setup(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
}

static void log_teardown(void)
{
	rk_log_set_handler(NULL, NULL);
	rk__log_set_level(RK_LOG_WARN);
	rk__log_set_time(false);
}

START_TEST(test_log_handler)
{
	struct captured c = { 0 };

	rk_log_set_handler(capture, &c);
	rk__log(RK_LOG_ERROR, 5, "link %d: %s", 3, "reset");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.level, RK_LOG_ERROR);
	ck_assert_int_eq(c.rank, 5);
	ck_assert_str_eq(c.msg, "link 3: reset");

	rk__warn(-1, "no rank yet\n");		/* a trailing newline is dropped */
	ck_assert_int_eq(c.calls, 2);
	ck_assert_int_eq(c.level, RK_LOG_WARN);
	ck_assert_int_eq(c.rank, -1);
	ck_assert_str_eq(c.msg, "no rank yet");

	rk__log(RK_LOG_WARN, 0, "%s", "");
	ck_assert_int_eq(c.calls, 3);
	ck_assert_str_eq(c.msg, "");
}
END_TEST

START_TEST(test_log_threshold)
{
	struct captured c = { 0 };

	rk_log_set_handler(capture, &c);
	ck_assert_int_eq(rk__log_level(), RK_LOG_WARN);
	rk__info(1, "dropped");
	rk__dbg(1, "dropped");
	ck_assert_int_eq(c.calls, 0);
	rk__warn(1, "kept");
	ck_assert_int_eq(c.calls, 1);

	rk__log_set_level(RK_LOG_ERROR);
	rk__warn(1, "dropped");
	ck_assert_int_eq(c.calls, 1);
	rk__err(1, "kept");
	ck_assert_int_eq(c.calls, 2);

	rk__log_set_level(RK_LOG_DEBUG);
	rk__dbg(2, "d%d", 4);
	ck_assert_int_eq(c.calls, 3);
	ck_assert_int_eq(c.level, RK_LOG_DEBUG);
	ck_assert_str_eq(c.msg, "d4");

	/* out-of-range levels clamp */
	rk__log_set_level(99);
	ck_assert_int_eq(rk__log_level(), RK_LOG_DEBUG);
	rk__log_set_level(-5);
	ck_assert_int_eq(rk__log_level(), RK_LOG_ERROR);
}
END_TEST

/* Run @fn with stderr on a pipe and return what it wrote (malloc'd). */
static char *capture_stderr(void (*fn)(void))
{
	int fds[2], saved;
	char *buf = calloc(1, 8192);
	ssize_t n;
	size_t len = 0;

	ck_assert_ptr_nonnull(buf);
	ck_assert_int_eq(pipe(fds), 0);
	saved = dup(STDERR_FILENO);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(dup2(fds[1], STDERR_FILENO), 0);
	close(fds[1]);
	fn();
	ck_assert_int_ge(dup2(saved, STDERR_FILENO), 0);	/* closes the pipe's write end */
	close(saved);
	while ((n = read(fds[0], buf + len, 8191 - len)) > 0)
		len += (size_t)n;
	close(fds[0]);
	return buf;
}

static void log_hello(void)
{
	rk__warn(3, "hello");
}

static void log_two(void)
{
	rk__err(-1, "x %d", 5);
	rk__info(0, "dropped");
	rk__warn(65535, "%s", "last");
}

static void log_errno(void)
{
	errno = EAGAIN;
	rk__warn(0, "y");
	ck_assert_int_eq(errno, EAGAIN);
}

static void log_long(void)
{
	char big[5000];

	memset(big, 'z', sizeof(big) - 1);
	big[sizeof(big) - 1] = '\0';
	rk__warn(1, "%s", big);
}

START_TEST(test_log_errno)
{
	struct captured c = { 0 };
	int saved, full, ret;
	char *out;

	rk_log_set_handler(capture, &c);
	errno = EAGAIN;
	rk__warn(0, "x");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(errno, EAGAIN);
	rk_log_set_handler(NULL, NULL);
	out = capture_stderr(log_errno);
	ck_assert_str_eq(out, "rankrt[r0] warn: y\n");
	free(out);

	/* a failing write (ENOSPC) does not leak either */
	saved = dup(STDERR_FILENO);
	full = open("/dev/full", O_WRONLY);
	ck_assert_int_ge(saved, 0);
	ck_assert_int_ge(full, 0);
	ck_assert_int_ge(dup2(full, STDERR_FILENO), 0);
	errno = EAGAIN;
	rk__warn(0, "z");
	ret = errno;
	dup2(saved, STDERR_FILENO);
	close(saved);
	close(full);
	ck_assert_int_eq(ret, EAGAIN);
}
END_TEST

START_TEST(test_log_stderr)
{
	char *out = capture_stderr(log_hello);

	ck_assert_str_eq(out, "rankrt[r3] warn: hello\n");
	free(out);
	out = capture_stderr(log_two);
	ck_assert_str_eq(out, "rankrt[-] error: x 5\nrankrt[r65535] warn: last\n");
	free(out);
}
END_TEST

START_TEST(test_log_truncate)
{
	char *out = capture_stderr(log_long);
	size_t n = strlen(out);

	ck_assert_uint_eq(n, 1024);
	ck_assert(!strncmp(out, "rankrt[r1] warn: zzz", 20));
	ck_assert_str_eq(out + n - 5, "z...\n");
	ck_assert(strchr(out, '\n') == out + n - 1);
	free(out);
}
END_TEST

static void log_app(void)
{
	rk_log(RK_LOG_WARN, 2, "rk-serve", "request %d done", 7);
	rk_log(RK_LOG_INFO, 2, "rk-serve", "dropped");
	rk_log(RK_LOG_ERROR, -1, NULL, "no tag");
}

/* rk_log(): an application's lines, its tag, the threshold, the handler. */
START_TEST(test_log_app)
{
	struct captured c = { 0 };
	char *out = capture_stderr(log_app);

	ck_assert_str_eq(out, "rk-serve[r2] warn: request 7 done\nrankrt[-] error: no tag\n");
	free(out);
	rk_log_set_handler(capture, &c);
	rk_log(RK_LOG_WARN, 4, "app", "x%s", "y");
	ck_assert_int_eq(c.calls, 1);
	ck_assert_int_eq(c.rank, 4);
	ck_assert_str_eq(c.msg, "xy");
}
END_TEST

static void log_timed(void)
{
	rk__warn(1, "timed");
}

/* RK_LOG_TIME: "YYYY-MM-DDTHH:MM:SS.uuuuuuZ " before the tag, the handler gets the message alone. */
START_TEST(test_log_time)
{
	struct captured c = { 0 };
	struct rk_config cfg = defaults();
	char err[256] = "", *out;
	int Y, M, D, h, m, sec, us, n = 0;
	time_t before = time(NULL);

	setenv("RK_LOG_TIME", "1", 1);
	ck_assert_msg(rk_config_from_env(&cfg, err, sizeof(err)) == 0, "%s", err);
	unsetenv("RK_LOG_TIME");
	ck_assert(cfg.log_time);
	out = capture_stderr(log_timed);
	ck_assert_int_eq(sscanf(out, "%4d-%2d-%2dT%2d:%2d:%2d.%6dZ %n", &Y, &M, &D, &h, &m, &sec,
				&us, &n), 7);
	ck_assert_int_eq(n, 28);
	ck_assert_str_eq(out + n, "rankrt[r1] warn: timed\n");
	ck_assert_int_ge(Y, 1900 + gmtime(&before)->tm_year);
	free(out);
	rk_log_set_handler(capture, &c);
	rk__warn(1, "alone");
	ck_assert_str_eq(c.msg, "alone");
	rk_log_set_handler(NULL, NULL);

	/* and off again: the next from_env without it applies the default */
	ck_assert_int_eq(rk_config_set(&cfg, "RK_LOG_TIME", "0", NULL, 0), 0);
	ck_assert_msg(rk_config_from_env(&cfg, err, sizeof(err)) == 0, "%s", err);
	out = capture_stderr(log_timed);
	ck_assert_str_eq(out, "rankrt[r1] warn: timed\n");
	free(out);
}
END_TEST

/* NULL restores the default stderr path. */
START_TEST(test_log_handler_reset)
{
	struct captured c = { 0 };
	char *out;

	rk_log_set_handler(capture, &c);
	rk_log_set_handler(NULL, NULL);
	out = capture_stderr(log_hello);
	ck_assert_str_eq(out, "rankrt[r3] warn: hello\n");
	ck_assert_int_eq(c.calls, 0);
	free(out);
}
END_TEST

static Suite *config_log_suite(void)
{
	Suite *s = suite_create("config");
	TCase *tc;

	tc = rk_tcase(s, "log", TIMEOUT_S, log_setup, log_teardown);
	tcase_add_test(tc, test_log_handler);
	tcase_add_test(tc, test_log_threshold);
	tcase_add_test(tc, test_log_errno);
	tcase_add_test(tc, test_log_stderr);
	tcase_add_test(tc, test_log_truncate);
	tcase_add_test(tc, test_log_handler_reset);
	tcase_add_test(tc, test_log_app);
	tcase_add_test(tc, test_log_time);
	return s;
}

int main(void)
{
	return rk_check_run(config_log_suite());
}
