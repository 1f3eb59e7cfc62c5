// HF `tokenizers` (the Rust library, through its official Node binding, npm `tokenizers`)
// on the same input as bench/bench_tokenizer.cc: the corpus lines repeated in order until
// >= 1 MiB, encoded without special tokens, one thread (RAYON_NUM_THREADS=1, pin with
// taskset). Lines go through encodeBatch so the binding's per-call overhead does not count
// against HF.
//   npm install --prefix /tmp/hftok tokenizers@0.23.2
//   RAYON_NUM_THREADS=1 taskset -c 0 node tools/bench_hf_tokenizers.js /tmp/hftok tests/tokenizer_data/npm/llama3
const fs = require('fs');
const path = require('path');
const [prefix, dir, corpus = 'tests/fixtures/tokenizer_corpus.jsonl'] = process.argv.slice(2);
const { Tokenizer } = require(path.join(path.resolve(prefix), 'node_modules', 'tokenizers'));

async function main() {
  const t0 = process.hrtime.bigint();
  const tok = Tokenizer.fromFile(path.join(dir, 'tokenizer.json'));
  const loadS = Number(process.hrtime.bigint() - t0) / 1e9;
  const texts = fs.readFileSync(corpus, 'utf8').split('\n').filter(Boolean)
    .map((l) => JSON.parse(l).text).filter((t) => t);
  const lines = [];
  let total = 0;
  outer: for (;;) {
    for (const t of texts) {
      lines.push(t);
      total += Buffer.byteLength(t, 'utf8');
      if (total >= (1 << 20)) break outer;
    }
  }
  const pass = async () => {
    const s = process.hrtime.bigint();
    const enc = await tok.encodeBatch(lines, { addSpecialTokens: false });
    const secs = Number(process.hrtime.bigint() - s) / 1e9;
    return [secs, enc.reduce((n, e) => n + e.getIds().length, 0)];
  };
  const [cold] = await pass();
  let best = 1e30, tokens = 0;
  for (let i = 0; i < 3; ++i) {
    const [s, n] = await pass();
    if (s < best) { best = s; tokens = n; }
  }
  console.log(`HF tokenizers (node binding) encodeBatch, ${dir}, RAYON_NUM_THREADS=${process.env.RAYON_NUM_THREADS}: ` +
              `${lines.length} lines, ${(total / 1e6).toFixed(2)} MB, ${tokens} tokens`);
  console.log(`  load ${loadS.toFixed(3)} s; first pass ${cold.toFixed(3)} s = ${(total / 1e6 / cold).toFixed(2)} MB/s; ` +
              `best of 3 warm ${best.toFixed(3)} s = ${(total / 1e6 / best).toFixed(2)} MB/s`);
}
main();
