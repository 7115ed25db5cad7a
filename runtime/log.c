// SPDX-License-Identifier: MIT
/*
 * rankrt logging: "[<UTC time> ]rankrt[r<rank>] <level>: <message>\n" on
 * stderr, or a caller's handler; rk_log() writes an application's lines the
 * same way under its own tag.
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
#include <time.h>
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

/* RK_LOG_TIME: read on every line, from any thread; relaxed as g_level. */
static atomic_bool g_time;

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

void rk__log_set_time(bool on)
{
	atomic_store_explicit(&g_time, on, memory_order_relaxed);
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

/* "2026-12-01T22:04:19.123456Z " into @buf; 0 when the clock or the calendar fails. */
static size_t time_prefix(char *buf, size_t cap)
{
	struct timespec ts;
	struct tm tm;
	int n;

	if (clock_gettime(CLOCK_REALTIME, &ts) || !gmtime_r(&ts.tv_sec, &tm))
		return 0;
	n = snprintf(buf, cap, "%04d-%02d-%02dT%02d:%02d:%02d.%06ldZ ", tm.tm_year + 1900,
		     tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
		     ts.tv_nsec / 1000);
	return n > 0 && (size_t)n < cap ? (size_t)n : 0;
}

static void vlog(int level, int rank, const char *tag, const char *fmt, va_list ap)
{
	char buf[LINE_MAX_LEN];
	const size_t cap = sizeof(buf) - 1;	/* room for the '\n' */
	int saved_errno = errno;
	const char *name;
	size_t len, pre, msg;
	int n;

	if (level > rk__log_level())
		return;
	name = level >= 0 && (size_t)level < ARRAY_SIZE(level_names) ? level_names[level] : "?";
	pre = atomic_load_explicit(&g_time, memory_order_relaxed) ? time_prefix(buf, 64) : 0;
	if (rank < 0)
		n = snprintf(buf + pre, 128, "%.32s[-] %s: ", tag, name);
	else
		n = snprintf(buf + pre, 128, "%.32s[r%d] %s: ", tag, rank, name);
	pre += n > 0 ? (size_t)n : 0;	/* short: at most ~100 bytes */
	msg = pre;

	n = vsnprintf(buf + pre, cap + 1 - pre, fmt, ap);
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
		g_handler(level, rank, buf + msg, g_handler_arg);
	} else {
		buf[len++] = '\n';
		write_all(buf, len);
	}
	errno = saved_errno;
}

void rk__log(int level, int rank, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(level, rank, "rankrt", fmt, ap);
	va_end(ap);
}

void rk_log(int level, int rank, const char *tag, const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vlog(level, rank, tag && *tag ? tag : "rankrt", fmt, ap);
	va_end(ap);
}
