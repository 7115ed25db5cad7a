/* SPDX-License-Identifier: MIT */
/*
 * rk-serve's OpenAI-compatible shapes (docs/SERVE.md): the request bodies of
 * POST /v1/completions and POST /v1/chat/completions, checked field by field
 * (the fields OpenAI clients send by default are accepted; the ones the toy
 * model cannot honour are refused by name), the chat template, stop strings
 * and stop token ids, and the replies, chunks and errors that clients parse.
 * No I/O and no server state: http.c calls these from the HTTP threads, and
 * stop_scan() from the loop thread.
 */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "serve.h"

#define CHAT_ASSISTANT "assistant:"

static atomic_uint_fast64_t g_next_id = 1;

uint64_t oai_next_id(void)
{
	return atomic_fetch_add_explicit(&g_next_id, 1, memory_order_relaxed);
}

static int refuse(struct oai_error *e, unsigned int status, const char *param, const char *fmt,
		  ...) __attribute__((format(printf, 4, 5)));

static int refuse(struct oai_error *e, unsigned int status, const char *param, const char *fmt,
		  ...)
{
	va_list ap;

	e->status = status;
	e->type = status >= 500 ? "server_error" : "invalid_request_error";
	e->code = NULL;
	snprintf(e->param, sizeof(e->param), "%s", param ? param : "");
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof(e->msg), fmt, ap);
	va_end(ap);
	return status >= 500 ? -ENOMEM : -EINVAL;
}

#define BAD(e, param, ...) refuse(e, 400, param, __VA_ARGS__)

static int get_int(json_t *v, const char *name, json_int_t lo, json_int_t hi, json_int_t *out,
		   struct oai_error *e)
{
	if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
		return BAD(e, name, "%s: expected an integer in [%lld, %lld]", name, (long long)lo,
			   (long long)hi);
	*out = json_integer_value(v);
	return 0;
}

/* Grow @p's prompt by @n tokens. Return: 0, -EINVAL past MAX_PROMPT, -ENOMEM. */
static int prompt_room(struct oai_params *p, size_t n, const char *name, struct oai_error *e)
{
	uint32_t *t;

	if (p->n_prompt + n > MAX_PROMPT)
		return BAD(e, name, "%s: the prompt is over %u tokens", name, MAX_PROMPT);
	t = realloc(p->prompt, (p->n_prompt + n) * sizeof(*t) + 1);
	if (!t)
		return refuse(e, 500, NULL, "out of memory");
	p->prompt = t;
	return 0;
}

/* Text to tokens: byte % V (so printable text of a V >= 127 model round-trips). */
static int prompt_text(struct oai_params *p, uint32_t V, const char *s, size_t n,
		       const char *name, struct oai_error *e)
{
	size_t i;
	int ret = prompt_room(p, n, name, e);

	if (ret)
		return ret;
	for (i = 0; i < n; i++)
		p->prompt[p->n_prompt++] = (unsigned char)s[i] % V;
	return 0;
}

static int prompt_ids(struct oai_params *p, uint32_t V, json_t *a, const char *name,
		      struct oai_error *e)
{
	json_int_t x;
	size_t i;
	int ret = prompt_room(p, json_array_size(a), name, e);

	if (ret)
		return ret;
	for (i = 0; i < json_array_size(a); i++) {
		ret = get_int(json_array_get(a, i), "prompt[]", 0, V - 1, &x, e);
		if (ret)
			return ret;
		p->prompt[p->n_prompt++] = (uint32_t)x;
	}
	return 0;
}

/* "prompt": a string, token ids, or a list of one of either (OpenAI's batch form). */
static int parse_prompt(struct oai_params *p, uint32_t V, json_t *v, struct oai_error *e)
{
	if (json_is_array(v) && json_array_size(v) && !json_is_integer(json_array_get(v, 0))) {
		if (json_array_size(v) != 1)
			return BAD(e, "prompt", "prompt: one prompt per request, %zu given",
				   json_array_size(v));
		v = json_array_get(v, 0);
	}
	if (json_is_string(v) && json_string_length(v))
		return prompt_text(p, V, json_string_value(v), json_string_length(v), "prompt", e);
	if (json_is_array(v) && json_array_size(v))
		return prompt_ids(p, V, v, "prompt", e);
	return BAD(e, "prompt", "prompt: expected a non-empty string or array of token ids");
}

/*
 * The chat template over the toy vocabulary: every message as
 * "<role>: <content>\n", then "assistant:" for the reply (docs/SERVE.md).
 */
static int parse_messages(struct oai_params *p, uint32_t V, json_t *v, struct oai_error *e)
{
	static const char *const roles[] = { "system", "developer", "user", "assistant" };
	json_t *m, *x, *part;
	const char *key, *role;
	size_t i, j, r;
	int ret;

	if (!json_is_array(v) || !json_array_size(v))
		return BAD(e, "messages", "messages: expected a non-empty array of messages");
	json_array_foreach(v, i, m) {
		if (!json_is_object(m))
			return BAD(e, "messages", "messages[%zu]: expected an object", i);
		role = json_string_value(json_object_get(m, "role"));
		for (r = 0; role && r < ARRAY_SIZE(roles) && strcmp(role, roles[r]); r++)
			;
		if (!role || r == ARRAY_SIZE(roles))
			return BAD(e, "messages", "messages[%zu].role: expected system, developer, "
				   "user or assistant", i);
		json_object_foreach(m, key, x) {
			if (strcmp(key, "role") && strcmp(key, "content") && strcmp(key, "name"))
				return BAD(e, "messages", "messages[%zu].%s: not supported", i,
					   key);
		}
		ret = prompt_text(p, V, role, strlen(role), "messages", e);
		if (!ret)
			ret = prompt_text(p, V, ": ", 2, "messages", e);
		if (ret)
			return ret;
		x = json_object_get(m, "content");
		if (json_is_string(x)) {
			ret = prompt_text(p, V, json_string_value(x), json_string_length(x),
					  "messages", e);
		} else if (json_is_array(x)) {
			json_array_foreach(x, j, part) {
				json_t *t = json_object_get(part, "text");

				if (!json_is_object(part) ||
				    !json_is_string(json_object_get(part, "type")) ||
				    strcmp(json_string_value(json_object_get(part, "type")), "text") ||
				    !json_is_string(t) || json_object_size(part) != 2)
					return BAD(e, "messages", "messages[%zu].content[%zu]: only "
						   "{\"type\": \"text\", \"text\": ...} parts", i, j);
				ret = prompt_text(p, V, json_string_value(t), json_string_length(t),
						  "messages", e);
				if (ret)
					return ret;
			}
		} else {
			return BAD(e, "messages", "messages[%zu].content: expected a string or "
				   "an array of text parts", i);
		}
		if (ret || (ret = prompt_text(p, V, "\n", 1, "messages", e)))
			return ret;
	}
	return prompt_text(p, V, CHAT_ASSISTANT, strlen(CHAT_ASSISTANT), "messages", e);
}

static int stop_add(struct stop_set *st, json_t *s, struct oai_error *e)
{
	if (!json_is_string(s) || !json_string_length(s) || json_string_length(s) > MAX_STOP_LEN)
		return BAD(e, "stop", "stop: expected strings of 1 to %u bytes", MAX_STOP_LEN);
	memcpy(st->str[st->n_str], json_string_value(s), json_string_length(s));
	st->len[st->n_str++] = (uint32_t)json_string_length(s);
	return 0;
}

/* "stop": null, a string, or up to MAX_STOP strings. */
static int parse_stop(struct stop_set *st, json_t *v, struct oai_error *e)
{
	json_t *s;
	size_t i;

	if (json_is_null(v))
		return 0;
	if (json_is_string(v))
		return stop_add(st, v, e);
	if (!json_is_array(v) || json_array_size(v) > MAX_STOP)
		return BAD(e, "stop", "stop: expected a string or up to %u strings", MAX_STOP);
	json_array_foreach(v, i, s) {
		if (stop_add(st, s, e))
			return -EINVAL;
	}
	return 0;
}

static int parse_stop_ids(struct stop_set *st, uint32_t V, json_t *v, struct oai_error *e)
{
	json_int_t x;
	json_t *t;
	size_t i;

	if (json_is_null(v))
		return 0;
	if (!json_is_array(v) || json_array_size(v) > MAX_STOP_IDS)
		return BAD(e, "stop_token_ids", "stop_token_ids: expected up to %u token ids",
			   MAX_STOP_IDS);
	json_array_foreach(v, i, t) {
		if (get_int(t, "stop_token_ids[]", 0, V - 1, &x, e))
			return -EINVAL;
		st->ids[st->n_ids++] = (uint32_t)x;
	}
	return 0;
}

/* A number field that may be null (the default). */
static int get_real(json_t *v, const char *name, double lo, double hi, bool lo_open, double *out,
		    struct oai_error *e)
{
	double x = json_number_value(v);

	if (json_is_null(v))
		return 0;
	if (!json_is_number(v) || !isfinite(x) || x > hi || (lo_open ? !(x > lo) : x < lo))
		return BAD(e, name, "%s: expected a number in %c%g, %g]", name, lo_open ? '(' : '[',
			   lo, hi);
	*out = x;
	return 0;
}

/*
 * "model" names the one model served (MODEL_ID, what /v1/models lists); another name is
 * OpenAI's 404 model_not_found. The name is quoted up to a whole UTF-8 character, so that
 * the message stays valid JSON text.
 */
static int check_model(json_t *v, struct oai_error *e)
{
	const char *name = json_string_value(v);
	size_t n;
	int ret;

	if (!name)
		return BAD(e, "model", "model: expected a string");
	if (!strcmp(name, MODEL_ID))
		return 0;
	n = strnlen(name, MAX_MODEL_QUOTE);
	if (n == MAX_MODEL_QUOTE)
		while (n && ((unsigned char)name[n] & 0xc0) == 0x80)
			n--;
	ret = refuse(e, 404, NULL, "The model `%.*s%s` does not exist or you do not have access "
		     "to it.", (int)n, name, name[n] ? "..." : "");
	e->code = "model_not_found";
	return ret;
}

/* Fields a client may send whose only value the toy model honours is the default. */
static int default_only(const char *key, json_t *v, struct oai_error *e)
{
	if (!strcmp(key, "n") || !strcmp(key, "best_of")) {
		if (json_is_null(v) || (json_is_integer(v) && json_integer_value(v) == 1))
			return 0;
		return BAD(e, key, "%s: only 1 is supported", key);
	}
	if (!strcmp(key, "logprobs") || !strcmp(key, "top_logprobs") || !strcmp(key, "echo")) {
		if (json_is_null(v) || json_is_false(v) ||
		    (!strcmp(key, "top_logprobs") && json_is_integer(v) && !json_integer_value(v)))
			return 0;
		return BAD(e, key, "%s: not supported", key);
	}
	if (!strcmp(key, "presence_penalty") || !strcmp(key, "frequency_penalty")) {
		if (json_is_null(v) || (json_is_number(v) && json_number_value(v) == 0))
			return 0;
		return BAD(e, key, "%s: only 0 is supported", key);
	}
	if (!strcmp(key, "logit_bias")) {
		if (json_is_null(v) || (json_is_object(v) && !json_object_size(v)))
			return 0;
		return BAD(e, key, "%s: not supported", key);
	}
	if (!strcmp(key, "suffix")) {
		if (json_is_null(v) || (json_is_string(v) && !json_string_length(v)))
			return 0;
		return BAD(e, key, "%s: not supported", key);
	}
	if (!strcmp(key, "tools") || !strcmp(key, "functions")) {
		if (json_is_null(v) || (json_is_array(v) && !json_array_size(v)))
			return 0;
		return BAD(e, key, "%s: not supported", key);
	}
	if (!strcmp(key, "tool_choice") || !strcmp(key, "function_call")) {
		if (json_is_null(v) || (json_is_string(v) && !strcmp(json_string_value(v), "none")))
			return 0;
		return BAD(e, key, "%s: not supported", key);
	}
	if (!strcmp(key, "response_format")) {
		json_t *t = json_object_get(v, "type");

		if (json_is_null(v) || (json_is_object(v) && json_object_size(v) == 1 &&
					json_is_string(t) && !strcmp(json_string_value(t), "text")))
			return 0;
		return BAD(e, key, "%s: only {\"type\": \"text\"} is supported", key);
	}
	if (!strcmp(key, "model"))
		return check_model(v, e);
	if (!strcmp(key, "user")) {
		if (json_is_string(v) || json_is_null(v))
			return 0;
		return BAD(e, key, "%s: expected a string", key);
	}
	if (!strcmp(key, "parallel_tool_calls") || !strcmp(key, "store")) {
		if (json_is_null(v) || json_is_boolean(v))
			return 0;
		return BAD(e, key, "%s: expected true or false", key);
	}
	return 1; /* not one of these */
}

static int parse_field(const struct server *srv, struct oai_params *p, const char *key, json_t *v,
		       struct oai_error *e)
{
	const uint32_t V = srv->opt.model.V;
	const bool chat = p->kind == API_CHAT;
	json_int_t x;
	int ret;

	if (!chat && !strcmp(key, "prompt"))
		return parse_prompt(p, V, v, e);
	if (chat && !strcmp(key, "messages"))
		return parse_messages(p, V, v, e);
	if (!strcmp(key, "max_tokens") || (chat && !strcmp(key, "max_completion_tokens"))) {
		if (json_is_null(v))
			return 0;
		ret = get_int(v, key, 1, MAX_GEN, &x, e);
		if (ret)
			return ret;
		if (p->max_set && p->max_tokens != (uint32_t)x)
			return BAD(e, "max_tokens", "max_tokens and max_completion_tokens differ");
		p->max_tokens = (uint32_t)x;
		p->max_set = true;
		return 0;
	}
	if (!strcmp(key, "temperature"))
		return get_real(v, key, 0, 100, false, &p->temperature, e);
	if (!strcmp(key, "top_p"))
		return get_real(v, key, 0, 1, true, &p->top_p, e);
	if (!strcmp(key, "top_k")) {
		if (json_is_null(v))
			return 0;
		/* vLLM's -1 is "no cut", our 0 */
		ret = get_int(v, key, -1, TOY_MAX_V, &x, e);
		p->top_k = x < 0 ? 0 : (uint32_t)x;
		return ret;
	}
	if (!strcmp(key, "seed")) {
		if (json_is_null(v))
			return 0;
		ret = get_int(v, key, 0, (json_int_t)INT64_MAX, &x, e);
		p->seed = (uint64_t)x;
		return ret;
	}
	if (!strcmp(key, "draft_k")) {
		ret = get_int(v, key, -1, RK_SCHED_MAX_DRAFT, &x, e);
		p->draft_k = (int32_t)x;
		return ret;
	}
	if (!strcmp(key, "stream") || !strcmp(key, "return_token_ids")) {
		if (json_is_null(v))
			return 0;
		if (!json_is_boolean(v))
			return BAD(e, key, "%s: expected true or false", key);
		*(key[0] == 's' ? &p->stream : &p->token_ids) = json_is_true(v);
		return 0;
	}
	if (!strcmp(key, "stream_options")) {
		json_t *u = json_object_get(v, "include_usage");

		if (json_is_null(v))
			return 0;
		if (!json_is_object(v) || json_object_size(v) != !!u || (u && !json_is_boolean(u)))
			return BAD(e, key, "stream_options: only {\"include_usage\": true or "
				   "false}");
		p->include_usage = json_is_true(u);
		return 0;
	}
	if (!strcmp(key, "stop"))
		return parse_stop(&p->stop, v, e);
	if (!strcmp(key, "stop_token_ids"))
		return parse_stop_ids(&p->stop, V, v, e);
	ret = default_only(key, v, e);
	if (ret <= 0)
		return ret;
	return BAD(e, key, "unknown field '%s'", key);
}

int oai_parse(const struct server *srv, enum api_kind kind, const char *body, size_t len,
	      struct oai_params *p, struct oai_error *e)
{
	json_error_t jerr;
	json_t *root, *v;
	const char *key;
	int ret = -EINVAL;

	memset(p, 0, sizeof(*p));
	p->kind = kind;
	p->max_tokens = DEF_MAX_TOKENS;
	p->top_k = DEF_TOP_K;
	p->top_p = 1.0;
	p->draft_k = -1;
	p->token_ids = true;
	root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
	if (!root)
		return BAD(e, NULL, "bad JSON at line %d column %d: %s", jerr.line, jerr.column,
			   jerr.text);
	if (!json_is_object(root)) {
		BAD(e, NULL, "expected a JSON object");
		goto out;
	}
	json_object_foreach(root, key, v) {
		ret = parse_field(srv, p, key, v, e);
		if (ret)
			goto out;
	}
	ret = -EINVAL;
	if (!p->n_prompt) {
		BAD(e, kind == API_CHAT ? "messages" : "prompt", "%s: missing",
		    kind == API_CHAT ? "messages" : "prompt");
		goto out;
	}
	if (p->include_usage && !p->stream) {
		BAD(e, "stream_options", "stream_options: only with \"stream\": true");
		goto out;
	}
	ret = 0;
out:
	json_decref(root);
	if (ret) {
		free(p->prompt);
		p->prompt = NULL;
	}
	return ret;
}

/* ---- stops (loop thread) ----------------------------------------------------------- */

/* Does stop string @k end at token @i (its last character)? */
static bool stop_ends_at(const struct stop_set *st, uint32_t k, const uint32_t *t, uint32_t i)
{
	uint32_t L = st->len[k], j;

	if (i + 1 < L)
		return false;
	for (j = 0; j < L; j++)
		if (tok_char(t[i + 1 - L + j]) != st->str[k][j])
			return false;
	return true;
}

/* The longest proper prefix of a stop string that the text of t[0..n) ends with. */
static uint32_t stop_tail(const struct stop_set *st, const uint32_t *t, uint32_t n)
{
	uint32_t k, L, j, best = 0;

	for (k = 0; k < st->n_str; k++) {
		for (L = st->len[k] - 1; L > best; L--) {
			if (L > n)
				continue;
			for (j = 0; j < L && tok_char(t[n - L + j]) == st->str[k][j]; j++)
				;
			if (j == L) {
				best = L;
				break;
			}
		}
	}
	return best;
}

uint32_t stop_scan(const struct stop_set *st, const uint32_t *t, uint32_t n, uint32_t from,
		   bool done, bool *hit)
{
	uint32_t i, j, k;

	*hit = false;
	for (i = from; i < n; i++) {
		for (j = 0; j < st->n_ids; j++)
			if (t[i] == st->ids[j])
				goto stop_at_token;
		for (k = 0; k < st->n_str; k++)
			if (stop_ends_at(st, k, t, i)) {
				*hit = true;
				return i + 1 - st->len[k];
			}
	}
	/* a tail that may yet become a stop string is held back, until the end */
	return done ? n : n - stop_tail(st, t, n);
stop_at_token:
	*hit = true;
	return i;
}

/* ---- replies ----------------------------------------------------------------------- */

static json_t *tokens_json(const uint32_t *t, uint32_t n)
{
	json_t *a = json_array();
	uint32_t i;

	for (i = 0; a && i < n; i++)
		json_array_append_new(a, json_integer(t[i]));
	return a;
}

void oai_fail_msg(const struct server *srv, int err, char *buf, size_t len)
{
	/* the verdict just heard (on_round_timeout()) is this request's round's */
	if (err == -RK_EROUNDTIMEOUT && srv->slow_rank >= 0)
		snprintf(buf, len, "round %" PRIu64 " failed: rank %d did not finish its share "
			 "within the round bound (RK_EROUNDTIMEOUT); the request may be retried",
			 srv->slow_round, srv->slow_rank);
	else
		snprintf(buf, len, "%s", rk_strerror(err));
}

json_t *oai_error_json(const struct oai_error *e)
{
	return json_pack("{s:{s:s,s:s,s:o,s:o}}", "error", "message", e->msg, "type", e->type,
			 "param", e->param[0] ? json_string(e->param) : json_null(), "code",
			 e->code ? json_string(e->code) : json_null());
}

static json_t *envelope(const struct oai_reply *r, bool chunk)
{
	char id[40];

	snprintf(id, sizeof(id), "%s-%llu", r->kind == API_CHAT ? "chatcmpl" : "cmpl",
		 (unsigned long long)r->id);
	return json_pack("{s:s,s:s,s:I,s:s}", "id", id, "object",
			 r->kind == API_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
					     : "text_completion",
			 "created", (json_int_t)r->created, "model", MODEL_ID);
}

static json_t *usage_json(const struct oai_reply *r, uint32_t n_out)
{
	return json_pack("{s:i,s:i,s:i}", "prompt_tokens", (int)r->n_prompt, "completion_tokens",
			 (int)n_out, "total_tokens", (int)(r->n_prompt + n_out));
}

/* One choice: @t..@n are its (new) tokens, @finish NULL while it runs. */
static json_t *choice_json(const struct oai_reply *r, bool chunk, const uint32_t *t, uint32_t n,
			   const char *finish, char *text)
{
	json_t *c, *msg;

	tokens_text(t, n, text);
	c = json_pack("{s:i,s:o,s:o}", "index", 0, "logprobs", json_null(), "finish_reason",
		      finish ? json_string(finish) : json_null());
	if (!c)
		return NULL;
	if (r->kind == API_CHAT) {
		msg = chunk && !r->first ? json_object() : json_pack("{s:s}", "role", "assistant");
		if (msg && (!chunk || n || r->first))
			json_object_set_new(msg, "content", json_string(text));
		json_object_set_new(c, chunk ? "delta" : "message", msg);
	} else {
		json_object_set_new(c, "text", json_string(text));
	}
	if (r->token_ids)
		json_object_set_new(c, "token_ids", tokens_json(t, n));
	return c;
}

json_t *oai_chunk(const struct oai_reply *r, const uint32_t *t, uint32_t n, const char *finish,
		  char *text)
{
	json_t *ev = envelope(r, true);

	if (ev)
		json_object_set_new(ev, "choices",
				    json_pack("[o]", choice_json(r, true, t, n, finish, text)));
	return ev;
}

json_t *oai_usage_chunk(const struct oai_reply *r, uint32_t n_out)
{
	json_t *ev = envelope(r, true);

	if (ev) {
		json_object_set_new(ev, "choices", json_array());
		json_object_set_new(ev, "usage", usage_json(r, n_out));
	}
	return ev;
}

json_t *oai_final(const struct oai_reply *r, const uint32_t *t, uint32_t n, const char *finish,
		  char *text)
{
	json_t *body = envelope(r, false);

	if (body) {
		json_object_set_new(body, "choices",
				    json_pack("[o]", choice_json(r, false, t, n, finish, text)));
		json_object_set_new(body, "usage", usage_json(r, n));
	}
	return body;
}

json_t *oai_models(const struct server *srv, uint64_t created)
{
	return json_pack("{s:s,s:[{s:s,s:s,s:I,s:s,s:i,s:{s:i,s:i,s:I,s:i}}]}", "object", "list",
			 "data", "id", MODEL_ID, "object", "model", "created", (json_int_t)created,
			 "owned_by", "rankrt", "max_model_len", (int)(MAX_PROMPT + MAX_GEN),
			 "rankrt", "vocab", (int)srv->opt.model.V, "hidden",
			 (int)srv->opt.model.H, "model_seed", (json_int_t)srv->opt.model.seed,
			 "world_size", srv->size);
}
