"""SamplingParams behaviour through the engine: seeds, n > 1, stops, max_tokens=None,
logprob dicts, and vLLM's defaults."""

import pytest

from conftest import SQL_ANSWER, SQL_QUESTION, engine_kwargs, sql_lora
from quiver import LLM, Logprob, SamplingParams
from quiver.sampling_params import RequestOutputKind

FORTUNE = "[user] Tell me a fortune. [/user] [assistant]"


def texts(outs):
    return [[c.token_ids for c in o.outputs] for o in outs]


def test_seeded_sampling_is_reproducible_across_engines_and_batches(llm):
    p = SamplingParams(temperature=1.0, top_p=0.95, seed=1234, max_tokens=20, ignore_eos=True)
    first = llm.generate([FORTUNE], p, use_tqdm=False)
    other = LLM(**engine_kwargs())
    noise = SamplingParams(temperature=1.0, max_tokens=20, ignore_eos=True)
    batched = other.generate([SQL_QUESTION, FORTUNE, "Hello"], [noise, p, noise], use_tqdm=False,
                             lora_request=[sql_lora(), None, sql_lora()])
    assert batched[1].outputs[0].token_ids == first[0].outputs[0].token_ids
    reseeded = llm.generate([FORTUNE], SamplingParams(temperature=1.0, top_p=0.95, seed=99, max_tokens=20,
                                                      ignore_eos=True), use_tqdm=False)
    assert reseeded[0].outputs[0].token_ids != first[0].outputs[0].token_ids


def test_n_completions_are_distinct_and_indexed(llm):
    p = SamplingParams(n=4, temperature=1.0, seed=5, max_tokens=12, ignore_eos=True)
    out = llm.generate(FORTUNE, p, use_tqdm=False)[0]
    assert [c.index for c in out.outputs] == [0, 1, 2, 3]
    assert len({tuple(c.token_ids) for c in out.outputs}) == 4
    assert all(len(c.token_ids) == 12 and c.finish_reason == "length" for c in out.outputs)
    again = llm.generate(FORTUNE, p, use_tqdm=False)[0]
    assert texts([again]) == texts([out])


def test_greedy_stop_string_and_stop_token(llm):
    ids = llm.get_tokenizer().encode(" FROM", add_special_tokens=False)
    out = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=40, stop="FROM"),
                       lora_request=sql_lora(), use_tqdm=False)[0].outputs[0]
    assert (out.text, out.finish_reason, out.stop_reason) == (" SELECT icao ", "stop", "FROM")
    out = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=40, stop_token_ids=[ids[-1]]),
                       lora_request=sql_lora(), use_tqdm=False)[0].outputs[0]
    assert out.finish_reason == "stop" and out.stop_reason == ids[-1] and isinstance(out.stop_reason, int)
    out = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=40), lora_request=sql_lora(),
                       use_tqdm=False)[0].outputs[0]
    assert (out.text, out.finish_reason, out.stop_reason) == (SQL_ANSWER, "stop", None)


def test_max_tokens_none_runs_to_the_context_length(llm):
    out = llm.generate({"prompt_token_ids": [0, 5, 6]}, SamplingParams(temperature=0, max_tokens=None, ignore_eos=True),
                       use_tqdm=False)[0]
    assert len(out.outputs[0].token_ids) == llm.llm_engine.max_model_len - 3
    assert out.outputs[0].finish_reason == "length"


def test_logprob_dicts(llm):
    tok = llm.get_tokenizer()
    out = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=6, logprobs=3, prompt_logprobs=1),
                       lora_request=sql_lora(), use_tqdm=False)[0]
    c = out.outputs[0]
    assert len(c.logprobs) == len(c.token_ids)
    for token, d in zip(c.token_ids, c.logprobs):
        assert next(iter(d)) == token, "the chosen token comes first"
        assert 3 <= len(d) <= 4
        assert d[token].rank == 1  # greedy picks the most likely token
        assert sorted(lp.rank for lp in d.values()) == [1, 2, 3]
        for tid, lp in d.items():
            assert isinstance(lp, Logprob) and lp.logprob <= 0
            assert lp.decoded_token == tok.decode([tid], skip_special_tokens=False)
    assert c.cumulative_logprob == pytest.approx(sum(d[t].logprob for t, d in zip(c.token_ids, c.logprobs)))
    assert out.prompt_logprobs[0] is None
    assert len(out.prompt_logprobs) == len(out.prompt_token_ids)
    for tid, d in zip(out.prompt_token_ids[1:], out.prompt_logprobs[1:]):
        assert tid in d and d[tid].rank >= 1 and 1 <= len(d) <= 2
    plain = llm.generate(SQL_QUESTION, SamplingParams(temperature=0, max_tokens=6), lora_request=sql_lora(),
                         use_tqdm=False)[0]
    assert plain.outputs[0].logprobs is None and plain.outputs[0].cumulative_logprob is None
    assert plain.prompt_logprobs is None
    assert plain.outputs[0].token_ids == c.token_ids


def test_detokenize_false_leaves_text_empty(llm):
    out = llm.generate(FORTUNE, SamplingParams(temperature=0, max_tokens=5, detokenize=False), use_tqdm=False)[0]
    assert out.outputs[0].text == "" and len(out.outputs[0].token_ids) == 5


def test_vllm_defaults():
    p = SamplingParams()
    assert (p.n, p.temperature, p.top_p, p.top_k, p.min_p, p.max_tokens, p.min_tokens) == (1, 1.0, 1.0, 0, 0.0, 16, 0)
    assert (p.presence_penalty, p.frequency_penalty, p.repetition_penalty) == (0.0, 0.0, 1.0)
    assert (p.seed, p.stop, p.stop_token_ids, p.logprobs, p.prompt_logprobs) == (None, [], [], None, None)
    assert (p.ignore_eos, p.skip_special_tokens, p.include_stop_str_in_output, p.detokenize) == (False, True, False, True)
    assert p.sampling_type == "random"
    g = SamplingParams(temperature=0, top_p=0.5, top_k=3)
    assert (g.top_p, g.top_k, g.sampling_type) == (1.0, 0, "greedy")
    assert p.clone() == p and p.clone() is not p
    assert repr(p).startswith("SamplingParams(n=1, presence_penalty=0.0, frequency_penalty=0.0, ")


def test_output_kinds_cumulative_delta_and_final_only(llm):
    engine = llm.llm_engine
    base = dict(temperature=1.0, seed=21, max_tokens=12, ignore_eos=True, logprobs=1, n=2)
    for kind in RequestOutputKind:
        engine.add_request(kind.name, FORTUNE, SamplingParams(output_kind=kind, **base))
    seen = {kind.name: [] for kind in RequestOutputKind}
    while engine.has_unfinished_requests():
        for out in engine.step():
            seen[out.request_id].append(out)
    whole = seen["CUMULATIVE"][-1]
    assert len(seen["CUMULATIVE"]) > 1 and [o.finished for o in seen["FINAL_ONLY"]] == [True]
    final = seen["FINAL_ONLY"][0]
    deltas = seen["DELTA"]
    for i in range(2):
        c = whole.outputs[i]
        assert final.outputs[i].token_ids == c.token_ids and final.outputs[i].text == c.text
        # The deltas add up to the whole output, text, ids and logprobs alike.
        assert sum((d.outputs[i].token_ids for d in deltas), []) == c.token_ids
        assert "".join(d.outputs[i].text for d in deltas) == c.text
        assert sum((d.outputs[i].logprobs for d in deltas), []) == c.logprobs
        assert deltas[-1].outputs[i].cumulative_logprob == pytest.approx(c.cumulative_logprob)
    # LLM.generate returns whole outputs whatever the kind.
    out = llm.generate(FORTUNE, SamplingParams(output_kind=RequestOutputKind.DELTA, **base), use_tqdm=False)[0]
    assert [c.token_ids for c in out.outputs] == [c.token_ids for c in whole.outputs]
    with pytest.raises(TypeError, match="output_kind"):
        SamplingParams(output_kind=1)
