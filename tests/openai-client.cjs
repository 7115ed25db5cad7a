// SPDX-License-Identifier: MIT
// The official OpenAI client library (npm "openai") drives rk-serve: run by
// tests/openai-client.sh, which gives the module's path (OPENAI_MODULE), the
// server's URL, the request count N and the tokens per request M. Each call
// and its result is printed; "tokens NAME ids..." lines carry the token ids of
// N requests in order, which the script hashes as rk-load hashes a cell.
// Request i is rk-load's: prompt i mod its fixed set, seed 1000 + i; sampled
// is top_k 40, temperature 0.8, top_p 0.95. Exit 1 when a check fails.
'use strict';

const { OpenAI } = require(process.env.OPENAI_MODULE);

const url = process.argv[2];
const N = Number(process.argv[3]);
const M = Number(process.argv[4]);
const model = 'rankrt-toy';
const prompts = [
	'The quick brown fox jumps over the lazy dog.',
	'Once upon a time, in a land far away,',
	'It was the best of times, it was the worst of times,',
	'Call me Ishmael.',
	'To be, or not to be, that is the question:',
	'All happy families are alike;',
	'The sky above the port was the color of television,',
	'In the beginning',
];
const client = new OpenAI({ baseURL: url + '/v1', apiKey: 'none', maxRetries: 0, timeout: 60000 });
let failures = 0;

function check(ok, what) {
	if (!ok) {
		console.log('FAIL: ' + what);
		failures++;
	}
}

function sampling(i, sampled) {
	// top_k is vLLM's extension, as the Python client's extra_body would send it
	return sampled ? { temperature: 0.8, top_p: 0.95, top_k: 40, seed: 1000 + i }
		       : { temperature: 0, seed: 1000 + i };
}

// Stream a completion; the text, token ids, finish reason and usage seen.
async function streamed(req) {
	const out = { text: '', ids: [], finish: null, usage: null, chunks: 0 };
	const s = await client.completions.create({ ...req, stream: true,
						    stream_options: { include_usage: true } });

	for await (const ch of s) {
		out.chunks++;
		if (ch.usage)
			out.usage = ch.usage;
		for (const c of ch.choices) {
			out.text += c.text;
			out.ids.push(...c.token_ids);
			if (c.finish_reason)
				out.finish = c.finish_reason;
		}
	}
	return out;
}

async function completions(sampled, stream) {
	const name = (sampled ? 'sampled' : 'greedy') + '-' + (stream ? 'stream' : 'json');
	const all = [];

	for (let i = 0; i < N; i++) {
		const req = { model, prompt: prompts[i % prompts.length], max_tokens: M,
			      ...sampling(i, sampled) };
		let r;

		if (stream) {
			r = await streamed(req);
			check(r.usage && r.usage.completion_tokens === M &&
			      r.usage.prompt_tokens === req.prompt.length,
			      `${name} [${i}]: usage ${JSON.stringify(r.usage)}`);
		} else {
			const j = await client.completions.create(req);

			check(j.object === 'text_completion' && j.model === model &&
			      j.id.startsWith('cmpl-') && j.choices.length === 1 &&
			      j.usage.completion_tokens === M, `${name} [${i}]: ${JSON.stringify(j)}`);
			r = { text: j.choices[0].text, ids: j.choices[0].token_ids,
			      finish: j.choices[0].finish_reason };
		}
		check(r.ids.length === M && r.text.length === M && r.finish === 'length',
		      `${name} [${i}]: ${r.ids.length} tokens, finish ${r.finish}`);
		console.log(`completions.create ${name} [${i}] ${JSON.stringify(req.prompt)} -> ` +
			    `${JSON.stringify(r.text)} (finish_reason ${r.finish}` +
			    (stream ? `, ${r.chunks} chunks)` : ')'));
		all.push(...r.ids);
	}
	console.log(`tokens ${name} ${all.join(' ')}`);
}

async function chat() {
	const messages = [ { role: 'system', content: 'You are a toy model.' },
			   { role: 'user', content: 'Say something.' } ];
	const j = await client.chat.completions.create({ model, messages, max_tokens: M, seed: 7,
							 temperature: 0 });
	const c = j.choices[0];
	let text = '', role = null, finish = null, usage = null;

	check(j.object === 'chat.completion' && c.message.role === 'assistant' &&
	      c.message.content.length === M && c.finish_reason === 'length',
	      `chat json: ${JSON.stringify(j)}`);
	console.log(`chat.completions.create json -> ${JSON.stringify(c.message)} (finish_reason ` +
		    `${c.finish_reason}, usage ${JSON.stringify(j.usage)})`);
	const s = await client.chat.completions.create({ model, messages, max_completion_tokens: M,
							 seed: 7, temperature: 0, stream: true,
							 stream_options: { include_usage: true } });
	for await (const ch of s) {
		check(ch.object === 'chat.completion.chunk', `chat chunk ${JSON.stringify(ch)}`);
		if (ch.usage)
			usage = ch.usage;
		for (const d of ch.choices) {
			role = role || d.delta.role;
			text += d.delta.content || '';
			finish = d.finish_reason || finish;
		}
	}
	check(text === c.message.content && role === 'assistant' && finish === 'length' &&
	      usage && usage.completion_tokens === M,
	      `chat stream: ${JSON.stringify(text)} role ${role} finish ${finish}`);
	console.log(`chat.completions.create stream -> ${JSON.stringify(text)} (role ${role}, ` +
		    `finish_reason ${finish}, usage ${JSON.stringify(usage)})`);
}

async function stops() {
	const base = { model, prompt: prompts[0], max_tokens: M, temperature: 0 };
	const full = (await client.completions.create(base)).choices[0];
	const stop = full.text.slice(5, 7);
	const want = full.text.slice(0, full.text.indexOf(stop));
	const j = (await client.completions.create({ ...base, stop: [ 'never seen', stop ] }))
		.choices[0];

	check(j.text === want && j.finish_reason === 'stop' &&
	      j.token_ids.length === want.length, `stop ${JSON.stringify(stop)}: ${JSON.stringify(j)}`);
	console.log(`completions.create stop ${JSON.stringify([ 'never seen', stop ])} -> ` +
		    `${JSON.stringify(j.text)} (finish_reason ${j.finish_reason}; without stop ` +
		    `${JSON.stringify(full.text)})`);
	const s = await streamed({ ...base, stop });
	check(s.text === want && s.finish === 'stop' && s.usage.completion_tokens === want.length,
	      `stop stream: ${JSON.stringify(s)}`);
	console.log(`completions.create stream stop ${JSON.stringify(stop)} -> ` +
		    `${JSON.stringify(s.text)} (finish_reason ${s.finish})`);
	const id = full.token_ids[3];
	const k = full.token_ids.indexOf(id);
	const t = (await client.completions.create({ ...base, stop_token_ids: [ id ] })).choices[0];

	check(t.finish_reason === 'stop' &&
	      JSON.stringify(t.token_ids) === JSON.stringify(full.token_ids.slice(0, k)),
	      `stop_token_ids [${id}]: ${JSON.stringify(t)}`);
	console.log(`completions.create stop_token_ids [${id}] -> ${JSON.stringify(t.text)} ` +
		    `(finish_reason ${t.finish_reason})`);
	const messages = [ { role: 'user', content: 'Say something.' } ];
	const cfull = (await client.chat.completions.create({ model, messages, max_tokens: M,
							      temperature: 0 })).choices[0];
	const cstop = cfull.message.content.slice(3, 5);
	const c = (await client.chat.completions.create({ model, messages, max_tokens: M,
							  temperature: 0, stop: cstop })).choices[0];

	check(c.message.content === cfull.message.content.slice(0,
		cfull.message.content.indexOf(cstop)) && c.finish_reason === 'stop',
	      `chat stop: ${JSON.stringify(c)}`);
	console.log(`chat.completions.create stop ${JSON.stringify(cstop)} -> ` +
		    `${JSON.stringify(c.message.content)} (finish_reason ${c.finish_reason})`);
}

async function refused(what, call, status, param) {
	try {
		const r = await call();

		check(false, `${what}: answered ${JSON.stringify(r)}`);
	} catch (e) {
		check(e instanceof OpenAI.APIError && e.status === status && e.param === param &&
		      e.type === 'invalid_request_error',
		      `${what}: ${e.constructor.name} ${e.status} ${e.param} ${e.message}`);
		console.log(`${what} -> ${e.constructor.name} ${e.status} (param ${e.param}): ` +
			    `${e.message}`);
	}
}

async function main() {
	const ids = [];

	for await (const m of client.models.list())
		ids.push(m.id);
	check(ids.length === 1 && ids[0] === model, `models: ${ids}`);
	console.log(`models.list -> ${JSON.stringify(ids)}`);
	for (const sampled of [ false, true ])
		for (const stream of [ false, true ])
			await completions(sampled, stream);
	await chat();
	await stops();
	await refused('completions.create n=2',
		      () => client.completions.create({ model, prompt: 'x', n: 2 }), 400, 'n');
	await refused('completions.create logprobs=1',
		      () => client.completions.create({ model, prompt: 'x', logprobs: 1 }), 400,
		      'logprobs');
	await refused('chat.completions.create messages=[]',
		      () => client.chat.completions.create({ model, messages: [] }), 400,
		      'messages');
	await refused('completions.create max_tokens=0',
		      () => client.completions.create({ model, prompt: 'x', max_tokens: 0 }), 400,
		      'max_tokens');
	console.log(failures ? `${failures} checks failed` : 'every check passed');
	process.exit(failures ? 1 : 0);
}

main().catch((e) => {
	console.log(`FAIL: ${e.stack || e}`);
	process.exit(1);
});
