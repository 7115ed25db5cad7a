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
 * itself so that idle connections cannot lock clients out, and drains the
 * requests in flight before the server stops (see "connections").
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

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
static MHD_RESULT reply_error(struct MHD_Connection *c, unsigned int status, const char *msg)
{
	struct oai_error e = { .status = status,
			       .type = status >= 500 ? "server_error" : "invalid_request_error" };

	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return reply(c, status, oai_error_json(&e));
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
	ret = MHD_queue_response(c, MHD_HTTP_OK, resp);
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
 * --http-max-conns itself instead: while more connections are open than that,
 * the one idle longest is shut down (as nginx reuses its keep-alive
 * connections). libmicrohttpd's own limit is twice as high: room for the
 * connections accepted while the ones shut down are still closing, and for
 * requests past --http-max-conns when every connection is busy (a busy one is
 * never shut down). A connection is idle from its accept, or from the end of
 * its last request, until the headers of its next request are in. Idle
 * connections also time out after --http-idle-timeout (libmicrohttpd's
 * inactivity timeout, which a request waiting for the model turns off:
 * sreq_wait()).
 *
 * Shutdown: once http_quiesce() has run, every reply closes its connection,
 * and http_busy() says whether a request is still being answered, arriving,
 * or may come from a client whose request just ended, so that the leader's
 * drain lets each stream end and each request get its reply (a 503 for the
 * new ones) before MHD_stop_daemon() cuts the connections; the last request to
 * end wakes the loop.
 *
 * Threads: on_connection() runs on libmicrohttpd's listening thread (and in
 * MHD_stop_daemon()), the rest on connection threads; all under http.mu.
 */
struct hconn {
	struct hconn *prev, *next; /* on http.idle while idle, the one idle longest first */
	struct http *h;
	MHD_socket fd;	/* open until on_connection() says CLOSED */
	bool idle;
	bool evicted;	/* shut down, not closed yet */
	bool linger;	/* its request ended while stopping: its client may send again */
};

struct http {
	struct MHD_Daemon *d;
	struct server *srv;
	pthread_mutex_t mu;
	/* under mu */
	struct hconn idle;    /* the list's head */
	unsigned int open;    /* connections accepted and not closed */
	unsigned int closing; /* ...of which shut down past the limit */
	unsigned int busy;    /* requests from their first call to on_completed() */
	uint64_t evicted;
	bool stopping;
};

static void idle_add(struct http *h, struct hconn *hc)
{
	hc->prev = h->idle.prev;
	hc->next = &h->idle;
	h->idle.prev->next = hc;
	h->idle.prev = hc;
	hc->idle = true;
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
 * Past --http-max-conns: shut down the connection idle longest, unless it is
 * @keep (the one just accepted). Its thread then sees the end of its input and
 * closes it. With h->mu held.
 */
static void evict(struct http *h, const struct hconn *keep)
{
	struct hconn *hc = h->idle.next;

	if (h->open - h->closing <= h->srv->opt.http_max_conns || hc == &h->idle || hc == keep)
		return;
	conn_close(h, hc);
	h->evicted++;
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
		idle_add(h, hc);
		evict(h, hc);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	if (!hc)
		return;
	pthread_mutex_lock(&h->mu);
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

/* A request on @c begins (its headers are in) or ends (on_completed()). */
static void conn_busy(struct MHD_Connection *c, bool busy)
{
	struct hconn *hc = conn_of(c);
	struct http *h;
	bool wake;

	if (!hc)
		return;
	h = hc->h;
	pthread_mutex_lock(&h->mu);
	if (busy) {
		h->busy++;
		if (hc->idle)
			idle_del(hc);
		pthread_mutex_unlock(&h->mu);
		return;
	}
	h->busy--;
	if (!hc->evicted) {
		idle_add(h, hc);
		hc->linger = h->stopping; /* http_busy() waits for its client */
	}
	evict(h, NULL); /* clients may wait in the backlog for a slot */
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

/* MHD_queue_response(), and once the server stops, the reply closes its connection. */
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
	return MHD_queue_response(c, status, resp);
}

static void http_free(struct server *srv)
{
	pthread_mutex_destroy(&srv->http->mu);
	free(srv->http);
	srv->http = NULL;
}

/* /v1/stats: the connection counters. */
static json_t *http_json(struct server *srv)
{
	struct http *h = srv->http;
	json_t *j;

	pthread_mutex_lock(&h->mu);
	j = json_pack("{s:i,s:i,s:I}", "connections", (int)(h->open - h->closing), "max_conns",
		      (int)srv->opt.http_max_conns, "evicted", (json_int_t)h->evicted);
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

	(void)version;
	if (!cn) {
		/* a request's first call, its headers read: the connection is busy until
		 * on_completed() */
		cn = calloc(1, sizeof(*cn));
		if (!cn)
			return MHD_NO;
		*con_cls = cn;
		conn_busy(c, true);
		if (post && (!strcmp(url, "/v1/completions") ||
			     !strcmp(url, "/v1/chat/completions")))
			return MHD_YES; /* the body follows in later calls */
	}
	if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions")) {
		if (!post)
			return reply_error(c, MHD_HTTP_METHOD_NOT_ALLOWED, "use POST");
		if (*upload_size) {
			size_t n = *upload_size;

			*upload_size = 0;
			if (cn->too_big || cn->len + n > MAX_BODY) {
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
		free(cn->body);
		free(cn);
		*con_cls = NULL;
		conn_busy(c, false);
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

int http_start(struct server *srv)
{
	struct sockaddr_storage ss;
	const union MHD_DaemonInfo *info;
	char host[NI_MAXHOST], port[NI_MAXSERV];
	socklen_t sslen;
	struct http *h;
	/* poll(), not select(): descriptors past FD_SETSIZE are fine */
	unsigned int flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_THREAD_PER_CONNECTION |
			     MHD_USE_POLL | MHD_USE_ITC | MHD_USE_ERROR_LOG;
	int err;

	if (parse_listen(srv->opt.http, &ss, &sslen))
		return -EINVAL; /* checked at startup; cannot happen */
	if (ss.ss_family == AF_INET6)
		flags |= MHD_USE_IPv6;
	g_started = (int64_t)time(NULL);
	h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	err = pthread_mutex_init(&h->mu, NULL);
	if (err) {
		free(h);
		return -err;
	}
	h->srv = srv;
	h->idle.prev = h->idle.next = &h->idle;
	srv->http = h;
	/* the logger first, so that it gets every message */
	h->d = MHD_start_daemon(
		flags, 0, NULL, NULL, on_http, srv, MHD_OPTION_EXTERNAL_LOGGER, http_log, srv,
		MHD_OPTION_SOCK_ADDR, (struct sockaddr *)&ss, MHD_OPTION_NOTIFY_COMPLETED,
		on_completed, srv, MHD_OPTION_NOTIFY_CONNECTION, on_connection, h,
		MHD_OPTION_CONNECTION_LIMIT, HTTP_HARD_CONNS(srv->opt.http_max_conns),
		MHD_OPTION_CONNECTION_TIMEOUT, srv->opt.http_idle_s, MHD_OPTION_END);
	if (!h->d) {
		err = errno ? errno : EADDRINUSE;
		fprintf(stderr, PROG ": cannot serve HTTP on %s: %s\n", srv->opt.http,
			strerror(err));
		http_free(srv);
		return -err;
	}
	/* port 0 picks a free port: say which */
	info = MHD_get_daemon_info(h->d, MHD_DAEMON_INFO_LISTEN_FD);
	sslen = sizeof(ss);
	if (!info || getsockname(info->listen_fd, (struct sockaddr *)&ss, &sslen) ||
	    getnameinfo((struct sockaddr *)&ss, sslen, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV)) {
		snprintf(srv->http_url, sizeof(srv->http_url), "http://%s", srv->opt.http);
		return 0;
	}
	snprintf(srv->http_url, sizeof(srv->http_url),
		 ss.ss_family == AF_INET6 ? "http://[%s]:%s" : "http://%s:%s", host, port);
	return 0;
}

void http_quiesce(struct server *srv)
{
	struct http *h = srv->http;
	struct sockaddr_storage ss;
	socklen_t len;
	MHD_socket fd, s;

	if (!h)
		return;
	pthread_mutex_lock(&h->mu);
	h->stopping = true; /* from here on every reply closes its connection */
	pthread_mutex_unlock(&h->mu);
	fd = MHD_quiesce_daemon(h->d);
	if (fd == MHD_INVALID_SOCKET)
		return;
	/*
	 * The clients in the listen backlog have connected: they are served too
	 * (libmicrohttpd frees each one it cannot take), so only a client that
	 * connects after the close below is refused, and none is reset.
	 */
	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK) == 0) {
		for (;;) {
			len = sizeof(ss);
			s = accept4(fd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC);
			if (s < 0 && errno == EINTR)
				continue;
			if (s < 0)
				break; /* EAGAIN: the backlog is empty */
			MHD_add_connection(h->d, s, (struct sockaddr *)&ss, len);
		}
	}
	/*
	 * Stop listening now: close() alone leaves the socket listening while
	 * libmicrohttpd's thread, woken by the quiesce, is still in its poll()
	 * on it, and connections made meanwhile would be reset later.
	 */
	shutdown(fd, SHUT_RDWR);
	close(fd);
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
	MHD_stop_daemon(h->d); /* every connection closed: on_connection() ran */
	http_free(srv);
}

void http_init(void)
{
	/* so that no jansson hash seeding races between the HTTP threads */
	json_object_seed(0);
}
