"""vLLM's names, module paths and reprs, so a vLLM script needs only its imports changed."""

import importlib
import inspect
from pathlib import Path

import quiver
from quiver import CompletionOutput, EngineArgs, LLM, LLMEngine, Logprob, RequestOutput, SamplingParams
from quiver.lora.request import LoRARequest


def test_vllm_module_paths():
    for module, name in [("quiver.engine.arg_utils", "EngineArgs"), ("quiver.engine.llm_engine", "LLMEngine"),
                         ("quiver.entrypoints.llm", "LLM"), ("quiver.outputs", "RequestOutput"),
                         ("quiver.outputs", "CompletionOutput"), ("quiver.sampling_params", "SamplingParams"),
                         ("quiver.lora.request", "LoRARequest"), ("quiver.logprobs", "Logprob")]:
        assert getattr(importlib.import_module(module), name) is getattr(quiver, name, LoRARequest)


def test_signatures_have_vllm_keywords():
    assert list(inspect.signature(LLMEngine.add_request).parameters)[:6] == [
        "self", "request_id", "prompt", "params", "arrival_time", "lora_request"]
    gen = inspect.signature(LLM.generate).parameters
    assert list(gen)[:3] == ["self", "prompts", "sampling_params"]
    assert gen["use_tqdm"].default is True and gen["lora_request"].default is None
    fields = set(inspect.signature(EngineArgs).parameters)
    assert {"model", "enable_lora", "max_loras", "max_lora_rank", "max_cpu_loras", "lora_dtype", "max_num_seqs",
            "max_num_batched_tokens", "max_model_len", "block_size", "enable_prefix_caching", "enforce_eager",
            "kv_cache_dtype", "dtype", "device", "seed", "tensor_parallel_size"} <= fields


def test_reprs():
    lp = Logprob(logprob=-0.25, rank=1, decoded_token=" SELECT")
    assert repr(lp) == "Logprob(logprob=-0.25, rank=1, decoded_token=' SELECT')"
    c = CompletionOutput(index=0, text=" SELECT", token_ids=[7], cumulative_logprob=-0.25, logprobs=[{7: lp}],
                         finish_reason="length", stop_reason=None)
    assert repr(c) == ("CompletionOutput(index=0, text=' SELECT', token_ids=[7], cumulative_logprob=-0.25, "
                       "logprobs=[{7: Logprob(logprob=-0.25, rank=1, decoded_token=' SELECT')}], "
                       "finish_reason=length, stop_reason=None)")
    r = RequestOutput(request_id="0", prompt="q", prompt_token_ids=[0, 5], prompt_logprobs=None, outputs=[c],
                      finished=True)
    assert repr(r).startswith("RequestOutput(request_id=0, prompt='q', prompt_token_ids=[0, 5], encoder_prompt=None, ")
    assert "outputs=[CompletionOutput(index=0, " in repr(r) and "finished=True" in repr(r)
    assert c.finished() and not CompletionOutput(0, "", [], None, None).finished()


def test_live_output_reprs(llm):
    out = llm.generate("[user] Tell me a fortune. [/user] [assistant]",
                       SamplingParams(temperature=0, max_tokens=2, logprobs=0), use_tqdm=False)[0]
    assert repr(out).startswith(f"RequestOutput(request_id={out.request_id}, prompt='[user] Tell me a fortune.")
    assert "Logprob(logprob=-" in repr(out) and "rank=" in repr(out) and "decoded_token='" in repr(out)


def test_docstrings_and_type_stub():
    for obj in (quiver, LLM, LLM.generate, LLM.chat, LLMEngine, LLMEngine.add_request, LLMEngine.step, EngineArgs,
                SamplingParams, RequestOutput, CompletionOutput, Logprob, LoRARequest):
        assert (obj.__doc__ or "").strip(), obj
    package = Path(quiver.__file__).parent
    stub = (package / "_quiver.pyi").read_text()
    native = importlib.import_module("quiver._quiver")
    for name in ("Engine", "EngineArgs", "SamplingParams", "LoRARequest", "RequestOutput", "StepStats"):
        assert f"class {name}" in stub and hasattr(native, name)
    assert (package / "py.typed").exists()
