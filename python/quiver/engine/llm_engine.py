"""LLMEngine: vLLM's step-by-step offline engine over quiver's C++ LLMEngine.

add_request() queues a request with its own SamplingParams and optional LoRARequest;
each step() runs one batch (prefills and decodes of any mix of adapters, together) with
the GIL released, and returns a RequestOutput for every request that progressed."""

from typing import Any, Dict, Iterable, List, Optional, Set, Tuple, Union

from .. import _quiver
from .._checks import check_int
from ..lora.request import LoRARequest
from ..outputs import RequestOutput
from ..sampling_params import BeamSearchParams, RequestOutputKind, SamplingParams
from ..tokenizer import Tokenizer
from .arg_utils import EngineArgs
from .output_builder import OutputBuilder, RequestInfo

PromptType = Union[str, Dict[str, Any]]


class LLMEngine:
    """Build one with LLMEngine.from_engine_args(EngineArgs(model=...)).

    Errors in a request (bad parameters, an adapter that does not load, a prompt too long)
    raise ValueError from add_request and leave every other request running."""

    def __init__(self, engine_args: EngineArgs) -> None:
        if not isinstance(engine_args, EngineArgs):
            raise TypeError(f"LLMEngine needs an EngineArgs, got {type(engine_args).__name__}")
        self.engine_args = engine_args
        self._native = engine_args.create_native_engine()
        self._requests: Dict[str, RequestInfo] = {}
        # vLLM names adapters by lora_int_id in add_lora/remove_lora/list_loras; the C++
        # engine by name. The id each loaded name came with:
        self._lora_ids: Dict[str, int] = {}
        # get_tokenizer's results by adapter name (None: the base model), kept while the
        # engine still hands out the same tokenizer for that name.
        self._tokenizers: Dict[Optional[str], Tokenizer] = {}
        self._builder = OutputBuilder()

    @classmethod
    def from_engine_args(cls, engine_args: EngineArgs, usage_context: Any = None) -> "LLMEngine":
        return cls(engine_args)

    # ---- requests -------------------------------------------------------------------------

    def add_request(self, request_id: str, prompt: PromptType, params: SamplingParams,
                    arrival_time: Optional[float] = None, lora_request: Optional[LoRARequest] = None,
                    priority: int = 0) -> None:
        """Queues a request. prompt is text or {"prompt": text} / {"prompt_token_ids": [...]},
        either with an optional "cache_salt" (its prefix-cache blocks are shared only with
        prompts of the same salt).

        arrival_time is accepted for vLLM's signature; requests are served in the order
        they are added, or by priority (lower first) under EngineArgs(scheduling_policy=
        "priority"). The adapter of lora_request is read from disk on first use."""
        if not isinstance(request_id, str):
            raise TypeError(f"add_request: request_id must be a str, got {type(request_id).__name__}")
        text, token_ids, cache_salt = _split_prompt(prompt)
        self._add(request_id, text, token_ids, params, lora_request, text, priority, cache_salt)

    def _add(self, request_id: str, text: Optional[str], token_ids: List[int], params: SamplingParams,
             lora_request: Optional[LoRARequest], prompt_text: Optional[str], priority: int = 0,
             cache_salt: Optional[str] = None) -> None:
        """text goes to the engine's tokenizer; token_ids are used as given when text is None.
        prompt_text is what the RequestOutput reports as the prompt."""
        check_int("add_request", "priority", priority)
        if not isinstance(params, SamplingParams):
            raise TypeError(f"add_request: params must be a SamplingParams, got {type(params).__name__}")
        if lora_request is not None and not isinstance(lora_request, LoRARequest):
            raise TypeError(f"add_request: lora_request must be a LoRARequest or None, got {type(lora_request).__name__}")
        if request_id in self._requests:
            raise ValueError(f"add_request: request id '{request_id}' is already in use")
        max_tokens = params.max_tokens
        if max_tokens is None:
            # vLLM's max_tokens=None: as many as the context leaves after the prompt.
            if text is not None:
                token_ids, text = self.get_tokenizer(lora_request).encode(text), None
            kept = len(token_ids)
            if params.truncate_prompt_tokens is not None:
                cut = params.truncate_prompt_tokens
                kept = min(kept, self._native.max_model_len if cut == -1 else cut)
            max_tokens = max(1, self._native.max_model_len - kept)
        lora = None
        if lora_request is not None:
            lora = _native_lora(lora_request)
        native_tokenizer = self._native.add_request(request_id, text, token_ids, params._to_native(max_tokens), lora,
                                                    priority, cache_salt)
        tokenizer = self._cached_tokenizer(None if lora_request is None else lora_request.lora_name, native_tokenizer)
        self._requests[request_id] = RequestInfo(params, lora_request, prompt_text, tokenizer)
        if lora_request is not None:
            self._lora_ids.setdefault(lora_request.lora_name, lora_request.lora_int_id)

    def _add_beam_search(self, request_id: str, text: Optional[str], token_ids: List[int], params: BeamSearchParams,
                         lora_request: Optional[LoRARequest], cache_salt: Optional[str]) -> None:
        """One prompt's beam search (LLM.beam_search): its RequestOutput, when the search
        ends, has the best beams as outputs, with their logprobs."""
        if request_id in self._requests:
            raise ValueError(f"beam_search: request id '{request_id}' is already in use")
        native = _quiver.BeamSearchParams()
        native.beam_width, native.max_tokens, native.ignore_eos = params.beam_width, params.max_tokens, params.ignore_eos
        native.temperature, native.length_penalty = params.temperature, params.length_penalty
        native.logprobs = 2 * params.beam_width  # every candidate, as vLLM's beams carry them
        lora = None if lora_request is None else _native_lora(lora_request)
        native_tokenizer = self._native.add_beam_search(request_id, text, token_ids, native, lora, cache_salt)
        tokenizer = self._cached_tokenizer(None if lora_request is None else lora_request.lora_name, native_tokenizer)
        # How the outputs are built: logprob dicts and cumulative logprobs, as a request with logprobs.
        shape = SamplingParams(logprobs=2 * params.beam_width, max_tokens=params.max_tokens)
        self._requests[request_id] = RequestInfo(shape, lora_request, text, tokenizer)

    def abort_request(self, request_id: Union[str, Iterable[str]]) -> None:
        """Finishes the request(s) with finish_reason "abort"; the next step() reports them.
        Unknown ids are ignored, as in vLLM."""
        ids = [request_id] if isinstance(request_id, str) else list(request_id)
        for rid in ids:
            self._native.abort_request(rid)

    # ---- stepping -------------------------------------------------------------------------

    def step(self) -> List[RequestOutput]:
        """Runs one engine step; returns the requests that progressed (finished ones last
        appear here with finished=True), each as its SamplingParams.output_kind asks: whole
        so far, this step's delta, or only once finished."""
        outputs = []
        for raw in self._native.step():
            info = self._requests[raw.request_id]
            if raw.finished:
                del self._requests[raw.request_id]
            elif info.params.output_kind == RequestOutputKind.FINAL_ONLY:
                continue
            outputs.append(self._builder.build(raw, info))
        return outputs

    def _step_finished(self) -> List[RequestOutput]:
        """step() converting only the requests that finished (LLM.generate's loop)."""
        return [self._builder.build(raw, self._requests.pop(raw.request_id), whole=True)
                for raw in self._native.step_finished()]

    def reset_prefix_cache(self, device: Any = None) -> bool:
        """vLLM's: the prefix cache forgets every block (after new weights, or between benchmark
        runs). False, with nothing changed, while requests hold blocks."""
        if device is not None:
            raise ValueError("reset_prefix_cache: device is not supported by quiver (one cache per engine)")
        return self._native.reset_prefix_cache()

    def has_unfinished_requests(self) -> bool:
        return self._native.has_unfinished_requests()

    def get_num_unfinished_requests(self) -> int:
        return self._native.num_unfinished_requests()

    # ---- introspection (quiver's additions) ----------------------------------------------

    @property
    def device(self) -> str:
        """The backend the engine runs on, e.g. "cpu" or "cuda"."""
        return self._native.device

    @property
    def max_model_len(self) -> int:
        return self._native.max_model_len

    def last_step_stats(self) -> Any:
        """The latest step: num_seqs, adapters batched together, prefill/decode tokens, path."""
        return self._native.last_step()

    def get_counters(self) -> Any:
        """Totals since start: steps, prompt_tokens, generation_tokens, preemptions, ..."""
        return self._native.counters()

    def lora_cache_stats(self) -> Any:
        """The host adapter LRU: num_cached adapters, and loads (reads from disk) so far."""
        return self._native.lora_cache_stats()

    # ---- adapters, as vLLM's LLMEngine manages them --------------------------------------

    def add_lora(self, lora_request: LoRARequest) -> bool:
        """Loads the adapter now instead of on its first request. False when an adapter of
        that name is already loaded; ValueError when it does not load."""
        if not isinstance(lora_request, LoRARequest):
            raise TypeError(f"add_lora: needs a LoRARequest, got {type(lora_request).__name__}")
        if lora_request.lora_name in self._loaded_names():
            return False
        self._native.add_lora(lora_request.lora_name, lora_request.lora_path)
        self._lora_ids[lora_request.lora_name] = lora_request.lora_int_id
        return True

    def remove_lora(self, lora_id: int) -> bool:
        """Forgets the adapter with this lora_int_id (requests already running keep it).
        False when no loaded adapter has that id."""
        for name in self._loaded_names():
            if self._lora_ids.get(name) == lora_id:
                self._native.remove_lora(name)
                del self._lora_ids[name]
                self._tokenizers.pop(name, None)
                return True
        return False

    def list_loras(self) -> Set[int]:
        """The lora_int_ids of the adapters loaded so far."""
        return {self._lora_ids[name] for name in self._loaded_names() if name in self._lora_ids}

    def _loaded_names(self) -> List[str]:
        return [a.name for a in self._native.list_loras()]

    def get_tokenizer(self, lora_request: Optional[LoRARequest] = None) -> Tokenizer:
        """The tokenizer of requests with lora_request (the model's without one): encode,
        decode, apply_chat_template. An adapter whose folder has tokenizer files has its own
        (its added tokens, its chat template); others use the model's. An adapter named by
        path is registered here if it is not yet, as add_request would."""
        if lora_request is not None and not isinstance(lora_request, LoRARequest):
            raise TypeError(f"get_tokenizer: lora_request must be a LoRARequest or None, got {type(lora_request).__name__}")
        native = self._native.tokenizer(None if lora_request is None else _native_lora(lora_request))
        return self._cached_tokenizer(None if lora_request is None else lora_request.lora_name, native)

    def _cached_tokenizer(self, name: Optional[str], native: Any) -> Tokenizer:
        """The Tokenizer of adapter `name` (None: the model) around the native handle, the same
        object while the engine hands out the same tokenizer for that name."""
        cached = self._tokenizers.get(name)
        if cached is not None and cached.identity == (None if native is None else native.identity):
            return cached
        tokenizer = Tokenizer(native, f"the model folder '{self.engine_args.model}' has no tokenizer.json")
        self._tokenizers[name] = tokenizer
        return tokenizer


def _native_lora(r: LoRARequest) -> Any:
    return _quiver.LoRARequest(r.lora_name, r.lora_int_id, r.lora_path)


def _split_prompt(prompt: PromptType) -> Tuple[Optional[str], List[int], Optional[str]]:
    """(text, token_ids, cache_salt) from vLLM's prompt forms: a str, TextPrompt or TokensPrompt."""
    if isinstance(prompt, str):
        return prompt, [], None
    if isinstance(prompt, dict):
        unknown = set(prompt) - {"prompt", "prompt_token_ids", "cache_salt"}
        if unknown:
            raise ValueError(f"prompt: unsupported keys {sorted(unknown)} "
                             "(quiver takes 'prompt' or 'prompt_token_ids', and 'cache_salt')")
        cache_salt = prompt.get("cache_salt")
        if cache_salt is not None and (not isinstance(cache_salt, str) or not cache_salt):
            raise ValueError("prompt['cache_salt'] must be a non-empty str")
        if ("prompt" in prompt) == ("prompt_token_ids" in prompt):
            raise ValueError("prompt: give exactly one of 'prompt' (text) or 'prompt_token_ids'")
        if "prompt" in prompt:
            if not isinstance(prompt["prompt"], str):
                raise TypeError("prompt['prompt'] must be a str")
            return prompt["prompt"], [], cache_salt
        ids = prompt["prompt_token_ids"]
        if not isinstance(ids, (list, tuple)) or not all(isinstance(t, int) and not isinstance(t, bool) for t in ids):
            raise TypeError("prompt['prompt_token_ids'] must be a list of ints")
        if any(t < 0 or t >= 2**31 for t in ids):
            raise ValueError("prompt['prompt_token_ids'] has an id outside [0, 2**31)")
        return None, list(ids), cache_salt
    raise TypeError(f"prompt must be a str or a dict with 'prompt' or 'prompt_token_ids', got {type(prompt).__name__}")
