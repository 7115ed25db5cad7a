/* SPDX-License-Identifier: MIT */
/*
 * rk-load: the load client of rk-serve.
 *
 *   rk-load --url http://127.0.0.1:8800 --streams 1,4,8 --modes greedy,sampled \
 *           --draft plain,drafted --requests 16 --max-tokens 64 --prompt-set fixed
 *
 * For every cell (streams x mode x draft) it runs C client threads, each
 * sending its share of the cell's requests back to back (thread s sends
 * requests s, s + C, ...) over its own keep-alive connection, and reads the
 * server-sent events as they come. Request i is the same in every cell of a
 * mode (prompt i mod the set, sampling seed 1000 + i), so the cell's token
 * hash, over every request's tokens in request order, does not depend on
 * concurrency or drafting: cells of one mode must agree, and rk-load exits 3
 * when they do not. CPU seconds per rank come from GET /v1/stats before and
 * after each cell.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <curl/curl.h>
#include <jansson.h>

#include "cli.h"
#include "clock.h"
#include "toy.h"

#define PROG	     "rk-load"
#define MAX_LIST     8
#define MAX_RUNS     16
#define MAX_RANKS    256
#define SEED_BASE    1000u
#define SAMPLE_TOP_K 40u
#define SAMPLE_TEMP  0.8
#define SAMPLE_TOP_P 0.95

static const char *const fixed_prompts[] = {
	"The quick brown fox jumps over the lazy dog.",
	"Once upon a time, in a land far away,",
	"It was the best of times, it was the worst of times,",
	"Call me Ishmael.",
	"To be, or not to be, that is the question:",
	"All happy families are alike;",
	"The sky above the port was the color of television,",
	"In the beginning",
};

/* Repetitive text: prompt-lookup drafting finds its n-grams. */
static const char *const repeat_prompts[] = {
	"abcabcabcabcabcabcabcabcabcabc",
	"one two one two one two one two one two",
	"la la la la la la la la la la la la",
	"0101010101010101010101010101",
};

struct options {
	char url[512];
	uint32_t streams[MAX_LIST], n_streams;
	bool modes[2];	/* greedy, sampled */
	bool drafts[2]; /* plain, drafted */
	unsigned int draft_k;
	unsigned int requests;
	unsigned int max_tokens;
	unsigned int runs;
	unsigned int idle;
	unsigned int timeout;
	const char *const *prompts;
	unsigned int n_prompts;
	const char *prompt_set;
	bool print;
	bool no_stream;
	bool check_ref;
	bool hang_up;
};

/* One request's result. */
struct result {
	uint32_t *toks; /* [max_tokens] */
	uint32_t n;
	bool done; /* [DONE] seen (or the JSON reply parsed) */
	long status;
	char err[256];
};

struct cell {
	unsigned int streams;
	bool sampled, drafted;
};

struct run_ctx {
	const struct options *o;
	const struct cell *c;
	struct result *res; /* [requests] */
	unsigned int stream;
};

/* What the write callback parses. */
struct reader {
	struct result *r;
	bool hang_up; /* abort the transfer after the first tokens */
	uint32_t cap;
	char *buf;
	size_t len, cap_buf;
	bool sse;
};

static void seterr(struct result *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void seterr(struct result *r, const char *fmt, ...)
{
	va_list ap;

	if (r->err[0])
		return; /* the first error is the cause */
	va_start(ap, fmt);
	vsnprintf(r->err, sizeof(r->err), fmt, ap);
	va_end(ap);
}

/* A reply or chunk in OpenAI's shape: the tokens are rk-serve's choices[0].token_ids. */
static void take_tokens(struct reader *rd, json_t *ev)
{
	json_t *e = json_object_get(ev, "error"), *msg = json_object_get(e, "message");
	json_t *c = json_array_get(json_object_get(ev, "choices"), 0);
	json_t *a = json_object_get(c, "token_ids");
	struct result *r = rd->r;
	size_t i;

	if (e) {
		seterr(r, "server: %s", json_is_string(msg) ? json_string_value(msg) : "error");
		return;
	}
	if (json_is_array(json_object_get(ev, "choices")) && !c && json_object_get(ev, "usage"))
		return; /* the usage chunk */
	if (!json_is_array(a)) {
		seterr(r, "an event without token_ids");
		return;
	}
	for (i = 0; i < json_array_size(a); i++) {
		json_t *t = json_array_get(a, i);

		if (!json_is_integer(t) || json_integer_value(t) < 0) {
			seterr(r, "a token that is not a token id");
			return;
		}
		if (r->n == rd->cap) {
			seterr(r, "more tokens than max_tokens");
			return;
		}
		r->toks[r->n++] = (uint32_t)json_integer_value(t);
	}
}

/* One line of the event stream ("data: ..."; blank lines end events). */
static void sse_line(struct reader *rd, char *line, size_t n)
{
	json_error_t jerr;
	json_t *ev;

	if (n && line[n - 1] == '\r')
		n--;
	if (!n || n < 6 || memcmp(line, "data: ", 6))
		return;
	line += 6;
	n -= 6;
	if (n == 6 && !memcmp(line, "[DONE]", 6)) {
		rd->r->done = true;
		return;
	}
	ev = json_loadb(line, n, 0, &jerr);
	if (!ev) {
		seterr(rd->r, "a malformed event: %s", jerr.text);
		return;
	}
	take_tokens(rd, ev);
	json_decref(ev);
}

static size_t on_data(char *p, size_t size, size_t nmemb, void *arg)
{
	struct reader *rd = arg;
	size_t n = size * nmemb, start, i;

	if (rd->len + n + 1 > rd->cap_buf) {
		size_t cap = (rd->len + n + 1) * 2;
		char *b = realloc(rd->buf, cap);

		if (!b)
			return 0; /* curl fails the transfer */
		rd->buf = b;
		rd->cap_buf = cap;
	}
	memcpy(rd->buf + rd->len, p, n);
	rd->len += n;
	if (!rd->sse)
		return n;
	for (start = 0, i = 0; i < rd->len; i++) {
		if (rd->buf[i] != '\n')
			continue;
		sse_line(rd, rd->buf + start, i - start);
		start = i + 1;
		if (rd->hang_up && rd->r->n)
			return 0; /* curl drops the connection: CURLE_WRITE_ERROR */
	}
	memmove(rd->buf, rd->buf + start, rd->len - start);
	rd->len -= start;
	return n;
}

static void prompt_tokens(const char *text, uint32_t V, uint32_t *out, uint32_t *n)
{
	uint32_t i;

	for (i = 0; text[i]; i++)
		out[i] = (uint8_t)text[i] % V;
	*n = i;
}

static json_t *request_body(const struct options *o, const struct cell *c, unsigned int i)
{
	return json_pack("{s:s,s:i,s:f,s:i,s:f,s:I,s:i,s:b}", "prompt",
			 o->prompts[i % o->n_prompts], "max_tokens", (int)o->max_tokens,
			 "temperature", c->sampled ? SAMPLE_TEMP : 0.0, "top_k", (int)SAMPLE_TOP_K,
			 "top_p", SAMPLE_TOP_P, "seed", (json_int_t)(SEED_BASE + i), "draft_k",
			 c->drafted ? (int)o->draft_k : 0, "stream", !o->no_stream);
}

static void do_request(CURL *h, const struct options *o, const struct cell *c, unsigned int i,
		       struct result *r)
{
	struct reader rd = {
		.r = r, .cap = o->max_tokens, .sse = !o->no_stream, .hang_up = o->hang_up
	};
	struct curl_slist *hdr = NULL;
	json_t *body = request_body(o, c, i), *reply;
	json_error_t jerr;
	char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
	char url[600];
	CURLcode cc;

	json_decref(body);
	if (!s) {
		seterr(r, "out of memory");
		return;
	}
	snprintf(url, sizeof(url), "%s/v1/completions", o->url);
	hdr = curl_slist_append(hdr, "Content-Type: application/json");
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
	curl_easy_setopt(h, CURLOPT_POSTFIELDS, s);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &rd);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
	if (o->hang_up) {
		if (cc != CURLE_WRITE_ERROR || !r->n)
			seterr(r, "no tokens before hanging up: %s", curl_easy_strerror(cc));
	} else if (cc != CURLE_OK) {
		seterr(r, "%s", curl_easy_strerror(cc));
	} else if (r->status != 200) {
		if (rd.len)
			rd.buf[rd.len] = '\0';
		seterr(r, "HTTP %ld: %s", r->status, rd.len ? rd.buf : "");
	} else if (!rd.sse) {
		reply = json_loadb(rd.buf ? rd.buf : "", rd.len, 0, &jerr);
		if (!reply) {
			seterr(r, "a malformed reply: %s", jerr.text);
		} else {
			take_tokens(&rd, reply);
			r->done = true;
			json_decref(reply);
		}
	}
	if (rd.sse && !o->hang_up && r->status == 200 && !r->done) {
		/* the stream began and was never closed: that, whatever else went wrong */
		char cause[sizeof(r->err)];

		snprintf(cause, sizeof(cause), "%s", r->err[0] ? r->err : "end of the transfer");
		snprintf(r->err, sizeof(r->err), "the stream ended without [DONE] (%.200s)", cause);
	}
	if (!r->err[0] && !o->hang_up && r->n != o->max_tokens)
		seterr(r, "%" PRIu32 " tokens, expected %u", r->n, o->max_tokens);
	curl_slist_free_all(hdr);
	free(rd.buf);
	free(s);
}

static CURL *new_handle(const struct options *o)
{
	CURL *h = curl_easy_init();

	if (!h)
		return NULL;
	curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L); /* threads: no SIGALRM timeouts */
	curl_easy_setopt(h, CURLOPT_TIMEOUT, (long)o->timeout);
	curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT, 10L);
	curl_easy_setopt(h, CURLOPT_TCP_NODELAY, 1L);
	return h;
}

static void *stream_main(void *arg)
{
	struct run_ctx *x = arg;
	const struct options *o = x->o;
	CURL *h = new_handle(o);
	unsigned int i;

	for (i = x->stream; i < o->requests; i += x->c->streams) {
		if (!h) {
			seterr(&x->res[i], "curl_easy_init failed");
			continue;
		}
		do_request(h, o, x->c, i, &x->res[i]);
	}
	if (h)
		curl_easy_cleanup(h);
	return NULL;
}

/* ---- GET helpers ------------------------------------------------------------------ */

/* GET @path; return the parsed JSON (caller frees) or NULL with a message printed. */
static json_t *get_json(const struct options *o, const char *path, long *status)
{
	struct result r = { 0 };
	struct reader rd = { .r = &r };
	json_error_t jerr;
	json_t *j = NULL;
	char url[600];
	CURL *h = new_handle(o);
	CURLcode cc;

	if (!h)
		return NULL;
	snprintf(url, sizeof(url), "%s%s", o->url, path);
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &rd);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, status);
	if (cc != CURLE_OK)
		fprintf(stderr, PROG ": GET %s: %s\n", url, curl_easy_strerror(cc));
	else if (!(j = json_loadb(rd.buf ? rd.buf : "", rd.len, 0, &jerr)))
		fprintf(stderr, PROG ": GET %s: HTTP %ld, not JSON: %s\n", url, *status, jerr.text);
	curl_easy_cleanup(h);
	free(rd.buf);
	return j;
}

struct server_info {
	int world_size;
	uint32_t V, H;
	uint64_t seed;
};

static int get_info(const struct options *o, struct server_info *si)
{
	long status = 0;
	json_t *j = get_json(o, "/health", &status);
	json_int_t ws = 0, V = 0, H = 0, seed = 0;

	if (!j)
		return -EIO;
	if (status != 200 ||
	    json_unpack(j, "{s:I,s:I,s:I,s:I}", "world_size", &ws, "vocab", &V, "hidden", &H,
			"model_seed", &seed) ||
	    ws < 1 || ws > MAX_RANKS || V < 1 || H < 1) {
		fprintf(stderr, PROG ": GET /health: HTTP %ld, unexpected reply\n", status);
		json_decref(j);
		return -EIO;
	}
	si->world_size = (int)ws;
	si->V = (uint32_t)V;
	si->H = (uint32_t)H;
	si->seed = (uint64_t)seed;
	json_decref(j);
	return 0;
}

/* What a cell reads from /v1/stats before and after. */
struct snap {
	double cpu[MAX_RANKS]; /* each rank's CPU seconds so far */
	json_int_t rounds, drafted, accepted;
};

static int get_stats(const struct options *o, int world_size, struct snap *sn)
{
	long status = 0;
	json_t *j = get_json(o, "/v1/stats", &status), *ranks;
	int i;

	if (!j)
		return -EIO;
	ranks = json_object_get(j, "ranks");
	if (status != 200 || !json_is_array(ranks) || (int)json_array_size(ranks) != world_size ||
	    json_unpack(j, "{s:{s:I,s:I,s:I}}", "sched", "rounds", &sn->rounds, "drafted",
			&sn->drafted, "accepted", &sn->accepted)) {
		fprintf(stderr, PROG ": GET /v1/stats: HTTP %ld, unexpected reply\n", status);
		json_decref(j);
		return -EIO;
	}
	for (i = 0; i < world_size; i++)
		sn->cpu[i] = json_number_value(
			json_object_get(json_array_get(ranks, (size_t)i), "cpu_s"));
	json_decref(j);
	return 0;
}

/* --post / --get: one raw request, its status and body printed. */
static int raw_request(const struct options *o, const char *method, const char *arg)
{
	struct result r = { 0 };
	struct reader rd = { .r = &r };
	struct curl_slist *hdr = NULL;
	char url[1100];
	CURL *h = new_handle(o);
	CURLcode cc;
	long status = 0;

	if (!h)
		return 1;
	if (!strcmp(method, "POST")) {
		snprintf(url, sizeof(url), "%s/v1/completions", o->url);
		hdr = curl_slist_append(hdr, "Content-Type: application/json");
		curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdr);
		curl_easy_setopt(h, CURLOPT_POSTFIELDS, arg);
	} else {
		snprintf(url, sizeof(url), "%s%s", o->url, arg);
	}
	curl_easy_setopt(h, CURLOPT_URL, url);
	curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, on_data);
	curl_easy_setopt(h, CURLOPT_WRITEDATA, &rd);
	cc = curl_easy_perform(h);
	curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &status);
	curl_slist_free_all(hdr);
	curl_easy_cleanup(h);
	if (cc != CURLE_OK) {
		fprintf(stderr, PROG ": %s %s: %s\n", method, url, curl_easy_strerror(cc));
		free(rd.buf);
		return 1;
	}
	printf("HTTP %ld\n%.*s%s", status, (int)rd.len, rd.buf ? rd.buf : "",
	       rd.len && rd.buf[rd.len - 1] == '\n' ? "" : "\n");
	free(rd.buf);
	return 0;
}

/*
 * --hash: the cells' hash (toy_hash_tokens) of the token ids on stdin, so that
 * tokens another client got can be compared with a cell's. Return: the exit status.
 */
static int hash_stdin(void)
{
	uint32_t *t = NULL, *p;
	size_t n = 0, cap = 0;
	unsigned long long v;
	char hex[17];
	int c;

	while ((c = scanf("%llu", &v)) == 1) {
		if (v > UINT32_MAX) {
			fprintf(stderr, PROG ": --hash: %llu is not a token id\n", v);
			free(t);
			return 1;
		}
		if (n == cap) {
			cap = cap ? cap * 2 : 1024;
			p = realloc(t, cap * sizeof(*t));
			if (!p) {
				free(t);
				return 1;
			}
			t = p;
		}
		t[n++] = (uint32_t)v;
	}
	if (c != EOF || toy_hash_tokens(t, n, hex)) {
		fprintf(stderr, PROG ": --hash: expected token ids separated by white space\n");
		free(t);
		return 1;
	}
	printf("%s %zu\n", hex, n);
	free(t);
	return 0;
}

/* ---- cells ------------------------------------------------------------------------- */

struct cell_result {
	double tps[MAX_RUNS];
	double cpu[MAX_RUNS][MAX_RANKS];
	double rounds[MAX_RUNS];
	uint64_t drafted, accepted; /* over every run */
	char hash[17];
	unsigned int runs;
	uint64_t tokens;
};

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

static double median(const double *v, unsigned int n)
{
	double t[MAX_RUNS];

	memcpy(t, v, n * sizeof(*t));
	qsort(t, n, sizeof(*t), cmp_dbl);
	return n % 2 ? t[n / 2] : (t[n / 2 - 1] + t[n / 2]) / 2;
}

static const char *mode_name(bool sampled)
{
	return sampled ? "sampled" : "greedy";
}

static const char *draft_name(bool drafted)
{
	return drafted ? "drafted" : "plain";
}

/*
 * Check every request against toy_generate_ref() at TP1 (the model from
 * /health, the prompt and sampling as the server maps them).
 */
static int check_ref(const struct options *o, const struct server_info *si, const struct cell *c,
		     const struct result *res)
{
	uint32_t prompt[256], n_prompt, *ref = malloc(o->max_tokens * sizeof(*ref));
	unsigned int i, bad = 0;
	int ret;

	if (!ref)
		return -ENOMEM;
	for (i = 0; i < o->requests; i++) {
		struct toy_sampling s = { 0 };

		if (c->sampled) {
			s.top_k = SAMPLE_TOP_K;
			s.temperature = (float)SAMPLE_TEMP;
			s.top_p = (float)SAMPLE_TOP_P;
		}
		s.seed = SEED_BASE + i;
		prompt_tokens(o->prompts[i % o->n_prompts], si->V, prompt, &n_prompt);
		ret = toy_generate_ref(si->V, si->H, si->seed, prompt, n_prompt, o->max_tokens, &s,
				       ref);
		if (ret || memcmp(ref, res[i].toks, o->max_tokens * sizeof(*ref))) {
			fprintf(stderr,
				PROG ": request %u (%s, %s, %u streams) differs from the TP1 "
				     "reference\n",
				i, mode_name(c->sampled), draft_name(c->drafted), c->streams);
			bad++;
		}
	}
	free(ref);
	return bad ? -EPROTO : 0;
}

static int run_cell(const struct options *o, const struct server_info *si, const struct cell *c,
		    struct cell_result *cr)
{
	struct result *res = calloc(o->requests, sizeof(*res));
	struct run_ctx *ctx = calloc(c->streams, sizeof(*ctx));
	pthread_t *thr = calloc(c->streams, sizeof(*thr));
	uint32_t *all = malloc((size_t)o->requests * o->max_tokens * sizeof(*all));
	struct snap before, after;
	unsigned int i, s, started = 0, failed = 0;
	uint64_t t0, t1;
	char hex[17], *text;
	int ret = -ENOMEM, r;

	if (!res || !ctx || !thr || !all)
		goto out;
	for (i = 0; i < o->requests; i++) {
		res[i].toks = malloc(o->max_tokens * sizeof(uint32_t));
		if (!res[i].toks)
			goto out;
	}
	ret = get_stats(o, si->world_size, &before);
	if (ret)
		goto out;
	t0 = now_ns();
	for (s = 0; s < c->streams; s++) {
		ctx[s] = (struct run_ctx){ .o = o, .c = c, .res = res, .stream = s };
		r = pthread_create(&thr[s], NULL, stream_main, &ctx[s]);
		if (r) {
			fprintf(stderr, PROG ": pthread_create: %s\n", strerror(r));
			break;
		}
		started++;
	}
	for (s = 0; s < started; s++)
		pthread_join(thr[s], NULL);
	t1 = now_ns();
	if (started < c->streams) {
		ret = -EAGAIN;
		goto out;
	}
	/* each failure first: a server that went away fails the collection below too */
	for (i = 0; i < o->requests; i++) {
		if (res[i].err[0]) {
			fprintf(stderr, PROG ": request %u (%u streams, %s, %s): %s\n", i,
				c->streams, mode_name(c->sampled), draft_name(c->drafted),
				res[i].err);
			failed++;
		}
	}
	if (failed) {
		ret = -EIO;
		goto out;
	}
	ret = get_stats(o, si->world_size, &after);
	if (ret)
		goto out;
	if (o->hang_up) {
		printf("%u streams, %s, %s: %u requests hung up after their first tokens\n",
		       c->streams, mode_name(c->sampled), draft_name(c->drafted), o->requests);
		ret = 0;
		goto out;
	}
	for (i = 0; i < o->requests; i++)
		memcpy(all + (size_t)i * o->max_tokens, res[i].toks, o->max_tokens * sizeof(*all));
	toy_hash_tokens(all, (size_t)o->requests * o->max_tokens, hex);
	if (cr->runs && strcmp(hex, cr->hash)) {
		fprintf(stderr, PROG ": %u streams, %s, %s: run %u hashes %s, run 1 %s\n",
			c->streams, mode_name(c->sampled), draft_name(c->drafted), cr->runs + 1,
			hex, cr->hash);
		ret = -EPROTO;
		goto out;
	}
	memcpy(cr->hash, hex, sizeof(hex));
	cr->tokens = (uint64_t)o->requests * o->max_tokens;
	cr->tps[cr->runs] = (double)cr->tokens / ((double)(t1 - t0) / 1e9);
	for (r = 0; r < si->world_size; r++)
		cr->cpu[cr->runs][r] = after.cpu[r] - before.cpu[r];
	/* the server's counters: other clients' requests would count too */
	cr->rounds[cr->runs] = (double)(after.rounds - before.rounds);
	cr->drafted += (uint64_t)(after.drafted - before.drafted);
	cr->accepted += (uint64_t)(after.accepted - before.accepted);
	cr->runs++;
	if (o->print && cr->runs == 1) {
		text = malloc(o->max_tokens + 1);
		for (i = 0; text && i < o->requests; i++) {
			uint32_t k;

			for (k = 0; k < o->max_tokens; k++) {
				uint32_t t = res[i].toks[k];

				text[k] = (char)(t >= 32 && t <= 126 ? t : 32 + t % 95);
			}
			text[o->max_tokens] = '\0';
			printf("  [%u] \"%s\" -> \"%s\"\n", i, o->prompts[i % o->n_prompts], text);
		}
		free(text);
	}
	ret = 0;
	if (o->check_ref && cr->runs == 1)
		ret = check_ref(o, si, c, res);
out:
	if (res)
		for (i = 0; i < o->requests; i++)
			free(res[i].toks);
	free(res);
	free(ctx);
	free(thr);
	free(all);
	return ret;
}

/* ---- options ----------------------------------------------------------------------- */

static void usage(FILE *f)
{
	fprintf(f,
		"usage: rk-load [options]\n"
		"Drive rk-serve with concurrent streams and print a receipt per cell\n"
		"(streams x mode x draft): tokens/s, decode rounds, the share of drafted tokens\n"
		"accepted, the token hash over the cell's requests, and each rank's CPU seconds\n"
		"during the cell (rounds, acceptance and CPU are the server's counters: run\n"
		"one client at a time).\n\n"
		"  --url=URL          the server (default http://127.0.0.1:8800)\n"
		"  --streams=LIST     concurrent streams per cell, e.g. 1,4,8 (default 1,4,8)\n"
		"  --modes=LIST       greedy,sampled (default both; sampled = top_k 40,\n"
		"                     temperature 0.8, top_p 0.95, seed 1000 + request)\n"
		"  --draft=LIST       plain,drafted (default both)\n"
		"  --draft-k=K        drafted tokens per round in drafted cells (default 4)\n"
		"  --requests=N       requests per cell (default 16)\n"
		"  --max-tokens=M     tokens per request (default 64)\n"
		"  --prompt-set=SET   fixed (varied text) or repeat (repetitive text, where\n"
		"                     drafting is accepted more) (default fixed)\n"
		"  --runs=R           run each cell R times; medians reported (default 1)\n"
		"  --idle=S           afterwards stay idle S seconds and report each rank's\n"
		"                     CPU seconds over that time (default 0)\n"
		"  --print            print each request's text (first run)\n"
		"  --no-stream        ask for one JSON reply instead of server-sent events\n"
		"  --check-ref        check every request against the toy model's TP1\n"
		"                     reference (toy_generate_ref), exit 4 if one differs\n"
		"  --timeout=S        per request (default 120)\n"
		"  --hang-up          close each request's connection after its first tokens\n"
		"                     (the server must carry on); no table\n"
		"  --post=BODY        send one POST /v1/completions with BODY, print the status\n"
		"                     and the reply, exit 0 on any HTTP answer\n"
		"  --get=PATH         the same for GET PATH\n"
		"  --hash             print the hash a cell would give the token ids on stdin\n"
		"                     (white-space separated) and their count; no server\n"
		"  -h, --help         this text\n"
		"      --version      print the version and exit\n\n"
		"Exit: 0; 1 on any HTTP or transport error; 2 usage; 3 when cells of one mode\n"
		"hash differently; 4 when --check-ref finds a difference.\n");
}

int main(int argc, char **argv)
{
	static const struct option opts[] = {
		{ "url", required_argument, NULL, 'u' },
		{ "streams", required_argument, NULL, 'c' },
		{ "modes", required_argument, NULL, 'm' },
		{ "draft", required_argument, NULL, 'd' },
		{ "draft-k", required_argument, NULL, 'k' },
		{ "requests", required_argument, NULL, 'n' },
		{ "max-tokens", required_argument, NULL, 't' },
		{ "prompt-set", required_argument, NULL, 'P' },
		{ "runs", required_argument, NULL, 'r' },
		{ "idle", required_argument, NULL, 'i' },
		{ "print", no_argument, NULL, 'p' },
		{ "no-stream", no_argument, NULL, 'S' },
		{ "check-ref", no_argument, NULL, 'R' },
		{ "hang-up", no_argument, NULL, 'U' },
		{ "timeout", required_argument, NULL, 'T' },
		{ "post", required_argument, NULL, 'O' },
		{ "get", required_argument, NULL, 'G' },
		{ "hash", no_argument, NULL, 'X' },
		{ "help", no_argument, NULL, 'h' },
		{ "version", no_argument, NULL, 'V' },
		{ NULL, 0, NULL, 0 },
	};
	struct options o = {
		.url = "http://127.0.0.1:8800",
		.modes = { true, true },
		.drafts = { true, true },
		.draft_k = 4,
		.requests = 16,
		.max_tokens = 64,
		.runs = 1,
		.timeout = 120,
		.prompts = fixed_prompts,
		.n_prompts = sizeof(fixed_prompts) / sizeof(fixed_prompts[0]),
		.prompt_set = "fixed",
	};
	const char *raw_post = NULL, *raw_get = NULL;
	struct server_info si;
	struct cell cells[MAX_LIST * 4];
	struct cell_result *cr = NULL;
	unsigned int n_cells = 0, s, m, d, i, run, k;
	int c, ret, rc = 0;
	size_t len;

	o.streams[0] = 1;
	o.streams[1] = 4;
	o.streams[2] = 8;
	o.n_streams = 3;
	while ((c = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		switch (c) {
		case 'u':
			len = strlen(optarg);
			while (len && optarg[len - 1] == '/')
				len--;
			if (!len || len >= sizeof(o.url) ||
			    (strncmp(optarg, "http://", 7) && strncmp(optarg, "https://", 8))) {
				fprintf(stderr, PROG ": --url='%s': expected http://HOST:PORT\n",
					optarg);
				return 2;
			}
			memcpy(o.url, optarg, len);
			o.url[len] = '\0';
			break;
		case 'c':
			if (cli_u32_list(PROG, "streams", optarg, 1, 256, o.streams, MAX_LIST,
					 &o.n_streams))
				return 2;
			break;
		case 'm':
			if (cli_pair(PROG, "modes", optarg, "greedy", "sampled", o.modes))
				return 2;
			break;
		case 'd':
			if (cli_pair(PROG, "draft", optarg, "plain", "drafted", o.drafts))
				return 2;
			break;
		case 'k':
			if (cli_u32(PROG, "draft-k", optarg, 1, 16, &o.draft_k))
				return 2;
			break;
		case 'n':
			if (cli_u32(PROG, "requests", optarg, 1, 100000, &o.requests))
				return 2;
			break;
		case 't':
			if (cli_u32(PROG, "max-tokens", optarg, 1, 4096, &o.max_tokens))
				return 2;
			break;
		case 'P':
			if (!strcmp(optarg, "fixed")) {
				o.prompts = fixed_prompts;
				o.n_prompts = sizeof(fixed_prompts) / sizeof(fixed_prompts[0]);
			} else if (!strcmp(optarg, "repeat")) {
				o.prompts = repeat_prompts;
				o.n_prompts = sizeof(repeat_prompts) / sizeof(repeat_prompts[0]);
			} else {
				fprintf(stderr,
					PROG ": --prompt-set='%s': expected fixed or repeat\n",
					optarg);
				return 2;
			}
			o.prompt_set = optarg;
			break;
		case 'r':
			if (cli_u32(PROG, "runs", optarg, 1, MAX_RUNS, &o.runs))
				return 2;
			break;
		case 'i':
			if (cli_u32(PROG, "idle", optarg, 0, 86400, &o.idle))
				return 2;
			break;
		case 'p':
			o.print = true;
			break;
		case 'S':
			o.no_stream = true;
			break;
		case 'R':
			o.check_ref = true;
			break;
		case 'U':
			o.hang_up = true;
			break;
		case 'T':
			if (cli_u32(PROG, "timeout", optarg, 1, 86400, &o.timeout))
				return 2;
			break;
		case 'O':
			raw_post = optarg;
			break;
		case 'G':
			if (optarg[0] != '/') {
				fprintf(stderr,
					PROG ": --get='%s': expected a path such as /health\n",
					optarg);
				return 2;
			}
			raw_get = optarg;
			break;
		case 'X':
			return hash_stdin();
		case 'h':
			usage(stdout);
			return 0;
		case 'V':
			printf(PROG " (rankrt) %s\n", rk_version(NULL, NULL));
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (optind < argc) {
		fprintf(stderr, PROG ": unexpected argument '%s'\n", argv[optind]);
		usage(stderr);
		return 2;
	}
	if (o.hang_up && o.no_stream) {
		fprintf(stderr, PROG ": --hang-up needs streamed replies, not --no-stream\n");
		return 2;
	}
	if (curl_global_init(CURL_GLOBAL_DEFAULT)) {
		fprintf(stderr, PROG ": curl_global_init failed\n");
		return 1;
	}
	json_object_seed(0); /* before any thread */
	if (raw_post || raw_get) {
		rc = raw_request(&o, raw_post ? "POST" : "GET", raw_post ? raw_post : raw_get);
		goto out;
	}
	if (get_info(&o, &si)) {
		rc = 1;
		goto out;
	}
	for (m = 0; m < 2; m++)
		for (d = 0; d < 2; d++)
			for (s = 0; s < o.n_streams; s++)
				if (o.modes[m] && o.drafts[d])
					cells[n_cells++] = (struct cell){ o.streams[s], m, d };
	cr = calloc(n_cells, sizeof(*cr));
	if (!cr) {
		rc = 1;
		goto out;
	}
	printf(PROG ": %s, TP%d (toy model V=%" PRIu32 " H=%" PRIu32 " seed=%" PRIu64 "), "
		    "%u requests x %u tokens per cell, prompt set %s, draft_k %u, %s, %u run%s\n",
	       o.url, si.world_size, si.V, si.H, si.seed, o.requests, o.max_tokens, o.prompt_set,
	       o.draft_k, o.no_stream ? "JSON replies" : "streamed", o.runs,
	       o.runs > 1 ? "s (medians)" : "");
	printf("%7s  %-7s  %-7s  %7s  %9s  %6s  %6s  %-16s", "streams", "mode", "draft", "tokens",
	       "tok/s", "rounds", "accept", "hash");
	for (k = 0; k < (unsigned int)si.world_size; k++) {
		char name[sizeof("cpu_s_r") + 10]; /* any unsigned int */

		snprintf(name, sizeof(name), "cpu_s_r%u", k);
		printf("  %10s", name);
	}
	printf("\n");
	fflush(stdout);
	/* runs interleaved, so a slow spell of the machine spreads over every cell */
	for (run = 0; run < o.runs && !rc; run++) {
		for (i = 0; i < n_cells; i++) {
			ret = run_cell(&o, &si, &cells[i], &cr[i]);
			if (ret == -EPROTO && o.check_ref) {
				rc = 4;
			} else if (ret == -EPROTO) {
				rc = 3;
			} else if (ret) {
				fprintf(stderr, PROG ": %u streams, %s, %s: %s\n", cells[i].streams,
					mode_name(cells[i].sampled), draft_name(cells[i].drafted),
					strerror(-ret));
				rc = 1;
			}
			if (rc)
				break;
			if (run + 1 < o.runs || o.hang_up)
				continue;
			printf("%7u  %-7s  %-7s  %7" PRIu64 "  %9.1f  %6.0f  ", cells[i].streams,
			       mode_name(cells[i].sampled), draft_name(cells[i].drafted),
			       cr[i].tokens, median(cr[i].tps, cr[i].runs),
			       median(cr[i].rounds, cr[i].runs));
			if (cr[i].drafted)
				printf("%5.1f%%",
				       100.0 * (double)cr[i].accepted / (double)cr[i].drafted);
			else
				printf("%6s", "-");
			printf("  %-16s", cr[i].hash);
			for (k = 0; k < (unsigned int)si.world_size; k++) {
				double v[MAX_RUNS];
				unsigned int q;

				for (q = 0; q < cr[i].runs; q++)
					v[q] = cr[i].cpu[q][k];
				printf("  %10.3f", median(v, cr[i].runs));
			}
			printf("\n");
			fflush(stdout);
		}
	}
	if (rc || o.hang_up)
		goto out;
	/* a mode's tokens do not depend on concurrency or drafting: its cells must agree */
	for (m = 0; m < 2; m++) {
		const char *h0 = NULL;
		unsigned int n = 0;
		bool agree = true;

		for (i = 0; i < n_cells; i++) {
			if (cells[i].sampled != (m == 1))
				continue;
			if (!h0)
				h0 = cr[i].hash;
			agree &= !strcmp(h0, cr[i].hash);
			n++;
		}
		if (!n)
			continue;
		printf("hash %s %s: %s\n", mode_name(m), h0,
		       agree ? (n > 1 ? "every cell agrees" : "one cell") : "CELLS DISAGREE");
		if (!agree)
			rc = 3;
	}
	if (o.check_ref && !rc)
		printf("reference: every request equals toy_generate_ref at TP1\n");
	if (o.idle && !rc) {
		struct snap before, after;

		fflush(stdout);
		if (get_stats(&o, si.world_size, &before)) {
			rc = 1;
			goto out;
		}
		sleep(o.idle);
		if (get_stats(&o, si.world_size, &after)) {
			rc = 1;
			goto out;
		}
		printf("idle %u s after the load: cpu_s", o.idle);
		for (k = 0; k < (unsigned int)si.world_size; k++)
			printf(" r%u=%.4f", k, after.cpu[k] - before.cpu[k]);
		printf("\n");
	}
out:
	fflush(stdout);
	free(cr);
	curl_global_cleanup();
	return rc;
}
