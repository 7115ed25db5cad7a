// SPDX-License-Identifier: MIT
/*
 * rk-serve's OpenAI-compatible shapes (examples/serve/openai.c): which fields
 * a request may carry and which are refused by name, the chat template, the
 * prompt forms, stop strings and stop token ids (what is shown, what is held
 * back), and the reply objects clients parse.
 */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"
#include "rk_check.h"

static struct server g_srv;

static void setup(void)
{
	memset(&g_srv, 0, sizeof(g_srv));
	g_srv.opt.model.V = 256;
}

/* ---- stop_scan ----------------------------------------------------------------------- */

static uint32_t text_toks(const char *s, uint32_t *t)
{
	uint32_t n;

	for (n = 0; s[n]; n++)
		t[n] = (unsigned char)s[n];
	return n;
}

static const struct stop_case {
	const char *stops[3];
	uint32_t ids[2], n_ids;
	const char *text;
	uint32_t from;
	bool done;
	uint32_t vis;
	bool hit;
} stop_cases[] = {
	{ { "ab" }, { 0 }, 0, "xxab", 0, false, 2, true },	 /* ends before the stop */
	{ { "ab" }, { 0 }, 0, "xxa", 0, false, 2, false },	 /* 'a' may become "ab" */
	{ { "ab" }, { 0 }, 0, "xxa", 0, true, 3, false },	 /* the end releases it */
	{ { "ab" }, { 0 }, 0, "xab", 2, false, 1, true },	 /* found from the new token */
	{ { "aab" }, { 0 }, 0, "xaa", 0, false, 1, false },	 /* the longest prefix held */
	{ { "abcd", "bc" }, { 0 }, 0, "abc", 0, false, 1, true }, /* the first to complete */
	{ { "zz" }, { 'b' }, 1, "abab", 0, false, 1, true },	 /* a stop token */
	{ { NULL }, { 'q' }, 1, "abab", 0, false, 4, false },	 /* nothing to stop at */
	{ { "b" }, { 0 }, 0, "abab", 4, false, 4, false },	 /* earlier ones were seen */
};

START_TEST(test_stop_scan)
{
	const struct stop_case *c = &stop_cases[_i];
	struct stop_set st = { 0 };
	uint32_t t[64], n = text_toks(c->text, t), vis, k;
	bool hit;

	for (k = 0; k < 3 && c->stops[k]; k++) {
		st.len[k] = (uint32_t)strlen(c->stops[k]);
		memcpy(st.str[k], c->stops[k], st.len[k]);
		st.n_str++;
	}
	st.n_ids = c->n_ids;
	memcpy(st.ids, c->ids, sizeof(c->ids));
	vis = stop_scan(&st, t, n, c->from, c->done, &hit);
	ck_assert_msg(vis == c->vis && hit == c->hit, "case %d '%s': vis %u hit %d", _i, c->text,
		      vis, hit);
}
END_TEST

/* ---- oai_parse ----------------------------------------------------------------------- */

static const struct parse_case {
	enum api_kind kind;
	const char *body;
	const char *param; /* NULL: accepted; "": refused, no field named */
} parse_cases[] = {
	/* what clients send by default is accepted */
	{ API_COMPLETION, "{\"prompt\":\"a\",\"model\":\"rankrt-toy\",\"n\":1,\"stop\":null,"
			  "\"logprobs\":null,\"echo\":false,\"best_of\":1,\"presence_penalty\":0,"
			  "\"frequency_penalty\":0,\"logit_bias\":{},\"user\":\"u\",\"suffix\":null,\"seed\":null,"
			  "\"temperature\":null,\"top_p\":null,\"max_tokens\":null,\"stream\":false}",
	  NULL },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"include_usage\":"
			  "true},\"stop\":[\"x\",\"yz\"],\"stop_token_ids\":[1,2],\"top_k\":-1,"
			  "\"draft_k\":2,\"return_token_ids\":false}", NULL },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"max_completion_tokens\":"
		    "4,\"max_tokens\":4,\"tools\":[],\"tool_choice\":\"none\",\"response_format\":"
		    "{\"type\":\"text\"},\"top_logprobs\":0,\"parallel_tool_calls\":true}", NULL },
	{ API_COMPLETION, "{\"prompt\":[[1,2]]}", NULL },
	/* refused by name */
	{ API_COMPLETION, "{\"prompt\":\"a\",\"n\":2}", "n" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"best_of\":3}", "best_of" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"logprobs\":1}", "logprobs" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"logprobs\":true}",
	  "logprobs" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"echo\":true}", "echo" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"presence_penalty\":0.5}", "presence_penalty" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"logit_bias\":{\"1\":2}}", "logit_bias" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"tools\":[{}]}", "tools" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"response_format\":"
		    "{\"type\":\"json_object\"}}", "response_format" },
	{ API_COMPLETION, "{\"prompt\":[\"a\",\"b\"]}", "prompt" },
	{ API_COMPLETION, "{\"prompt\":\"\"}", "prompt" },
	{ API_COMPLETION, "{\"prompt\":[1,256]}", "prompt[]" },
	{ API_COMPLETION, "{\"max_tokens\":4}", "prompt" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"max_tokens\":0}", "max_tokens" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"max_tokens\":3,"
		    "\"max_completion_tokens\":4}", "max_tokens" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"max_completion_tokens\":4}", "max_completion_tokens" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"top_k\":-2}", "top_k" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"top_p\":0}", "top_p" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"temperature\":-1}", "temperature" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"seed\":-1}", "seed" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"\"]}", "stop" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stop\":[\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\","
			  "\"8\",\"9\"]}", "stop" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stop_token_ids\":[300]}", "stop_token_ids[]" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stream_options\":{\"include_usage\":true}}",
	  "stream_options" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"stream\":true,\"stream_options\":{\"x\":1}}",
	  "stream_options" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"messages\":[]}", "messages" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"bogus\":1}", "bogus" },
	{ API_CHAT, "{\"prompt\":\"a\"}", "prompt" },
	{ API_CHAT, "{\"messages\":[]}", "messages" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"tool\",\"content\":\"a\"}]}", "messages" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":[{\"type\":\"image_url\"}]}]}",
	  "messages" },
	{ API_CHAT, "{\"messages\":[{\"role\":\"user\",\"content\":\"a\",\"tool_calls\":[]}]}",
	  "messages" },
	{ API_COMPLETION, "{\"prompt\":\"a\",\"prompt\":\"b\"}", "" },
	{ API_COMPLETION, "[1]", "" },
};

START_TEST(test_parse)
{
	const struct parse_case *c = &parse_cases[_i];
	struct oai_params p;
	struct oai_error e = { 0 };
	int ret = oai_parse(&g_srv, c->kind, c->body, strlen(c->body), &p, &e);

	if (!c->param) {
		ck_assert_msg(ret == 0, "%s: %s", c->body, e.msg);
		free(p.prompt);
		return;
	}
	ck_assert_msg(ret == -EINVAL, "%s: %d", c->body, ret);
	ck_assert_uint_eq(e.status, 400);
	ck_assert_str_eq(e.type, "invalid_request_error");
	ck_assert_msg(!strcmp(e.param, c->param), "%s: param '%s', expected '%s' (%s)", c->body,
		      e.param, c->param, e.msg);
	ck_assert_ptr_null(p.prompt);
}
END_TEST

static void prompt_is(const struct oai_params *p, const char *want)
{
	uint32_t i;

	ck_assert_uint_eq(p->n_prompt, strlen(want));
	for (i = 0; i < p->n_prompt; i++)
		ck_assert_uint_eq(p->prompt[i], (unsigned char)want[i]);
}

/* The template (docs/SERVE.md), the defaults, and what the fields set. */
START_TEST(test_parse_values)
{
	static const char chat[] =
		"{\"messages\":[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\","
		"\"content\":[{\"type\":\"text\",\"text\":\"H\"},{\"type\":\"text\",\"text\":\"i\"}]}],"
		"\"max_completion_tokens\":7,\"stop\":\"ab\",\"stream\":true,"
		"\"stream_options\":{\"include_usage\":true}}";
	static const char ids[] = "{\"prompt\":[[1,2,3]],\"temperature\":0.5,\"top_k\":-1,"
				  "\"top_p\":0.9,\"seed\":5,\"stop_token_ids\":[9],\"draft_k\":0}";
	struct oai_params p;
	struct oai_error e;

	ck_assert_int_eq(oai_parse(&g_srv, API_CHAT, chat, strlen(chat), &p, &e), 0);
	prompt_is(&p, "system: Be brief.\nuser: Hi\nassistant:");
	ck_assert_uint_eq(p.max_tokens, 7);
	ck_assert_uint_eq(p.stop.n_str, 1);
	ck_assert_uint_eq(p.stop.len[0], 2);
	ck_assert(p.stream && p.include_usage && p.token_ids);
	ck_assert_uint_eq(p.top_k, DEF_TOP_K);
	ck_assert_int_eq(p.draft_k, -1);
	free(p.prompt);

	ck_assert_int_eq(oai_parse(&g_srv, API_COMPLETION, ids, strlen(ids), &p, &e), 0);
	ck_assert_uint_eq(p.n_prompt, 3);
	ck_assert_uint_eq(p.prompt[2], 3);
	ck_assert_uint_eq(p.max_tokens, DEF_MAX_TOKENS);
	ck_assert_uint_eq(p.top_k, 0);
	ck_assert(p.top_p == 0.9 && p.temperature == 0.5);
	ck_assert_uint_eq(p.seed, 5);
	ck_assert_uint_eq(p.stop.n_ids, 1);
	ck_assert_uint_eq(p.stop.ids[0], 9);
	ck_assert_int_eq(p.draft_k, 0);
	ck_assert(!p.stream);
	free(p.prompt);
}
END_TEST

/* ---- replies ------------------------------------------------------------------------- */

static void json_is(json_t *j, const char *want)
{
	char *s = json_dumps(j, JSON_COMPACT | JSON_PRESERVE_ORDER);

	ck_assert_ptr_nonnull(s);
	ck_assert_str_eq(s, want);
	free(s);
	json_decref(j);
}

/* A model other than the one served is OpenAI's 404 model_not_found, whole. */
START_TEST(test_model)
{
	static const char *const bodies[] = {
		"{\"prompt\":\"a\",\"model\":\"gpt-4\"}",
		"{\"messages\":[{\"role\":\"user\",\"content\":\"a\"}],\"model\":\"gpt-4\"}",
	};
	/* 63 ASCII bytes, then a 2-byte character across the 64-byte quote */
	static const char long_name[] = "{\"prompt\":\"a\",\"model\":\"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
					"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\u00e9tail\"}";
	struct oai_params p;
	struct oai_error e = { 0 };
	unsigned int i;
	json_t *j;
	char *s;

	for (i = 0; i < ARRAY_SIZE(bodies); i++) {
		ck_assert_int_eq(oai_parse(&g_srv, i ? API_CHAT : API_COMPLETION, bodies[i],
					   strlen(bodies[i]), &p, &e), -EINVAL);
		ck_assert_uint_eq(e.status, 404);
		ck_assert_ptr_null(p.prompt);
		json_is(oai_error_json(&e),
			"{\"error\":{\"message\":\"The model `gpt-4` does not exist or you do not "
			"have access to it.\",\"type\":\"invalid_request_error\",\"param\":null,"
			"\"code\":\"model_not_found\"}}");
	}
	ck_assert_int_eq(oai_parse(&g_srv, API_COMPLETION, long_name, strlen(long_name), &p, &e),
			 -EINVAL);
	ck_assert_uint_eq(e.status, 404);
	j = oai_error_json(&e);
	s = json_dumps(j, JSON_COMPACT); /* NULL were the quote not UTF-8 */
	json_decref(j);
	ck_assert_ptr_nonnull(s);
	ck_assert_ptr_nonnull(strstr(s, "xx...` does not exist"));
	free(s);
	ck_assert_int_eq(oai_parse(&g_srv, API_COMPLETION, "{\"prompt\":\"a\",\"model\":1}", 24,
				   &p, &e), -EINVAL);
	ck_assert_uint_eq(e.status, 400);
	ck_assert_str_eq(e.param, "model");
	ck_assert_int_eq(oai_parse(&g_srv, API_COMPLETION,
				   "{\"prompt\":\"a\",\"model\":\"" MODEL_ID "\"}",
				   strlen("{\"prompt\":\"a\",\"model\":\"" MODEL_ID "\"}"), &p, &e), 0);
	free(p.prompt);
}
END_TEST

START_TEST(test_replies)
{
	struct oai_reply r = { .kind = API_CHAT, .id = 3, .created = 100, .n_prompt = 4,
			       .token_ids = true, .first = true };
	struct oai_error e = { .status = 400, .type = "invalid_request_error", .param = "n",
			       .msg = "n: only 1 is supported" };
	const uint32_t t[] = { 72, 300 };
	char text[8];

	json_is(oai_error_json(&e), "{\"error\":{\"message\":\"n: only 1 is supported\",\"type\":"
				    "\"invalid_request_error\",\"param\":\"n\",\"code\":null}}");
	json_is(oai_chunk(&r, t, 2, NULL, text),
		"{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":100,"
		"\"model\":\"rankrt-toy\",\"choices\":[{\"index\":0,\"logprobs\":null,"
		"\"finish_reason\":null,\"delta\":{\"role\":\"assistant\",\"content\":\"H/\"},"
		"\"token_ids\":[72,300]}]}");
	r.first = false;
	json_is(oai_chunk(&r, NULL, 0, "stop", text),
		"{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":100,"
		"\"model\":\"rankrt-toy\",\"choices\":[{\"index\":0,\"logprobs\":null,"
		"\"finish_reason\":\"stop\",\"delta\":{},\"token_ids\":[]}]}");
	json_is(oai_usage_chunk(&r, 2),
		"{\"id\":\"chatcmpl-3\",\"object\":\"chat.completion.chunk\",\"created\":100,"
		"\"model\":\"rankrt-toy\",\"choices\":[],\"usage\":{\"prompt_tokens\":4,"
		"\"completion_tokens\":2,\"total_tokens\":6}}");
	r.kind = API_COMPLETION;
	r.token_ids = false;
	json_is(oai_final(&r, t, 1, "length", text),
		"{\"id\":\"cmpl-3\",\"object\":\"text_completion\",\"created\":100,\"model\":"
		"\"rankrt-toy\",\"choices\":[{\"index\":0,\"logprobs\":null,\"finish_reason\":"
		"\"length\",\"text\":\"H\"}],\"usage\":{\"prompt_tokens\":4,\"completion_tokens\":1,"
		"\"total_tokens\":5}}");
}
END_TEST

static Suite *openai_suite(void)
{
	Suite *s = suite_create("openai");
	TCase *tc = rk_tcase(s, "shapes", 30, setup, NULL);

	tcase_add_loop_test(tc, test_stop_scan, 0, (int)ARRAY_SIZE(stop_cases));
	tcase_add_loop_test(tc, test_parse, 0, (int)ARRAY_SIZE(parse_cases));
	tcase_add_test(tc, test_parse_values);
	tcase_add_test(tc, test_replies);
	tcase_add_test(tc, test_model);
	return s;
}

int main(void)
{
	return rk_check_run(openai_suite());
}
