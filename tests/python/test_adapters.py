"""LoRARequest: adapters load on first use (no registration), stay in the host LRU,
run batched together with the base model, and a bad one fails only its own request."""

import pytest

from conftest import PIRATE, SQL, SQL_ANSWER, SQL_QUESTION, engine_kwargs, pirate_lora, sql_lora
from conftest import run_to_completion as run
from quiver import EngineArgs, LLMEngine, SamplingParams
from quiver.lora.request import LoRARequest

GREEDY = SamplingParams(temperature=0.0, max_tokens=8, ignore_eos=True)


def new_engine(**kw):
    return LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(**kw)))


def test_mixed_adapters_run_in_the_same_step():
    engine = new_engine()
    engine.add_request("base", SQL_QUESTION, GREEDY)
    engine.add_request("sql", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    engine.add_request("pirate", SQL_QUESTION, GREEDY, lora_request=pirate_lora())
    steps = []
    while engine.has_unfinished_requests():
        engine.step()
        steps.append(engine.last_step_stats())
    # Every step, prefill and each decode, carried all three requests and both adapters.
    assert len(steps) == GREEDY.max_tokens
    for s in steps:
        assert s.num_seqs == 3
        assert s.adapters == ["pirate", "sql"]
        assert s.lora_active
    assert steps[0].num_prefill_tokens == 3 * len(engine.get_tokenizer().encode(SQL_QUESTION))
    assert engine.get_counters().steps == len(steps)
    assert engine.get_counters().step_seconds == pytest.approx(sum(s.ms for s in steps) / 1e3)
    assert engine.get_counters().requests_finished == 3


def test_batched_outputs_equal_each_request_alone():
    batched = new_engine()
    batched.add_request("sql", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    batched.add_request("pirate", SQL_QUESTION, GREEDY, lora_request=pirate_lora())
    batched.add_request("base", SQL_QUESTION, GREEDY)
    together = run(batched)
    for rid, lora in (("sql", sql_lora()), ("pirate", pirate_lora()), ("base", None)):
        alone = new_engine()
        alone.add_request(rid, SQL_QUESTION, GREEDY, lora_request=lora)
        assert run(alone)[rid].outputs[0].token_ids == together[rid].outputs[0].token_ids
    assert len({tuple(o.outputs[0].token_ids) for o in together.values()}) == 3, "the adapters change the output"


def test_adapters_load_on_first_use_and_stay_cached():
    engine = new_engine()
    assert engine.list_loras() == set()
    assert engine.lora_cache_stats().loads == 0
    engine.add_request("a", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    engine.add_request("b", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    assert engine.list_loras() == {1}
    run(engine)
    engine.add_request("c", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    run(engine)
    assert engine.lora_cache_stats().loads == 1
    assert engine.lora_cache_stats().num_cached == 1
    # Known by name now: a request may leave the path out.
    engine.add_request("d", SQL_QUESTION, GREEDY, lora_request=LoRARequest("sql", 1))
    assert run(engine)["d"].outputs[0].token_ids == run_alone_sql()


def run_alone_sql():
    engine = new_engine()
    engine.add_request("x", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    return run(engine)["x"].outputs[0].token_ids


def test_host_lru_evicts_and_reloads():
    engine = new_engine(max_loras=1, max_cpu_loras=1)
    for i, lora in enumerate([sql_lora(), pirate_lora(), sql_lora()]):
        engine.add_request(str(i), SQL_QUESTION, GREEDY, lora_request=lora)
        run(engine)
    stats = engine.lora_cache_stats()
    assert stats.num_cached == 1
    assert stats.loads == 3


def test_a_bad_adapter_path_fails_its_request_and_the_others_run(tmp_path):
    engine = new_engine()
    engine.add_request("good", SQL_QUESTION, SamplingParams(temperature=0.0, max_tokens=32), lora_request=sql_lora())
    engine.step()
    with pytest.raises(ValueError, match="no_such_adapter"):
        engine.add_request("bad", SQL_QUESTION, GREEDY, lora_request=LoRARequest("bad", 3, str(tmp_path / "no_such_adapter")))
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "adapter_config.json").write_text("{not json")
    with pytest.raises(ValueError, match="broken"):
        engine.add_request("broken", SQL_QUESTION, GREEDY, lora_request=LoRARequest("broken", 4, str(tmp_path / "broken")))
    with pytest.raises(ValueError, match="unknown"):
        engine.add_request("nameless", SQL_QUESTION, GREEDY, lora_request=LoRARequest("never_loaded", 5))
    done = run(engine)
    assert list(done) == ["good"]
    assert done["good"].outputs[0].text == SQL_ANSWER
    assert engine.list_loras() == {1}


def test_add_remove_and_list_loras_by_id(tmp_path):
    engine = new_engine()
    assert engine.add_lora(pirate_lora()) is True
    assert engine.add_lora(pirate_lora()) is False  # already loaded
    assert engine.list_loras() == {2}
    assert engine.lora_cache_stats().loads == 1
    engine.add_request("p", SQL_QUESTION, GREEDY, lora_request=LoRARequest("pirate", 2))  # no path needed now
    assert engine.lora_cache_stats().loads == 1
    with pytest.raises(ValueError, match="missing"):
        engine.add_lora(LoRARequest("missing", 9, str(tmp_path / "missing")))
    assert engine.remove_lora(7) is False
    assert engine.remove_lora(2) is True
    assert engine.list_loras() == set()
    assert run(engine)["p"].outputs[0].token_ids, "a running request keeps its adapter"
    with pytest.raises(ValueError, match="unknown LoRA adapter 'pirate'"):
        engine.add_request("q", SQL_QUESTION, GREEDY, lora_request=LoRARequest("pirate", 2))
    with pytest.raises(TypeError, match="LoRARequest"):
        engine.add_lora("pirate")


def test_lora_request_without_enable_lora_is_refused():
    engine = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(enable_lora=False)))
    with pytest.raises(ValueError, match="LoRA is not enabled"):
        engine.add_request("x", SQL_QUESTION, GREEDY, lora_request=sql_lora())
    assert not engine.has_unfinished_requests()


def test_lora_request_fields_and_identity():
    r = LoRARequest("sql", 7, SQL)
    assert (r.lora_name, r.lora_int_id, r.lora_path) == ("sql", 7, SQL)
    assert (r.name, r.adapter_id, r.path, r.local_path) == ("sql", 7, SQL, SQL)
    assert r == LoRARequest("sql", 8, PIRATE)  # vLLM compares adapters by name
    assert len({r, LoRARequest("sql", 8), LoRARequest("pirate", 2)}) == 2
    assert LoRARequest("old", 1, lora_local_path=PIRATE).lora_path == PIRATE
    assert repr(r) == f"LoRARequest(lora_name='sql', lora_int_id=7, lora_path={SQL!r}, base_model_name=None)"
    with pytest.raises(ValueError, match="lora_int_id must be > 0"):
        LoRARequest("sql", 0, SQL)
    with pytest.raises(TypeError, match="lora_int_id"):
        LoRARequest("sql", "1", SQL)
    with pytest.raises(TypeError, match="lora_name"):
        LoRARequest(None, 1, SQL)
