// Node twin of tools/make_tokenizer_fixtures.py (same output files, same format), using the
// official Node bindings of HF tokenizers (npm package "tokenizers", the same Rust core):
//   npm install --prefix /tmp/hftok tokenizers@0.23.2
//   NODE_PATH=/tmp/hftok/node_modules node tools/make_tokenizer_fixtures.js [TOKENIZER_ROOT ...]
// Lets the expected files be made on the dev machine; the Python script must agree with it.
const fs = require('fs');
const path = require('path');
const { Tokenizer } = require('tokenizers');

const root = path.resolve(__dirname, '..');
const corpus = path.join(root, 'tests/fixtures/tokenizer_corpus.jsonl');
const outDir = path.join(root, 'tests/fixtures/tokenizer_expected');

(async () => {
  const roots = process.argv.length > 2 ? process.argv.slice(2)
      : [path.join(root, 'tests/fixtures/tokenizers'), path.join(root, 'tests/tokenizer_data/npm')];
  const texts = fs.readFileSync(corpus, 'utf8').split('\n').filter((l) => l.trim()).map((l) => JSON.parse(l).text);
  fs.mkdirSync(outDir, { recursive: true });
  const found = {};
  for (const r of roots) {
    if (!fs.existsSync(r)) { console.log(`skipping ${r} (absent)`); continue; }
    for (const name of fs.readdirSync(r).sort()) {
      if (fs.existsSync(path.join(r, name, 'tokenizer.json'))) found[name] = path.join(r, name);
    }
  }
  for (const name of Object.keys(found).sort()) {
    const tok = Tokenizer.fromFile(path.join(found[name], 'tokenizer.json'));
    const rows = [];
    for (const text of texts) {
      const ids = Array.from((await tok.encode(text, null, { addSpecialTokens: true })).getIds());
      const plain = Array.from((await tok.encode(text, null, { addSpecialTokens: false })).getIds());
      rows.push(JSON.stringify({ text, ids, ids_no_special: plain, decoded: await tok.decode(ids, false),
                                 decoded_skip_special: await tok.decode(ids, true) }));
    }
    const out = path.join(outDir, `${name}.jsonl`);
    fs.writeFileSync(out, rows.join('\n') + '\n');
    console.log(`${name} -> ${path.relative(root, out)}`);
  }
})();
