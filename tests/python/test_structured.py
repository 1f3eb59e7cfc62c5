"""Structured outputs from Python: SamplingParams(structured_outputs=StructuredOutputsParams(...)),
and vLLM's older guided_decoding=GuidedDecodingParams(...), held to by the C++ engine's masks.
Sampled at temperature 1 on the demo model, whose unconstrained text matches none of these,
so a match is the constraint's doing; the same requests through `quiver generate` give the
same tokens."""

import json
import re
import subprocess

import pytest

from conftest import BASE, DEVICE, QUIVER_BINARY, SQL, run_to_completion, sql_lora
from quiver import LLMEngine, EngineArgs, SamplingParams, _quiver
from quiver.sampling_params import GuidedDecodingParams, StructuredOutputsParams

SCHEMA = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}, "sunny": {"type": "boolean"}},
          "required": ["city", "sunny"]}
CASES = {
    "json": {"json": SCHEMA},
    "regex": {"regex": "[a-z]{3,8}-[0-9]{2}"},
    "choice": {"choice": ["yes", "no", "maybe so"]},
}


def sampled(constraint, seed):
    return SamplingParams(temperature=1.0, seed=seed, max_tokens=200,
                          structured_outputs=StructuredOutputsParams(**constraint))


def check_matches(kind, text):
    if kind == "json":
        obj = json.loads(text)
        assert set(obj) == {"city", "sunny"} and obj["city"] in ("Paris", "Oslo") and isinstance(obj["sunny"], bool)
    elif kind == "regex":
        assert re.fullmatch(CASES["regex"]["regex"], text), text
    else:
        assert text in CASES["choice"]["choice"], text


def test_each_constraint_holds_in_one_mixed_batch(llm):
    kinds = list(CASES)
    params = [sampled(CASES[k], seed=i) for i, k in enumerate(kinds)] + [SamplingParams(temperature=1.0, seed=9,
                                                                                        max_tokens=8)]
    outs = llm.generate(["Q:"] * len(params), params, lora_request=[None, sql_lora(), None, None], use_tqdm=False)
    for kind, out in zip(kinds, outs):
        c = out.outputs[0]
        assert c.finish_reason == "stop", (kind, c.text)
        check_matches(kind, c.text)
    assert len(outs[-1].outputs[0].token_ids) == 8  # the unconstrained request is left alone


def test_guided_decoding_is_the_older_name(llm):
    p = SamplingParams(temperature=1.0, seed=4, max_tokens=20,
                       guided_decoding=GuidedDecodingParams(choice=["red", "green"], backend="auto"))
    assert p.guided_decoding is p.structured_outputs
    (out,) = llm.generate("Colour:", p, use_tqdm=False)
    assert out.outputs[0].text in ("red", "green")
    # A dict is taken as the params' fields, as vLLM's msgspec conversion does.
    q = SamplingParams(temperature=1.0, seed=4, max_tokens=20, structured_outputs={"choice": ["red", "green"]})
    assert llm.generate("Colour:", q, use_tqdm=False)[0].outputs[0].token_ids == out.outputs[0].token_ids


def test_same_tokens_as_generate(tmp_path):
    reqs = [{"id": k, "prompt": "Q:", "lora": "sql" if i % 2 else None, "max_tokens": 200, "temperature": 1.0,
             "seed": 20 + i, "structured_outputs": CASES[k]} for i, k in enumerate(CASES)]
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in reqs))
    subprocess.run([QUIVER_BINARY, "generate", "--model", BASE, "--lora", f"sql={SQL}", "--max-lora-rank", "16",
                    "--device", DEVICE, "--input", str(inp), "--output", str(out)], check=True, capture_output=True)
    cli = {j["id"]: j for j in map(json.loads, out.read_text().splitlines())}
    engine = LLMEngine.from_engine_args(EngineArgs(model=BASE, enable_lora=True, max_lora_rank=16, device=DEVICE))
    for r in reqs:
        engine.add_request(r["id"], r["prompt"], SamplingParams(
            temperature=1.0, seed=r["seed"], max_tokens=200, structured_outputs=StructuredOutputsParams(**CASES[r["id"]])),
            lora_request=sql_lora() if r["lora"] else None)
    done = run_to_completion(engine)
    for r in reqs:
        assert done[r["id"]].outputs[0].token_ids == cli[r["id"]]["token_ids"], r["id"]
        check_matches(r["id"], done[r["id"]].outputs[0].text)


@pytest.mark.parametrize("kwargs, message", [
    ({"regex": "a", "choice": ["b"]}, "only one kind of constraint"),
    ({"grammar": "root ::= 'a'"}, "structured_outputs.grammar is not supported"),
    ({"structural_tag": "{}"}, "structured_outputs.structural_tag is not supported"),
    ({"json": {"type": "object"}, "whitespace_pattern": " "}, "whitespace_pattern"),
    ({"regex": "a", "disable_any_whitespace": True}, "disable_any_whitespace"),
    ({"choice": []}, "structured_outputs.choice must be a non-empty list of strings"),
    ({"json": "{not json"}, "structured_outputs.json must be a JSON schema"),
])
def test_refusals_name_the_field(kwargs, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        SamplingParams(structured_outputs=StructuredOutputsParams(**kwargs))


def test_json_object_and_schema_text():
    assert _quiver.structured_spec(json.dumps({"structured_outputs": {"json_object": True}})).kind == "json_object"
    p = SamplingParams(structured_outputs=StructuredOutputsParams(json=json.dumps(SCHEMA)))
    spec = p._to_native(max_tokens=8).structured_outputs
    assert spec.kind == "json" and list(json.loads(spec.json_schema)["properties"]) == ["city", "sunny"]


def test_other_misuse():
    with pytest.raises(ValueError, match="set one of json, regex, choice, json_object"):
        SamplingParams(structured_outputs=StructuredOutputsParams())
    with pytest.raises(ValueError, match="not both"):
        SamplingParams(structured_outputs=StructuredOutputsParams(regex="a"),
                       guided_decoding=GuidedDecodingParams(regex="a"))
    with pytest.raises(TypeError, match="must be a StructuredOutputsParams"):
        SamplingParams(structured_outputs="[0-9]+")
    with pytest.raises(ValueError, match="backend='xgrammar' is not supported"):
        GuidedDecodingParams(regex="a", backend="xgrammar")
    # disable_fallback changes nothing with one backend; the others' defaults are accepted.
    SamplingParams(structured_outputs=StructuredOutputsParams(regex="a", disable_fallback=True,
                                                              disable_additional_properties=False))


def test_a_schema_the_engine_cannot_compile_fails_that_request_only(llm):
    engine = llm.llm_engine
    bad = SamplingParams(max_tokens=4, structured_outputs=StructuredOutputsParams(json={"type": "string",
                                                                                       "format": "date"}))
    with pytest.raises(ValueError, match="'format' is not supported"):
        engine.add_request("bad-schema", "Q:", bad)
    engine.add_request("fine", "Q:", SamplingParams(temperature=0.0, max_tokens=4))
    assert len(run_to_completion(engine)["fine"].outputs[0].token_ids) == 4


def test_params_copy_and_print():
    p = SamplingParams(structured_outputs=StructuredOutputsParams(json=SCHEMA))
    q = p.clone()
    assert q == p and q.structured_outputs is not p.structured_outputs
    assert "structured_outputs=StructuredOutputsParams(json={'type': 'object'" in repr(p)
