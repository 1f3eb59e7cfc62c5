"""abort_request: the request finishes with finish_reason "abort" on the next step, and
the requests around it keep running."""

from conftest import SQL_ANSWER, SQL_QUESTION, engine_kwargs, run_to_completion, sql_lora
from quiver import EngineArgs, LLMEngine, SamplingParams


def test_abort_one_of_three():
    engine = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs()))
    long = SamplingParams(temperature=0, max_tokens=200, ignore_eos=True)
    engine.add_request("a", SQL_QUESTION, long)
    engine.add_request("b", SQL_QUESTION, SamplingParams(temperature=0, max_tokens=40), lora_request=sql_lora())
    engine.add_request("c", SQL_QUESTION, long)
    engine.step()
    engine.step()
    engine.abort_request("a")
    engine.abort_request(["c", "never-added"])
    aborted = {o.request_id: o for o in engine.step() if o.finished}
    assert set(aborted) == {"a", "c"}
    for o in aborted.values():
        assert o.outputs[0].finish_reason == "abort"
        assert 1 <= len(o.outputs[0].token_ids) <= 3
    assert engine.get_num_unfinished_requests() == 1
    assert run_to_completion(engine)["b"].outputs[0].text == SQL_ANSWER
    # The aborted ids are free again.
    engine.add_request("a", SQL_QUESTION, SamplingParams(max_tokens=2))
    assert engine.get_num_unfinished_requests() == 1


def test_step_reports_progress_of_running_requests():
    engine = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs()))
    engine.add_request("r", SQL_QUESTION, SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    seen = []
    while engine.has_unfinished_requests():
        for o in engine.step():
            seen.append((len(o.outputs[0].token_ids), o.finished, o.outputs[0].finish_reason))
    assert seen == [(1, False, None), (2, False, None), (3, False, None), (4, True, "length")]
