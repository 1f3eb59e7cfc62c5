// Structured outputs and tool calling through the official OpenAI client (node:test).
// run.sh starts `quiver serve` on the demo model (tokenizer + chat template, weights that
// write junk without a constraint) with --enable-auto-tool-choice --tool-call-parser
// hermes, and sets QUIVER_STRUCT_URL. Outputs are sampled at temperature 1 with seeds, so
// only the constraints can make them parse.
import assert from 'node:assert/strict';
import test from 'node:test';
import OpenAI from 'openai';

const client = new OpenAI({ baseURL: `${process.env.QUIVER_STRUCT_URL}/v1`, apiKey: 'none', maxRetries: 0, timeout: 120_000 });
const model = (await client.models.list()).data[0].id;

// A validator for the schema subset the tests use, from the JSON Schema rules.
function validate(v, s, where = '$') {
  const fail = (why) => assert.fail(`${where}: ${why} (${JSON.stringify(v)})`);
  if (s.const !== undefined && JSON.stringify(v) !== JSON.stringify(s.const)) fail('not the const');
  if (s.enum && !s.enum.some((e) => JSON.stringify(e) === JSON.stringify(v))) fail('not in enum');
  const type = Array.isArray(v) ? 'array' : v === null ? 'null' : Number.isInteger(v) ? 'integer' : typeof v;
  if (s.type && !(s.type === type || (s.type === 'number' && type === 'integer'))) fail(`type ${type}, want ${s.type}`);
  if (type === 'string' && s.maxLength !== undefined && [...v].length > s.maxLength) fail('too long');
  if (type === 'array') {
    if (s.minItems !== undefined && v.length < s.minItems) fail('too few items');
    if (s.maxItems !== undefined && v.length > s.maxItems) fail('too many items');
    if (s.items) v.forEach((e, i) => validate(e, s.items, `${where}[${i}]`));
  }
  if (type === 'object' && s.properties) {
    for (const k of Object.keys(v)) {
      if (!(k in s.properties)) fail(`unexpected property ${k}`);
      validate(v[k], s.properties[k], `${where}.${k}`);
    }
    for (const k of s.required ?? []) if (!(k in v)) fail(`missing ${k}`);
  }
}

const schema = {
  type: 'object',
  properties: {
    city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
    sunny: { type: 'boolean' },
    note: { type: 'string', maxLength: 8 },
    days: { type: 'array', items: { type: 'integer', enum: [1, 2, 3] }, maxItems: 3 },
  },
  required: ['city', 'sunny'],
  additionalProperties: false,
};

const tools = [
  {
    type: 'function',
    function: {
      name: 'get_weather',
      description: 'Weather in a city',
      parameters: {
        type: 'object',
        properties: { city: { type: 'string', enum: ['Paris', 'Oslo'] }, unit: { enum: ['c', 'f'] } },
        required: ['city', 'unit'],
      },
    },
  },
  { type: 'function', function: { name: 'get_time', parameters: { type: 'object', properties: { zone: { enum: ['utc', 'cet'] } }, required: ['zone'] } } },
];
const messages = [{ role: 'user', content: 'What is the weather in Paris?' }];

test('chat response_format json_schema: the content parses and validates, several seeds', async () => {
  for (const seed of [1, 2, 3, 4]) {
    const r = await client.chat.completions.create({
      model, messages, temperature: 1, seed, max_tokens: 200,
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema, strict: true } },
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'stop', c.message.content);
    validate(JSON.parse(c.message.content), schema);
  }
});

test('completions guided_json, guided_regex, guided_choice and structured_outputs', async () => {
  const base = { model, prompt: 'Answer:', temperature: 1, max_tokens: 120 };
  for (const seed of [5, 6]) {
    const j = await client.completions.create({ ...base, seed, guided_json: schema });
    validate(JSON.parse(j.choices[0].text), schema);
    const re = await client.completions.create({ ...base, seed, guided_regex: '[A-Z][a-z]{2,5} [0-9]{3}' });
    assert.match(re.choices[0].text, /^[A-Z][a-z]{2,5} [0-9]{3}$/);
    const ch = await client.completions.create({ ...base, seed, guided_choice: ['alpha', 'beta', 'gamma delta'] });
    assert.ok(['alpha', 'beta', 'gamma delta'].includes(ch.choices[0].text), ch.choices[0].text);
    const so = await client.completions.create({ ...base, seed, structured_outputs: { choice: ['yes', 'no'] } });
    assert.ok(['yes', 'no'].includes(so.choices[0].text), so.choices[0].text);
  }
});

test('an unsupported schema keyword is a 400 naming it', async () => {
  await assert.rejects(
    client.chat.completions.create({
      model, messages, max_tokens: 5,
      response_format: { type: 'json_schema', json_schema: { name: 'x', schema: { type: 'string', format: 'date' } } },
    }),
    (e) => e.status === 400 && /'format' is not supported/.test(e.message),
  );
  await assert.rejects(
    client.completions.create({ model, prompt: 'x', max_tokens: 5, guided_grammar: 'root ::= "a"' }),
    (e) => e.status === 400 && /guided_grammar/.test(e.message),
  );
});

// A sampled list of calls may still be open at max_tokens (the demo model's draws differ
// between AVX2 and AVX-512 hosts): such a seed ends with 'length'; every seed that ends
// must end with valid calls, and most do.
test('tool_choice required: tool_calls in OpenAI shape, arguments valid for the tool, non-streaming', async () => {
  let finished = 0;
  for (const seed of [3, 5, 7, 9]) {
    const r = await client.chat.completions.create({ model, messages, tools, tool_choice: 'required', temperature: 1, seed, max_tokens: 200 });
    const c = r.choices[0];
    if (c.finish_reason === 'length') continue;
    ++finished;
    assert.equal(c.finish_reason, 'tool_calls');
    assert.ok(c.message.tool_calls.length >= 1);
    for (const call of c.message.tool_calls) {
      assert.equal(call.type, 'function');
      assert.match(call.id, /^chatcmpl-tool-/);
      const tool = tools.find((t) => t.function.name === call.function.name);
      assert.ok(tool, call.function.name);
      assert.equal(typeof call.function.arguments, 'string');
      validate(JSON.parse(call.function.arguments), tool.function.parameters);
    }
  }
  assert.ok(finished >= 2, `only ${finished} of 4 seeds ended within max_tokens`);
});

test('named tool_choice, streaming: deltas assemble into one valid call', async () => {
  const stream = await client.chat.completions.create({
    model, messages, tools, tool_choice: { type: 'function', function: { name: 'get_weather' } },
    temperature: 1, seed: 4, max_tokens: 200, stream: true,
  });
  const calls = [];
  let finish = null;
  for await (const chunk of stream) {
    const ch = chunk.choices[0];
    if (!ch) continue;
    for (const d of ch.delta.tool_calls ?? []) {
      calls[d.index] ??= { id: '', name: '', arguments: '' };
      if (d.id) calls[d.index].id = d.id;
      if (d.function?.name) calls[d.index].name += d.function.name;
      if (d.function?.arguments) calls[d.index].arguments += d.function.arguments;
    }
    if (ch.finish_reason) finish = ch.finish_reason;
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.ok(calls[0].id.length > 0);
  validate(JSON.parse(calls[0].arguments), tools[0].function.parameters);
});

test('tool_choice auto: junk text stays content, with no tool_calls; it streams as it comes, and agrees', async () => {
  const req = { model, messages, tools, temperature: 1, seed: 8, max_tokens: 12 };
  const whole = await client.chat.completions.create(req);
  assert.deepEqual(whole.choices[0].message.tool_calls, []);
  let text = '';
  let pieces = 0;
  for await (const chunk of await client.chat.completions.create({ ...req, stream: true })) {
    const piece = chunk.choices[0]?.delta?.content ?? '';
    text += piece;
    if (piece) pieces++;
  }
  assert.equal(text, whole.choices[0].message.content);
  // No call began, so the content went out token by token, not in one piece at the end.
  assert.ok(pieces > 3, `${pieces} content deltas`);
});

// The Responses API on the same pipeline: a named function tool comes back as a
// function_call output item whose arguments validate, whole and streamed as events.
test('responses: a named function tool as a function_call item, whole and streamed', async () => {
  const rtools = tools.map((t) => ({ type: 'function', name: t.function.name, parameters: t.function.parameters }));
  const req = { model, input: messages[0].content, tools: rtools,
                tool_choice: { type: 'function', name: 'get_weather' }, temperature: 1, seed: 4, max_output_tokens: 200 };
  const whole = await client.responses.create(req);
  assert.equal(whole.status, 'completed');
  const calls = whole.output.filter((o) => o.type === 'function_call');
  assert.equal(calls.length, 1);
  assert.equal(calls[0].name, 'get_weather');
  assert.ok(calls[0].call_id.length > 0 && calls[0].id.startsWith('fc_'));
  validate(JSON.parse(calls[0].arguments), tools[0].function.parameters);
  let args = '', done = null;
  for await (const ev of await client.responses.create({ ...req, stream: true })) {
    if (ev.type === 'response.function_call_arguments.delta') args += ev.delta;
    if (ev.type === 'response.completed') done = ev.response;
  }
  assert.equal(args, calls[0].arguments);  // the same seed: the same call
  assert.deepEqual(done.output.map((o) => o.type), ['function_call']);
  assert.equal(done.output[0].arguments, calls[0].arguments);
});
