// A strict parser of the Prometheus text exposition format (0.0.4), enough to refuse what a
// real scraper would refuse or misread: bad metric or label names, bad escapes, values that
// are not numbers, samples before their family's TYPE, a family declared twice or split in
// two, and histograms whose buckets are not cumulative or disagree with _count.
const NAME = /^[a-zA-Z_:][a-zA-Z0-9_:]*$/;
const LABEL = /^[a-zA-Z_][a-zA-Z0-9_]*$/;
const TYPES = new Set(['counter', 'gauge', 'histogram', 'summary', 'untyped']);

function parseValue(text, where) {
  if (text === '+Inf') return Infinity;
  if (text === '-Inf') return -Infinity;
  if (text === 'NaN') return NaN;
  if (!/^[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?$/.test(text)) throw new Error(`${where}: '${text}' is not a number`);
  return Number(text);
}

// `{a="x",b="y"}` starting at s[i] === '{'; returns [labels, index after '}'].
function parseLabels(s, i, where) {
  const labels = {};
  i++;
  while (s[i] !== '}') {
    const eq = s.indexOf('=', i);
    if (eq < 0) throw new Error(`${where}: label without '='`);
    const name = s.slice(i, eq);
    if (!LABEL.test(name)) throw new Error(`${where}: bad label name '${name}'`);
    if (name in labels) throw new Error(`${where}: label '${name}' repeated`);
    if (s[eq + 1] !== '"') throw new Error(`${where}: label '${name}' value is not quoted`);
    let j = eq + 2, value = '';
    for (;; j++) {
      if (j >= s.length) throw new Error(`${where}: unterminated label value`);
      const c = s[j];
      if (c === '"') break;
      if (c === '\\') {
        const e = s[++j];
        if (e === 'n') value += '\n';
        else if (e === '\\' || e === '"') value += e;
        else throw new Error(`${where}: bad escape '\\${e}' in label '${name}'`);
      } else if (c === '\n') {
        throw new Error(`${where}: raw newline in label '${name}'`);
      } else {
        value += c;
      }
    }
    labels[name] = value;
    i = j + 1;
    if (s[i] === ',') i++;
    else if (s[i] !== '}') throw new Error(`${where}: expected ',' or '}' after label '${name}'`);
  }
  return [labels, i + 1];
}

// The family a sample name belongs to, given the declared families.
function familyOf(name, families) {
  if (families.has(name)) return name;
  for (const suffix of ['_bucket', '_sum', '_count']) {
    const base = name.endsWith(suffix) ? name.slice(0, -suffix.length) : null;
    if (base && families.has(base) && ['histogram', 'summary'].includes(families.get(base).type)) return base;
  }
  return null;
}

function checkHistogram(family) {
  const series = new Map();  // labels without le -> {buckets, sum, count}
  for (const s of family.samples) {
    const { le, ...rest } = s.labels;
    const key = JSON.stringify(Object.entries(rest).sort());
    if (!series.has(key)) series.set(key, { buckets: [], sum: undefined, count: undefined });
    const h = series.get(key);
    if (s.name.endsWith('_bucket')) {
      if (le === undefined) throw new Error(`${family.name}: bucket without le`);
      h.buckets.push([parseValue(le, `${family.name} le`), s.value]);
    } else if (s.name.endsWith('_sum')) h.sum = s.value;
    else if (s.name.endsWith('_count')) h.count = s.value;
  }
  for (const h of series.values()) {
    if (h.sum === undefined || h.count === undefined) throw new Error(`${family.name}: _sum or _count missing`);
    const last = h.buckets.at(-1);
    if (!last || last[0] !== Infinity) throw new Error(`${family.name}: no +Inf bucket last`);
    for (let i = 1; i < h.buckets.length; i++) {
      if (!(h.buckets[i][0] > h.buckets[i - 1][0])) throw new Error(`${family.name}: bucket bounds not increasing`);
      if (h.buckets[i][1] < h.buckets[i - 1][1]) throw new Error(`${family.name}: buckets not cumulative`);
    }
    if (last[1] !== h.count) throw new Error(`${family.name}: +Inf bucket ${last[1]} != _count ${h.count}`);
  }
}

// Map family name -> {name, type, help, samples: [{name, labels, value}]}; throws on any defect.
export function parsePrometheusText(text) {
  if (!text.endsWith('\n')) throw new Error('the exposition does not end with a newline');
  const families = new Map();
  let current = null;
  const closed = new Set();
  const lines = text.split('\n').slice(0, -1);
  lines.forEach((line, n) => {
    const where = `line ${n + 1}`;
    if (line === '') return;
    if (line.startsWith('#')) {
      const m = /^# (HELP|TYPE) (\S+) ?(.*)$/.exec(line);
      if (!m) return;  // other comments are allowed
      const [, kind, name, rest] = m;
      if (!NAME.test(name)) throw new Error(`${where}: bad metric name '${name}'`);
      if (kind === 'TYPE') {
        if (!TYPES.has(rest)) throw new Error(`${where}: unknown type '${rest}'`);
        if (families.has(name) && families.get(name).type) throw new Error(`${where}: TYPE of ${name} given twice`);
        if (current && current !== name) closed.add(current);
        if (closed.has(name)) throw new Error(`${where}: family ${name} split in two`);
        const f = families.get(name) ?? { name, help: '', samples: [] };
        f.type = rest;
        families.set(name, f);
        current = name;
      } else {
        const f = families.get(name) ?? { name, type: undefined, samples: [] };
        f.help = rest;
        families.set(name, f);
      }
      return;
    }
    const nameEnd = line.search(/[{ ]/);
    if (nameEnd <= 0) throw new Error(`${where}: no value`);
    const name = line.slice(0, nameEnd);
    if (!NAME.test(name)) throw new Error(`${where}: bad metric name '${name}'`);
    let labels = {}, i = nameEnd;
    if (line[i] === '{') [labels, i] = parseLabels(line, i, where);
    if (line[i] !== ' ') throw new Error(`${where}: expected a space before the value`);
    const parts = line.slice(i + 1).split(' ');
    if (parts.length > 2) throw new Error(`${where}: trailing text`);
    const value = parseValue(parts[0], where);
    if (parts.length === 2 && !/^-?\d+$/.test(parts[1])) throw new Error(`${where}: bad timestamp`);
    const family = familyOf(name, families);
    if (!family || !families.get(family).type) throw new Error(`${where}: sample ${name} before its TYPE`);
    if (family !== current) throw new Error(`${where}: sample ${name} outside its family's block`);
    families.get(family).samples.push({ name, labels, value });
  });
  for (const f of families.values()) {
    if (f.type === 'histogram') checkHistogram(f);
    if (f.type === 'counter' && f.samples.some((s) => s.value < 0)) throw new Error(`${f.name}: negative counter`);
  }
  return families;
}
