"""EngineArgs: everything that configures an engine, with vLLM's keyword names and
defaults (None = the engine's choice, as in vLLM)."""

import dataclasses
import json
import os
from dataclasses import dataclass
from typing import Any, Dict, Optional

from .. import _quiver
from .._checks import check_bool, check_int, check_str

_DEVICES = ("auto", "cpu", "cuda", "ref")


@dataclass
class EngineArgs:
    """vLLM's EngineArgs for the knobs quiver has; an unknown keyword is a TypeError.

    device="auto" takes the GPU when this build has CUDA and one is present, else the CPU.
    generation_config ("auto": the model folder's generation_config.json, "vllm": none, or a
    folder holding one) and override_generation_config (fields over it) give the sampling
    defaults LLM.get_default_sampling_params() returns, as in vLLM.
    The last four fields are quiver's own: weights from safetensors or random ("dummy"),
    CPU threads (0 = all cores), a KV cache budget such as "4GiB", and a per-step trace.
    trust_remote_code and enable_chunked_prefill are accepted for vLLM's scripts: quiver
    runs no code from a model folder, and always splits long prompts across steps (False
    is refused)."""

    model: str
    tokenizer: Optional[str] = None
    trust_remote_code: bool = False
    dtype: str = "auto"
    seed: Optional[int] = 0
    max_model_len: Optional[int] = None
    block_size: Optional[int] = None
    enable_prefix_caching: Optional[bool] = None
    scheduling_policy: str = "fcfs"
    enforce_eager: bool = False
    max_num_seqs: Optional[int] = None
    max_num_batched_tokens: Optional[int] = None
    enable_chunked_prefill: Optional[bool] = None
    max_logprobs: int = 20
    tensor_parallel_size: int = 1
    enable_lora: bool = False
    max_loras: int = 1
    max_lora_rank: int = 16
    max_cpu_loras: Optional[int] = None
    lora_extra_vocab_size: int = 256
    max_lora_vocab_rows: int = 256
    lora_dtype: str = "auto"
    kv_cache_dtype: str = "auto"
    quantization: Optional[str] = None
    device: str = "auto"
    num_gpu_blocks_override: Optional[int] = None
    load_format: str = "auto"
    threads: int = 0
    kv_cache_memory: Optional[str] = None
    gpu_memory_utilization: float = 0.9
    generation_config: str = "auto"
    override_generation_config: Optional[Dict[str, Any]] = None
    trace: bool = False

    def __post_init__(self) -> None:
        o = "EngineArgs"
        check_str(o, "model", self.model)
        if not self.model:
            raise ValueError("EngineArgs.model must name a Hugging Face model folder")
        check_str(o, "tokenizer", self.tokenizer, optional=True)
        check_bool(o, "trust_remote_code", self.trust_remote_code)
        check_str(o, "dtype", self.dtype)
        check_int(o, "seed", self.seed, optional=True, minimum=0)
        for name in ("max_model_len", "block_size", "max_num_seqs", "max_num_batched_tokens",
                     "max_cpu_loras", "num_gpu_blocks_override"):
            check_int(o, name, getattr(self, name), optional=True, minimum=1)
        check_bool(o, "enable_prefix_caching", self.enable_prefix_caching, optional=True)
        check_str(o, "scheduling_policy", self.scheduling_policy, choices=("fcfs", "priority"))
        check_bool(o, "enforce_eager", self.enforce_eager)
        check_bool(o, "enable_chunked_prefill", self.enable_chunked_prefill, optional=True)
        if self.enable_chunked_prefill is False:
            raise ValueError("EngineArgs.enable_chunked_prefill=False: quiver always splits long prompts across "
                             "steps (max_num_batched_tokens sets how many tokens a step takes)")
        check_int(o, "max_logprobs", self.max_logprobs, minimum=0)
        check_int(o, "tensor_parallel_size", self.tensor_parallel_size, minimum=1)
        check_bool(o, "enable_lora", self.enable_lora)
        check_int(o, "max_loras", self.max_loras, minimum=1)
        check_int(o, "max_lora_rank", self.max_lora_rank, minimum=1)
        check_int(o, "lora_extra_vocab_size", self.lora_extra_vocab_size, minimum=0)
        check_int(o, "max_lora_vocab_rows", self.max_lora_vocab_rows, minimum=0)
        check_str(o, "lora_dtype", self.lora_dtype)
        check_str(o, "kv_cache_dtype", self.kv_cache_dtype)
        check_str(o, "quantization", self.quantization, optional=True)
        check_str(o, "device", self.device, choices=_DEVICES)
        check_str(o, "load_format", self.load_format)
        check_int(o, "threads", self.threads, minimum=0)
        check_str(o, "kv_cache_memory", self.kv_cache_memory, optional=True)
        if (isinstance(self.gpu_memory_utilization, bool) or not isinstance(self.gpu_memory_utilization, (int, float))
                or not 0 < self.gpu_memory_utilization <= 1):
            raise ValueError(f"EngineArgs.gpu_memory_utilization must be a number in (0, 1], "
                             f"got {self.gpu_memory_utilization!r}")
        check_str(o, "generation_config", self.generation_config)
        if not self.generation_config:
            raise ValueError('EngineArgs.generation_config must be "auto", "vllm" or a folder')
        if self.override_generation_config is not None and not isinstance(self.override_generation_config, dict):
            raise TypeError(f"EngineArgs.override_generation_config must be a dict or None, "
                            f"got {type(self.override_generation_config).__name__}")
        check_bool(o, "trace", self.trace)
        if self.max_cpu_loras is not None and self.max_cpu_loras < self.max_loras:
            raise ValueError(f"EngineArgs.max_cpu_loras ({self.max_cpu_loras}) must be >= max_loras ({self.max_loras})")

    def to_native(self, device: str) -> Any:
        """The C++ EngineArgs for one concrete device (cpu, cuda or ref)."""
        a = _quiver.EngineArgs()
        a.model = self.model
        a.tokenizer = self.tokenizer or ""
        a.dtype = self.dtype
        a.device = device
        # vLLM's seed=None means "not reproducible"; the C++ engine always takes one.
        a.seed = self.seed if self.seed is not None else int.from_bytes(os.urandom(8), "little")
        a.max_model_len = self.max_model_len or 0
        if self.block_size is not None:
            a.block_size = self.block_size
        if self.enable_prefix_caching is not None:
            a.enable_prefix_caching = self.enable_prefix_caching
        a.scheduling_policy = self.scheduling_policy
        a.enforce_eager = self.enforce_eager
        if self.max_num_seqs is not None:
            a.max_num_seqs = self.max_num_seqs
        a.max_num_batched_tokens = self.max_num_batched_tokens or 0
        a.max_logprobs = self.max_logprobs
        a.tensor_parallel_size = self.tensor_parallel_size
        a.enable_lora = self.enable_lora
        a.max_loras = self.max_loras
        a.max_lora_rank = self.max_lora_rank
        a.max_cpu_loras = self.max_cpu_loras or 0
        a.lora_extra_vocab_size = self.lora_extra_vocab_size
        a.max_lora_vocab_rows = self.max_lora_vocab_rows
        a.lora_dtype = self.lora_dtype
        a.kv_cache_dtype = self.kv_cache_dtype
        a.quantization = self.quantization or ""
        a.num_kv_blocks = self.num_gpu_blocks_override or 0
        a.load_format = self.load_format
        a.threads = self.threads
        a.kv_cache_memory = self.kv_cache_memory or ""
        a.gpu_memory_utilization = float(self.gpu_memory_utilization)
        a.trace = self.trace
        return a

    def create_native_engine(self) -> Any:
        """A started native engine; ValueError with the engine's message when it cannot start."""
        if self.device != "auto":
            return _quiver.Engine(self.to_native(self.device))
        if _quiver.has_cuda:
            try:
                return _quiver.Engine(self.to_native("cuda"))
            except ValueError as e:
                # No usable GPU: the CPU serves, as vLLM's "auto" falls back. Any other error
                # (a memory plan that does not fit, a bad flag) is the caller's to see.
                if "no CUDA device" not in str(e):
                    raise
        return _quiver.Engine(self.to_native("cpu"))

    def default_sampling_fields(self) -> Dict[str, Any]:
        """SamplingParams keywords from generation_config (the model's generation_config.json
        under "auto") with override_generation_config over them: vLLM's fields, temperature,
        top_p, top_k, min_p, repetition_penalty and max_new_tokens (as max_tokens). ValueError
        names a bad field of the file or of the override, or a folder without the file."""
        over = json.dumps(self.override_generation_config) if self.override_generation_config else ""
        return _quiver.generation_defaults(self.generation_config, self.model, over)

    def replace(self, **changes: Any) -> "EngineArgs":
        return dataclasses.replace(self, **changes)
