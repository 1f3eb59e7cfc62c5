"""vLLM's per-request controls through the Python API: allowed_token_ids, bad_words and
truncate_prompt_tokens on SamplingParams, LLM.generate(priority=...) under
EngineArgs(scheduling_policy="priority"), and a prompt dict's cache_salt."""

from conftest import SQL_QUESTION, engine_kwargs, run_to_completion, sql_lora
from quiver import LLM, SamplingParams

FORTUNE = "[user] Tell me a fortune. [/user] [assistant]"


def test_allowed_token_ids_bound_every_token(llm):
    free = llm.generate(FORTUNE, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True), use_tqdm=False)[0]
    allowed = list(dict.fromkeys(free.outputs[0].token_ids))[:6]
    p = SamplingParams(temperature=1.0, seed=3, max_tokens=24, ignore_eos=True, allowed_token_ids=allowed)
    out = llm.generate([FORTUNE, FORTUNE], [p, SamplingParams(temperature=0, max_tokens=24, ignore_eos=True)],
                       use_tqdm=False)
    assert set(out[0].outputs[0].token_ids) <= set(allowed)
    assert out[1].outputs[0].token_ids == free.outputs[0].token_ids  # its batch-mate is untouched


def test_bad_words_keep_their_tokens_out_of_the_answer(llm):
    greedy = SamplingParams(temperature=0, max_tokens=40)
    answer = llm.generate(SQL_QUESTION, greedy, lora_request=sql_lora(), use_tqdm=False)[0].outputs[0]
    assert "SELECT" in answer.text
    p = SamplingParams(temperature=0, max_tokens=40, bad_words=["SELECT"])
    out = llm.generate(SQL_QUESTION, p, lora_request=sql_lora(), use_tqdm=False)[0].outputs[0]
    tok = llm.get_tokenizer()
    banned = [tok.encode(w, add_special_tokens=False) for w in ("SELECT", " SELECT")]
    ids = out.token_ids
    for word in banned:
        assert not any(ids[i:i + len(word)] == word for i in range(len(ids))), (word, out.text)
    assert out.token_ids != answer.token_ids


def test_truncate_prompt_tokens_keeps_the_prompts_tail(llm):
    ids = llm.get_tokenizer().encode(SQL_QUESTION)
    p = SamplingParams(temperature=0, max_tokens=8, truncate_prompt_tokens=10)
    cut, tail = llm.generate([SQL_QUESTION, {"prompt_token_ids": ids[-10:]}],
                             [p, SamplingParams(temperature=0, max_tokens=8)], use_tqdm=False)
    assert cut.prompt_token_ids == ids[-10:]
    assert cut.outputs[0].token_ids == tail.outputs[0].token_ids
    # max_tokens=None: the context left after the truncated prompt.
    rest = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True,
                                                     truncate_prompt_tokens=10), use_tqdm=False)[0]
    assert len(rest.outputs[0].token_ids) == llm.llm_engine.max_model_len - 10


def test_priority_orders_the_queue():
    model = LLM(**engine_kwargs(scheduling_policy="priority", max_num_seqs=1))
    engine = model.llm_engine
    p = SamplingParams(temperature=0, max_tokens=2)
    for rid, priority in (("late", 5), ("first", -1), ("second", 0)):
        engine.add_request(rid, "Hello", p, priority=priority)
    started = []
    while engine.has_unfinished_requests():
        for out in engine.step():
            if out.request_id not in started:
                started.append(out.request_id)
    assert started == ["first", "second", "late"]
    outs = model.generate(["a", "b", "c"], p, priority=[2, 0, 1], use_tqdm=False)
    assert [o.prompt for o in outs] == ["a", "b", "c"]  # results keep the prompts' order


def test_cache_salt_separates_prefix_cache_blocks():
    model = LLM(**engine_kwargs(block_size=16))
    greedy = SamplingParams(temperature=0, max_tokens=2)
    first = model.generate({"prompt": SQL_QUESTION, "cache_salt": "a"}, greedy, use_tqdm=False)[0]
    other = model.generate({"prompt": SQL_QUESTION, "cache_salt": "b"}, greedy, use_tqdm=False)[0]
    same = model.generate({"prompt": SQL_QUESTION, "cache_salt": "a"}, greedy, use_tqdm=False)[0]
    assert first.num_cached_tokens == 0 and other.num_cached_tokens == 0
    assert same.num_cached_tokens > 0
    assert same.outputs[0].token_ids == other.outputs[0].token_ids == first.outputs[0].token_ids
    engine = model.llm_engine
    engine.add_request("t", {"prompt_token_ids": first.prompt_token_ids, "cache_salt": "a"}, greedy)
    assert run_to_completion(engine)["t"].num_cached_tokens > 0
