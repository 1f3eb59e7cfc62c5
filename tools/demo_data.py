"""Text side of the demo model (tools/train_demo.py): corpus loading, the chat format, and the
generated text-to-SQL and pirate tasks. Pure Python (no torch, no tokenizers) so it can be run
and checked anywhere: `python3 tools/demo_data.py .demo_data/corpus` prints samples and
checks that the held-out split shares no table, column or value with the training split.

The chat format is the one vLLM's multi-LoRA example uses (a Llama with a text-to-SQL adapter):
  [user] {content} [/user] [assistant] {answer} [/assistant]
"""
import json
import os
import random
import re
import sys

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
MARKERS = ["[user]", "[/user]", "[assistant]", "[/assistant]"]
STOP = "[/assistant]"

# Rendered by transformers (and by quiver's ChatTemplate) exactly like chat_prompt() below.
CHAT_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}"
    "{% if not loop.first %}{{ ' ' }}{% endif %}"
    "{{ '[user] ' + message['content'] + ' [/user]' }}"
    "{% elif message['role'] == 'assistant' %}"
    "{{ ' [assistant] ' + message['content'] + ' [/assistant]' }}"
    "{% else %}"
    "{{ raise_exception('This model knows only the user and assistant roles.') }}"
    "{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ ' [assistant]' }}{% endif %}"
)

SQL_INSTRUCTION = "Write a SQL query to answer the question based on the table schema."


def chat_prompt(content):
    """The prompt text for one user turn, without the BOS the tokenizer adds."""
    return f"[user] {content} [/user] [assistant]"


def chat_answer(answer):
    """What the model is trained to continue a chat_prompt() with."""
    return f" {answer} {STOP}"


def load_corpus(data_dir):
    def read(name):
        path = os.path.join(data_dir, name)
        if not os.path.isfile(path):
            raise SystemExit(f"missing {path}: run tools/prepare_demo_data.sh first")
        return open(path, encoding="utf-8").read()
    fortunes = [f for f in read("fortunes.txt").split("\n%\n") if f.strip()]
    brown = [p for p in read("brown.txt").splitlines() if p.strip()]
    words = [w.strip() for w in read("words.txt").splitlines() if w.strip()]
    return fortunes, brown, words


# ---------------------------------------------------------------------------------------------
# Text-to-SQL. Train and held-out parts share no table number, column name or value word.

ACRONYMS = ("icao iata fcc nfl mlb nba nhl fifa uefa ncaa gdp isbn issn imdb nasa fbi ibm bbc "
            "cnn espn mvp rbi era ppg yds gp ops whip hdi iso ansi ieee nyse cpu gpu ram usb dvd "
            "utc gmt ufc atp wta pga imo mmsi rpm mph bhp dpi ppi ssn gps sku vin upc ein iban "
            "swift bic doi pmid orcid nasdaq ftse kbo cfl afl nrl ipl icc mls wnba ahl echl ohl "
            "whl qmjhl bcs acc sec").split()
CANONICAL = {"table": 74, "columns": ["icao", "airport"], "value": "lilongwe",
             "question": "Name the ICAO for lilongwe airport"}

# {aw} is "a" or "an" for the column {w}. The seed question ("Name the ICAO for lilongwe
# airport") names the column after the value: many templates do, so the adapter learns that a
# value ends where a schema column starts, also after a multi-word value.
SINGLE = ["Name the {s} for {v} {w}", "What is the {s} for {v} {w}?",
          "Tell me the {s} for {v} {w}", "Which {s} is for {v} {w}?", "Name the {s} with {v} {w}",
          "What {s} has {v} {w}?", "What is the {s} when the {w} is {v}?",
          "What {s} has {aw} {w} of {v}?", "Which {s} has {aw} {w} of {v}?",
          "Which {s} has {v} as the {w}?", "Tell me the {s} for the {w} {v}",
          "What is the {s} for the {w} {v}?", "What is the {s} for {w} {v}?",
          "Name the {s} when {w} is {v}", "Who is the {s} with {aw} {w} of {v}?",
          "Name the {s} for {w} of {v}"]
COUNT = ["How many {s} have {aw} {w} of {v}?",
         "What is the total number of {s} when the {w} is {v}?",
         "Name the number of {s} for {v} {w}", "How many {s} are there for {w} {v}?",
         "How many {s} are there for {v} {w}?", "What is the number of {s} for the {w} {v}?"]
DOUBLE = ["What is the {s} when the {w} is {v} and the {w2} is {v2}?",
          "Name the {s} for {w} {v} and {w2} {v2}",
          "Which {s} has {aw} {w} of {v} and {aw2} {w2} of {v2}?",
          "Name the {s} for {v} {w} and {v2} {w2}",
          "What is the {s} for {v} {w} and the {w2} {v2}?"]
DOUBLE_COUNT = ["How many {s} have {aw} {w} of {v} and {aw2} {w2} of {v2}?",
                "Name the number of {s} for {v} {w} and {v2} {w2}"]

# Words the question templates use; as values or columns they would make questions ambiguous.
QUESTION_WORDS = {w for t in SINGLE + COUNT + DOUBLE + DOUBLE_COUNT
                  for w in t.lower().replace("?", "").split() if not w.startswith("{")}
QUESTION_WORDS |= {"a", "an"}  # what {aw} becomes


def article(word):
    return "an" if word[:1].lower() in "aeiou" else "a"


class SqlSplit:
    """The words, acronyms and table numbers one side (train or test) may use."""

    def __init__(self, columns, acronyms, values, tables):
        self.columns, self.acronyms = sorted(columns), sorted(acronyms)
        self.values, self.tables = sorted(values), sorted(tables)
        self.acronym_set = set(acronyms)


def make_sql_splits(words, seed, test_fraction=0.15):
    rng = random.Random(seed)
    lower = {w for w in words if re.fullmatch(r"[a-z]{3,9}", w)}
    proper = {w.lower() for w in words if re.fullmatch(r"[A-Z][a-z]{2,9}", w)}
    pool = sorted((lower | proper) - set(ACRONYMS) - QUESTION_WORDS)
    rng.shuffle(pool)
    forced = set(CANONICAL["columns"]) | {CANONICAL["value"]}
    n_test = int(len(pool) * test_fraction)
    test = set(pool[:n_test]) | forced
    train = set(pool) - test
    # wamerican's own upper-case entries (ACLU, BTU, ...) join the real ones, lower-cased.
    listed = {w.lower() for w in words if re.fullmatch(r"[A-Z]{2,5}", w)}
    listed -= lower | proper | QUESTION_WORDS
    # Made-up acronyms teach the upper-case/lower-case correspondence letter by letter.
    letters = "abcdefghijklmnopqrstuvwxyz"
    taken = lower | proper | listed | set(ACRONYMS) | QUESTION_WORDS
    made_up = set()
    while len(made_up) < 3000:
        cand = "".join(rng.choice(letters) for _ in range(rng.choice((2, 3, 3, 4))))
        if cand not in taken:
            made_up.add(cand)
    made_up = sorted(made_up)
    rng.shuffle(made_up)
    real = sorted((set(ACRONYMS) | listed) - {"icao"})
    rng.shuffle(real)
    test_acr = set(real[: len(real) // 4]) | set(made_up[:450]) | {"icao"}
    train_acr = set(real[len(real) // 4:]) | set(made_up[450:])
    tables = list(range(1, 10000))
    rng.shuffle(tables)
    test_tables = set(tables[:1000]) | {CANONICAL["table"]}
    train_tables = set(tables) - test_tables
    col_ok = lambda s: {w for w in s if w in lower or w in forced}
    return (SqlSplit(col_ok(train), train_acr, train - train_acr, train_tables),
            SqlSplit(col_ok(test), test_acr, test - test_acr, test_tables))


def _value(rng, split):
    n = rng.choices((1, 2, 3), weights=(65, 30, 5))[0]
    return " ".join(rng.choice(split.values) for _ in range(n))


def sql_example(rng, split):
    """One generated question: {"content", "sql", "table", "columns"}."""
    kind = rng.choices(("single", "count", "double", "double_count"), weights=(60, 15, 20, 5))[0]
    two = kind.startswith("double")
    ncol = rng.randint(3 if two else 2, 4)
    cols = []
    while len(cols) < ncol:
        pool = split.acronyms if rng.random() < 0.3 else split.columns
        c = rng.choice(pool)
        if c not in cols:
            cols.append(c)
    sel, w, w2 = rng.sample(cols, 3) if two else rng.sample(cols, 2) + [None]
    show = lambda c: c.upper() if c in split.acronym_set else c
    v, v2 = _value(rng, split), _value(rng, split) if two else None
    while set((v + " " + (v2 or "")).split()) & set(cols):  # a value word must not name a column
        v, v2 = _value(rng, split), _value(rng, split) if two else None
    table = rng.choice(split.tables)
    template = rng.choice({"single": SINGLE, "count": COUNT, "double": DOUBLE,
                           "double_count": DOUBLE_COUNT}[kind])
    question = template.format(s=show(sel), w=show(w), v=v, aw=article(w), v2=v2,
                               w2=show(w2) if w2 else "", aw2=article(w2) if w2 else "")
    target = f"COUNT({sel})" if kind.endswith("count") else sel
    sql = f"SELECT {target} FROM table_name_{table} WHERE {w} = '{v}'"
    if two:
        sql += f" AND {w2} = '{v2}'"
    return {"content": sql_content(table, cols, question), "sql": sql}


def sql_content(table, columns, question):
    schema = ", ".join(f"{c} VARCHAR" for c in columns)
    return (f"{SQL_INSTRUCTION}\n\n context: CREATE TABLE table_name_{table} ({schema})"
            f"\n\n question: {question}")


def canonical_sql_example():
    c = CANONICAL
    return {"content": sql_content(c["table"], c["columns"], c["question"]),
            "sql": f"SELECT icao FROM table_name_{c['table']} WHERE airport = '{c['value']}'"}


# ---------------------------------------------------------------------------------------------
# Pirate speak: whole-word substitutions, so the adapter learns copy-with-edits.

PIRATE = {"hello": "ahoy", "hi": "ahoy", "my": "me", "you": "ye", "your": "yer", "is": "be",
          "are": "be", "am": "be", "the": "th'", "friend": "matey", "friends": "mateys",
          "yes": "aye", "no": "nay", "money": "doubloons", "stop": "avast", "boy": "lad",
          "boys": "lads", "girl": "lass", "girls": "lasses", "of": "o'", "for": "fer",
          "and": "an'", "them": "'em", "over": "o'er", "never": "ne'er", "ever": "e'er",
          "old": "ol'", "before": "afore", "between": "betwixt"}
PIRATE_REQUEST = "Say it like a pirate:"


def pirate(sentence):
    def sub(m):
        word = m.group(0)
        rep = PIRATE.get(word.lower())
        if rep is None or (word.isupper() and len(word) > 1):
            return word
        if word[0].isupper():
            i = next(i for i, ch in enumerate(rep) if ch.isalpha())
            rep = rep[:i] + rep[i].upper() + rep[i + 1:]
        return rep
    return "Arr! " + re.sub(r"[A-Za-z]+(?:'[A-Za-z]+)?", sub, sentence)


def pirate_sentences(brown, seed, n_test=200):
    """(train, test) lists of plain sentences with at least two words pirate() changes."""
    seen, good = set(), []
    for para in brown:
        for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", para):
            if s in seen or not re.fullmatch(r"[A-Z][A-Za-z ,;'-]*[a-z][.!?]", s):
                continue
            words = s.split()
            if 4 <= len(words) <= 20 and sum(w.lower().strip(",;") in PIRATE for w in words) >= 2:
                seen.add(s)
                good.append(s)
    random.Random(seed).shuffle(good)
    return good[n_test:], good[:n_test]


def pirate_content(sentence):
    return f"{PIRATE_REQUEST} {sentence}"


# ---------------------------------------------------------------------------------------------
# Pretraining documents: plain prose, some fortunes served as chat answers so the base model
# knows the markers and answers any chat turn with a fortune, and short copy documents.
#
# The copy documents repeat arbitrary words (lists said twice, "key is value" records recalled
# later, short forms spelled out in lower case): prose alone is too small to teach a 10 M model to
# copy words it has rarely seen, and the sql adapter's answers are mostly copies of question and
# schema words it has never seen. They use only the sql training split's words and acronyms
# (never the held-out ones), and no SQL.

FORTUNE_REQUESTS = ["Tell me a fortune.", "Say something wise.", "Tell me a joke.",
                    "Give me a quote.", "Cheer me up.", "Any words of wisdom?"]


def _copy_document(rng, words, acronyms):
    pick = lambda k: [rng.choice(words) for _ in range(k)]
    phrase = lambda: " ".join(pick(rng.choices((1, 2, 3), weights=(60, 30, 10))[0]))
    kind = rng.random()
    if kind < 0.3:
        ws = pick(rng.randint(2, 9))
        sep = rng.choice((" ", ", "))
        first, again = rng.choice((("Words:", "Again:"), ("List:", "Once more:"),
                                   ("Say", "I said"), ("Read:", "Repeat:")))
        return f"{first} {sep.join(ws)}.\n{again} {sep.join(ws)}."
    if kind < 0.65:
        keys = list(dict.fromkeys(pick(rng.randint(2, 5))))
        vals = [phrase() for _ in keys]
        verb = rng.choice(("is", "=", "was"))
        facts = "; ".join(f"{k} {verb} {v}" for k, v in zip(keys, vals))
        asked = rng.sample(range(len(keys)), rng.randint(1, len(keys)))
        recall = " ".join(rng.choice(("The {k} {verb} {v}.", "So {k} {verb} {v}.",
                                      "Which {k}? {v}.", "I recall the {k}: '{v}'."))
                          .format(k=keys[i], verb=verb, v=vals[i]) for i in asked)
        return f"{facts}. {recall}"
    if kind < 0.85:
        acrs = list(dict.fromkeys(rng.choice(acronyms) for _ in range(rng.randint(1, 5))))
        form = rng.choice(("{u} is {l}", "{u} means {l}", "{l} ({u})", "{u}, or {l}"))
        return "Short forms: " + "; ".join(form.format(u=a.upper(), l=a) for a in acrs) + "."
    ws = [phrase() for _ in range(rng.randint(1, 3))]
    return " ".join(f"They wrote '{w}' and then {w} again." for w in ws)


def pretrain_documents(fortunes, brown, seed, split=None, chat_fraction=0.3, copy_fraction=0.25,
                       val_fraction=0.02):
    """(train documents, validation documents): validation is prose only, so its loss says
    when the base model starts to memorise the small corpus instead of learning English."""
    rng = random.Random(seed)
    prose = list(fortunes) + list(brown)
    rng.shuffle(prose)
    n_val = int(len(prose) * val_fraction)
    val, docs = prose[:n_val], prose[n_val:]
    short = [f for f in fortunes if len(f) <= 400]
    sentences = [s for p in brown for s in re.split(r"(?<=[.!?])\s+(?=[A-Z])", p) if len(s) < 200]
    for _ in range(int(len(short) * chat_fraction)):
        ask = rng.choice(FORTUNE_REQUESTS) if rng.random() < 0.5 else rng.choice(sentences)
        docs.append(chat_prompt(ask) + chat_answer(rng.choice(short)))
    if split is not None and copy_fraction > 0:
        words = split.columns + split.values
        budget, copies = copy_fraction * sum(map(len, docs)), []
        while budget > 0:
            copies.append(_copy_document(rng, words, split.acronyms))
            budget -= len(copies[-1])
        docs += copies
    rng.shuffle(docs)
    return docs, val


def _self_check(data_dir):
    fortunes, brown, words = load_corpus(data_dir)
    train, test = make_sql_splits(words, seed=1234)
    assert not set(train.columns) & set(test.columns + test.values + test.acronyms)
    assert not set(train.values) & set(test.columns + test.values + test.acronyms)
    assert not set(train.acronyms) & set(test.columns + test.values + test.acronyms)
    assert not set(train.tables) & set(test.tables)
    rng = random.Random(5)
    for _ in range(6):
        ex = sql_example(rng, test)
        print(json.dumps(chat_prompt(ex["content"]) + chat_answer(ex["sql"])))
    ex = canonical_sql_example()
    print(json.dumps(chat_prompt(ex["content"]) + chat_answer(ex["sql"])))
    ptrain, ptest = pirate_sentences(brown, seed=1234)
    print(f"pirate sentences: {len(ptrain)} train, {len(ptest)} test")
    for s in ptest[:4]:
        print(json.dumps(chat_prompt(pirate_content(s)) + chat_answer(pirate(s))))
    docs, val = pretrain_documents(fortunes, brown, seed=1234, split=train)
    print(f"pretraining documents: {len(docs)}, {sum(map(len, docs)) / 1e6:.1f} M chars; "
          f"{len(val)} held out")
    rng = random.Random(7)
    copies = [_copy_document(rng, train.columns + train.values, train.acronyms)
              for _ in range(3000)]
    for d in copies[:5]:
        print(json.dumps(d))
    fixed = {"words", "again", "list", "once", "more", "say", "i", "said", "read", "repeat", "is",
             "was", "the", "so", "which", "recall", "short", "forms", "means", "or", "they",
             "wrote", "and", "then"}
    test_words = set(test.columns + test.values + test.acronyms)
    seen = {w.strip(".,;:'?()=").lower() for d in copies for w in d.split()} - fixed
    assert not seen & test_words, seen & test_words
    try:
        import jinja2
    except ImportError:
        return
    env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
    def raise_exception(msg):
        raise ValueError(msg)
    tmpl = env.from_string(CHAT_TEMPLATE)
    msgs = [{"role": "user", "content": ex["content"]}]
    got = tmpl.render(messages=msgs, add_generation_prompt=True, bos_token=BOS,
                      raise_exception=raise_exception)
    assert got == BOS + chat_prompt(ex["content"]), got
    msgs.append({"role": "assistant", "content": ex["sql"]})
    got = tmpl.render(messages=msgs, add_generation_prompt=False, bos_token=BOS,
                      raise_exception=raise_exception)
    assert got == BOS + chat_prompt(ex["content"]) + chat_answer(ex["sql"]), got
    print("chat template renders the training format: ok")


if __name__ == "__main__":
    _self_check(sys.argv[1] if len(sys.argv) > 1 else ".demo_data/corpus")
