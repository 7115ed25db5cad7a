/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's HTTP server (rank 0; libmicrohttpd, JSON through jansson):
 * POST /v1/completions and /v1/chat/completions (OpenAI's shapes: openai.c),
 * GET /v1/models, /metrics (metrics.c), /v1/stats and /health
 * (docs/SERVE.md), built only when configure found both (HAVE_SERVE,
 * RK_HAVE_SERVE_HTTP). The HTTP threads
 * never touch the world, scheduler or backend: a request reaches the loop with
 * rk_loop_post() (the struct rk_post is inside it), the loop thread submits it,
 * and the token callbacks (loop thread) append to its buffer under its mutex
 * and write its eventfd. Each connection has its own thread
 * (MHD_USE_THREAD_PER_CONNECTION), so the handler and the content reader may
 * block: in poll() on that eventfd and on the client's socket, whose hang-up
 * (POLLRDHUP) cancels the request through another post. A request is freed
 * when every side lets go (refcount under its mutex): the scheduler at its done
 * callback, HTTP when the response is destroyed or the handler gives up, a
 * cancel post when it has run.
 *
 * Below the endpoints, the connections: rk-serve keeps the connection limit
 * itself so that idle connections cannot lock clients out and every client past
 * it gets an answer, and drains the requests in flight before the server stops
 * (see "connections"). Every error is in OpenAI's shape, libmicrohttpd's own
 * included (see "libmicrohttpd's own errors").
 */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <linux/tcp.h> /* struct tcp_info with tcpi_bytes_received */

#include <jansson.h>
#include <microhttpd.h>

#include "serve.h"

#if MHD_VERSION >= 0x00097002
#define MHD_RESULT enum MHD_Result
#else
#define MHD_RESULT int
#endif

/* One completion request from HTTP. */
struct sreq {
	struct rk_request req; /* the loop thread's from post to done */
	struct rk_post post;   /* submit */
	struct rk_post cancel; /* the client hung up */
	struct server *srv;
	struct MHD_Connection *conn; /* its connection, and the client's socket */
	MHD_socket sock;
	int efd; /* eventfd: the loop thread has news (tokens, the end) */
	uint32_t *prompt;
	uint32_t n_prompt;
	bool stream;
	bool include_usage;
	struct oai_reply rep;
	struct stop_set stop;
	struct req_timing tm; /* t0 before the post, the rest the loop thread's */

	pthread_mutex_t mu;
	/* under mu: written by the loop thread, read by the HTTP thread */
	uint32_t *toks; /* [max_tokens] */
	uint32_t n_toks;
	uint32_t n_scanned; /* tokens checked for a stop */
	uint32_t n_vis;	    /* tokens the client may see: before a stop, and before a
			     * tail that may still become one */
	uint32_t *marks;    /* n_vis after each round that made more visible */
	uint32_t n_marks;
	bool stopped;	    /* a stop string or token ended it (then cancelled) */
	bool done;
	enum finish finish;
	int err;
	char errmsg[160];     /* what the client is told of err (oai_fail_msg()) */
	int refs;	      /* the scheduler's, HTTP's, a cancel post's */
	bool cancel_posted;

	/* HTTP thread only: the content reader's state */
	char *text; /* [max_tokens + 1] */
	uint32_t sent_marks;
	char *out;
	size_t out_len, out_off, out_cap;
	bool finished; /* [DONE] is in out */
};

/* One HTTP request's state (con_cls), from the access handler's first call to completion. */
struct conn {
	char *body;
	size_t len, cap;
	bool too_big;
	bool admitted; /* a completion counted in http.served */
	bool full;     /* a completion past --http-max-conns: answered 503 */
};

/*
 * This thread is closing a connection because its client hung up: the error
 * that libmicrohttpd logs for that at once is none (http_log() drops it), and
 * on_completed(), which follows it, clears the flag.
 */
static __thread bool hung_up_close;

/* In "connections" below. */
static MHD_RESULT queue_response(struct MHD_Connection *c, unsigned int status,
				 struct MHD_Response *resp);
static MHD_RESULT reply_full(struct server *srv, struct MHD_Connection *c);
static void conn_wait(struct MHD_Connection *c, const struct server *srv, bool waiting);
static json_t *http_json(struct server *srv);

/* ---- requests: the loop side ------------------------------------------------------ */

static void sreq_free(struct sreq *r)
{
	close(r->efd);
	pthread_mutex_destroy(&r->mu);
	free(r->prompt);
	free(r->toks);
	free(r->marks);
	free(r->out);
	free(r->text);
	free(r);
}

/* Drop one side's reference; the last one frees. Any thread. */
static void sreq_put(struct sreq *r)
{
	bool last;

	pthread_mutex_lock(&r->mu);
	last = --r->refs == 0;
	pthread_mutex_unlock(&r->mu);
	if (last)
		sreq_free(r);
}

static enum finish finish_of(const struct sreq *r, int err)
{
	if (r->stopped)
		return FINISH_STOP;
	if (!err)
		return FINISH_LENGTH;
	return err == -ECANCELED ? FINISH_ABORT : FINISH_ERROR;
}

/* Loop thread: the request's end, counted and logged. */
static void sreq_end(struct server *srv, struct sreq *r, uint64_t now)
{
	const struct req_timing *tm = &r->tm;

	srv->req_active--;
	if (r->err == -ECANCELED)
		srv->req_cancelled++;
	else if (r->err)
		srv->req_failed++;
	metrics_req_done(srv, tm, r->n_prompt, r->n_vis, r->finish, now);
	rk_log(RK_LOG_INFO, srv->rank, PROG,
	       "%s-%llu (stream %llu): prompt %u tokens, output %u tokens, %.6f s, first token "
	       "%.6f s, finish %s%s%s",
	       r->rep.kind == API_CHAT ? "chatcmpl" : "cmpl", (unsigned long long)r->rep.id,
	       (unsigned long long)r->req.id, r->n_prompt, r->n_vis, (double)(now - tm->t0) / 1e9,
	       tm->t_first ? (double)(tm->t_first - tm->t0) / 1e9 : 0.0, finish_names[r->finish],
	       r->err ? ": " : "", r->err ? rk_strerror(r->err) : "");
}

/*
 * Loop thread: new tokens, and the end. A stop string or stop token ends the
 * request here: its tokens are not shown, and the scheduler is told to drop
 * it (the -ECANCELED that follows is then a success).
 */
static void sreq_cb(struct rk_request *req, const uint32_t *t, uint32_t n, bool done, int err)
{
	struct sreq *r = req->data;
	struct server *srv = r->srv;
	uint64_t now = now_ns();
	uint32_t room, vis;
	bool hit = false, stop_now = false;

	pthread_mutex_lock(&r->mu);
	room = r->stopped ? 0 : r->req.max_tokens - r->n_toks;
	if (n > room)
		n = room;
	if (n) {
		memcpy(r->toks + r->n_toks, t, n * sizeof(*t));
		r->n_toks += n;
	}
	if ((n || done) && !r->stopped) {
		vis = stop_scan(&r->stop, r->toks, r->n_toks, r->n_scanned, done, &hit);
		r->n_scanned = r->n_toks;
		if (hit) {
			r->stopped = true;
			stop_now = !done;
		}
		if (vis > r->n_vis) {
			r->n_vis = vis;
			r->marks[r->n_marks++] = vis;
		}
	}
	if (done) {
		r->err = r->stopped && err == -ECANCELED ? 0 : err;
		if (r->err)
			oai_fail_msg(srv, r->err, r->errmsg, sizeof(r->errmsg));
		r->finish = finish_of(r, r->err);
		r->done = true;
	}
	pthread_mutex_unlock(&r->mu);
	metrics_req_tokens(srv, &r->tm, n, now);
	if (n || done)
		eventfd_write(r->efd, 1); /* before the cancel or the put below: either may free @r */
	if (stop_now) {
		/* stop spending rounds on it; the done callback follows, maybe inside */
		rk_sched_cancel(srv->sched, req);
		return;
	}
	if (done) {
		sreq_end(srv, r, now);
		sreq_put(r); /* the scheduler's reference */
	}
}

static void posted_done(struct server *srv)
{
	pthread_mutex_lock(&srv->mu);
	srv->posted--;
	pthread_mutex_unlock(&srv->mu);
}

static enum rk_activity sreq_post_cb(struct rk_post *p)
{
	struct sreq *r = p->data;
	struct server *srv = r->srv;
	int ret;

	posted_done(srv);
	srv->req_total++;
	srv->req_active++;
	/* after rk_sched_stop() this is -RK_ESTOPPED */
	ret = rk_sched_submit(srv->sched, &r->req);
	if (ret)
		sreq_cb(&r->req, NULL, 0, true, ret);
	return RK_BUSY;
}

/*
 * The client hung up. Posted after the submit post by the same thread, so it
 * runs after it: the request is the scheduler's until its done callback, and a
 * running one leaves the batch before the next round (rk_sched_cancel()).
 */
static enum rk_activity sreq_cancel_cb(struct rk_post *p)
{
	struct sreq *r = p->data;
	struct server *srv = r->srv;
	bool done;

	posted_done(srv);
	pthread_mutex_lock(&r->mu);
	done = r->done;
	pthread_mutex_unlock(&r->mu);
	if (!done)
		rk_sched_cancel(srv->sched, &r->req); /* done: -ECANCELED, now or after its round */
	sreq_put(r);			      /* the post's reference */
	return RK_BUSY;
}

/* ---- requests: the HTTP side ------------------------------------------------------ */

static struct sreq *sreq_create(struct server *srv, struct MHD_Connection *c, MHD_socket sock,
				struct oai_params *p)
{
	struct sreq *r = calloc(1, sizeof(*r));

	if (!r)
		return NULL;
	r->toks = malloc(p->max_tokens * sizeof(*r->toks));
	r->marks = malloc(p->max_tokens * sizeof(*r->marks));
	r->text = malloc(p->max_tokens + 1);
	if (!r->toks || !r->marks || !r->text)
		goto err_free;
	r->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (r->efd < 0)
		goto err_free;
	if (pthread_mutex_init(&r->mu, NULL))
		goto err_efd;
	r->srv = srv;
	r->conn = c;
	r->sock = sock;
	r->prompt = p->prompt; /* ours now */
	p->prompt = NULL;
	r->n_prompt = p->n_prompt;
	r->stream = p->stream;
	r->include_usage = p->include_usage;
	r->stop = p->stop;
	r->rep = (struct oai_reply){ .kind = p->kind, .id = oai_next_id(),
				     .created = (int64_t)time(NULL), .n_prompt = p->n_prompt,
				     .token_ids = p->token_ids, .first = true };
	r->tm.t0 = now_ns();
	r->refs = 2;
	rk_request_init(&r->req);
	r->req.prompt = r->prompt;
	r->req.prompt_len = r->n_prompt;
	r->req.max_tokens = p->max_tokens;
	if (p->temperature > 0) {
		r->req.top_k = p->top_k ? p->top_k : srv->opt.model.V;
		r->req.temperature = (float)p->temperature;
		r->req.top_p = (float)p->top_p;
	}
	r->req.seed = p->seed;
	r->req.draft_k = p->draft_k;
	r->req.cb = sreq_cb;
	r->req.data = r;
	rk_post_init(&r->post, sreq_post_cb, r);
	rk_post_init(&r->cancel, sreq_cancel_cb, r);
	return r;
err_efd:
	close(r->efd);
err_free:
	free(r->toks);
	free(r->marks);
	free(r->text);
	free(r);
	return NULL;
}

/* Hand @p to the loop unless the server is stopping. Return: 0 or -RK_ESTOPPED. */
static int post_to_loop(struct server *srv, struct rk_post *p)
{
	pthread_mutex_lock(&srv->mu);
	if (srv->stopping) {
		pthread_mutex_unlock(&srv->mu);
		return -RK_ESTOPPED;
	}
	srv->posted++;
	pthread_mutex_unlock(&srv->mu);
	rk_loop_post(srv->loop, p);
	return 0;
}

static MHD_RESULT reply(struct MHD_Connection *c, unsigned int status, json_t *body)
{
	struct MHD_Response *resp;
	MHD_RESULT ret;
	char *s = body ? json_dumps(body, JSON_COMPACT | JSON_REAL_PRECISION(9)) : NULL;

	json_decref(body);
	if (!s)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_COPY);
	free(s);
	if (!resp)
		return MHD_NO;
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	ret = queue_response(c, status, resp);
	MHD_destroy_response(resp);
	return ret;
}

/* An error in OpenAI's shape (openai.c). */
static json_t *error_json(unsigned int status, const char *code, const char *msg)
{
	struct oai_error e = { .status = status,
			       .type = status >= 500 ? "server_error" : "invalid_request_error",
			       .code = code };

	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return oai_error_json(&e);
}

static MHD_RESULT reply_error(struct MHD_Connection *c, unsigned int status, const char *msg)
{
	return reply(c, status, error_json(status, NULL, msg));
}

/* Append an SSE event "data: <json>\n\n" to the reader's buffer. */
static int out_event(struct sreq *r, json_t *ev)
{
	char *s = ev ? json_dumps(ev, JSON_COMPACT) : NULL;
	size_t n, need;
	int ret = -ENOMEM;

	json_decref(ev);
	if (!s)
		return ret;
	n = strlen(s);
	need = r->out_len + n + 9; /* "data: " s "\n\n" and sprintf's NUL */
	if (need > r->out_cap) {
		char *o = realloc(r->out, need * 2);

		if (!o)
			goto out;
		r->out = o;
		r->out_cap = need * 2;
	}
	r->out_len += (size_t)sprintf(r->out + r->out_len, "data: %s\n\n", s);
	ret = 0;
out:
	free(s);
	return ret;
}

static int out_raw(struct sreq *r, const char *s)
{
	size_t n = strlen(s);

	if (r->out_len + n > r->out_cap) {
		char *o = realloc(r->out, r->out_len + n + 64);

		if (!o)
			return -ENOMEM;
		r->out = o;
		r->out_cap = r->out_len + n + 64;
	}
	memcpy(r->out + r->out_len, s, n);
	r->out_len += n;
	return 0;
}

/* True once poll() says that the client closed its side (hung up, or half-closed). */
static bool client_gone(short revents)
{
	return revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL);
}

/*
 * HTTP thread, with r->mu held (dropped while waiting): wait until the loop
 * has news for @r (@all: its end; else any new tokens too) or its client hangs
 * up. The connection's inactivity timeout is off meanwhile: a client waiting
 * for the model is not idle. Return: false, or true when the client hung up.
 */
static bool sreq_wait(struct sreq *r, bool all)
{
	struct pollfd pfd[2];
	bool gone = false, waited = false;
	eventfd_t v;

	while (!r->done && (all || r->sent_marks == r->n_marks)) {
		pthread_mutex_unlock(&r->mu);
		if (!waited) {
			conn_wait(r->conn, r->srv, true);
			waited = true;
		}
		pfd[0] = (struct pollfd){ .fd = r->efd, .events = POLLIN };
		pfd[1] = (struct pollfd){ .fd = r->sock, .events = POLLRDHUP };
		/* a write after the check above has left the eventfd readable */
		if (poll(pfd, 2, -1) < 0 && errno != EINTR) {
			fprintf(stderr, PROG ": poll: %s: dropping a request\n", strerror(errno));
			pfd[1].revents = POLLERR;
		}
		if (pfd[0].revents & POLLIN)
			eventfd_read(r->efd, &v);
		gone = client_gone(pfd[1].revents);
		pthread_mutex_lock(&r->mu);
		if (gone)
			break;
	}
	if (waited)
		conn_wait(r->conn, r->srv, false);
	return gone;
}

/*
 * The client of @r hung up: cancel its request at the next round. The post
 * holds a reference until it has run. While the server stops, rk_sched_stop()
 * ends every request anyway. HTTP thread.
 */
static void sreq_hang_up(struct sreq *r)
{
	pthread_mutex_lock(&r->mu);
	if (r->done || r->cancel_posted) {
		pthread_mutex_unlock(&r->mu);
		return;
	}
	r->cancel_posted = true;
	r->refs++;
	pthread_mutex_unlock(&r->mu);
	if (post_to_loop(r->srv, &r->cancel))
		sreq_put(r);
}

/*
 * The streaming response's content reader (the connection's own thread, so it
 * may block): one event per round that produced tokens, then [DONE].
 */
static ssize_t sse_read(void *cls, uint64_t pos, char *buf, size_t max)
{
	struct sreq *r = cls;
	uint32_t marks, first, last, m, n_vis;
	enum finish finish;
	bool done, gone;
	int err, ret = 0;
	size_t n;

	(void)pos;
	if (r->out_off == r->out_len) {
		if (r->finished)
			return MHD_CONTENT_READER_END_OF_STREAM;
		r->out_off = r->out_len = 0;
		pthread_mutex_lock(&r->mu);
		gone = sreq_wait(r, false);
		marks = r->n_marks;
		done = r->done;
		err = r->err;
		finish = r->finish;
		n_vis = r->n_vis;
		pthread_mutex_unlock(&r->mu);
		if (gone) {
			sreq_hang_up(r);
			hung_up_close = true;
			return MHD_CONTENT_READER_END_WITH_ERROR; /* closes the connection */
		}
		/* toks[0 .. marks[marks-1]) are written once, before the unlock above */
		for (m = r->sent_marks; m < marks && !ret; m++) {
			first = m ? r->marks[m - 1] : 0;
			last = r->marks[m];
			ret = out_event(r, oai_chunk(&r->rep, r->toks + first, last - first, NULL,
						     r->text));
			r->rep.first = false;
		}
		r->sent_marks = marks;
		if (!ret && done) {
			if (err) {
				struct oai_error e = { .status = 500, .type = "server_error" };

				snprintf(e.msg, sizeof(e.msg), "%s", r->errmsg);
				ret = out_event(r, oai_error_json(&e));
			} else {
				ret = out_event(r, oai_chunk(&r->rep, NULL, 0, finish_names[finish],
							     r->text));
				if (!ret && r->include_usage)
					ret = out_event(r, oai_usage_chunk(&r->rep, n_vis));
			}
			if (!ret)
				ret = out_raw(r, "data: [DONE]\n\n");
			r->finished = true;
		}
		if (ret)
			return MHD_CONTENT_READER_END_WITH_ERROR;
	}
	n = r->out_len - r->out_off;
	if (n > max)
		n = max;
	memcpy(buf, r->out + r->out_off, n);
	r->out_off += n;
	return (ssize_t)n;
}

static void sse_free(void *cls)
{
	struct sreq *r = cls;

	if (!r->finished)
		sreq_hang_up(r); /* the connection went before the stream's end */
	sreq_put(r);		 /* HTTP's reference */
}

static MHD_RESULT handle_completion(struct server *srv, struct MHD_Connection *c, struct conn *cn,
				    enum api_kind kind)
{
	const union MHD_ConnectionInfo *ci;
	struct MHD_Response *resp;
	struct pollfd pfd;
	struct oai_params p;
	struct oai_error e;
	struct sreq *r;
	json_t *body;
	bool gone;
	MHD_RESULT ret;

	if (cn->too_big)
		return reply_error(c, 413 /* content too large */, "request body too large");
	ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
	if (!ci)
		return MHD_NO;
	/* a client that sent its request and hung up at once costs no round */
	pfd = (struct pollfd){ .fd = ci->connect_fd, .events = POLLRDHUP };
	if (poll(&pfd, 1, 0) > 0 && client_gone(pfd.revents)) {
		hung_up_close = true;
		return MHD_NO;
	}
	if (oai_parse(srv, kind, cn->body ? cn->body : "", cn->len, &p, &e))
		return reply(c, e.status, oai_error_json(&e));
	r = sreq_create(srv, c, ci->connect_fd, &p);
	if (!r) {
		free(p.prompt);
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	}
	if (post_to_loop(srv, &r->post)) {
		sreq_free(r);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, "the server is stopping");
	}
	if (r->stream) {
		resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, sse_read, r,
							 sse_free);
		if (!resp) {
			sreq_hang_up(r); /* nobody reads it: end it as if the client had gone */
			sreq_put(r);
			return MHD_NO;
		}
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
		ret = queue_response(c, MHD_HTTP_OK, resp);
		MHD_destroy_response(resp); /* sse_free() drops our reference */
		return ret;
	}
	/* one JSON reply: this connection's thread waits for the whole request */
	pthread_mutex_lock(&r->mu);
	gone = sreq_wait(r, true);
	pthread_mutex_unlock(&r->mu);
	if (gone) {
		sreq_hang_up(r);
		sreq_put(r);
		hung_up_close = true;
		return MHD_NO; /* closes the connection */
	}
	if (r->err) {
		ret = reply_error(c,
				  r->err == -RK_ESTOPPED ? MHD_HTTP_SERVICE_UNAVAILABLE
							 : MHD_HTTP_INTERNAL_SERVER_ERROR,
				  r->errmsg);
		sreq_put(r);
		return ret;
	}
	body = oai_final(&r->rep, r->toks, r->n_vis, finish_names[r->finish], r->text);
	sreq_put(r);
	return reply(c, MHD_HTTP_OK, body);
}

static void stats_http_done(struct stats_wait *w)
{
	struct server *srv = w->srv;

	pthread_mutex_lock(&srv->mu);
	w->finished = true;
	pthread_cond_broadcast(&srv->cv);
	pthread_mutex_unlock(&srv->mu);
}

static json_t *loop_json(const struct rk_loop_stats *s)
{
	return json_pack("{s:I,s:I,s:I,s:I,s:I,s:I,s:I,s:f,s:f,s:f}", "iterations",
			 (json_int_t)s->iterations, "events", (json_int_t)s->events, "busy_events",
			 (json_int_t)s->busy_events, "spin_iters", (json_int_t)s->spin_iters,
			 "blocks", (json_int_t)s->blocks, "wakeups", (json_int_t)s->wakeups,
			 "posts", (json_int_t)s->posts, "spin_s", s->ns_spin / 1e9, "blocked_s",
			 s->ns_blocked / 1e9, "run_s", s->ns_run / 1e9);
}

/* Hand @w (its ranks allocated) to a stats collection and wait. Return: 0 or an error. */
static int collect(struct server *srv, struct stats_wait *w)
{
	w->post.cb = stats_post_cb;
	w->post.data = w;
	if (post_to_loop(srv, &w->post))
		return -RK_ESTOPPED;
	/* the loop always calls done(): in a collection, or failing it at shutdown */
	pthread_mutex_lock(&srv->mu);
	while (!w->finished)
		pthread_cond_wait(&srv->cv, &srv->mu);
	pthread_mutex_unlock(&srv->mu);
	return w->err;
}

static MHD_RESULT handle_stats(struct server *srv, struct MHD_Connection *c)
{
	struct stats_wait w = { .srv = srv, .done = stats_http_done };
	json_t *ranks, *body;
	int i, err;

	w.ranks = calloc((size_t)srv->size, sizeof(*w.ranks));
	if (!w.ranks)
		return reply_error(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory");
	err = collect(srv, &w);
	if (err) {
		free(w.ranks);
		return reply_error(c, MHD_HTTP_SERVICE_UNAVAILABLE, rk_strerror(err));
	}
	ranks = json_array();
	for (i = 0; ranks && i < srv->size; i++) {
		const struct rank_stats *rs = &w.ranks[i];

		json_array_append_new(ranks, json_pack("{s:i,s:f,s:f,s:f,s:o,s:{s:I,s:I,s:f}}",
						       "rank", i, "cpu_s", rs->user_s + rs->sys_s,
						       "user_s", rs->user_s, "sys_s", rs->sys_s,
						       "loop", loop_json(&rs->loop), "backend",
						       "rounds", (json_int_t)rs->toy.rounds,
						       "outputs", (json_int_t)rs->toy.outputs,
						       "compute_s", rs->toy.ns_compute / 1e9));
	}
	free(w.ranks);
	body = json_pack("{s:i,s:o,s:{s:I,s:I,s:I,s:I,s:I,s:f},s:{s:I,s:I,s:I,s:I},s:o}",
			 "world_size", srv->size, "ranks", ranks, "sched", "rounds",
			 (json_int_t)w.sched.rounds, "tokens", (json_int_t)w.sched.tokens,
			 "drafted", (json_int_t)w.sched.drafted, "accepted",
			 (json_int_t)w.sched.accepted, "streams_done",
			 (json_int_t)w.sched.streams_done, "round_s", w.sched.ns_round_sum / 1e9,
			 "requests", "total", (json_int_t)w.req_total, "active",
			 (json_int_t)w.req_active, "failed", (json_int_t)w.req_failed, "cancelled",
			 (json_int_t)w.req_cancelled, "http", http_json(srv));
	return reply(c, MHD_HTTP_OK, body);
}

/* GET /metrics: every rank's counters and the leader's latencies (metrics.c). */
static MHD_RESULT handle_metrics(struct server *srv, struct MHD_Connection *c)
{
	const size_t n = (size_t)srv->size;
	struct metrics_wait m = { .w = { .srv = srv, .done = metrics_wait_done },
				  .signal = stats_http_done };
	struct MHD_Response *resp;
	char *text = NULL;
	size_t len = 0;
	MHD_RESULT ret;
	int err;

	m.w.ranks = calloc(n, sizeof(*m.w.ranks));
	m.links = calloc(n, sizeof(*m.links));
	m.up = calloc(n, sizeof(*m.up));
	err = m.w.ranks && m.links && m.up ? collect(srv, &m.w) : -ENOMEM;
	if (!err)
		err = metrics_render(srv, &m, &text, &len);
	free(m.w.ranks);
	free(m.links);
	free(m.up);
	if (err)
		return reply_error(c, err == -ENOMEM ? MHD_HTTP_INTERNAL_SERVER_ERROR
						     : MHD_HTTP_SERVICE_UNAVAILABLE,
				   rk_strerror(err));
	resp = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(text);
		return MHD_NO;
	}
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
				"text/plain; version=0.0.4; charset=utf-8");
	ret = queue_response(c, MHD_HTTP_OK, resp);
	MHD_destroy_response(resp);
	return ret;
}

static int64_t g_started; /* /v1/models' "created" */

static MHD_RESULT handle_health(struct server *srv, struct MHD_Connection *c)
{
	bool stopping;

	pthread_mutex_lock(&srv->mu);
	stopping = srv->stopping;
	pthread_mutex_unlock(&srv->mu);
	return reply(c, stopping ? MHD_HTTP_SERVICE_UNAVAILABLE : MHD_HTTP_OK,
		     json_pack("{s:s,s:i,s:i,s:i,s:I,s:i,s:i}", "status",
			       stopping ? "stopping" : "ok", "world_size", srv->size, "vocab",
			       (int)srv->opt.model.V, "hidden", (int)srv->opt.model.H, "model_seed",
			       (json_int_t)srv->opt.model.seed, "max_batch",
			       (int)srv->opt.max_batch, "draft_k", (int)srv->opt.draft_k));
}

/* ---- connections: the limit, idle connections, the drain ------------------------------- */

/*
 * libmicrohttpd refuses connections past its connection limit, so idle
 * connections (keep-alive ones between requests, clients that never send one)
 * would lock every new client out until they time out. rk-serve keeps
 * --http-max-conns itself instead, in two ways:
 *  - At most --http-max-conns completions are answered at once (http.served).
 *    One whose headers arrive past that is answered 503 with Retry-After
 *    (reply_full()) once its body is read, and its connection closes: a burst
 *    of clients gets answers, not resets. GET requests are always answered.
 *  - While more connections are open than --http-max-conns, the one idle
 *    longest is shut down (as nginx reuses its keep-alive connections), but
 *    only once it has been quiet for HTTP_QUIET_NS: no byte has reached it
 *    since its accept, or since its last request ended (TCP_INFO's
 *    tcpi_bytes_received, which counts bytes its thread may have read
 *    already). A connection that has received bytes leaves the idle list: its
 *    request is arriving and will be answered. A fresh connection is never
 *    shut down while its client may still be sending its first request.
 * The acceptor (below) lets in twice as many connections (http.hard), within
 * the descriptor limit: room for the connections accepted while the ones shut
 * down are still closing, and for requests answered 503. Past that it stops
 * accepting and clients wait in the listen backlog (HTTP_BACKLOG, capped by
 * net.core.somaxconn). Idle connections also time out after
 * --http-idle-timeout (libmicrohttpd's inactivity timeout, which a request
 * waiting for the model turns off: sreq_wait()).
 *
 * Shutdown: once http_quiesce() has run, every reply closes its connection,
 * and http_busy() says whether a request is still being answered, arriving,
 * or may come from a client whose request just ended, so that the leader's
 * drain lets each stream end and each request get its reply (a 503 for the
 * new ones) before MHD_stop_daemon() cuts the connections; the last request to
 * end wakes the loop.
 *
 * Threads: the acceptor has its own; on_connection() runs on libmicrohttpd's
 * polling thread (and in MHD_stop_daemon()), the rest on connection threads;
 * all under http.mu.
 */
struct hconn {
	struct hconn *prev, *next; /* on http.idle while idle, the one idle longest first */
	struct http *h;
	MHD_socket fd;	/* open until on_connection() says CLOSED */
	uint64_t since; /* idle since (CLOCK_MONOTONIC ns) */
	uint64_t rx;	/* bytes it had received then */
	bool idle;
	bool evicted;	/* shut down, not closed yet */
	bool linger;	/* its request ended while stopping: its client may send again */
};

struct http {
	struct MHD_Daemon *d;
	struct server *srv;
	int lfd;	      /* listening (the acceptor's; http_quiesce() closes it) */
	int stop_efd;	      /* wakes the acceptor to stop */
	pthread_t acc_thread;
	bool acc_up;
	unsigned int hard;    /* connections the acceptor lets in at once */
	unsigned int mhd_limit; /* libmicrohttpd's: fd_room() */
	pthread_mutex_t mu;
	pthread_cond_t room;  /* accepted < hard, or acc_stop */
	/* under mu */
	struct hconn idle;    /* the list's head */
	unsigned int accepted; /* handed to libmicrohttpd and not closed */
	bool acc_stop;
	unsigned int open;    /* connections accepted and not closed */
	unsigned int closing; /* ...of which shut down past the limit */
	unsigned int busy;    /* requests from their first call to on_completed() */
	unsigned int served;  /* ...of which completions admitted (at most --http-max-conns) */
	uint64_t evicted;
	uint64_t full;	      /* completions answered 503: the server was full */
	bool stopping;
};

/* Bytes that have reached @fd from its client, read or not; 0 where TCP_INFO cannot say. */
static uint64_t rx_bytes(MHD_socket fd)
{
	struct tcp_info ti;
	socklen_t len = sizeof(ti);

	if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) ||
	    len < offsetof(struct tcp_info, tcpi_bytes_received) + sizeof(ti.tcpi_bytes_received))
		return 0;
	return ti.tcpi_bytes_received;
}

static void idle_add(struct http *h, struct hconn *hc, uint64_t rx)
{
	hc->prev = h->idle.prev;
	hc->next = &h->idle;
	h->idle.prev->next = hc;
	h->idle.prev = hc;
	hc->idle = true;
	hc->since = now_ns();
	hc->rx = rx;
}

static void idle_del(struct hconn *hc)
{
	hc->prev->next = hc->next;
	hc->next->prev = hc->prev;
	hc->idle = false;
}

/* Shut idle connection @hc down: its thread sees the end of its input and closes it. */
static void conn_close(struct http *h, struct hconn *hc)
{
	idle_del(hc);
	hc->evicted = true;
	h->closing++;
	shutdown(hc->fd, SHUT_RDWR);
}

/*
 * Past --http-max-conns open connections: shut down the connections idle
 * longest that have been quiet for HTTP_QUIET_NS (see above); those that have
 * received bytes leave the list. The list is in the order the connections
 * became idle, so the walk ends at the first one idle for less. With h->mu
 * held.
 */
static void evict(struct http *h)
{
	uint64_t now = now_ns();
	struct hconn *hc, *next;

	for (hc = h->idle.next; hc != &h->idle; hc = next) {
		next = hc->next;
		if (h->open - h->closing <= h->srv->opt.http_max_conns ||
		    now - hc->since < HTTP_QUIET_NS)
			return;
		if (rx_bytes(hc->fd) != hc->rx) {
			idle_del(hc); /* a request is arriving: conn_busy() takes it */
			continue;
		}
		conn_close(h, hc);
		h->evicted++;
	}
}

/* MHD_OPTION_NOTIFY_CONNECTION: a connection is accepted, or closed. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context,
			  enum MHD_ConnectionNotificationCode code)
{
	struct http *h = cls;
	struct hconn *hc = *socket_context;
	const union MHD_ConnectionInfo *ci;
	bool wake;

	if (code == MHD_CONNECTION_NOTIFY_STARTED) {
		ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
		if (!ci)
			return;
		hc = calloc(1, sizeof(*hc));
		if (!hc) {
			shutdown(ci->connect_fd, SHUT_RDWR); /* untracked: not served */
			return;
		}
		hc->h = h;
		hc->fd = ci->connect_fd;
		*socket_context = hc;
		pthread_mutex_lock(&h->mu);
		h->open++;
		idle_add(h, hc, 0);
		evict(h);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	pthread_mutex_lock(&h->mu);
	if (--h->accepted < h->hard)
		pthread_cond_signal(&h->room); /* the acceptor may take the next one */
	if (!hc) {
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (hc->idle)
		idle_del(hc);
	h->open--;
	if (hc->evicted)
		h->closing--;
	wake = hc->linger;
	pthread_mutex_unlock(&h->mu);
	free(hc);
	*socket_context = NULL;
	if (wake)
		rk_loop_wake(h->srv->loop); /* the drain waits for this (http_busy()) */
}

static struct hconn *conn_of(struct MHD_Connection *c)
{
	const union MHD_ConnectionInfo *ci =
		MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);

	return ci ? ci->socket_context : NULL;
}

/*
 * A request on @c begins (its headers are in) or ends (on_completed()); @cn
 * is its state. A completion that begins is admitted, or marked full when
 * --http-max-conns others are being answered.
 */
static void conn_busy(struct MHD_Connection *c, struct conn *cn, bool completion, bool busy)
{
	struct hconn *hc = conn_of(c);
	struct http *h;
	uint64_t rx = 0;
	bool wake;

	if (!hc)
		return;
	h = hc->h;
	if (!busy && !hc->evicted)
		rx = rx_bytes(hc->fd); /* not under mu: a syscall */
	pthread_mutex_lock(&h->mu);
	if (busy) {
		h->busy++;
		if (hc->idle)
			idle_del(hc);
		if (completion && h->served >= h->srv->opt.http_max_conns) {
			cn->full = true;
			h->full++;
		} else if (completion) {
			cn->admitted = true;
			h->served++;
		}
		pthread_mutex_unlock(&h->mu);
		return;
	}
	h->busy--;
	if (cn->admitted)
		h->served--;
	if (!hc->evicted) {
		idle_add(h, hc, rx);
		hc->linger = h->stopping; /* http_busy() waits for its client */
	}
	evict(h); /* clients may wait in the backlog for a slot */
	wake = h->stopping && !h->busy;
	pthread_mutex_unlock(&h->mu);
	if (wake)
		rk_loop_wake(h->srv->loop); /* the drain waits for this (http_busy()) */
}

/* A request on @c waits for the model: no inactivity timeout meanwhile (@waiting). */
static void conn_wait(struct MHD_Connection *c, const struct server *srv, bool waiting)
{
	/* back from 0, libmicrohttpd counts the inactivity from now */
	MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT,
				  waiting ? 0u : srv->opt.http_idle_s);
}

/* ---- libmicrohttpd's own errors ------------------------------------------------------ */

/*
 * libmicrohttpd answers some requests itself, before any handler of ours
 * runs: a malformed request line or header (400), a header or URL over its
 * memory limit (431, 414), a Content-Length or chunk it cannot hold (413), an
 * HTTP version it does not speak (505). Those answers are HTML, and no option
 * changes them (0.9.75, Debian 12's, through 1.0.1). It queues each one
 * through its exported MHD_queue_response(), which it calls through its PLT,
 * so rk-serve defines MHD_queue_response() itself: the library's calls come
 * here and queue the same status in OpenAI's shape. rk-serve's own replies
 * call the library's definition (mhd_queue, found by dlsym(RTLD_NEXT)), so
 * every call that reaches this one is the library's own. A request line
 * without a space is not HTTP at all (a TLS ClientHello, say): libmicrohttpd
 * closes that connection without an answer, and nothing can hook it.
 */
typedef MHD_RESULT (*mhd_queue_fn)(struct MHD_Connection *c, unsigned int status,
				   struct MHD_Response *resp);
static mhd_queue_fn mhd_queue;

static const char *mhd_error_msg(unsigned int status)
{
	switch (status) {
	case MHD_HTTP_BAD_REQUEST:
		return "malformed HTTP request";
	case MHD_HTTP_URI_TOO_LONG:
		return "request URL too long";
	case MHD_HTTP_REQUEST_HEADER_FIELDS_TOO_LARGE:
		return "request header fields too large";
	case 413: /* content too large */
		return "request body too large";
	case MHD_HTTP_HTTP_VERSION_NOT_SUPPORTED:
		return "HTTP version not supported";
	default:
		return status >= 500 ? "internal server error" : "bad request";
	}
}

MHD_RESULT MHD_queue_response(struct MHD_Connection *c, unsigned int status,
			      struct MHD_Response *resp)
{
	struct MHD_Response *own;
	MHD_RESULT ret;
	json_t *j;
	char *s;

	if (status < 400)
		return mhd_queue(c, status, resp);
	j = error_json(status, NULL, mhd_error_msg(status));
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	own = s ? MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE) : NULL;
	if (!own) {
		free(s);
		return mhd_queue(c, status, resp); /* no memory: its own answer, still one */
	}
	MHD_add_response_header(own, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	ret = mhd_queue(c, status, own);
	MHD_destroy_response(own); /* the library destroys @resp itself */
	return ret;
}

/* ---- connections: replies ----------------------------------------------------------- */

/* The library's MHD_queue_response(), and once the server stops, the reply closes its
 * connection. */
static MHD_RESULT queue_response(struct MHD_Connection *c, unsigned int status,
				 struct MHD_Response *resp)
{
	struct hconn *hc = conn_of(c);
	bool stopping = false;

	if (hc) {
		pthread_mutex_lock(&hc->h->mu);
		stopping = hc->h->stopping;
		pthread_mutex_unlock(&hc->h->mu);
	}
	if (stopping)
		MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	return mhd_queue(c, status, resp);
}

/*
 * A completion past --http-max-conns: 503 in OpenAI's shape, with Retry-After,
 * and its connection closes (its body has been read: no reset for unread
 * bytes), which makes room for the next client.
 */
static MHD_RESULT reply_full(struct server *srv, struct MHD_Connection *c)
{
	struct MHD_Response *resp;
	char msg[160], *s;
	MHD_RESULT ret;
	json_t *j;

	snprintf(msg, sizeof(msg), "The server is full: it answers %u completions at once "
		 "(--http-max-conns). Retry after %u s.", srv->opt.http_max_conns,
		 HTTP_RETRY_AFTER_S);
	j = error_json(MHD_HTTP_SERVICE_UNAVAILABLE, "server_full", msg);
	s = j ? json_dumps(j, JSON_COMPACT) : NULL;
	json_decref(j);
	if (!s)
		return MHD_NO;
	resp = MHD_create_response_from_buffer(strlen(s), s, MHD_RESPMEM_MUST_FREE);
	if (!resp) {
		free(s);
		return MHD_NO;
	}
	snprintf(msg, sizeof(msg), "%u", HTTP_RETRY_AFTER_S);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
	MHD_add_response_header(resp, MHD_HTTP_HEADER_RETRY_AFTER, msg);
	MHD_add_response_header(resp, MHD_HTTP_HEADER_CONNECTION, "close");
	ret = mhd_queue(c, MHD_HTTP_SERVICE_UNAVAILABLE, resp);
	MHD_destroy_response(resp);
	return ret;
}

static void http_free(struct server *srv)
{
	struct http *h = srv->http;

	if (h->lfd >= 0)
		close(h->lfd);
	if (h->stop_efd >= 0)
		close(h->stop_efd);
	pthread_cond_destroy(&h->room);
	pthread_mutex_destroy(&h->mu);
	free(h);
	srv->http = NULL;
}

/* /v1/stats: the connection counters. */
static json_t *http_json(struct server *srv)
{
	struct http *h = srv->http;
	json_t *j;

	pthread_mutex_lock(&h->mu);
	j = json_pack("{s:i,s:i,s:I,s:I}", "connections", (int)(h->open - h->closing), "max_conns",
		      (int)srv->opt.http_max_conns, "evicted", (json_int_t)h->evicted, "full",
		      (json_int_t)h->full);
	pthread_mutex_unlock(&h->mu);
	return j;
}

/* The access handler (an HTTP connection's thread). */
static MHD_RESULT on_http(void *cls, struct MHD_Connection *c, const char *url, const char *method,
			  const char *version, const char *upload, size_t *upload_size,
			  void **con_cls)
{
	struct server *srv = cls;
	struct conn *cn = *con_cls;
	bool post = !strcmp(method, MHD_HTTP_METHOD_POST);
	bool get = !strcmp(method, MHD_HTTP_METHOD_GET);
	bool completion = !strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions");

	(void)version;
	if (!cn) {
		/* a request's first call, its headers read: the connection is busy until
		 * on_completed() */
		cn = calloc(1, sizeof(*cn));
		if (!cn)
			return MHD_NO;
		*con_cls = cn;
		conn_busy(c, cn, post && completion, true);
		if (post && completion)
			return MHD_YES; /* the body follows in later calls */
	}
	if (completion) {
		if (!post)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
		if (*upload_size) {
			size_t n = *upload_size;

			*upload_size = 0;
			if (cn->full || cn->too_big || cn->len + n > MAX_BODY) {
				cn->too_big = true;
				return MHD_YES;
			}
			if (cn->len + n + 1 > cn->cap) {
				size_t cap = (cn->len + n + 1) * 2;
				char *p = realloc(cn->body, cap);

				if (!p)
					return MHD_NO;
				cn->body = p;
				cn->cap = cap;
			}
			memcpy(cn->body + cn->len, upload, n);
			cn->len += n;
			return MHD_YES;
		}
		if (cn->full)
			return reply_full(srv, c);
		return handle_completion(srv, c, cn,
					 url[4] == 'c' && url[5] == 'h' ? API_CHAT : API_COMPLETION);
	}
	if (!strcmp(url, "/v1/models") || !strcmp(url, "/metrics")) {
		if (!get)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
		if (url[1] == 'm')
			return handle_metrics(srv, c);
		return reply(c, MHD_HTTP_OK, oai_models(srv, (uint64_t)g_started));
	}
	if (!strcmp(url, "/v1/stats") || !strcmp(url, "/health")) {
		if (!get)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use GET");
		return url[1] == 'h' ? handle_health(srv, c) : handle_stats(srv, c);
	}
	return reply_error(c, MHD_HTTP_NOT_FOUND, "no such endpoint");
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
			 enum MHD_RequestTerminationCode toe)
{
	struct conn *cn = *con_cls;

	(void)cls;
	(void)toe;
	hung_up_close = false;
	if (cn) {
		conn_busy(c, cn, false, false);
		free(cn->body);
		free(cn);
		*con_cls = NULL;
	}
}

static void http_log(void *cls, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));

/* libmicrohttpd's own messages, marked as such (any HTTP thread) */
static void http_log(void *cls, const char *fmt, va_list ap)
{
	(void)cls;
	if (hung_up_close)
		return;
	fputs(PROG ": libmicrohttpd: ", stderr);
	vfprintf(stderr, fmt, ap);
}

/*
 * The descriptors this process may open (raised to its hard limit first) bound
 * the connections: each takes two while it streams (its socket and its
 * request's eventfd), HTTP_FD_RESERVE left for the rest. libmicrohttpd's own
 * limit is that room; rk-serve's (http.hard) is HTTP_HARD_CONNS(--http-max-conns)
 * within it.
 */
static unsigned int fd_room(const struct server *srv)
{
	unsigned int want = HTTP_HARD_CONNS(srv->opt.http_max_conns);
	struct rlimit rl;
	rlim_t room;

	if (getrlimit(RLIMIT_NOFILE, &rl))
		return want;
	if (rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		if (setrlimit(RLIMIT_NOFILE, &rl))
			getrlimit(RLIMIT_NOFILE, &rl);
	}
	if (rl.rlim_cur == RLIM_INFINITY || rl.rlim_cur / 2 > (rlim_t)UINT_MAX / 2)
		return UINT_MAX / 2;
	room = rl.rlim_cur / 2 > HTTP_FD_RESERVE ? rl.rlim_cur / 2 - HTTP_FD_RESERVE : 1;
	if (room < want)
		fprintf(stderr, PROG ": %llu descriptors allow %llu HTTP connections, not %u "
			"(--http-max-conns %u); raise ulimit -n\n", (unsigned long long)rl.rlim_cur,
			(unsigned long long)room, want, srv->opt.http_max_conns);
	return (unsigned int)room;
}

/* Hand accepted socket @fd to libmicrohttpd, counted in http.accepted until it closes. */
static void conn_add(struct http *h, int fd, const struct sockaddr_storage *ss, socklen_t len)
{
	pthread_mutex_lock(&h->mu);
	h->accepted++;
	pthread_mutex_unlock(&h->mu);
	/* on failure the library has closed @fd, and no notification comes */
	if (MHD_add_connection(h->d, fd, (const struct sockaddr *)ss, len) != MHD_YES) {
		pthread_mutex_lock(&h->mu);
		h->accepted--;
		pthread_mutex_unlock(&h->mu);
	}
}

/*
 * The acceptor thread: rk-serve accepts, not libmicrohttpd, whose listening
 * thread (thread per connection, poll()) accepts past its connection limit and
 * closes at once what it cannot take. This one stops accepting at http.hard
 * connections, so that clients wait in the listen backlog until one closes
 * (on_connection() signals http.room), and stops for good at http_quiesce().
 * While it waits, nothing else may run evict(): it does, every
 * HTTP_QUIET_NS / 4, so that quiet connections make room.
 */
static void *acceptor(void *arg)
{
	struct http *h = arg;
	struct sockaddr_storage ss;
	struct pollfd p[2];
	struct timespec ts;
	uint64_t t;
	socklen_t len;
	bool stop;
	int fd;

	for (;;) {
		pthread_mutex_lock(&h->mu);
		while (h->accepted >= h->hard && !h->acc_stop) {
			evict(h);
			t = now_ns() + HTTP_QUIET_NS / 4;
			ts = (struct timespec){ .tv_sec = (time_t)(t / 1000000000u),
						.tv_nsec = (long)(t % 1000000000u) };
			pthread_cond_timedwait(&h->room, &h->mu, &ts); /* CLOCK_MONOTONIC */
		}
		stop = h->acc_stop;
		pthread_mutex_unlock(&h->mu);
		if (stop)
			return NULL;
		p[0] = (struct pollfd){ .fd = h->lfd, .events = POLLIN };
		p[1] = (struct pollfd){ .fd = h->stop_efd, .events = POLLIN };
		if (poll(p, 2, -1) < 0 || !(p[0].revents & POLLIN))
			continue; /* EINTR, or the stop: seen above */
		len = sizeof(ss);
		fd = accept4(h->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
		if (fd < 0) {
			/* out of descriptors or memory: the backlog waits, not a busy loop */
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)
				poll(&p[1], 1, HTTP_ACCEPT_RETRY_MS);
			continue;
		}
		conn_add(h, fd, &ss, len);
	}
}

/* The listening socket of --http (IPv6: v6 only, as libmicrohttpd's was). Return: fd or -errno. */
static int listen_on(const struct sockaddr_storage *ss, socklen_t sslen)
{
	int fd = socket(ss->ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0), one = 1;
	int err;

	if (fd < 0)
		return -errno;
	if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) ||
	    (ss->ss_family == AF_INET6 &&
	     setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one))) ||
	    bind(fd, (const struct sockaddr *)ss, sslen) || listen(fd, (int)HTTP_BACKLOG)) {
		err = -errno;
		close(fd);
		return err;
	}
	return fd;
}

int http_start(struct server *srv)
{
	struct sockaddr_storage ss;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	pthread_condattr_t ca;
	socklen_t sslen;
	struct http *h;
	/* poll(), not select(): descriptors past FD_SETSIZE are fine; the ITC wakes its
	 * thread for each connection the acceptor adds */
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG |
			     MHD_USE_NO_LISTEN_SOCKET;
	int err;

	if (parse_listen(srv->opt.http, &ss, &sslen))
		return -EINVAL; /* checked at startup; cannot happen */
	mhd_queue = (mhd_queue_fn)dlsym(RTLD_NEXT, "MHD_queue_response");
	if (!mhd_queue) {
		fprintf(stderr, PROG ": libmicrohttpd's MHD_queue_response: %s\n", dlerror());
		return -ENOSYS;
	}
	g_started = (int64_t)time(NULL);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	h->lfd = h->stop_efd = -1;
	err = pthread_mutex_init(&h->mu, NULL);
	if (err) {
		free(h);
		return -err;
	}
	pthread_condattr_init(&ca);
	err = pthread_condattr_setclock(&ca, CLOCK_MONOTONIC); /* now_ns()'s */
	if (!err)
		err = pthread_cond_init(&h->room, &ca);
	pthread_condattr_destroy(&ca);
	if (err) {
		pthread_mutex_destroy(&h->mu);
		free(h);
		return -err;
	}
	h->srv = srv;
	h->mhd_limit = fd_room(srv);
	h->hard = HTTP_HARD_CONNS(srv->opt.http_max_conns);
	if (h->hard > h->mhd_limit)
		h->hard = h->mhd_limit;
	h->idle.prev = h->idle.next = &h->idle;
	srv->http = h;
	h->lfd = listen_on(&ss, sslen);
	if (h->lfd < 0) {
		err = h->lfd;
		fprintf(stderr, PROG ": cannot serve HTTP on %s: %s\n", srv->opt.http,
			strerror(-err));
		goto err_free;
	}
	h->stop_efd = eventfd(0, EFD_CLOEXEC);
	if (h->stop_efd < 0) {
		err = -errno;
		goto err_free;
	}
	/* the logger first, so that it gets every message */
	h->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_http, srv, MHD_OPTION_EXTERNAL_LOGGER, http_log, srv,
		MHD_OPTION_NOTIFY_COMPLETED, on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION,
		on_connection, h, MHD_OPTION_CONNECTION_LIMIT, h->mhd_limit,
		MHD_OPTION_CONNECTION_TIMEOUT,
		srv->opt.http_idle_s, MHD_OPTION_END);
	if (!h->d) {
		err = -(errno ? errno : ENOMEM);
		fprintf(stderr, PROG ": cannot start libmicrohttpd: %s\n", strerror(-err));
		goto err_free;
	}
	err = -pthread_create(&h->acc_thread, NULL, acceptor, h);
	if (err) {
		MHD_stop_daemon(h->d);
		goto err_free;
	}
	h->acc_up = true;
	/* port 0 picks a free port: say which */
	sslen = sizeof(ss);
	if (getsockname(h->lfd, (struct sockaddr *)&ss, &sslen) ||
	    getnameinfo((struct sockaddr *)&ss, sslen, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(srv->http_url, sizeof(srv->http_url), "http://%s", srv->opt.http);
		return 0;
	}
	snprintf(srv->http_url, sizeof(srv->http_url),
		 ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", host, port);
	return 0;
err_free:
	http_free(srv);
	return err;
}

/* Stop the acceptor thread; the listening socket stays open. */
static void acceptor_stop(struct http *h)
{
	if (!h->acc_up)
		return;
	pthread_mutex_lock(&h->mu);
	h->acc_stop = true;
	pthread_cond_broadcast(&h->room);
	pthread_mutex_unlock(&h->mu);
	eventfd_write(h->stop_efd, 1);
	pthread_join(h->acc_thread, NULL);
	h->acc_up = false;
}

void http_quiesce(struct server *srv)
{
	struct http *h = srv->http;
	struct sockaddr_storage ss;
	socklen_t len;
	unsigned int room = 0;
	const union MHD_DaemonInfo *di;
	int fd;

	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stopping = true; /* from here on every reply closes its connection */
	pthread_mutex_unlock(&h->mu);
	acceptor_stop(h);
	/*
	 * The clients in the listen backlog have connected: they are served too
	 * (a 503), up to libmicrohttpd's limit, so only a client that connects
	 * after the close below is refused, and none is reset.
	 */
	di = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_CURRENT_CONNECTIONS);
	if (di && h->mhd_limit > di->num_connections)
		room = h->mhd_limit - di->num_connections;
	for (; room; room--) {
		len = sizeof(ss);
		fd = accept4(h->lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
		if (fd < 0 && errno == EINTR)
			continue;
		if (fd < 0)
			break; /* EAGAIN: the backlog is empty */
		conn_add(h, fd, &ss, len);
	}
	/* stop listening now: a client that connects from here on is refused */
	shutdown(h->lfd, SHUT_RDWR);
	close(h->lfd);
	h->lfd = -1;
}

bool http_busy(struct server *srv)
{
	struct http *h = srv->http;
	struct hconn *hc;
	bool busy;
	char c;

	if (!h)
		return false;
	pthread_mutex_lock(&h->mu);
	busy = h->busy > 0;
	/*
	 * Stopping, idle connections are waited for too when a request is
	 * arriving on one (a client that connected just before the listener
	 * closed, or one that sends on its keep-alive connection), so that it
	 * gets its answer (a 503 that closes the connection) and not a reset from
	 * MHD_stop_daemon(); and while a connection whose request ended during the
	 * stop is open: its client is active, and may send again at once.
	 * Connections idle since before the stop are not waited for.
	 */
	for (hc = h->idle.next; h->stopping && !busy && hc != &h->idle; hc = hc->next)
		busy = hc->linger || recv(hc->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
	pthread_mutex_unlock(&h->mu);
	return busy;
}

void http_stop(struct server *srv)
{
	struct http *h = srv->http;

	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	if (h->busy)
		fprintf(stderr, PROG ": %u HTTP request(s) still being answered at the end of the "
			"drain: cut\n", h->busy);
	pthread_mutex_unlock(&h->mu);
	acceptor_stop(h); /* stopped already, unless http_quiesce() did not run */
	MHD_stop_daemon(h->d); /* every connection closed: on_connection() ran */
	http_free(srv);
}

void http_init(void)
{
	/* so that no jansson hash seeding races between the HTTP threads */
	json_object_seed(0);
}
