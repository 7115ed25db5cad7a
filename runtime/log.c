// SPDX-License-Identifier: MIT
/*
 * rankrt logging: "rankrt[r<rank>] <level>: <message>\n" on stderr, or a
 * caller's handler.
 *
 * Each line is formatted into a stack buffer and written with one write(2), so
 * lines from several threads or ranks sharing a terminal or a pipe never
 * interleave (a pipe write of at most PIPE_BUF bytes is atomic, and a line is
 * capped well below it). No stdio, no malloc, no lock.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "runtime_int.h"

#define LINE_MAX_LEN	1024	/* including the prefix and the newline */

static const char *const level_names[] = {
	[RK_LOG_ERROR] = "error",
	[RK_LOG_WARN] = "warn",
	[RK_LOG_INFO] = "info",
	[RK_LOG_DEBUG] = "debug",
};

/* Read on every log call from any thread; relaxed is enough (no data depends on it). */
static atomic_int g_level = RK_LOG_WARN;

/* Set before any loop exists (documented), so plain reads suffice afterwards. */
static rk_log_fn g_handler;
static void *g_handler_arg;

void rk__log_set_level(int level)
{
	if (level < RK_LOG_ERROR)
		level = RK_LOG_ERROR;
	if (level > RK_LOG_DEBUG)
		level = RK_LOG_DEBUG;
	atomic_store_explicit(&g_level, level, memory_order_relaxed);
}

int rk__log_level(void)
{
	return atomic_load_explicit(&g_level, memory_order_relaxed);
}

void rk_log_set_handler(rk_log_fn fn, void *arg)
{
	g_handler = fn;
	g_handler_arg = arg;
}

static void write_all(const char *p, size_t n)
{
	while (n) {
		ssize_t w = write(STDERR_FILENO, p, n);

		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;		/* nowhere left to report it */
		}
		p += w;
		n -= (size_t)w;
	}
}

void rk__log(int level, int rank, const char *fmt, ...)
{
	char buf[LINE_MAX_LEN];
	const size_t cap = sizeof(buf) - 1;	/* room for the '\n' */
	int saved_errno = errno;
	const char *name;
	size_t len, pre;
	va_list ap;
	int n;

	if (level > rk__log_level())
		return;
	name = level >= 0 && (size_t)level < ARRAY_SIZE(level_names) ? level_names[level] : "?";
	if (rank < 0)
		n = snprintf(buf, sizeof(buf), "rankrt[-] %s: ", name);
	else
		n = snprintf(buf, sizeof(buf), "rankrt[r%d] %s: ", rank, name);
	pre = n > 0 ? (size_t)n : 0;	/* short: at most ~32 bytes */

	va_start(ap, fmt);
	n = vsnprintf(buf + pre, cap + 1 - pre, fmt, ap);
	va_end(ap);
	if (n < 0) {
		len = pre + (size_t)snprintf(buf + pre, cap + 1 - pre, "(bad log format)");
	} else if ((size_t)n > cap - pre) {
		len = cap;
		memcpy(buf + len - 3, "...", 3);	/* mark the truncation */
	} else {
		len = pre + (size_t)n;
	}
	if (len > pre && buf[len - 1] == '\n')	/* callers need not end with a newline */
		len--;
	buf[len] = '\0';

	if (g_handler) {
		g_handler(level, rank, buf + pre, g_handler_arg);
	} else {
		buf[len++] = '\n';
		write_all(buf, len);
	}
	errno = saved_errno;
}
