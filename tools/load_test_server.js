#!/usr/bin/env node
// Bounded load test for `quiver serve` (loopback only, stops by itself).
//
//   node tools/load_test_server.js --url http://127.0.0.1:8000 [--duration 60] [--clients 64]
//        [--disconnect 0.15] [--api-key KEY] [--quiver build/quiver --max-lora-rank 64]
//
// C concurrent clients stream greedy completions (temperature 0, ignore_eos, token-id
// prompts) from a fixed pool of requests spread over up to 8 adapters, for the given
// duration; a fraction of requests disconnect after a chunk or two. Afterwards it checks:
//   - no 5xx (nor any other error status),
//   - /metrics shows nothing running or waiting and every KV block free,
//   - with --quiver: every completed response equals `quiver generate` on the same request
//     (token ids and finish reason; the pool is run through generate once),
// and reports requests/s, tokens/s and latency percentiles. Exit 0 only if all checks pass.
'use strict';

const fs = require('node:fs');
const os = require('node:os');
const path = require('node:path');
const { execFileSync } = require('node:child_process');

function parseArgs(argv) {
  const o = { url: '', duration: 60, clients: 64, disconnect: 0.15, apiKey: '', quiver: '', maxLoraRank: 64,
              pool: 64, maxTokens: 32, seed: 1 };
  const names = { '--url': 'url', '--duration': 'duration', '--clients': 'clients', '--disconnect': 'disconnect',
                  '--api-key': 'apiKey', '--quiver': 'quiver', '--max-lora-rank': 'maxLoraRank', '--pool': 'pool',
                  '--max-tokens': 'maxTokens', '--seed': 'seed' };
  for (let i = 2; i < argv.length; i += 2) {
    const key = names[argv[i]];
    if (!key || i + 1 >= argv.length) throw new Error(`unknown or incomplete option ${argv[i]}`);
    o[key] = typeof o[key] === 'number' ? Number(argv[i + 1]) : argv[i + 1];
  }
  if (!o.url) throw new Error('--url is required');
  const host = new URL(o.url).hostname;
  if (!['127.0.0.1', 'localhost', '::1', '[::1]'].includes(host)) throw new Error('loopback URLs only');
  return o;
}

// Small deterministic PRNG (mulberry32) so a run is reproducible from --seed.
function rng(seed) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function percentile(sorted, p) {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.floor((p / 100) * sorted.length))];
}

async function getJson(o, route) {
  const res = await fetch(`${o.url}${route}`, { headers: o.apiKey ? { Authorization: `Bearer ${o.apiKey}` } : {} });
  if (!res.ok) throw new Error(`${route}: HTTP ${res.status}`);
  return res.json();
}

async function metricValues(o) {
  const text = await (await fetch(`${o.url}/metrics`)).text();
  const v = (name) => {
    // vLLM's names where vLLM has the metric, quiver's prefix for the block counts.
    const line = text.split('\n').find((l) => l.startsWith(`vllm:${name}{`) || l.startsWith(`quiver:${name}{`));
    return line === undefined ? NaN : Number(line.slice(line.lastIndexOf(' ') + 1));
  };
  return { running: v('num_requests_running'), waiting: v('num_requests_waiting'),
           used: v('kv_cache_used_blocks'), total: v('kv_cache_total_blocks') };
}

// One streaming request. Resolves to {status, tokens, finish, ttft, latency, disconnected}.
async function streamOnce(o, req, disconnectAfter) {
  const ac = new AbortController();
  const t0 = performance.now();
  const out = { status: 0, tokens: [], finish: null, ttft: NaN, latency: NaN, disconnected: false, error: '' };
  let res;
  try {
    res = await fetch(`${o.url}/v1/completions`, {
      method: 'POST', signal: ac.signal,
      headers: { 'Content-Type': 'application/json', ...(o.apiKey ? { Authorization: `Bearer ${o.apiKey}` } : {}) },
      body: JSON.stringify({ model: req.model, prompt: req.prompt, max_tokens: req.max_tokens, temperature: 0,
                             ignore_eos: true, return_token_ids: true, stream: true }),
    });
  } catch (e) {
    out.error = `connect: ${e.message}`;
    return out;
  }
  out.status = res.status;
  if (!res.ok) {
    out.error = await res.text();
    return out;
  }
  const decoder = new TextDecoder();
  let buffer = '', chunks = 0, done = false;
  try {
    for await (const bytes of res.body) {
      buffer += decoder.decode(bytes, { stream: true });
      let cut;
      while ((cut = buffer.indexOf('\n\n')) >= 0) {
        const event = buffer.slice(0, cut);
        buffer = buffer.slice(cut + 2);
        if (!event.startsWith('data: ')) continue;
        const data = event.slice(6);
        if (data === '[DONE]') { done = true; continue; }
        const chunk = JSON.parse(data);
        if (chunk.error) { out.error = JSON.stringify(chunk.error); continue; }
        for (const c of chunk.choices) {
          if (c.token_ids?.length && Number.isNaN(out.ttft)) out.ttft = performance.now() - t0;
          out.tokens.push(...(c.token_ids ?? []));
          if (c.finish_reason) out.finish = c.finish_reason;
        }
        if (disconnectAfter > 0 && ++chunks >= disconnectAfter) {
          out.disconnected = true;
          ac.abort();
          return out;
        }
      }
    }
  } catch (e) {
    if (!out.disconnected) out.error = `stream: ${e.message}`;
    return out;
  }
  if (!done && !out.error) out.error = 'stream ended without [DONE]';
  out.latency = performance.now() - t0;
  return out;
}

function runGenerate(o, pool, base, targets) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'quiver-load-'));
  const input = path.join(dir, 'requests.jsonl'), output = path.join(dir, 'results.jsonl');
  fs.writeFileSync(input, pool.map((r) => JSON.stringify({
    id: r.id, prompt_token_ids: r.prompt, lora: r.model === base.id ? null : r.model, max_tokens: r.max_tokens,
    temperature: 0, ignore_eos: true })).join('\n') + '\n');
  const args = ['generate', '--model', base.root, '--input', input, '--output', output];
  const adapters = targets.filter((t) => t.id !== base.id);
  if (adapters.length) args.push('--max-loras', String(adapters.length), '--max-lora-rank', String(o.maxLoraRank));
  for (const t of adapters) args.push('--lora', `${t.id}=${t.root}`);
  execFileSync(o.quiver, args, { stdio: ['ignore', 'inherit', 'inherit'] });
  const results = new Map(fs.readFileSync(output, 'utf8').split('\n').filter(Boolean).map((l) => {
    const r = JSON.parse(l);
    return [r.id, r];
  }));
  fs.rmSync(dir, { recursive: true, force: true });
  return results;
}

async function main() {
  const o = parseArgs(process.argv);
  const models = (await getJson(o, '/v1/models')).data;
  const base = models[0];
  const adapters = models.filter((m) => m.parent !== null).slice(0, 8);
  const targets = adapters.length >= 8 ? adapters : [...adapters, base];
  let vocab = 256;
  try { vocab = JSON.parse(fs.readFileSync(path.join(base.root, 'config.json'), 'utf8')).vocab_size; } catch {}

  const rand = rng(o.seed);
  const pick = (n) => Math.floor(rand() * n);
  const pool = Array.from({ length: o.pool }, (_, i) => ({
    id: `p${i}`, model: targets[i % targets.length].id,
    prompt: Array.from({ length: 1 + pick(40) }, () => 3 + pick(vocab - 3)),
    max_tokens: 4 + pick(Math.max(1, o.maxTokens - 3)),
  }));

  console.log(`load test: ${o.clients} clients, ${o.duration} s, ${targets.length} targets ` +
              `(${targets.map((t) => t.id).join(', ')}), pool of ${pool.length}, disconnect ${o.disconnect}`);
  const deadline = performance.now() + o.duration * 1000;
  const records = [];
  const t0 = performance.now();
  await Promise.all(Array.from({ length: o.clients }, async () => {
    while (performance.now() < deadline) {
      const req = pool[pick(pool.length)];
      const disconnectAfter = rand() < o.disconnect ? 1 + pick(2) : 0;
      records.push({ req, ...(await streamOnce(o, req, disconnectAfter)) });
    }
  }));
  const elapsed = (performance.now() - t0) / 1000;

  const failures = [];
  const errors = records.filter((r) => r.status !== 200 || r.error);
  const fivexx = records.filter((r) => r.status >= 500);
  if (fivexx.length) failures.push(`${fivexx.length} responses with 5xx`);
  if (errors.length) failures.push(`${errors.length} failed requests, e.g. ${errors[0].status} ${errors[0].error}`);
  const completed = records.filter((r) => r.status === 200 && !r.error && !r.disconnected);
  const disconnected = records.filter((r) => r.disconnected);
  if (completed.length === 0) failures.push('no request completed');

  let idle = null;
  for (let i = 0; i < 300; i++) {
    idle = await metricValues(o);
    if (idle.running === 0 && idle.waiting === 0 && idle.used === 0) break;
    await new Promise((r) => setTimeout(r, 100));
  }
  if (!(idle.running === 0 && idle.waiting === 0 && idle.used === 0))
    failures.push(`server not idle afterwards: ${JSON.stringify(idle)}`);

  if (o.quiver) {
    const expected = runGenerate(o, pool, base, targets);
    let mismatches = 0;
    for (const r of completed) {
      const e = expected.get(r.req.id);
      if (!e || e.error || JSON.stringify(e.token_ids) !== JSON.stringify(r.tokens) || e.finish_reason !== r.finish) {
        if (mismatches++ < 3)
          console.log(`mismatch ${r.req.id} (${r.req.model}): server ${JSON.stringify(r.tokens)} ${r.finish}, ` +
                      `generate ${JSON.stringify(e?.token_ids)} ${e?.finish_reason} ${e?.error ?? ''}`);
      }
    }
    console.log(`compared ${completed.length} completed responses with quiver generate: ${mismatches} mismatches`);
    if (mismatches) failures.push(`${mismatches} responses differ from quiver generate`);
  }

  const lat = completed.map((r) => r.latency).sort((a, b) => a - b);
  const ttft = records.filter((r) => !Number.isNaN(r.ttft)).map((r) => r.ttft).sort((a, b) => a - b);
  const tokens = records.reduce((s, r) => s + r.tokens.length, 0);
  const ms = (v) => `${v.toFixed(1)} ms`;
  console.log(`requests: ${records.length} (${completed.length} completed, ${disconnected.length} disconnected, ` +
              `${errors.length} errors) in ${elapsed.toFixed(1)} s = ${(records.length / elapsed).toFixed(1)} req/s, ` +
              `${(tokens / elapsed).toFixed(0)} streamed tokens/s`);
  console.log(`latency (completed): p50 ${ms(percentile(lat, 50))}, p90 ${ms(percentile(lat, 90))}, ` +
              `p99 ${ms(percentile(lat, 99))}, max ${ms(lat.at(-1) ?? NaN)}`);
  console.log(`time to first token: p50 ${ms(percentile(ttft, 50))}, p90 ${ms(percentile(ttft, 90))}, ` +
              `p99 ${ms(percentile(ttft, 99))}`);
  console.log(`after the run: running ${idle.running}, waiting ${idle.waiting}, KV blocks used ${idle.used} of ${idle.total}`);
  if (failures.length) {
    console.log(`FAIL: ${failures.join('; ')}`);
    process.exit(1);
  }
  console.log('PASS');
}

main().catch((e) => {
  console.error(`load test error: ${e.stack ?? e}`);
  process.exit(1);
});
