"""LLM.beam_search, as vLLM's: one beam is greedy decoding; every beam's cum_logprob is the
sum of its tokens' logprobs as the engine scores the finished sequence as a prompt; beams
come best first by vLLM's length-normalised score; each prompt searches on its own adapter;
concurrency_limit changes nothing but the grouping."""

import pytest

from conftest import DEVICE, SQL_ANSWER, SQL_QUESTION, sql_lora
from quiver import SamplingParams
from quiver.beam_search import get_beam_search_score
from quiver.sampling_params import BeamSearchParams

FORTUNE = "[user] Tell me a fortune. [/user] [assistant]"
# A beam's tokens, scored one step at a time and rescored as one prompt: the same on the CPU
# to 1e-3; on CUDA the two schedules round the bf16 activations differently (sums over 12
# tokens 1.1e-3 and 1.2e-2 apart on an H100), far inside docs/numerics.md's 16-bit bound.
RESCORE_TOLERANCE = 1e-3 if DEVICE != "cuda" else 2e-2


def test_one_beam_is_greedy(llm):
    greedy = llm.generate(FORTUNE, SamplingParams(temperature=0, max_tokens=16, ignore_eos=True), use_tqdm=False)[0]
    beam = llm.beam_search([FORTUNE], BeamSearchParams(beam_width=1, max_tokens=16, ignore_eos=True))[0].sequences
    assert len(beam) == 1
    assert beam[0].tokens == greedy.prompt_token_ids + greedy.outputs[0].token_ids
    assert beam[0].finish_reason == "length"


def test_beams_are_scored_as_the_engine_scores_them(llm):
    params = BeamSearchParams(beam_width=4, max_tokens=12)
    prompts = [FORTUNE, {"prompt": SQL_QUESTION}]
    outs = llm.beam_search(prompts, params, lora_request=[None, sql_lora()])
    eos = set(llm.llm_engine._native.eos_token_ids)
    tok = llm.get_tokenizer()
    for out, prompt, lora in zip(outs, [FORTUNE, SQL_QUESTION], [None, sql_lora()]):
        seqs = out.sequences
        assert len(seqs) == 4 and len({tuple(s.tokens) for s in seqs}) == 4
        scores = [get_beam_search_score(s.tokens, s.cum_logprob, eos, 1.0) for s in seqs]
        assert scores == sorted(scores, reverse=True)
        n_prompt = len(tok.encode(prompt))
        for s in seqs:
            generated = s.tokens[n_prompt:]
            assert 1 <= len(generated) <= 12 and len(s.logprobs) == len(generated)
            assert s.finish_reason == ("stop" if generated[-1] in eos else "length")
            assert s.text == tok.decode(s.tokens)
            # cum_logprob sums the chosen tokens' entries...
            steps = [lp[t].logprob for lp, t in zip(s.logprobs, generated)]
            assert sum(steps) == pytest.approx(s.cum_logprob, abs=1e-9)
            # ... which are the engine's logprobs of those tokens, as it scores the whole beam as a prompt.
            scored = llm.generate({"prompt_token_ids": s.tokens}, SamplingParams(max_tokens=1, prompt_logprobs=0),
                                  lora_request=lora, use_tqdm=False)[0]
            again = [scored.prompt_logprobs[n_prompt + k][t].logprob for k, t in enumerate(generated)]
            assert again == pytest.approx(steps, abs=RESCORE_TOLERANCE)
    # The sql adapter's best beam begins its greedy answer.
    best = outs[1].sequences[0].tokens[len(tok.encode(SQL_QUESTION)):]
    assert len(best) == 12 and SQL_ANSWER.startswith(tok.decode(best))


def test_concurrency_limit_and_refusals(llm):
    params = BeamSearchParams(beam_width=2, max_tokens=6)
    prompts = [FORTUNE, "Hello", {"prompt_token_ids": [0, 5, 6]}]
    together = llm.beam_search(prompts, params)
    one_by_one = llm.beam_search(prompts, params, concurrency_limit=1)
    assert [[s.tokens for s in o.sequences] for o in together] == [[s.tokens for s in o.sequences] for o in one_by_one]
    with pytest.raises(ValueError, match="logprobs"):
        llm.beam_search([FORTUNE], BeamSearchParams(beam_width=11, max_tokens=2))  # 22 > max_logprobs 20
    with pytest.raises(TypeError, match="BeamSearchParams"):
        llm.beam_search([FORTUNE], SamplingParams())
    with pytest.raises(ValueError, match="beam_width"):
        BeamSearchParams(beam_width=0, max_tokens=2)
