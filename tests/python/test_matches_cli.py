"""The binding is the C++ engine: LLMEngine gives exactly what `quiver generate` gives for
the same requests (token ids, text, finish reasons; logprobs within 1e-6), on the model's
weights and on them quantized at load (quantization="fp8"; off the GPU "int8" too)."""

import json
import subprocess

import pytest

from conftest import BASE, DEVICE, PIRATE, QUIVER_BINARY, SQL, SQL_QUESTION, pirate_lora, run_to_completion, sql_lora
from quiver import EngineArgs, LLMEngine, SamplingParams

REQUESTS = [
    {"id": "base-sql", "prompt": SQL_QUESTION, "lora": None, "max_tokens": 24, "temperature": 0.0, "logprobs": 3,
     "prompt_logprobs": 2},
    {"id": "sql", "prompt": SQL_QUESTION, "lora": "sql", "max_tokens": 24, "temperature": 0.0, "logprobs": 3},
    {"id": "pirate", "prompt": "[user] Hello my friend, are you ready for the treasure? [/user] [assistant]",
     "lora": "pirate", "max_tokens": 20, "temperature": 0.0, "logprobs": 0, "prompt_logprobs": 0},
    {"id": "ids", "prompt_token_ids": [0, 17, 250, 3001, 44, 12, 80], "lora": "sql", "max_tokens": 12,
     "temperature": 0.0, "logprobs": 1, "ignore_eos": True},
    {"id": "sampled", "prompt": "Tell me a fortune.", "lora": None, "max_tokens": 16, "temperature": 0.8,
     "top_p": 0.9, "top_k": 40, "seed": 11, "logprobs": 2, "stop": ["."]},
    {"id": "penalties", "prompt": "[user] Tell me a fortune. [/user] [assistant]", "lora": "pirate",
     "max_tokens": 16, "temperature": 0.0, "presence_penalty": 0.5, "frequency_penalty": 0.3,
     "repetition_penalty": 1.2, "min_tokens": 4, "logit_bias": {"223": -100.0}, "logprobs": 2},
    {"id": "stop-included", "prompt": SQL_QUESTION, "lora": "sql", "max_tokens": 40, "temperature": 0.0,
     "stop": ["FROM"], "include_stop_str_in_output": True, "logprobs": 1},
    {"id": "n2", "prompt": "Tell me a fortune.", "lora": None, "max_tokens": 10, "temperature": 1.0, "min_p": 0.05,
     "n": 2, "seed": 3, "logprobs": 1, "skip_special_tokens": False},
]
LORA_DTYPE = "float32"


QUANTIZATIONS = [None, "fp8"] + (["int8"] if DEVICE != "cuda" else [])


def run_cli(tmp_path, quantization):
    inp, out = tmp_path / "in.jsonl", tmp_path / "out.jsonl"
    inp.write_text("".join(json.dumps(r) + "\n" for r in REQUESTS))
    quant = ["--quantization", quantization] if quantization else []
    subprocess.run([QUIVER_BINARY, "generate", "--model", BASE, "--lora", f"sql={SQL}", "--lora", f"pirate={PIRATE}",
                    "--max-loras", "2", "--max-lora-rank", "16", "--lora-dtype", LORA_DTYPE, "--device", DEVICE,
                    *quant, "--input", str(inp), "--output", str(out)], check=True, capture_output=True)
    return {j["id"]: j for j in map(json.loads, out.read_text().splitlines())}


def run_python(quantization):
    engine = LLMEngine.from_engine_args(EngineArgs(model=BASE, enable_lora=True, max_loras=2, max_lora_rank=16,
                                                   lora_dtype=LORA_DTYPE, device=DEVICE, quantization=quantization))
    loras = {"sql": sql_lora(), "pirate": pirate_lora(), None: None}
    for r in REQUESTS:
        fields = {k: v for k, v in r.items() if k not in ("id", "prompt", "prompt_token_ids", "lora")}
        prompt = r["prompt"] if "prompt" in r else {"prompt_token_ids": r["prompt_token_ids"]}
        engine.add_request(r["id"], prompt, SamplingParams(**fields), lora_request=loras[r["lora"]])
    return run_to_completion(engine)


def assert_logprobs_match(cli_dicts, py_dicts):
    assert len(cli_dicts) == len(py_dicts)
    for c, p in zip(cli_dicts, py_dicts):
        if c is None:
            assert p is None
            continue
        assert sorted(int(k) for k in c) == sorted(p)
        for k, v in c.items():
            assert abs(p[int(k)].logprob - v) <= 1e-6


@pytest.fixture(scope="module", params=QUANTIZATIONS)
def both(request, tmp_path_factory):
    return run_cli(tmp_path_factory.mktemp("cli"), request.param), run_python(request.param)


@pytest.mark.parametrize("rid", [r["id"] for r in REQUESTS])
def test_same_tokens_text_and_logprobs(both, rid):
    cli, py = both
    c, p = cli[rid], py[rid]
    assert "error" not in c
    completions = c.get("outputs", [c])
    assert len(p.outputs) == len(completions)
    for want, out in zip(completions, p.outputs):
        assert out.token_ids == want["token_ids"]
        assert out.text == want["text"]
        assert out.finish_reason == want["finish_reason"]
        assert_logprobs_match(want["logprobs"], out.logprobs)
        assert out.cumulative_logprob == pytest.approx(sum(d[t].logprob for d, t in zip(out.logprobs, out.token_ids)))
    if "prompt_logprobs" in c:
        assert_logprobs_match(c["prompt_logprobs"], p.prompt_logprobs)
    else:
        assert p.prompt_logprobs is None


def test_the_requests_do_what_they_ask(both):
    _, py = both
    assert py["sql"].outputs[0].text.strip().startswith("SELECT icao FROM table_name_74")
    assert py["base-sql"].outputs[0].text != py["sql"].outputs[0].text
    assert py["stop-included"].outputs[0].text == " SELECT icao FROM"
    assert 223 not in py["penalties"].outputs[0].token_ids, "a -100 bias bans the space token"
    assert py["n2"].outputs[0].token_ids != py["n2"].outputs[1].token_ids
