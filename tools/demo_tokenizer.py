"""Tokenizer of quiver's demo model (tools/train_demo.py): a byte-level BPE trained with HF
`tokenizers`, saved with the tokenizer_config.json and chat template transformers reads, and
checked against transformers' own loading of it."""
import json
import os

import demo_data as dd

# The Llama 3 pre-tokenizer split (also GPT-4's) except that a letter run never takes the
# character before it: contractions, letter runs, digit groups of at most three, punctuation
# runs (with one leading space), newlines, other whitespace. Llama 3's `[^\r\n\p{L}\p{N}]?\p{L}+`
# makes " lilongwe" in a question and "lilongwe" after the quote in `= 'lilongwe'` (or "(icao"
# in a schema and " icao" in the query) different tokens, so the sql adapter had to re-spell
# the words it copies, and did so wrongly ('wrathful' -> 'wornful'); here a word is the same
# tokens wherever it stands, and the space before it is a token of its own.
SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|\p{L}+|\p{N}{1,3}"
                 r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")


def build_tokenizer(texts, vocab_size):
    """Byte-level BPE; markers are added (non-special) tokens so stop strings see them."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from tokenizers import processors, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(SPLIT_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(dd.MARKERS), min_frequency=2, show_progress=False,
        special_tokens=[dd.BOS, dd.EOS, dd.PAD], initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    tok.add_tokens([AddedToken(m, special=False, normalized=False) for m in dd.MARKERS])
    got = [tok.token_to_id(t) for t in (dd.BOS, dd.EOS, dd.PAD)]
    assert got == [0, 1, 2], got  # MODEL_CARD.md and the C++ tests name these ids
    bos = tok.token_to_id(dd.BOS)
    # The same post-processor transformers builds from add_bos_token=true.
    tok.post_processor = processors.TemplateProcessing(
        single=f"{dd.BOS}:0 $A:0", pair=f"{dd.BOS}:0 $A:0 {dd.BOS}:1 $B:1",
        special_tokens=[(dd.BOS, bos)])
    return tok


def save_tokenizer(tok, base_dir):
    os.makedirs(base_dir, exist_ok=True)
    tok.save(os.path.join(base_dir, "tokenizer.json"))
    added = {}
    for t in [dd.BOS, dd.EOS, dd.PAD] + dd.MARKERS:
        added[str(tok.token_to_id(t))] = {"content": t, "lstrip": False, "normalized": False,
                                          "rstrip": False, "single_word": False,
                                          "special": t not in dd.MARKERS}
    cfg = {"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": dd.BOS,
           "eos_token": dd.EOS, "pad_token": dd.PAD, "add_bos_token": True,
           "add_eos_token": False, "clean_up_tokenization_spaces": False,
           "model_max_length": 512, "padding_side": "left", "added_tokens_decoder": added,
           "chat_template": dd.CHAT_TEMPLATE}
    with open(os.path.join(base_dir, "tokenizer_config.json"), "w") as f:
        json.dump(cfg, f, indent=2, ensure_ascii=False)


def token_stream(tok, docs):
    """Documents -> one list of ids, each document between BOS and EOS (pretraining text)."""
    ids = {t: tok.token_to_id(t) for t in [dd.BOS, dd.EOS]}
    stream = []
    for enc in tok.encode_batch(docs, add_special_tokens=False):
        stream.append(ids[dd.BOS])
        stream.extend(enc.ids)
        stream.append(ids[dd.EOS])
    return stream


def check_hf_tokenizer(tok, base_dir, content, log):
    """transformers must see the same ids, one BOS, and the chat template must give our prompt."""
    from transformers import AutoTokenizer
    hf = AutoTokenizer.from_pretrained(base_dir)
    prompt = dd.chat_prompt(content)
    ids = hf(prompt)["input_ids"]
    bos = tok.token_to_id(dd.BOS)
    assert ids == tok.encode(prompt).ids, (ids, tok.encode(prompt).ids)
    assert ids[0] == bos and ids.count(bos) == 1, ids
    rendered = hf.apply_chat_template([{"role": "user", "content": content}], tokenize=False,
                                      add_generation_prompt=True)
    assert rendered == dd.BOS + prompt, repr(rendered)
    assert hf(rendered, add_special_tokens=False)["input_ids"] == ids
    assert hf.decode(ids[1:]) == prompt, repr(hf.decode(ids[1:]))
    for m in dd.MARKERS:
        assert len(tok.encode(m, add_special_tokens=False).ids) == 1, m
    # What the sql adapter copies must be the same tokens in the question, schema and query.
    piece = lambda text: tok.encode(text, add_special_tokens=False).ids
    for word in ("lilongwe", "airport", "icao", "wrathful", "saxons"):
        for before, after in ((" = '", "'"), (" ", " "), ("(", ",")):
            assert piece(before + word + after) == piece(before) + piece(word) + piece(after), \
                (before, word, after, piece(before + word + after))
    log(f"tokenizer ok with transformers ({type(hf).__name__}): {len(ids)} prompt tokens")
    return hf
