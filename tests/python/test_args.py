"""Bad arguments: unknown keywords are TypeErrors, wrong types TypeErrors and values out
of range ValueErrors, each naming the field; the engine itself refuses what it cannot run."""

import pytest

from conftest import BASE, DEVICE, engine_kwargs
from quiver import LLM, EngineArgs, LLMEngine, SamplingParams


def test_unknown_keywords_are_refused():
    with pytest.raises(TypeError, match="max_lora"):
        EngineArgs(model=BASE, max_lora=2)
    with pytest.raises(TypeError, match="temprature"):
        SamplingParams(temprature=0.5)
    with pytest.raises(TypeError, match="gpu_memory_utilisation"):
        LLM(BASE, gpu_memory_utilisation=0.9)
    with pytest.raises(TypeError):
        SamplingParams(1)  # keyword-only, as the fields are many


@pytest.mark.parametrize("kwargs, error, field", [
    (dict(max_loras="2"), TypeError, "EngineArgs.max_loras"),
    (dict(max_loras=0), ValueError, "EngineArgs.max_loras"),
    (dict(enable_lora=1), TypeError, "EngineArgs.enable_lora"),
    (dict(max_num_seqs=0), ValueError, "EngineArgs.max_num_seqs"),
    (dict(block_size=2.0), TypeError, "EngineArgs.block_size"),
    (dict(device="tpu"), ValueError, "EngineArgs.device"),
    (dict(max_cpu_loras=1, max_loras=2), ValueError, "EngineArgs.max_cpu_loras"),
    (dict(seed=-1), ValueError, "EngineArgs.seed"),
    (dict(model=""), ValueError, "EngineArgs.model"),
    (dict(model=None), TypeError, "EngineArgs.model"),
    (dict(quantization=8), TypeError, "EngineArgs.quantization"),
    (dict(tensor_parallel_size=0), ValueError, "EngineArgs.tensor_parallel_size"),
])
def test_engine_args_checks(kwargs, error, field):
    with pytest.raises(error, match=field):
        EngineArgs(**{"model": BASE, **kwargs})


@pytest.mark.parametrize("kwargs, error, field", [
    (dict(max_lora_rank=1000), ValueError, "max-lora-rank must be in"),
    (dict(lora_dtype="int4"), ValueError, "lora-dtype"),
    (dict(kv_cache_dtype="fp4"), ValueError, "kv-cache-dtype"),
    (dict(quantization="gptq"), ValueError, "unknown --quantization 'gptq'"),
    (dict(max_model_len=100000), ValueError, "max_position_embeddings"),
    (dict(model="/nonexistent/model"), ValueError, "/nonexistent/model"),
])
def test_engine_refusals_surface_as_value_errors(kwargs, error, field):
    with pytest.raises(error, match=field):
        LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(**kwargs)))


@pytest.mark.parametrize("kwargs, error, field", [
    (dict(n=0), ValueError, "SamplingParams.n"),
    (dict(n=True), TypeError, "SamplingParams.n"),
    (dict(temperature=-1.0), ValueError, "temperature"),
    (dict(temperature="hot"), TypeError, "SamplingParams.temperature"),
    (dict(top_p=0.0), ValueError, "top_p"),
    (dict(top_k=-2), ValueError, "top_k"),
    (dict(min_p=1.5), ValueError, "min_p"),
    (dict(max_tokens=0), ValueError, "SamplingParams.max_tokens"),
    (dict(min_tokens=5, max_tokens=2), ValueError, "min_tokens"),
    (dict(logprobs=21), ValueError, "logprobs"),
    (dict(prompt_logprobs=-1), ValueError, "SamplingParams.prompt_logprobs"),
    (dict(presence_penalty=3.0), ValueError, "presence_penalty"),
    (dict(repetition_penalty=0.0), ValueError, "repetition_penalty"),
    (dict(stop=[1]), TypeError, "SamplingParams.stop"),
    (dict(stop=[""]), ValueError, "stop strings"),
    (dict(stop_token_ids=["1"]), TypeError, "SamplingParams.stop_token_ids"),
    (dict(seed=2**64), ValueError, "SamplingParams.seed"),
    (dict(logit_bias={"x": 1.0}), TypeError, "logit_bias"),
    (dict(logit_bias={5: 500.0}), ValueError, "logit_bias"),
    (dict(best_of=3), ValueError, "best_of"),
    (dict(bad_words="x"), TypeError, "bad_words"),
    (dict(bad_words=["  "]), ValueError, "bad_words"),
    (dict(allowed_token_ids=[]), ValueError, "allowed_token_ids"),
    (dict(allowed_token_ids=["1"]), TypeError, "allowed_token_ids"),
    (dict(truncate_prompt_tokens=0), ValueError, "truncate_prompt_tokens"),
    (dict(truncate_prompt_tokens=-2), ValueError, "truncate_prompt_tokens"),
    (dict(spaces_between_special_tokens=0), TypeError, "spaces_between_special_tokens"),
])
def test_sampling_params_checks(kwargs, error, field):
    with pytest.raises(error, match=field):
        SamplingParams(**kwargs)


def test_add_request_checks(llm):
    engine = llm.llm_engine
    with pytest.raises(TypeError, match="params must be a SamplingParams"):
        engine.add_request("x", "hi", {"max_tokens": 3})
    with pytest.raises(TypeError, match="request_id must be a str"):
        engine.add_request(1, "hi", SamplingParams())
    with pytest.raises(TypeError, match="lora_request"):
        engine.add_request("x", "hi", SamplingParams(), lora_request="sql")
    with pytest.raises(TypeError, match="prompt must be a str"):
        engine.add_request("x", 42, SamplingParams())
    with pytest.raises(TypeError, match="prompt_token_ids"):
        engine.add_request("x", {"prompt_token_ids": "12"}, SamplingParams())
    with pytest.raises(ValueError, match="--scheduling-policy priority"):
        engine.add_request("x", "hi", SamplingParams(), priority=1)
    with pytest.raises(TypeError, match="priority"):
        engine.add_request("x", "hi", SamplingParams(), priority="1")
    with pytest.raises(ValueError, match="cache_salt"):
        engine.add_request("x", {"prompt": "hi", "cache_salt": ""}, SamplingParams())
    with pytest.raises(ValueError, match="stop_token_ids contains 99999"):
        engine.add_request("x", "hi", SamplingParams(stop_token_ids=[99999]))
    with pytest.raises(ValueError, match="the prompt is empty"):
        engine.add_request("x", {"prompt_token_ids": []}, SamplingParams())
    engine.add_request("dup", "hi", SamplingParams(max_tokens=2))
    with pytest.raises(ValueError, match="'dup' is already in use"):
        engine.add_request("dup", "hi", SamplingParams(max_tokens=2))
    engine.abort_request("dup")
    while engine.has_unfinished_requests():
        engine.step()
    with pytest.raises(TypeError, match="LLMEngine needs an EngineArgs"):
        LLMEngine({"model": BASE})


def test_vllm_keywords_for_tokenizer_logprobs_and_what_quiver_always_does(llm):
    args = EngineArgs(**engine_kwargs(tokenizer=BASE, trust_remote_code=True, enable_chunked_prefill=True,
                                      max_logprobs=1))
    native = args.to_native(DEVICE)
    assert (native.tokenizer, native.max_logprobs) == (BASE, 1)
    assert EngineArgs(**engine_kwargs()).to_native(DEVICE).max_logprobs == 20
    with pytest.raises(ValueError, match="always splits long prompts"):
        EngineArgs(**engine_kwargs(enable_chunked_prefill=False))
    engine = LLMEngine.from_engine_args(args)
    with pytest.raises(ValueError, match=r"logprobs 2 exceeds the engine's max_logprobs \(1\)"):
        engine.add_request("x", "hi", SamplingParams(logprobs=2))
    with pytest.raises(ValueError, match=r"prompt_logprobs 3 exceeds"):
        engine.add_request("x", "hi", SamplingParams(prompt_logprobs=3))
    engine.add_request("ok", "hi", SamplingParams(logprobs=1, max_tokens=2))
    while engine.has_unfinished_requests():
        engine.step()
    with pytest.raises(ValueError, match="--max-logprobs must be in"):
        LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(max_logprobs=21)))
    with pytest.raises(ValueError, match="no tokenizer.json in '/nonexistent'"):
        LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(tokenizer="/nonexistent")))


def test_engine_args_map_to_the_engine(llm):
    args = EngineArgs(**engine_kwargs(max_num_seqs=8, block_size=8, max_model_len=256, enable_prefix_caching=False,
                                      max_cpu_loras=3, num_gpu_blocks_override=64, seed=3))
    native = args.to_native(DEVICE)
    assert (native.max_num_seqs, native.block_size, native.max_model_len) == (8, 8, 256)
    assert (native.enable_prefix_caching, native.max_cpu_loras, native.num_kv_blocks, native.seed) == (False, 3, 64, 3)
    assert (native.enable_lora, native.max_loras, native.max_lora_rank, native.device) == (True, 2, 16, DEVICE)
    assert native.gpu_memory_utilization == pytest.approx(0.9)
    assert EngineArgs(**engine_kwargs(gpu_memory_utilization=0.5)).to_native(DEVICE).gpu_memory_utilization == 0.5
    for bad in (0, 1.5, "0.9", True):
        with pytest.raises(ValueError, match="gpu_memory_utilization must be a number in"):
            EngineArgs(**engine_kwargs(gpu_memory_utilization=bad))
    engine = LLMEngine.from_engine_args(args)
    assert engine.max_model_len == 256
    assert engine.device == DEVICE
    # lora_dtype="auto" is resolved by the engine: the demo model is bf16.
    assert engine._native.args.lora_dtype == "bfloat16"
    more = EngineArgs(**engine_kwargs(lora_dtype="float32", kv_cache_dtype="float32", dtype="float32",
                                      enforce_eager=True, max_num_batched_tokens=512, load_format="dummy"))
    started = LLMEngine.from_engine_args(more)._native.args
    assert (started.lora_dtype, started.kv_cache_dtype, started.dtype) == ("float32", "float32", "float32")
    assert (started.enforce_eager, started.max_num_batched_tokens, started.load_format) == (True, 512, "dummy")
    # vLLM's fp8 cache name reaches the engine; its e5m2 variant, which has no kernels, is refused.
    fp8 = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(kv_cache_dtype="fp8")))
    assert fp8._native.args.kv_cache_dtype == "fp8"
    with pytest.raises(ValueError, match="unknown --kv-cache-dtype 'fp8_e5m2'"):
        LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(kv_cache_dtype="fp8_e5m2")))
    # vLLM's quantization argument: fp8 weights on every backend, int8 on the host backends.
    fp8w = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(quantization="fp8")))
    assert fp8w._native.args.quantization == "fp8"
    if DEVICE != "cuda":
        int8 = LLMEngine.from_engine_args(EngineArgs(**engine_kwargs(quantization="int8")))
        assert int8._native.args.quantization == "int8"
    defaults = EngineArgs(model=BASE)
    assert defaults.quantization is None
    assert (defaults.device, defaults.lora_dtype, defaults.max_loras, defaults.max_lora_rank) == ("auto", "auto", 1, 16)
    assert defaults.replace(max_loras=4).max_loras == 4
