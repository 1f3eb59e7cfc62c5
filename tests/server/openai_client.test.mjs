// Drives a running `quiver serve` with the official OpenAI client (node:test).
// run.sh starts the server on the llama_gqa fixture (8 adapters, API key) and sets:
//   QUIVER_URL, QUIVER_API_KEY, QUIVER_FIXTURE (the model folder), and optionally
//   QUIVER_CHAT_URL / QUIVER_CHAT_ADAPTER for a model with a tokenizer and chat template.
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import test from 'node:test';
import OpenAI from 'openai';

import { parsePrometheusText } from './prometheus_text.mjs';

const url = process.env.QUIVER_URL;
const apiKey = process.env.QUIVER_API_KEY;
const fixture = process.env.QUIVER_FIXTURE;
const client = new OpenAI({ baseURL: `${url}/v1`, apiKey, maxRetries: 0, timeout: 60_000 });

const readJsonl = (file) =>
  fs.readFileSync(file, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l));
const requests = readJsonl(path.join(fixture, 'requests.jsonl'));
const expected = new Map(readJsonl(path.join(fixture, 'expected.jsonl')).map((e) => [e.id, e]));
const adapterNames = fs.readdirSync(path.join(fixture, 'adapters')).sort();

async function metrics() {
  const text = await (await fetch(`${url}/metrics`)).text();
  const value = (name, extra = '') => {
    const line = text.split('\n').find((l) => (l.startsWith(`vllm:${name}{`) || l.startsWith(`quiver:${name}{`)) && l.includes(extra));
    return line === undefined ? undefined : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  return { text, value };
}

// Polls /metrics until nothing runs and every KV block is free (or fails after 10 s).
async function expectIdle() {
  let m;
  for (let i = 0; i < 200; i++) {
    m = await metrics();
    if (m.value('num_requests_running') === 0 && m.value('num_requests_waiting') === 0 &&
        m.value('kv_cache_used_blocks') === 0) return m;
    await new Promise((r) => setTimeout(r, 50));
  }
  assert.fail(`server not idle:\n${m.text.split('\n').filter((l) => !l.startsWith('#')).slice(0, 12).join('\n')}`);
}

// Greedy tokens must equal HF's up to and including the first near-tie (fixture README).
function compareToReference(got, exp, label) {
  for (let i = 0; i < exp.token_ids.length; i++) {
    assert.equal(got.token_ids[i], exp.token_ids[i], `${label}: token ${i}`);
    assert.ok(Math.abs(got.logprobs.token_logprobs[i] - exp.logprobs[i]) <= 1e-3, `${label}: logprob ${i}`);
    if (exp.margins[i] < 1e-2) break;
  }
}

test('GET /v1/models lists the base model, then every adapter under it', async () => {
  const models = [];
  for await (const m of client.models.list()) models.push(m);
  assert.equal(models[0].parent, null);
  assert.equal(path.resolve(models[0].root), path.resolve(fixture));
  assert.equal(models[0].max_model_len, 256);
  assert.deepEqual(models.slice(1).map((m) => m.id).sort(), adapterNames);
  for (const m of models.slice(1)) {
    assert.equal(m.parent, models[0].id);
    assert.equal(path.resolve(m.root), path.resolve(fixture, 'adapters', m.id));
  }
});

test('completions match the Hugging Face reference, adapters chosen by name', async () => {
  const base = (await client.models.list()).data[0].id;
  await Promise.all(requests.map(async (r) => {
    const res = await client.completions.create({
      model: r.lora ?? base, prompt: r.prompt_token_ids, max_tokens: r.max_tokens, temperature: 0,
      logprobs: 3, ignore_eos: true, return_token_ids: true,
    });
    const c = res.choices[0];
    assert.equal(res.object, 'text_completion');
    assert.equal(res.model, r.lora ?? base);
    assert.equal(c.finish_reason, 'length');
    assert.deepEqual(c.prompt_token_ids, r.prompt_token_ids);
    assert.equal(c.logprobs.tokens.length, r.max_tokens);
    assert.deepEqual(res.usage, { prompt_tokens: r.prompt_token_ids.length, completion_tokens: r.max_tokens,
                                  total_tokens: r.prompt_token_ids.length + r.max_tokens });
    compareToReference(c, expected.get(r.id), r.id);
  }));
});

test('streaming completions carry the same tokens, end with usage and [DONE]', async () => {
  const r = requests.find((q) => q.lora);
  const body = { model: r.lora, prompt: r.prompt_token_ids, max_tokens: 10, temperature: 0, ignore_eos: true,
                 return_token_ids: true };
  const whole = await client.completions.create(body);
  const stream = await client.completions.create({ ...body, stream: true, stream_options: { include_usage: true } });
  const tokens = [];
  let finish = null, usage = null, chunks = 0;
  for await (const chunk of stream) {
    chunks++;
    if (chunk.usage) usage = chunk.usage;
    for (const c of chunk.choices) {
      tokens.push(...c.token_ids);
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.ok(chunks >= 10, `expected one chunk per token, got ${chunks}`);
  assert.deepEqual(tokens, whole.choices[0].token_ids);
  assert.equal(finish, 'length');
  assert.deepEqual(usage, whole.usage);
});

test('a list of prompts with n choices each, and echo with logprobs', async () => {
  const prompts = [requests[0].prompt_token_ids, requests[1].prompt_token_ids];
  const res = await client.completions.create({ prompt: prompts, n: 2, max_tokens: 4, temperature: 0,
                                                ignore_eos: true, return_token_ids: true });
  assert.deepEqual(res.choices.map((c) => c.index), [0, 1, 2, 3]);
  assert.deepEqual(res.choices[0].token_ids, res.choices[1].token_ids);
  assert.deepEqual(res.choices[2].token_ids, res.choices[3].token_ids);
  assert.equal(res.usage.completion_tokens, 16);
  assert.equal(res.usage.prompt_tokens, prompts[0].length + prompts[1].length);

  const echo = await client.completions.create({ prompt: prompts[1], echo: true, logprobs: 1, max_tokens: 3,
                                                 temperature: 0, ignore_eos: true });
  const lp = echo.choices[0].logprobs;
  assert.equal(lp.tokens.length, prompts[1].length + 3);
  assert.equal(lp.token_logprobs[0], null);
  assert.equal(typeof lp.token_logprobs[1], 'number');
});

test('seeded sampling repeats; stop_token_ids stop', async () => {
  const body = { prompt: requests[2].prompt_token_ids, max_tokens: 8, temperature: 1.0, top_p: 0.9, top_k: 50,
                 min_p: 0.01, seed: 1234, presence_penalty: 0.5, frequency_penalty: 0.2, repetition_penalty: 1.1,
                 ignore_eos: true, return_token_ids: true };
  const a = await client.completions.create(body);
  const b = await client.completions.create(body);
  assert.deepEqual(a.choices[0].token_ids, b.choices[0].token_ids);
  const stopAt = a.choices[0].token_ids[2];
  const stopped = await client.completions.create({ ...body, stop_token_ids: [stopAt] });
  assert.equal(stopped.choices[0].finish_reason, 'stop');
  assert.equal(stopped.choices[0].token_ids.at(-1), stopAt);
  assert.equal(stopped.choices[0].stop_reason, stopAt);
});

test('errors: 404 unknown model, 400 bad parameters, 401 without the key', async () => {
  const prompt = [1, 2, 3];
  await assert.rejects(client.completions.create({ model: 'no-such-adapter', prompt }),
                       (e) => e instanceof OpenAI.NotFoundError && e.status === 404 && e.param === 'model');
  const bad = [
    [{ temperature: -1 }, 'temperature'], [{ top_p: 0 }, 'top_p'], [{ n: 0 }, 'n'], [{ logprobs: 21 }, 'logprobs'],
    [{ max_tokens: 0 }, 'max_tokens'], [{ max_tokens: 1000 }, 'max_tokens'], [{ presence_penalty: 3 }, 'presence_penalty'],
    [{ stop: 7 }, 'stop'], [{ stream_options: { include_usage: true } }, 'stream_options'],
  ];
  for (const [extra, param] of bad) {
    await assert.rejects(client.completions.create({ prompt, ...extra }),
                         (e) => e instanceof OpenAI.BadRequestError && e.param === param,
                         JSON.stringify(extra));
  }
  await assert.rejects(client.completions.create({ prompt: Array(300).fill(5) }),  // longer than the context
                       (e) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.completions.create({ prompt: [100000] }), (e) => e instanceof OpenAI.BadRequestError);
  await assert.rejects(client.completions.create({ prompt: 'text needs a tokenizer' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'prompt');
  const wrongKey = new OpenAI({ baseURL: `${url}/v1`, apiKey: 'wrong', maxRetries: 0 });
  await assert.rejects(wrongKey.completions.create({ prompt }), (e) => e instanceof OpenAI.AuthenticationError);
  const noKey = await fetch(`${url}/v1/models`);
  assert.equal(noKey.status, 401);
  assert.equal((await noKey.json()).error.code, 401);
});

test('strict requests: an unknown field and an unsupported one are 400s that name them', async () => {
  const prompt = [1, 2, 3];
  await assert.rejects(client.completions.create({ prompt, max_token: 3 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_token' &&
                              /unknown field/.test(e.message));
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'x' }], max_token: 3 }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'max_token');
  await assert.rejects(client.completions.create({ prompt, logits_processors: ['x'] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'logits_processors' &&
                              /not supported/.test(e.message));
  // The no-op value of an unsupported parameter is fine.
  const ok = await client.completions.create({ prompt, max_tokens: 2, use_beam_search: false, user: 'u' });
  assert.equal(ok.usage.completion_tokens, 2);
});

test('prompt_logprobs come back on the choice without echo, equal to the echoed ones', async () => {
  const prompt = requests[0].prompt_token_ids;
  const res = await client.completions.create({ prompt, max_tokens: 1, temperature: 0, prompt_logprobs: 2,
                                               request_id: 'mine-1' });
  assert.equal(res.id, 'cmpl-mine-1');
  const pl = res.choices[0].prompt_logprobs;
  assert.equal(pl.length, prompt.length);
  assert.equal(pl[0], null);
  const echoed = await client.completions.create({ prompt, max_tokens: 1, temperature: 0, echo: true, logprobs: 2 });
  for (let i = 1; i < prompt.length; i++) {
    const actual = pl[i][String(prompt[i])];
    assert.ok(actual !== undefined, `position ${i} lacks the prompt's token`);
    assert.ok(Object.keys(pl[i]).length >= 2 && Object.keys(pl[i]).length <= 3);
    assert.ok(Math.abs(actual.logprob - echoed.choices[0].logprobs.token_logprobs[i]) <= 1e-6, `position ${i}`);
    assert.ok(actual.rank >= 1);
  }
});

// vLLM's metric families as its /metrics names them (TYPE lines), which dashboards query.
const VLLM_FAMILIES = {
  'vllm:num_requests_running': 'gauge', 'vllm:num_requests_waiting': 'gauge',
  'vllm:kv_cache_usage_perc': 'gauge', 'vllm:gpu_cache_usage_perc': 'gauge',
  'vllm:prompt_tokens_total': 'counter', 'vllm:generation_tokens_total': 'counter',
  'vllm:num_preemptions_total': 'counter', 'vllm:request_success_total': 'counter',
  'vllm:time_to_first_token_seconds': 'histogram', 'vllm:inter_token_latency_seconds': 'histogram',
  'vllm:time_per_output_token_seconds': 'histogram', 'vllm:e2e_request_latency_seconds': 'histogram',
  'vllm:request_prompt_tokens': 'histogram', 'vllm:request_generation_tokens': 'histogram',
  'vllm:cache_config_info': 'gauge', 'vllm:lora_requests_info': 'gauge',
};

test('the parser refuses malformed expositions', () => {
  const bad = [
    'x 1\n',                                                  // no TYPE
    '# TYPE x gauge\nx{a="b} 1\n',                           // unterminated label
    '# TYPE x gauge\nx{a="\\q"} 1\n',                       // bad escape
    '# TYPE x gauge\nx one\n',                               // not a number
    '# TYPE x gauge\n# TYPE y gauge\ny 1\nx 1\n',             // sample outside its block
    '# TYPE h histogram\nh_bucket{le="1"} 2\nh_bucket{le="+Inf"} 1\nh_sum 1\nh_count 1\n',  // not cumulative
    '# TYPE h histogram\nh_bucket{le="+Inf"} 2\nh_sum 1\nh_count 3\n',                     // +Inf != count
    '# TYPE x gauge\nx 1',                                    // no final newline
  ];
  for (const text of bad) assert.throws(() => parsePrometheusText(text), JSON.stringify(text));
  assert.equal(parsePrometheusText('# HELP x h\n# TYPE x gauge\nx{a="q\\"b"} 1\n').get('x').samples[0].labels.a, 'q"b');
});

test('/metrics parses strictly and carries vLLM\'s names and types', async () => {
  await client.completions.create({ prompt: [1, 2, 3], max_tokens: 2 });
  const families = parsePrometheusText(await (await fetch(`${url}/metrics`)).text());
  for (const [name, type] of Object.entries(VLLM_FAMILIES)) {
    assert.ok(families.has(name), `${name} missing`);
    assert.equal(families.get(name).type, type, name);
    assert.ok(families.get(name).samples.length > 0, `${name} has no sample`);
  }
  for (const name of families.keys()) {
    assert.ok(name in VLLM_FAMILIES || name.startsWith('quiver:'), `${name}: neither vLLM's name nor quiver's prefix`);
  }
  const total = families.get('quiver:kv_cache_total_blocks').samples[0].value;
  assert.ok(total > 0);
  assert.equal(Number(families.get('vllm:cache_config_info').samples[0].labels.num_gpu_blocks), total);
  const done = families.get('vllm:request_prompt_tokens').samples.find((s) => s.name.endsWith('_count'));
  assert.ok(done.value >= 1);
});

test('every series the shipped Grafana dashboard queries is in the scrape', async () => {
  const dashboard = fs.readFileSync(path.join(import.meta.dirname ?? path.dirname(new URL(import.meta.url).pathname),
                                              '../../docs/grafana_dashboard.json'), 'utf8');
  const wanted = new Set(dashboard.match(/vllm:[a-zA-Z0-9_]+/g));
  assert.ok(wanted.size >= 10);
  const families = parsePrometheusText(await (await fetch(`${url}/metrics`)).text());
  const series = new Set([...families.values()].flatMap((f) => f.samples.map((s) => s.name)));
  for (const name of wanted) assert.ok(series.has(name), `the dashboard queries ${name}, which /metrics lacks`);
});

test('a client that disconnects mid-stream aborts its request and frees its KV blocks', async () => {
  const before = (await metrics()).value('request_success_total', 'finished_reason="abort"');
  const stream = await client.completions.create({ prompt: requests[3].prompt_token_ids, n: 16, max_tokens: 200,
                                                   ignore_eos: true, stream: true });
  for await (const chunk of stream) { assert.ok(chunk.choices.length > 0); break; }  // break = disconnect
  // A non-streaming request whose client gives up.
  const ac = new AbortController();
  const pending = fetch(`${url}/v1/completions`, {
    method: 'POST', signal: ac.signal, headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
    body: JSON.stringify({ prompt: requests[4].prompt_token_ids, n: 16, max_tokens: 200, ignore_eos: true }),
  });
  await new Promise((r) => setTimeout(r, 100));
  ac.abort();
  await assert.rejects(pending);
  const m = await expectIdle();
  assert.equal(m.value('request_success_total', 'finished_reason="abort"'), before + 2);
});

test('chat completions need a tokenizer and chat template', async (t) => {
  await assert.rejects(client.chat.completions.create({ messages: [{ role: 'user', content: 'hi' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'messages');
  const chatUrl = process.env.QUIVER_CHAT_URL;
  if (!chatUrl) {
    t.skip('no model with a tokenizer and chat template (models/demo not present yet)');
    return;
  }
  const chat = new OpenAI({ baseURL: `${chatUrl}/v1`, apiKey, maxRetries: 0 });
  const adapter = process.env.QUIVER_CHAT_ADAPTER;
  const messages = [{ role: 'user', content: 'Say it like a pirate: the ship is ready.' }];
  const res = await chat.chat.completions.create({ messages, max_completion_tokens: 8, temperature: 0,
                                                  logprobs: true, top_logprobs: 2 });
  assert.equal(res.object, 'chat.completion');
  assert.equal(res.choices[0].message.role, 'assistant');
  assert.equal(typeof res.choices[0].message.content, 'string');
  assert.ok(res.choices[0].logprobs.content.length >= 1);
  assert.equal(res.choices[0].logprobs.content[0].top_logprobs.length, 2);
  const stream = await chat.chat.completions.create({ messages, max_tokens: 8, temperature: 0, stream: true });
  let text = '', first = null, finish = null;
  for await (const chunk of stream) {
    first ??= chunk;
    text += chunk.choices[0]?.delta?.content ?? '';
    finish = chunk.choices[0]?.finish_reason ?? finish;
  }
  assert.equal(first.choices[0].delta.role, 'assistant');
  assert.equal(text, res.choices[0].message.content);
  assert.ok(finish === 'stop' || finish === 'length');
  // n choices stream: every choice gets its role chunk first.
  const roles = new Set();
  for await (const chunk of await chat.chat.completions.create({ messages, max_tokens: 4, n: 2, stream: true,
                                                                 temperature: 0.8, seed: 7 })) {
    for (const c of chunk.choices) if (c.delta.role) roles.add(c.index);
  }
  assert.deepEqual([...roles].sort(), [0, 1]);
  // Text prompts and stop strings.
  const tc = await chat.completions.create({ prompt: 'The secret of life', max_tokens: 12, temperature: 0 });
  assert.equal(typeof tc.choices[0].text, 'string');
  assert.ok(tc.usage.prompt_tokens > 1);
  const word = tc.choices[0].text.trim().split(/\s+/)[1];
  if (word) {
    const stopped = await chat.completions.create({ prompt: 'The secret of life', max_tokens: 12, temperature: 0,
                                                    stop: [word] });
    assert.equal(stopped.choices[0].finish_reason, 'stop');
    assert.equal(stopped.choices[0].stop_reason, word);
    assert.ok(!stopped.choices[0].text.includes(word));
  }
  // The Responses API: the same prompt and sampling give the chat answer, whole and as events.
  const whole = await chat.responses.create({ input: messages[0].content, max_output_tokens: 8, temperature: 0 });
  assert.equal(whole.object, 'response');
  assert.ok(whole.id.startsWith('resp_'));
  assert.equal(whole.output_text, res.choices[0].message.content);
  assert.equal(whole.status, res.choices[0].finish_reason === 'length' ? 'incomplete' : 'completed');
  assert.equal(whole.usage.input_tokens, res.usage.prompt_tokens);
  assert.equal(whole.usage.output_tokens, res.usage.completion_tokens);
  const input = [{ role: 'user', content: [{ type: 'input_text', text: messages[0].content }] }];
  const parts = await chat.responses.create({ max_output_tokens: 8, temperature: 0, input });
  assert.equal(parts.output_text, whole.output_text);
  const events = [];
  for await (const ev of await chat.responses.create({ input: messages[0].content, max_output_tokens: 8,
                                                        temperature: 0, stream: true })) events.push(ev);
  assert.deepEqual(events.map((e) => e.sequence_number), events.map((_, i) => i));
  assert.deepEqual(events.slice(0, 4).map((e) => e.type),
                   ['response.created', 'response.in_progress', 'response.output_item.added',
                    'response.content_part.added']);
  const deltas = events.filter((e) => e.type === 'response.output_text.delta').map((e) => e.delta).join('');
  assert.equal(deltas, whole.output_text);
  const last = events.at(-1);
  assert.equal(last.type, whole.status === 'completed' ? 'response.completed' : 'response.incomplete');
  assert.equal(last.response.output[0].content[0].text, whole.output_text);
  assert.equal(last.response.usage.output_tokens, whole.usage.output_tokens);
  await assert.rejects(chat.responses.create({ input: 'x', previous_response_id: 'resp_1' }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'previous_response_id');
  await assert.rejects(chat.responses.create({ input: 'x', tools: [{ type: 'web_search' }] }),
                       (e) => e instanceof OpenAI.BadRequestError && e.param === 'tools');
  if (adapter === 'sql') {  // the demo's text-to-SQL adapter, chosen by name
    const q = 'Write a SQL query to answer the question based on the table schema.\n\n context: CREATE TABLE ' +
              'table_name_1 (name VARCHAR, age VARCHAR)\n\n question: What is the name of the person aged 30?';
    const a = await chat.chat.completions.create({ model: adapter, messages: [{ role: 'user', content: q }],
                                                  max_tokens: 40, temperature: 0 });
    assert.equal(a.model, adapter);
    assert.match(a.choices[0].message.content, /SELECT/);
    const b = await chat.chat.completions.create({ messages: [{ role: 'user', content: q }], max_tokens: 40,
                                                  temperature: 0 });
    assert.notEqual(b.choices[0].message.content, a.choices[0].message.content);
  }
});
