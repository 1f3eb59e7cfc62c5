# Type hints for the native extension (python/bindings/*.cc). Users import the classes of
# the quiver package instead; these are the C++ engine's own structs.
from typing import Dict, List, Optional, Tuple, Union

has_cuda: bool

class EngineArgs:
    model: str
    tokenizer: str
    load_format: str
    dtype: str
    device: str
    threads: int
    tensor_parallel_size: int
    seed: int
    kv_cache_dtype: str
    matmul_precision: str
    quantization: str
    enable_lora: bool
    max_loras: int
    max_lora_rank: int
    max_cpu_loras: int
    lora_extra_vocab_size: int
    max_lora_vocab_rows: int
    lora_dtype: str
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    block_size: int
    num_kv_blocks: int
    kv_cache_memory: str
    gpu_memory_utilization: float
    max_logprobs: int
    enable_prefix_caching: bool
    scheduling_policy: str
    enforce_eager: bool
    trace: bool
    def __init__(self) -> None: ...

class StructuredOutputSpec:
    @property
    def kind(self) -> str: ...  # "none", "json", "json_object", "regex" or "choice"
    @property
    def json_schema(self) -> str: ...
    @property
    def regex(self) -> str: ...
    @property
    def choice(self) -> List[str]: ...
    def __init__(self) -> None: ...

def structured_spec(body_json: str) -> StructuredOutputSpec: ...
def generation_defaults(setting: str, model_dir: str, override_json: str = "") -> Dict[str, Union[float, int]]: ...

class BeamSearchParams:
    beam_width: int
    max_tokens: int
    ignore_eos: bool
    temperature: float
    length_penalty: float
    logprobs: int
    def __init__(self) -> None: ...

class SamplingParams:
    n: int
    temperature: float
    top_p: float
    top_k: int
    min_p: float
    seed: Optional[int]
    presence_penalty: float
    frequency_penalty: float
    repetition_penalty: float
    logit_bias: List[Tuple[int, float]]
    max_tokens: int
    min_tokens: int
    stop: List[str]
    stop_token_ids: List[int]
    include_stop_str_in_output: bool
    ignore_eos: bool
    logprobs: int
    prompt_logprobs: int
    skip_special_tokens: bool
    spaces_between_special_tokens: bool
    allowed_token_ids: List[int]
    bad_words: List[str]
    truncate_prompt_tokens: Optional[int]
    structured_outputs: StructuredOutputSpec
    def __init__(self) -> None: ...
    def validate(self) -> None: ...

class LoRARequest:
    name: str
    id: int
    path: str
    def __init__(self, name: str, id: int, path: str) -> None: ...

class TokenLogprobs:
    token: int
    logprob: float
    rank: int
    top: List[Tuple[int, float]]

class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    logprobs: List[TokenLogprobs]
    finish_reason: str
    stop_reason: Optional[str]
    num_new_tokens: int
    delta_text: str

class RequestOutput:
    request_id: str
    prompt: str
    prompt_token_ids: List[int]
    prompt_logprobs: List[Optional[TokenLogprobs]]
    outputs: List[CompletionOutput]
    lora_name: str
    finished: bool
    error: str
    first_token_s: float
    num_cached_tokens: int
    finished_s: float

class StepStats:
    step: int
    num_prefill_tokens: int
    num_decode_tokens: int
    num_seqs: int
    adapters: List[str]
    num_running: int
    num_waiting: int
    path: str
    lora_active: bool
    ms: float

class EngineCounters:
    steps: int
    prompt_tokens: int
    generation_tokens: int
    preemptions: int
    requests_finished: int
    prefix_cache_hit_blocks: int
    step_seconds: float

class AdapterInfo:
    name: str
    path: str
    max_rank: int

class AdapterCacheStats:
    num_cached: int
    loads: int

class Tokenizer:
    def encode(self, text: str, add_special_tokens: bool) -> List[int]: ...
    def decode(self, ids: List[int], skip_special_tokens: bool) -> str: ...
    def apply_chat_template(self, messages_json: str, add_generation_prompt: bool, template_source: str,
                            variables_json: str, continue_final_message: bool = False,
                            tool_arguments_as_objects: bool = False) -> str: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def identity(self) -> int: ...

class Engine:
    def __init__(self, args: EngineArgs) -> None: ...
    def add_request(self, request_id: str, text: Optional[str], token_ids: List[int], params: SamplingParams,
                    lora: Optional[LoRARequest], priority: int = 0,
                    cache_salt: Optional[str] = None) -> Optional[Tokenizer]: ...
    def add_beam_search(self, request_id: str, text: Optional[str], token_ids: List[int], params: BeamSearchParams,
                        lora: Optional[LoRARequest], cache_salt: Optional[str] = None) -> Optional[Tokenizer]: ...
    def step(self) -> List[RequestOutput]: ...
    def step_finished(self) -> List[RequestOutput]: ...
    def abort_request(self, request_id: str) -> bool: ...
    def has_unfinished_requests(self) -> bool: ...
    def reset_prefix_cache(self) -> bool: ...
    def num_unfinished_requests(self) -> int: ...
    def last_step(self) -> StepStats: ...
    def counters(self) -> EngineCounters: ...
    def list_loras(self) -> List[AdapterInfo]: ...
    def add_lora(self, name: str, path: str) -> None: ...
    def remove_lora(self, name: str) -> None: ...
    def lora_cache_stats(self) -> AdapterCacheStats: ...
    def tokenizer(self, lora: Optional[LoRARequest]) -> Optional[Tokenizer]: ...
    @property
    def max_model_len(self) -> int: ...
    @property
    def eos_token_ids(self) -> List[int]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def device(self) -> str: ...
    @property
    def args(self) -> EngineArgs: ...
